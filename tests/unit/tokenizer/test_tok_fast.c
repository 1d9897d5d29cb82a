/*
 * The encoder's fast paths against the plain ways they stand in for: the Bloom filter in
 * front of the rank table must never turn away a token (and should turn away most
 * strings that are not tokens).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"
#include "tok_test_util.h"

static const char *const encodings[] = {"r50k_base", "cl100k_base", "o200k_base"};

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t rnd(uint32_t bound)
{
	return tok_test_rnd(&rng_state, bound);
}

/* The rank of s[0..len) by probing the table alone, without the filter. */
static uint32_t table_rank(const struct sf_tok_ranks *r, const uint8_t *s, size_t len)
{
	uint64_t i;

	for (i = sf__tok_hash(r, s, len, sf__tok_key(s, len)); r->slots[i].len_rank;
	     i = (i + 1) & r->mask) {
		uint32_t rank = sf__tok_slot_rank(&r->slots[i]);

		if (r->off[rank + 1] - r->off[rank] == len &&
		    !memcmp(r->bytes + r->off[rank], s, len))
			return rank;
	}
	return SF_RANK_NONE;
}

/* Every token of every vocabulary is found under its own rank. */
Test(bloom, finds_every_token)
{
	size_t e;

	for (e = 0; e < 3; e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);
		const struct sf_tok_ranks *r;
		uint32_t rank;

		cr_assert_not_null(tok);
		r = &tok->ranks;
		for (rank = 0; rank < r->n_ranks; rank++) {
			size_t len = r->off[rank + 1] - r->off[rank];

			if (!len)
				continue;
			cr_assert_eq(sf__tok_rank(r, r->bytes + r->off[rank], len), rank,
				     "%s: rank %u not found", encodings[e], rank);
		}
		sf__tok_free(tok);
	}
}

/*
 * Strings made of a token's bytes with one byte changed, or of two tokens joined (what
 * merging asks about), get the table's own answer, and the filter turns most of the
 * absent ones away.
 */
Test(bloom, agrees_with_the_table)
{
	size_t e;

	for (e = 0; e < 3; e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);
		const struct sf_tok_ranks *r;
		size_t absent = 0, passed = 0;
		int round;

		cr_assert_not_null(tok);
		r = &tok->ranks;
		for (round = 0; round < 4000; round++) {
			uint32_t a = rnd(r->n_ranks), b = rnd(r->n_ranks);
			size_t la = r->off[a + 1] - r->off[a], lb = r->off[b + 1] - r->off[b];
			uint8_t s[512];
			size_t len = la;
			uint64_t bits;

			if (!la)
				continue; /* a rank the file does not have */
			memcpy(s, r->bytes + r->off[a], la);
			if (round % 2) {
				memcpy(s + la, r->bytes + r->off[b], lb);
				len += lb;
			} else {
				s[rnd((uint32_t)la)] ^= (uint8_t)(1 + rnd(255));
			}
			if (len < 3)
				continue;
			cr_assert_eq(sf__tok_rank(r, s, len), table_rank(r, s, len));
			if (table_rank(r, s, len) == SF_RANK_NONE) {
				uint64_t *w = sf__tok_bloom_word(
					r, sf__tok_mix(s, len, sf__tok_key(s, len)), &bits);

				absent++;
				passed += (*w & bits) == bits;
			}
		}
		cr_expect(passed * 10 < absent, "%s: the filter let %zu of %zu absent strings pass",
			  encodings[e], passed, absent);
		sf__tok_free(tok);
	}
}

static size_t b64(const uint8_t *s, size_t len, char *out)
{
	static const char abc[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t i, n = 0;

	for (i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0) |
			     (i + 2 < len ? s[i + 2] : 0);

		out[n++] = abc[v >> 18];
		out[n++] = abc[(v >> 12) & 63];
		out[n++] = i + 1 < len ? abc[(v >> 6) & 63] : '=';
		out[n++] = i + 2 < len ? abc[v & 63] : '=';
	}
	return n;
}

