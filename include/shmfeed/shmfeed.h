/*
 * shmfeed public C API: the one header a program (or the Python package, through ctypes)
 * needs. It declares error codes, the consumer API that training ranks use, and version
 * information. Everything here is part of the ABI of libshmfeed.so: opaque handles,
 * fixed-width integers, structs only by pointer and pinned by offset checks, no enums
 * or varargs across the boundary.
 *
 * Caveats, as with any shared-memory library:
 *  - a consumer handle belongs to one thread at a time; use one handle per thread;
 *  - a handle does not survive fork(): a child must attach on its own;
 *  - views returned by sf_consumer_next() stay valid only until the next call on the
 *    same handle (or its detach).
 *
 * Return convention: every function returning int returns >= 0 on success, -errno for a
 * system failure, or one of the SF_E_* codes below (a reserved negative band) for a
 * domain failure. Out-parameters are written only on success.
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
#define SF_E_LAYOUT	 (-1002) /* arena of another layout version */
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
#define SF_E_LAST	 (-1018)

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
 * next call on the same handle. `tokens` is B x (T+1) tokens, row-major; inputs are
 * tokens[:, :-1] and targets tokens[:, 1:]. In GPU mode `device_ptr` is the CUdeviceptr
 * of the same layout on the rank's device and `tokens` is NULL; in CPU mode
 * `device_ptr` is 0 and `tokens` points read-only into shared memory (zero copy).
 * `doc_starts` (when the job records document boundaries) holds, per sequence, up to
 * `doc_starts_per_seq` offsets of document starts, padded with UINT32_MAX.
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
	uint64_t digest;	     /* xxh3-64 of the batch's token bytes */
	uint64_t wait_ns;	     /* time this call waited for the batch */
};

/*
 * Resume state of one rank: a few integers. `samples` counts global samples consumed by
 * the whole job before this rank's next batch (step * B * W), so it stays valid when the
 * world size changes with the global batch fixed.
 */
struct sf_resume {
	uint64_t samples;	/* global samples consumed before the next step */
	uint64_t epoch;		/* epoch of the next step */
	uint64_t config_digest; /* digest of the config that produced the stream */
	uint64_t provenance;	/* running digest over every batch consumed so far */
};

/* Consumer statistics (sf_consumer_stats). */
struct sf_consumer_stats {
	uint64_t batches;
	uint64_t tokens;
	uint64_t wait_ns_total;
	uint64_t wait_ns_p50;
	uint64_t wait_ns_p99;
	uint64_t provenance;
	uint64_t next_step;
	uint32_t gpu; /* 1 when batches go to a device */
	uint32_t reserved;
};

struct sf_consumer;

/* Flags for sf_consumer_attach(). */
#define SF_ATTACH_CPU 0x1u /* never use CUDA, even where it is available */

/*
 * sf_consumer_attach - attach to job `job` as local rank `local_rank`, and start at the
 * rank's current position (the step after the last one released). `device` is the CUDA
 * device ordinal to copy to, or -1 for CPU views. On failure a message naming the cause
 * is written to `errmsg` (when not NULL; always NUL-terminated).
 * Returns 0 and stores the handle in *ret_consumer; free it with sf_consumer_detach().
 */
int sf_consumer_attach(const char *job, int32_t local_rank, int32_t device, uint32_t flags,
		       struct sf_consumer **ret_consumer, char *errmsg, uint32_t errmsg_len);

/*
 * sf_consumer_next - the rank's next batch. Releases the batch returned by the previous
 * call first. `timeout_ms` < 0 waits forever, 0 does not wait (SF_E_AGAIN when nothing is
 * ready). Returns 0 and fills *ret_batch.
 */
int sf_consumer_next(struct sf_consumer *c, int32_t timeout_ms, struct sf_batch *ret_batch);

/* sf_consumer_release - release the batch held, if any. Returns 0. */
int sf_consumer_release(struct sf_consumer *c);

/* sf_consumer_state - the resume state before the next batch. */
int sf_consumer_state(struct sf_consumer *c, struct sf_resume *ret_state);

/*
 * sf_consumer_seek - reposition the rank so that its next batch is the one of `state`.
 * Fails with SF_E_DIGEST when the state came from another config.
 */
int sf_consumer_seek(struct sf_consumer *c, const struct sf_resume *state);

/* sf_consumer_stats - counters of this handle. */
int sf_consumer_stats(struct sf_consumer *c, struct sf_consumer_stats *ret_stats);

/* sf_consumer_errmsg - detail of the last failure on this handle; never NULL. */
const char *sf_consumer_errmsg(const struct sf_consumer *c);

/* sf_consumer_detach - release any batch held and detach; accepts NULL. */
void sf_consumer_detach(struct sf_consumer *c);

#ifdef __cplusplus
}
#endif

#endif /* SHMFEED_SHMFEED_H */
