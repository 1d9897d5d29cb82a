/*
 * Encoding: split the text at allowed special tokens, split each stretch between them
 * into pieces with the pre-tokenizer, and turn each piece into ids: one lookup when the
 * whole piece is a token (most pieces of ordinary text), else byte pair merging. The
 * encoder owns every buffer this needs and only ever grows them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/sp_shim.h"
#include "producer/tokenizer/sp_split.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"

int sf__tok_encoder_create(const struct sf_tok *tok, struct sf_tok_encoder **ret_enc,
			   struct sf_err *e)
{
	struct sf_tok_encoder *enc = calloc(1, sizeof(*enc));

	if (!enc)
		return sf__err(e, -ENOMEM, "out of memory");
	enc->tok = tok;
	enc->cache = calloc((size_t)1 << SF_TOK_CACHE_BITS, sizeof(*enc->cache));
	if (!enc->cache) {
		free(enc);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	enc->long_cache = calloc((size_t)1 << SF_TOK_LONG_BITS, sizeof(*enc->long_cache));
	if (!enc->long_cache) {
		sf__tok_encoder_free(enc);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	if (tok->re) {
		enc->md = pcre2_match_data_create_from_pattern(tok->re, NULL);
		if (!enc->md) {
			sf__tok_encoder_free(enc);
			return sf__err(e, -ENOMEM, "out of memory");
		}
	}
	if (tok->n_specials) {
		enc->special_next = malloc(tok->n_specials * sizeof(*enc->special_next));
		if (!enc->special_next) {
			sf__tok_encoder_free(enc);
			return sf__err(e, -ENOMEM, "out of memory");
		}
	}
	if (tok->sp_split) {
		enc->sp_short = calloc((size_t)1 << SF_TOK_SP_BITS, sizeof(*enc->sp_short));
		enc->sp_long = calloc((size_t)1 << SF_TOK_SP_LONG_BITS, sizeof(*enc->sp_long));
		if (!enc->sp_short || !enc->sp_long) {
			sf__tok_encoder_free(enc);
			return sf__err(e, -ENOMEM, "out of memory");
		}
	}
	if (tok->kind == SF_TOK_HF && sf__hf_scratch_create(tok, &enc->hf) < 0) {
		sf__tok_encoder_free(enc);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	*ret_enc = enc;
	return 0;
}

void sf__tok_encoder_free(struct sf_tok_encoder *enc)
{
	if (!enc)
		return;
	free(enc->ids);
	free(enc->nodes);
	free(enc->heap);
	free(enc->cache);
	free(enc->long_cache);
	free(enc->sp_short);
	free(enc->sp_long);
	free(enc->special_next);
	pcre2_match_data_free(enc->md);
	sf__hf_scratch_free(enc->hf);
	free(enc);
}

/*
 * The ids of a cache entry to `out`: n of them, the entry holding `held` (at least n),
 * with room for `room` ids (at least n) at `out`. Where the room allows, at most `held`
 * are copied at a constant size, which a compiler does without a call to memcpy (a call
 * per piece cost more than the copy).
 */
static inline void copy_ids(uint32_t *out, const uint32_t *ids, uint32_t n, size_t room,
			    uint32_t held)
{
	if (held == SF_TOK_CACHE_IDS && room >= SF_TOK_CACHE_IDS)
		memcpy(out, ids, SF_TOK_CACHE_IDS * sizeof(*out));
	else if (held == SF_TOK_LONG_IDS && n <= SF_TOK_LONG_IDS / 2 && room >= SF_TOK_LONG_IDS / 2)
		memcpy(out, ids, SF_TOK_LONG_IDS / 2 * sizeof(*out));
	else
		memcpy(out, ids, n * sizeof(*out));
}

/* Below a BPE piece of len bytes there is room for len + 1 ids: the encoder holds room
 * for one id a byte of the text and one more, and each id before covers a byte at least. */
#define PIECE_ROOM(len) ((len) + 1)

/*
 * A piece of SF_TOK_CACHE_MAX_LEN + 1 to SF_TOK_LONG_MAX bytes, through the long cache.
 * `padded`, here and below: 8 bytes past the piece can be read (sf__bpe_short()).
 */
