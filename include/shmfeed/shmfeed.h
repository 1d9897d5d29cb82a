/*
 * shmfeed public C API: the one header a program (or the Python package, through ctypes)
 * needs. It declares error codes, the consumer API that training ranks use, and version
 * information. Everything here is part of the ABI of libshmfeed.so: opaque handles,
 * fixed-width integers, structs only by pointer and pinned by offset checks, no enums
 * or varargs across the boundary.
 *
 * Caveats, as with any shared-memory library:
 *  - a consumer handle belongs to one thread at a time; use one handle per thread (a
 *    call made while another thread is inside a call of the same handle is refused with
 *    SF_E_STATE and changes nothing; sf_consumer_detach() is not guarded);
 *  - a handle does not survive fork(): a child must attach on its own (every call but
 *    sf_consumer_info() and sf_consumer_detach() on a handle of its parent's is refused
 *    with SF_E_STATE);
 *  - views returned by sf_consumer_next() stay valid only until the next call on the
 *    same handle (or its detach); in GPU mode with SF_ATTACH_EXPLICIT_RELEASE, until
 *    sf_consumer_release_batch().
 *
 * Return convention: every function returning int returns >= 0 on success, -errno for a
 * system failure, or one of the SF_E_* codes below (a reserved negative band) for a
 * domain failure. Out-parameters are written only on success. Pointers may not be NULL
 * unless a function says so (sf_consumer_detach(NULL), an `errmsg` of NULL or of length
 * 0, and the buffers of sf_consumer_set_output() with count 0 are allowed).
 */
#ifndef SHMFEED_SHMFEED_H
#define SHMFEED_SHMFEED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Domain error codes. Their values are pinned forever: add new ones at the end of the
 * band, never renumber.
 */
#define SF_E_BASE	 (-1000)
#define SF_E_NOT_SHMFEED (-1001) /* the shm object is not a shmfeed arena */
#define SF_E_LAYOUT	 (-1002) /* arena of another layout version, or a damaged one */
#define SF_E_UID	 (-1003) /* arena owned by another user */
#define SF_E_GEOMETRY	 (-1004) /* arena geometry differs from the one expected */
#define SF_E_BUSY	 (-1005) /* a live process owns the job or the participant */
#define SF_E_CONFIG	 (-1006) /* invalid configuration */
#define SF_E_TIMEOUT	 (-1007) /* nothing arrived within the timeout */
#define SF_E_CHECKSUM	 (-1008) /* a payload does not match its checksum */
#define SF_E_STOPPED	 (-1009) /* the job is stopping or stopped */
#define SF_E_RANGE	 (-1010) /* a rank, step or index out of range */
#define SF_E_CUDA	 (-1011) /* a CUDA driver call failed */
#define SF_E_TOKENIZER	 (-1012) /* tokenizer vocabulary or input error */
#define SF_E_SOURCE	 (-1013) /* a data source is missing or malformed */
#define SF_E_STATE	 (-1014) /* call not valid in the current state */
#define SF_E_DIGEST	 (-1015) /* config digest of a resume state does not match */
#define SF_E_AGAIN	 (-1016) /* non-blocking call: nothing ready yet */
#define SF_E_PROTOCOL	 (-1017) /* malformed control message */
#define SF_E_END	 (-1018) /* the data ends: every epoch asked for was delivered */
#define SF_E_JOB_GONE	 (-1019) /* the job's launcher died: nothing will fill the arena */
#define SF_E_LAST	 (-1019)

/*
 * sf_strerror - a static, human-readable description of an error code: an SF_E_* code
 * or a negative errno. Never returns NULL.
 */
const char *sf_strerror(int err);

/* sf_version - the library version as "MAJOR.MINOR.PATCH". Never returns NULL. */
const char *sf_version(void);

/* Token data types of a batch (the dtype field of struct sf_batch). */
#define SF_DTYPE_U16 1
#define SF_DTYPE_I32 2

