/*
 * Inputs that change or lie under a job, one test each (issue 12): a source truncated or
 * rewritten while batches are built, ids outside the vocabulary, a token-count index
 * whose fields lie, and paths that are not regular files. Each must end in an error that
 * names the file (and the byte offset where there is one), never in wrong data, a crash
 * or a hang.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/slot.h"
#include "producer/chunk_share.h"
#include "producer/dataset_impl.h"
#include "producer/index_file.h"
#include "producer/producer.h"
#include "producer/text_cache.h"
#include "producer/text_index.h"
#include "producer/token_copy.h"
#include "producer/workers.h"
#include "tests/unit/producer/source_fixture.h"

static void setup(void)
{
	source_fixture_setup("hardtest", 4, 64);
}

TestSuite(hardening, .init = setup, .fini = source_fixture_teardown);

/* A nanoGPT file of `n` uint16 tokens, token i = i % modulo. */
static void put_tokens(const char *name, size_t n, uint32_t modulo)
{
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	cr_assert(f);
	for (size_t i = 0; i < n; i++) {
		uint16_t v = (uint16_t)(i % modulo);

		cr_assert_eq(fwrite(&v, 2, 1, f), 1);
	}
	cr_assert_eq(fclose(f), 0);
}

/* Build steps [from, to) with `b` until one fails; returns the error or 0. */
static int fill_steps(struct sf_dataset *ds, struct sf_builder *b, uint64_t from, uint64_t to,
		      struct sf_err *e)
{
	void *payload = malloc(sf__dataset_payload_bytes(ds));
	uint64_t first;
	uint32_t len;
	int r = 0;

	cr_assert(payload);
	for (uint64_t s = from; s < to && r == 0; s++)
		r = sf__producer_fill(ds, b, 0, s, payload, &len, &first, e);
	free(payload);
	return r;
}

/* Build steps [0, to) with a new builder. */
static int fill_until_error(struct sf_dataset *ds, uint64_t to, struct sf_err *e)
{
	struct sf_builder *b = NULL;
	int r;

	cr_assert_eq(sf__builder_create(ds, &b, e), 0, "%s", e->msg);
	r = fill_steps(ds, b, 0, to, e);
	sf__builder_free(b);
	return r;
}

Test(hardening, truncated_source_is_an_error_naming_file_and_offset)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	put_tokens("a.bin", 1 << 20, 50000);
	struct sf_builder *b = NULL;

	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_create(ds, &b, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_steps(ds, b, 0, 4, &e), 0, "%s", e.msg);
	cr_assert_eq(truncate(path, 4096), 0);
	/* Within the epoch nothing checks the file: without the SIGBUS guard this process
	 * dies of signal 7 here. */
	cr_assert_eq(fill_steps(ds, b, 4, 1000, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path), "%s", e.msg);
	cr_expect(strstr(e.msg, ": byte ") && strstr(e.msg, "shorter than when the job opened"),
		  "%s", e.msg);
	sf__builder_free(b);
	sf__dataset_close(ds);
}

/* Rewrite `path` in place with zeros, the same size: inode and size stay, mtime moves. */
static void zero_in_place(void)
{
	struct stat st;
	char *zeros;
	int fd = open(path, O_WRONLY);

	cr_assert(fd >= 0 && fstat(fd, &st) == 0);
	zeros = calloc(1, (size_t)st.st_size);
	cr_assert(zeros);
	usleep(10000); /* a later modification time even on a coarse clock */
	cr_assert_eq(pwrite(fd, zeros, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	free(zeros);
}

Test(hardening, source_rewritten_in_place_is_found)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	put_tokens("a.bin", 4096, 50000);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__dataset_check_files(ds, &e), 0, "%s", e.msg);
	zero_in_place();
	cr_assert_eq(sf__dataset_check_files(ds, &e), SF_E_SOURCE);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "changed under the running job"), "%s",
		  e.msg);
	/* A builder checks at its first batch and again at each epoch's first. */
	cr_assert_eq(fill_until_error(ds, 1, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path), "%s", e.msg);
	sf__dataset_close(ds);
}

Test(hardening, text_file_replaced_stops_before_its_chunk_is_tokenized)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	char text[8192], moved[4200];
	FILE *f;

	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = i % 7 == 6 ? ' ' : (char)('a' + i % 26);
	snprintf(path, sizeof(path), "%s/a.txt", dir);
	f = fopen(path, "wb");
	cr_assert(f && fwrite(text, 1, sizeof(text), f) == sizeof(text) && fclose(f) == 0);
	cfg.encoding = "bytes";
	cfg.epochs = 0;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	/* Replaced by rename, as editors and rsync do: the name now holds another inode. */
	snprintf(moved, sizeof(moved), "%s.new", path);
	f = fopen(moved, "wb");
	cr_assert(f && fwrite(text, 1, sizeof(text), f) == sizeof(text) && fclose(f) == 0);
	cr_assert_eq(rename(moved, path), 0);
	cr_assert_eq(fill_until_error(ds, 1, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "another file now has its name"), "%s",
		  e.msg);
	sf__dataset_close(ds);
}

/* ---- the token-count index ---- */

/* The layout of producer/index_file.c: struct index_header, then one struct
 * index_file_entry per file, then one struct index_chunk_entry per chunk. */
#define INDEX_HEADER_BYTES 552
#define FILE_ENTRY_BYTES   120
#define FILE_MAX_DOC	   48 /* in a file entry */
#define FILE_SKIPPED	   64
#define CHUNK_ENTRY_BYTES  40
#define CHUNK_OFF	   0 /* in a chunk entry */
#define CHUNK_LEN	   8
#define CHUNK_LINE	   16
#define CHUNK_DOCS	   24
#define CHUNK_TOKENS	   32
/* Field `field` of chunk `c` of the index of one file. */
#define CHUNK_AT(c, field) (INDEX_HEADER_BYTES + FILE_ENTRY_BYTES + (c)*CHUNK_ENTRY_BYTES + (field))

/* A text file of `n_docs` documents of words separated by blank lines. */
static void put_text(const char *name, size_t n_docs)
{
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	cr_assert(f);
	for (size_t d = 0; d < n_docs; d++) {
		for (size_t w = 0; w < 40 + d % 13; w++)
			fprintf(f, "word%zu ", (d * 31 + w) % 97);
		fputs("\n\n", f);
	}
	cr_assert_eq(fclose(f), 0);
	cfg.encoding = "bytes";
	cfg.epochs = 1;
	src.separator = "\n\n";
}

/* The one index file in the cache directory. */
static char ipath[4096];

static void find_index(void)
{
	glob_t g;
	char pattern[128];

	snprintf(pattern, sizeof(pattern), "%s/index/*.sfidx", dir);
	cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no index in %s", dir);
	cr_assert_eq(g.gl_pathc, 1);
	snprintf(ipath, sizeof(ipath), "%s", g.gl_pathv[0]);
	globfree(&g);
}

/* A text file of 2000 documents whose index is built and cached (in ipath). */
static void text_with_index(void)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	put_text("a.txt", 2000);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_assert_eq(st.index_loaded, 0);
	cr_assert_gt(st.n_chunks, 3);
	sf__dataset_close(ds);
	find_index();
}

/*
 * Set the 64-bit field at byte `at` of the index to `value` (added to it with `add`) and
 * write the file back with a valid checksum, as someone forging it would.
 */
