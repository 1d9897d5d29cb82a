/*
 * A stand-in for libcuda.so.1 (tests/gpu/fake_cuda.c), so that the consumer's GPU path
 * runs on a machine without a GPU: "device memory" is host memory, and each stream is a
 * queue of operations (copies, event records, event waits, reads) that run only when the
 * model below lets them, so that a missing wait or an early release shows up as wrong
 * bytes or as a counted violation.
 *
 * Environment, read at cuInit:
 *   FAKE_CUDA_DEVICES=N    devices cuDeviceGetCount reports (default 1);
 *   FAKE_CUDA_INIT=CODE    what cuInit returns (default 0);
 *   FAKE_CUDA_NO_REGISTER=1  cuMemHostRegister always fails with CUDA_ERROR_NOT_SUPPORTED
 *                          (801), as in confidential-computing mode;
 *   FAKE_CUDA_FAIL=NAME:CODE[:NTH[:sticky]][,...]  the NTH call (default 1st; 0: every
 *                          call) of the driver function NAME (without version suffix)
 *                          returns CODE and does nothing; up to four such, separated by
 *                          commas; after one marked sticky, every call but
 *                          cuCtxPush/PopCurrent and cuDevicePrimaryCtxRelease returns
 *                          its CODE and does nothing, as after the driver's sticky errors;
 *   FAKE_CUDA_POLICY=lazy|eager  when queued work runs:
 *     lazy:  nothing runs until a synchronizing call needs it (cuEventSynchronize,
 *            cuStreamSynchronize, the synchronous copies, which order on the NULL stream);
 *            cuEventQuery answers NOT_READY for work not run yet, the first time it
 *            is asked about a record; asked again, it runs the work up to the record,
 *            as the GPU would have done meanwhile (busy streams excepted). A copy whose host
 *            source changed between cuMemcpyHtoDAsync and the copy running counts as a
 *            violation (the slot was released before its copy completed).
 *     eager (default): work on streams made by cuStreamCreate runs as soon as every
 *            event it waits for has completed; work on the NULL stream stays lazy. A
 *            copy that does not wait for the caller's work on its buffer then overwrites
 *            the buffer before that work reads it.
 *   The context stack is per thread, as with the driver: every call that acts in a context
 *   (all but cuInit, the device and primary-context calls, cuCtxPush/PopCurrent and
 *   cuGetErrorName/String) fails with CUDA_ERROR_INVALID_CONTEXT on a thread that has none current.
 *   fake_cuda_set_eager() makes one stream (the NULL stream included) eager whatever the
 *   policy: with the consumer's stream lazy and the caller's eager, the caller's work
 *   runs before a copy it was not made to wait for.
 */
#ifndef SF_TESTS_FAKE_CUDA_H
#define SF_TESTS_FAKE_CUDA_H

#include <stddef.h>

struct fake_cuda_stats {
	long retains, releases; /* cuDevicePrimaryCtxRetain / Release */
	long pushes, pops;	/* cuCtxPushCurrent / PopCurrent */
	long registers, unregisters;
	long allocs, frees;
	long streams, stream_destroys;
	long events, event_destroys;
	long htod_async;	      /* cuMemcpyHtoDAsync calls queued */
	long htod_async_registered;   /* ... whose source lay in registered host memory */
	long htod_async_pinned;	      /* ... whose source lay in cuMemAllocHost memory */
	long host_allocs, host_frees; /* cuMemAllocHost / cuMemFreeHost */
	long violations;	      /* async copies whose source changed before they ran */
	long bad_pointers;	      /* device pointers that were not allocated */
	long freed_in_use;	      /* cuMemFree of memory queued work still reads or writes */
};

/* fake_cuda_stats - the counters so far (resolve with dlsym in the process under test). */
typedef void fake_cuda_stats_fn(struct fake_cuda_stats *ret);

/*
 * fake_cuda_read_async - queue on `stream` a "kernel" that copies `bytes` of device memory
 * at `src` to host `dst` when it runs: the caller's use of a batch. Returns 0, or -1 when
 * the calling thread has no context current or `src` is not device memory.
 */
typedef int fake_cuda_read_async_fn(void *dst, unsigned long long src, size_t bytes, void *stream);

/* fake_cuda_set_eager - make a stream run its work as early as its waits allow, or not. */
typedef void fake_cuda_set_eager_fn(void *stream, int eager);

/*
 * fake_cuda_set_busy - the GPU is (or is no longer) still running earlier work on `stream`,
 * a long kernel: none of the work queued on it runs, nor work that waits for it, and the
 * synchronizing calls that need it block until another thread clears it.
 */
typedef void fake_cuda_set_busy_fn(void *stream, int busy);

#endif
