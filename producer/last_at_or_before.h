/*
 * The last of a sorted array's elements whose key is at or before a value: the lookup
 * of the file, chunk or phase that holds a global offset or step, each array sorted by
 * the uint64_t key of its elements (their first offset or step).
 */
#ifndef SF_PRODUCER_LAST_AT_OR_BEFORE_H
#define SF_PRODUCER_LAST_AT_OR_BEFORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * sf__last_at_or_before - the index of the last of the `n` (> 0) elements of `stride`
 * bytes at `elems`, sorted by the uint64_t key at byte `key_off` of each, whose key is
 * <= x; 0 when none is.
 */
static inline uint64_t sf__last_at_or_before(const void *elems, uint64_t n, size_t stride,
					     size_t key_off, uint64_t x)
{
	const unsigned char *base = (const unsigned char *)elems + key_off;
	uint64_t lo = 0, hi = n - 1;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo + 1) / 2;

		if (*(const uint64_t *)(base + mid * stride) <= x)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

#endif