static void forge_index(size_t at, uint64_t value, int add)
{
	struct stat sb;
	unsigned char *buf;
	uint64_t v, sum;
	FILE *f;

	cr_assert_eq(stat(ipath, &sb), 0);
	buf = malloc((size_t)sb.st_size);
	f = fopen(ipath, "rb");
	cr_assert(buf && f && fread(buf, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size);
	fclose(f);
	memcpy(&v, buf + at, 8);
	v = add ? v + value : value;
	memcpy(buf + at, &v, 8);
	sum = XXH3_64bits(buf, (size_t)sb.st_size - 8);
	memcpy(buf + sb.st_size - 8, &sum, 8);
	f = fopen(ipath, "wb");
	cr_assert(f && fwrite(buf, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size &&
		  fclose(f) == 0);
	free(buf);
}

/* Open the dataset and expect the cached index passed over and the counts rebuilt. */
static void expect_rebuilt(struct sf_dataset_stats *ret_st)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, ret_st);
	cr_expect_eq(ret_st->index_loaded, 0);
	sf__dataset_close(ds);
}

Test(hardening, lowered_index_count_never_gives_wrong_batches)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	int r;

	text_with_index();
	/* Chunk 1 counts 100 tokens fewer, under a valid checksum. */
	forge_index(CHUNK_AT(1, CHUNK_TOKENS), (uint64_t)-100, 1);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_assert_eq(st.index_loaded, 1);
	/* Every batch of an epoch: the chunk is tokenized and its count found wrong. */
	r = fill_until_error(ds, st.n_steps, &e);
	cr_assert_eq(r, SF_E_SOURCE, "got %d: %s", r, e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, ipath), "%s", e.msg);
	sf__dataset_close(ds);
	/* The lying index is gone: the next run counts again. */
	cr_expect_neq(access(ipath, F_OK), 0, "%s is still there", ipath);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.index_loaded, 0);
	cr_expect_eq(fill_until_error(ds, st.n_steps, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
}

Test(hardening, index_of_another_user_is_not_trusted)
{
	struct sf_dataset_stats st;

	if (geteuid() != 0)
		cr_skip_test("needs root to give a file to another user");
	text_with_index();
	cr_assert_eq(chown(ipath, 65534, 65534), 0);
	expect_rebuilt(&st);
}

/* Before: a loop of 2^40 skips at open. */
Test(hardening, index_with_a_huge_skip_count_is_rebuilt, .timeout = 10)
{
	struct sf_dataset_stats st;

	text_with_index();
	forge_index(INDEX_HEADER_BYTES + FILE_SKIPPED, UINT64_C(1) << 40, 0);
	expect_rebuilt(&st);
	cr_expect_eq(st.skipped, 0);
}

/*
 * An edit in place that keeps the size, with the mtime put back (touch -d, a tool that
 * preserves times): the cached index was taken as the file's. Its ctime, which no one
 * can set, says the file changed.
 */
Test(hardening, an_edit_that_keeps_size_and_mtime_is_seen)
{
	struct sf_dataset_stats st;
	struct timespec times[2];
	struct stat sb;
	FILE *f;

	text_with_index();
	cr_assert_eq(stat(path, &sb), 0);
	f = fopen(path, "r+b");
	cr_assert(f && fseek(f, 10, SEEK_SET) == 0 && fputs("XY", f) >= 0 && fclose(f) == 0);
	times[0] = sb.st_atim;
	times[1] = sb.st_mtim;
	cr_assert_eq(utimensat(AT_FDCWD, path, times, 0), 0);
	expect_rebuilt(&st);
}

/*
 * tokenize laid out each document's length from the index's document count and checked
 * only the token count: a chunk whose separators moved (same tokens, 1 document fewer)
 * left a document of length 0 in the .idx, and the run exited 0.
 */
Test(hardening, a_chunk_of_other_documents_stops_tokenize)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	char prefix[4200];

	text_with_index();
	forge_index(CHUNK_AT(1, CHUNK_DOCS), 1, 1);
	cr_assert_eq(sf__dataset_open_part(&cfg, NULL, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_assert_eq(st.index_loaded, 1);
	snprintf(prefix, sizeof(prefix), "%s/out", dir);
	cr_expect_eq(sf__dataset_write_megatron(ds, prefix, 1, NULL, NULL, &e), SF_E_SOURCE);
	cr_expect(strstr(e.msg, "documents but its index says"), "%s", e.msg);
	sf__dataset_close(ds);
	cr_expect_neq(access(ipath, F_OK), 0, "%s is still there", ipath);
	snprintf(prefix, sizeof(prefix), "%s/out.bin", dir);
	cr_expect_neq(access(prefix, F_OK), 0, "%s was written", prefix);
}

/* An index write past RLIMIT_FSIZE raised SIGXFSZ, which killed the launcher and left a
 * temporary file, on every run. Writing the index costs speed only: the job opens. */
Test(hardening, a_file_size_limit_only_leaves_the_index_uncached)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	glob_t g;
	char pattern[128];

	put_text("a.txt", 2000);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &(struct rlimit){512, 512}), 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_gt(st.n_chunks, 3);
	sf__dataset_close(ds);
	snprintf(pattern, sizeof(pattern), "%s/index/*", dir);
	cr_expect_eq(glob(pattern, 0, NULL, &g), GLOB_NOMATCH, "left: %s",
		     g.gl_pathc ? g.gl_pathv[0] : "");
	globfree(&g);
}

Test(hardening, index_with_impossible_counts_is_rebuilt)
{
	struct sf_dataset_stats st;

	text_with_index();
	/* Chunk 0 claims 2^50 tokens: more than its bytes can hold. */
	forge_index(CHUNK_AT(0, CHUNK_TOKENS), UINT64_C(1) << 50, 0);
	expect_rebuilt(&st);
	cr_expect_lt(st.n_tokens, UINT64_C(1) << 40);
}

/*
 * Open a dataset whose forged index passes every check at open, expect the first epoch's
 * batches to stop with a message holding `needle`, and the index removed.
 */
static void expect_lie_found_at_tokenization(const char *needle)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	int r;

	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_assert_eq(st.index_loaded, 1);
	r = fill_until_error(ds, st.n_steps, &e);
	cr_assert_eq(r, SF_E_SOURCE, "got %d: %s", r, e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, needle) && strstr(e.msg, ipath), "%s",
		  e.msg);
	sf__dataset_close(ds);
	cr_expect_neq(access(ipath, F_OK), 0, "%s is still there", ipath);
	expect_rebuilt(&st);
}

/* The index cuts chunk 1 a byte early: back to back, in range, but inside a document. */
Test(hardening, index_chunk_boundary_inside_a_document_is_found)
{
	text_with_index();
	forge_index(CHUNK_AT(0, CHUNK_LEN), (uint64_t)-1, 1);
	forge_index(CHUNK_AT(1, CHUNK_OFF), (uint64_t)-1, 1);
	forge_index(CHUNK_AT(1, CHUNK_LEN), 1, 1);
	expect_lie_found_at_tokenization("starts inside a document");
}

/* A chunk that counts fewer documents than it holds: the producers took it, and rows
 * came with document starts left out (the buffers for them are sized from the count). */
Test(hardening, index_document_count_too_low_is_found)
{
	text_with_index();
	forge_index(CHUNK_AT(1, CHUNK_DOCS), 1, 0);
	cfg.doc_starts = 4;
	expect_lie_found_at_tokenization("documents but its index says 1");
}

