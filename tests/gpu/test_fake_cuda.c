/*
 * The consumer's GPU path against the fake driver (tests/gpu/fake_cuda.c, found as
 * libcuda.so.1 through LD_LIBRARY_PATH): each case runs in its own process, since the
 * driver table is loaded once per process, with its FAKE_CUDA_* environment.
 *  - copies: two GPU handles (ranks 0 and 1) read STEPS batches each; after every batch a
 *    "kernel" that reads the device buffer is queued on the caller's stream (the NULL
 *    stream, or a stream given with sf_consumer_set_stream) and nothing is synchronized
 *    until the end. Every read must see its own batch, under the eager policy (a refill
 *    that did not wait for the caller's work overwrites the buffer first), the lazy one
 *    (a slot released before its copy ran changes under it, counted as a violation), and
 *    with lazy copies but the caller's stream eager (a read not made to wait for its copy
 *    runs first).
 *    Every copy comes from registered memory; every driver object is freed at detach.
 *    The document starts are read on the device too. With registration refused, the same
 *    runs go through pinned staging buffers.
 *  - attach failures at each driver call of the set-up, named by their CUresult, with
 *    nothing leaked (then a CPU handle, whose sf_consumer_release_batch releases its
 *    slot); a copy failing mid-run, reported, and the step served again.
 *  - no device, or cuInit failing: -ENODEV (CPU is then the caller's choice: no device, no
 *    driver but the toolkit's stub) or SF_E_CUDA; a detach whose context cannot be pushed
 *    still releases it.
 *  - next() on a thread with no context current; detach with the caller's reads still
 *    queued; a switch of the caller's stream with reads queued on the old one; three
 *    batches held at once with SF_ATTACH_EXPLICIT_RELEASE, and the fourth refused.
 *  - the GPU behind the host (the caller's stream busy): next() waits for the copy of the
 *    batch it releases no longer than its timeout, loses nothing, and goes on once the
 *    GPU catches up; a failed query of that copy keeps its slot.
 * An argument runs only the cases whose name contains it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "consumer/cuda.h"
#include "tests/gpu/fake_cuda.h"
#include "tests/unit/consumer/feed.h"

#define STEPS 40

static const struct sf_cuda *cu;
static fake_cuda_stats_fn *get_stats;
static fake_cuda_read_async_fn *read_async;
static fake_cuda_set_eager_fn *set_eager;
static fake_cuda_set_busy_fn *set_busy;
static int failed;
static struct feed *running; /* stopped by bail() */

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "  %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			failed = 1;                                                                \
		}                                                                                  \
	} while (0)

/* Give up on this case: stop its producers and unlink its arena first. */
static void bail(void)
{
	if (running)
		feed_stop(running);
	exit(1);
}

static void load(void)
{
	struct sf_err e = {0};
	void *lib;

	if (sf__cuda_load(&cu, &e) < 0) {
		fprintf(stderr, "  cannot load the fake driver: %s\n", e.msg);
		exit(1);
	}
	/* The same library instance as the consumer's: dlopen returns the loaded one. */
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	*(void **)&get_stats = lib ? dlsym(lib, "fake_cuda_stats") : NULL;
	*(void **)&read_async = lib ? dlsym(lib, "fake_cuda_read_async") : NULL;
	*(void **)&set_eager = lib ? dlsym(lib, "fake_cuda_set_eager") : NULL;
	*(void **)&set_busy = lib ? dlsym(lib, "fake_cuda_set_busy") : NULL;
	if (!get_stats || !read_async || !set_eager || !set_busy) {
		fprintf(stderr, "  libcuda.so.1 is not the fake driver\n");
		exit(1);
	}
}

static struct feed *start(const char *tag, uint32_t ranks)
{
	static char job[64];
	struct feed_options o = {.job = job,
				 .ranks = ranks,
				 .batch = 4,
				 .seq_len = 64,
				 .slots_per_rank = 4,
				 .producers = 2,
				 .token_bytes = 2,
				 .doc_starts_per_seq = 4,
				 .checksum = 1,
				 .seed = 5};
	struct sf_err e = {0};
	struct feed *f;

	snprintf(job, sizeof(job), "t-fakecuda-%s-%d", tag, (int)getpid());
	sf__arena_unlink_job(job);
	if (feed_start(&o, &f, &e) < 0) {
		fprintf(stderr, "  feed: %s\n", e.msg);
		exit(1);
	}
	running = f;
	return f;
}

/* The test's own use of the device, as a training script's: the primary context. */
static void push_own_context(sf_cudevice *dev)
{
	sf_cucontext ctx;

	CHECK(!cu->cuDeviceGet(dev, 0) && !cu->cuDevicePrimaryCtxRetain(&ctx, *dev) &&
		      !cu->cuCtxPushCurrent(ctx),
	      "the test's own context");
}

static void pop_own_context(sf_cudevice dev)
{
	sf_cucontext popped;

	cu->cuCtxPopCurrent(&popped);
	cu->cuDevicePrimaryCtxRelease(dev);
}

/* Every object the driver handed out has been given back. */
static void expect_balanced(const char *when)
{
	struct fake_cuda_stats s;

	get_stats(&s);
	CHECK(s.retains == s.releases, "%s: %ld retains, %ld releases", when, s.retains,
	      s.releases);
	CHECK(s.pushes == s.pops, "%s: %ld pushes, %ld pops", when, s.pushes, s.pops);
	CHECK(s.registers == s.unregisters, "%s: %ld registered, %ld unregistered", when,
	      s.registers, s.unregisters);
	CHECK(s.allocs == s.frees, "%s: %ld allocs, %ld frees", when, s.allocs, s.frees);
	CHECK(s.streams == s.stream_destroys, "%s: %ld streams, %ld destroyed", when, s.streams,
	      s.stream_destroys);
	CHECK(s.events == s.event_destroys, "%s: %ld events, %ld destroyed", when, s.events,
	      s.event_destroys);
	CHECK(s.host_allocs == s.host_frees, "%s: %ld pinned host allocations, %ld freed", when,
	      s.host_allocs, s.host_frees);
	CHECK(s.bad_pointers == 0, "%s: %ld bad device pointers", when, s.bad_pointers);
}

