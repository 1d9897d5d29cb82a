/*
 * The windows order of raw text (producer/text_order.c): over a span of chunks (the
 * whole stream of a job, or the chunks of one source of a mixture), the chunks are
 * permuted per epoch and the windows starting in a chunk are permuted among themselves
 * and taken together, so that consecutive samples fall in the same chunk and a chunk is
 * tokenized once for all its windows. Sample j of the span is a pure function of the
 * span and j; an order object only keeps per-process tables that make finding it cheap.
 */
#ifndef SF_PRODUCER_TEXT_ORDER_H
#define SF_PRODUCER_TEXT_ORDER_H

#include <stdint.h>

#include "common/errors.h"

struct sf_dataset;
struct sf_text_order;

/* A span of raw text with an order of its own. */
struct sf_text_span {
	uint64_t first_chunk; /* its chunks: [first_chunk, first_chunk + n_chunks) of ds */
	uint64_t n_chunks;
	uint64_t start;	    /* global offset of its first token */
	uint64_t n_windows; /* its windows per epoch: T+1 tokens at start + w T, w < n_windows */
	uint64_t seed;
};

/*
 * sf__text_order_create - the order of `span` of `ds` (its chunks laid out), with its
 * tables of this process (about 16 bytes per 64 chunks). Returns 0 and *ret_o (free with
 * sf__text_order_free()), or -ENOMEM.
 */
int sf__text_order_create(const struct sf_dataset *ds, const struct sf_text_span *span,
			  struct sf_text_order **ret_o, struct sf_err *e);

/* sf__text_order_free - accepts NULL. */
void sf__text_order_free(struct sf_text_order *o);

/*
 * sf__text_order_offset - the global token offset of sample `j` of the span (any j:
 * epoch j / n_windows, each in its own order). *ret_key (when not NULL) receives the
 * position of the sample's chunk in the sequence of the span's chunks of all epochs,
 * which keeps the chunks that producers need at once apart in the shared cache.
 */
uint64_t sf__text_order_offset(struct sf_text_order *o, uint64_t j, uint64_t *ret_key);

#endif