/* A longest document shorter than the real one would size the buffers too small. */
Test(hardening, index_longest_document_too_short_is_found)
{
	text_with_index();
	forge_index(INDEX_HEADER_BYTES + FILE_MAX_DOC, 8, 0);
	expect_lie_found_at_tokenization("longer than its index's longest");
}

/* The 64-bit field at byte `at` of the index. */
static uint64_t index_field(size_t at)
{
	uint64_t v = 0;
	FILE *f = fopen(ipath, "rb");

	cr_assert(f);
	cr_assert_eq(fseek(f, (long)at, SEEK_SET), 0);
	cr_assert_eq(fread(&v, 8, 1, f), 1);
	fclose(f);
	return v;
}

/*
 * A writer killed while it saved the index left INDEX.tmp.PID, and a later save by a
 * process of the same pid (a launcher that is always pid 1 in its container) failed on
 * it for good: no index was ever cached again (a review). A save now takes a name of its
 * own, and removes what killed writers left over an hour ago.
 */
Test(hardening, an_index_save_is_not_stopped_by_a_killed_writers_file)
{
	char mine[4200], old[4200];
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	FILE *f;

	text_with_index();
	snprintf(mine, sizeof(mine), "%s.tmp.%d", ipath, (int)getpid());
	snprintf(old, sizeof(old), "%s.tmp.123", ipath);
	cr_assert((f = fopen(mine, "w")) && fclose(f) == 0);
	cr_assert((f = fopen(old, "w")) && fclose(f) == 0);
	cr_assert_eq(utimensat(AT_FDCWD, old,
			       (const struct timespec[]){{.tv_sec = time(NULL) - 7200},
							 {.tv_sec = time(NULL) - 7200}},
			       0),
		     0);
	cr_assert_eq(unlink(ipath), 0);
	{
		/* Its mode honours the umask, as open() did (a review of the change). */
		mode_t old_mask = umask(077);
		struct stat sb;

		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		umask(old_mask);
		cr_expect_eq(stat(ipath, &sb), 0, "no index saved beside %s", mine);
		cr_expect_eq(sb.st_mode & 0777, 0600, "mode %o", sb.st_mode & 0777);
	}
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.index_loaded, 0);
	sf__dataset_close(ds);
	cr_expect_neq(access(old, F_OK), 0, "%s is still there", old);
	cr_expect_eq(access(mine, F_OK), 0, "a recent temporary file was removed");
	unlink(mine);
}

/*
 * A chunk whose count says it is too short for a window to start in it, while it holds
 * far more: it was read only as the tail of the chunk before, as far as that window goes,
 * and its count was checked only where the chunk ended first (a review: 18k tokens of a
 * chunk left out of every epoch, the job ended early with exit 0). Each middle chunk in
 * turn claims one token more than its documents, below a window of 2048 tokens.
 */
Test(hardening, a_chunk_said_too_short_for_a_window_is_found)
{
	uint64_t n_chunks;

	cfg.seq_len = 2048;
	text_with_index();
	n_chunks = index_field(32); /* the header's n_chunks */
	for (uint64_t k = 1; k + 1 < n_chunks; k++) {
		forge_index(CHUNK_AT(k, CHUNK_TOKENS), index_field(CHUNK_AT(k, CHUNK_DOCS)) + 1, 0);
		expect_lie_found_at_tokenization("tokens");
		find_index();
	}
}

/*
 * The same of the stream's last chunk where no head is shared (specials allowed, or bos
 * the end-of-text id): it was read as a tail only as far as its count said, which was
 * the stream's end, so its tokens past the count were left out of every epoch.
 */
Test(hardening, the_last_chunk_said_too_short_is_found_without_heads)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	uint64_t last;
	int r;

	cfg.seq_len = 2048;
	text_with_index();
	last = index_field(32) - 1; /* the header's n_chunks */
	forge_index(CHUNK_AT(last, CHUNK_TOKENS), index_field(CHUNK_AT(last, CHUNK_DOCS)) + 1, 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_assert_eq(st.index_loaded, 1);
	sf__share_free(ds->heads);
	ds->heads = NULL;
	r = fill_until_error(ds, st.n_steps, &e);
	cr_assert_eq(r, SF_E_SOURCE, "got %d: %s", r, e.msg);
	cr_expect(strstr(e.msg, "tokens") && strstr(e.msg, ipath), "%s", e.msg);
	sf__dataset_close(ds);
	cr_expect_neq(access(ipath, F_OK), 0, "%s is still there", ipath);
}

/*
 * Chunk 0 cut after its first document and the rest given to chunk 1, with the counts
 * moved to match (`bytes`: a token per byte, and <|endoftext|>): every field in range
 * and every count true, but chunk 1 now runs on past the document end where the rule
 * cuts chunks, so the windows would be ordered differently from a fresh index.
 */
Test(hardening, index_chunks_cut_against_the_rule_are_found)
{
	const char *sep;
	char head[4096];
	uint64_t d, len0, docs0, tok0;
	FILE *f;

	text_with_index();
	f = fopen(path, "rb");
	cr_assert(f && fread(head, 1, sizeof(head) - 1, f) > 0);
	fclose(f);
	head[sizeof(head) - 1] = 0;
	sep = strstr(head, "\n\n");
	cr_assert(sep);
	d = (uint64_t)(sep - head) + 2;
	len0 = index_field(CHUNK_AT(0, CHUNK_LEN));
	docs0 = index_field(CHUNK_AT(0, CHUNK_DOCS));
	tok0 = index_field(CHUNK_AT(0, CHUNK_TOKENS));
	forge_index(CHUNK_AT(0, CHUNK_LEN), d, 0);
	forge_index(CHUNK_AT(0, CHUNK_DOCS), 1, 0);
	forge_index(CHUNK_AT(0, CHUNK_TOKENS), d - 1, 0);
	forge_index(CHUNK_AT(1, CHUNK_OFF), d, 0);
	forge_index(CHUNK_AT(1, CHUNK_LINE), 3, 0); /* after the first document's "\n\n" */
	forge_index(CHUNK_AT(1, CHUNK_LEN), len0 - d, 1);
	forge_index(CHUNK_AT(1, CHUNK_DOCS), docs0 - 1, 1);
	forge_index(CHUNK_AT(1, CHUNK_TOKENS), tok0 - (d - 1), 1);
	expect_lie_found_at_tokenization("where chunks are cut");
}

/*
 * Chunk 0 of two cut a document early, that document given to chunk 1 (which ends with
 * the file), the counts moved to match: chunk 0 now ends before the size where chunks
 * are cut, so the windows would be ordered differently from a fresh index. Nothing
 * found it: each chunk lay on document boundaries and none went on past a cut.
 */
