/*
 * Private layout of a dataset, shared by the files of producer/: the pre-tokenized token
 * files (source_tokens.c), the raw text files and their chunk index (source_text.c,
 * index_cache.c), and the batch builder (dataset.c). Everything in struct sf_dataset is
 * written by sf__dataset_open() in the launcher and only read afterwards, so forked
 * producers share it copy-on-write without ever copying it. The one exception is the
 * memory behind `share`, which is MAP_SHARED and written by the producers on purpose.
 */
#ifndef SF_PRODUCER_DATASET_IMPL_H
#define SF_PRODUCER_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/errors.h"
#include "producer/producer.h"

/*
 * What identifies a source file's contents for the length of a job: taken by fstat() at
 * open and compared with stat() of its path while the job runs (sf__dataset_check_files()),
 * so a file replaced, rewritten or truncated under the job stops it rather than changing
 * its data.
 */
struct sf_file_id {
	uint64_t dev;
	uint64_t ino;
	uint64_t size;
	uint64_t mtime_ns;
};

/* One pre-tokenized token array: a nanoGPT file, an llm.c shard, or a Megatron pair. */
struct sf_token_file {
	char *path; /* the .bin file */
	void *map;  /* read-only mapping of the whole file */
	struct sf_file_id id;
	size_t map_len;
	const unsigned char *tokens; /* first token */
	uint64_t n_tokens;
	uint64_t start;	 /* global offset of the first token */
	uint32_t width;	 /* bytes per token: 2 or 4 */
	uint32_t format; /* SF_FMT_NANOGPT, SF_FMT_LLMC, SF_FMT_MEGATRON */
	/* Megatron only: the index, whose arrays are unaligned and read with memcpy. */
	char *idx_path;
	void *idx_map;
	size_t idx_map_len;
	struct sf_file_id idx_id;
	const unsigned char *seq_ptrs; /* int64 byte offset of each sequence */
	const unsigned char *doc_idx;  /* int64 first sequence of each document, n_docs + 1 */
	uint64_t n_seqs;
	uint64_t n_docs;
};

/* One raw text file, its uncompressed bytes in memory. */
struct sf_text_file {
	char *path;
	const char *data;
	size_t len;
	/* Bytes mapped at data: a file mapping, or anonymous memory after decompression. */
	size_t map_cap;
	uint32_t format;   /* SF_FMT_TEXT or SF_FMT_JSONL */
	uint32_t source;   /* index into sf_dataset.sources */
	uint32_t sep_len;  /* bytes of the source's separator (0: one document per file) */
	uint64_t ident[3]; /* identity for the index cache: size, mtime ns, inode */
	struct sf_file_id id;
	char *index_path; /* the cached index its chunk counts came from; NULL: built here */
	uint32_t partial; /* 1: only some of its documents are read (a tokenize part) */
};

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

/* One source of a mixture: its span of the token stream and its own sample order. */
struct sf_mix_source {
	uint64_t start; /* global offset of its first token */
	uint64_t n_tokens;
	uint64_t n_windows; /* its samples per epoch */
	uint64_t seed;	    /* the job's seed mixed with the source's name */
};

struct sf_tok;
struct sf_chunk_share;
struct sf_mixture;

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

	/* Pre-tokenized sources. */
	struct sf_token_file *token_files;
	uint32_t n_token_files;

	/* Raw text sources and their chunk index. */
	struct sf_text_file *text_files;
	uint32_t n_text_files;
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
	 * (0: not checked, for `bytes` or no encoding; see load_tokenizer()). */
	uint32_t id_limit;
	uint64_t n_tokens;
	uint64_t n_windows; /* samples per epoch */
	uint64_t n_steps;   /* steps with data; UINT64_MAX when epochs is 0 */

	/* A mixture (docs/mixtures.md): NULL when the sources form one stream. */
	struct sf_mixture *mix;
	struct sf_mix_source *mix_sources; /* n_sources of them */

	struct sf_dataset_stats stats;
	char first_skip[512]; /* message of the first record skipped by policy */
};

/* dataset_mixture.c: the dataset's side of a mixture; no-ops without one. */
int sf__dataset_mix_prepare(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);
void sf__dataset_mix_source_span(struct sf_dataset *ds, uint32_t source, uint64_t start);
int sf__dataset_mix_check(const struct sf_dataset *ds, const struct sf_config *cfg,
			  struct sf_err *e);
int sf__dataset_mix_open(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);
void sf__dataset_mix_close(struct sf_dataset *ds);
/* The global token offset of mixture sample k, and its source in *ret_source. */
uint64_t sf__dataset_mix_offset(const struct sf_dataset *ds, uint64_t k, uint32_t *ret_source);

/* source_tokens.c */
void sf__file_id_of(const struct stat *st, struct sf_file_id *ret_id);
int sf__file_id_check(const char *path, const struct sf_file_id *id, struct sf_err *e);
int sf__token_file_open(struct sf_token_file *f, const char *path, uint32_t format,
			struct sf_err *e);
void sf__token_file_close(struct sf_token_file *f);
int sf__token_format_detect(const char *path, uint32_t *ret_format);

#endif
