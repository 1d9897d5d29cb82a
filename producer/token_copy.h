/*
 * Copying token ids between widths (2 or 4 bytes, little-endian), the one conversion
 * every source format and the writer need.
 */
#ifndef SF_PRODUCER_TOKEN_COPY_H
#define SF_PRODUCER_TOKEN_COPY_H

#include <stddef.h>
#include <stdint.h>

/*
 * sf__copy_tokens - copy `n` ids of src_width bytes at `src` to `dst` as dst_width
 * bytes. Returns 0, or SF_E_RANGE with the index of the first id that does not fit
 * 16 bits in *ret_bad (the ids before it are copied).
 */
int sf__copy_tokens(void *dst, uint32_t dst_width, const void *src, uint32_t src_width, size_t n,
		    size_t *ret_bad);

#endif
