/*
 * The consumer: what a training rank links (or binds with ctypes). A handle attaches to a
 * job's arena as the consumer participant of one local rank, claims that rank's steps in
 * order, and hands each batch out either as a read-only zero-copy view of the slot (CPU
 * mode) or copied with cuMemcpyHtoDAsync into one of two device buffers (GPU mode). It
 * keeps the rank's resume state and a provenance chain over the digests of the batches
 * it handed out. Everything is allocated at attach; next() and release() allocate
 * nothing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#ifdef SF_HAVE_XXH3_DISPATCH
/* Replaces XXH3_64bits and its variants by libxxhash's runtime-dispatched versions:
 * the same hashes, computed with the widest vector unit the CPU has. */
#include <xxh_x86dispatch.h>
#endif

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/node_ranks.h"
#include "common/proc.h"
#include "common/slot.h"
#include "consumer/cuda.h"
#include "consumer/widen.h"

/* Log-linear histogram of wait times: values below 16 ns exactly, then 8 sub-buckets
 * per power of two up to 2^63. */
#define HIST_SUB     8u
#define HIST_LINEAR  16u
#define HIST_BUCKETS (HIST_LINEAR + (64u - 4u) * HIST_SUB)

/*
 * Longest single wait of a consumer before it looks whether the job's launcher still
 * runs. A launcher killed outright (SIGKILL, a crash) takes its producers with it
 * (PR_SET_PDEATHSIG) and never marks the job STOPPING, so without this look a consumer
 * with no timeout would wait forever. Half a second keeps the answer within a second of
 * the death; the look reads /proc/PID/stat, which only a waiting consumer pays.
 */
#define LIVENESS_SLICE_NS (500 * 1000 * 1000)

struct sf_consumer_gpu {
	const struct sf_cuda *cu;
	sf_cudevice dev;
	sf_cucontext ctx;
	sf_custream stream;	 /* this handle's copy stream */
	sf_custream user_stream; /* where the caller uses batches */
	sf_cudeviceptr buf[SF_GPU_BUFFERS_MAX];
	sf_cuevent copied[SF_GPU_BUFFERS_MAX]; /* on `stream` after the copy into buf[i] */
	sf_cuevent used[SF_GPU_BUFFERS_MAX];   /* on user_stream after the caller's work */
	sf_cuevent switched; /* recorded on the previous user_stream by set_stream */
	uint8_t used_valid[SF_GPU_BUFFERS_MAX];
	uint8_t out[SF_GPU_BUFFERS_MAX]; /* handed out, its "used" event not recorded yet */
	uint64_t step_in[SF_GPU_BUFFERS_MAX];
	void *registered; /* the ring's payloads, registered with the driver */
	/* Where the ring could not be registered: one pinned staging buffer per device
	 * buffer, which a batch is copied into on the CPU before its DMA. */
	void *staging[SF_GPU_BUFFERS_MAX];
	uint64_t staged_copies;
	uint32_t nbuf;
	uint32_t explicit_release; /* SF_ATTACH_EXPLICIT_RELEASE */
	uint32_t next_buf;
	uint32_t held_buf; /* the buffer of the slot still held (being copied) */
	uint32_t last_buf; /* the buffer of the last batch handed out */
};

struct sf_consumer {
	struct sf_arena *a;
	uint32_t rank;	      /* local rank: ring index in the arena */
	uint32_t me;	      /* participant index: max_producers + rank */
	uint32_t global_rank; /* rank_base + rank */
	uint32_t ended;	      /* an end marker was met; cleared by seek */
	uint32_t gone;	      /* the job's launcher was found dead: for good */
	uint64_t end_step;    /* the first step past a finite job's data, from its end marker */
	uint64_t step;	      /* the next step to claim */
	uint64_t token_bytes; /* B * (T+1) * token size: what is digested and copied */
	uint64_t doc_off;     /* where the document starts begin in a payload */
	uint64_t copy_bytes;  /* GPU: the tokens, and document starts and sources when there */
	uint64_t sources_off; /* where a mixture's row sources begin in a payload; 0: none */
	struct sf_slot *held; /* CPU: the slot handed out; GPU: the slot being copied */
	/* GPU: the held slot's step was not handed out (a call failed after its copy was
	 * queued, and waiting for that copy failed too): the slot goes back READY for the
	 * same step, not FREE, once the copy is known to be done. */
	uint32_t undelivered;
	void **out;	      /* CPU: widened copies of batches, in turn */
	uint32_t out_count;
	uint32_t out_next;    /* the buffer of the next widened batch */
	uint32_t out_dtype;   /* their SF_DTYPE_I32 or SF_DTYPE_I64 */
	uint32_t out_targets; /* the targets follow the tokens in each (SF_OUTPUT_TARGETS) */
	uint64_t provenance;
	uint64_t batches;
	uint64_t tokens;
	uint64_t wait_total;
	uint64_t wait_carry; /* waited for this step by calls that timed out, not yet counted */
	uint64_t liveness_checked_ns; /* when the launcher was last seen alive */
	uint64_t stalls;	      /* batches that waited SF_CONSUMER_STALL_NS or more */
	uint32_t wait_hist[HIST_BUCKETS];
	/* The counters as the previous sf_consumer_window() left them: a window's figures
	 * are the differences, so that the hot path keeps one histogram only. */
	struct {
		uint64_t batches, tokens, wait_total, stalls;
		uint32_t wait_hist[HIST_BUCKETS];
	} window_mark;
	int32_t device;
	struct sf_consumer_gpu gpu;
	struct sf_err err;
	/* 1 while a thread is inside a call that uses the handle: a second thread's call
	 * meanwhile is refused (see enter()). */
	atomic_uint in_call;
	uint64_t serial; /* this handle among the process's attaches, for `aside` */
};

/*
 * This thread's last failure on each handle it failed on lately, which
 * sf_consumer_errmsg() gives it: a call's failure is copied here as the call leaves,
 * and a refused call or a const call's bad argument is written here only. So a thread
 * reads its own failure, whatever another thread's call writes into the handle
 * meanwhile, and a refused thread writes nothing a thread inside a call may write. The
 * serial tells a handle from a later one attached at the same address. One entry per
 * handle, of the ASIDE_HANDLES last ones: with one, a failure on a second handle took
 * the first's place, and its errmsg() gave another thread's failure (a review).
 */
#define ASIDE_HANDLES 8

static _Thread_local struct aside {
	const struct sf_consumer *c;
	uint64_t serial;
	char msg[sizeof(((struct sf_err *)0)->msg)];
} asides[ASIDE_HANDLES];
static _Thread_local unsigned aside_next; /* the entry a new handle takes */

static atomic_uint_least64_t attaches;

/* This thread's entry for handle c, or NULL. */
static struct aside *aside_of(const struct sf_consumer *c)
{
	for (unsigned i = 0; i < ASIDE_HANDLES; i++)
		if (asides[i].c == c && asides[i].serial == c->serial)
			return &asides[i];
	return NULL;
}

/* This thread's entry for handle c: its own, else the oldest taken over. */
static struct aside *aside_for(const struct sf_consumer *c)
{
	struct aside *a = aside_of(c);

	if (!a) {
		a = &asides[aside_next++ % ASIDE_HANDLES];
		a->c = c;
		a->serial = c->serial;
	}
	return a;
}