/*
 * Two GPU handles; reads queued on the NULL stream or (`created`) a stream of the test's,
 * which runs eagerly when `caller_eager`: then the caller's read of a batch runs as soon
 * as its waits allow, before a copy it was not made to wait for.
 */
static void case_copies(int created, int caller_eager, int staged)
{
	struct feed *f;
	struct sf_consumer *c[2];
	struct sf_consumer_info info[2];
	struct fake_cuda_stats s;
	uint64_t tb, pb, doc_off;
	unsigned char *out, *want, *docs;
	sf_custream user = NULL;
	sf_cudevice dev;
	char msg[256];

	load();
	f = start("copies", 2);
	tb = feed_token_bytes(f);
	pb = f->arena->hdr->payload_bytes;
	doc_off = sf__doc_starts_offset(f->geo.batch, f->geo.seq_tokens, 2);
	out = malloc(2 * STEPS * tb);
	want = malloc(pb);
	docs = calloc(2 * STEPS, pb - doc_off);

	push_own_context(&dev);
	if (created)
		CHECK(!cu->cuStreamCreate(&user, 0), "the test's stream");
	if (caller_eager)
		set_eager(user, 1);
	for (int r = 0; r < 2; r++) {
		CHECK(sf_consumer_attach(f->opt.job, r, 0, 0, &c[r], msg, sizeof(msg)) == 0, "%s",
		      msg);
		if (failed)
			bail();
		sf_consumer_info(c[r], &info[r]);
		CHECK(info[r].device == 0 && info[r].gpu_buffers == 2, "GPU mode");
		if (user)
			CHECK(sf_consumer_set_stream(c[r], (uint64_t)(uintptr_t)user) == 0, "%s",
			      sf_consumer_errmsg(c[r]));
	}
	for (uint64_t st = 0; st < STEPS; st++)
		for (int r = 0; r < 2; r++) {
			struct sf_batch b;

			CHECK(sf_consumer_next(c[r], 10000, &b) == 0, "%s",
			      sf_consumer_errmsg(c[r]));
			if (failed)
				bail();
			CHECK(b.step == st && !b.tokens &&
				      b.device_ptr == info[r].device_buffer[b.buffer],
			      "rank %d step %llu: a device buffer", r, (unsigned long long)st);
			feed_fill(f, (uint32_t)r, st, want);
			CHECK(b.digest == sf_digest(want, tb, 0), "rank %d step %llu: digest", r,
			      (unsigned long long)st);
			/* The document starts are copied to the device with the tokens. */
			CHECK(b.doc_starts && (uint64_t)(uintptr_t)b.doc_starts ==
						      info[r].doc_starts_buffer[b.buffer],
			      "document starts in the device buffer");
			CHECK(read_async(out + (st * 2 + (uint64_t)r) * tb, b.device_ptr, tb,
					 user) == 0,
			      "queue the read");
			CHECK(read_async(docs + (st * 2 + (uint64_t)r) * (pb - doc_off),
					 (uint64_t)(uintptr_t)b.doc_starts, pb - doc_off,
					 user) == 0,
			      "rank %d step %llu: queue the read of the document starts", r,
			      (unsigned long long)st);
		}
	for (int r = 0; r < 2; r++)
		CHECK(sf_consumer_release(c[r]) == 0, "%s", sf_consumer_errmsg(c[r]));
	CHECK(!cu->cuStreamSynchronize(user), "synchronize");
	for (uint64_t st = 0; st < STEPS; st++)
		for (uint32_t r = 0; r < 2; r++) {
			feed_fill(f, r, st, want);
			CHECK(!memcmp(out + (st * 2 + r) * tb, want, tb),
			      "rank %u step %llu: the caller's read saw other bytes", r,
			      (unsigned long long)st);
			CHECK(!memcmp(docs + (st * 2 + r) * (pb - doc_off), want + doc_off,
				      pb - doc_off),
			      "rank %u step %llu: the document starts read on the device differ", r,
			      (unsigned long long)st);
		}
	get_stats(&s);
	if (staged) {
		/* cuMemHostRegister failed: every copy comes from a pinned staging buffer. */
		CHECK(s.registers == 0, "%ld registrations", s.registers);
		CHECK(s.htod_async == 2 * STEPS && s.htod_async_pinned == s.htod_async,
		      "%ld async copies, %ld from pinned memory", s.htod_async,
		      s.htod_async_pinned);
		for (int r = 0; r < 2; r++) {
			struct sf_consumer_stats st;

			sf_consumer_stats(c[r], &st);
			CHECK(st.gpu_staged == 1 && st.staged_copies == STEPS,
			      "stats: staged %u, %llu staged copies", st.gpu_staged,
			      (unsigned long long)st.staged_copies);
			CHECK(strstr(sf_consumer_errmsg(c[r]), "cuMemHostRegister: CUDA_ERROR_"),
			      "the reason: %s", sf_consumer_errmsg(c[r]));
		}
	} else {
		CHECK(s.registers == 2, "one registration per handle, got %ld", s.registers);
		CHECK(s.htod_async == 2 * STEPS && s.htod_async_registered == s.htod_async,
		      "%ld async copies, %ld from registered memory", s.htod_async,
		      s.htod_async_registered);
	}
	CHECK(s.violations == 0, "%ld slots changed before their copy ran", s.violations);
	for (int r = 0; r < 2; r++)
		sf_consumer_detach(c[r]);
	if (user)
		CHECK(!cu->cuStreamDestroy(user), "destroy the test's stream");
	pop_own_context(dev);
	expect_balanced("after detach");
	feed_stop(f);
	free(out);
	free(want);
	free(docs);
}

/* FAKE_CUDA_FAIL makes one set-up call fail: attach names it, and leaks nothing. */
/*
 * A GPU handle in a child of fork() after the parent initialized CUDA: refused with what to
 * do (the child inherited the loaded table and skipped cuInit, and failed on its first
 * driver call with a bare code).
 */
