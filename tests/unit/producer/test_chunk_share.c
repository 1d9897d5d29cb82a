/*
 * The shared chunk cache: its entry protocol (fill, hit, refill seen by a reader's
 * validation, abandon), a live filler that makes others wait or give up, a dead filler
 * (reaped, or still a zombie) whose entry is taken over, a row whose chunk another
 * process is tokenizing (deferred without tokenizing, then waited for), and two builders
 * in one process that tokenize each chunk of a corpus once between them while building
 * the same batches as a single builder, in windows and in random mode.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/futex.h"
#include "common/proc.h"
#include "producer/chunk_share.h"
#include "producer/dataset_impl.h"
#include "producer/producer.h"
#include "producer/text_cache.h"
#include "producer/text_index.h"
#include "producer/text_order.h"
#include "producer/token_copy.h"

static struct sf_chunk_share *share;

static void setup(void)
{
	struct sf_err e = {0};

	cr_assert_eq(sf__share_create(4, 100, sizeof(uint32_t), 10, &share, &e), 0, "%s", e.msg);
}

static void teardown(void)
{
	sf__share_free(share);
}

TestSuite(share, .init = setup, .fini = teardown);

/* In a forked child: die with the test process, so a failed test leaves no process
 * blocked on a pipe behind it. */
static void die_with_parent(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(9);
}

static void put(struct sf_share_ref *ref, uint64_t chunk, uint32_t base, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		((uint32_t *)ref->tokens)[i] = base + (uint32_t)i;
	ref->doc_starts[0] = 0;
	sf__share_publish(ref, chunk, n, 1);
}

Test(share, fill_hit_refill_abandon)
{
	struct sf_share_ref a, b, c;
	struct sf_share_counters n;

	cr_assert_eq(sf__share_acquire(share, 1, 7, 0, &a), SF_SHARE_FILL);
	put(&a, 7, 1000, 50);
	cr_assert_eq(sf__share_acquire(share, 1, 7, 0, &b), SF_SHARE_HIT);
	cr_assert_eq(b.n_tokens, 50);
	cr_assert_eq(b.n_docs, 1);
	cr_assert_eq(((uint32_t *)b.tokens)[49], 1049);
	cr_assert(sf__share_valid(share, &b));
	/* Key 5 lands on the same entry (5 mod 4): another chunk replaces chunk 7, and the
	 * reader of chunk 7 learns that its copy is void. */
	cr_assert_eq(sf__share_acquire(share, 5, 8, 0, &c), SF_SHARE_FILL);
	put(&c, 8, 2000, 60);
	cr_assert_not(sf__share_valid(share, &b));
	cr_assert_eq(sf__share_acquire(share, 1, 8, 0, &b), SF_SHARE_HIT);
	cr_assert_eq(((uint32_t *)b.tokens)[0], 2000);
	/* A failed fill leaves the entry free for the next one. */
	cr_assert_eq(sf__share_acquire(share, 2, 3, 0, &a), SF_SHARE_FILL);
	sf__share_abandon(&a);
	cr_assert_eq(sf__share_acquire(share, 2, 3, 0, &a), SF_SHARE_FILL);
	put(&a, 3, 0, 1);
	sf__share_counters(share, &n);
	cr_assert_eq(n.fills, 4);
	cr_assert_eq(n.hits, 2);
	cr_assert_eq(n.stale_reads, 1);
}

/* A child that claims entry 0 for chunk 1, says so on `ready`, then waits for a byte on
 * `go` before it publishes (or exits without publishing when `die` is set). */
static pid_t filler(int ready[2], int go[2], int die)
{
	pid_t pid, parent = getpid();
	struct sf_share_ref mine;

	/* This process uses the cache first, so the child has to notice that it is
	 * another process (the fork generation) rather than claim under this one's pid. */
	cr_assert_eq(sf__share_acquire(share, 3, 99, 0, &mine), SF_SHARE_FILL);
	sf__share_abandon(&mine);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_share_ref ref;
		char ch = 1;

		die_with_parent(parent);
		if (sf__share_acquire(share, 0, 1, 0, &ref) != SF_SHARE_FILL)
			_exit(2);
		if (write(ready[1], &ch, 1) != 1)
			_exit(3);
		if (die)
			_exit(0);
		if (read(go[0], &ch, 1) != 1)
			_exit(4);
		put(&ref, 1, 500, 10);
		_exit(0);
	}
	{
		char ch;

		cr_assert_eq(read(ready[0], &ch, 1), 1);
	}
	return pid;
}