static int merge_long(struct sf_tok_encoder *enc, const uint8_t *s, size_t len, uint32_t *out,
		      size_t *ret_n, bool padded)
{
	uint64_t h = sf__tok_load64(s) ^ sf__tok_load64(s + len / 2 - 4) * 0xc2b2ae3d27d4eb4full ^
		     sf__tok_load64(s + len - 8) * 0x165667b19e3779f9ull ^ len;
	struct sf_tok_long_entry *c =
		&enc->long_cache[(h * 0x9e3779b97f4a7c15ull) >> (64 - SF_TOK_LONG_BITS)];
	int rc;

	if (c->len == len && !memcmp(c->bytes, s, len)) {
		copy_ids(out, c->ids, c->n, PIECE_ROOM(len), SF_TOK_LONG_IDS);
		*ret_n = c->n;
		return 0;
	}
	rc = sf__bpe_short(&enc->tok->ranks, s, len, out, ret_n, padded);
	if (rc == 0 && *ret_n <= SF_TOK_LONG_IDS) {
		c->len = (uint32_t)len;
		c->n = (uint32_t)*ret_n;
		memcpy(c->bytes, s, len);
		memcpy(c->ids, out, *ret_n * sizeof(*out));
	}
	return rc;
}

/* Merge a piece that is not a token, through the piece cache when it is short enough. */
static int merge_piece(struct sf_tok_encoder *enc, const uint8_t *s, size_t len, uint32_t *out,
		       size_t *ret_n, bool padded)
{
	const struct sf_tok_ranks *r = &enc->tok->ranks;
	struct sf_tok_cache_entry *c;
	uint64_t head, tail, h;
	int rc;

	if (len > SF_TOK_LONG_MAX)
		return len <= SF_BPE_SHORT_MAX ? sf__bpe_short(r, s, len, out, ret_n, padded)
					       : sf__bpe_heap(enc, s, len, out, ret_n);
	if (len > SF_TOK_CACHE_MAX_LEN)
		return merge_long(enc, s, len, out, ret_n, padded);
	if (padded) {
		head = sf__tok_key_8(s, len);
		tail = sf__tok_tail_8(s, len);
	} else {
		head = sf__tok_key(s, len);
		tail = len > 8 ? sf__tok_load64(s + len - 8) : 0;
	}
	h = (head ^ tail * 0xc2b2ae3d27d4eb4full ^ len) * 0x9e3779b97f4a7c15ull;
	c = &enc->cache[h >> (64 - SF_TOK_CACHE_BITS)];
	if (c->len == len && c->head == head && c->tail == tail) {
		copy_ids(out, c->ids, c->n, PIECE_ROOM(len), SF_TOK_CACHE_IDS);
		*ret_n = c->n;
		return 0;
	}
	rc = sf__bpe_short(r, s, len, out, ret_n, padded);
	if (rc == 0 && *ret_n <= SF_TOK_CACHE_IDS) {
		c->head = head;
		c->tail = tail;
		c->len = (uint32_t)len;
		c->n = (uint32_t)*ret_n;
		memcpy(c->ids, out, *ret_n * sizeof(*out));
	}
	return rc;
}

/* Append the ids of one piece s[0..len) at out; their count goes to *ret_n. */
static int encode_piece(struct sf_tok_encoder *enc, const uint8_t *s, size_t len, uint32_t *out,
			size_t *ret_n, bool padded)
{
	const struct sf_tok_ranks *r = &enc->tok->ranks;
	uint32_t rank = len < 3	 ? sf__tok_rank(r, s, len)
			: padded ? sf__tok_rank_joined_8(r, s, len)
				 : sf__tok_rank_joined(r, s, len);

	if (rank != SF_RANK_NONE) {
		*out = rank;
		*ret_n = 1;
		return 0;
	}
	if (len == 1)
		return SF_E_TOKENIZER;
	return merge_piece(enc, s, len, out, ret_n, padded);
}

/*
 * BPE of s[0..n) with no special tokens: tiktoken's encode_ordinary. With PCRE2, text
 * between two matches (which a pattern of the built-in kind never leaves) is encoded as
 * a piece of its own rather than dropped, so that decoding gives the input back.
 */
void (*sf__tok_progress)(uint64_t bytes);

static int encode_bpe(struct sf_tok_encoder *enc, const uint8_t *s, size_t n, size_t *n_out,
		      struct sf_err *e)
{
	const struct sf_tok *tok = enc->tok;
	const pcre2_code *re = NULL;
	size_t p = 0, end, start, count, reported = 0;
	int rc;

