/*
 * Internals of the tokenizer shared by its source files and its tests: the layout of a
 * loaded vocabulary and of an encoder, the rank hash table, the pre-tokenizer scanners
 * (hand-written per preset, PCRE2 for anything else) and the two BPE merge loops.
 */
#ifndef SF_PRODUCER_TOKENIZER_TOK_IMPL_H
#define SF_PRODUCER_TOKENIZER_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "producer/tokenizer/tokenizer.h"

/* The kinds of tokenizer. */
#define SF_TOK_BPE   1
#define SF_TOK_BYTES 2
#define SF_TOK_CHAR  3

/* The pre-tokenizers. */
#define SF_PRETOK_R50K	 1
#define SF_PRETOK_CL100K 2
#define SF_PRETOK_O200K	 3
#define SF_PRETOK_PCRE	 4

/* The rank of a byte string that is not in the vocabulary. */
#define SF_RANK_NONE UINT32_MAX

/* Pieces longer than this are merged with the heap rather than tiktoken's quadratic scan. */
#define SF_BPE_SHORT_MAX 64

struct sf_tok_special_entry {
	char *text;
	uint32_t len;
	uint32_t id;
};

/*
 * The mergeable ranks: token bytes by rank (`off`, `bytes`) and an open-addressing table
 * from bytes to rank. A slot is 32 bits, rank + 1 in the low `rank_bits` (0 for an empty
 * slot) and the top bits of the key's hash above, so the table stays small enough for
 * the caches and most misses are settled without touching the token bytes.
 */
struct sf_tok_ranks {
	uint32_t n_ranks; /* largest rank + 1; a rank absent from the file has an empty span */
	uint32_t *off;	  /* n_ranks + 1 offsets into `bytes` */
	uint8_t *bytes;
	uint32_t *slots;
	uint64_t mask;	    /* table size - 1 */
	unsigned rank_bits; /* at most 24, leaving at least 8 bits of tag */
	uint32_t byte_rank[256];
	uint32_t *pair_rank; /* 65536 entries: the rank of each two-byte string */
};

struct sf_tok {
	int kind;   /* SF_TOK_* */
	int pretok; /* SF_PRETOK_*, for SF_TOK_BPE */
	char name[64];
	uint32_t n_vocab;
	int32_t eot; /* id of <|endoftext|>, or -1 */
	struct sf_tok_ranks ranks;
	pcre2_code *re; /* for SF_PRETOK_PCRE */
	struct sf_tok_special_entry specials[SF_TOK_MAX_SPECIALS];
	uint32_t n_specials;
	uint32_t *chars; /* SF_TOK_CHAR: the code points, sorted; id = index */
	uint32_t n_chars;
};

/* One node of the heap merge: a part of the piece and the rank of it and its successor. */
struct sf_bpe_node {
	uint32_t start;
	uint32_t prev;
	uint32_t next;
	uint32_t pair_rank;
};

struct sf_tok_encoder {
	const struct sf_tok *tok;
	uint32_t *ids;
	size_t ids_cap;
	/* BPE scratch, sized for the longest piece seen. */
	struct sf_bpe_node *nodes;
	uint64_t *heap;
	size_t bpe_cap;
	pcre2_match_data *md;
};

/*
 * Most keys are a few bytes long and a 32-bit hash tag has already matched, so a plain
 * loop beats a call to memcmp here.
 */
static inline bool sf__tok_bytes_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

/* sf__tok_rank - the rank of bytes s[0..len), or SF_RANK_NONE. */
static inline uint32_t sf__tok_rank(const struct sf_tok_ranks *r, const uint8_t *s, size_t len)
{
	uint32_t tag, slot, low = ((uint32_t)1 << r->rank_bits) - 1;
	uint64_t h, i;

	if (len == 1)
		return r->byte_rank[s[0]];
	if (len == 2)
		return r->pair_rank[s[0] << 8 | s[1]];
	h = XXH3_64bits(s, len);
	tag = (uint32_t)(h >> 32) & ~low;
	for (i = h & r->mask;; i = (i + 1) & r->mask) {
		uint32_t rank;

		slot = r->slots[i];
		if (!slot)
			return SF_RANK_NONE;
		if ((slot & ~low) != tag)
			continue;
		rank = (slot & low) - 1;
		if (r->off[rank + 1] - r->off[rank] == len &&
		    sf__tok_bytes_equal(r->bytes + r->off[rank], s, len))
			return rank;
	}
}

/* vocab.c */
int sf__tok_ranks_load(struct sf_tok_ranks *r, const char *path, struct sf_err *e);
void sf__tok_ranks_free(struct sf_tok_ranks *r);

/* pretok.c: the end of the piece that starts at s[p], p < n, for a built-in preset. */
size_t sf__pretok_next(int pretok, const uint8_t *s, size_t n, size_t p);
/* The preset whose pattern is exactly `pattern`, or 0. */
int sf__pretok_preset(const char *pattern);
/* The pattern of a preset. */
const char *sf__pretok_pattern(int pretok);

/* pcre_fallback.c */
int sf__pcre_compile(const char *pattern, pcre2_code **ret_re, struct sf_err *e);
/*
 * The next match of `re` in s[0..n) at or after p: stores its bounds and returns 1, or
 * returns 0 when there is none, or SF_E_TOKENIZER when PCRE2 fails.
 */
int sf__pcre_next(const pcre2_code *re, pcre2_match_data *md, const uint8_t *s, size_t n, size_t p,
		  size_t *ret_start, size_t *ret_end);

/* bpe.c: append the ranks of one piece (not in the vocabulary as a whole) to `out`. */
int sf__bpe_short(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		  size_t *ret_n);
int sf__bpe_heap(struct sf_tok_encoder *enc, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n);

#endif
