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
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#ifdef SF_HAVE_XXH3_DISPATCH
/* Replaces XXH3_64bits and its variants by libxxhash's runtime-dispatched versions:
 * the same hashes, computed with the widest vector unit the CPU has. */
#include <xxh_x86dispatch.h>
#endif

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/proc.h"
#include "common/slot.h"
#include "consumer/cuda.h"

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
	sf_cudeviceptr buf[2];
	sf_cuevent copied[2]; /* recorded on `stream` after the copy into buf[i] */
	sf_cuevent used[2];   /* recorded on user_stream after the caller's work on buf[i] */
	uint32_t used_valid[2];
	uint32_t *doc_starts[2]; /* host copies, so that they outlive the slot */
	void *registered;	 /* the ring's payloads, registered with the driver */
	uint32_t next_buf;
	uint32_t held_buf;
};

struct sf_consumer {
	struct sf_arena *a;
	uint32_t rank;	      /* local rank: ring index in the arena */
	uint32_t me;	      /* participant index: max_producers + rank */
	uint32_t global_rank; /* rank_base + rank */
	uint32_t ended;	      /* an end marker was met; cleared by seek */
	uint64_t step;	      /* the next step to claim */
	uint64_t token_bytes; /* B * (T+1) * token size: what is digested and copied */
	uint64_t doc_off;     /* where the document starts begin in a payload */
	struct sf_slot *held; /* CPU: the slot handed out; GPU: the slot being copied */
	uint64_t provenance;
	uint64_t batches;
	uint64_t tokens;
	uint64_t wait_total;
	uint64_t liveness_checked_ns; /* when the launcher was last seen alive */
	uint32_t wait_hist[HIST_BUCKETS];
	int32_t device;
	struct sf_consumer_gpu gpu;
	struct sf_err err;
};

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