static int set_aside(const struct sf_consumer *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int set_aside(const struct sf_consumer *c, int code, const char *fmt, ...)
{
	struct aside *a = aside_for(c);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(a->msg, sizeof(a->msg), fmt, ap);
	va_end(ap);
	return code;
}

/* The refusal of every call on a handle of the parent (after fork(), see enter()). */
static int refuse_inherited(const struct sf_consumer *c)
{
	return set_aside(c, SF_E_STATE,
			 "rank %u: this handle was attached by the parent of this process (before "
			 "fork()); attach again here",
			 c->global_rank);
}

/*
 * A handle serves one thread at a time. A call that finds another thread inside a call
 * of the same handle is refused with SF_E_STATE and changes nothing: the two would both
 * claim steps and overwrite one another's held slot, leaving a slot claimed that nothing
 * releases, so that the rank would wait for it forever, even from a fresh handle.
 *
 * A handle copied into a child of fork() is its parent's: the rank's entry, the slot held
 * and the device state are the parent's, and its figures the parent's at the fork, so
 * the child may only let go of its copy. Every call is refused there before it looks at
 * in_call, which a parent's thread inside a call at the fork left set; detach only
 * unmaps.
 */
static int enter(struct sf_consumer *c)
{
	if (c->a->inherited)
		return refuse_inherited(c);
	if (atomic_exchange_explicit(&c->in_call, 1, memory_order_acquire))
		return set_aside(c, SF_E_STATE,
				 "this consumer handle was called from two threads at once: a "
				 "handle serves one thread at a time (attach one per thread, or "
				 "serialize the calls)");
	return 0;
}

/* Leave the call that returns `r`, keeping its failure as this thread's. */
static void leave(struct sf_consumer *c, int r)
{
	if (r < 0) {
		struct aside *a = aside_for(c);
		size_t n = strnlen(c->err.msg, sizeof(a->msg) - 1);

		memcpy(a->msg, c->err.msg, n);
		a->msg[n] = '\0';
	}
	atomic_store_explicit(&c->in_call, 0, memory_order_release);
}

/* Return `call` made inside enter() and leave(), or enter()'s refusal. */
#define GUARDED(c, call)                                                                           \
	do {                                                                                       \
		int r_ = enter(c);                                                                 \
		if (r_ == 0) {                                                                     \
			r_ = (call);                                                               \
			leave(c, r_);                                                              \
		}                                                                                  \
		return r_;                                                                         \
	} while (0)

static uint32_t hist_bucket(uint64_t v)
{
	uint32_t e;

	if (v < HIST_LINEAR)
		return (uint32_t)v;
	e = 63u - (uint32_t)__builtin_clzll(v);
	return HIST_LINEAR + (e - 4u) * HIST_SUB + (uint32_t)((v >> (e - 3u)) & (HIST_SUB - 1u));
}

/*
 * Counters the supervisor reads for `status` and `top`, in this consumer's participant
 * entry and telemetry block, which have one writer: this handle. The arena histogram is coarser
 * than the handle's: floor(log2(ns)) buckets.
 */
static void publish_telemetry(struct sf_consumer *c, uint64_t waited, uint64_t tokens)
{
	struct sf_telemetry *t = &c->a->telemetry[c->me];
	struct sf_participant *p = &c->a->participants[c->me];
	uint32_t b = waited ? 63u - (uint32_t)__builtin_clzll(waited) : 0;

	sf__counter_add(&t->wait_hist[b < SF_WAIT_BUCKETS ? b : SF_WAIT_BUCKETS - 1], 1);
	sf__counter_add(&t->tokens, tokens);
	sf__counter_add(&p->batches, 1);
	sf__counter_add(&p->wait_ns, waited);
}

/* The middle of a bucket's range, as the value it stands for. */
static uint64_t hist_value(uint32_t b)
{
	uint32_t e, sub;
	uint64_t lo, width;

	if (b < HIST_LINEAR)
		return b;
	e = (b - HIST_LINEAR) / HIST_SUB + 4u;
	sub = (b - HIST_LINEAR) % HIST_SUB;
	width = UINT64_C(1) << (e - 3u);
	lo = (UINT64_C(1) << e) + sub * width;
	return lo + width / 2;
}

/*
 * The pct-th percentile of the counts in `hist` less those in `mark` (NULL: none), which
 * add up to `total`. Counts only grow, so each difference is the bucket's count since the
 * mark was taken (uint32 arithmetic: exact across a wrap, as long as a window holds fewer
 * than 2^32 batches).
 */
static uint64_t hist_percentile(const uint32_t *hist, const uint32_t *mark, uint64_t total,
				uint32_t pct)
{
	uint64_t rank, seen = 0;

	if (!total)
		return 0;
	rank = (total * pct + 99) / 100;
	for (uint32_t b = 0; b < HIST_BUCKETS; b++) {
		seen += (uint32_t)(hist[b] - (mark ? mark[b] : 0u));
		if (seen >= rank)
			return hist_value(b);
	}
	return hist_value(HIST_BUCKETS - 1);
}

uint64_t sf_digest(const void *p, uint64_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(p, (size_t)len, seed);
}

static uint64_t provenance_next(uint64_t chain, uint64_t step, uint64_t digest)
{
	unsigned char rec[16];

	for (int i = 0; i < 8; i++) {
		rec[i] = (unsigned char)(step >> (8 * i));
		rec[8 + i] = (unsigned char)(digest >> (8 * i));
	}
	return XXH3_64bits_withSeed(rec, sizeof(rec), chain);
}

static int cuda_call(struct sf_consumer *c, sf_curesult r, const char *what)
{
	return sf__cuda_check(c->gpu.cu, r, what, &c->err);
}

/* Whether a wait's result leaves work possibly still to run: a failure that is not
 * sticky (after a sticky one, no work of the context runs again). */
static bool unfinished(sf_curesult q)
{
	return q != SF_CUDA_SUCCESS && !sf__cuda_sticky(q);
}

static void gpu_teardown(struct sf_consumer *c)
{
	struct sf_consumer_gpu *g = &c->gpu;
	const struct sf_cuda *cu = g->cu;
	sf_cucontext popped;
	bool busy = false;

	if (!cu)
		return;
	/* Teardown runs on every exit path, so it ignores failures: nothing more can be
	 * done about them and the first error is already in the handle. */
	if (cu->cuCtxPushCurrent(g->ctx) != SF_CUDA_SUCCESS) {
		/* Nothing can be freed in a context that cannot be made current; releasing it
		 * (which needs none) lets the driver destroy it with all it holds. */
		cu->cuDevicePrimaryCtxRelease(g->dev);
		memset(g, 0, sizeof(*g));
		return;
	}
	/* The caller's work queued on its stream may still read the device buffers: an
	 * event recorded there now completes after it. Then the copies. Where a wait
	 * fails but the context lives on (another thread's graph capture refuses it), that
	 * work may still run: the memory it reads and writes is left to the driver rather
	 * than freed under it, where the caller's next allocation could take it (cuMemFree
	 * "may" synchronize, cuda.h says, not that it does). */
	if (g->used[0]) {
		sf_curesult q = cu->cuEventRecord(g->used[0], g->user_stream);

		busy = unfinished(q == SF_CUDA_SUCCESS ? cu->cuEventSynchronize(g->used[0]) : q);
	}
	if (g->stream)
		busy |= unfinished(cu->cuStreamSynchronize(g->stream));
	for (uint32_t i = 0; i < g->nbuf; i++) {
		if (g->copied[i])
			cu->cuEventDestroy(g->copied[i]);
		if (g->used[i])
			cu->cuEventDestroy(g->used[i]);
		if (g->buf[i] && !busy)
			cu->cuMemFree(g->buf[i]);
		if (g->staging[i] && !busy)
			cu->cuMemFreeHost(g->staging[i]);
	}
	if (g->switched)
		cu->cuEventDestroy(g->switched);
	if (g->stream)
		cu->cuStreamDestroy(g->stream);
	if (g->registered && !busy)
		cu->cuMemHostUnregister(g->registered);
	cu->cuCtxPopCurrent(&popped);
	cu->cuDevicePrimaryCtxRelease(g->dev);
	memset(g, 0, sizeof(*g));
}

/*
 * The number of device buffers: SF_ATTACH_GPU_BUFFERS(n) in the flags (checked by
 * check_attach_args()), else $SHMFEED_GPU_BUFFERS, else 2.
 */
static int gpu_buffer_count(struct sf_consumer *c, uint32_t flags, uint32_t *ret_n)
{
	const char *env = getenv("SHMFEED_GPU_BUFFERS");
	unsigned long n = (flags >> 8) & 0xffu;
	char *end = NULL;

	if (!n && env && *env) {
		n = strtoul(env, &end, 10);
		if (*end)
			n = 0;
		if (n < 1 || n > SF_GPU_BUFFERS_MAX)
			return sf__err(&c->err, SF_E_RANGE,
				       "SHMFEED_GPU_BUFFERS='%s': expected 1..%d device buffers",
				       env, SF_GPU_BUFFERS_MAX);
	}
	if (!n)
		n = 2;
	*ret_n = (uint32_t)n;
	return 0;
}

static int gpu_setup(struct sf_consumer *c, int32_t device, uint32_t flags)
{
	struct sf_consumer_gpu *g = &c->gpu;
	const struct sf_cuda *cu;
	sf_cucontext popped;
	sf_curesult rr;
	uint32_t nbuf = 2;
	int r;

	/* The driver first: without one the caller hears -ENODEV (and may fall back to
	 * the CPU), whatever the buffer count would have been. */
	r = sf__cuda_load(&cu, &c->err);
	if (r < 0)
		return r;
	r = gpu_buffer_count(c, flags, &nbuf);
	if (r < 0)
		return r;
	r = sf__cuda_check(cu, cu->cuDeviceGet(&g->dev, device), "cuDeviceGet", &c->err);
	if (r < 0)
		return r;
	r = sf__cuda_check(cu, cu->cuDevicePrimaryCtxRetain(&g->ctx, g->dev),
			   "cuDevicePrimaryCtxRetain", &c->err);
	if (r < 0)
		return r;
	g->cu = cu;
	g->nbuf = nbuf;
	g->explicit_release = (flags & SF_ATTACH_EXPLICIT_RELEASE) != 0;
	r = cuda_call(c, cu->cuCtxPushCurrent(g->ctx), "cuCtxPushCurrent");
	if (r < 0) {
		cu->cuDevicePrimaryCtxRelease(g->dev);
		memset(g, 0, sizeof(*g));
		return r;
	}
	/* The primary context is the one the CUDA runtime (and so PyTorch) uses, so the
	 * device pointers handed out are valid in the caller's tensors. Only this rank's
	 * ring is registered: it is all this handle copies from. Where registration fails
	 * (confidential-computing mode, containers with a low locked-memory limit), batches
	 * are staged through pinned buffers instead: one memcpy more per batch. The reason
	 * stays in the handle's message, for the caller to log (sf_consumer_stats() says
	 * that batches are staged). */
	rr = cu->cuMemHostRegister(sf__arena_payload(c->a, c->rank, 0),
				   (size_t)c->a->geo.slots_per_rank * c->a->payload_stride,
				   SF_CU_MEMHOSTREGISTER_PORTABLE);
	if (rr == SF_CUDA_SUCCESS)
		g->registered = sf__arena_payload(c->a, c->rank, 0);
	else
		sf__err(&c->err, SF_E_CUDA,
			"cuMemHostRegister: %s (%u): %s: batches are staged through pinned "
			"buffers",
			sf__cuda_error_name(cu, rr), rr, sf__cuda_error_text(cu, rr));
	r = cuda_call(c, cu->cuStreamCreate(&g->stream, SF_CU_STREAM_NON_BLOCKING),
		      "cuStreamCreate");
	if (r >= 0)
		r = cuda_call(c, cu->cuEventCreate(&g->switched, SF_CU_EVENT_DISABLE_TIMING),
			      "cuEventCreate");
	for (uint32_t i = 0; i < nbuf && r >= 0; i++) {
		r = cuda_call(c, cu->cuMemAlloc(&g->buf[i], c->copy_bytes), "cuMemAlloc");
		if (r >= 0)
			r = cuda_call(c,
				      cu->cuEventCreate(&g->copied[i], SF_CU_EVENT_DISABLE_TIMING),
				      "cuEventCreate");
		if (r >= 0)
			r = cuda_call(c, cu->cuEventCreate(&g->used[i], SF_CU_EVENT_DISABLE_TIMING),
				      "cuEventCreate");
		if (r >= 0 && !g->registered)
			r = cuda_call(c, cu->cuMemAllocHost(&g->staging[i], c->copy_bytes),
				      "cuMemAllocHost");
	}
	cu->cuCtxPopCurrent(&popped);
	if (r < 0)
		gpu_teardown(c);
	return r;
}

/*
 * Whether the next half ring of this rank's steps is (as far as one look tells) READY.
 * Waking a sleeping producer is a futex syscall, several microseconds on the consumer's
 * critical path; while half a ring of batches is buffered, the refill can wait until the
 * consumer comes closer, so producers are woken once per K/2 steps instead of every step,
 * and then refill in a burst. Rings of fewer than 4 slots always wake.
 */
static int ring_well_stocked(const struct sf_consumer *c)
{
	const uint32_t K = c->a->geo.slots_per_rank;
	uint64_t t = c->step + K / 2 - 1;
	const struct sf_slot *s = sf__arena_slot(c->a, c->rank, (uint32_t)(t % K));

	if (K < 4)
		return 0;
	/* Relaxed: only a hint. Either way the slot just released is FREE already, and
	 * sleeping producers rescan within 100 ms even without a wake. */
	return atomic_load_explicit(&s->word, memory_order_relaxed) ==
	       sf__slot_word(SF_SLOT_READY, 0, t / K);
}

/*
 * GPU mode: wait until the copy out of the held slot has completed, at most *timeout_ns
 * (NULL: forever), with the handle's context current; the time waited comes off
 * *timeout_ns when it is above 0. Returns 0, SF_E_AGAIN (timeout 0) or SF_E_TIMEOUT while
 * it has not (a copy queued behind the caller's work on its buffer runs when the GPU gets
 * there), or SF_E_CUDA. Polls, where cuEventSynchronize would block past any timeout and
 * past Ctrl-C, spinning or yielding a core as the context is set up to: most copies are
 * done at the first look (no clock read then), and a late one is looked at again after
 * 20 us, then after pauses doubling up to 640 us, well within the work the GPU still has
 * queued behind it.
 */
static int wait_copied(struct sf_consumer *c, int64_t *timeout_ns, sf_curesult *ret_q)
{
	const struct sf_cuda *cu = c->gpu.cu;
	sf_cuevent copied = c->gpu.copied[c->gpu.held_buf];
	uint64_t start = 0;
	int64_t pause = 20000, nap;

	for (;;) {
		sf_curesult q = cu->cuEventQuery(copied);
		int64_t left = -1, waited;

		*ret_q = q;
		if (q != SF_CUDA_ERROR_NOT_READY) {
			if (start && timeout_ns && *timeout_ns > 0) {
				waited = (int64_t)(sf__now_ns() - start);
				*timeout_ns = waited < *timeout_ns ? *timeout_ns - waited : 0;
			}
			return cuda_call(c, q, "cuEventQuery");
		}
		if (!start)
			start = sf__now_ns();
		if (timeout_ns) {
			left = *timeout_ns - (int64_t)(sf__now_ns() - start);
			if (left <= 0) {
				int r = *timeout_ns ? SF_E_TIMEOUT : SF_E_AGAIN;

				return sf__err(&c->err, r,
					       "rank %u: the copy of step %llu to the device has "
					       "not completed (the GPU has yet to finish the work "
					       "queued before it on the buffer)",
					       c->global_rank, (unsigned long long)(c->step - 1));
			}
		}
		nap = left >= 0 && left < pause ? left : pause;
		nanosleep(
			&(struct timespec){.tv_sec = nap / 1000000000, .tv_nsec = nap % 1000000000},
			NULL);
		if (pause < 640000)
			pause *= 2;
	}
}

/*
 * The held slot of a step not handed out (c->undelivered) goes back READY for that step
 * once its stream has been waited for, or its context is lost (no copy of it will run
 * then), or after the teardown (a copy still queued then writes a device buffer nobody
 * reads again: freed, or left to the driver where the teardown could not wait). While
 * the wait fails otherwise (another thread's graph capture refuses it), the slot stays
 * held and the call fails: a refill, after a seek, would change the bytes under the copy.
 */
static int give_back_undelivered(struct sf_consumer *c)
{
	int r = 0;

	if (c->gpu.cu) {
		const struct sf_cuda *cu = c->gpu.cu;
		sf_curesult q = cu->cuCtxPushCurrent(c->gpu.ctx);
		sf_cucontext popped;

		r = cuda_call(c, q, "cuCtxPushCurrent");
		if (r >= 0) {
			q = cu->cuStreamSynchronize(c->gpu.stream);
			r = cuda_call(c, q, "cuStreamSynchronize");
			cu->cuCtxPopCurrent(&popped);
		}
		if (r < 0 && unfinished(q))
			return r;
	}
	sf__consumer_unclaim(c->a, c->rank, c->held, 0);
	c->held = NULL;
	c->undelivered = 0;
	return r;
}

/*
 * Release the held slot; in GPU mode first wait until its copy has completed, at most
 * *timeout_ns (NULL: forever; what it waited comes off): SF_E_AGAIN or SF_E_TIMEOUT then,
 * the slot still held. So too when the context cannot be pushed or the copy's event not
 * queried but the context lives on (another thread's graph capture refuses the query):
 * the copy may still be queued, reading the slot, and a refill would change the batch
 * the caller holds. A later call releases it once the query answers.
 */
static int release_held(struct sf_consumer *c, int64_t *timeout_ns)
{
	int r = 0;

	if (!c->held)
		return 0;
	if (c->undelivered)
		return give_back_undelivered(c);
	if (c->gpu.cu) {
		const struct sf_cuda *cu = c->gpu.cu;
		sf_curesult q = cu->cuCtxPushCurrent(c->gpu.ctx);
		sf_cucontext popped;

		/* The calling thread may have no context current (a loader thread): every
		 * driver call here runs in the primary context, pushed for it. */
		r = cuda_call(c, q, "cuCtxPushCurrent");
		if (r >= 0) {
			r = wait_copied(c, timeout_ns, &q);
			cu->cuCtxPopCurrent(&popped);
		}
		if (r == SF_E_AGAIN || r == SF_E_TIMEOUT || (r < 0 && !sf__cuda_sticky(q)))
			return r;
	}
	/* Released after a failed copy, or a context lost (no copy of it will run): its
	 * content is still in shared memory and the caller has the error; holding it would
	 * stall the producers. */
	if (sf__consumer_release_quiet(c->a, c->rank, c->held) < 0 && r >= 0)
		r = sf__err(&c->err, SF_E_STATE,
			    "rank %u: the slot of step %llu was taken from this consumer",
			    c->global_rank, (unsigned long long)(c->step - 1));
	c->held = NULL;
	if (!ring_well_stocked(c))
		sf__producers_wake(c->a);
	return r;
}

/* The step an end marker (a slot of length 0) says the data ended at. */
static uint64_t marker_end_step(const struct sf_consumer *c, const struct sf_slot *s)
{
	return s->first_sample / ((uint64_t)c->a->geo.batch * c->a->geo.world_size);
}

/*
 * A rank whose ring is past its finite job's end marker (the handle that met the marker
 * released it): the position is the end's, as it was for that handle, and next() says
 * the data ended. Told by the marker the producers put in the slot of the ring's next
 * step (until they have, the position is one past the end, and next() finds it).
 */
static void at_the_end(struct sf_consumer *c)
{
	const uint32_t K = c->a->geo.slots_per_rank;
	const struct sf_slot *s = sf__arena_slot(c->a, c->rank, (uint32_t)(c->step % K));
	/* Acquire: the marker's fields were written before its READY. */
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
	uint64_t end;

	if (sf__slot_state(w) != SF_SLOT_READY || sf__slot_lap(w) != c->step / K || s->length)
		return;
	end = marker_end_step(c, s);
	if (end < c->step) {
		c->step = end;
		c->end_step = end;
		c->ended = 1;
	}
}

/*
 * The rank's entry is held by a live process: name it, this one (another handle) or
 * another one. A refusal that is not about this rank's entry (a re-base that could not
 * repair an old rank) keeps its own message: the entry is free again by then.
 */
static void say_who_holds(struct sf_consumer *c, const char *job)
{
	int32_t pid = atomic_load_explicit(&c->a->participants[c->me].pid, memory_order_relaxed);

	if (pid == (int32_t)getpid())
		sf__err(&c->err, SF_E_BUSY,
			"job '%s': local rank %u is consumed by another handle in this process "
			"(detach it first)",
			job, c->rank);
	else if (pid > 0)
		sf__err(&c->err, SF_E_BUSY,
			"job '%s': local rank %u is consumed by another process (pid %d)", job,
			c->rank, (int)pid);
}

/* Flags and devices attach knows; SF_E_RANGE naming the first other one. */
static int check_attach_args(struct sf_err *e, int32_t device, uint32_t flags)
{
	const uint32_t known = SF_ATTACH_CPU | SF_ATTACH_EXPLICIT_RELEASE | SF_ATTACH_GPU_BUFFERS(0xff);
	uint32_t buffers = (flags >> 8) & 0xffu;

	if (flags & ~known)
		return sf__err(e, SF_E_RANGE, "unknown attach flags 0x%x", flags & ~known);
	if (buffers > SF_GPU_BUFFERS_MAX)
		return sf__err(e, SF_E_RANGE, "%u device buffers asked for, at most %d", buffers,
			       SF_GPU_BUFFERS_MAX);
	if (device < SF_DEVICE_NONE)
		return sf__err(e, SF_E_RANGE,
			       "device %d: a CUDA device ordinal (0 and up) or SF_DEVICE_NONE (-1)",
			       (int)device);
	return 0;
}

int sf_consumer_attach_ranks(const char *job, const struct sf_rank_env *env, int32_t device,
			     uint32_t flags, struct sf_consumer **ret_consumer, char *errmsg,
			     uint32_t errmsg_len)
{
	const struct sf_geometry *geo;
	struct sf_consumer *c;
	int64_t local_rank = env ? env->local_rank : -1;
	uint32_t base = 0;
	int r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		struct sf_err e;

		sf__err(&e, -ENOMEM, "out of memory");
		sf__err_copy(&e, errmsg, errmsg_len);
		return -ENOMEM;
	}
	c->device = SF_DEVICE_NONE;
	c->serial = atomic_fetch_add_explicit(&attaches, 1, memory_order_relaxed);
	if (!ret_consumer) {
		r = sf__err(&c->err, -EINVAL, "no place to store the handle");
		goto fail;
	}
	r = check_attach_args(&c->err, device, flags);
	if (r < 0)
		goto fail;
	r = sf__arena_attach(job, NULL, &c->a, &c->err);
	if (r < 0)
		goto fail;
	/* What a job killed outright left: READY batches nobody will follow. */
	if (!sf__arena_creator_alive(c->a)) {
		r = sf__err(&c->err, SF_E_JOB_GONE,
			    "the job's launcher (pid %d) is gone, and what it left is no job to "
			    "train on; the next `shmfeed run` of job '%s' reclaims its arena",
			    (int)c->a->hdr->creator_pid, job);
		goto fail;
	}
	geo = &c->a->geo;
	if (local_rank < 0 || (uint64_t)local_rank >= geo->ranks) {
		char started[160] = "";

		/* The launcher started more ranks than the job serves: say so, as rank 0's
		 * world size check does, not only that this one is out of range. */
		if (env && env->local_world_size > (int64_t)geo->ranks)
			snprintf(started, sizeof(started),
				 ": %lld ranks were started here; start as many as the job serves "
				 "or set consumers.local_ranks to them",
				 (long long)env->local_world_size);
		else if (env && env->world_size > (int64_t)geo->world_size)
			snprintf(
				started, sizeof(started),
				": %lld ranks were started in all; start as many as the job serves "
				"or set consumers.world_size to them",
				(long long)env->world_size);
		r = sf__err(&c->err, SF_E_RANGE,
			    "job '%s' has local ranks 0..%u (world size %u), not %lld%s", job,
			    geo->ranks - 1, geo->world_size, (long long)local_rank, started);
		goto fail;
	}
	c->rank = (uint32_t)local_rank;
	c->me = geo->max_producers + c->rank;
	c->token_bytes = (uint64_t)geo->batch * geo->seq_tokens * geo->token_bytes;
	c->doc_off = sf__doc_starts_offset(geo->batch, geo->seq_tokens, geo->token_bytes);
	c->sources_off = geo->flags & SF_ARENA_F_SOURCES
				 ? sf__sources_offset(geo->batch, geo->seq_tokens, geo->token_bytes,
						      geo->doc_starts_per_seq)
				 : 0;
	/* Document starts and row sources follow the tokens closely: one copy moves all. */
	c->copy_bytes =
		geo->doc_starts_per_seq || c->sources_off ? c->a->payload_bytes : c->token_bytes;
	/* Registers the rank and agrees on the node's rank base (or re-bases the node). */
	r = sf__node_ranks_register(c->a, c->rank, env, &base, &c->err);
	if (r < 0) {
		if (r == SF_E_BUSY)
			say_who_holds(c, job);
		goto fail;
	}
	c->global_rank = base + c->rank;
	/* Only this rank's part of the arena becomes resident here. A failure only means
	 * page faults on first use, so it is not one of attach's. */
	sf__arena_populate_rank(c->a, c->rank);
	/* Registration repaired a dead predecessor's claims (CLAIMED back to READY), and a
	 * seek it was killed in is finished here, so the ring's lowest step is the first one
	 * nobody finished with. */
	r = sf__ring_seek_unfinished(c->a, c->me, c->rank);
	if (r < 0) {
		r = sf__err(&c->err, r, "rank %u: the seek its previous consumer was killed in: %s",
			    c->global_rank, sf_strerror(r));
		goto fail_unregister;
	}
	c->step = sf__ring_next_step(c->a, c->rank);
	at_the_end(c);
	/* consumers.device: the job's choice of where batches go, over the caller's. */
	if (geo->flags & SF_ARENA_F_DEVICE_CPU) {
		device = SF_DEVICE_NONE;
	} else if ((geo->flags & SF_ARENA_F_DEVICE_CUDA) &&
		   (device < 0 || (flags & SF_ATTACH_CPU))) {
		r = sf__err(&c->err, SF_E_CUDA,
			    "job '%s' serves its batches on a GPU (consumers.device: cuda), and "
			    "rank %u asked for CPU views",
			    job, c->global_rank);
		goto fail_unregister;
	}
	if (device >= 0 && !(flags & SF_ATTACH_CPU)) {
		r = gpu_setup(c, device, flags);
		if (r < 0)
			goto fail_unregister;
		c->device = device;
	} else if (flags & SF_ATTACH_EXPLICIT_RELEASE) {
		/* Holding several batches needs device buffers: in CPU mode each batch lies
		 * in its slot, which the next call hands back. */
		r = sf__err(&c->err, SF_E_STATE,
			    "SF_ATTACH_EXPLICIT_RELEASE is a GPU mode; in CPU mode a batch is "
			    "released by the next call (attach without the flag)");
		goto fail_unregister;
	}
	*ret_consumer = c;
	return 0;

fail_unregister:
	sf__participant_unregister(c->a, c->me);
fail:
	sf__err_copy(&c->err, errmsg, errmsg_len);
	sf__arena_detach(c->a);
	free(c);
	return r;
}