	if (tok->pretok == SF_PRETOK_PCRE)
		re = tok->re_fast && !sf__pcre_text_changed(s, n) ? tok->re_fast : tok->re;

	while (p < n) {
		if (re) {
			rc = sf__pcre_next(re, enc->md, s, n, p, &start, &end);
			if (rc < 0)
				return sf__pcre_fail(e, tok->name, rc, p);
			if (rc == 0) {
				start = n;
				end = n;
			}
			if (start > p) {
				end = start;
				start = p;
			}
		} else {
			start = p;
			end = sf__pretok_next(tok->pretok, s, n, p);
		}
		rc = encode_piece(enc, s + start, end - start, enc->ids + *n_out, &count,
				  n - end >= 8);
		if (rc < 0) {
			if (rc == SF_E_TOKENIZER)
				return sf__err(e, rc,
					       "%s: a byte of the piece at %zu is not a token",
					       tok->name, start);
			if (rc == -EFBIG)
				return sf__bpe_too_long(e, tok->name, end - start);
			return sf__err(e, rc, "%s: out of memory", tok->name);
		}
		*n_out += count;
		p = end;
		if (__builtin_expect(p - reported >= SF_TOK_PROGRESS_BYTES, 0) &&
		    sf__tok_progress) {
			sf__tok_progress(p - reported);
			reported = p;
		}
	}
	return 0;
}

static int encode_chars(struct sf_tok_encoder *enc, const uint8_t *s, size_t n, size_t *n_out,
			struct sf_err *e)
{
	const struct sf_tok *tok = enc->tok;
	size_t p = 0;
	uint32_t cp;

