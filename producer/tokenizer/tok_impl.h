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
#include <stdio.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "producer/tokenizer/tokenizer.h"

/* The kinds of tokenizer. */
#define SF_TOK_BPE   1
#define SF_TOK_BYTES 2
#define SF_TOK_CHAR  3
#define SF_TOK_SP    4 /* SentencePiece, through the library (sp_shim.cc) */
#define SF_TOK_HF    5 /* a Hugging Face tokenizer.json: hf_json.h */

/* The pre-tokenizers. */
#define SF_PRETOK_R50K	  1
#define SF_PRETOK_CL100K  2
#define SF_PRETOK_O200K	  3
#define SF_PRETOK_PCRE	  4
#define SF_PRETOK_QWEN	  5 /* pretok_family.c */
#define SF_PRETOK_TEKKEN  6 /* pretok_family.c */
#define SF_PRETOK_QWEN3_5 7 /* pretok_family.c */

/* The rank of a byte string that is not in the vocabulary. */
#define SF_RANK_NONE UINT32_MAX

/*
 * Pieces up to SF_BPE_SCAN_MAX bytes are merged with tiktoken's quadratic scan, up to
 * SF_BPE_SHORT_MAX with a tournament tree on the stack, longer ones with a heap.
 */
#define SF_BPE_SCAN_MAX	 12
#define SF_BPE_SHORT_MAX 256

struct sf_tok_special_entry {
	char *text;
	uint32_t len;
	uint32_t id;
};

/*
 * One slot of the rank table: the token's first 8 bytes packed little-endian (zero-padded
 * when shorter), its last 4 bytes (for a token of more than 8 bytes), and its rank above
 * its length (255 for 255 bytes or more; 0 for an empty slot). A token of up to 12 bytes
 * is found or ruled out from the slot alone, so a lookup touches one cache line; a
 * longer one then compares the rest of its bytes with `bytes`. Ranks are below
 * SF_TOK_MAX_RANKS.
 */
#define SF_TOK_MAX_RANKS (1u << 24)

struct sf_tok_slot {
	uint64_t key;
	uint32_t tail;
	uint32_t len_rank; /* rank << 8 | min(length, 255) */
};

static inline uint32_t sf__tok_slot_len(const struct sf_tok_slot *slot)
{
	return slot->len_rank & 0xff;
}

static inline uint32_t sf__tok_slot_rank(const struct sf_tok_slot *slot)
{
	return slot->len_rank >> 8;
}

/*
 * The mergeable ranks: token bytes by rank (`off`, `bytes`) and an open-addressing table
 * from bytes to rank, at most half full and probed linearly, with single bytes and byte
 * pairs answered by direct tables instead.
 */
struct sf_tok_ranks {
	uint32_t n_ranks; /* largest rank + 1; a rank absent from the file has an empty span */
	uint32_t *off;	  /* n_ranks + 1 offsets into `bytes` */
	uint8_t *bytes;
	struct sf_tok_slot *slots;
	uint64_t mask;	/* table size - 1 */
	unsigned shift; /* 64 - log2(table size): a hash's top bits index the table */
	uint32_t byte_rank[256];
	uint32_t *pair_rank; /* 65536 entries: the rank of each two-byte string */
	/*
	 * A Bloom filter of the tokens of 3 bytes or more, two bits per token in one 64-bit
	 * word, about 10 bits per token: small enough to stay in a core's L2 cache while
	 * the table is many megabytes. Most pairs that byte pair merging asks about are not
	 * tokens (on text outside ASCII, three in four), and the filter answers most of
	 * those without touching the table.
	 */
	uint64_t *bloom;
	unsigned bloom_shift; /* 64 - log2(words) */
};

