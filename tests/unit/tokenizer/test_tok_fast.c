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