/*
 * A batch as the consumer hands it out. Filled by sf_consumer_next(); valid until the
 * next call on the same handle (see SF_ATTACH_EXPLICIT_RELEASE for GPU mode). `tokens` is B x (T+1)
 * tokens, row-major; inputs are tokens[:, :-1] and targets tokens[:, 1:]. In GPU mode `device_ptr`
 * is the CUdeviceptr of the same layout on the rank's device and `tokens` is NULL; in CPU mode
 * `device_ptr` is 0 and `tokens` points read-only into shared memory (zero copy).
 * `doc_starts` (when the job records document boundaries) holds, per sequence, up to
 * `doc_starts_per_seq` offsets of document starts, padded with UINT32_MAX; in CPU mode it
 * points into shared memory, in GPU mode it is the device address (a CUdeviceptr) where
 * they were copied with the tokens, in the same device buffer. `buffer` says where the
 * batch lies, so that a binding can keep one prebuilt view per place: the ring index in CPU
 * mode, the device buffer (0..gpu_buffers-1) in GPU mode.
 */
struct sf_batch {
	uint64_t step;		     /* this rank's step */
	uint64_t first_sample;	     /* global index of the batch's first sample */
	uint32_t batch;		     /* B */
	uint32_t seq_tokens;	     /* T + 1 */
	uint32_t dtype;		     /* SF_DTYPE_* */
	uint32_t doc_starts_per_seq; /* 0 when the job records no boundaries */
	const void *tokens;	     /* CPU view, or NULL in GPU mode */
	uint64_t device_ptr;	     /* CUdeviceptr in GPU mode, else 0 */
	const uint32_t *doc_starts;  /* B x doc_starts_per_seq, or NULL */
	uint64_t digest;	     /* xxh3-64 of the batch's token bytes, by its producer */
	uint64_t wait_ns;	     /* time waited for the batch, by this call and by the
				      * calls before it that timed out (or found nothing,
				      * SF_E_AGAIN) waiting for it */
	uint32_t buffer;	     /* ring index (CPU) or device buffer (GPU) */
	uint32_t output;	     /* sf_consumer_set_output()'s buffer holding the copy */
	/* The resume state that starts a run at this batch (sf_consumer_seek() with it
	 * delivers this batch next): its `samples` is step * B * W, and these two fields. */
	uint64_t provenance; /* the provenance chain before this batch */
	uint64_t epoch;	     /* epoch of sample step * B * W */
	/* A mixture's jobs only (docs/mixtures.md), else NULL: B source indexes (in the
	 * config's order), the source of each row; in CPU mode a read-only view into shared
	 * memory, in GPU mode the device address where they were copied with the tokens. */
	const int32_t *sources;
};

/*
 * Resume state of one rank: a few integers. `samples` counts global samples consumed by
 * the whole job before this rank's next batch (step * B * W), so it stays valid when the
 * world size changes with the global batch fixed. `epoch` is the epoch that sample
 * belongs to (samples / samples per epoch of the job's stream); it is for reading only:
 * sf_consumer_seek() positions by `samples` and ignores it. `provenance` chains the digest
 * of every batch this rank consumed:
 *   provenance_0 = 0,
 *   provenance_n+1 = XXH3-64(le64(step) || le64(digest), seed = provenance_n),
 * so two runs that saw the same tokens in the same order agree on it, and a resumed run
 * continues the chain of the run it resumes. The chain lives in the handle, not in the
 * arena: a new handle starts it at 0 where its rank's ring stands, and only a seek to a
 * saved state (that rank's own) continues a chain.
 */
struct sf_resume {
	uint64_t samples;	/* global samples consumed before the next step */
	uint64_t epoch;		/* epoch of the next step's first sample */
	uint64_t config_digest; /* digest of the config that produced the stream */
	uint64_t provenance;	/* running digest over every batch consumed so far */
};

/*
 * Consumer statistics (sf_consumer_stats). Wait percentiles come from a log-linear
 * histogram (8 sub-buckets per power of two), so they are exact to within 12.5%.
 */
