/*
 * Raw text tokenized on demand (producer/text_cache.c): the per-process token cache that
 * serves rows without re-tokenizing what came before, and the cache of tokenized chunks
 * the producers share. The order of the windows is producer/text_order.h's.
 */
#ifndef SF_PRODUCER_TEXT_CACHE_H
#define SF_PRODUCER_TEXT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "producer/dataset_impl.h"

struct sf_text_cache;

/* Per-process cache: see sf__builder_create(). */
int sf__text_cache_create(const struct sf_dataset *ds, struct sf_text_cache **ret_c,
			  struct sf_err *e);
void sf__text_cache_free(struct sf_text_cache *c);
uint64_t sf__text_cache_encoded(const struct sf_text_cache *c);

/*
 * sf__text_work_ahead - tokenize `chunk` into its shared entry at placement `key` when
 * that entry is free (not holding it, nobody filling it): work a later batch needs,
 * done ahead. Returns 1 when it tried (an error is left for the batch that reads the
 * chunk to report), 0 when there was nothing to do.
 */
int sf__text_work_ahead(struct sf_text_cache *c, uint64_t chunk, uint64_t key);

/* sf__text_read_row() found the chunk being tokenized by another producer. */
#define SF_TEXT_DEFERRED 1

/*
 * sf__text_read_row - the T+1 tokens at global offset `off` and their document starts,
 * from this process's last chunk, the shared cache (placement `key`, or the chunk index
 * when key is UINT64_MAX), or tokenized here. When another producer is tokenizing the
 * chunk, returns SF_TEXT_DEFERRED if wait_ns is 0; otherwise waits up to wait_ns for it
 * and then tokenizes locally. Returns 0 when the row is written, or an error.
 */
int sf__text_read_row(struct sf_text_cache *c, uint64_t off, uint64_t key, int64_t wait_ns,
		      unsigned char *row, uint32_t *starts, struct sf_err *e);

/*
 * sf__text_share_create - map the shared chunk cache of `ds` (see producer/chunk_share.h),
 * sized from the batch size, the number of producers and the chunk sizes, and the shared
 * table of chunk heads (one entry per chunk); leaves ds->share or ds->heads NULL when not
 * even two entries fit. Call after the index is built.
 */
int sf__text_share_create(struct sf_dataset *ds, struct sf_err *e);

/* sf__text_encode_chunk - every id of chunk `chunk` (documents each followed by
 * <|endoftext|>) into c's buffer; *ret_ids valid until the next call on `c`. The number
 * of documents and their lengths with the <|endoftext|> go to *ret_n_docs and, when
 * doc_lens is not NULL, doc_lens[]. */
int sf__text_encode_chunk(struct sf_text_cache *c, uint64_t chunk, const uint32_t **ret_ids,
			  uint64_t *ret_n, uint32_t *doc_lens, uint64_t *ret_n_docs,
			  struct sf_err *e);

#endif