Test(hardening, index_chunk_that_ends_before_the_cut_is_found)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	static char text[1 << 18];
	uint64_t d, len0, docs0, tok0, moved;
	size_t n;
	FILE *f;

	put_text("a.txt", 300);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_assert_eq(st.n_chunks, 2);
	sf__dataset_close(ds);
	find_index();
	f = fopen(path, "rb");
	cr_assert(f);
	n = fread(text, 1, sizeof(text), f);
	fclose(f);
	len0 = index_field(CHUNK_AT(0, CHUNK_LEN));
	docs0 = index_field(CHUNK_AT(0, CHUNK_DOCS));
	tok0 = index_field(CHUNK_AT(0, CHUNK_TOKENS));
	cr_assert(len0 > 4 && len0 < n);
	/* The start of chunk 0's last document: after the "\n\n" before its own. */
	for (d = len0 - 3; d > 0 && !(text[d - 1] == '\n' && text[d - 2] == '\n'); d--)
		;
	moved = len0 - d - 1; /* its bytes less the separator, and <|endoftext|> */
	forge_index(CHUNK_AT(0, CHUNK_LEN), d, 0);
	forge_index(CHUNK_AT(0, CHUNK_DOCS), docs0 - 1, 0);
	forge_index(CHUNK_AT(0, CHUNK_TOKENS), tok0 - moved, 0);
	forge_index(CHUNK_AT(1, CHUNK_OFF), d, 0);
	forge_index(CHUNK_AT(1, CHUNK_LINE), 2 * (docs0 - 1) + 1, 0);
	forge_index(CHUNK_AT(1, CHUNK_LEN), len0 - d, 1);
	forge_index(CHUNK_AT(1, CHUNK_DOCS), 1, 1);
	forge_index(CHUNK_AT(1, CHUNK_TOKENS), moved, 1);
	expect_lie_found_at_tokenization("ends before");
}

/*
 * With on_error: skip, a file that could not be decompressed for want of memory was
 * dropped like a malformed one: the stream, and every batch, then depended on memory
 * pressure at open. Only what the file holds is skipped; a failure of this process
 * fails the open. Run in a child under RLIMIT_AS, which the decompression's 64 MiB pass.
 */
Test(hardening, a_file_that_cannot_be_decompressed_for_memory_is_not_skipped, .timeout = 30)
{
	static char line[4096];
	char gz[4096 + 8];
	gzFile g;
	pid_t pid;
	int status;

	put_text("a.txt", 400);
	snprintf(gz, sizeof(gz), "%s/b.txt.gz", dir);
	g = gzopen(gz, "wb9");
	cr_assert(g);
	memset(line, 'x', sizeof(line) - 2);
	line[sizeof(line) - 2] = '\n';
	for (int i = 0; i < (64 << 20) / (int)(sizeof(line) - 1); i++)
		cr_assert_gt(gzputs(g, line), 0);
	cr_assert_eq(gzclose(g), Z_OK);
	src.paths[0] = dir;
	src.on_error = SF_ON_ERROR_SKIP;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};
		unsigned long pages = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		int r;

		if (!f || fscanf(f, "%lu", &pages) != 1)
			_exit(3);
		fclose(f);
		/* 32 MiB above what the process maps now: the text fits, the 64 MiB not. */
		rlim_t as = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (32u << 20);
		if (setrlimit(RLIMIT_AS, &(struct rlimit){as, as}) < 0)
			_exit(3);
		r = sf__dataset_open(&cfg, &ds, &e);
		if (r == 0)
			sf__dataset_close(ds);
		fprintf(stderr, "open: %d %s\n", r, e.msg);
		_exit(r == -ENOMEM && strstr(e.msg, "b.txt.gz") ? 0 : r == 0 ? 1 : 2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child status %#x (exit 1: the file was skipped)", status);
}

/* ---- paths that are not regular files ---- */

/* Opening the dataset must fail fast, naming `needle`, with code SF_E_TOKENIZER. */
static void expect_tokenizer_refused(const char *encoding, const char *vocab, const char *needle)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	uint32_t width;
	int r;

	put_tokens("a.bin", 4096, 200);
	cfg.encoding = (char *)encoding;
	cfg.vocab = (char *)vocab;
	r = sf__dataset_open(&cfg, &ds, &e);
	cr_assert_eq(r, SF_E_TOKENIZER, "got %d: %s", r, e.msg);
	cr_expect(strstr(e.msg, needle) && strstr(e.msg, "not a regular file"), "%s", e.msg);
	cr_expect_eq(sf__dataset_check(&cfg, &width, &e), SF_E_TOKENIZER, "%s", e.msg);
}

/* Before: read until memory ran out (13 GB in 30 s for /dev/zero). */
Test(hardening, vocabulary_from_dev_zero_is_refused, .timeout = 10)
{
	expect_tokenizer_refused("r50k_base", "/dev/zero", "/dev/zero");
}

Test(hardening, vocabulary_from_dev_urandom_is_refused, .timeout = 10)
{
	expect_tokenizer_refused("r50k_base", "/dev/urandom", "/dev/urandom");
}

/* Before: hung reading a stream without end. */
Test(hardening, char_corpus_from_dev_zero_is_refused, .timeout = 10)
{
	expect_tokenizer_refused("char:/dev/zero", NULL, "/dev/zero");
}

Test(hardening, vocabulary_from_a_fifo_is_refused, .timeout = 10)
{
	char fifo[128];

	snprintf(fifo, sizeof(fifo), "%s/vocab.fifo", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	expect_tokenizer_refused("r50k_base", fifo, fifo);
}

Test(hardening, source_that_is_a_fifo_is_refused, .timeout = 10)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	snprintf(path, sizeof(path), "%s/a.txt", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	cfg.encoding = "bytes";
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "not a regular file"), "%s", e.msg);
	snprintf(path, sizeof(path), "%s/b.bin", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "not a regular file"), "%s", e.msg);
}

/* Before: open() of the FIFO waited for a writer forever. */
Test(hardening, index_that_is_a_fifo_is_passed_over, .timeout = 10)
{
	struct sf_dataset_stats st;

	text_with_index();
	cr_assert_eq(unlink(ipath), 0);
	cr_assert_eq(mkfifo(ipath, 0600), 0);
	expect_rebuilt(&st);
}

/* The size of the one index file, after opening (and closing) the dataset. */
static off_t index_size_after_open(void)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	struct stat sb;

	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
	find_index();
	cr_assert_eq(stat(ipath, &sb), 0);
	return sb.st_size;
}

/*
 * Shards that rotate (a new file a day, old ones deleted): the index kept an entry for
 * every file it ever saw, each start reading and writing them all. An entry whose file
 * is gone from the directory is dropped when the index is written again.
 */
Test(hardening, the_index_forgets_files_gone_from_its_directory)
{
	char pattern[4200];
	char *p = pattern;
	off_t two;

	put_text("a.txt", 300);
	put_text("b.txt", 300);
	snprintf(pattern, sizeof(pattern), "%s/*.txt", dir);
	src.paths = &p;
	two = index_size_after_open();
	snprintf(path, sizeof(path), "%s/b.txt", dir);
	cr_assert_eq(unlink(path), 0);
	put_text("c.txt", 300); /* new: the index is written again */
	cr_expect_eq(index_size_after_open(), two, "an entry of the deleted b.txt stayed");
}

/*
 * Two jobs over one directory, reading other files, that start together: each merged into
 * the index what it had loaded when it started, so the second save dropped the first's
 * entries (a warm start lost). A save merges what the index holds when it writes.
 */