Test(share, live_filler_is_waited_for_then_given_up)
{
	int ready[2], go[2], status;
	struct sf_share_ref ref;
	struct sf_share_counters n;
	pid_t pid = filler(ready, go, 0);
	uint64_t t0;
	char ch = 1;

	cr_assert_eq(sf__share_acquire(share, 0, 1, 0, &ref), SF_SHARE_BUSY);
	t0 = sf__now_ns();
	cr_assert_eq(sf__share_acquire(share, 0, 1, 50 * 1000 * 1000, &ref), SF_SHARE_BUSY);
	cr_assert_geq(sf__now_ns() - t0, 50 * 1000 * 1000, "gave up before the wait ended");
	cr_assert_eq(write(go[1], &ch, 1), 1);
	/* Woken by the publish, long before the 10 s limit. */
	t0 = sf__now_ns();
	cr_assert_eq(sf__share_acquire(share, 0, 1, 10ll * 1000 * 1000 * 1000, &ref), SF_SHARE_HIT);
	cr_assert_lt(sf__now_ns() - t0, 5ull * 1000 * 1000 * 1000);
	cr_assert_eq(((uint32_t *)ref.tokens)[9], 509);
	cr_assert(sf__share_valid(share, &ref));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	sf__share_counters(share, &n);
	cr_assert_eq(n.takeovers, 0);
}

/* A filler that died is found out whether it was reaped or is still a zombie. */
static void dead_filler(int reap)
{
	int ready[2], go[2];
	struct sf_share_ref ref;
	struct sf_share_counters n;
	pid_t pid = filler(ready, go, 1);
	siginfo_t si;

	if (reap) {
		cr_assert_eq(waitpid(pid, NULL, 0), pid);
	} else {
		memset(&si, 0, sizeof(si));
		cr_assert_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	}
	/* Without waiting nobody looks at the filler: the entry just reads as busy. */
	cr_assert_eq(sf__share_acquire(share, 0, 1, 0, &ref), SF_SHARE_BUSY);
	cr_assert_eq(sf__share_acquire(share, 0, 1, 10ll * 1000 * 1000 * 1000, &ref),
		     SF_SHARE_FILL);
	put(&ref, 1, 700, 5);
	cr_assert_eq(sf__share_acquire(share, 0, 1, 0, &ref), SF_SHARE_HIT);
	cr_assert_eq(((uint32_t *)ref.tokens)[4], 704);
	sf__share_counters(share, &n);
	cr_assert_eq(n.takeovers, 1);
	if (!reap)
		cr_assert_eq(waitpid(pid, NULL, 0), pid);
}

/*
 * Look-ups that do not wait (1 ns, as for chunk heads) read a filler's start time only
 * when they find the same busy word a second time: a zombie's entry is taken over then,
 * and a live filler's entry stays busy however often it is looked up.
 */