static uint64_t hist_percentile(const uint32_t *hist, uint64_t total, uint32_t pct)
{
	uint64_t rank, seen = 0;

	if (!total)
		return 0;
	rank = (total * pct + 99) / 100;
	for (uint32_t b = 0; b < HIST_BUCKETS; b++) {
		seen += hist[b];
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

static void gpu_teardown(struct sf_consumer *c)
{
	struct sf_consumer_gpu *g = &c->gpu;
	const struct sf_cuda *cu = g->cu;
	sf_cucontext popped;

	if (!cu)
		return;
	/* Teardown runs on every exit path, so it ignores failures: nothing more can be
	 * done about them and the first error is already in the handle. */
	if (cu->cuCtxPushCurrent(g->ctx) != SF_CUDA_SUCCESS)
		return;
	if (g->stream)
		cu->cuStreamSynchronize(g->stream);
	for (int i = 0; i < 2; i++) {
		if (g->copied[i])
			cu->cuEventDestroy(g->copied[i]);
		if (g->used[i])
			cu->cuEventDestroy(g->used[i]);
		if (g->buf[i])
			cu->cuMemFree(g->buf[i]);
		free(g->doc_starts[i]);
	}
	if (g->stream)
		cu->cuStreamDestroy(g->stream);
	if (g->registered)
		cu->cuMemHostUnregister(g->registered);
	cu->cuCtxPopCurrent(&popped);
	cu->cuDevicePrimaryCtxRelease(g->dev);
	memset(g, 0, sizeof(*g));
}

static int gpu_setup(struct sf_consumer *c, int32_t device)
{
	struct sf_consumer_gpu *g = &c->gpu;
	const struct sf_arena_header *h = c->a->hdr;
	const struct sf_cuda *cu;
	sf_cucontext popped;
	size_t doc_bytes = (size_t)h->geo.batch * h->geo.doc_starts_per_seq * sizeof(uint32_t);
	int r;

	r = sf__cuda_load(&cu, &c->err);
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
	r = cuda_call(c, cu->cuCtxPushCurrent(g->ctx), "cuCtxPushCurrent");
	if (r < 0) {
		cu->cuDevicePrimaryCtxRelease(g->dev);
		memset(g, 0, sizeof(*g));
		return r;
	}
	/* The primary context is the one the CUDA runtime (and so PyTorch) uses, so the
	 * device pointers handed out are valid in the caller's tensors. Only this rank's
	 * ring is registered: it is all this handle copies from. */
	r = cuda_call(c,
		      cu->cuMemHostRegister(sf__arena_payload(c->a, c->rank, 0),
					    (size_t)h->geo.slots_per_rank * h->payload_stride,
					    SF_CU_MEMHOSTREGISTER_PORTABLE),
		      "cuMemHostRegister");
	if (r < 0)
		goto out_pop;
	g->registered = sf__arena_payload(c->a, c->rank, 0);
	r = cuda_call(c, cu->cuStreamCreate(&g->stream, SF_CU_STREAM_NON_BLOCKING),
		      "cuStreamCreate");
	for (int i = 0; i < 2 && r >= 0; i++) {
		r = cuda_call(c, cu->cuMemAlloc(&g->buf[i], c->token_bytes), "cuMemAlloc");
		if (r >= 0)
			r = cuda_call(c,
				      cu->cuEventCreate(&g->copied[i], SF_CU_EVENT_DISABLE_TIMING),
				      "cuEventCreate");
		if (r >= 0)
			r = cuda_call(c, cu->cuEventCreate(&g->used[i], SF_CU_EVENT_DISABLE_TIMING),
				      "cuEventCreate");
		if (r >= 0 && doc_bytes) {
			g->doc_starts[i] = malloc(doc_bytes);
			if (!g->doc_starts[i])
				r = sf__err(&c->err, -ENOMEM, "out of memory");
		}
	}
out_pop:
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
	const uint32_t K = c->a->hdr->geo.slots_per_rank;
	uint64_t t = c->step + K / 2 - 1;
	const struct sf_slot *s = sf__arena_slot(c->a, c->rank, (uint32_t)(t % K));

	if (K < 4)
		return 0;
	/* Relaxed: only a hint. Either way the slot just released is FREE already, and
	 * sleeping producers rescan within 100 ms even without a wake. */
	return atomic_load_explicit(&s->word, memory_order_relaxed) ==
	       sf__slot_word(SF_SLOT_READY, 0, t / K);
}

/* Release the held slot; in GPU mode first wait until its copy has completed. */
static int release_held(struct sf_consumer *c)
{
	int r = 0;

	if (!c->held)
		return 0;
	if (c->gpu.cu) {
		sf_curesult q = c->gpu.cu->cuEventQuery(c->gpu.copied[c->gpu.held_buf]);

		if (q == SF_CUDA_ERROR_NOT_READY)
			q = c->gpu.cu->cuEventSynchronize(c->gpu.copied[c->gpu.held_buf]);
		r = cuda_call(c, q, "cuEventSynchronize");
	}
	/* The slot is released even after a failed copy: its content is still in shared
	 * memory and the caller has the error; holding it would stall the producers. */
	sf__consumer_release_quiet(c->held);
	c->held = NULL;
	if (!ring_well_stocked(c))
		sf__producers_wake(c->a);
	return r;
}

int sf_consumer_attach(const char *job, int32_t local_rank, int32_t device, uint32_t flags,
		       struct sf_consumer **ret_consumer, char *errmsg, uint32_t errmsg_len)
{
	const struct sf_geometry *geo;
	struct sf_consumer *c;
	int r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		struct sf_err e;

		sf__err(&e, -ENOMEM, "out of memory");
		sf__err_copy(&e, errmsg, errmsg_len);
		return -ENOMEM;
	}
	c->device = SF_DEVICE_NONE;
	if (!ret_consumer) {
		r = sf__err(&c->err, -EINVAL, "no place to store the handle");
		goto fail;
	}
	r = sf__arena_attach(job, NULL, &c->a, &c->err);
	if (r < 0)
		goto fail;
	geo = &c->a->hdr->geo;
	if (local_rank < 0 || (uint32_t)local_rank >= geo->ranks) {
		r = sf__err(&c->err, SF_E_RANGE, "job '%s' has local ranks 0..%u, not %d", job,
			    geo->ranks - 1, local_rank);
		goto fail;
	}
	c->rank = (uint32_t)local_rank;
	c->me = geo->max_producers + c->rank;
	c->global_rank = geo->rank_base + c->rank;
	c->token_bytes = (uint64_t)geo->batch * geo->seq_tokens * geo->token_bytes;
	c->doc_off = sf__doc_starts_offset(geo->batch, geo->seq_tokens, geo->token_bytes);
	r = sf__participant_register(c->a, c->me, SF_ROLE_CONSUMER, local_rank, &c->err);
	if (r < 0) {
		if (r == SF_E_BUSY)
			sf__err(&c->err, r,
				"job '%s': local rank %d is consumed by another process", job,
				local_rank);
		goto fail;
	}
	/* Registration repaired a dead predecessor's claims (CLAIMED back to READY), so the
	 * ring's lowest step is the first one nobody finished with. */
	c->step = sf__ring_next_step(c->a, c->rank);
	if (device >= 0 && !(flags & SF_ATTACH_CPU)) {
		r = gpu_setup(c, device);
		if (r < 0)
			goto fail_unregister;
		c->device = device;
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

int sf_consumer_info(const struct sf_consumer *c, struct sf_consumer_info *ret_info)
{
	const struct sf_arena_header *h = c->a->hdr;
	struct sf_consumer_info info = {
		.local_rank = c->rank,
		.global_rank = c->global_rank,
		.world_size = h->geo.world_size,
		.ranks = h->geo.ranks,
		.rank_base = h->geo.rank_base,
		.slots_per_rank = h->geo.slots_per_rank,
		.batch = h->geo.batch,
		.seq_tokens = h->geo.seq_tokens,
		.dtype = h->geo.token_bytes == 2 ? SF_DTYPE_U16 : SF_DTYPE_I32,
		.doc_starts_per_seq = h->geo.doc_starts_per_seq,
		.device = c->device,
		.gpu_buffers = c->gpu.cu ? 2 : 0,
		.payload_stride = h->payload_stride,
		.ring_base = (uint64_t)(uintptr_t)sf__arena_payload(c->a, c->rank, 0),
		.device_buffer = {c->gpu.buf[0], c->gpu.buf[1]},
		.doc_starts_buffer = {(uint64_t)(uintptr_t)c->gpu.doc_starts[0],
				      (uint64_t)(uintptr_t)c->gpu.doc_starts[1]},
		.config_digest = h->geo.config_digest,
	};

	*ret_info = info;
	return 0;
}

int sf_consumer_set_stream(struct sf_consumer *c, uint64_t stream)
{
	if (!c->gpu.cu)
		return sf__err(&c->err, SF_E_STATE, "set_stream: the handle is in CPU mode");
	c->gpu.user_stream = (sf_custream)(uintptr_t)stream;
	/* Events recorded on the previous stream still order the buffers correctly. */
	return 0;
}

/* GPU mode: copy the claimed slot into the next device buffer (see the header comment
 * of sf_consumer_next() for the ordering between the two streams). */
static int gpu_copy(struct sf_consumer *c, const unsigned char *payload, struct sf_batch *b)
{
	struct sf_consumer_gpu *g = &c->gpu;
	const struct sf_cuda *cu = g->cu;
	uint32_t buf = g->next_buf, prev = buf ^ 1u;
	sf_cucontext popped;
	int r;

	r = cuda_call(c, cu->cuCtxPushCurrent(g->ctx), "cuCtxPushCurrent");
	if (r < 0)
		return r;
	/* Everything the caller queued since the previous batch used buffer `prev`: mark
	 * its end, so the copy that next refills `prev` waits for it. */
	if (c->batches) {
		r = cuda_call(c, cu->cuEventRecord(g->used[prev], g->user_stream), "cuEventRecord");
		if (r < 0)
			goto out;
		g->used_valid[prev] = 1;
	}
	if (g->used_valid[buf]) {
		r = cuda_call(c, cu->cuStreamWaitEvent(g->stream, g->used[buf], 0),
			      "cuStreamWaitEvent");
		if (r < 0)
			goto out;
	}
	r = cuda_call(c, cu->cuMemcpyHtoDAsync(g->buf[buf], payload, c->token_bytes, g->stream),
		      "cuMemcpyHtoDAsync");
	if (r >= 0)
		r = cuda_call(c, cu->cuEventRecord(g->copied[buf], g->stream), "cuEventRecord");
	if (r >= 0)
		r = cuda_call(c, cu->cuStreamWaitEvent(g->user_stream, g->copied[buf], 0),
			      "cuStreamWaitEvent");
out:
	cu->cuCtxPopCurrent(&popped);
	if (r < 0)
		return r;
	g->held_buf = buf;
	g->next_buf = prev;
	b->device_ptr = g->buf[buf];
	b->tokens = NULL;
	b->buffer = buf;
	if (g->doc_starts[buf]) {
		memcpy(g->doc_starts[buf], payload + c->doc_off,
		       (size_t)b->batch * b->doc_starts_per_seq * sizeof(uint32_t));
		b->doc_starts = g->doc_starts[buf];
	}
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

	for (;;) {
		int64_t slice = LIVENESS_SLICE_NS;
		uint64_t now = sf__now_ns();
		int r;

		if (timeout_ns == 0)
			slice = 0;
		else if (deadline != UINT64_MAX)
			slice = now >= deadline			   ? 0
				: deadline - now < (uint64_t)slice ? (int64_t)(deadline - now)
								   : slice;
		r = sf__consumer_claim(c->a, c->me, c->rank, c->step, slice, ret_slot);
		if (r != SF_E_TIMEOUT && r != SF_E_AGAIN)
			return r;
		/* Looked at once per slice, and no more often across calls that do not wait
		 * (timeout 0) or wait briefly. */
		now = sf__now_ns();
		if (now - c->liveness_checked_ns >= LIVENESS_SLICE_NS) {
			c->liveness_checked_ns = now;
			if (!sf__arena_creator_alive(c->a))
				return SF_E_JOB_GONE;
		}
		if (timeout_ns == 0)
			return r;
		if (deadline != UINT64_MAX && now >= deadline)
			return SF_E_TIMEOUT;
	}
}

int sf_consumer_next(struct sf_consumer *c, int32_t timeout_ms, struct sf_batch *ret_batch)
{
	struct sf_arena *a = c->a;
	const struct sf_arena_header *h = a->hdr;
	const uint32_t K = h->geo.slots_per_rank;
	uint64_t t0, waited;
	int64_t timeout_ns = timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000000;
	struct sf_batch b;
	struct sf_slot *s;
	unsigned char *payload;
	int r;

	r = release_held(c);
	if (r < 0)
		return r;
	if (c->ended)
		return sf__err(&c->err, SF_E_END, "rank %u: the data ended at step %llu",
			       c->global_rank, (unsigned long long)c->step);
	t0 = sf__now_ns();
	r = claim_watching_job(c, timeout_ns, &s);
	waited = sf__now_ns() - t0;
	if (r == SF_E_CHECKSUM) {
		/* Hand the step back for a refill: release it (FREE for the step K later), then
		 * seek back, which makes it FREE for this step again. */
		sf__consumer_release(a, c->rank, s);
		sf__ring_seek(a, c->me, c->rank, c->step);
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
		/* The producers' end marker: every epoch asked for was delivered. */
		sf__consumer_release(a, c->rank, s);
		c->ended = 1;
		return sf__err(&c->err, SF_E_END, "rank %u: the data ended at step %llu",
			       c->global_rank, (unsigned long long)c->step);
	}
	payload = sf__arena_payload(a, c->rank, (uint32_t)(c->step % K));
	b.step = c->step;
	b.first_sample = s->first_sample;
	b.batch = h->geo.batch;
	b.seq_tokens = h->geo.seq_tokens;
	b.dtype = h->geo.token_bytes == 2 ? SF_DTYPE_U16 : SF_DTYPE_I32;
	b.doc_starts_per_seq = h->geo.doc_starts_per_seq;
	b.tokens = payload;
	b.device_ptr = 0;
	b.doc_starts = b.doc_starts_per_seq ? (const uint32_t *)(payload + c->doc_off) : NULL;
	/* When the checksum covers exactly the tokens, the claim has just verified that it
	 * is their XXH3-64: no need to hash them again. */
	b.digest = (h->geo.flags & SF_ARENA_F_CHECKSUM) && s->length == c->token_bytes
			   ? s->checksum
			   : XXH3_64bits(payload, (size_t)c->token_bytes);
	b.wait_ns = waited;
	b.buffer = (uint32_t)(c->step % K);
	b.reserved = 0;
	c->held = s;
	if (c->gpu.cu) {
		r = gpu_copy(c, payload, &b);
		if (r < 0) {
			sf__consumer_release(a, c->rank, s);
			c->held = NULL;
			/* Serve the same step again on the next call. */
			sf__ring_seek(a, c->me, c->rank, c->step);
			return r;
		}
	}
	c->provenance = provenance_next(c->provenance, b.step, b.digest);
	c->step++;
	c->batches++;
	c->tokens += (uint64_t)b.batch * b.seq_tokens;
	c->wait_total += waited;
	c->wait_hist[hist_bucket(waited)]++;
	publish_telemetry(c, waited, (uint64_t)b.batch * b.seq_tokens);
	*ret_batch = b;
	return 0;
}

int sf_consumer_release(struct sf_consumer *c)
{
	return release_held(c);
}

int sf_consumer_state(struct sf_consumer *c, struct sf_resume *ret_state)
{
	const struct sf_geometry *geo = &c->a->hdr->geo;
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

int sf_consumer_seek(struct sf_consumer *c, const struct sf_resume *state)
{
	const struct sf_geometry *geo = &c->a->hdr->geo;
	uint64_t global_batch = (uint64_t)geo->batch * geo->world_size;
	int r;

	if (state->config_digest != geo->config_digest)
		return sf__err(&c->err, SF_E_DIGEST,
			       "resume state of config %016llx, but the job runs config %016llx",
			       (unsigned long long)state->config_digest,
			       (unsigned long long)geo->config_digest);
	if (state->samples % global_batch)
		return sf__err(&c->err, SF_E_RANGE,
			       "resume state at sample %llu is not a multiple of the global batch "
			       "%llu",
			       (unsigned long long)state->samples,
			       (unsigned long long)global_batch);
	r = release_held(c);
	if (r < 0)
		return r;
	r = sf__ring_seek(c->a, c->me, c->rank, state->samples / global_batch);
	if (r < 0)
		return sf__err(&c->err, r, "seek of rank %u: %s", c->global_rank, sf_strerror(r));
	c->step = state->samples / global_batch;
	c->provenance = state->provenance;
	c->ended = 0;
	return 0;
}

int sf_consumer_stats(struct sf_consumer *c, struct sf_consumer_stats *ret_stats)
{
	struct sf_consumer_stats st = {
		.batches = c->batches,
		.tokens = c->tokens,
		.wait_ns_total = c->wait_total,
		.wait_ns_p50 = hist_percentile(c->wait_hist, c->batches, 50),
		.wait_ns_p99 = hist_percentile(c->wait_hist, c->batches, 99),
		.provenance = c->provenance,
		.next_step = c->step,
		.gpu = c->gpu.cu ? 1 : 0,
	};

	*ret_stats = st;
	return 0;
}

const char *sf_consumer_errmsg(const struct sf_consumer *c)
{
	return c ? c->err.msg : "no handle";
}

void sf_consumer_detach(struct sf_consumer *c)
{
	if (!c)
		return;
	release_held(c);
	gpu_teardown(c);
	sf__participant_unregister(c->a, c->me);
	sf__arena_detach(c->a);
	free(c);
}