struct sf_tok {
	int kind;   /* SF_TOK_* */
	int pretok; /* SF_PRETOK_*, for SF_TOK_BPE */
	char name[64];
	char family[16]; /* sf__tok_family() */
	uint32_t n_vocab;
	int32_t eot; /* id of <|endoftext|>, or -1 */
	struct sf_tok_ranks ranks;
	int32_t bos;	/* id put before each document by the family's convention, or -1 */
	pcre2_code *re, *re_fast;	       /* for SF_PRETOK_PCRE: sf__pcre_compile() */
	struct sf_tok_special_entry *specials; /* n_specials of them, malloc'ed */
	uint32_t n_specials;
	uint32_t cap_specials;
	struct sf_sp *sp; /* SF_TOK_SP: the SentencePiece processor */
	/* Where its texts may be cut (sp_split.h), or NULL; whether it writes a space
	 * before each text. */
	struct sf_sp_split *sp_split;
	bool sp_dummy_prefix;
	uint32_t *chars;  /* SF_TOK_CHAR: the code points, sorted; id = index */
	uint32_t n_chars;
	struct sf_tok_hf *hf; /* SF_TOK_HF: what `ranks` alone does not say */
};

/* One node of the heap merge: a part of the piece and the rank of it and its successor. */
struct sf_bpe_node {
	uint32_t start;
	uint32_t prev;
	uint32_t next;
	uint32_t pair_rank;
};

/*
 * The piece cache of an encoder: the ids of recently merged pieces, direct-mapped by a
 * hash of the piece. Text repeats its words, and a piece that is not a token costs a
 * byte pair merge each time it occurs; a hit costs a compare and a copy. Pieces of 3 to
 * 16 bytes that merge into at most SF_TOK_CACHE_IDS ids are kept: their first and last 8
 * bytes (overlapping, or zero-padded below 8) and their length name them exactly.
 */
#define SF_TOK_CACHE_BITS    14
#define SF_TOK_CACHE_IDS     6
#define SF_TOK_CACHE_MAX_LEN 16

struct sf_tok_cache_entry {
	uint64_t head;
	uint64_t tail;
	uint32_t len; /* 0: empty */
	uint32_t n;
	uint32_t ids[SF_TOK_CACHE_IDS];
};

/*
 * Longer pieces, of SF_TOK_CACHE_MAX_LEN + 1 to SF_TOK_LONG_MAX bytes, have a cache of
 * their own that keeps their bytes: words of scripts written without spaces (Chinese,
 * Japanese, Thai) and long compounds come as such pieces, and a catalogue, a manual or a
 * web page repeats them within a few hundred pieces. A piece that merges into more than
 * SF_TOK_LONG_IDS ids is not kept.
 */
#define SF_TOK_LONG_BITS 9
#define SF_TOK_LONG_MAX	 64
#define SF_TOK_LONG_IDS	 32

struct sf_tok_long_entry {
	uint32_t len; /* 0: empty */
	uint32_t n;
	uint8_t bytes[SF_TOK_LONG_MAX];
	uint32_t ids[SF_TOK_LONG_IDS];
};

/*
 * A SentencePiece model that is encoded in parts (sp_split.h) keeps the ids of parts it
 * has encoded, as the BPE caches do: parts of up to SF_TOK_CACHE_MAX_LEN bytes in
 * 1 << SF_TOK_SP_BITS short entries, longer ones of up to SF_TOK_LONG_MAX bytes in
 * 1 << SF_TOK_SP_LONG_BITS long entries. A part is far dearer to encode than a piece (a
 * call into the library, about 0.3 us a byte), and the parts of a text are fewer than its
 * pieces, hence the larger tables. An entry's len has SF_TOK_SP_FIRST set for a text's
 * first part (the model may write a space before it).
 */
#define SF_TOK_SP_BITS	    15
#define SF_TOK_SP_LONG_BITS 12
#define SF_TOK_SP_FIRST	    (UINT32_C(1) << 31)

struct sf_tok_encoder {
	const struct sf_tok *tok;
	struct sf_tok_cache_entry *cache;     /* 1 << SF_TOK_CACHE_BITS entries */
	struct sf_tok_long_entry *long_cache; /* 1 << SF_TOK_LONG_BITS entries */
	struct sf_tok_cache_entry *sp_short;  /* 1 << SF_TOK_SP_BITS, or NULL */
	struct sf_tok_long_entry *sp_long;    /* 1 << SF_TOK_SP_LONG_BITS, or NULL */
	uint32_t *ids;
	size_t ids_cap;
	/* BPE scratch, sized for the longest piece seen. */
	struct sf_bpe_node *nodes;
	uint64_t *heap;
	size_t bpe_cap;
	pcre2_match_data *md;
	size_t *special_next;	  /* sf__tok_encode(): per special token, its next occurrence */
	struct sf_hf_scratch *hf; /* for SF_TOK_HF */
	bool ids_lent;		  /* `ids` is the caller's (sf__tok_encode_to): never grow it */
};