Test(hardening, a_save_keeps_what_another_job_saved_since_it_loaded)
{
	struct sf_dataset *a = NULL, *b = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	char *p = path, *saved = NULL;
	uint64_t bytes;
	uint32_t first = 0;

	put_text("a.txt", 300);
	put_text("b.txt", 300);
	snprintf(path, sizeof(path), "%s/a.txt", dir);
	src.paths = &p;
	cr_assert_eq(sf__dataset_open(&cfg, &a, &e), 0, "%s", e.msg);
	snprintf(path, sizeof(path), "%s/b.txt", dir);
	cr_assert_eq(sf__dataset_open(&cfg, &b, &e), 0, "%s", e.msg);
	sf__dataset_close(b);
	/* Job a saves as it would have had it loaded the index before b wrote it. */
	cr_assert_eq(sf__index_save(a, &first, 1, sf__index_key(a, &a->text_files[0]), NULL,
				    &saved, &bytes),
		     0);
	free(saved);
	sf__dataset_close(a);
	cr_assert_eq(sf__dataset_open(&cfg, &b, &e), 0, "%s", e.msg);
	sf__dataset_stats(b, &st);
	cr_expect_eq(st.index_loaded, 1, "b.txt's entry was lost");
	sf__dataset_close(b);
}

/* A lock on the directory that is not a save's (held by some other program) is waited
 * for a few seconds only: the job starts, with its index written. */
Test(hardening, a_lock_held_on_the_directory_does_not_hold_the_job, .timeout = 30)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	char index_dir[4200];
	int fd;

	put_text("a.txt", 300);
	snprintf(index_dir, sizeof(index_dir), "%s/index", dir);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
	find_index();
	cr_assert_eq(unlink(ipath), 0);
	fd = open(index_dir, O_RDONLY | O_DIRECTORY);
	cr_assert_geq(fd, 0, "%s", index_dir);
	cr_assert_eq(flock(fd, LOCK_EX), 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
	close(fd);
	cr_expect_eq(access(ipath, F_OK), 0, "no index written");
}

/* ---- file names with glob characters ---- */

Test(hardening, existing_file_named_like_a_glob_is_taken_literally)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	char other[4200];

	/* "a[1].bin" as a glob matches "a1.bin" only; the file of that very name is meant. */
	put_tokens("a[1].bin", 4096, 200);
	snprintf(other, sizeof(other), "%s/a1.bin", dir);
	cr_assert_eq(symlink("/nonexistent", other), 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_files, 1);
	cr_expect_eq(st.n_tokens, 4096);
	sf__dataset_close(ds);
	put_tokens("b*.bin", 2048, 200);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_tokens, 2048);
	sf__dataset_close(ds);
}

/* ---- ids outside the vocabulary ---- */

/* The GPT-2 vocabulary of the shared test data (meson passes its folder). */
static char r50k[4096];

static int have_r50k(void)
{
	const char *d = getenv("SF_SHARED_DATA");

	snprintf(r50k, sizeof(r50k), "%s/vocab/r50k_base.tiktoken", d ? d : "../shared/data");
	return access(r50k, R_OK) == 0;
}

Test(hardening, gpt2_vocab_dir_reads_r50k_base_tiktoken)
{
	struct sf_err e = {0};
	char vocab_dir[4096];
	uint32_t width;

	if (!have_r50k())
		cr_skip_test("no shared test data at %s", r50k);
	snprintf(vocab_dir, sizeof(vocab_dir), "%.*s", (int)(strrchr(r50k, '/') - r50k), r50k);
	put_tokens("a.bin", 4096, 200);
	cfg.encoding = "gpt2";
	cfg.vocab_dir = vocab_dir;
	cr_expect_eq(sf__dataset_check(&cfg, &width, &e), 0, "%s", e.msg);
	/* The same file through $SHMFEED_VOCAB_DIR, which the tokenizer's digest reads. */
	cfg.vocab_dir = NULL;
	cr_assert_eq(setenv("SHMFEED_VOCAB_DIR", vocab_dir, 1), 0);
	cr_expect_eq(sf__dataset_check(&cfg, &width, &e), 0, "%s", e.msg);
	unsetenv("SHMFEED_VOCAB_DIR");
}

Test(hardening, id_outside_the_vocabulary_names_file_and_offset)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	uint16_t bad = 60000;
	FILE *f;

	if (!have_r50k())
		cr_skip_test("no shared test data at %s", r50k);
	put_tokens("a.bin", 8192, 50257);
	cfg.encoding = "r50k_base";
	cfg.vocab = r50k;
	cfg.epochs = 1;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	/* Every id is below 50257: a whole epoch builds. */
	cr_assert_eq(fill_until_error(ds, 1000, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
	f = fopen(path, "r+b");
	cr_assert(f && fseek(f, 2 * 5000, SEEK_SET) == 0 && fwrite(&bad, 2, 1, f) == 1);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 1000, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "byte 10000: token 60000 is outside the "
						       "vocabulary of 50257 ids"),
		  "%s", e.msg);
	sf__dataset_close(ds);
}

Test(hardening, wide_ids_outside_the_vocabulary_are_found_too)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	uint32_t ids[4096];

	if (!have_r50k())
		cr_skip_test("no shared test data at %s", r50k);
	for (uint32_t i = 0; i < 4096; i++)
		ids[i] = i == 3000 ? 50257 : i;
	snprintf(path, sizeof(path), "%s/a.bin", dir);
	write_llmc_datafile(path, ids, 4096, "llama-3");
	cfg.encoding = "r50k_base";
	cfg.vocab = r50k;
	cfg.dtype = SF_DTYPE_I32;
	cfg.epochs = 1;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 1000, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "byte 13024: token 50257 is outside"), "%s",
		  e.msg);
	sf__dataset_close(ds);
	/* An id of 2^31 or more says what it is as an int32 too (Megatron's int32 -100, a
	 * label mask written as a token, was only "token 4294967196"). */
	ids[3000] = (uint32_t)-100;
	write_llmc_datafile(path, ids, 4096, "llama-3");
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 1000, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, "byte 13024: token 4294967196 (-100 as an int32) is outside"),
		  "%s", e.msg);
	sf__dataset_close(ds);
}

/* With the default encoding (`bytes`, no vocabulary to hold ids to), an id of 2^31 or
 * more in a 4-byte token file reached the ranks as a negative int32. */
Test(hardening, ids_an_int32_arena_reads_as_negative_are_refused)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	uint32_t ids[4096];

	for (uint32_t i = 0; i < 4096; i++)
		ids[i] = i == 3000 ? 0xffffffffu : i * 1000u;
	snprintf(path, sizeof(path), "%s/a.bin", dir);
	write_llmc_datafile(path, ids, 4096, "llama-3");
	cfg.epochs = 1;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 1000, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, path) &&
			  strstr(e.msg, "byte 13024: token 4294967295 does not fit the arena's "
					"int32 (it would read as -1)"),
		  "%s", e.msg);
	sf__dataset_close(ds);
	/* 2^31 - 1 is the largest id an int32 holds: a whole epoch builds. */
	ids[3000] = 0x7fffffffu;
	write_llmc_datafile(path, ids, 4096, "llama-3");
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 1000, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
}

/* ---- the end-of-text id of pre-tokenized sources ---- */

/* An llm.c gpt-2 shard of 4096 tokens: every 10th is GPT-2's <|endoftext|> (50256), the
 * others 256, an ordinary GPT-2 token that the byte tokenizer takes for its end-of-text. */
static void put_gpt2_documents(void)
{
	uint32_t tokens[4096];

	for (uint32_t i = 0; i < 4096; i++)
		tokens[i] = i % 10 == 9 ? 50256 : 256;
	snprintf(path, sizeof(path), "%s/docs.bin", dir);
	write_llmc_datafile(path, tokens, 4096, "gpt-2");
}