struct sf_consumer_stats {
	uint64_t batches;
	uint64_t tokens; /* training tokens: B x T a batch (a row's T + 1 give T targets) */
	uint64_t wait_ns_total;
	uint64_t wait_ns_p50;
	uint64_t wait_ns_p99;
	uint64_t provenance;
	uint64_t next_step;
	uint32_t gpu; /* 1 when batches go to a device */
	/* 1 when the ring could not be registered with the driver (cuMemHostRegister failed:
	 * sf_consumer_errmsg() says why), so that batches are copied into pinned staging
	 * buffers before their DMA: one more memcpy each. */
	uint32_t gpu_staged;
	uint64_t staged_copies; /* batches copied through a staging buffer */
};

/*
 * What a handle is attached to (sf_consumer_info): the rank mapping, the geometry and
 * where batches land, so that a binding can build its views once at attach.
 * In CPU mode the payload of ring index i starts at ring_base + i * payload_stride, its
 * document starts (if any) right after its B*(T+1) tokens. In GPU mode batches land in
 * gpu_buffers device buffers, the first two listed in device_buffer[] and their document
 * starts at the device addresses doc_starts_buffer[] (0 when the job records none); all
 * of them through sf_consumer_device_buffer().
 */
struct sf_consumer_info {
	uint32_t local_rank;
	uint32_t global_rank; /* rank_base + local_rank */
	uint32_t world_size;  /* W */
	uint32_t ranks;	      /* local ranks served by this node's arena */
	uint32_t rank_base;   /* global rank of local rank 0 */
	uint32_t slots_per_rank;
	uint32_t batch;		     /* B */
	uint32_t seq_tokens;	     /* T + 1 */
	uint32_t dtype;		     /* SF_DTYPE_* */
	uint32_t doc_starts_per_seq; /* 0 when the job records no boundaries */
	int32_t device;		     /* CUDA ordinal, or -1 in CPU mode */
	uint32_t gpu_buffers;	     /* device buffers (GPU mode), 0 in CPU mode */
	uint64_t payload_stride;
	uint64_t ring_base; /* address of this rank's ring index 0 payload (CPU mode) */
	uint64_t device_buffer[2];
	uint64_t doc_starts_buffer[2];
	uint64_t config_digest;
	uint64_t sources_offset; /* bytes from a payload's start to its row sources; 0: none */
};

struct sf_consumer;

/* Flags for sf_consumer_attach(). */
#define SF_ATTACH_CPU 0x1u /* never use CUDA, even where it is available */
/*
 * GPU mode: the caller releases each batch with sf_consumer_release_batch() once it has
 * queued all its work on it, instead of sf_consumer_next() releasing the previous batch;
 * the caller may then hold up to the number of device buffers at once (prefetching
 * loops, gradient accumulation that fetches ahead), released in any order.
 * sf_consumer_next() fills the first free buffer after the last one filled, and refuses
 * with SF_E_STATE when every buffer holds a batch not released. In CPU mode (device
 * SF_DEVICE_NONE, SF_ATTACH_CPU, or a job whose consumers.device is `cpu`, whatever the
 * device asked) attach refuses it with SF_E_STATE: the caller attaches again without the
 * flag, and each batch is then released by the next call.
 */
#define SF_ATTACH_EXPLICIT_RELEASE 0x2u
/*
 * GPU mode: the number of device buffers (1..SF_GPU_BUFFERS_MAX), in bits 8..15 of the
 * flags. 0 there takes $SHMFEED_GPU_BUFFERS, else 2.
 */
#define SF_ATTACH_GPU_BUFFERS(n) (((uint32_t)(n)&0xffu) << 8)
#define SF_GPU_BUFFERS_MAX	 16

/* The `device` of sf_consumer_attach() that asks for CPU views. */
#define SF_DEVICE_NONE (-1)