int sf_consumer_attach(const char *job, int32_t local_rank, int32_t device, uint32_t flags,
		       struct sf_consumer **ret_consumer, char *errmsg, uint32_t errmsg_len)
{
	const struct sf_rank_env env = {
		.rank = -1,
		.local_rank = local_rank,
		.world_size = -1,
		.local_world_size = -1,
		.group_rank = -1,
	};

	return sf_consumer_attach_ranks(job, &env, device, flags, ret_consumer, errmsg, errmsg_len);
}

/* GPU mode: the device address of buffer i's document starts, or 0 when none. */
static uint64_t gpu_doc_starts(const struct sf_consumer *c, uint32_t i)
{
	if (!c->gpu.cu || i >= c->gpu.nbuf || !c->a->geo.doc_starts_per_seq)
		return 0;
	return c->gpu.buf[i] + c->doc_off;
}

int sf_consumer_device_buffer(const struct sf_consumer *c, uint32_t index, uint64_t *ret_tokens,
			      uint64_t *ret_doc_starts)
{
	if (c->a->inherited)
		return refuse_inherited(c);
	if (index >= c->gpu.nbuf) {
		if (!c->gpu.nbuf)
			return set_aside(c, SF_E_RANGE,
					 "device buffer %u: the handle is in CPU mode", index);
		return set_aside(c, SF_E_RANGE, "device buffer %u: the handle has %u", index,
				 c->gpu.nbuf);
	}
	*ret_tokens = c->gpu.buf[index];
	*ret_doc_starts = gpu_doc_starts(c, index);
	return 0;
}