static void case_attach_after_fork(void)
{
	struct feed *f;
	struct sf_consumer *c = NULL;
	char msg[256] = "";
	int status;
	pid_t pid;

	load();
	f = start("forked", 1);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	sf_consumer_detach(c);
	pid = fork();
	if (pid == 0) {
		int r = sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg));

		CHECK(r == SF_E_CUDA, "attach in the child returned %d: %s", r, msg);
		CHECK(strstr(msg, "initialized by the parent process before fork()"), "%s", msg);
		_exit(failed);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0,
	      "the child's attach");
	feed_stop(f);
}

static void case_attach_fails(const char *expect)
{
	struct feed *f;
	struct sf_consumer *c = NULL;
	char msg[256] = "";
	int r;

	load();
	f = start("attach", 1);
	r = sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg));
	CHECK(r == SF_E_CUDA, "attach returned %d: %s", r, msg);
	CHECK(strstr(msg, expect) != NULL, "message '%s' lacks '%s'", msg, expect);
	expect_balanced("after a failed attach");
	/* The rank is free again: a CPU handle attaches. */
	CHECK(sf_consumer_attach(f->opt.job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) == 0, "%s",
	      msg);
	if (!failed) {
		/* CPU mode: sf_consumer_release_batch() of the batch held releases its slot. */
		struct sf_slot *slot = sf__arena_slot(f->arena, 0, 0);
		struct sf_batch b;

		CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == 0, "%s",
		      sf_consumer_errmsg(c));
		CHECK(sf__slot_state(atomic_load(&slot->word)) == SF_SLOT_CLAIMED, "held");
		CHECK(sf_consumer_release_batch(c, &b) == 0, "%s", sf_consumer_errmsg(c));
		CHECK(sf__slot_state(atomic_load(&slot->word)) != SF_SLOT_CLAIMED, "released");
		CHECK(sf_consumer_release_batch(c, &b) == 0, "a second release is a no-op");
	}
	sf_consumer_detach(c);
	feed_stop(f);
}

/* The 5th copy fails (FAKE_CUDA_FAIL=cuMemcpyHtoDAsync:700:5): step 4 is reported, then
 * served again. */
static void case_copy_fails(void)
{
	struct feed *f;
	struct sf_consumer *c;
	struct sf_batch b;
	char msg[256];
	int r;

	load();
	f = start("copyfail", 1);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	for (uint64_t st = 0; st < 4; st++)
		CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == st, "step %llu",
		      (unsigned long long)st);
	r = sf_consumer_next(c, 10000, &b);
	CHECK(r == SF_E_CUDA, "the failed copy returned %d", r);
	CHECK(strstr(sf_consumer_errmsg(c),
		     "cuMemcpyHtoDAsync: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory") &&
		      !strstr(sf_consumer_errmsg(c), "sticky"),
	      "message: %s", sf_consumer_errmsg(c));
	CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == 4, "step 4 again: %s",
	      sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	expect_balanced("after detach");
	feed_stop(f);
}

/* The step of a batch whose copy failed is served again to the next consumer of the
 * rank, on the CPU, with its own bytes: whatever the failed handle did, it lost no step. */
static void expect_step_on_cpu(struct feed *f, uint64_t step)
{
	unsigned char *want = malloc(f->arena->hdr->payload_bytes);
	struct sf_consumer *c;
	struct sf_batch b;
	char msg[256];

	CHECK(sf_consumer_attach(f->opt.job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) == 0, "%s",
	      msg);
	if (failed)
		bail();
	CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == step, "step %llu on the CPU: %s",
	      (unsigned long long)step, sf_consumer_errmsg(c));
	feed_fill(f, 0, step, want);
	CHECK(memcmp(b.tokens, want, feed_token_bytes(f)) == 0, "step %llu's bytes",
	      (unsigned long long)step);
	sf_consumer_detach(c);
	free(want);
}

/*
 * A sticky error in the copy (FAKE_CUDA_FAIL=cuMemcpyHtoDAsync:700:5:sticky): every later
 * call of the driver fails with it, as on a GPU. next() says so, and says so again (the
 * context is lost; the slot goes back each time), detach returns, and the step is served
 * to the rank's next consumer. (Before, the fake failed the one call only and the test
 * expected the next() after a sticky error to work.)
 */
static void case_copy_fails_sticky(void)
{
	struct feed *f;
	struct sf_consumer *c;
	struct sf_batch b;
	char msg[256];
	int r;

	load();
	f = start("copysticky", 1);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	for (uint64_t st = 0; st < 4; st++)
		CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == st, "step %llu",
		      (unsigned long long)st);
	for (int k = 0; k < 2; k++) {
		r = sf_consumer_next(c, 10000, &b);
		CHECK(r == SF_E_CUDA && strstr(sf_consumer_errmsg(c),
					       "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal "
					       "memory access was encountered; a sticky error: "
					       "the GPU context is unusable"),
		      "next() %d returned %d: %s", k, r, sf_consumer_errmsg(c));
	}
	sf_consumer_detach(c);
	expect_step_on_cpu(f, 4);
	feed_stop(f);
}

struct thread_case {
	struct feed *f;
	struct sf_consumer *c;
};

static void *consume_on_thread(void *arg)
{
	struct thread_case *t = arg;
	unsigned char *want = malloc(t->f->arena->hdr->payload_bytes);

	for (uint64_t st = 0; st < 10; st++) {
		struct sf_batch b;
		int r = sf_consumer_next(t->c, 10000, &b);

		CHECK(r == 0 && b.step == st, "step %llu: %s", (unsigned long long)st,
		      sf_consumer_errmsg(t->c));
		if (r < 0)
			break;
		feed_fill(t->f, 0, st, want);
		CHECK(b.digest == sf_digest(want, feed_token_bytes(t->f), 0), "digest");
	}
	CHECK(sf_consumer_release(t->c) == 0, "release: %s", sf_consumer_errmsg(t->c));
	sf_consumer_detach(t->c);
	free(want);
	return NULL;
}