	for (size_t reported = 0; p < n;) {
		size_t len = sf__utf8_next(s + p, n - p, &cp);
		size_t lo = 0, hi = tok->n_chars;

		if (__builtin_expect(p - reported >= SF_TOK_PROGRESS_BYTES, 0) &&
		    sf__tok_progress) {
			sf__tok_progress(p - reported);
			reported = p;
		}

		while (lo < hi) {
			size_t mid = (lo + hi) / 2;

			if (tok->chars[mid] < cp)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (cp == SF_UC_INVALID)
			return sf__err(e, SF_E_TOKENIZER,
				       "byte %zu (0x%02x) is not UTF-8, which %s reads", p, s[p],
				       tok->name);
		if (lo == tok->n_chars || tok->chars[lo] != cp)
			return sf__err(e, SF_E_TOKENIZER,
				       "the character U+%04X at byte %zu is not in the vocabulary "
				       "of %s",
				       cp, p, tok->name);
		enc->ids[(*n_out)++] = (uint32_t)lo;
		p += len;
	}
	return 0;
}

/* Make room for `need` ids in the encoder. */
static int reserve_ids(struct sf_tok_encoder *enc, size_t need, struct sf_err *e)
{
	size_t cap = enc->ids_cap ? enc->ids_cap : 4096;
	uint32_t *ids;

	if (need <= enc->ids_cap)
		return 0;
	if (enc->ids_lent)
		return sf__err(e, -ENOBUFS, "%s: more than the %zu ids the caller's buffer holds",
			       enc->tok->name, enc->ids_cap);
	while (cap < need)
		cap *= 2;
	ids = realloc(enc->ids, cap * sizeof(*ids));
	if (!ids)
		return sf__err(e, -ENOMEM, "%s: out of memory for %zu ids", enc->tok->name, cap);
	enc->ids = ids;
	enc->ids_cap = cap;
	return 0;
}

/*
 * SentencePiece through the library, `part` as sf__sp_encode() takes it; its normalizer
 * may make more ids than bytes.
 */
static int sp_library(struct sf_tok_encoder *enc, bool part, const uint8_t *s, size_t n,
		      size_t *n_out, struct sf_err *e)
{
	char msg[256] = "";
	size_t got = 0;
	int rc;

	rc = sf__sp_encode(enc->tok->sp, part, s, n, enc->ids + *n_out, enc->ids_cap - *n_out, &got,
			   msg, sizeof(msg));
	if (rc == -ENOBUFS) {
		rc = reserve_ids(enc, *n_out + got + 1, e);
		if (rc < 0)
			return rc;
		rc = sf__sp_encode(enc->tok->sp, part, s, n, enc->ids + *n_out,
				   enc->ids_cap - *n_out, &got, msg, sizeof(msg));
	}
	if (rc < 0)
		return sf__err(e, rc, "%s: %s", enc->tok->name, msg);
	*n_out += got;
	return 0;
}

/* Copy the n cached ids of an entry holding `held` to the encoder's output. */
static int sp_hit(struct sf_tok_encoder *enc, const uint32_t *ids, uint32_t n, uint32_t held,
		  size_t *n_out, struct sf_err *e)
{
	int rc = reserve_ids(enc, *n_out + n + 1, e);

	if (rc < 0)
		return rc;
	copy_ids(enc->ids + *n_out, ids, n, enc->ids_cap - *n_out, held);
	*n_out += n;
	return 0;
}

/* One part of a text (sp_split.h), through the part caches when it is short enough. */
static int sp_part(struct sf_tok_encoder *enc, bool first, const uint8_t *s, size_t n,
		   size_t *n_out, struct sf_err *e)
{
	const uint32_t key = (uint32_t)n | (first ? SF_TOK_SP_FIRST : 0);
	const size_t at = *n_out;
	int rc;

	if (n <= SF_TOK_CACHE_MAX_LEN) {
		const uint64_t head = sf__tok_key(s, n);
		const uint64_t tail = n > 8 ? sf__tok_load64(s + n - 8) : 0;
		struct sf_tok_cache_entry *c =
			&enc->sp_short[(sf__tok_mix(s, n, head) ^ (uint64_t)key << 32) >>
				       (64 - SF_TOK_SP_BITS)];

		if (c->len == key && c->head == head && c->tail == tail)
			return sp_hit(enc, c->ids, c->n, SF_TOK_CACHE_IDS, n_out, e);
		rc = sp_library(enc, !first, s, n, n_out, e);
		if (rc == 0 && *n_out - at <= SF_TOK_CACHE_IDS) {
			c->head = head;
			c->tail = tail;
			c->len = key;
			c->n = (uint32_t)(*n_out - at);
			memcpy(c->ids, enc->ids + at, c->n * sizeof(*c->ids));
		}
		return rc;
	}
	if (n <= SF_TOK_LONG_MAX) {
		struct sf_tok_long_entry *c =
			&enc->sp_long[(XXH3_64bits(s, n) ^ (uint64_t)key << 32) >>
				      (64 - SF_TOK_SP_LONG_BITS)];

		if (c->len == key && !memcmp(c->bytes, s, n))
			return sp_hit(enc, c->ids, c->n, SF_TOK_LONG_IDS, n_out, e);
		rc = sp_library(enc, !first, s, n, n_out, e);
		if (rc == 0 && *n_out - at <= SF_TOK_LONG_IDS) {
			c->len = key;
			c->n = (uint32_t)(*n_out - at);
			memcpy(c->bytes, s, n);
			memcpy(c->ids, enc->ids + at, c->n * sizeof(*c->ids));
		}
		return rc;
	}
	return sp_library(enc, !first, s, n, n_out, e);
}

/* Cuts found per pass of the split over a text. */
#define SP_CUTS 256

static int encode_sp(struct sf_tok_encoder *enc, const uint8_t *s, size_t n, size_t *n_out,
		     struct sf_err *e)
{
	const struct sf_tok *tok = enc->tok;
	size_t p = 0, ends[SP_CUTS], k, i;
	int rc;

	if (!enc->sp_short)
		return sp_library(enc, false, s, n, n_out, e);
	while (p < n) {
		k = sf__sp_split_cuts(tok->sp_split, s + p, n - p, ends, SP_CUTS);
		for (i = 0; i < k; i++) {
			const size_t start = i ? ends[i - 1] : 0;

			rc = sp_part(enc, p == 0 && i == 0 && tok->sp_dummy_prefix, s + p + start,
				     ends[i] - start, n_out, e);
			if (rc < 0)
				return rc;
		}
		p += ends[k - 1];
	}
	return 0;
}

static int encode_ordinary(struct sf_tok_encoder *enc, const uint8_t *s, size_t n, size_t *n_out,
			   struct sf_err *e)
{
	size_t i;

