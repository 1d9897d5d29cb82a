/*
 * Unit tests of the per-process cache of mapped source files (producer/source/file_cache.h).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/mman.h>

#include "producer/source/file_cache.h"

/*
 * File i: *(size_t *)arg bytes of memory of the process's own, as a decompressed file,
 * holding i in its first byte (mapped, and but for that page never touched: the tests
 * take no memory).
 */
static int map_private(void *arg, uint32_t i, const char **ret_data, size_t *ret_len,
		       size_t *ret_cap, int *ret_private, struct sf_err *e)
{
	const size_t bytes = *(const size_t *)arg;
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return sf__err(e, -ENOMEM, "mmap");
	p[0] = (char)i;
	*ret_data = p;
	*ret_len = *ret_cap = bytes;
	*ret_private = 1;
	return 0;
}

/* Decompressed files piled up to the capacity in files (4096): 200 shards of 1 GB each
 * took 200 GB per producer. Now they are held to the budget, and the two files returned
 * last stay readable. */
Test(file_cache, decompressed_files_are_held_to_the_budget)
{
	size_t bytes = SF_FILE_CACHE_PRIVATE_BYTES / 4;
	struct sf_file_cache *c = NULL;
	struct sf_err e = {0};
	const char *prev = NULL, *data;
	uint32_t cap;
	size_t len;

	cr_assert_eq(sf__file_cache_create(64, 64, map_private, &bytes, &c, &e), 0, "%s", e.msg);
	for (uint32_t i = 0; i < 20; i++) {
		cr_assert_eq(sf__file_cache_get(c, i, &data, &len, &e), 0, "%s", e.msg);
		cr_assert_eq(data[0], (char)i);
		if (prev)
			cr_assert_eq(prev[0], (char)(i - 1), "the file returned before was unmapped");
		prev = data;
		cr_expect_leq(sf__file_cache_private_bytes(c), SF_FILE_CACHE_PRIVATE_BYTES);
		cr_expect_leq(sf__file_cache_open_count(c, &cap), 4);
	}
	/* A hit keeps its file among the two most recent. */
	cr_assert_eq(sf__file_cache_get(c, 18, &prev, &len, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__file_cache_get(c, 30, &data, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(prev[0], 18);
	sf__file_cache_free(c);
}

/* Files larger than the budget: the two most recent stay, whatever they hold. */
Test(file_cache, the_two_files_returned_last_stay_past_the_budget)
{
	size_t bytes = SF_FILE_CACHE_PRIVATE_BYTES + 4096;
	struct sf_file_cache *c = NULL;
	struct sf_err e = {0};
	const char *a, *b;
	uint32_t cap;
	size_t len;

	cr_assert_eq(sf__file_cache_create(8, 8, map_private, &bytes, &c, &e), 0, "%s", e.msg);
	for (uint32_t i = 0; i < 8; i += 2) {
		cr_assert_eq(sf__file_cache_get(c, i, &a, &len, &e), 0, "%s", e.msg);
		cr_assert_eq(sf__file_cache_get(c, i + 1, &b, &len, &e), 0, "%s", e.msg);
		cr_expect_eq(a[0], (char)i);
		cr_expect_eq(b[0], (char)(i + 1));
		cr_expect_eq(sf__file_cache_open_count(c, &cap), 2);
	}
	sf__file_cache_free(c);
}

/* Files mapped by map_counted(): how many times each was. */
static unsigned maps[16];

/* File i: a page of the process's own holding i (not private: no budget). */
static int map_counted(void *arg, uint32_t i, const char **ret_data, size_t *ret_len,
		       size_t *ret_cap, int *ret_private, struct sf_err *e)
{
	char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)arg;
	if (p == MAP_FAILED)
		return sf__err(e, -ENOMEM, "mmap");
	p[0] = (char)i;
	maps[i]++;
	*ret_data = p;
	*ret_len = *ret_cap = 4096;
	*ret_private = 0;
	return 0;
}

static void get_file(struct sf_file_cache *c, uint32_t i)
{
	struct sf_err e = {0};
	const char *data;
	size_t len;

	cr_assert_eq(sf__file_cache_get(c, i, &data, &len, &e), 0, "%s", e.msg);
	cr_assert_eq(data[0], (char)i);
}

/* A full cache gives up its least recently used file, a hit making its file the most
 * recent (the list and the stack of free entries that replaced the scans). */
Test(file_cache, a_miss_of_a_full_cache_unmaps_the_least_recently_used_file)
{
	static const uint32_t order[] = {0, 1, 2, 0, 3, 1, 0, 4, 2, 3};
	/* maps of files 0-4 after each get: 3 entries, hits on 0 (twice) only */
	static const unsigned want[][5] = {
		{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 0, 0},
		{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}, /* 3 took 1's entry: 1 was the least recent */
		{1, 2, 1, 1, 0},		  /* 1 again, in 2's */
		{1, 2, 1, 1, 0},		  /* 0 still held */
		{1, 2, 1, 1, 1},		  /* 4 in 3's */
		{1, 2, 2, 1, 1},		  /* 2 in 1's */
		{1, 2, 2, 2, 1},		  /* 3 in 0's */
	};
	struct sf_file_cache *c = NULL;
	struct sf_err e = {0};
	uint32_t cap;

	cr_assert_eq(sf__file_cache_create(5, 3, map_counted, NULL, &c, &e), 0, "%s", e.msg);
	for (size_t k = 0; k < sizeof(order) / sizeof(*order); k++) {
		get_file(c, order[k]);
		for (uint32_t f = 0; f < 5; f++)
			cr_expect_eq(maps[f], want[k][f],
				     "after get %zu (file %u): file %u mapped %u times", k,
				     order[k], f, maps[f]);
		cr_expect_leq(sf__file_cache_open_count(c, &cap), 3);
	}
	/* Unmapped all, the entries are free again. */
	sf__file_cache_drop(c);
	cr_expect_eq(sf__file_cache_open_count(c, &cap), 0);
	for (uint32_t f = 0; f < 3; f++)
		get_file(c, f);
	cr_expect_eq(sf__file_cache_open_count(c, &cap), 3);
	sf__file_cache_free(c);
}
