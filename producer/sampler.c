/*
 * The keyed bijection behind `windows` sampling and the counter-based generator behind
 * `random` sampling. A balanced Feistel network permutes the 2h-bit integers, where 2^2h
 * is the smallest even power of two not below n; cycle walking (apply again until the
 * value falls below n) restricts it to [0, n). Since 2^2h < 4n, a walk takes fewer than
 * four steps on average, and it always ends because a permutation's cycle through x
 * returns to [0, n) at the latest at x itself.
 */
#include "producer/sampler.h"

#define ROUNDS 4

void sf__perm_init(struct sf_perm *p, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t tweak)
{
	uint32_t bits = 0;
	uint64_t key;

	p->n = n;
	while (bits < 64 && n > 1 && (n - 1) >> bits)
		bits++;
	p->half_bits = bits < 2 ? 1 : (bits + 1) / 2;
	p->half_mask = (UINT64_C(1) << p->half_bits) - 1;
	p->pad = 0;
	/* Chain the inputs through the mixer so that no two (seed, epoch, tweak) triples
	 * that differ in one field share round keys. */
	key = sf__mix64(seed ^ 0x53484d4645454421ull);
	key = sf__mix64(key ^ epoch);
	key = sf__mix64(key ^ tweak);
	for (int i = 0; i < ROUNDS; i++) {
		key = sf__mix64(key + 0x9e3779b97f4a7c15ull);
		p->keys[i] = key;
	}
}

static uint64_t feistel(const struct sf_perm *p, uint64_t x)
{
	uint64_t l = x >> p->half_bits, r = x & p->half_mask;

	for (int i = 0; i < ROUNDS; i++) {
		uint64_t f = sf__mix64(r ^ p->keys[i]) & p->half_mask;
		uint64_t t = l ^ f;

		l = r;
		r = t;
	}
	return (l << p->half_bits) | r;
}

uint64_t sf__perm_apply(const struct sf_perm *p, uint64_t x)
{
	if (p->n <= 1)
		return 0;
	do
		x = feistel(p, x);
	while (x >= p->n);
	return x;
}

__extension__ typedef unsigned __int128 u128;

uint64_t sf__random_below(uint64_t seed, uint64_t k, uint64_t range)
{
	uint64_t h = sf__mix64(sf__mix64(seed ^ 0x72616e646f6d2121ull) ^ k);

	return (uint64_t)(((u128)h * range) >> 64);
}