/* Ranks from .tiktoken text of `n` tokens, token i of rank ranks[i]. */
static int parse_tokens(struct sf_tok_ranks *r, const char *const *tok, const size_t *len,
			const uint32_t *ranks, size_t n, struct sf_err *e)
{
	size_t i, at = 0, cap = 64;
	char *text;
	int rc;

	for (i = 0; i < n; i++)
		cap += len[i] / 3 * 4 + 32;
	text = malloc(cap);
	cr_assert_not_null(text);
	for (i = 0; i < n; i++) {
		at += b64((const uint8_t *)tok[i], len[i], text + at);
		at += (size_t)sprintf(text + at, " %u\n", ranks[i]);
	}
	rc = sf__tok_ranks_parse(r, "test", (uint8_t *)text, at, 0, e);
	free(text);
	return rc;
}

/*
 * A slot keeps a token's first 8 and last 4 bytes and its length cut at 255: strings that
 * agree with a token on those and differ in the middle or in a length above 255 are not
 * that token. Runs of 'A' of 255 to 1,000 bytes, all tokens, fill probe chains with
 * slots that differ only in their true length.
 */
Test(bloom, slot_tells_long_tokens_apart)
{
	enum { FIRST = 255, LAST = 1000, N = LAST - FIRST + 1 + 2 };
	static char run[LAST + 100];
	static const char *tok[N];
	static size_t len[N];
	static uint32_t ranks[N];
	struct sf_tok_ranks r;
	struct sf_err err = {0};
	size_t k, i = 0;

	memset(run, 'A', sizeof(run));
	for (k = FIRST; k <= LAST; k++, i++) {
		tok[i] = run;
		len[i] = k;
		ranks[i] = (uint32_t)i;
	}
	tok[i] = "abcdefghXjklm";
	len[i] = 13;
	ranks[i] = (uint32_t)i;
	i++;
	tok[i] = "abcdefghij";
	len[i] = 10;
	ranks[i] = (uint32_t)i;
	cr_assert_eq(parse_tokens(&r, tok, len, ranks, N, &err), 0, "%s", err.msg);
	for (k = FIRST; k <= LAST; k++)
		cr_assert_eq(sf__tok_rank(&r, (const uint8_t *)run, k), (uint32_t)(k - FIRST),
			     "a run of %zu", k);
	for (k = LAST + 1; k < sizeof(run); k++)
		cr_assert_eq(sf__tok_rank(&r, (const uint8_t *)run, k), SF_RANK_NONE,
			     "a run of %zu", k);
	cr_expect_eq(sf__tok_rank(&r, (const uint8_t *)"abcdefghXjklm", 13), N - 2);
	cr_expect_eq(sf__tok_rank(&r, (const uint8_t *)"abcdefghYjklm", 13), SF_RANK_NONE);
	cr_expect_eq(sf__tok_rank(&r, (const uint8_t *)"abcdefghij", 10), N - 1);
	cr_expect_eq(sf__tok_rank(&r, (const uint8_t *)"abcdefghiJ", 10), SF_RANK_NONE);
	cr_expect_eq(sf__tok_rank(&r, (const uint8_t *)"abcdefgHij", 10), SF_RANK_NONE);
	sf__tok_ranks_free(&r);
}

/*
 * The slot keeps 24 bits of rank: the largest rank that fits is found, a larger one refused
 * as it is read, before the tables by rank are sized from it (4e9 would have asked for
 * 16 GB).
 */
Test(bloom, rank_limit)
{
	const char *tok[] = {"hello world!!"};
	const size_t len[] = {13};
	uint32_t ranks[] = {SF_TOK_MAX_RANKS - 1};
	struct sf_tok_ranks r;
	struct sf_err err = {0};

	cr_assert_eq(parse_tokens(&r, tok, len, ranks, 1, &err), 0, "%s", err.msg);
	cr_expect_eq(sf__tok_rank(&r, (const uint8_t *)"hello world!!", 13), SF_TOK_MAX_RANKS - 1);
	sf__tok_ranks_free(&r);
	for (int k = 0; k < 2; k++) {
		ranks[0] = k ? 4000000000u : SF_TOK_MAX_RANKS;
		cr_expect_lt(parse_tokens(&r, tok, len, ranks, 1, &err), 0);
		cr_expect(strstr(err.msg, "more than the 16777216 supported") != NULL, "%s",
			  err.msg);
		sf__tok_ranks_free(&r);
	}
}

/*
 * A random piece of 17 to 256 bytes that the o200k_base scanner keeps whole: one
 * character of a script without case (Han, Hiragana, Thai), then more of them.
 */