/*
 * sf_consumer_attach - attach to job `job` as local rank `local_rank`, and start at the
 * rank's current position (the step after the last one released). `device` is the CUDA
 * device ordinal to copy to, or SF_DEVICE_NONE for CPU views; a job whose
 * consumers.device is `cpu` gives CPU views whatever `device` says (sf_consumer_info's
 * device is then SF_DEVICE_NONE), and one whose consumers.device is `cuda` refuses CPU views
 * with SF_E_CUDA. A device asked for on a
 * machine without a CUDA driver or device fails with -ENODEV (the caller may retry with
 * SF_DEVICE_NONE); a failing driver call fails with SF_E_CUDA and the CUresult's name in
 * the message. -ENOENT: no such job; SF_E_RANGE: no such local rank; SF_E_LAYOUT: an arena
 * of another layout version, or whose header this build cannot accept (other structure
 * sizes, an invalid geometry, a file size other than the header's: a truncated arena);
 * SF_E_BUSY: a live process consumes that rank already; SF_E_JOB_GONE: the job's
 * launcher is dead (the arena is what a job killed outright left, READY batches and all).
 * On failure a message naming the cause is written to `errmsg` (when not NULL; always
 * NUL-terminated). SF_E_RANGE also for a number of device buffers out of range, a flag
 * not defined here, and a device below SF_DEVICE_NONE, in any mode.
 * Returns 0 and stores the handle in *ret_consumer; free it with sf_consumer_detach().
 */
int sf_consumer_attach(const char *job, int32_t local_rank, int32_t device, uint32_t flags,
		       struct sf_consumer **ret_consumer, char *errmsg, uint32_t errmsg_len);

/*
 * What a rank's launcher says about it: torchrun's (or Slurm's) environment, each field
 * -1 where not known (any other negative value is refused with SF_E_RANGE).
 * sf_consumer_attach_ranks() checks it against the job and, for a job of
 * `consumers.rank_base: auto`, takes this node's global ranks from it.
 */
struct sf_rank_env {
	int64_t rank;		  /* RANK: the global rank */
	int64_t local_rank;	  /* LOCAL_RANK: the rank on this node (required, >= 0) */
	int64_t world_size;	  /* WORLD_SIZE */
	int64_t local_world_size; /* LOCAL_WORLD_SIZE: ranks on this node */
	int64_t group_rank;	  /* GROUP_RANK: the node's index in the rendezvous */
};

/*
 * sf_consumer_attach_ranks - sf_consumer_attach() as local rank env->local_rank, checked
 * against the rest of `env`: WORLD_SIZE must be the job's world size and LOCAL_WORLD_SIZE
 * its local ranks (SF_E_GEOMETRY otherwise), and RANK - LOCAL_RANK is this node's rank
 * base. With a static base (consumers.rank_base: N) it must be N; with `auto` the first
 * rank that attaches sets it (node GROUP_RANK 0 must start at rank 0, node k at rank k
 * or later), every later rank must agree, and a different base is taken only
 * once no rank of the old one is alive: the node re-bases, discarding the batches made
 * for the old ranks (docs/multinode.md). A rank that disagrees is refused with SF_E_RANGE
 * and a message naming both bases. sf_consumer_attach() is this with only the local
 * rank known: it follows the node's base, and is refused (SF_E_RANGE) while an automatic
 * base is not known yet.
 */
int sf_consumer_attach_ranks(const char *job, const struct sf_rank_env *env, int32_t device,
			     uint32_t flags, struct sf_consumer **ret_consumer, char *errmsg,
			     uint32_t errmsg_len);

/* sf_consumer_info - what the handle is attached to. Returns 0. */
int sf_consumer_info(const struct sf_consumer *c, struct sf_consumer_info *ret_info);

/*
 * sf_consumer_device_buffer - GPU mode: the device addresses of device buffer `index`
 * (0..gpu_buffers-1; sf_consumer_info lists only the first two) and of its document
 * starts (0 when the job records none). Returns 0, or SF_E_RANGE (and in CPU mode), with
 * sf_consumer_errmsg() saying which.
 */
int sf_consumer_device_buffer(const struct sf_consumer *c, uint32_t index, uint64_t *ret_tokens,
			      uint64_t *ret_doc_starts);

/*
 * sf_consumer_set_stream - GPU mode: the CUstream on which the caller uses batches (0, the
 * default, is the legacy default stream). Work the caller queues on it after
 * sf_consumer_next() returns sees the batch copied, and a device buffer is refilled only
 * after the work the caller queued while it held that buffer. Switching streams makes the
 * new stream wait for everything queued on the old one so far, so batches handed out
 * before the switch stay ordered. The stream must outlive its use by the handle: until
 * another stream is set, or until detach (which waits for the work queued on it).
 * Returns 0, SF_E_STATE in CPU mode, or SF_E_CUDA.
 */
