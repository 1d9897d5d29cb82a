/*
 * Private layout of a dataset, shared by the files of producer/: the sources of each
 * format (source/), the chunk index of raw text (text_index.c, index_file.c), the
 * on-demand tokenization of raw text (text_cache.c), and the batch builder (dataset.c). Everything
 * in struct sf_dataset is written by sf__dataset_open() in the launcher and only read afterwards,
 * so forked producers share it copy-on-write without ever copying it. The one exception is the
 * memory behind `share`, which is MAP_SHARED and written by the producers on purpose.
 */
#ifndef SF_PRODUCER_DATASET_IMPL_H
#define SF_PRODUCER_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/errors.h"
#include "producer/producer.h"
#include "producer/source/text_file.h"
#include "producer/source/tokens.h"

/*
 * A chunk: consecutive whole documents of one text file, the unit the token-count index
 * counts and producers tokenize. Its token stream is each document's ids followed by
 * <|endoftext|>.
 */
struct sf_chunk {
	uint64_t off;	     /* byte offset in the uncompressed file */
	uint64_t len;	     /* bytes */
	uint64_t start;	     /* global offset of its first token */
	uint64_t first_line; /* 1-based line of its first byte, for messages */
	uint32_t file;	     /* index into sf_dataset.text_files */
	uint32_t n_docs;     /* documents kept (skipped records excluded) */
	uint64_t n_tokens;   /* including one <|endoftext|> per document */
};

/* Raw text chunks aim at this many bytes; a chunk ends at the first document end past it. */
#define SF_CHUNK_BYTES (64u * 1024u)

/*
 * One source of a mixture: its span of the token stream and its own sample order. A
 * source is pre-tokenized files or raw text, not both; a raw text source's chunks are
 * consecutive in ds->chunks and its windows follow producer/text_order.h.
 */
struct sf_mix_source {
	uint64_t start; /* global offset of its first token */
	uint64_t n_tokens;
	uint64_t n_windows; /* its samples per epoch */
	uint64_t seed;	    /* the job's seed mixed with the source's name */
	uint32_t first_token_file, n_token_files;
	uint64_t first_chunk, n_chunks;
	/* Raw text: its index among the raw text sources, which spreads their chunks over
	 * the shared cache (sf__dataset_share_key()); UINT32_MAX: pre-tokenized. */
	uint32_t text_slot;
};

struct sf_tok;
struct sf_chunk_share;
struct sf_mixture;
struct sf_file_cache;

/* The ids a rank reads as int32: those below 2^31. */
#define SF_ID_LIMIT_INT32 0x80000000u

struct sf_dataset {
	/* What the stream depends on, copied from the config. */
	uint32_t batch;	     /* B */
	uint32_t seq_len;    /* T */
	uint32_t world_size; /* W */
	uint32_t rank_base;
	uint32_t local_ranks;
	uint32_t slots_per_rank;
	uint32_t producers;
	uint32_t mode;	     /* SF_SAMPLE_* */
	uint32_t doc_starts; /* per sequence; 0: off */
	uint32_t token_bytes;
	uint32_t checksum;
	uint32_t hugepages;
	uint64_t seed;
	uint64_t epochs; /* 0: unlimited */
	uint64_t config_digest;
	struct sf_source_config *sources; /* borrowed from the config for text parsing */
	uint32_t n_sources;

	/* Pre-tokenized sources, mapped through a per-process file cache as text files are
	 * (below): file 2i is the .bin of token file i, 2i + 1 its Megatron .idx. */
	struct sf_token_file *token_files;
	uint32_t n_token_files;
	struct sf_file_cache *token_maps;

	/* Raw text sources and their chunk index. */
	struct sf_text_file *text_files;
	uint32_t n_text_files;
	uint32_t text_files_cap;
	/* The text files this process has mapped, at most as many as its limits allow: the
	 * pointer is set at open and never changes; the table it points to is per process
	 * (each producer fills its own copy after the fork). */
	struct sf_file_cache *text_maps;
	/* The cached index of each directory of text files (sf_text_file.index), removed
	 * when a chunk is found not to hold what it says; NULL where none was written. */
	char **index_paths;
	uint32_t n_index_paths;
	struct sf_chunk *chunks;
	uint64_t n_chunks;
	uint64_t chunks_cap;
	uint64_t max_chunk_tokens;
	uint64_t max_chunk_docs;
	uint64_t max_doc_bytes; /* longest document or JSON line, sizing the unescape buffer */
	struct sf_tok *tok;
	uint64_t tok_digest;
	/* Tokenized chunks shared by the producers: the pointer is set at open and never
	 * changes; the memory it points to is MAP_SHARED and written by them. */
	struct sf_chunk_share *share;
	/* The head of every chunk (its first whole documents holding T+1 tokens), shared by
	 * the producers the same way, so that a chunk's head is tokenized once, not once for
	 * the chunk and once more as the tail of the chunk before it. NULL: none. */
	struct sf_chunk_share *heads;