static inline uint64_t sf__tok_load64(const uint8_t *s)
{
	uint64_t v;

	memcpy(&v, s, sizeof(v));
	return v;
}

static inline uint32_t sf__tok_load32(const uint8_t *s)
{
	uint32_t v;

	memcpy(&v, s, sizeof(v));
	return v;
}

/*
 * The first min(len, 8) bytes of s as a little-endian integer, zero above them, reading
 * only s[0..len). Two overlapping loads cover 4 to 8 bytes: the bytes they share land on
 * the same bits with the same values, so OR-ing them packs the string exactly. (The
 * arithmetic assumes a little-endian machine, as the rest of the data path does.)
 */
static inline uint64_t sf__tok_key_3(const uint8_t *s, size_t len) /* len >= 3 */
{
	if (len >= 8)
		return sf__tok_load64(s);
	if (len >= 4)
		return sf__tok_load32(s) | (uint64_t)sf__tok_load32(s + len - 4) << (8 * (len - 4));
	return (uint64_t)s[0] | (uint64_t)s[1] << 8 | (uint64_t)s[2] << 16;
}

/*
 * sf__tok_key_3() (or sf__tok_key()) where 8 bytes can be read at s, past s[0..len) too:
 * one load and a mask. The branches on the length above are a coin toss on text (words of
 * 3 to 12 letters), and a missed one costs more than the lookup's arithmetic.
 */
static inline uint64_t sf__tok_key_8(const uint8_t *s, size_t len) /* len >= 1 */
{
	const size_t m = len < 8 ? len : 8;

	return sf__tok_load64(s) & (~UINT64_C(0) >> (64 - 8 * m));
}

static inline uint64_t sf__tok_key(const uint8_t *s, size_t len)
{
	if (len >= 3)
		return sf__tok_key_3(s, len);
	return len == 2 ? (uint64_t)s[0] | (uint64_t)s[1] << 8 : s[0];
}

/*
 * The hash of len bytes whose first 8 bytes are `key` and whose last 8 are `tail` (0 for
 * 8 bytes or fewer): a multiplicative hash of the key, the tail and the length. Its top
 * bits index the table.
 */
static inline uint64_t sf__tok_mix_tail(uint64_t key, size_t len, uint64_t tail)
{
	uint64_t h = key ^ ((uint64_t)len << 56) ^ tail * 0xc2b2ae3d27d4eb4full;

	h *= 0x9e3779b97f4a7c15ull;
	return h ^ (h >> 31);
}

/* The hash of bytes s[0..len) whose first 8 bytes are `key`. */
static inline uint64_t sf__tok_mix(const uint8_t *s, size_t len, uint64_t key)
{
	return sf__tok_mix_tail(key, len, len > 8 ? sf__tok_load64(s + len - 8) : 0);
}

/* The last 8 bytes of s[0..len), 0 for 8 bytes or fewer, where 8 bytes can be read at s:
 * the load need not stay within the string (gcc keeps a branch on the length here, which
 * measured faster than masks). */
static inline uint64_t sf__tok_tail_8(const uint8_t *s, size_t len)
{
	const uint64_t tail = sf__tok_load64(s + (len > 8 ? len - 8 : 0));

	return len > 8 ? tail : 0;
}

/* sf__tok_mix() where 8 bytes can be read at s. */
static inline uint64_t sf__tok_mix_8(const uint8_t *s, size_t len, uint64_t key)
{
	return sf__tok_mix_tail(key, len, sf__tok_tail_8(s, len));
}

static inline uint64_t sf__tok_hash(const struct sf_tok_ranks *r, const uint8_t *s, size_t len,
				    uint64_t key)
{
	return sf__tok_mix(s, len, key) >> r->shift;
}

/*
 * The Bloom filter's word for hash `h` and its two bits. Mixed once more so that neither
 * depends on the bits that index the table.
 */
