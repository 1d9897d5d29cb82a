/*
 * sf__rename_pair (common/io.h): a new data file and index replace an old pair; with a
 * temporary gone, the old pair stays whole, and no step leaves data without its index
 * (which format auto reads as nanoGPT tokens) or new data beside the old index.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "common/slot.h"

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
	const char *failed = "?";
	char buf[64];

	put(path[3], "new index");
	cr_assert_eq(sf__rename_pair(path[2], path[0], path[3], path[1], &failed), 0);
	cr_expect_null(failed);
	cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "new data");
	cr_expect_str_eq(get(path[1], buf, sizeof(buf)), "new index");
	cr_expect_eq(access(path[2], F_OK), -1);
	cr_expect_eq(access(path[3], F_OK), -1);
	/* The old pair, set aside on the way, is gone. */
	snprintf(buf, sizeof(buf), "%s/.d.bin.replaced", dir);
	cr_expect_eq(access(buf, F_OK), -1);
	snprintf(buf, sizeof(buf), "%s/.d.idx.replaced", dir);
	cr_expect_eq(access(buf, F_OK), -1);
}

/*
 * A temporary that is gone (removed under the writer; a writer that died before it):
 * the old pair stays as it was. The old index was removed first, and the new data moved
 * beside nothing, or the old data left alone: format auto read such a lone .bin as a
 * nanoGPT file of other tokens (a review).
 */
Test(rename_pair, a_missing_temporary_leaves_the_old_pair_whole)
{
	for (int gone = 2; gone <= 3; gone++) {
		const char *failed = NULL;
		char buf[64];

		put(path[0], "old data");
		put(path[1], "old index");
		put(path[2], "new data");
		put(path[3], "new index");
		unlink(path[gone]);
		cr_assert_lt(sf__rename_pair(path[2], path[0], path[3], path[1], &failed), 0);
		cr_expect_str_eq(failed, path[gone]);
		cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "old data");
		cr_expect_str_eq(get(path[1], buf, sizeof(buf)), "old index");
	}
}

/*
 * A move that fails on the way puts the old pair back and leaves the temporaries: the
 * index's (its directory gone: the old data, removed first, was lost when the index
 * could not be replaced; a review), then the data's (its directory gone).
 */
Test(rename_pair, a_failure_on_the_way_puts_the_old_pair_back)
{
	const char *failed = NULL;
	char buf[64], gone[4200];

	put(path[3], "new index");
	snprintf(gone, sizeof(gone), "%s/gone/d.idx", dir);
	cr_assert_lt(sf__rename_pair(path[2], path[0], path[3], gone, &failed), 0);
	cr_expect_str_eq(failed, gone);
	cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "old data");
	cr_expect_str_eq(get(path[1], buf, sizeof(buf)), "old index");
	cr_expect_str_eq(get(path[2], buf, sizeof(buf)), "new data");
	cr_expect_str_eq(get(path[3], buf, sizeof(buf)), "new index");

	snprintf(gone, sizeof(gone), "%s/gone/d.bin", dir);
	cr_assert_lt(sf__rename_pair(path[2], gone, path[3], path[1], &failed), 0);
	cr_expect_str_eq(failed, gone);
	cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "old data");
	cr_expect_str_eq(get(path[1], buf, sizeof(buf)), "old index");
	cr_expect_str_eq(get(path[2], buf, sizeof(buf)), "new data");
	cr_expect_str_eq(get(path[3], buf, sizeof(buf)), "new index");
}

/*
 * A directory at the data's or the index's name is someone's (a source directory named
 * corpus.bin): it was moved aside, hidden as .NAME.replaced, its removal failing unsaid,
 * and the call returned 0 (a review). Nothing is moved now.
 */
Test(rename_pair, a_directory_at_either_name_is_left_alone)
{
	for (int at = 0; at <= 1; at++) {
		const char *failed = NULL;
		char buf[64], kept[4200];

		unlink(path[at]);
		cr_assert_eq(mkdir(path[at], 0700), 0);
		snprintf(kept, sizeof(kept), "%s/keep", path[at]);
		put(kept, "notes");
		put(path[3], "new index");
		cr_expect_eq(sf__rename_pair(path[2], path[0], path[3], path[1], &failed), -EISDIR);
		cr_expect_str_eq(failed, path[at]);
		cr_expect_str_eq(get(kept, buf, sizeof(buf)), "notes");
		cr_expect_str_eq(get(path[1 - at], buf, sizeof(buf)),
				 at ? "old data" : "old index");
		cr_expect_str_eq(get(path[2], buf, sizeof(buf)), "new data");
		cr_expect_str_eq(get(path[3], buf, sizeof(buf)), "new index");
		cr_assert_eq(unlink(kept), 0);
		cr_assert_eq(rmdir(path[at]), 0);
		put(path[at], at ? "old index" : "old data");
	}
}

static char on_term_saw[2][64];

/* What `tokenize`'s handler does (cli/cmd_tokenize.c): remove the temporaries. */
static void on_term(int sig)
{
	(void)sig;
	for (int i = 0; i < 2; i++)
		if (!get(path[i], on_term_saw[i], sizeof(on_term_saw[i])))
			strcpy(on_term_saw[i], "(none)");
	unlink(path[2]);
	unlink(path[3]);
}

static void term_when_aside(int point)
{
	if (point == SF_TP_PAIR_ASIDE)
		raise(SIGTERM);
}

/*
 * A stop signal while the pair moves, whose handler removes the temporaries: it ran with
 * the old pair aside and removed the new one, leaving neither at the names (a review).
 * It waits for the move's end now, and finds the new pair in place.
 */
Test(rename_pair, a_stop_signal_waits_for_the_move)
{
	struct sigaction sa = {.sa_handler = on_term}, old;
	const char *failed = "?";
	char buf[64];

	put(path[3], "new index");
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGTERM, &sa, &old), 0);
	sf__test_hook = term_when_aside;
	cr_expect_eq(sf__rename_pair(path[2], path[0], path[3], path[1], &failed), 0);
	sf__test_hook = NULL;
	sigaction(SIGTERM, &old, NULL);
	cr_expect_null(failed);
	cr_expect_str_eq(on_term_saw[0], "new data");
	cr_expect_str_eq(on_term_saw[1], "new index");
	cr_expect_str_eq(get(path[0], buf, sizeof(buf)), "new data");
	cr_expect_str_eq(get(path[1], buf, sizeof(buf)), "new index");
}