int sf_consumer_info(const struct sf_consumer *c, struct sf_consumer_info *ret_info)
{
	struct sf_consumer_info info = {
		.local_rank = c->rank,
		.global_rank = c->global_rank,
		.world_size = c->a->geo.world_size,
		.ranks = c->a->geo.ranks,
		.rank_base = c->global_rank - c->rank,
		.slots_per_rank = c->a->geo.slots_per_rank,
		.batch = c->a->geo.batch,
		.seq_tokens = c->a->geo.seq_tokens,
		.dtype = c->a->geo.token_bytes == 2 ? SF_DTYPE_U16 : SF_DTYPE_I32,
		.doc_starts_per_seq = c->a->geo.doc_starts_per_seq,
		.device = c->device,
		.gpu_buffers = c->gpu.nbuf,
		.payload_stride = c->a->payload_stride,
		.ring_base = (uint64_t)(uintptr_t)sf__arena_payload(c->a, c->rank, 0),
		.device_buffer = {c->gpu.buf[0], c->gpu.buf[1]},
		.doc_starts_buffer = {gpu_doc_starts(c, 0), gpu_doc_starts(c, 1)},
		.config_digest = c->a->geo.config_digest,
		.sources_offset = c->sources_off,
	};

	*ret_info = info;
	return 0;
}