/*
 * The handle used from a thread that has no CUDA context current (a data-loading thread):
 * every driver call the consumer makes must push its own. The main thread holds a context
 * meanwhile, so a driver (or fake) that kept one context stack per process would hide it.
 */
static void case_other_thread(void)
{
	struct thread_case t;
	sf_cudevice dev;
	pthread_t th;
	char msg[256];

	load();
	t.f = start("thread", 1);
	CHECK(sf_consumer_attach(t.f->opt.job, 0, 0, 0, &t.c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	push_own_context(&dev);
	CHECK(pthread_create(&th, NULL, consume_on_thread, &t) == 0, "pthread_create");
	pthread_join(th, NULL);
	pop_own_context(dev);
	expect_balanced("after detach on the other thread");
	feed_stop(t.f);
}

/*
 * Detach while the caller's reads of the last batches are still queued on its stream (lazy
 * policy: nothing has run): the device buffers may be freed only after them.
 */
static void case_detach_with_reads_queued(void)
{
	struct feed *f;
	struct sf_consumer *c;
	struct fake_cuda_stats s;
	sf_cudevice dev;
	unsigned char *out, *want;
	uint64_t tb;
	char msg[256];

	load();
	f = start("detach", 1);
	tb = feed_token_bytes(f);
	out = calloc(3, tb);
	want = malloc(f->arena->hdr->payload_bytes);
	push_own_context(&dev);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	for (uint64_t st = 0; st < 3; st++) {
		struct sf_batch b;

		CHECK(sf_consumer_next(c, 10000, &b) == 0, "%s", sf_consumer_errmsg(c));
		if (failed)
			bail();
		CHECK(read_async(out + st * tb, b.device_ptr, tb, NULL) == 0, "queue the read");
	}
	sf_consumer_detach(c);
	get_stats(&s);
	CHECK(s.freed_in_use == 0, "%ld queued reads of device buffers freed by detach",
	      s.freed_in_use);
	CHECK(!cu->cuStreamSynchronize(NULL), "synchronize");
	for (uint64_t st = 0; st < 3; st++) {
		feed_fill(f, 0, st, want);
		CHECK(!memcmp(out + st * tb, want, tb), "step %llu: the read saw other bytes",
		      (unsigned long long)st);
	}
	pop_own_context(dev);
	expect_balanced("after detach");
	feed_stop(f);
	free(out);
	free(want);
}

/*
 * The caller moves to another stream (eager policy): the read of step 0 is queued on
 * stream A, which runs lazily, then the caller switches to stream B. The refill of step
 * 0's buffer must still wait for that read, which only B now orders.
 */
static void case_switch_stream(void)
{
	enum { N = 8 };
	struct feed *f;
	struct sf_consumer *c;
	sf_custream streams[2];
	sf_cudevice dev;
	unsigned char *out, *want;
	uint64_t tb;
	char msg[256];

	load();
	f = start("switch", 1);
	tb = feed_token_bytes(f);
	out = calloc(N, tb);
	want = malloc(f->arena->hdr->payload_bytes);
	push_own_context(&dev);
	for (int i = 0; i < 2; i++)
		CHECK(!cu->cuStreamCreate(&streams[i], 0), "the test's streams");
	set_eager(streams[0], 0);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	for (uint64_t st = 0; st < N; st++) {
		sf_custream on = streams[st > 0];
		struct sf_batch b;

		if (st < 2)
			CHECK(sf_consumer_set_stream(c, (uint64_t)(uintptr_t)on) == 0, "%s",
			      sf_consumer_errmsg(c));
		CHECK(sf_consumer_next(c, 10000, &b) == 0, "%s", sf_consumer_errmsg(c));
		if (failed)
			bail();
		CHECK(read_async(out + st * tb, b.device_ptr, tb, on) == 0, "queue the read");
	}
	for (int i = 0; i < 2; i++)
		CHECK(!cu->cuStreamSynchronize(streams[i]), "synchronize");
	for (uint64_t st = 0; st < N; st++) {
		feed_fill(f, 0, st, want);
		CHECK(!memcmp(out + st * tb, want, tb), "step %llu: the read saw other bytes",
		      (unsigned long long)st);
	}
	sf_consumer_detach(c);
	for (int i = 0; i < 2; i++)
		cu->cuStreamDestroy(streams[i]);
	pop_own_context(dev);
	expect_balanced("after detach");
	feed_stop(f);
	free(out);
	free(want);
}

/*
 * A loop that fetches ahead (eager copies, the caller's reads on the lazy NULL stream):
 * with SF_ATTACH_EXPLICIT_RELEASE and SHMFEED_GPU_BUFFERS=3 it holds three batches, reads
 * the oldest after fetching the newest and releases it with sf_consumer_release_batch.
 * Then: a fourth batch held is refused; the buffer count from the flags wins over the
 * environment; an out-of-range count fails the attach.
 */
static void case_explicit_release(void)
{
	enum { N = 12, HOLD = 3 };
	struct feed *f;
	struct sf_consumer *c;
	struct sf_consumer_info info;
	struct sf_batch held[N];
	sf_cudevice dev;
	unsigned char *out, *want;
	uint64_t tb, ptr, docs;
	char msg[256];
	int r;

	load();
	f = start("explicit", 1);
	tb = feed_token_bytes(f);
	out = calloc(N, tb);
	want = malloc(f->arena->hdr->payload_bytes);
	push_own_context(&dev);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, SF_ATTACH_EXPLICIT_RELEASE, &c, msg,
				 sizeof(msg)) == 0,
	      "%s", msg);
	if (failed)
		bail();
	sf_consumer_info(c, &info);
	CHECK(info.gpu_buffers == HOLD, "%u device buffers ($SHMFEED_GPU_BUFFERS=3)",
	      info.gpu_buffers);
	CHECK(sf_consumer_device_buffer(c, HOLD, &ptr, &docs) == SF_E_RANGE &&
		      strstr(sf_consumer_errmsg(c), "device buffer 3: the handle has 3"),
	      "buffer past the last: %s", sf_consumer_errmsg(c));
	for (uint64_t st = 0; st < N; st++) {
		CHECK(sf_consumer_next(c, 10000, &held[st]) == 0, "step %llu: %s",
		      (unsigned long long)st, sf_consumer_errmsg(c));
		if (failed)
			bail();
		CHECK(sf_consumer_device_buffer(c, held[st].buffer, &ptr, &docs) == 0 &&
			      ptr == held[st].device_ptr &&
			      docs == (uint64_t)(uintptr_t)held[st].doc_starts,
		      "sf_consumer_device_buffer");
		if (st + 1 < HOLD)
			continue;
		/* The oldest batch held is used only now, after the newest was fetched. */
		r = (int)(st + 1 - HOLD);
		CHECK(read_async(out + (uint64_t)r * tb, held[r].device_ptr, tb, NULL) == 0,
		      "queue the read");
		CHECK(sf_consumer_release_batch(c, &held[r]) == 0, "%s", sf_consumer_errmsg(c));
	}
	CHECK(sf_consumer_release_batch(c, &held[N - HOLD]) == SF_E_STATE, "released twice");
	CHECK(!cu->cuStreamSynchronize(NULL), "synchronize");
	for (uint64_t st = 0; st + HOLD <= N; st++) {
		feed_fill(f, 0, st, want);
		CHECK(!memcmp(out + st * tb, want, tb), "step %llu: the read saw other bytes",
		      (unsigned long long)st);
	}
	/* Three held (steps N-2, N-1 not released, and N-3... released): fetch until full. */
	CHECK(sf_consumer_next(c, 10000, &held[0]) == 0, "%s", sf_consumer_errmsg(c));
	r = sf_consumer_next(c, 10000, &held[1]);
	CHECK(r == SF_E_STATE && strstr(sf_consumer_errmsg(c), "all 3 device buffers"),
	      "a fourth batch held: %d %s", r, sf_consumer_errmsg(c));
	/* Released out of order (the middle one of steps N-2, N-1, N): the next batch takes
	 * the buffer that is free. next() refused while a buffer was free, naming all three
	 * held. */
	{
		/* Another handle's batch of the same step in its buffer of the same index
		 * released this handle's (a review found it). */
		struct sf_batch other = held[N - 1];

		other.device_ptr ^= 0x100000;
		CHECK(sf_consumer_release_batch(c, &other) == SF_E_STATE &&
			      strstr(sf_consumer_errmsg(c), "not this handle's"),
		      "another handle's batch: %s", sf_consumer_errmsg(c));
	}
	CHECK(sf_consumer_release_batch(c, &held[N - 1]) == 0, "%s", sf_consumer_errmsg(c));
	CHECK(sf_consumer_next(c, 10000, &held[1]) == 0, "a buffer is free: %s",
	      sf_consumer_errmsg(c));
	CHECK(held[1].step == N + 1 && held[1].buffer == held[N - 1].buffer,
	      "step %llu in buffer %u, want step %d in buffer %u", (unsigned long long)held[1].step,
	      held[1].buffer, N + 1, held[N - 1].buffer);
	CHECK(read_async(out, held[1].device_ptr, tb, NULL) == 0, "queue the read");
	CHECK(!cu->cuStreamSynchronize(NULL), "synchronize");
	feed_fill(f, 0, N + 1, want);
	CHECK(!memcmp(out, want, tb), "step %d: the read saw other bytes", N + 1);
	sf_consumer_detach(c);

	CHECK(sf_consumer_attach(f->opt.job, 0, 0, SF_ATTACH_GPU_BUFFERS(5), &c, msg,
				 sizeof(msg)) == 0,
	      "%s", msg);
	sf_consumer_info(c, &info);
	CHECK(info.gpu_buffers == 5, "%u device buffers (flags: 5)", info.gpu_buffers);
	sf_consumer_detach(c);
	putenv("SHMFEED_GPU_BUFFERS=17");
	r = sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg));
	CHECK(r == SF_E_RANGE && strstr(msg, "SHMFEED_GPU_BUFFERS"), "17 buffers: %d %s", r, msg);

	pop_own_context(dev);
	expect_balanced("after detach");
	feed_stop(f);
	free(out);
	free(want);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A safety net for case_gpu_behind(): the GPU catches up after 3 s whatever happens, so
 * that a next() that waits without a limit returns, and fails the case, instead of
 * hanging it. */
