/*
 * sf__rename_pair (common/io.h): a new data file and index replace an old pair, and when
 * the index cannot be moved into place the old index is gone rather than left beside the
 * new data, where it would read as a whole dataset.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"

static char dir[] = "/tmp/sf-test-io-XXXXXX";
static char path[6][4096];

static void put(const char *p, const char *text)
{
	FILE *f = fopen(p, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static char *get(const char *p, char *buf, size_t cap)
{
	FILE *f = fopen(p, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void setup(void)
{
	static const char *const names[] = {"d.bin", "d.idx", "d.bin.tmp", "d.idx.tmp", "x", "y"};

	cr_assert_not_null(mkdtemp(dir));
	for (int i = 0; i < 6; i++)
		snprintf(path[i], sizeof(path[i]), "%s/%s", dir, names[i]);
	put(path[0], "old data");
	put(path[1], "old index");
	put(path[2], "new data");
}

static void teardown(void)
{
	for (int i = 0; i < 6; i++)
		unlink(path[i]);
	rmdir(dir);
}

TestSuite(rename_pair, .init = setup, .fini = teardown);

Test(rename_pair, replaces_both)
{
	char buf[64];

	put(path[3], "new index");
	cr_assert_eq(sf__rename_pair(path[2], path[0], path[3], path[1]), 0);
	cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "new data");
	cr_expect_str_eq(get(path[1], buf, sizeof(buf)), "new index");
	cr_expect_eq(access(path[2], F_OK), -1);
	cr_expect_eq(access(path[3], F_OK), -1);
}

/* The new index is missing (as if the writer died before it): no old index survives. */
Test(rename_pair, never_leaves_the_old_index_beside_new_data)
{
	char buf[64];

	cr_assert_lt(sf__rename_pair(path[2], path[0], path[3], path[1]), 0);
	cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "new data");
	cr_expect_null(get(path[1], buf, sizeof(buf)), "the old index is still there");
}
