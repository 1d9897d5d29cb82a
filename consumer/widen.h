/* Token widening (consumer/widen.c); the public entry is sf_tokens_widen(). */
#ifndef SF_CONSUMER_WIDEN_H
#define SF_CONSUMER_WIDEN_H

#include <stdint.h>

/* sf__widen_valid - 1 when sf_tokens_widen() converts `src_dtype` to `dst_dtype`. */
int sf__widen_valid(uint32_t src_dtype, uint32_t dst_dtype);

#endif
