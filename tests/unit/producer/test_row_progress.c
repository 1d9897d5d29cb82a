/*
 * The copy of a pre-tokenized row renews the producer's heartbeat as it goes. A row of
 * gigabytes from cold storage took longer than the stall timeout with no heartbeat, and
 * the launcher killed its producer as stalled again and again (a review). This program
 * stands in for the producer's sf__producer_progress() (the linker takes this definition
 * before the library's, whose object it then never loads) and counts what it is told.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/producer.h"
#include "tests/unit/producer/source_fixture.h"

static uint64_t calls, total, largest;

void sf__producer_progress(uint64_t bytes)
{
	calls++;
	total += bytes;
	if (bytes > largest)
		largest = bytes;
}

/* A sparse file of `bytes` (zeros: token 0) at `path`. */
static void sparse(uint64_t bytes)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)bytes), 0);
	close(fd);
}

/* Fill step 0 of the fixture's job; the row bytes the heartbeat was told of. */
static void fill_one(void)
{
	struct sf_dataset *ds = NULL;
	struct sf_builder *b = NULL;
	struct sf_err e = {0};
	uint64_t first;
	uint32_t len;
	unsigned char *buf;

	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_create(ds, &b, &e), 0, "%s", e.msg);
	buf = malloc(sf__dataset_payload_bytes(ds));
	cr_assert_not_null(buf);
	calls = total = largest = 0;
	cr_assert_eq(sf__builder_fill(b, 0, 0, buf, &len, &first, &e), 0, "%s", e.msg);
	free(buf);
	sf__builder_free(b);
	sf__dataset_close(ds);
}

#define T (8u << 20) /* tokens of a row: 16 MiB of uint16, 32 MiB of int32 */

TestSuite(row_progress, .fini = source_fixture_teardown);

Test(row_progress, a_huge_row_renews_the_heartbeat_as_it_is_copied)
{
	source_fixture_setup("rowprog", 1, T);
	snprintf(path, sizeof(path), "%s/big.bin", dir);
	src.format = SF_FMT_NANOGPT;
	sparse(2ull * (T + 1) * 3);
	fill_one();
	cr_expect_geq(total, 2ull * (T + 1), "told of %llu bytes of a %llu-byte row",
		      (unsigned long long)total, 2ull * (T + 1));
	cr_expect_leq(largest, 2 * SF_HEARTBEAT_BYTES, "%llu bytes at once",
		      (unsigned long long)largest);
	cr_expect_geq(calls, 2ull * (T + 1) / (2 * SF_HEARTBEAT_BYTES), "%llu calls",
		      (unsigned long long)calls);
}

Test(row_progress, a_row_across_files_and_of_int32_too)
{
	uint32_t *tokens = calloc(T, 4);
	char p2[4200];

	source_fixture_setup("rowprog", 1, T);
	cr_assert_not_null(tokens);
	/* Two llama-3 llm.c shards of T tokens: the row spans both. */
	snprintf(path, sizeof(path), "%s/a.bin", dir);
	write_llmc_datafile(path, tokens, T, "llama-3");
	snprintf(p2, sizeof(p2), "%s/b.bin", dir);
	write_llmc_datafile(p2, tokens, T, "llama-3");
	free(tokens);
	snprintf(path, sizeof(path), "%s", dir);
	src.format = SF_FMT_LLMC;
	cfg.mode = SF_SAMPLE_RANDOM;
	fill_one();
	cr_expect_geq(total, 4ull * (T + 1), "told of %llu bytes", (unsigned long long)total);
	cr_expect_leq(largest, 2 * SF_HEARTBEAT_BYTES, "%llu bytes at once",
		      (unsigned long long)largest);
}