static atomic_int caught_up;

static void *catch_up_later(void *stream)
{
	for (int i = 0; i < 300 && !atomic_load(&caught_up); i++)
		usleep(10000);
	set_busy(stream, 0);
	return NULL;
}

/* Rank 0 of `f` on the test's own stream (*ret_user, in the test's context), which is
 * busy: the GPU behind the host. */
static struct sf_consumer *attach_on_busy_stream(struct feed *f, sf_custream *ret_user,
						 sf_cudevice *ret_dev)
{
	struct sf_consumer *c = NULL;
	char msg[256];

	push_own_context(ret_dev);
	CHECK(!cu->cuStreamCreate(ret_user, 0), "the test's stream");
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	CHECK(sf_consumer_set_stream(c, (uint64_t)(uintptr_t)*ret_user) == 0, "%s",
	      sf_consumer_errmsg(c));
	set_busy(*ret_user, 1);
	return c;
}

/*
 * Steps [from, to) of handle `c`, each read into out (tb bytes a step) by a "kernel"
 * queued on the caller's stream `user`.
 */
static void read_steps(struct sf_consumer *c, sf_custream user, unsigned char *out, uint64_t tb,
		       uint64_t from, uint64_t to)
{
	for (uint64_t st = from; st < to; st++) {
		struct sf_batch b;

		CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == st, "step %llu: %s",
		      (unsigned long long)st, sf_consumer_errmsg(c));
		if (failed)
			bail();
		CHECK(read_async(out + st * tb, b.device_ptr, tb, user) == 0, "queue the read");
	}
}

/* Once `user` has run its reads, each of steps [0, n) saw its own batch, and no copy read
 * a slot released before it ran. */
