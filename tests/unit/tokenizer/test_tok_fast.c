/*
 * The encoder's fast paths against the plain ways they stand in for: the Bloom filter in
 * front of the rank table must never turn away a token (and should turn away most
 * strings that are not tokens).
 */
#include <criterion/criterion.h>

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

	for (i = sf__tok_hash(r, s, len, sf__tok_key(s, len)); r->slots[i].len;
	     i = (i + 1) & r->mask) {
		const struct sf_tok_slot *slot = &r->slots[i];

		if (slot->len == len && !memcmp(r->bytes + r->off[slot->rank], s, len))
			return slot->rank;
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
		cr_assert_eq(sf__bpe_scan(&tok->ranks, set[k], set_len[k], want, &want_n), 0);
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
