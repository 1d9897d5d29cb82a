/*
 * Pre-tokenized sources (producer/source/tokens.c): nanoGPT .bin files, llm.c shards and
 * Megatron MMIDIDX .bin/.idx pairs, each a flat token array, and the rows of the token
 * stream they make together.
 */
#ifndef SF_PRODUCER_SOURCE_TOKENS_H
#define SF_PRODUCER_SOURCE_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/errors.h"
#include "producer/source/file.h"

/*
 * One pre-tokenized token array: a nanoGPT file, an llm.c shard, or a Megatron pair. Its
 * bytes are mapped to be read, through the process's file cache (sf__tokens_view()); the
 * pointers below are valid only while sf__token_file_open() checks the file.
 */
struct sf_token_file {
	char *path; /* the .bin file */
	void *map;
	struct sf_file_id id;
	size_t map_len;		     /* bytes of the .bin */
	const unsigned char *tokens; /* first token */
	uint64_t tokens_off;	     /* byte offset of the first token in the .bin */
	uint64_t seq_ptrs_off;	     /* Megatron: byte offsets in the .idx of the arrays */
	uint64_t doc_idx_off;
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

/*
 * sf__token_file_open - open and check the token file at `path` of `format` (a Megatron
 * pair by either name or its prefix). `detected`: the format was found by format auto,
 * not given, and a headerless file that looks like 32-bit tokens is then refused.
 * Returns 0, or an error naming the file and byte.
 */
int sf__token_file_open(struct sf_token_file *f, const char *path, uint32_t format, bool detected,
			struct sf_err *e);

/* sf__token_file_close - free what sf__token_file_open() made. */
void sf__token_file_close(struct sf_token_file *f);

/*
 * sf__token_file_map - map the .bin (idx 0) or the .idx (idx 1) of `f` for a file cache.
 * Fails with SF_E_SOURCE when the file is no longer the one opened.
 */
int sf__token_file_map(const struct sf_token_file *f, int idx, const char **ret_data,
		       size_t *ret_len, size_t *ret_cap, struct sf_err *e);

/* A token file's bytes as this process reads them. */
struct sf_token_view {
	const unsigned char *tokens;   /* first token */
	const unsigned char *seq_ptrs; /* Megatron (when asked for): int64 per sequence */
	const unsigned char *doc_idx;  /* int64 per document, n_docs + 1 */
};

/* sf__token_format_detect - the pre-tokenized format of `path` (by name and magic). */
int sf__token_format_detect(const char *path, uint32_t *ret_format);

struct sf_dataset;

/*
 * sf__tokens_view - the bytes of token file `i` of `ds` (and of its Megatron index with
 * `with_idx`), mapped through ds->token_maps (file 2i: the .bin, 2i + 1: the .idx): valid
 * until the second next call in this process. Returns 0, or the error of mapping them.
 */
int sf__tokens_view(const struct sf_dataset *ds, uint32_t i, int with_idx,
		    struct sf_token_view *ret_v, struct sf_err *e);

/* sf__tokens_find_file - the token file of `ds` holding global offset `off` (< n_tokens). */
uint32_t sf__tokens_find_file(const struct sf_dataset *ds, uint64_t off);

/*
 * sf__tokens_read_row - copy the T+1 tokens at global offset `off` of the pre-tokenized
 * stream of `ds` into `row`, at the job's token width, and their document starts into
 * `starts` (when not NULL). Returns 0, or SF_E_SOURCE naming the file and byte of an id
 * that does not fit the width.
 */
int sf__tokens_read_row(const struct sf_dataset *ds, uint64_t off, unsigned char *row,
			uint32_t *starts, struct sf_err *e);

#endif