	switch (enc->tok->kind) {
	case SF_TOK_BPE:
		return encode_bpe(enc, s, n, n_out, e);
	case SF_TOK_SP:
		return encode_sp(enc, s, n, n_out, e);
	case SF_TOK_BYTES:
		for (i = 0; i < n; i++) {
			enc->ids[(*n_out)++] = s[i];
			if (__builtin_expect(!((i + 1) % SF_TOK_PROGRESS_BYTES), 0) &&
			    sf__tok_progress)
				sf__tok_progress(SF_TOK_PROGRESS_BYTES);
		}
		return 0;
	default:
		return encode_chars(enc, s, n, n_out, e);
	}
}

int sf__tok_encode(struct sf_tok_encoder *enc, const void *text, size_t len, uint64_t allowed,
		   const uint32_t **ret_ids, size_t *ret_n, struct sf_err *e)
{
	const struct sf_tok *tok = enc->tok;
	const uint8_t *s = text;
	size_t *next = enc->special_next;
	size_t p = 0, n_out = 0;
	uint32_t i;
	int rc;

	/* Every id covers at least one byte, so len ids are always enough (SentencePiece
	 * grows the buffer itself when its normalizer makes more, a tokenizer.json's encoder
	 * when a prefix space or NFC does). */
	rc = reserve_ids(enc, len + 1, e);
	if (rc < 0)
		return rc;
	if (tok->kind == SF_TOK_HF) {
		rc = sf__hf_encode(enc, s, len, allowed, &n_out, e);
		if (rc < 0)
			return rc;
		*ret_ids = enc->ids;
		*ret_n = n_out;
		return 0;
	}
	if (tok->n_specials < 64)
		allowed &= ((uint64_t)1 << tok->n_specials) - 1;

	/*
	 * next[i] is where special token i next occurs at or after p (len when it does not,
	 * SIZE_MAX before the first search). It is searched again only once p has passed
	 * it, so each token's occurrences are found in one pass over the text.
	 */
	for (i = 0; i < tok->n_specials; i++)
		next[i] = SIZE_MAX;
	while (p < len) {
		size_t at = len, at_len = 0;
		uint32_t at_id = 0;

		for (i = 0; allowed && i < tok->n_specials; i++) {
			const struct sf_tok_special_entry *sp = &tok->specials[i];

			if (!(allowed & ((uint64_t)1 << (i < 63 ? i : 63))))
				continue;
			if (next[i] == SIZE_MAX || next[i] < p) {
				const uint8_t *hit = memmem(s + p, len - p, sp->text, sp->len);

				next[i] = hit ? (size_t)(hit - s) : len;
			}
			/* The earliest occurrence wins, and the longest among those at one place.
			 */
			if (next[i] < at || (next[i] == at && at < len && sp->len > at_len)) {
				at = next[i];
				at_len = sp->len;
				at_id = sp->id;
			}
		}
		rc = encode_ordinary(enc, s + p, at - p, &n_out, e);
		if (rc < 0)
			return rc;
		if (at == len)
			break;
		/* SentencePiece may have filled the buffer: its ids can outnumber the bytes. */
		rc = reserve_ids(enc, n_out + 1, e);
		if (rc < 0)
			return rc;
		enc->ids[n_out++] = at_id;
		p = at + at_len;
	}
	*ret_ids = enc->ids;
	*ret_n = n_out;
	return 0;
}

int sf__tok_encode_to(struct sf_tok_encoder *enc, const void *text, size_t len, uint64_t allowed,
		      uint32_t *out, size_t cap, size_t *ret_n, struct sf_err *e)
{
	uint32_t *own = enc->ids;
	size_t own_cap = enc->ids_cap;
	const uint32_t *ids;
	int rc;

	if (enc->tok->kind == SF_TOK_SP) {
		/* No bound before encoding: encode in the encoder, then copy if it fits. */
		rc = sf__tok_encode(enc, text, len, allowed, &ids, ret_n, e);
		if (rc < 0)
			return rc;
		if (*ret_n > cap)
			return sf__err(e, -ENOBUFS, "%s: %zu ids do not fit in %zu", enc->tok->name,
				       *ret_n, cap);
		memcpy(out, ids, *ret_n * sizeof(*ids));
		return 0;
	}
	if (cap < len + 1)
		return sf__err(e, -ENOBUFS, "%s: %zu bytes need room for %zu ids, not %zu",
			       enc->tok->name, len, len + 1, cap);
	/* The encoder writes to enc->ids and grows it only below len + 1: lend it `out`. */
	enc->ids = out;
	enc->ids_cap = cap;
	enc->ids_lent = true;
	rc = sf__tok_encode(enc, text, len, allowed, &ids, ret_n, e);
	enc->ids = own;
	enc->ids_cap = own_cap;
	enc->ids_lent = false;
	return rc;
}