/* Widen batch `b` into this step's output buffer: its tokens, then (SF_OUTPUT_TARGETS)
 * tokens 1..T of each row back to back. */
static void widen_output(struct sf_consumer *c, const unsigned char *payload,
			 const struct sf_batch *b)
{
	const uint64_t S = b->seq_tokens, n = (uint64_t)b->batch * S;
	const size_t tb = b->dtype == SF_DTYPE_U16 ? 2 : 4,
		     ob = c->out_dtype == SF_DTYPE_I64 ? 8 : 4;
	unsigned char *out = c->out[b->output];

	sf_tokens_widen(payload, b->dtype, out, c->out_dtype, n);
	if (!c->out_targets)
		return;
	out += n * ob;
	for (uint32_t r = 0; r < b->batch; r++)
		sf_tokens_widen(payload + (r * S + 1) * tb, b->dtype, out + r * (S - 1) * ob,
				c->out_dtype, S - 1);
}

/* The end of a finite job's data (c->end_step), met by a next() of step `asked` (past it
 * after a seek). */
static int data_ended(struct sf_consumer *c, uint64_t asked)
{
	if (asked > c->end_step)
		return sf__err(&c->err, SF_E_END,
			       "rank %u: the data ended at step %llu, before step %llu (the job's "
			       "steps are 0..%llu)",
			       c->global_rank, (unsigned long long)c->end_step,
			       (unsigned long long)asked, (unsigned long long)c->end_step - 1);
	return sf__err(&c->err, SF_E_END, "rank %u: the data ended at step %llu", c->global_rank,
		       (unsigned long long)c->end_step);
}