static void expect_reads(struct feed *f, sf_custream user, const unsigned char *out, uint64_t tb,
			 uint64_t n)
{
	unsigned char *want = malloc(f->arena->hdr->payload_bytes);
	struct fake_cuda_stats s;

	CHECK(!cu->cuStreamSynchronize(user), "synchronize");
	for (uint64_t st = 0; st < n; st++) {
		feed_fill(f, 0, st, want);
		CHECK(!memcmp(out + st * tb, want, tb), "step %llu: the read saw other bytes",
		      (unsigned long long)st);
	}
	get_stats(&s);
	CHECK(s.violations == 0, "%ld copies read a slot released before they ran", s.violations);
	free(want);
}

/*
 * The host runs ahead of the GPU: the caller's stream is busy (a long kernel), so a copy
 * into a buffer the caller used waits on the device. A next() that must release the
 * batch of such a copy waits for it no longer than its timeout: SF_E_AGAIN with timeout
 * 0, SF_E_TIMEOUT after 100 ms, the slot still held (its copy still reads it: released,
 * its refill would count as a violation) and no step lost. Once the GPU catches up, every
 * batch reads as its step's.
 */
static void case_gpu_behind(void)
{
	enum { N = 8 };
	struct feed *f;
	struct sf_consumer *c;
	sf_custream user;
	sf_cudevice dev;
	pthread_t t;
	unsigned char *out;
	uint64_t tb, st = 0, t0, ms;
	int r = 0;

	load();
	f = start("behind", 1);
	tb = feed_token_bytes(f);
	out = calloc(N, tb);
	c = attach_on_busy_stream(f, &user, &dev);
	pthread_create(&t, NULL, catch_up_later, user);
	/* Two buffers: the copy of step 2 waits for the read of step 0, which cannot run,
	 * so the call that releases step 2 must wait. */
	for (; st < N; st++) {
		struct sf_batch b;

		t0 = now_ms();
		r = sf_consumer_next(c, 100, &b);
		ms = now_ms() - t0;
		if (r)
			break;
		CHECK(b.step == st, "step %llu, want %llu", (unsigned long long)b.step,
		      (unsigned long long)st);
		CHECK(read_async(out + st * tb, b.device_ptr, tb, user) == 0, "queue the read");
	}
	CHECK(r == SF_E_TIMEOUT && st == 3 && ms >= 100 && ms < 2000,
	      "step %llu: next() returned %d after %llu ms, want SF_E_TIMEOUT (%d) at step 3 "
	      "after 100 ms: %s",
	      (unsigned long long)st, r, (unsigned long long)ms, SF_E_TIMEOUT,
	      sf_consumer_errmsg(c));
	CHECK(strstr(sf_consumer_errmsg(c), "has not completed"), "message: %s",
	      sf_consumer_errmsg(c));
	{
		struct sf_batch b;

		r = sf_consumer_next(c, 0, &b);
		CHECK(r == SF_E_AGAIN, "timeout 0 returned %d, want SF_E_AGAIN", r);
	}
	set_busy(user, 0);
	atomic_store(&caught_up, 1);
	read_steps(c, user, out, tb, st, N);
	expect_reads(f, user, out, tb, N);
	pthread_join(t, NULL);
	sf_consumer_detach(c);
	cu->cuStreamDestroy(user);
	pop_own_context(dev);
	expect_balanced("after detach");
	feed_stop(f);
	free(out);
}

/*
 * The event query of a copy still queued fails with an error that leaves the context
 * usable (FAKE_CUDA_FAIL=cuEventQuery:900:3, the third query: the one of step 2's copy,
 * which waits behind the caller's busy stream; 900 is what another thread's CUDA graph
 * capture makes of it): the slot was released with its copy still to run, refilled, and
 * the batch the caller holds read another step's bytes (a review). next() fails, keeps
 * the slot, and goes on once the query answers.
 */
static void case_query_fails(void)
{
	enum { N = 6 };
	struct feed *f;
	struct sf_consumer *c;
	sf_custream user;
	sf_cudevice dev;
	unsigned char *out;
	uint64_t tb, st;
	int r;

	load();
	f = start("queryfails", 1);
	tb = feed_token_bytes(f);
	out = calloc(N, tb);
	c = attach_on_busy_stream(f, &user, &dev);
	read_steps(c, user, out, tb, 0, 3);
	st = 3;
	{
		struct sf_batch b;

		r = sf_consumer_next(c, 1000, &b);
		CHECK(r == SF_E_CUDA && strstr(sf_consumer_errmsg(c), "cuEventQuery"),
		      "next() returned %d: %s", r, sf_consumer_errmsg(c));
	}
	set_busy(user, 0);
	read_steps(c, user, out, tb, st, N);
	expect_reads(f, user, out, tb, N);
	sf_consumer_detach(c);
	cu->cuStreamDestroy(user);
	pop_own_context(dev);
	expect_balanced("after detach");
	feed_stop(f);
	free(out);
}

/*
 * Steps 0 and 1, then the next() whose record fails (FAKE_CUDA_FAIL=cuEventRecord:1:5,
 * the record of step 2's copy), then a seek from step 2 to step 10: what the seek
 * returned, the handle in *ret_c.
 */
static int record_fails_then_seek(struct feed *f, struct sf_consumer **ret_c)
{
	struct sf_consumer *c;
	struct sf_resume state;
	struct sf_batch b;
	char msg[256];
	int r;

	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	*ret_c = c;
	for (uint64_t st = 0; st < 2; st++)
		CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == st, "step %llu: %s",
		      (unsigned long long)st, sf_consumer_errmsg(c));
	r = sf_consumer_next(c, 10000, &b);
	CHECK(r == SF_E_CUDA && strstr(sf_consumer_errmsg(c), "cuEventRecord"),
	      "next() returned %d: %s", r, sf_consumer_errmsg(c));
	CHECK(sf_consumer_state(c, &state) == 0 &&
		      state.samples == 2ull * f->arena->geo.batch * f->arena->geo.world_size,
	      "state: %s", sf_consumer_errmsg(c));
	state.samples *= 5; /* step 2 to step 10 */
	return sf_consumer_seek(c, &state);
}

