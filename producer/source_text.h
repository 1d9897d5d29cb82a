/*
 * Raw text sources (.txt and .jsonl, optionally .zst or .gz): their documents, their
 * chunks and per-chunk token counts (built in parallel, cached beside each file by
 * producer/index_cache.c), the chunk-aligned window order, and the per-process token
 * cache that serves rows without re-tokenizing what came before.
 */
#ifndef SF_PRODUCER_SOURCE_TEXT_H
#define SF_PRODUCER_SOURCE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "producer/dataset_impl.h"

struct sf_text_cache;

/* sf__text_add_file - read (and decompress) a text file and cut it into chunks. */
int sf__text_add_file(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      struct sf_err *e);

/*
 * sf__text_add_part - sf__text_add_file() for the documents of the file that start in
 * bytes [lo, hi) (hi may exceed the file: to its end). A file that cannot be entered
 * mid-way (compressed, one document, a separator that overlaps itself) counts as
 * starting at byte 0: all of it when lo is 0, none otherwise. Its chunk counts are
 * neither loaded from nor saved to the index cache unless the range is the whole file.
 */
int sf__text_add_part(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      uint64_t lo, uint64_t hi, struct sf_err *e);

/* sf__text_build_index - load or build the token counts of every chunk, then lay the
 * chunks out in the global stream. */
int sf__text_build_index(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);

/* sf__find_sep - the first occurrence of the m-byte `sep` (m >= 1) in [p, end), or NULL. */
const char *sf__find_sep(const char *p, const char *end, const char *sep, size_t m);

/* sf__text_close - free the text files and chunks of `ds`. */
void sf__text_close(struct sf_dataset *ds);

/*
 * A document walk over one chunk. sf__text_next_doc() returns 1 and the document's bytes
 * (valid until the next call), 0 at the chunk's end, or an error for a bad record when
 * the source's policy is stop; with skip, bad records are passed over and counted in
 * *skipped, the first one's message kept in `why`.
 */
struct sf_doc_walk {
	const struct sf_dataset *ds;
	const struct sf_text_file *file;
	const char *p, *end;
	uint64_t line; /* JSONL only: the line of the next record, for messages */
	char *scratch; /* ds->max_doc_bytes, for unescaped JSON strings */
	uint64_t skipped;
	struct sf_err why;
};

void sf__text_walk_init(struct sf_doc_walk *w, const struct sf_dataset *ds, uint64_t chunk,
			char *scratch);
int sf__text_next_doc(struct sf_doc_walk *w, const char **ret_doc, size_t *ret_len,
		      struct sf_err *e);

/* sf__text_find_chunk - the chunk holding global token offset `off`. */
uint64_t sf__text_find_chunk(const struct sf_dataset *ds, uint64_t off);

/* Per-process cache: see sf__builder_create(). */
int sf__text_cache_create(const struct sf_dataset *ds, struct sf_text_cache **ret_c,
			  struct sf_err *e);
void sf__text_cache_free(struct sf_text_cache *c);
uint64_t sf__text_cache_encoded(const struct sf_text_cache *c);

/*
 * sf__text_sample_offset - windows mode over raw text: the chunks are permuted per epoch,
 * and the windows starting in a chunk are permuted among themselves and taken together,
 * so a chunk is tokenized once for all its windows. *ret_key (when not NULL) receives
 * the chunk's position in the sequence of chunks of all epochs, the placement key of
 * the shared cache.
 */
uint64_t sf__text_sample_offset(struct sf_text_cache *c, uint64_t k, uint64_t *ret_key);

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

/* Shared with dataset.c. */
void sf__dataset_note_skip(struct sf_dataset *ds, const struct sf_err *why);
void sf__dataset_note_skips(struct sf_dataset *ds, const struct sf_err *why, uint64_t n);
int sf__copy_tokens(void *dst, uint32_t dst_width, const void *src, uint32_t src_width, size_t n,
		    size_t *ret_bad);

/* index_cache.c: the per-file cache of chunk token counts. */
uint64_t sf__index_key(const struct sf_dataset *ds, const struct sf_text_file *f);

/*
 * sf__index_dir - where index caches live: $SHMFEED_CACHE_DIR/index, else
 * $XDG_CACHE_HOME/shmfeed/index, else $HOME/.cache/shmfeed/index. Returns 0, or -ENOENT
 * when none of these is set.
 */
int sf__index_dir(char *buf, size_t len);
int sf__index_load(struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t *ret_bytes);
int sf__index_save(const struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t skipped,
		   const char *first_skip, uint64_t *ret_bytes);

#endif