static int set_stream_in(struct sf_consumer *c, uint64_t stream)
{
	struct sf_consumer_gpu *g = &c->gpu;
	sf_custream to = (sf_custream)(uintptr_t)stream;
	sf_cucontext popped;
	int r;

	if (!g->cu)
		return sf__err(&c->err, SF_E_STATE, "set_stream: the handle is in CPU mode");
	if (to == g->user_stream)
		return 0;
	/* The caller's work on the batches it holds may still sit on the old stream, and
	 * the waits for their copies do: the new stream waits for all of it, so that the
	 * "used" events recorded on it from now on come after that work, and work queued on
	 * it sees the copies. */
	r = cuda_call(c, g->cu->cuCtxPushCurrent(g->ctx), "cuCtxPushCurrent");
	if (r < 0)
		return r;
	r = cuda_call(c, g->cu->cuEventRecord(g->switched, g->user_stream), "cuEventRecord");
	if (r >= 0)
		r = cuda_call(c, g->cu->cuStreamWaitEvent(to, g->switched, 0), "cuStreamWaitEvent");
	g->cu->cuCtxPopCurrent(&popped);
	if (r < 0)
		return r;
	g->user_stream = to;
	return 0;
}

int sf_consumer_set_stream(struct sf_consumer *c, uint64_t stream)
{
	GUARDED(c, set_stream_in(c, stream));
}

/*
 * Mark the end of the caller's work on device buffer k: an event recorded on its stream,
 * which the copy that next refills k waits for. The context is current.
 */
static int gpu_mark_used(struct sf_consumer *c, uint32_t k)
{
	struct sf_consumer_gpu *g = &c->gpu;
	int r = cuda_call(c, g->cu->cuEventRecord(g->used[k], g->user_stream), "cuEventRecord");

	if (r < 0)
		return r;
	g->used_valid[k] = 1;
	g->out[k] = 0;
	return 0;
}

/* GPU mode: copy the claimed slot into the next device buffer (see the header comments
 * of sf_consumer_next() and sf_consumer_release_batch() for the ordering between the two
 * streams). */
static int gpu_copy(struct sf_consumer *c, const unsigned char *payload, struct sf_batch *b)
{
	struct sf_consumer_gpu *g = &c->gpu;
	const struct sf_cuda *cu = g->cu;
	uint32_t buf = g->next_buf;
	const void *src = payload;
	sf_cucontext popped;
	int r;

	r = cuda_call(c, cu->cuCtxPushCurrent(g->ctx), "cuCtxPushCurrent");
	if (r < 0)
		return r;
	/* Without explicit releases, everything the caller queued since the previous batch
	 * used that batch's buffer: mark its end now. */
	if (!g->explicit_release && g->out[g->last_buf]) {
		r = gpu_mark_used(c, g->last_buf);
		if (r < 0)
			goto out;
	}
	if (g->used_valid[buf]) {
		r = cuda_call(c, cu->cuStreamWaitEvent(g->stream, g->used[buf], 0),
			      "cuStreamWaitEvent");
		if (r < 0)
			goto out;
	}
	if (g->staging[buf]) {
		/* The DMA out of this staging buffer's previous batch is done: release_held()
		 * waited for it before this slot was claimed. */
		memcpy(g->staging[buf], payload, c->copy_bytes);
		src = g->staging[buf];
		g->staged_copies++;
	}
	r = cuda_call(c, cu->cuMemcpyHtoDAsync(g->buf[buf], src, c->copy_bytes, g->stream),
		      "cuMemcpyHtoDAsync");
	if (r < 0)
		goto out;
	r = cuda_call(c, cu->cuEventRecord(g->copied[buf], g->stream), "cuEventRecord");
	if (r >= 0)
		r = cuda_call(c, cu->cuStreamWaitEvent(g->user_stream, g->copied[buf], 0),
			      "cuStreamWaitEvent");
	/* The copy is queued but the call fails: the slot goes back to READY (next_in()),
	 * and a seek then let producers refill it before the copy ran (a review). It is
	 * waited for first (a context lost, a sticky error, runs no more copies); where
	 * the wait fails too, the slot stays held until one succeeds (release_held()). */
	if (r < 0)
		c->undelivered = unfinished(cu->cuStreamSynchronize(g->stream));
out:
	cu->cuCtxPopCurrent(&popped);
	if (r < 0)
		return r;
	g->held_buf = buf;
	g->last_buf = buf;
	g->out[buf] = 1;
	g->step_in[buf] = b->step;
	g->next_buf = (buf + 1) % g->nbuf;
	b->device_ptr = g->buf[buf];
	b->tokens = NULL;
	b->buffer = buf;
	b->doc_starts = (const uint32_t *)(uintptr_t)gpu_doc_starts(c, buf);
	b->sources =
		c->sources_off ? (const int32_t *)(uintptr_t)(g->buf[buf] + c->sources_off) : NULL;
	return 0;
}

/*
 * sf__consumer_claim() in slices of at most LIVENESS_SLICE_NS, looking between slices
 * whether the creator of the arena (the launcher: pid and start time in the header) still
 * runs. Returns what the claim returns, or SF_E_JOB_GONE once the creator is dead.
 */
static int claim_watching_job(struct sf_consumer *c, int64_t timeout_ns, struct sf_slot **ret_slot)
{
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : sf__now_ns() + (uint64_t)timeout_ns;
	int64_t slice = 0; /* first a look without waiting: a batch ready is taken at once */

	for (;;) {
		int r = sf__consumer_claim(c->a, c->me, c->rank, c->step, slice, ret_slot);
		uint64_t now;

		if (r != SF_E_TIMEOUT && r != SF_E_AGAIN)
			return r;
		/* Nothing ready: is anyone left to fill the ring? Looked at before the first
		 * wait of a handle and then once per slice, no more often across calls that
		 * do not wait (timeout 0) or wait briefly; once dead, always dead, so every
		 * later call that finds nothing ready returns at once. */
		now = sf__now_ns();
		if (!c->gone && now - c->liveness_checked_ns >= LIVENESS_SLICE_NS) {
			c->liveness_checked_ns = now;
			c->gone = !sf__arena_creator_alive(c->a);
		}
		if (c->gone)
			return SF_E_JOB_GONE;
		if (timeout_ns == 0)
			return r;
		if (deadline != UINT64_MAX && now >= deadline)
			return SF_E_TIMEOUT;
		slice = deadline - now < (uint64_t)LIVENESS_SLICE_NS ? (int64_t)(deadline - now)
								      : LIVENESS_SLICE_NS;
	}
}