/*
 * A call after the copy fails (the record of step 2's copy; lazy: the copy stays
 * queued): the slot was put back READY with its copy still to run, and a seek let the
 * producers refill it first (a review). The copy is waited for before the slot goes
 * back, and a fresh one serves the step after the seek. So too where the first wait
 * fails (`,cuStreamSynchronize:900:1`): the slot stays held until the seek's wait works.
 */
static void case_record_fails(void)
{
	struct fake_cuda_stats s;
	struct sf_consumer *c;
	struct sf_batch b;
	struct feed *f;

	load();
	f = start("recordfails", 1);
	CHECK(record_fails_then_seek(f, &c) == 0, "seek: %s", sf_consumer_errmsg(c));
	CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == 10, "step 10: %s",
	      sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	get_stats(&s);
	CHECK(s.violations == 0, "%ld slots changed before their copy ran", s.violations);
	expect_balanced("after detach");
	feed_stop(f);
}

/*
 * The record of step 2's copy fails, and every wait for that copy too
 * (`,cuStreamSynchronize:900:0`): next() and seek() fail while the slot stays held, detach
 * gives it back (the copy, if it ever runs, writes a device buffer left to the driver),
 * and the rank's next consumer gets step 2.
 */
static void case_record_and_every_wait_fail(void)
{
	struct fake_cuda_stats s;
	struct sf_consumer *c;
	struct sf_batch b;
	struct feed *f;
	int r;

	load();
	f = start("waitfails", 1);
	r = record_fails_then_seek(f, &c);
	CHECK(r == SF_E_CUDA && strstr(sf_consumer_errmsg(c), "cuStreamSynchronize"),
	      "seek returned %d: %s", r, sf_consumer_errmsg(c));
	r = sf_consumer_next(c, 10000, &b);
	CHECK(r == SF_E_CUDA && strstr(sf_consumer_errmsg(c), "cuStreamSynchronize"),
	      "next() returned %d: %s", r, sf_consumer_errmsg(c));
	get_stats(&s);
	CHECK(s.violations == 0, "%ld slots changed before their copy ran", s.violations);
	sf_consumer_detach(c);
	expect_step_on_cpu(f, 2);
	feed_stop(f);
}

/*
 * Detach while no wait for the copies works (FAKE_CUDA_FAIL=cuEventQuery:900:0,
 * cuStreamSynchronize:900:0,cuEventSynchronize:900:0, lazy: step 0's copy stays
 * queued): the teardown freed the
 * device buffer the copy writes, which the caller's next allocation could have taken
 * (the fake counts a free of memory that queued work uses). It leaves that memory to the
 * driver now; the step was handed out, so its slot is released.
 */
static void case_detach_waits_fail(void)
{
	struct fake_cuda_stats s;
	struct sf_consumer *c;
	struct sf_batch b;
	struct feed *f;
	char msg[256];

	load();
	f = start("detachwaits", 1);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	if (failed)
		bail();
	CHECK(sf_consumer_next(c, 10000, &b) == 0 && b.step == 0, "step 0: %s",
	      sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	get_stats(&s);
	CHECK(s.freed_in_use == 0, "%ld frees of memory a queued copy writes", s.freed_in_use);
	CHECK(s.frees < s.allocs, "%ld of %ld device buffers freed", s.frees, s.allocs);
	expect_step_on_cpu(f, 1);
	feed_stop(f);
}

/* No device (FAKE_CUDA_DEVICES=0 or cuInit's NO_DEVICE): -ENODEV; any other cuInit
 * failure: SF_E_CUDA with its name. */
static void case_no_device(int want_rc, const char *expect)
{
	struct feed *f = start("nodev", 1);
	struct sf_consumer *c = NULL;
	char msg[256] = "";
	int r = sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg));

	CHECK(r == want_rc, "attach returned %d: %s", r, msg);
	CHECK(strstr(msg, expect) != NULL, "message '%s' lacks '%s'", msg, expect);
	CHECK(sf_consumer_attach(f->opt.job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) == 0, "%s",
	      msg);
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * Detach when the context cannot be made current (FAKE_CUDA_FAIL on the second push, the
 * first after attach): nothing can be freed in it, but the primary context is still
 * released (the driver then destroys it with what it holds). Before, the reference was
 * kept, and with it the context, its memory and the arena's registration.
 */
static void case_detach_push_fails(void)
{
	struct feed *f;
	struct sf_consumer *c = NULL;
	struct fake_cuda_stats s;
	char msg[256] = "";

	load();
	f = start("pushfail", 1);
	CHECK(sf_consumer_attach(f->opt.job, 0, 0, 0, &c, msg, sizeof(msg)) == 0, "%s", msg);
	sf_consumer_detach(c);
	get_stats(&s);
	CHECK(s.retains == 1 && s.releases == 1, "%ld retains, %ld releases", s.retains,
	      s.releases);
	feed_stop(f);
}

struct run {
	const char *name;
	const char *env[2];
	int kind;
	const char *expect;
};