Test(hardening, document_starts_without_an_end_of_text_id_are_a_config_error)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	put_gpt2_documents();
	cfg.doc_starts = 4;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), SF_E_CONFIG, "%s", e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "tokenizer.eot_id") &&
			  strstr(e.msg, "tokenizer.encoding"),
		  "%s", e.msg);
	/* Without document starts no end-of-text id is needed. */
	cfg.doc_starts = 0;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
}

Test(hardening, eot_id_marks_the_document_starts_of_token_files)
{
	struct sf_dataset *ds = NULL;
	struct sf_builder *b = NULL;
	struct sf_err e = {0};
	const uint32_t B = 4, L = 65, D = 8;
	unsigned char *payload;
	const uint16_t *rows;
	const uint32_t *starts;
	uint64_t first;
	uint32_t len, seen = 0;

	put_gpt2_documents();
	cfg.doc_starts = D;
	cfg.eot_id = 50256;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_create(ds, &b, &e), 0, "%s", e.msg);
	payload = malloc(sf__dataset_payload_bytes(ds));
	cr_assert(payload);
	cr_assert_eq(sf__producer_fill(ds, b, 0, 0, payload, &len, &first, &e), 0, "%s", e.msg);
	rows = (const uint16_t *)payload;
	starts = (const uint32_t *)(payload + sf__doc_starts_offset(B, L, 2));
	for (uint32_t r = 0; r < B; r++)
		for (uint32_t i = 0; i < D && starts[r * D + i] != UINT32_MAX; i++) {
			uint32_t s = starts[r * D + i];

			cr_assert_lt(s, L);
			if (s)
				cr_expect_eq(rows[r * L + s - 1], 50256,
					     "row %u: a start at %u follows %u", r, s,
					     rows[r * L + s - 1]);
			seen++;
		}
	cr_expect_geq(seen, B * 5, "only %u document starts in %u rows", seen, B);
	free(payload);
	sf__builder_free(b);
	sf__dataset_close(ds);
}

/* ---- raw text and pre-tokenized sources in one job ---- */

/* DIR/text.txt (paragraphs of letters) and DIR/ids.bin (4000 ids, id i = i % modulo). */
static char text_path[4096], ids_path[4096];

static void put_text_and_ids(uint32_t modulo)
{
	FILE *f;

	snprintf(text_path, sizeof(text_path), "%s/text.txt", dir);
	f = fopen(text_path, "w");
	cr_assert(f);
	for (int i = 0; i < 50; i++)
		fprintf(f, "paragraph %d of some words to read\n\n", i);
	cr_assert_eq(fclose(f), 0);
	put_tokens("ids.bin", 4000, modulo);
	snprintf(ids_path, sizeof(ids_path), "%s", path);
}

Test(hardening, a_job_without_a_mixture_reads_one_kind_of_source)
{
	char *both[2] = {text_path, ids_path};
	struct sf_err e = {0};
	uint32_t width;

	put_text_and_ids(256);
	src.paths = both;
	src.n_paths = 2;
	cfg.encoding = "bytes";
	cr_assert_eq(sf__dataset_check(&cfg, &width, &e), SF_E_CONFIG, "%s", e.msg);
	cr_expect(strstr(e.msg, "not both") && strstr(e.msg, "mixtures.md"), "%s", e.msg);
}

Test(hardening, a_mixture_source_of_both_kinds_is_refused)
{
	char *both[2] = {text_path, ids_path}, *one[1] = {ids_path};
	struct sf_source_config two[2] = {
		{.paths = both, .n_paths = 2, .name = "mixed", .weight = 1000000000},
		{.paths = one, .n_paths = 1, .name = "ids", .weight = 1000000000},
	};
	struct sf_err e = {0};
	uint32_t width;

	put_text_and_ids(256);
	cfg.sources = two;
	cfg.n_sources = 2;
	cfg.mixture = 1;
	cfg.encoding = "bytes";
	cr_assert_eq(sf__dataset_check(&cfg, &width, &e), SF_E_CONFIG, "%s", e.msg);
	cr_expect(strstr(e.msg, "source 'mixed' holds both raw text") && strstr(e.msg, text_path) &&
			  strstr(e.msg, ids_path),
		  "%s", e.msg);
	/* One kind per source mixes. */
	two[0].paths = (char *[]){text_path};
	two[0].n_paths = 1;
	cr_assert_eq(sf__dataset_check(&cfg, &width, &e), 0, "%s", e.msg);
}

/* With raw text the job's encoding is that of its token files too, `bytes` included:
 * their ids are held to its vocabulary (257 ids). */