static int next_in(struct sf_consumer *c, int32_t timeout_ms, struct sf_batch *ret_batch)
{
	struct sf_arena *a = c->a;
	const uint32_t K = a->geo.slots_per_rank;
	uint64_t t0, waited, tokens;
	int64_t timeout_ns = timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000000;
	struct sf_batch b;
	struct sf_slot *s;
	unsigned char *payload;
	int r;

	if (c->gpu.explicit_release) {
		/* The first free buffer from the one after the last filled: batches may be
		 * released in any order. */
		uint32_t k = 0;

		while (k < c->gpu.nbuf && c->gpu.out[(c->gpu.next_buf + k) % c->gpu.nbuf])
			k++;
		if (k == c->gpu.nbuf)
			return sf__err(&c->err, SF_E_STATE,
				       "rank %u: all %u device buffers hold batches not released "
				       "yet (release one with sf_consumer_release_batch, or "
				       "attach with more)",
				       c->global_rank, c->gpu.nbuf);
		c->gpu.next_buf = (c->gpu.next_buf + k) % c->gpu.nbuf;
	}
	/* What the release waited for comes off the time left to wait for the batch. */
	r = release_held(c, timeout_ns < 0 ? NULL : &timeout_ns);
	if (r < 0)
		return r;
	if (c->ended)
		return data_ended(c, c->step);
	if (c->step >= sf__arena_step_limit(&a->geo))
		return sf__err(&c->err, SF_E_RANGE,
			       "rank %u: step %llu is out of range: this job's steps are 0..%llu",
			       c->global_rank, (unsigned long long)c->step,
			       (unsigned long long)(sf__arena_step_limit(&a->geo) - 1));
	t0 = sf__now_ns();
	r = claim_watching_job(c, timeout_ns, &s);
	waited = sf__now_ns() - t0;
	/* A wait in several calls (the Python Loader polls first, then waits in slices, so
	 * that Ctrl-C and close() get through) counts as one: the batch's wait_ns is all of
	 * it. */
	if (r == SF_E_TIMEOUT || r == SF_E_AGAIN) {
		c->wait_carry += waited;
	} else {
		if (r == 0)
			waited += c->wait_carry;
		c->wait_carry = 0;
	}
	if (r == SF_E_CHECKSUM) {
		/* Hand the step back for a refill: FREE for this step again. */
		sf__consumer_unclaim(a, c->rank, s, 1);
		return sf__err(&c->err, r, "rank %u step %llu: payload checksum mismatch",
			       c->global_rank, (unsigned long long)c->step);
	}
	if (r < 0) {
		if (r == SF_E_STATE)
			return sf__err(&c->err, r,
				       "rank %u step %llu is no longer in the ring: another handle "
				       "moved the rank",
				       c->global_rank, (unsigned long long)c->step);
		if (r == SF_E_JOB_GONE)
			return sf__err(&c->err, r,
				       "rank %u step %llu: the job's launcher (pid %d) is gone, so "
				       "nothing will fill the ring; the next `shmfeed run` of job "
				       "'%s' reclaims its arena",
				       c->global_rank, (unsigned long long)c->step,
				       (int)a->hdr->creator_pid, a->hdr->job);
		return sf__err(&c->err, r, "rank %u step %llu: %s", c->global_rank,
			       (unsigned long long)c->step, sf_strerror(r));
	}
	if (s->length == 0) {
		/* The producers' end marker: every epoch asked for was delivered. The first
		 * one met is released, which moves the ring past the end: how the launcher
		 * tells the rank ended. A later one (the ring was past the end already) is
		 * put back as it was: released, each handle that met the end moved the
		 * rank's position one more step, and the next attach started there, its
		 * state past the end and an epoch the job does not have (a review). */
		const uint64_t asked = c->step;

		c->end_step = marker_end_step(c, s);
		if (c->step > c->end_step)
			sf__consumer_unclaim(a, c->rank, s, 0);
		else
			sf__consumer_release(a, c->rank, s);
		/* The position, and the state, are the end's from now on. */
		c->step = c->end_step;
		c->ended = 1;
		return data_ended(c, asked);
	}
	payload = sf__arena_payload(a, c->rank, (uint32_t)(c->step % K));
	b.step = c->step;
	b.first_sample = s->first_sample;
	b.batch = a->geo.batch;
	b.seq_tokens = a->geo.seq_tokens;
	b.dtype = a->geo.token_bytes == 2 ? SF_DTYPE_U16 : SF_DTYPE_I32;
	b.doc_starts_per_seq = a->geo.doc_starts_per_seq;
	b.tokens = payload;
	b.device_ptr = 0;
	b.doc_starts = b.doc_starts_per_seq ? (const uint32_t *)(payload + c->doc_off) : NULL;
	b.sources = c->sources_off ? (const int32_t *)(payload + c->sources_off) : NULL;
	/* The filler's digest of the tokens: next() reads no payload byte itself (the
	 * claim did, when this step's checksum was verified, and then compared it). */
	b.digest = s->digest;
	b.wait_ns = waited;
	b.buffer = (uint32_t)(c->step % K);
	b.output = c->out ? c->out_next : 0;
	b.provenance = c->provenance;
	b.epoch = a->geo.samples_per_epoch
			  ? c->step * a->geo.batch * a->geo.world_size / a->geo.samples_per_epoch
			  : 0;
	if (c->out)
		widen_output(c, payload, &b);
	c->held = s;
	if (c->gpu.cu) {
		r = gpu_copy(c, payload, &b);
		if (r < 0) {
			/* Serve the same step again on the next call, from the slot as it is
			 * (a copy that may still run keeps it held until then). */
			if (!c->undelivered) {
				sf__consumer_unclaim(a, c->rank, s, 0);
				c->held = NULL;
			}
			return r;
		}
	}
	c->provenance = provenance_next(c->provenance, b.step, b.digest);
	c->step++;
	if (c->out)
		c->out_next = (c->out_next + 1) % c->out_count;
	c->batches++;
	/* Training tokens, B x T, as `status`, the run's summary and the metrics count
	 * them: the T + 1 tokens of a row give T predictions. */
	tokens = (uint64_t)b.batch * (b.seq_tokens - 1);
	c->tokens += tokens;
	c->wait_total += waited;
	c->wait_hist[hist_bucket(waited)]++;
	c->stalls += waited >= SF_CONSUMER_STALL_NS;
	publish_telemetry(c, waited, tokens);
	*ret_batch = b;
	return 0;
}

int sf_consumer_next(struct sf_consumer *c, int32_t timeout_ms, struct sf_batch *ret_batch)
{
	GUARDED(c, next_in(c, timeout_ms, ret_batch));
}

static int release_in(struct sf_consumer *c)
{
	return release_held(c, NULL);
}

int sf_consumer_release(struct sf_consumer *c)
{
	GUARDED(c, release_in(c));
}

static int release_batch_in(struct sf_consumer *c, const struct sf_batch *batch)
{
	struct sf_consumer_gpu *g = &c->gpu;
	uint32_t k = batch->buffer;
	sf_cucontext popped;
	int r;

	if (!g->cu) {
		const uint32_t K = c->a->geo.slots_per_rank;

		/* This handle's ring, told by where the tokens lie: the step alone is no
		 * handle's. One of its batches released already is a no-op. */
		if (batch->tokens != sf__arena_payload(c->a, c->rank, (uint32_t)(batch->step % K)))
			return sf__err(&c->err, SF_E_STATE,
				       "rank %u: the batch of step %llu is not this handle's",
				       c->global_rank, (unsigned long long)batch->step);
		return batch->step + 1 == c->step ? release_held(c, NULL) : 0;
	}
	if (k >= g->nbuf || batch->device_ptr != g->buf[k])
		return sf__err(&c->err, SF_E_STATE,
			       "rank %u: the batch of step %llu is not this handle's",
			       c->global_rank, (unsigned long long)batch->step);
	if (!g->out[k] || g->step_in[k] != batch->step)
		return sf__err(&c->err, SF_E_STATE,
			       "rank %u: the batch of step %llu is not held (released already, or "
			       "implicitly by the next call)",
			       c->global_rank, (unsigned long long)batch->step);
	r = cuda_call(c, g->cu->cuCtxPushCurrent(g->ctx), "cuCtxPushCurrent");
	if (r < 0)
		return r;
	r = gpu_mark_used(c, k);
	g->cu->cuCtxPopCurrent(&popped);
	return r;
}

int sf_consumer_release_batch(struct sf_consumer *c, const struct sf_batch *batch)
{
	GUARDED(c, release_batch_in(c, batch));
}

static int state_in(struct sf_consumer *c, struct sf_resume *ret_state)
{
	const struct sf_geometry *geo = &c->a->geo;
	uint64_t samples = c->step * geo->batch * geo->world_size;
	struct sf_resume st = {
		.samples = samples,
		.epoch = geo->samples_per_epoch ? samples / geo->samples_per_epoch : 0,
		.config_digest = geo->config_digest,
		.provenance = c->provenance,
	};

	*ret_state = st;
	return 0;
}

int sf_consumer_state(struct sf_consumer *c, struct sf_resume *ret_state)
{
	GUARDED(c, state_in(c, ret_state));
}

