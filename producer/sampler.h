/*
 * Sample order: the pure functions that map a global sample index to a place in the
 * token stream. `windows` permutes the stride-T windows of each epoch with a keyed
 * Feistel bijection (cycle walking brings it back into range), so any sample is found in
 * O(1) time and memory with no index; `random` draws nanoGPT-style uniform offsets from
 * a counter-based generator keyed by (seed, sample). Nothing here keeps state between
 * calls: the result depends on the arguments alone, which is what determinism (D1) and
 * exact resume (D3) rest on.
 */
#ifndef SF_PRODUCER_SAMPLER_H
#define SF_PRODUCER_SAMPLER_H

#include <stdint.h>

/* A keyed bijection of [0, n). Initialized by sf__perm_init(); read-only afterwards. */
struct sf_perm {
	uint64_t n;
	uint32_t half_bits; /* the Feistel network works on 2 * half_bits bits */
	uint32_t pad;
	uint64_t half_mask;
	uint64_t keys[4]; /* one round key per round */
};

/* sf__mix64 - SplitMix64's finalizer: a bijective, well-mixing 64-bit hash. */
static inline uint64_t sf__mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/*
 * sf__perm_init - the permutation of [0, n) keyed by (seed, epoch, tweak). Different keys
 * give independent-looking permutations; the same key always gives the same one.
 */
void sf__perm_init(struct sf_perm *p, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t tweak);

/* sf__perm_apply - the image of x (< p->n) under the permutation. */
uint64_t sf__perm_apply(const struct sf_perm *p, uint64_t x);

/*
 * sf__random_below - a uniform-looking integer in [0, range) for sample `k` under `seed`
 * (range > 0): a hash of the pair scaled by a 64x64->128 multiply.
 */
uint64_t sf__random_below(uint64_t seed, uint64_t k, uint64_t range);

#endif