Test(hardening, ids_mixed_with_raw_text_are_held_to_the_job_vocabulary)
{
	char *text[1] = {text_path}, *ids[1] = {ids_path};
	struct sf_source_config two[2] = {
		{.paths = text,
		 .n_paths = 1,
		 .name = "text",
		 .separator = "\n\n",
		 .weight = 1000000000},
		{.paths = ids, .n_paths = 1, .name = "ids", .weight = 1000000000},
	};
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	put_text_and_ids(300);
	cfg.sources = two;
	cfg.n_sources = 2;
	cfg.mixture = 1;
	cfg.encoding = "bytes";
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 200, &e), SF_E_SOURCE, "%s", e.msg);
	cr_expect(strstr(e.msg, ids_path) && strstr(e.msg, "outside the vocabulary of 257 ids"),
		  "%s", e.msg);
	sf__dataset_close(ds);
	/* Ids within it are delivered. */
	put_text_and_ids(256);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(fill_until_error(ds, 200, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
}

/* A vocabulary of more than 65536 ids widens the batch even when every token file of the
 * mixture holds 2-byte ids; uint16 is refused. */
Test(hardening, raw_text_of_a_wide_vocabulary_widens_a_mixture)
{
	char *text[1] = {text_path}, *ids[1] = {ids_path}, o200k[4096];
	struct sf_source_config two[2] = {
		{.paths = text, .n_paths = 1, .name = "text", .weight = 1000000000},
		{.paths = ids, .n_paths = 1, .name = "ids", .weight = 1000000000},
	};
	struct sf_err e = {0};
	uint32_t width = 0;

	if (!have_r50k())
		cr_skip_test("no shared test data at %s", r50k);
	snprintf(o200k, sizeof(o200k), "%.*s/o200k_base.tiktoken", (int)(strrchr(r50k, '/') - r50k),
		 r50k);
	put_text_and_ids(256);
	cfg.sources = two;
	cfg.n_sources = 2;
	cfg.mixture = 1;
	cfg.encoding = "o200k_base";
	cfg.vocab = o200k;
	cr_assert_eq(sf__dataset_check(&cfg, &width, &e), 0, "%s", e.msg);
	cr_expect_eq(width, 4);
	cfg.dtype = SF_DTYPE_U16;
	cr_assert_eq(sf__dataset_check(&cfg, &width, &e), SF_E_CONFIG, "%s", e.msg);
	cr_expect(strstr(e.msg, "uint16"), "%s", e.msg);
}

/*
 * A character vocabulary without 'a' or ' ' (encoding: char over a file of "hello"): the
 * encoders were warmed up on "a a a ...", which it cannot encode, and every batch and
 * `tokenize` failed with "character at byte 0 is not in the vocabulary" (found by a
 * review).
 */
Test(hardening, a_character_vocabulary_without_a_or_space_reads_its_text)
{
	static char spec[4200];
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	FILE *f;

	snprintf(path, sizeof(path), "%s/hello.txt", dir);
	f = fopen(path, "w");
	cr_assert(f);
	for (int i = 0; i < 40; i++)
		fputs("hello\nhell\noh\n", f);
	cr_assert_eq(fclose(f), 0);
	snprintf(spec, sizeof(spec), "char:%s", path);
	cfg.encoding = spec;
	cfg.epochs = 1;
	src.separator = "\n";
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_expect_eq(fill_until_error(ds, 4, &e), 0, "%s", e.msg);
	sf__dataset_close(ds);
}

/*
 * A character the char vocabulary lacks, or a byte that is not UTF-8, in a source: the
 * message named the vocabulary's corpus, not the source file, and a byte counted from
 * the document's start, which in the corpus named held a character it has ("char:C:
 * character at byte 3 is not in the vocabulary"; a review). It names the file, the
 * document (its first byte, or its JSONL line) and the character.
 */
Test(hardening, a_character_the_vocabulary_lacks_is_named_where_it_is)
{
	static char spec[4300], corpus[4200], want[9000];
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	FILE *f;

	snprintf(corpus, sizeof(corpus), "%s/corpus.txt", dir);
	f = fopen(corpus, "w");
	cr_assert(f && fputs("hello \n\"{}:tx", f) >= 0 && fclose(f) == 0);
	snprintf(spec, sizeof(spec), "char:%s", corpus);
	cfg.encoding = spec;
	src.separator = "\n";
	snprintf(path, sizeof(path), "%s/z.txt", dir);
	f = fopen(path, "w");
	cr_assert(f && fputs("hello hello\nhell\nhezlo\n", f) >= 0 && fclose(f) == 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), SF_E_TOKENIZER, "%s", e.msg);
	snprintf(want, sizeof(want),
		 "%s: the document at byte 17: the character U+007A at byte 2 is not in the "
		 "vocabulary of char:%s",
		 path, corpus);
	cr_expect(strstr(e.msg, want), "%s", e.msg);
	f = fopen(path, "w");
	cr_assert(f && fputs("hello\nhe\xffo\n", f) >= 0 && fclose(f) == 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), SF_E_TOKENIZER, "%s", e.msg);
	snprintf(want, sizeof(want), "%s: the document at byte 6: byte 2 (0xff) is not UTF-8",
		 path);
	cr_expect(strstr(e.msg, want), "%s", e.msg);
	src.format = SF_FMT_JSONL;
	src.separator = NULL;
	snprintf(path, sizeof(path), "%s/z.jsonl", dir);
	f = fopen(path, "w");
	cr_assert(f && fputs("{\"text\":\"hello\"}\n\n{\"text\":\"hez\"}\n", f) >= 0 &&
		  fclose(f) == 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), SF_E_TOKENIZER, "%s", e.msg);
	snprintf(want, sizeof(want), "%s:3: the character U+007A at byte 2", path);
	cr_expect(strstr(e.msg, want), "%s", e.msg);
}

/* ---- files truncated while they are read outside a batch ---- */

static void truncate_path_to_zero(int point)
{
	if (point == SF_TP_INDEX_MAPPED)
		cr_assert_eq(truncate(path, 0), 0);
}

/* sf__dataset_open() of the fixture's config with `hook` at the test points; the
 * dataset, when it opens, closed again. */
static int open_with_hook(void (*hook)(int), struct sf_err *e)
{
	struct sf_dataset *ds = NULL;
	int r;

	sf__test_hook = hook;
	r = sf__dataset_open(&cfg, &ds, e);
	sf__test_hook = NULL;
	if (r == 0)
		sf__dataset_close(ds);
	return r;
}

/*
 * A text file truncated while its index is built (the launcher's scan at `run`, `check
 * --tokens`, `tokenize`): the scan of the mapped file raised SIGBUS and the process died
 * of it ("Bus error") without naming the file.
 */
Test(hardening, a_text_file_truncated_while_its_index_is_built_is_an_error_naming_it)
{
	struct sf_err e = {0};
	int r;

	put_text("a.txt", 3000);
	r = open_with_hook(truncate_path_to_zero, &e);
	cr_assert_eq(r, SF_E_SOURCE, "%d: %s", r, e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "byte 0: cannot read") &&
			  strstr(e.msg, "shorter than when the job opened"),
		  "%s", e.msg);
}

/* A JSONL file of a short record, then one of `text` bytes that ends the file; to count. */
static void put_jsonl_with_long_last(size_t text, const char *first)
{
	FILE *f;

	snprintf(path, sizeof(path), "%s/a.jsonl", dir);
	f = fopen(path, "wb");
	cr_assert(f);
	fprintf(f, "%s\n{\"text\": \"", first);
	for (size_t i = 0; i < text; i++)
		fputc('a' + (int)(i % 26), f);
	fputs("\"}\n", f);
	cr_assert_eq(fclose(f), 0);
	cfg.encoding = "bytes";
	cfg.epochs = 1;
	src.format = SF_FMT_JSONL;
}

static int walks; /* walks that mapped their file since the test began */

/* The first walk of the index build (its count) has mapped the file: cut it at 5000. */
static void truncate_path_to_5000(int point)
{
	if (point == SF_TP_WALK_MAPPED && walks++ == 0)
		cr_assert_eq(truncate(path, 5000), 0);
}

/*
 * Past a truncation the rest of the file's last page reads as zeros, not SIGBUS: a JSONL
 * file cut in its last record read as "column N: invalid JSON: control character in
 * string" (on_error: stop), and with on_error: skip as one more bad record skipped, the
 * job going on (a review). Either way the file that changed is what is named.
 */
Test(hardening, a_jsonl_record_cut_short_by_a_truncation_is_the_files_change)
{
	for (int skip = 0; skip < 2; skip++) {
		struct sf_err e = {0};
		int r;

		put_jsonl_with_long_last(6000, "{\"text\": \"a\"}");
		src.on_error = skip ? SF_ON_ERROR_SKIP : SF_ON_ERROR_STOP;
		walks = 0;
		r = open_with_hook(truncate_path_to_5000, &e);
		cr_expect_eq(r, SF_E_SOURCE, "on_error %s: %d: %s", skip ? "skip" : "stop", r,
			     e.msg);
		cr_expect(strstr(e.msg, path) &&
				  strstr(e.msg, "changed under the running job: 5000 bytes"),
			  "on_error %s: %s", skip ? "skip" : "stop", e.msg);
	}
}

static void truncate_path_when_counted(int point)
{
	if (point == SF_TP_INDEX_COUNTED)
		cr_assert_eq(truncate(path, 0), 0);
}

/*
 * The message of a file's first skipped record comes from walking its chunk again once
 * the chunks are counted; a file truncated before that walk killed the process with
 * SIGBUS (`tokenize` and `run` exited 135 with no message; a review).
 */
Test(hardening, a_file_truncated_before_its_skips_are_named_is_an_error_naming_it)
{
	struct sf_err e = {0};
	int r;

	put_jsonl_with_long_last(20000, "not json");
	src.on_error = SF_ON_ERROR_SKIP;
	r = open_with_hook(truncate_path_when_counted, &e);
	cr_assert_eq(r, SF_E_SOURCE, "%d: %s", r, e.msg);
	cr_expect(strstr(e.msg, path) && strstr(e.msg, "shorter than when the job opened"), "%s",
		  e.msg);
}