static int seek_in(struct sf_consumer *c, const struct sf_resume *state)
{
	const struct sf_geometry *geo = &c->a->geo;
	uint64_t global_batch = (uint64_t)geo->batch * geo->world_size;
	int r;

	if (state->config_digest != geo->config_digest)
		return sf__err(
			&c->err, SF_E_DIGEST,
			"resume state of config %016llx, but the job runs config %016llx (the "
			"digest covers the sources and their files' paths, sizes and "
			"modification times, so a file rewritten, touched or copied without "
			"them counts as changed; a mixture's weights and schedule, the "
			"tokenizer, sampling and the global batch, and shmfeed's stream "
			"version, raised when a release delivers other samples: "
			"docs/config.md)",
			(unsigned long long)state->config_digest,
			(unsigned long long)geo->config_digest);
	if (state->samples % global_batch)
		return sf__err(&c->err, SF_E_RANGE,
			       "resume state at sample %llu is not a multiple of the global batch "
			       "%llu",
			       (unsigned long long)state->samples,
			       (unsigned long long)global_batch);
	/* Beyond the limit the slot words' 48-bit lap would wrap and the ring would serve
	 * an earlier step under this one's number. */
	if (state->samples / global_batch >= sf__arena_step_limit(geo))
		return sf__err(
			&c->err, SF_E_RANGE,
			"resume state at sample %llu is step %llu, out of range: this job's "
			"steps are 0..%llu (samples 0..%llu)",
			(unsigned long long)state->samples,
			(unsigned long long)(state->samples / global_batch),
			(unsigned long long)(sf__arena_step_limit(geo) - 1),
			(unsigned long long)((sf__arena_step_limit(geo) - 1) * global_batch));
	if (sf__arena_stopping(c->a))
		return sf__err(&c->err, SF_E_STOPPED, "seek of rank %u: the job is stopping",
			       c->global_rank);
	r = release_held(c, NULL);
	if (r < 0)
		return r;
	r = sf__ring_seek(c->a, c->me, c->rank, state->samples / global_batch);
	if (r < 0)
		return sf__err(&c->err, r, "seek of rank %u: %s", c->global_rank, sf_strerror(r));
	c->step = state->samples / global_batch;
	c->provenance = state->provenance;
	c->ended = 0;
	c->wait_carry = 0;
	return 0;
}

int sf_consumer_seek(struct sf_consumer *c, const struct sf_resume *state)
{
	GUARDED(c, seek_in(c, state));
}

static int stats_in(struct sf_consumer *c, struct sf_consumer_stats *ret_stats)
{
	struct sf_consumer_stats st = {
		.batches = c->batches,
		.tokens = c->tokens,
		.wait_ns_total = c->wait_total,
		.wait_ns_p50 = hist_percentile(c->wait_hist, NULL, c->batches, 50),
		.wait_ns_p99 = hist_percentile(c->wait_hist, NULL, c->batches, 99),
		.provenance = c->provenance,
		.next_step = c->step,
		.gpu = c->gpu.cu ? 1 : 0,
		.gpu_staged = c->gpu.cu && !c->gpu.registered,
		.staged_copies = c->gpu.staged_copies,
	};

	*ret_stats = st;
	return 0;
}

int sf_consumer_stats(struct sf_consumer *c, struct sf_consumer_stats *ret_stats)
{
	GUARDED(c, stats_in(c, ret_stats));
}

static int window_in(struct sf_consumer *c, struct sf_consumer_window *ret_window)
{
	uint64_t n = c->batches - c->window_mark.batches;
	struct sf_consumer_window w = {
		.batches = n,
		.tokens = c->tokens - c->window_mark.tokens,
		.wait_ns_total = c->wait_total - c->window_mark.wait_total,
		.wait_ns_p50 = hist_percentile(c->wait_hist, c->window_mark.wait_hist, n, 50),
		.wait_ns_p99 = hist_percentile(c->wait_hist, c->window_mark.wait_hist, n, 99),
		.stalls = c->stalls - c->window_mark.stalls,
	};

	c->window_mark.batches = c->batches;
	c->window_mark.tokens = c->tokens;
	c->window_mark.wait_total = c->wait_total;
	c->window_mark.stalls = c->stalls;
	memcpy(c->window_mark.wait_hist, c->wait_hist, sizeof(c->wait_hist));
	*ret_window = w;
	return 0;
}

int sf_consumer_window(struct sf_consumer *c, struct sf_consumer_window *ret_window)
{
	GUARDED(c, window_in(c, ret_window));
}

const char *sf_consumer_errmsg(const struct sf_consumer *c)
{
	const struct aside *a;

	if (!c)
		return "no handle";
	a = aside_of(c);
	return a ? a->msg : c->err.msg;
}

static int set_output_in(struct sf_consumer *c, uint32_t dtype, void *const *buffers,
			 uint32_t count)
{
	const uint32_t src_dtype = c->a->geo.token_bytes == 2 ? SF_DTYPE_U16 : SF_DTYPE_I32;
	void **out = NULL;

	if (c->gpu.cu)
		return sf__err(&c->err, SF_E_STATE,
			       "rank %u: widened copies are for CPU mode; on a GPU widen on the "
			       "device",
			       c->global_rank);
	const uint32_t targets = dtype & SF_OUTPUT_TARGETS;

	dtype &= ~SF_OUTPUT_TARGETS;
	if (count && (count > SF_OUTPUT_BUFFERS_MAX || !buffers))
		return sf__err(&c->err, SF_E_RANGE,
			       "rank %u: output needs 1..%u buffers (got %u%s)", c->global_rank,
			       SF_OUTPUT_BUFFERS_MAX, count, buffers ? "" : ", and no array");
	if (count && !sf__widen_valid(src_dtype, dtype))
		return sf__err(&c->err, SF_E_RANGE,
			       "rank %u: output dtype %u cannot hold the arena's %s tokens: "
			       "int32 (%u) or int64 (%u)",
			       c->global_rank, dtype,
			       src_dtype == SF_DTYPE_U16 ? "uint16" : "int32", SF_DTYPE_I32,
			       SF_DTYPE_I64);
	if (count) {
		out = malloc(sizeof(*out) * count);
		if (!out)
			return sf__err(&c->err, -ENOMEM, "out of memory");
		for (uint32_t i = 0; i < count; i++) {
			if (!buffers[i]) {
				free(out);
				return sf__err(&c->err, SF_E_RANGE,
					       "rank %u: output buffer %u is NULL", c->global_rank,
					       i);
			}
			out[i] = buffers[i];
		}
	}
	free(c->out);
	c->out = out;
	c->out_count = count;
	c->out_next = 0;
	c->out_dtype = dtype;
	c->out_targets = !!targets;
	return 0;
}

int sf_consumer_set_output(struct sf_consumer *c, uint32_t dtype, void *const *buffers,
			   uint32_t count)
{
	GUARDED(c, set_output_in(c, dtype, buffers, count));
}

void sf_consumer_detach(struct sf_consumer *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < ASIDE_HANDLES; i++)
		if (asides[i].c == c)
			asides[i].c = NULL;
	free(c->out);
	if (c->a->inherited) {
		/* The parent's slot, entry and device buffers are left alone; CUDA state does
		 * not survive fork(), so its host-side tables are only forgotten. */
		sf__arena_detach(c->a);
		free(c);
		return;
	}
	release_held(c, NULL);
	gpu_teardown(c);
	/* A slot release_held() kept (its copy's event could not be queried) goes once the
	 * teardown has waited for the copies. */
	release_held(c, NULL);
	sf__participant_unregister(c->a, c->me);
	sf__arena_detach(c->a);
	free(c);
}

void sf_consumer_detach_at(struct sf_consumer **c)
{
	struct sf_consumer *h;

	if (!c)
		return;
	/* Atomically: two threads of a binding may detach the same box (ctypes lets the
	 * GIL go during the call), and only one of them may get the handle. */
	h = __atomic_exchange_n(c, NULL, __ATOMIC_ACQ_REL);
	sf_consumer_detach(h);
}