int sf_consumer_set_stream(struct sf_consumer *c, uint64_t stream);

/*
 * sf_consumer_next - the rank's next batch. Releases the batch returned by the previous
 * call first. `timeout_ms` < 0 waits forever, 0 does not wait (SF_E_AGAIN when nothing is
 * ready), > 0 waits that long (SF_E_TIMEOUT). Returns 0 and fills *ret_batch; SF_E_END
 * when the data ends (and on every later call until a seek); SF_E_STOPPED when the job
 * stops; SF_E_CHECKSUM when a payload does not match its checksum (the step is then
 * handed back to the producers, and the next call waits for it afresh: only steps that
 * are multiples of the job's integrity.verify_every are verified, the others and every
 * step of a job without checksums are handed out without reading a payload byte, with
 * the digest their producer stored); SF_E_RANGE at
 * the job's step limit (see sf_consumer_seek()); SF_E_CUDA;
 * SF_E_JOB_GONE when the job's launcher died (a crash or SIGKILL, so nothing will ever
 * fill the ring): a waiting call looks at the launcher's liveness every half second,
 * whatever its timeout, and returns within a second of its death; every call after it
 * that finds no batch ready returns SF_E_JOB_GONE at once.
 * In GPU mode the slot stays claimed until its copy has completed, and is released on
 * the next call, so that the copy of step s+1 overlaps the caller's work on step s. When
 * the host runs ahead of the GPU, that copy may still wait on the device for the work
 * the caller queued on its buffer: the call waits for it within its timeout too, and
 * returns SF_E_AGAIN or SF_E_TIMEOUT (the batch still held, nothing lost) past it.
 * GPU mode, which thread and stream: the handle may move between threads (one at a time;
 * it pushes its context for every driver call), but the caller's work on batches must be
 * queued on the stream given to sf_consumer_set_stream() (the legacy default stream
 * unless set), which need not be the thread's current stream: work on another stream
 * must be made to wait for the batch (cuStreamWaitEvent on an event recorded on that
 * stream) and be ordered back into it before the batch is released. Without
 * SF_ATTACH_EXPLICIT_RELEASE, a batch is released by the next call: work on it queued
 * after that call (a loop that fetches ahead, a prefetch thread) races its refill. With
 * it, a batch is released by sf_consumer_release_batch(), and SF_E_STATE is returned when
 * every device buffer holds a batch not released.
 */
int sf_consumer_next(struct sf_consumer *c, int32_t timeout_ms, struct sf_batch *ret_batch);

/*
 * sf_consumer_release_batch - GPU mode: the caller has queued all its work on `batch` on
 * its stream; the buffer may be refilled after that work (an event recorded on the stream
 * now). Needed with SF_ATTACH_EXPLICIT_RELEASE, allowed without (it then releases the
 * buffer earlier than the next call would). CPU mode: releases the slot when `batch` is
 * the one held; one of this handle's batches released already is a no-op. Returns 0;
 * SF_E_STATE when the batch is not this handle's (its tokens or device buffer are
 * another's) or, in GPU mode, not held (released already); SF_E_CUDA.
 */
int sf_consumer_release_batch(struct sf_consumer *c, const struct sf_batch *batch);

/*
 * sf_consumer_release - release the batch held, if any (in GPU mode after its copy has
 * completed). Returns 0, or SF_E_CUDA.
 */
int sf_consumer_release(struct sf_consumer *c);

/* sf_consumer_state - the resume state before the next batch. Returns 0 (or SF_E_STATE:
 * see the caveats above). */
int sf_consumer_state(struct sf_consumer *c, struct sf_resume *ret_state);