static void add_first_file_when_counted(int point)
{
	char added[4200];
	FILE *f;

	if (point != SF_TP_INDEX_COUNTED)
		return;
	snprintf(added, sizeof(added), "%s/0.txt", dir);
	f = fopen(added, "wx");
	if (f) /* once */
		cr_assert(fputs("a document that sorts first\n\n", f) >= 0 && fclose(f) == 0);
}

/*
 * A file that joins a source's glob while the job opens its files: the config digest,
 * taken after the index was built, listed it, while the job read the files without it;
 * a resume state of that run was then taken by a run of all three files, onto another
 * stream (a review).
 */
Test(hardening, sources_that_change_while_the_job_opens_them_are_refused)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	int r;

	put_text("a.txt", 2000);
	put_text("b.txt", 2000);
	snprintf(path, sizeof(path), "%s/*.txt", dir);
	r = open_with_hook(add_first_file_when_counted, &e);
	cr_assert_eq(r, SF_E_SOURCE, "%d: %s", r, e.msg);
	cr_expect(strstr(e.msg, "the sources changed while the job opened them"), "%s", e.msg);
	/* Once they stay as they are, the job opens, with the digest of what it reads. */
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_expect_eq(ds->n_text_files, 3);
	cr_expect_eq(ds->config_digest, sf__config_digest(&cfg));
	sf__dataset_close(ds);
}

static const unsigned char *lost; /* two pages of a file truncated to none */

static int read_lost(void *arg, void *state, uint64_t i, struct sf_err *e)
{
	(void)arg, (void)state, (void)e;
	return lost[i * 4096] == 0x5a ? 0 : -EIO;
}

/*
 * A worker's item (tokenize's chunk counting and writing) reading a mapped file truncated
 * under it: the worker died of SIGBUS, reported only as "a tokenizing worker died" (in
 * the calling process, with one worker, the process itself died). Either way now an
 * error of the item.
 */
Test(hardening, a_sigbus_in_a_work_item_is_its_error)
{
	int fd;

	snprintf(path, sizeof(path), "%s/lost", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0 && ftruncate(fd, 8192) == 0);
	lost = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert(lost != MAP_FAILED);
	cr_assert_eq(ftruncate(fd, 0), 0);
	close(fd);
	for (uint32_t workers = 1; workers <= 2; workers++) {
		struct sf_work w = {.n_workers = workers, .n_items = 2, .item = read_lost};
		struct sf_err e = {0};
		int r = sf__work_run(&w, &e);

		cr_expect(r == -EFAULT && strstr(e.msg, "SIGBUS at address"), "%u workers: %d %s",
			  workers, r, e.msg);
	}
	munmap((void *)lost, 8192);
}

static int mapped_points; /* the test point's passes since the test began */
static int truncate_at;	  /* the pass at which the hook truncates `path` to 0 */

static void truncate_at_point(int point)
{
	if ((point == SF_TP_TOKENS_MAPPED || point == SF_TP_DECOMPRESS_READ) &&
	    mapped_points++ == truncate_at)
		cr_assert_eq(truncate(path, 0), 0);
}

/* An llm.c file of 4,096 GPT-2 tokens, the job's tokenizer r50k_base. */
static void put_llmc_r50k(void)
{
	uint32_t tokens[4096];

	for (size_t i = 0; i < 4096; i++)
		tokens[i] = (uint32_t)(i * 7 % 50257);
	snprintf(path, sizeof(path), "%s/a.llmc.bin", dir);
	write_llmc_datafile(path, tokens, 4096, "gpt-2");
	src.format = SF_FMT_LLMC;
	cfg.encoding = "r50k_base";
	cfg.vocab = r50k;
}

/*
 * A pre-tokenized file truncated while its format is checked at open (its header, a
 * Megatron .idx walked whole), or while `check` holds its first tokens to the
 * vocabulary: those reads of the mapped file were not guarded, and `run` and `check`
 * died of SIGBUS, "Bus error", naming no file (a review).
 */
Test(hardening, a_token_file_truncated_while_it_is_checked_is_an_error_naming_it)
{
	if (!have_r50k())
		cr_skip_test("no shared test data at %s", r50k);
	for (truncate_at = 0; truncate_at < 2; truncate_at++) {
		uint32_t token_bytes;
		struct sf_err e = {0};
		int r;

		put_llmc_r50k();
		mapped_points = 0;
		sf__test_hook = truncate_at_point;
		r = sf__dataset_check(&cfg, &token_bytes, &e);
		sf__test_hook = NULL;
		cr_assert_eq(mapped_points, truncate_at + 1, "%d", mapped_points);
		cr_expect_eq(r, SF_E_SOURCE, "at pass %d: %d: %s", truncate_at, r, e.msg);
		/* The header first, then the tokens after its 1,024 bytes. */
		cr_expect(strstr(e.msg, path) &&
				  strstr(e.msg, truncate_at ? ": byte 1024: cannot read"
							    : ": byte 0: cannot read") &&
				  strstr(e.msg, "shorter than when the job opened"),
			  "at pass %d: %s", truncate_at, e.msg);
	}
}

/* A gzip text file of `n_docs` documents as put_text() writes them. */
static void put_text_gz(size_t n_docs)
{
	gzFile g;

	snprintf(path, sizeof(path), "%s/a.txt.gz", dir);
	g = gzopen(path, "wb1");
	cr_assert(g);
	for (size_t d = 0; d < n_docs; d++) {
		for (size_t w = 0; w < 40 + d % 13; w++)
			cr_assert_gt(gzprintf(g, "word%zu ", (d * 31 + w) % 97), 0);
		cr_assert_gt(gzputs(g, "\n\n"), 0);
	}
	cr_assert_eq(gzclose(g), Z_OK);
	cfg.encoding = "bytes";
	cfg.epochs = 1;
	src.separator = "\n\n";
}

/*
 * A compressed source truncated as it is read to be decompressed, for its index (pass
 * 0) or for a batch (pass 1). It was mapped, in no file cache, and the fault came inside
 * the decoder: a producer's was "SIGBUS at address ..., outside every source" (not a
 * data error: the producer was restarted as crashed; a review), the index build named
 * the file but no byte, and the decoder's state leaked.
 */
Test(hardening, a_compressed_file_truncated_while_it_is_decompressed_is_named)
{
	for (truncate_at = 0; truncate_at < 2; truncate_at++) {
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};
		int r;

		put_text_gz(3000);
		mapped_points = 0;
		sf__test_hook = truncate_at_point;
		r = sf__dataset_open(&cfg, &ds, &e);
		if (r == 0) {
			r = fill_until_error(ds, 1000, &e);
			sf__dataset_close(ds);
		}
		sf__test_hook = NULL;
		cr_assert_eq(mapped_points, truncate_at + 1, "%d", mapped_points);
		cr_expect_eq(r, SF_E_SOURCE, "at pass %d: %d: %s", truncate_at, r, e.msg);
		cr_expect(strstr(e.msg, path) && strstr(e.msg, ": byte 0: cannot read") &&
				  strstr(e.msg, "shorter than when the job opened"),
			  "at pass %d: %s", truncate_at, e.msg);
		/* A fresh index next time: the cached one names the file before truncation. */
		cr_assert_eq(unlink(path), 0);
	}
}