static inline uint64_t *sf__tok_bloom_word(const struct sf_tok_ranks *r, uint64_t h,
					   uint64_t *ret_bits)
{
	uint64_t b = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;

	*ret_bits = (uint64_t)1 << (b & 63) | (uint64_t)1 << ((b >> 6) & 63);
	return &r->bloom[b >> r->bloom_shift];
}

/* Bytes past the first 8, whose key has already matched. A short plain loop beats memcmp. */
static inline bool sf__tok_tail_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i;

	for (i = 8; i < len; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

/*
 * Whether token `rank` is s[0..len), for a token of more than 12 bytes whose slot
 * matched (its length there is cut at 255).
 */
static inline bool sf__tok_long_equal(const struct sf_tok_ranks *r, uint32_t rank,
				      const uint8_t *s, size_t len)
{
	return r->off[rank + 1] - r->off[rank] == len &&
	       sf__tok_tail_equal(r->bytes + r->off[rank], s, len);
}

/* The rank of bytes s[0..len), at least 3, whose key and hash are `key` and `h`. */
static inline __attribute__((always_inline)) uint32_t
sf__tok_find(const struct sf_tok_ranks *r, const uint8_t *s, size_t len, uint64_t key, uint64_t h)
{
	uint64_t bits, i;

	if ((*sf__tok_bloom_word(r, h, &bits) & bits) != bits)
		return SF_RANK_NONE;
	for (i = h >> r->shift;; i = (i + 1) & r->mask) {
		const struct sf_tok_slot *slot = &r->slots[i];

		if (slot->key == key && sf__tok_slot_len(slot) == (len < 255 ? len : 255) &&
		    (len <= 8 ||
		     (slot->tail == sf__tok_load32(s + len - 4) &&
		      (len <= 12 || sf__tok_long_equal(r, sf__tok_slot_rank(slot), s, len)))))
			return sf__tok_slot_rank(slot);
		if (!slot->len_rank)
			return SF_RANK_NONE;
	}
}

/*
 * sf__tok_rank_joined - sf__tok_rank() of at least 3 bytes, which is what joining a merged
 * part to its neighbour always asks: the merge loops call it without the tests for one
 * and two bytes. sf__tok_rank_joined_8() where 8 bytes can be read at s (the text goes
 * on past the piece): the same rank without a branch on the length.
 */
static inline __attribute__((always_inline)) uint32_t
sf__tok_rank_joined(const struct sf_tok_ranks *r, const uint8_t *s, size_t len)
{
	const uint64_t key = sf__tok_key_3(s, len);

	return sf__tok_find(r, s, len, key, sf__tok_mix(s, len, key));
}

static inline __attribute__((always_inline)) uint32_t
sf__tok_rank_joined_8(const struct sf_tok_ranks *r, const uint8_t *s, size_t len)
{
	const uint64_t key = sf__tok_key_8(s, len);

	return sf__tok_find(r, s, len, key, sf__tok_mix_8(s, len, key));
}

/*
 * sf__tok_rank - the rank of bytes s[0..len), or SF_RANK_NONE. Always inlined: it sits in
 * the innermost loops, where the call would cost as much as a hit.
 */
static inline __attribute__((always_inline)) uint32_t sf__tok_rank(const struct sf_tok_ranks *r,
								   const uint8_t *s, size_t len)
{
	if (len == 1)
		return r->byte_rank[s[0]];
	if (len == 2)
		return r->pair_rank[s[0] << 8 | s[1]];
	return sf__tok_rank_joined(r, s, len);
}

/* vocab.c */
int sf__tok_ranks_load(struct sf_tok_ranks *r, const char *path, struct sf_err *e);
/*
 * sf__tok_ranks_parse - sf__tok_ranks_load() from `len` bytes of .tiktoken text in memory,
 * which it overwrites (base64 decodes in place); `name` stands for the file in messages.
 * Each rank is read plus `rank_offset` (tekken's ids follow its special tokens).
 */
int sf__tok_ranks_parse(struct sf_tok_ranks *r, const char *name, uint8_t *text, size_t len,
			uint32_t rank_offset, struct sf_err *e);
/* sf__tok_read_file - read a whole regular file of at most SF_TOK_VOCAB_MAX_BYTES. */
int sf__tok_read_file(const char *path, uint8_t **ret_buf, size_t *ret_len, struct sf_err *e);
/*
 * sf__tok_ranks_index - build the lookup tables of `r` (hash table, Bloom filter, byte and
 * pair ranks) from its n_ranks, off and bytes, which the caller has filled (empty spans for
 * absent ranks). Refuses two ranks with the same bytes, naming `what`. Every loader of a
 * rank table ends with it.
 */
int sf__tok_ranks_index(struct sf_tok_ranks *r, const char *what, struct sf_err *e);

/*
 * The largest vocabulary file read: o200k_base is 3.6 MB; a file 70 times that is not a
 * vocabulary, and reading it whole would only exhaust memory.
 */
#define SF_TOK_VOCAB_MAX_BYTES (256u << 20)

/*
 * sf__tok_open_regular - open `path` for reading as a stream, refusing what is not a
 * regular file after symlinks (a device such as /dev/zero, a FIFO, a directory) and, when
 * max_bytes is not 0, a file larger than that. Returns 0 and *ret_f, or an error naming
 * the path.
 */
int sf__tok_open_regular(const char *path, uint64_t max_bytes, FILE **ret_f, struct sf_err *e);
void sf__tok_ranks_free(struct sf_tok_ranks *r);

/* tok.c */
struct sf_tok *sf__tok_new(const char *name, int kind);
int sf__tok_add_special(struct sf_tok *tok, const char *text, uint32_t id, struct sf_err *e);
/* Check the specials against the ranks and choose the pre-tokenizer for `pattern`. */
int sf__tok_finish_bpe(struct sf_tok *tok, const char *pattern, struct sf_err *e);
/*
 * sf__tok_every_byte - refuse the ranks of a byte-level BPE file (`what` in the message)
 * without a token for each of the 256 bytes: a text holding a byte that has none cannot be
 * encoded, and it is better refused at load than at the first document that holds it.
 */
int sf__tok_every_byte(const struct sf_tok_ranks *r, const char *what, struct sf_err *e);

/* pretok.c: the end of the piece that starts at s[p], p < n, for a built-in preset. */
size_t sf__pretok_next(int pretok, const uint8_t *s, size_t n, size_t p);
/* The preset whose pattern is exactly `pattern`, or 0. */
int sf__pretok_preset(const char *pattern);
/* The pattern of a preset. */
const char *sf__pretok_pattern(int pretok);

/* pretok_family.c: as sf__pretok_next() for SF_PRETOK_QWEN, _TEKKEN and _QWEN3_5. */
size_t sf__pretok_family_next(int pretok, const uint8_t *s, size_t n, size_t p);
/* The family preset whose pattern is exactly `pattern`, or 0. */
int sf__pretok_family_preset(const char *pattern);

/* pcre_fallback.c */
/*
 * A pattern of tiktoken's (Rust regex) syntax, and one of a tokenizer.json (Oniguruma's,
 * checked by hf_pretok.c first), into *ret_re with Unicode 16.0's general categories (those
 * of tiktoken's regex crate and of the Oniguruma of `tokenizers`; PCRE2 10.42's are 14.0),
 * and, where ret_fast is given, into *ret_fast with PCRE2's own, NULL where that is the
 * same pattern: a text that sf__pcre_text_changed() finds nothing in can take it.
 */
int sf__pcre_compile(const char *pattern, pcre2_code **ret_re, pcre2_code **ret_fast,
		     struct sf_err *e);
int sf__pcre_compile_hf(const char *pattern, pcre2_code **ret_re, pcre2_code **ret_fast,
			struct sf_err *e);
/*
 * sf__pcre_unicode_fits - 0 where a PCRE2 whose tables are of Unicode `pcre_version`
 * ("15.0.0") matches the patterns as the scanners' Unicode does once corrected from 14.0
 * (every version from 14.0 to sf__uc_version: the corrections add what it already has and
 * take out what it has already lost), else SF_E_TOKENIZER saying so. sf__pcre_compile()
 * asks it of the PCRE2 it runs with.
 */
int sf__pcre_unicode_fits(const char *pcre_version, struct sf_err *e);
/* sf__pcre_text_changed - whether s[0..n) holds a code point whose general category
 * changed since PCRE2's Unicode: where it holds none, the `fast` pattern matches as `re`. */
bool sf__pcre_text_changed(const uint8_t *s, size_t n);
/*
 * The next match of `re` in s[0..n) at or after p: stores its bounds and returns 1, or
 * returns 0 when there is none, or PCRE2's negative error code when it fails (a pattern
 * that backtracks past PCRE2's match limit: PCRE2_ERROR_MATCHLIMIT).
 */
int sf__pcre_next(const pcre2_code *re, pcre2_match_data *md, const uint8_t *s, size_t n, size_t p,
		  size_t *ret_start, size_t *ret_end);

/* sf__pcre_fail - the error for a failed match (sf__pcre_next()'s code `rc`) at byte `at`. */
int sf__pcre_fail(struct sf_err *e, const char *name, int rc, size_t at);

/*
 * bpe.c: append the ranks of one piece (not in the vocabulary as a whole) to `out`.
 * sf__bpe_short() picks the scan or the tree by length; the tests call each directly.
 * `padded`: 8 bytes past the piece's end can be read (the text goes on), so that the
 * lookups of its joins load their keys without branching on their length.
 */
int sf__bpe_scan(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n, bool padded);
int sf__bpe_tree(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n, bool padded);
int sf__bpe_short(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		  size_t *ret_n, bool padded);
int sf__bpe_heap(struct sf_tok_encoder *enc, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n);

/*
 * The longest piece (one match of the pre-tokenizer, a run of one character class) the
 * merges take: their positions are 32-bit, and the heap's keys hold one beside a rank.
 * sf__bpe_heap() and sf__hf_bpe() return -EFBIG for a longer one (which they cut short
 * before, or never finished: a 4 GiB run of one punctuation byte).
 */
#define SF_BPE_PIECE_MAX (UINT32_MAX - 1)

/* The error of a piece of `len` bytes, longer than SF_BPE_PIECE_MAX. */
int sf__bpe_too_long(struct sf_err *e, const char *name, size_t len);

/*
 * A binary min-heap of uint64_t keys in `heap` (n entries): the long-piece merges of bpe.c
 * and hf_encode.c keep (rank << 32 | position) in it, lowest rank first, leftmost on a tie.
 */
static inline void sf__heap_push(uint64_t *heap, size_t *n, uint64_t key)
{
	size_t i = (*n)++;

	while (i > 0 && heap[(i - 1) / 2] > key) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = key;
}

static inline uint64_t sf__heap_pop(uint64_t *heap, size_t *n)
{
	uint64_t top = heap[0], last = heap[--(*n)];
	size_t i = 0, child;

	while ((child = 2 * i + 1) < *n) {
		if (child + 1 < *n && heap[child + 1] < heap[child])
			child++;
		if (heap[child] >= last)
			break;
		heap[i] = heap[child];
		i = child;
	}
	heap[i] = last;
	return top;
}

/*
 * sf__regex_cased_property - whether `p` (what follows \p or \P in a pattern) names a
 * property whose set differs by case (Lu, Ll, Lt, LC, L&, Uppercase, Lowercase, Cased,
 * their long names): one that Rust and Oniguruma fold under (?i), and PCRE2 does not.
 */
bool sf__regex_cased_property(const char *p);

/*
 * sf__regex_flags - the flags of the group that opens at pat[i] ('('), "(?on-off:" or
 * "(?on-off)": where they end (the ':' or ')'; i + 1 for a group without flags), in
 * *ret_caseless whether (?i) is in force after them (from `caseless` before), and in
 * *ret_flag the first of the letters `watch` among them (0: none).
 */
size_t sf__regex_flags(const char *pat, size_t i, bool caseless, const char *watch,
		       bool *ret_caseless, char *ret_flag);

/*
 * sf__regex_comment - for a comment "(?#...)" opening at pat[i] (outside a class), the
 * index just past the ')' that ends it, as Oniguruma and tiktoken's fancy-regex read it:
 * a backslash escapes the character after it (PCRE2 ends at the first ')', so comments
 * are left out of what it is given). 0 when no comment opens there; SIZE_MAX when it is
 * never closed.
 */
size_t sf__regex_comment(const char *pat, size_t i);

#endif