/*
 * sf_consumer_seek - reposition the rank so that its next batch is the one of `state`,
 * and continue its provenance chain. Releases the batch held. Fails with SF_E_DIGEST when
 * the state came from another config, SF_E_RANGE when `samples` is not a multiple of the
 * global batch B*W or names a step at or beyond the job's step limit (the smaller of
 * K * (2^48 - 1), K slots per rank with a 48-bit lap in each slot word, and
 * (2^64 - 1) / (B*W), so that sample counts fit in 64 bits; the message gives both
 * ranges), SF_E_STOPPED when the job stops.
 */
int sf_consumer_seek(struct sf_consumer *c, const struct sf_resume *state);

/* sf_consumer_stats - counters of this handle. Returns 0 (or SF_E_STATE: see the caveats
 * above). */
int sf_consumer_stats(struct sf_consumer *c, struct sf_consumer_stats *ret_stats);

/*
 * A stall is a call of sf_consumer_next() that waited this long or longer for its batch
 * (2^20 ns, 1.05 ms): the training loop was held up by the data. A power of two, so that
 * `shmfeed status`, `top` and the metrics count the same stalls from the arena's log2
 * histogram.
 */
#define SF_CONSUMER_STALL_NS (1u << 20)

/*
 * The figures of one window (sf_consumer_window): what this handle delivered since the
 * previous call of sf_consumer_window() (or since attach), for a training loop that logs
 * them every few steps. The percentiles come from the same histogram as those of
 * sf_consumer_stats, restricted to the window's batches.
 */
struct sf_consumer_window {
	uint64_t batches;
	uint64_t tokens;
	uint64_t wait_ns_total;
	uint64_t wait_ns_p50;
	uint64_t wait_ns_p99;
	uint64_t stalls; /* batches that waited SF_CONSUMER_STALL_NS or more */
};

/* sf_consumer_window - the figures since the previous call, and start a new window. Returns
 * 0 (or SF_E_STATE: see the caveats above). */
int sf_consumer_window(struct sf_consumer *c, struct sf_consumer_window *ret_window);

/*
 * sf_consumer_errmsg - detail of the last failure of the calling thread's calls on this
 * handle (a call refused because another thread was inside one included), so that what
 * another thread's call writes meanwhile never replaces it (kept for the last 8 handles
 * a thread failed on); in a thread that has had none, the handle's last failure
 * (attach's notes included). Never NULL.
 */
const char *sf_consumer_errmsg(const struct sf_consumer *c);

/*
 * sf_consumer_detach - release any batch held (after its copy completes) and detach;
 * accepts NULL. The rank's position stays in the arena: the next attach of the rank
 * continues after the last batch released.
 */
void sf_consumer_detach(struct sf_consumer *c);

/*
 * sf_consumer_detach_at - sf_consumer_detach(*c), *c set to NULL first (atomically: of
 * two threads detaching one *c, one detaches it, the other nothing): for a binding
 * whose own code can be interrupted between two steps (Python's KeyboardInterrupt lands
 * between any two bytecodes), so that a handle is never both detached and still stored,
 * nor dropped without being detached. Accepts NULL and a NULL *c.
 */
void sf_consumer_detach_at(struct sf_consumer **c);

/* Output types of sf_consumer_set_output() and sf_tokens_widen(). */
#define SF_DTYPE_I64 3

/*
 * sf_consumer_set_output - CPU mode: from the next sf_consumer_next() on, also write each
 * batch's B x (T+1) tokens widened to `dtype` (SF_DTYPE_I32 or SF_DTYPE_I64) into
 * buffers[batch.output], which the caller allocated (each of B x (T+1) elements) and
 * keeps until detach or the next call of this function: the buffers in turn from
 * buffers[0], a seek between batches or not; `batch.tokens` still points into the
 * arena. With `dtype | SF_OUTPUT_TARGETS` each buffer holds B x (2T+1) elements: the
 * B x (T+1) tokens, then the B x T targets (tokens 1..T of each row) back to back, so that
 * a loss can flatten them as they are (targets.view(-1) in PyTorch). A widened batch so
 * stays valid until `count` batches later: 2 covers a loop that fetches one batch ahead,
 * and keeps the buffers warm in cache. No allocation, one SIMD pass over the tokens (two
 * with the targets). count 0 turns it off. Returns 0, SF_E_STATE in GPU mode (widen on
 * the device there), SF_E_RANGE for a bad dtype or a count above SF_OUTPUT_BUFFERS_MAX.
 */
