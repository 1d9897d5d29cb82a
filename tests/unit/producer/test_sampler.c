/*
 * Unit tests of the sample order: the keyed permutation is a bijection of [0, n) for
 * every n tried (all n up to 600 checked fully, larger ones too), keys give different
 * orders, and the random offsets stay in range and spread evenly.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "producer/sampler.h"

static void check_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
	struct sf_perm p;
	uint8_t *seen = calloc(n ? n : 1, 1);

	sf__perm_init(&p, n, seed, epoch, 0);
	for (uint64_t x = 0; x < n; x++) {
		uint64_t y = sf__perm_apply(&p, x);

		cr_assert_lt(y, n, "n=%llu: %llu -> %llu", (unsigned long long)n,
			     (unsigned long long)x, (unsigned long long)y);
		cr_assert_eq(seen[y], 0, "n=%llu: %llu hit twice", (unsigned long long)n,
			     (unsigned long long)y);
		seen[y] = 1;
	}
	free(seen);
}

Test(sampler, bijection_small_domains)
{
	for (uint64_t n = 1; n <= 600; n++)
		check_bijection(n, 1337, n % 5);
}

Test(sampler, bijection_large_domains)
{
	static const uint64_t sizes[] = {65535, 65536, 65537, 1000003, (1u << 21) + 17};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		check_bijection(sizes[i], 42 + i, 3);
}

Test(sampler, keys_change_the_order_and_are_reproducible)
{
	struct sf_perm a, b, c, a2;
	uint64_t differ_epoch = 0, differ_seed = 0;
	const uint64_t n = 10000;

	sf__perm_init(&a, n, 7, 0, 0);
	sf__perm_init(&a2, n, 7, 0, 0);
	sf__perm_init(&b, n, 7, 1, 0);
	sf__perm_init(&c, n, 8, 0, 0);
	for (uint64_t x = 0; x < n; x++) {
		cr_assert_eq(sf__perm_apply(&a, x), sf__perm_apply(&a2, x));
		differ_epoch += sf__perm_apply(&a, x) != sf__perm_apply(&b, x);
		differ_seed += sf__perm_apply(&a, x) != sf__perm_apply(&c, x);
	}
	/* Independent permutations agree on about one point in total. */
	cr_expect_gt(differ_epoch, n - 20);
	cr_expect_gt(differ_seed, n - 20);
}

Test(sampler, permutation_is_not_nearly_identity)
{
	struct sf_perm p;
	uint64_t fixed = 0, adjacent = 0;
	const uint64_t n = 100000;

	sf__perm_init(&p, n, 1, 0, 0);
	for (uint64_t x = 0; x < n; x++) {
		fixed += sf__perm_apply(&p, x) == x;
		if (x)
			adjacent += sf__perm_apply(&p, x) == sf__perm_apply(&p, x - 1) + 1;
	}
	cr_expect_lt(fixed, 20);
	cr_expect_lt(adjacent, 50);
}

Test(sampler, random_offsets_in_range_and_even)
{
	const uint64_t range = 1000, draws = 200000;
	uint64_t hist[10] = {0};

	for (uint64_t k = 0; k < draws; k++) {
		uint64_t v = sf__random_below(99, k, range);

		cr_assert_lt(v, range);
		hist[v / 100]++;
		cr_assert_eq(v, sf__random_below(99, k, range));
	}
	for (int i = 0; i < 10; i++) {
		cr_expect_gt(hist[i], draws / 10 - draws / 100, "decile %d: %llu", i,
			     (unsigned long long)hist[i]);
		cr_expect_lt(hist[i], draws / 10 + draws / 100, "decile %d: %llu", i,
			     (unsigned long long)hist[i]);
	}
	cr_expect_neq(sf__random_below(99, 5, 1u << 30), sf__random_below(100, 5, 1u << 30));
}