Test(share, busy_word_seen_twice_is_checked)
{
	int ready[2], go[2], ready2[2], go2[2];
	struct sf_share_ref ref;
	struct sf_share_counters n;
	pid_t dead = filler(ready, go, 1), live;
	siginfo_t si;
	char ch = 1;
	int r;

	memset(&si, 0, sizeof(si));
	cr_assert_eq(waitid(P_PID, (id_t)dead, &si, WEXITED | WNOWAIT), 0);
	/* The first look-up gives up at once, unless its 1 ns wait took a whole wait slice
	 * (a loaded machine), which makes it look closer itself; the second looks closer in
	 * any case. */
	r = sf__share_acquire(share, 0, 1, 1, &ref);
	if (r == SF_SHARE_BUSY)
		r = sf__share_acquire(share, 0, 1, 1, &ref);
	cr_assert_eq(r, SF_SHARE_FILL);
	sf__share_abandon(&ref);
	cr_assert_eq(waitpid(dead, NULL, 0), dead);
	live = filler(ready2, go2, 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(sf__share_acquire(share, 0, 1, 1, &ref), SF_SHARE_BUSY);
	cr_assert_eq(write(go2[1], &ch, 1), 1);
	cr_assert_eq(waitpid(live, NULL, 0), live);
	cr_assert_eq(sf__share_acquire(share, 0, 1, 1, &ref), SF_SHARE_HIT);
	cr_assert_eq(((uint32_t *)ref.tokens)[9], 509);
	sf__share_counters(share, &n);
	cr_assert_eq(n.takeovers, 1);
	(void)go;
}

Test(share, dead_filler_reaped_is_taken_over)
{
	dead_filler(1);
}

Test(share, dead_filler_zombie_is_taken_over)
{
	dead_filler(0);
}

/* A waiter killed in its sleep costs the next publish of its entry one wake, and the
 * publishes after it none. */
Test(share, a_waiter_killed_in_its_sleep_leaves_no_waiter)
{
	struct sf_share_ref ref;
	pid_t pid, parent = getpid();
	uint64_t before;

	cr_assert_eq(sf__share_acquire(share, 0, 1, 0, &ref), SF_SHARE_FILL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_share_ref w;

		die_with_parent(parent);
		sf__share_acquire(share, 0, 1, 60ll * 1000 * 1000 * 1000, &w);
		_exit(0);
	}
	usleep(50000);
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	put(&ref, 1, 0, 3);
	before = atomic_load(&sf__futex_wake_calls);
	for (uint64_t c = 2; c < 12; c++) {
		cr_assert_eq(sf__share_acquire(share, 0, c, 0, &ref), SF_SHARE_FILL);
		put(&ref, c, 0, 3);
	}
	cr_expect_eq(atomic_load(&sf__futex_wake_calls), before, "nobody sleeps: no wake");
}

/* A filler whose entry was taken over publishes nothing over the taker's contents. */
Test(share, a_filler_taken_over_publishes_nothing)
{
	struct sf_share_ref old, taker, r;

	cr_assert_eq(sf__share_acquire(share, 0, 1, 0, &old), SF_SHARE_FILL);
	/* The takeover, as a look-up that judged the filler dead would make it. */
	taker = old;
	taker.word = old.word + (UINT64_C(1) << 24);
	atomic_store((_Atomic uint64_t *)old.entry, taker.word);
	cr_expect_eq(sf__share_publish(&old, 1, 3, 1), SF_E_STATE);
	cr_expect_eq(sf__share_abandon(&old), SF_E_STATE);
	cr_expect_eq(sf__share_acquire(share, 0, 1, 0, &r), SF_SHARE_BUSY);
	cr_expect_eq(sf__share_publish(&taker, 2, 3, 1), 0);
	cr_expect_eq(sf__share_acquire(share, 0, 2, 0, &r), SF_SHARE_HIT);
}

/* ---- two builders sharing one dataset ---- */

static char dir[64];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void builders_setup(void)
{
	strcpy(dir, "/tmp/sf-sharetest-XXXXXX");
	cr_assert(mkdtemp(dir));
	cr_assert_eq(setenv("SHMFEED_CACHE_DIR", dir, 1), 0); /* index caches go with dir */
}

static void builders_teardown(void)
{
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite(builders, .init = builders_setup, .fini = builders_teardown);

/*
 * About 1 MiB of documents of varied length (16 chunks), byte tokens. Two builders build
 * the batches of an epoch alternately, as two producers would, and must produce what one
 * builder alone produces (over a dataset, and so a shared cache, of its own, without the
 * table of chunk heads, so that it tokenizes every tail itself); returns the tokens the two
 * encoded together and the tokens the stream holds.
 */
static char path[4096], *paths[1] = {path};
static struct sf_source_config src;

static void corpus_config(struct sf_config *cfg, uint32_t mode, uint32_t dtype)
{
	FILE *f;

	snprintf(path, sizeof(path), "%s/docs.txt", dir);
	f = fopen(path, "w");
	cr_assert(f);
	for (uint32_t d = 0, x = 1; d < 4000; d++) {
		uint32_t len = 20 + (x = x * 1103515245u + 12345u) % 500;

		for (uint32_t i = 0; i < len; i++)
			fputc('a' + (int)((d + i) % 26), f);
		fputs("\n\n", f);
	}
	cr_assert_eq(fclose(f), 0);
	sf__config_defaults(cfg);
	memset(&src, 0, sizeof(src));
	src.paths = paths;
	src.n_paths = 1;
	src.separator = "\n\n";
	cfg->sources = &src;
	cfg->n_sources = 1;
	cfg->encoding = "bytes";
	cfg->batch_size = 8;
	cfg->seq_len = 256;
	cfg->world_size = 2;
	cfg->local_ranks = 2;
	cfg->producers = 2;
	cfg->mode = mode;
	cfg->dtype = dtype;
	cfg->doc_starts = 4;
}

static void alternate(uint32_t mode, uint32_t dtype, uint64_t *ret_encoded, uint64_t *ret_tokens)
{
	struct sf_config cfg;
	struct sf_dataset *ds, *ds1;
	struct sf_dataset_stats st;
	struct sf_builder *one, *two[2];
	struct sf_err e = {0};
	unsigned char *p1, *p2;
	uint64_t encoded = 0, n_batches;

	corpus_config(&cfg, mode, dtype);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__dataset_open(&cfg, &ds1, &e), 0, "%s", e.msg);
	cr_assert(ds->heads);
	sf__share_free(ds1->heads);
	ds1->heads = NULL;
	sf__dataset_stats(ds, &st);
	cr_assert_gt(st.n_chunks, 8);
	cr_assert_eq(sf__builder_create(ds1, &one, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_create(ds, &two[0], &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_create(ds, &two[1], &e), 0, "%s", e.msg);
	p1 = malloc(sf__dataset_payload_bytes(ds));
	p2 = malloc(sf__dataset_payload_bytes(ds));
	n_batches = st.n_windows / cfg.batch_size;
	/* Builder two[i % 2] takes batch i, in the order producers claim them. */
	for (uint64_t i = 0; i < n_batches; i++) {
		uint32_t rank = (uint32_t)(i % 2), len1, len2;
		uint64_t step = i / 2, f1, f2;

		cr_assert_eq(sf__builder_fill(two[i % 2], rank, step, p2, &len2, &f2, &e), 0, "%s",
			     e.msg);
		cr_assert_eq(sf__builder_fill(one, rank, step, p1, &len1, &f1, &e), 0, "%s", e.msg);
		cr_assert_eq(len1, len2);
		cr_assert_eq(f1, f2);
		cr_assert(!memcmp(p1, p2, len1), "batch %llu differs", (unsigned long long)i);
	}
	for (int i = 0; i < 2; i++) {
		uint64_t out, enc;

		sf__builder_counters(two[i], &out, &enc);
		encoded += enc;
	}
	free(p1);
	free(p2);
	sf__builder_free(one);
	sf__builder_free(two[0]);
	sf__builder_free(two[1]);
	sf__dataset_close(ds);
	sf__dataset_close(ds1);
	*ret_encoded = encoded;
	*ret_tokens = st.n_tokens;
}

Test(builders, windows_tokenize_each_chunk_once)
{
	/* Heads stored as 2-byte tokens (the byte vocabulary fits) and as 4-byte ones. */
	static const uint32_t dtypes[] = {SF_DTYPE_AUTO, SF_DTYPE_I32};

	for (int i = 0; i < 2; i++) {
		uint64_t encoded, tokens;

		alternate(SF_SAMPLE_WINDOWS, dtypes[i], &encoded, &tokens);
		/* Each chunk once, and the T+1 tokens after each chunk (the next one's head)
		 * not again: no token of the stream is encoded twice (a private cache per
		 * builder would encode nearly everything twice, and without the heads every
		 * tail is encoded twice). */
		cr_assert_leq(encoded, tokens, "dtype %u: encoded %llu of %llu tokens", dtypes[i],
			      (unsigned long long)encoded, (unsigned long long)tokens);
	}
}

Test(builders, random_offsets_agree)
{
	uint64_t encoded, tokens;

	alternate(SF_SAMPLE_RANDOM, SF_DTYPE_AUTO, &encoded, &tokens);
	cr_assert_gt(encoded, 0);
}

/* The windows order of the raw text stream of `ds`. */
static int stream_order(const struct sf_dataset *ds, struct sf_text_order **ret_o)
{
	struct sf_text_span span = {0, ds->n_chunks, 0, ds->n_windows, ds->seed};
	struct sf_err e = {0};

	return sf__text_order_create(ds, &span, ret_o, &e);
}

/* Sample k of that order, and its chunk's placement key. */
static uint64_t stream_sample(const struct sf_dataset *ds, uint64_t k, uint64_t *ret_key)
{
	struct sf_text_order *o;
	uint64_t off;

	cr_assert_eq(stream_order(ds, &o), 0);
	off = sf__text_order_offset(o, k, ret_key);
	sf__text_order_free(o);
	return off;
}

Test(builders, row_of_a_chunk_being_filled_is_deferred_then_waited_for)
{
	struct sf_config cfg;
	struct sf_dataset *ds, *ref_ds;
	struct sf_text_cache *c, *ref;
	struct sf_err e = {0};
	unsigned char row[257 * 2], want[257 * 2];
	uint32_t starts[4], want_starts[4];
	uint64_t key, off, chunk;
	int ready[2], go[2], status;
	pid_t pid, parent = getpid();
	char ch = 1;

	corpus_config(&cfg, SF_SAMPLE_WINDOWS, SF_DTYPE_AUTO);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__dataset_open(&cfg, &ref_ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__text_cache_create(ds, &c, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__text_cache_create(ref_ds, &ref, &e), 0, "%s", e.msg);
	off = stream_sample(ds, 5, &key);
	chunk = sf__text_find_chunk(ds, off);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	/* Another process takes the chunk's entry as a producer about to tokenize it. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_share_ref sref;

		die_with_parent(parent);
		if (sf__share_acquire(ds->share, key, chunk, 0, &sref) != SF_SHARE_FILL)
			_exit(2);
		if (write(ready[1], &ch, 1) != 1 || read(go[0], &ch, 1) != 1)
			_exit(3);
		/* It fails: the waiter must then tokenize the chunk itself. */
		sf__share_abandon(&sref);
		_exit(0);
	}
	cr_assert_eq(read(ready[0], &ch, 1), 1);
	/* First pass: the row is left for later, and nothing is tokenized here. */
	cr_assert_eq(sf__text_read_row(c, off, key, 0, row, starts, &e), SF_TEXT_DEFERRED);
	cr_assert_eq(sf__text_cache_encoded(c), 0);
	cr_assert_eq(write(go[1], &ch, 1), 1);
	/* Second pass: woken when the entry is given back, it fills it. */
	cr_assert_eq(sf__text_read_row(c, off, key, 10ll * 1000 * 1000 * 1000, row, starts, &e), 0,
		     "%s", e.msg);
	cr_assert_gt(sf__text_cache_encoded(c), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The same row as a process that tokenizes alone (its own dataset and cache). */
	cr_assert_eq(sf__text_read_row(ref, off, UINT64_MAX, 0, want, want_starts, &e), 0, "%s",
		     e.msg);
	cr_assert(!memcmp(row, want, sizeof(row)));
	cr_assert(!memcmp(starts, want_starts, sizeof(starts)));
	sf__text_cache_free(c);
	sf__text_cache_free(ref);
	sf__dataset_close(ds);
	sf__dataset_close(ref_ds);
}

/*
 * A builder whose batch needs a chunk that another process is tokenizing does not sleep
 * at once: it first tokenizes a free chunk of the batches after its own (the next P),
 * and its batch is still the one a builder alone makes. With `corrupt`, that later chunk
 * no longer matches the index (the file changed under it): working ahead gives up on it
 * without failing this batch, and the batch that reads the chunk reports it.
 */
static void work_ahead_case(int corrupt)
{
	struct sf_config cfg;
	struct sf_dataset *ds, *ref_ds;
	struct sf_builder *b, *ref;
	struct sf_text_order *probe;
	struct sf_share_ref sref;
	struct sf_err e = {0};
	unsigned char *got, *want;
	uint64_t step, held = UINT64_MAX, held_key = 0, ahead = UINT64_MAX, ahead_key = 0, first;
	uint64_t ahead_sample = 0;
	uint32_t len, B;
	int ready[2], go[2], status;
	pid_t pid, parent = getpid();
	char ch = 1;

	corpus_config(&cfg, SF_SAMPLE_WINDOWS, SF_DTYPE_AUTO);
	B = cfg.batch_size;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__dataset_open(&cfg, &ref_ds, &e), 0, "%s", e.msg);
	cr_assert_eq(stream_order(ds, &probe), 0);
	/* A step whose rank-0 batch lies in one chunk (held by the other process) while
	 * the next P batches reach another chunk, the one to be tokenized ahead. */
	for (step = 0; step < 1000 && ahead == UINT64_MAX; step++) {
		uint64_t key, c0;

		first = step * B * cfg.world_size;
		c0 = sf__text_find_chunk(ds, sf__text_order_offset(probe, first, &key));
		held_key = key;
		held = c0;
		for (uint64_t k = first + 1; k < first + B; k++)
			if (sf__text_find_chunk(ds, sf__text_order_offset(probe, k, &key)) != c0)
				held = UINT64_MAX;
		for (uint64_t k = first + B;
		     held != UINT64_MAX && k < first + (cfg.producers + 1) * B; k++) {
			uint64_t c = sf__text_find_chunk(ds, sf__text_order_offset(probe, k, &key));

			if (c != c0) {
				ahead = c;
				ahead_key = key;
				ahead_sample = k;
				break;
			}
		}
	}
	cr_assert_neq(ahead, UINT64_MAX, "no step ends a chunk");
	step--;
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		die_with_parent(parent);
		close(go[1]);
		if (sf__share_acquire(ds->share, held_key, held, 0, &sref) != SF_SHARE_FILL)
			_exit(2);
		if (write(ready[1], &ch, 1) != 1)
			_exit(3);
		/* Held until the parent is done (end of file on `go`), never published. */
		while (read(go[0], &ch, 1) > 0)
			;
		_exit(0);
	}
	close(go[0]);
	cr_assert_eq(read(ready[0], &ch, 1), 1);
	got = malloc(sf__dataset_payload_bytes(ds));
	want = malloc(sf__dataset_payload_bytes(ds));
	cr_assert_eq(sf__builder_create(ds, &b, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_create(ref_ds, &ref, &e), 0, "%s", e.msg);
	if (corrupt) {
		/* Two letters of the later chunk's first document become a separator: one
		 * token fewer than its index says. The modification time is put back, so the
		 * file's identity still matches and the count check is what finds it. */
		int fd = open(path, O_WRONLY);
		struct stat sb;

		cr_assert_geq(fd, 0);
		cr_assert_eq(fstat(fd, &sb), 0);
		cr_assert_eq(pwrite(fd, "\n\n", 2, (off_t)ds->chunks[ahead].off + 5), 2);
		cr_assert_eq(futimens(fd, (struct timespec[2]){sb.st_atim, sb.st_mtim}), 0);
		cr_assert_eq(close(fd), 0);
	}
	cr_assert_eq(sf__builder_fill(b, 0, step, got, &len, &first, &e), 0, "%s", e.msg);
	if (!corrupt) {
		cr_assert_eq(sf__share_acquire(ds->share, ahead_key, ahead, 0, &sref), SF_SHARE_HIT,
			     "chunk %llu was not tokenized ahead", (unsigned long long)ahead);
	} else {
		const uint64_t G = (uint64_t)B * cfg.world_size;
		uint32_t r = (uint32_t)(ahead_sample % G / B);

		cr_assert_eq(sf__share_acquire(ds->share, ahead_key, ahead, 0, &sref),
			     SF_SHARE_FILL, "a failed chunk was kept");
		sf__share_abandon(&sref);
		cr_assert_lt(sf__builder_fill(b, r, ahead_sample / G, got, &len, &first, &e), 0);
		cr_assert(strstr(e.msg, "its index says"), "%s", e.msg);
		/* The file changed, not the index: its ctime moved (a review). */
		cr_assert(strstr(e.msg, "the file changed under the running job"), "%s", e.msg);
	}
	cr_assert_eq(sf__builder_fill(ref, 0, step, want, &len, &first, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__builder_fill(b, 0, step, got, &len, &first, &e), 0, "%s", e.msg);
	cr_assert(!memcmp(got, want, len));
	close(go[1]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	free(got);
	free(want);
	sf__builder_free(b);
	sf__builder_free(ref);
	sf__text_order_free(probe);
	sf__dataset_close(ds);
	sf__dataset_close(ref_ds);
}

Test(builders, waiting_builder_tokenizes_a_later_chunk_first)
{
	work_ahead_case(0);
}

Test(builders, failing_later_chunk_does_not_fail_the_batch)
{
	work_ahead_case(1);
}