/* With an argument, runs only the cases whose name contains it. */
int main(int argc, char **argv)
{
	static const struct run runs[] = {
		{"copies, eager, NULL stream", {"FAKE_CUDA_POLICY=eager"}, 0, NULL},
		{"copies, lazy, NULL stream", {"FAKE_CUDA_POLICY=lazy"}, 0, NULL},
		{"copies, lazy, caller's stream", {"FAKE_CUDA_POLICY=lazy"}, 1, NULL},
		{"copies lazy, NULL stream eager", {"FAKE_CUDA_POLICY=lazy"}, 6, NULL},
		{"copies lazy, caller's stream eager", {"FAKE_CUDA_POLICY=lazy"}, 7, NULL},
		{"attach: retain fails",
		 {"FAKE_CUDA_FAIL=cuDevicePrimaryCtxRetain:2"},
		 2,
		 "cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"attach: no registration, 2nd staging buffer fails",
		 {"FAKE_CUDA_NO_REGISTER=1", "FAKE_CUDA_FAIL=cuMemAllocHost:2:2"},
		 2,
		 "cuMemAllocHost: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"attach: stream fails",
		 {"FAKE_CUDA_FAIL=cuStreamCreate:2"},
		 2,
		 "cuStreamCreate: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"attach: 2nd buffer fails",
		 {"FAKE_CUDA_FAIL=cuMemAlloc:2:2"},
		 2,
		 "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"attach: 4th event fails",
		 {"FAKE_CUDA_FAIL=cuEventCreate:2:4"},
		 2,
		 "cuEventCreate: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"attach: no such device",
		 {"FAKE_CUDA_FAIL=cuDeviceGet:101"},
		 2,
		 "cuDeviceGet: CUDA_ERROR_INVALID_DEVICE (101): invalid device ordinal"},
		{"copy fails mid-run", {"FAKE_CUDA_FAIL=cuMemcpyHtoDAsync:2:5"}, 3, NULL},
		{"copy fails mid-run, a sticky error",
		 {"FAKE_CUDA_FAIL=cuMemcpyHtoDAsync:700:5:sticky"},
		 18,
		 NULL},
		{"no device", {"FAKE_CUDA_DEVICES=0"}, 4, "no CUDA device"},
		{"attach in a child of fork()", {"FAKE_CUDA_POLICY=eager"}, 14, NULL},
		{"cuInit: NO_DEVICE", {"FAKE_CUDA_INIT=100"}, 4, "no CUDA device"},
		{"cuInit fails",
		 {"FAKE_CUDA_INIT=3"},
		 5,
		 "cuInit: CUDA_ERROR_NOT_INITIALIZED (3): initialization error"},
		{"cuInit: the toolkit's stub", {"FAKE_CUDA_INIT=34"}, 4, "toolkit's stub"},
		{"detach: the context cannot be pushed",
		 {"FAKE_CUDA_FAIL=cuCtxPushCurrent:201:2"},
		 13,
		 NULL},
		{"next() on a thread without a context", {"FAKE_CUDA_POLICY=lazy"}, 8, NULL},
		{"detach with the caller's reads queued", {"FAKE_CUDA_POLICY=lazy"}, 9, NULL},
		{"the caller switches streams", {"FAKE_CUDA_POLICY=eager"}, 10, NULL},
		{"copies staged, lazy (registration not supported)",
		 {"FAKE_CUDA_POLICY=lazy", "FAKE_CUDA_NO_REGISTER=1"},
		 12,
		 NULL},
		{"copies staged, eager (registration fails)",
		 {"FAKE_CUDA_POLICY=eager", "FAKE_CUDA_FAIL=cuMemHostRegister:2:0"},
		 12,
		 NULL},
		{"explicit release, three batches held",
		 {"FAKE_CUDA_POLICY=eager", "SHMFEED_GPU_BUFFERS=3"},
		 11,
		 NULL},
		{"the GPU behind the host", {"FAKE_CUDA_POLICY=eager"}, 15, NULL},
		{"the query of a queued copy fails",
		 {"FAKE_CUDA_POLICY=eager", "FAKE_CUDA_FAIL=cuEventQuery:900:3"},
		 16,
		 NULL},
		{"the record of a queued copy fails, then a seek",
		 {"FAKE_CUDA_POLICY=lazy", "FAKE_CUDA_FAIL=cuEventRecord:1:5"},
		 17,
		 NULL},
		{"the record and the wait of a queued copy fail, then a seek",
		 {"FAKE_CUDA_POLICY=lazy",
		  "FAKE_CUDA_FAIL=cuEventRecord:1:5,cuStreamSynchronize:900:1"},
		 19,
		 NULL},
		{"detach while no wait works",
		 {"FAKE_CUDA_POLICY=lazy",
		  "FAKE_CUDA_FAIL=cuEventQuery:900:0,cuStreamSynchronize:900:0,"
		  "cuEventSynchronize:900:0"},
		 21,
		 NULL},
		{"the record of a queued copy fails, every wait too",
		 {"FAKE_CUDA_POLICY=lazy",
		  "FAKE_CUDA_FAIL=cuEventRecord:1:5,cuStreamSynchronize:900:0"},
		 20,
		 NULL},
	};
	int bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		const struct run *t = &runs[i];
		int status;
		pid_t pid;

		if (argc > 1 && !strstr(t->name, argv[1]))
			continue;
		pid = fork();

		if (pid == 0) {
			for (int k = 0; k < 2 && t->env[k]; k++)
				putenv((char *)t->env[k]);
			if (t->kind <= 1 || t->kind == 6 || t->kind == 7)
				case_copies(t->kind & 1, t->kind >= 6, 0);
			else if (t->kind == 12)
				case_copies(0, 0, 1);
			else if (t->kind == 8)
				case_other_thread();
			else if (t->kind == 9)
				case_detach_with_reads_queued();
			else if (t->kind == 10)
				case_switch_stream();
			else if (t->kind == 11)
				case_explicit_release();
			else if (t->kind == 13)
				case_detach_push_fails();
			else if (t->kind == 2)
				case_attach_fails(t->expect);
			else if (t->kind == 3)
				case_copy_fails();
			else if (t->kind == 14)
				case_attach_after_fork();
			else if (t->kind == 15)
				case_gpu_behind();
			else if (t->kind == 16)
				case_query_fails();
			else if (t->kind == 17)
				case_record_fails();
			else if (t->kind == 18)
				case_copy_fails_sticky();
			else if (t->kind == 21)
				case_detach_waits_fail();
			else if (t->kind == 19)
				case_record_fails();
			else if (t->kind == 20)
				case_record_and_every_wait_fail();
			else
				case_no_device(t->kind == 4 ? -ENODEV : SF_E_CUDA, t->expect);
			_exit(failed);
		}
		if (pid < 0 || waitpid(pid, &status, 0) != pid) {
			printf("FAIL: %s: cannot run it\n", t->name);
			bad = 1;
			continue;
		}
		if (WIFSIGNALED(status))
			printf("FAIL: %s: killed by signal %d\n", t->name, WTERMSIG(status));
		else
			printf("%s: %s\n", WEXITSTATUS(status) ? "FAIL" : "ok", t->name);
		bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	return bad;
}
