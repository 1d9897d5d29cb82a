/*
 * What the weight sets' trees and tables (mixture.c) and their blocks (mixture_block.c)
 * share: 128-bit integers, the tables' entries, and the binary heaps of the
 * earliest-deadline assignment.
 */
#ifndef SF_PRODUCER_MIXTURE_IMPL_H
#define SF_PRODUCER_MIXTURE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "producer/mixture.h"

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

/* Bytes of a table entry for k sources: an index into `ranked`. */
static inline size_t entry_size(uint32_t k)
{
	return k > 256 ? 2 : 1;
}

/* Entry x of a table `t` of k sources' entries. */
static inline uint32_t entry_at(const void *t, uint32_t k, uint64_t x)
{
	return entry_size(k) == 2 ? ((const uint16_t *)t)[x] : ((const uint8_t *)t)[x];
}

static inline void entry_put(void *t, uint32_t k, uint64_t x, uint32_t a)
{
	if (entry_size(k) == 2)
		((uint16_t *)t)[x] = (uint16_t)a;
	else
		((uint8_t *)t)[x] = (uint8_t)a;
}

/*
 * A table `t` of k sources' entries with their counts every `stride`-th entry (`marks`):
 * sf__mix_since_mark() - how many of entries [0, r) are a; sf__mix_add_since_mark() - adds
 * each source's count among entries [0, r) to counts[ranked[a]].
 */
uint64_t sf__mix_since_mark(const void *t, const uint32_t *marks, uint32_t k, uint32_t stride,
			    uint64_t r, uint32_t a);
void sf__mix_add_since_mark(const void *t, const uint32_t *marks, const uint32_t *ranked,
			    uint32_t k, uint32_t stride, uint64_t r, uint64_t *counts);

/*
 * The stride between the marks (every source's count, 4 bytes each) of a table of `len`
 * entries of k sources that fits `bytes`: SF_MIX_TABLE_STRIDE, doubled up to
 * SF_MIX_TABLE_STRIDE_MAX; 0 where none does.
 */
uint32_t sf__mix_stride(uint64_t len, uint32_t k, uint64_t bytes);

/*
 * The earliest-deadline assignment's state: the sources of weight > 0 in ranked order
 * (heaviest first), each one's count so far and the window of its next sample, and two
 * binary heaps of them: those whose window is open, by deadline, and the others, by
 * opening. (The blocks keep their counts elsewhere and leave w, Q, a, b and count unset.)
 */
struct edf {
	const uint64_t *w; /* weights, in ranked order */
	uint64_t Q, a, b;  /* sigma = a / b */
	uint32_t *count;
	uint64_t *opens, *due;
	uint32_t *ready, *waiting;
	uint32_t n_ready, n_waiting;
};

typedef bool edf_less(const struct edf *e, uint32_t x, uint32_t y);

static inline bool opens_first(const struct edf *e, uint32_t x, uint32_t y)
{
	return e->opens[x] != e->opens[y] ? e->opens[x] < e->opens[y] : x < y;
}

static inline void edf_push(const struct edf *e, uint32_t *h, uint32_t *n, uint32_t x,
			    edf_less *less)
{
	uint32_t i = (*n)++;

	for (; i && less(e, x, h[(i - 1) / 2]); i = (i - 1) / 2)
		h[i] = h[(i - 1) / 2];
	h[i] = x;
}

static inline uint32_t edf_pop(const struct edf *e, uint32_t *h, uint32_t *n, edf_less *less)
{
	uint32_t top = h[0], x = h[--*n], i = 0;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && less(e, h[c + 1], h[c]))
			c++;
		if (!less(e, h[c], x))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = x;
	return top;
}

/*
 * Blocks (mixture_block.c, docs/mixtures.md): sf__mix_block_init() gives set `s`, whose
 * positive weights are `order[0..k)` heaviest first, the block assignment: 0, 1 where its
 * second lightest source is too light for a block of at most SF_MIX_BLOCK_MAX samples or
 * its lightest lighter than 1 / SF_MIX_BLOCK_LIGHT_MAX (nothing changed), or -ENOMEM. Then
 * sf__mix_set_locate() and sf__mix_set_counts() answer from these two.
 */
int sf__mix_block_init(struct sf_mix_set *s, const uint32_t *order, uint32_t k);
uint32_t sf__mix_block_locate(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_index);
void sf__mix_block_counts(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_counts);

#endif