	/* The token stream and the sample space. */
	uint32_t eot; /* <|endoftext|> id, or UINT32_MAX when unknown */
	uint32_t bos; /* id put before each raw text document, or UINT32_MAX for none */
	/* Special tokens recognized in raw text (tokenizer.specials): none, or all. */
	uint64_t allowed;
	/* Pre-tokenized ids must be below this: the vocabulary size of the job's encoding
	 * (see load_tokenizer()); for `bytes` or no encoding, SF_ID_LIMIT_INT32 in an arena
	 * of 4-byte tokens and 0 (not checked) in one of uint16. */
	uint32_t id_limit;
	uint64_t n_tokens;
	uint64_t n_windows; /* samples per epoch */
	uint64_t n_steps;   /* steps with data; UINT64_MAX when epochs is 0 */

	/* A mixture (docs/mixtures.md): NULL when the sources form one stream. */
	struct sf_mixture *mix;
	struct sf_mix_source *mix_sources; /* n_sources of them */
	/* Spans of raw text with an order of their own: the raw text sources of a mixture,
	 * or 1 for a raw text stream (0 without raw text). */
	uint32_t n_text_spans;

	struct sf_dataset_stats stats;
	char first_skip[512]; /* message of the first record skipped by policy */
	char first_skip_path[4096]; /* its file, and the file's source */
	uint32_t first_skip_source;
	char note[1024]; /* what the user should hear of the sources, or "" */
};

/* dataset_mixture.c: the dataset's side of a mixture; no-ops without one. */
int sf__dataset_mix_prepare(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);
/* Record source `source`'s files (opened from the given indexes on); a source is either
 * kind, not both. */
int sf__dataset_mix_source_files(struct sf_dataset *ds, const struct sf_config *cfg,
				 uint32_t source, uint32_t first_token_file,
				 uint32_t first_text_file, struct sf_err *e);
/* Lay the sources out in the token stream, in their order: each source's token files,
 * then its chunks (once the chunk index is built). */
void sf__dataset_mix_layout(struct sf_dataset *ds);
int sf__dataset_mix_open(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);
void sf__dataset_mix_close(struct sf_dataset *ds);
/* The source of mixture sample k, and in *ret_j which of the source's samples it is. */
uint32_t sf__dataset_mix_pick(const struct sf_dataset *ds, uint64_t k, uint64_t *ret_j);
/* The global token offset of sample j of source i: pre-tokenized windows, or random
 * offsets of any source (raw text windows are producer/text_order.h's). */
uint64_t sf__dataset_mix_offset(const struct sf_dataset *ds, uint32_t i, uint64_t j);

/*
 * sf__dataset_chunk_end - the end (global offset) of the span of the stream that raw
 * text chunk `chunk` belongs to, which no window starting in it passes: its source's in
 * a mixture, the stream's otherwise.
 */
static inline uint64_t sf__dataset_chunk_end(const struct sf_dataset *ds, uint64_t chunk)
{
	const struct sf_mix_source *s;

	if (!ds->mix_sources)
		return ds->n_tokens;
	s = &ds->mix_sources[ds->text_files[ds->chunks[chunk].file].source];
	return s->start + s->n_tokens;
}

/*
 * sf__dataset_share_key - the placement key in the shared chunk cache of a chunk at
 * `key` in the order of raw text span `slot`: the spans' keys interleaved, so that with a
 * multiple of n_text_spans entries each span has entries of its own.
 */
static inline uint64_t sf__dataset_share_key(const struct sf_dataset *ds, uint32_t slot,
					     uint64_t key)
{
	return key * ds->n_text_spans + slot;
}

/*
 * sf__dataset_note_skips - count `n` records or files skipped by policy in file `path` of
 * source `source`, keeping the message of the first in the order of the files: the
 * first source's, and in it the first file's by name (the order a source lists them
 * in), whatever the order they are met in (a file that cannot be opened is met before
 * the records of those before it); in one file, the first noted.
 */
static inline void sf__dataset_note_skips(struct sf_dataset *ds, uint32_t source, const char *path,
					  const struct sf_err *why, uint64_t n)
{
	if (n && (ds->stats.skipped == 0 || source < ds->first_skip_source ||
		  (source == ds->first_skip_source && strcmp(path, ds->first_skip_path) < 0))) {
		snprintf(ds->first_skip, sizeof(ds->first_skip), "%s", why->msg);
		snprintf(ds->first_skip_path, sizeof(ds->first_skip_path), "%s", path);
		ds->first_skip_source = source;
	}
	ds->stats.skipped += n;
}

static inline void sf__dataset_note_skip(struct sf_dataset *ds, uint32_t source, const char *path,
					 const struct sf_err *why)
{
	sf__dataset_note_skips(ds, source, path, why, 1);
}

#endif
