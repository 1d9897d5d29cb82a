/*
 * Hugging Face tokenizer.json files whose model is byte-level BPE: the loader
 * (hf_json.c) turns the file into the tokenizer's internal form, and the encoder
 * (hf_encode.c) reproduces `tokenizers`' Tokenizer.encode(text, add_special_tokens=False)
 * on it: added tokens, normalizer, the pre-tokenizer stages, then BPE that merges by pair
 * rank exactly as the `merges` list orders it. What the loader cannot reproduce exactly it
 * refuses, naming the JSON path of the construct.
 */
#ifndef SF_PRODUCER_TOKENIZER_HF_JSON_H
#define SF_PRODUCER_TOKENIZER_HF_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "producer/tokenizer/tok_impl.h"

/* The kinds of pre-tokenizer stage. */
#define SF_HF_STAGE_PRESET 1 /* a built-in scanner, Isolated, not inverted */
#define SF_HF_STAGE_PCRE   2 /* a Split regex or string */
#define SF_HF_STAGE_DIGITS 3 /* Digits: \p{N} characters, one by one or in runs */
#define SF_HF_STAGE_PREFIX 4 /* ByteLevel's add_prefix_space: a space before each piece */

/* Split behaviours (SplitDelimiterBehavior of `tokenizers`). */
#define SF_HF_ISOLATED	  1
#define SF_HF_REMOVED	  2
#define SF_HF_MERGED_PREV 3
#define SF_HF_MERGED_NEXT 4
#define SF_HF_CONTIGUOUS  5

#define SF_HF_MAX_STAGES 16

struct sf_hf_stage {
	int kind;
	int preset; /* SF_PRETOK_*, for SF_HF_STAGE_PRESET */
	pcre2_code *re, *re_fast; /* re_fast: see sf__pcre_compile_hf() */
	int behavior;
	bool invert;
	bool individual; /* Digits: each digit a piece of its own */
};

/* One slot of the merge table: the pair (left id << 32 | right id), its rank and result. */
struct sf_hf_merge {
	uint64_t key; /* UINT64_MAX: empty */
	uint32_t rank;
	uint32_t id;
};

struct sf_hf_added {
	char *text;
	uint32_t len;
	uint32_t id;
	bool special;
	int bit; /* its bit in an allowed set, or -1 when only SF_TOK_ALLOW_ALL allows it */
};

/*
 * A set of added tokens matched leftmost-longest: tokens of two bytes or more sorted by
 * their bytes and bucketed by the first two, each with the longest other token that is a
 * prefix of it; one-byte tokens by their byte.
 */
struct sf_hf_matcher {
	struct sf_hf_added **tokens; /* sorted by their bytes */
	int32_t *prefix; /* of tokens[i]: the index of its longest proper prefix, or -1 */
	uint32_t n;
	uint32_t *bucket; /* 65537 entries: tokens[bucket[k]..bucket[k + 1]) start with k */
	int32_t single[256];
	uint8_t first[256]; /* 1 when some token starts with the byte */
	bool any;	    /* the set is not empty */
};

struct sf_tok_hf {
	struct sf_hf_merge *merges;
	uint64_t merge_mask;
	struct sf_hf_merge byte_merge[65536]; /* pairs of single bytes, by (b0 << 8 | b1) */
	uint32_t byte_id[256];		      /* the id of each byte's token */
	uint8_t *whole; /* bit per id: BPE of the token's bytes gives the token itself */
	bool ignore_merges;
	bool nfc; /* the normalizer is NFC (else none) */
	struct sf_hf_stage stages[SF_HF_MAX_STAGES];
	unsigned n_stages;
	bool any_fast;	     /* a stage has a re_fast */
	unsigned max_growth; /* ids per input byte at most, less one (add_prefix_space) */
	struct sf_hf_added *added;
	uint32_t n_added;
	struct sf_hf_matcher raw;  /* added tokens with "normalized": false */
	struct sf_hf_matcher norm; /* with "normalized": true */
	/* Decoding: the bytes of ids that are not byte-level tokens (added tokens, others). */
	uint32_t *extra_ids;
	uint32_t *extra_off;
	uint8_t *extra_bytes;
	uint32_t n_extra;
};

/* Per-encoder scratch of the Hugging Face encoder. */
struct sf_hf_scratch {
	uint8_t *prefixed; /* a piece with the prefix space in front */
	size_t prefixed_cap;
	uint8_t *normalized; /* the NFC form of a stretch of text */
	uint32_t *cps;	     /* its code points while it is being made */
	size_t normalized_cap;
	struct sf_hf_part *parts;
	uint64_t *heap;
	size_t parts_cap;
	pcre2_match_data *md;
};

/* hf_json.c (sf__tok_load_hf_json() is in tokenizer.h) */
int sf__tok_load_hf_json_mem(const char *name, const char *text, size_t len,
			     struct sf_tok **ret_tok, struct sf_err *e);
void sf__hf_free(struct sf_tok_hf *hf);

/* hf_encode.c */
struct sf_hf_merge_result {
	uint32_t rank;
	uint32_t id;
};
bool sf__hf_merge_lookup(const struct sf_tok_hf *hf, uint32_t left, uint32_t right,
			 struct sf_hf_merge_result *ret);
int sf__hf_bpe(const struct sf_tok_hf *hf, struct sf_hf_scratch *sc, const uint8_t *piece,
	       size_t len, uint32_t *out, size_t *ret_n);
int sf__hf_scratch_create(const struct sf_tok *tok, struct sf_hf_scratch **ret);
void sf__hf_scratch_free(struct sf_hf_scratch *sc);
int sf__hf_encode(struct sf_tok_encoder *enc, const uint8_t *s, size_t len, uint64_t allowed,
		  size_t *ret_n, struct sf_err *e);
long sf__hf_id_bytes(const struct sf_tok_hf *hf, uint32_t id, const uint8_t **ret);

#endif