#define SF_OUTPUT_BUFFERS_MAX 64u
#define SF_OUTPUT_TARGETS     0x100u
int sf_consumer_set_output(struct sf_consumer *c, uint32_t dtype, void *const *buffers,
			   uint32_t count);

/*
 * sf_tokens_widen - write `n` token ids of `src_dtype` (SF_DTYPE_U16 or SF_DTYPE_I32) from
 * `src` into `dst` as `dst_dtype` (SF_DTYPE_I32 or SF_DTYPE_I64), each pointer aligned to
 * its type. Returns 0, or SF_E_RANGE for a pair of types it does not convert.
 */
int sf_tokens_widen(const void *src, uint32_t src_dtype, void *dst, uint32_t dst_dtype, uint64_t n);

/*
 * sf_digest - XXH3-64 of `len` bytes with `seed`: the hash of batch digests and of the
 * provenance chain, exported so that bindings and tests can recompute both.
 */
uint64_t sf_digest(const void *p, uint64_t len, uint64_t seed);

/*
 * sf_abi_entry - the layout of the public structs below, for bindings that mirror them
 * (python/shmfeed/_native.py compares every mirror with it when it loads the library, so
 * that a package and a library of different builds refuse to work together instead of
 * misreading each other's structs). Entry `i`, from 0, is a struct ("sf_batch": its size
 * in *ret_size, 0 in *ret_offset) or a field of one ("sf_batch.step": its offset and
 * size); NULL past the last entry.
 */
const char *sf_abi_entry(uint32_t i, size_t *ret_offset, size_t *ret_size);

/* The public structs' layouts are ABI: python/shmfeed/_native.py mirrors them. */
#ifndef __cplusplus
_Static_assert(offsetof(struct sf_batch, tokens) == 32, "sf_batch layout");
_Static_assert(offsetof(struct sf_batch, digest) == 56, "sf_batch layout");
_Static_assert(offsetof(struct sf_batch, buffer) == 72, "sf_batch layout");
_Static_assert(offsetof(struct sf_batch, provenance) == 80, "sf_batch layout");
_Static_assert(offsetof(struct sf_batch, sources) == 96, "sf_batch layout");
_Static_assert(sizeof(struct sf_batch) == 104, "sf_batch layout");
_Static_assert(offsetof(struct sf_resume, provenance) == 24, "sf_resume layout");
_Static_assert(sizeof(struct sf_resume) == 32, "sf_resume layout");
_Static_assert(offsetof(struct sf_consumer_stats, gpu) == 56, "sf_consumer_stats layout");
_Static_assert(offsetof(struct sf_consumer_stats, staged_copies) == 64, "sf_consumer_stats");
_Static_assert(sizeof(struct sf_consumer_stats) == 72, "sf_consumer_stats layout");
_Static_assert(offsetof(struct sf_consumer_window, stalls) == 40, "sf_consumer_window layout");
_Static_assert(sizeof(struct sf_consumer_window) == 48, "sf_consumer_window layout");
_Static_assert(offsetof(struct sf_consumer_info, payload_stride) == 48, "sf_consumer_info");
_Static_assert(offsetof(struct sf_consumer_info, device_buffer) == 64, "sf_consumer_info");
_Static_assert(offsetof(struct sf_consumer_info, config_digest) == 96, "sf_consumer_info");
_Static_assert(offsetof(struct sf_consumer_info, sources_offset) == 104, "sf_consumer_info");
_Static_assert(sizeof(struct sf_consumer_info) == 112, "sf_consumer_info layout");
_Static_assert(offsetof(struct sf_rank_env, group_rank) == 32, "sf_rank_env layout");
_Static_assert(sizeof(struct sf_rank_env) == 40, "sf_rank_env layout");
#endif

#ifdef __cplusplus
}
#endif

#endif /* SHMFEED_SHMFEED_H */