static size_t long_piece(uint8_t *s, size_t max)
{
	static const uint32_t base[] = {0x4e00, 0x3041, 0x0e01, 0xac00};
	const uint32_t script = base[rnd(4)];
	size_t len = 0;

	while (len + 3 <= max && (len < 17 || rnd(8))) {
		uint32_t cp = script + rnd(script == 0x3041 ? 80 : script == 0x0e01 ? 46 : 400);

		s[len++] = (uint8_t)(0xe0 | cp >> 12);
		s[len++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		s[len++] = (uint8_t)(0x80 | (cp & 0x3f));
	}
	return len;
}

/*
 * The piece caches hand back what merging gives: one encoder encodes pieces of many
 * lengths drawn, with repeats, from a small set (so that most come from a cache, and
 * many entries are replaced by others), and each piece's ids equal those of byte pair
 * merging it from scratch.
 */
Test(caches, equal_fresh_merges)
{
	struct sf_tok *tok = tok_test_load("o200k_base");
	struct sf_tok_encoder *enc;
	static uint8_t set[400][SF_BPE_SHORT_MAX];
	size_t set_len[400], i, hits = 0;
	int round;

	cr_assert_not_null(tok);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
	for (i = 0; i < 400; i++)
		set_len[i] = long_piece(set[i], i % 2 ? 64 : SF_BPE_SHORT_MAX);
	for (round = 0; round < 20000; round++) {
		size_t k = rnd(400), n, want_n, j;
		const uint32_t *ids;
		uint32_t want[SF_BPE_SHORT_MAX];

		cr_assert_eq(
			sf__tok_encode(enc, set[k], set_len[k], SF_TOK_ALLOW_NONE, &ids, &n, NULL),
			0);
		/* The scanner keeps the piece whole, so its ids are one merge's. */
		cr_assert_eq(sf__pretok_next(SF_PRETOK_O200K, set[k], set_len[k], 0), set_len[k]);
		cr_assert_eq(sf__bpe_scan(&tok->ranks, set[k], set_len[k], want, &want_n, false),
			     0);
		cr_assert_eq(n, want_n, "piece %zu of %zu bytes: %zu ids, merging gives %zu", k,
			     set_len[k], n, want_n);
		for (j = 0; j < n; j++)
			cr_assert_eq(ids[j], want[j], "piece %zu of %zu bytes: id %zu differs", k,
				     set_len[k], j);
		hits += set_len[k] <= SF_TOK_LONG_MAX;
	}
	cr_expect(hits > 5000, "only %zu pieces in the long cache's range", hits);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
}

/*
 * A piece's lookups load 8 bytes at a time where the text goes on for 8 bytes past the
 * piece, and byte by byte near its end: every text of 1 to 40 bytes (words, runs of
 * letters, characters of several scripts), each in a buffer of exactly its length (so
 * that ASan, which the suite also runs under, sees a read past it), gets the ids it gets
 * from a longer buffer with other bytes after it.
 */
Test(caches, lookups_read_nothing_past_the_text)
{
	static const char *const texts[] = {
		"international", "the",	       "Constantinople",
		"héllo wörld",	 "東京タワー", "abcdefghijklmnopqrstuvwxyzabcdefghijklmn",
		"a b c",	 "don't",      "привет мир"};

	for (size_t e = 0; e < 3; e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);
		struct sf_tok_encoder *enc;

		cr_assert_not_null(tok);
		cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
		for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
			for (size_t len = 1; len <= strlen(texts[t]) && len <= 40; len++) {
				uint8_t *exact = malloc(len), padded[64];
				uint32_t want[64];
				const uint32_t *ids;
				size_t n, want_n;

				memcpy(exact, texts[t], len);
				memcpy(padded, texts[t], len);
				memset(padded + len, 'x', sizeof(padded) - len);
				cr_assert_eq(sf__tok_encode(enc, padded, len, SF_TOK_ALLOW_NONE,
							    &ids, &want_n, NULL),
					     0);
				memcpy(want, ids, want_n * sizeof(*ids));
				cr_assert_eq(sf__tok_encode(enc, exact, len, SF_TOK_ALLOW_NONE,
							    &ids, &n, NULL),
					     0);
				cr_assert(n == want_n && !memcmp(ids, want, n * sizeof(*ids)),
					  "%s: '%.*s' in a buffer of its length", encodings[e],
					  (int)len, texts[t]);
				free(exact);
			}
		}
		sf__tok_encoder_free(enc);
		sf__tok_free(tok);
	}
}
