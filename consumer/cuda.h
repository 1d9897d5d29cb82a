/*
 * The few CUDA Driver API functions shmfeed uses, loaded at run time with
 * dlopen("libcuda.so.1") into a table of function pointers, so that one build runs with or
 * without a GPU and builds without the CUDA headers. The types below are declared here by
 * hand with the same struct tags as cuda.h; tests/gpu/check_cuda_prototypes.c includes
 * both headers (where cuda.h exists) and fails to compile if a prototype drifts.
 *
 * The table is process-wide and read-only once loaded; sf__cuda_load() may be called from
 * several handles, it loads once.
 */
#ifndef SF_CONSUMER_CUDA_H
#define SF_CONSUMER_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"

/* CUresult is an enum without negative values: GCC and Clang give it type unsigned int. */
typedef unsigned int sf_curesult;
typedef int sf_cudevice;
typedef unsigned long long sf_cudeviceptr;
typedef struct CUctx_st *sf_cucontext;
typedef struct CUstream_st *sf_custream;
typedef struct CUevent_st *sf_cuevent;

#define SF_CUDA_SUCCESS		       0u
#define SF_CUDA_ERROR_STUB_LIBRARY     34u /* libcuda.so.1 is the toolkit's stub: no driver */
#define SF_CUDA_ERROR_NO_DEVICE	       100u
#define SF_CUDA_ERROR_NOT_READY	       600u
#define SF_CU_MEMHOSTREGISTER_PORTABLE 0x01u
#define SF_CU_STREAM_NON_BLOCKING      0x1u
#define SF_CU_EVENT_DISABLE_TIMING     0x2u

/* One typedef per function, named after the driver function (without version suffix). */
typedef sf_curesult sf_cuInit_fn(unsigned int flags);
typedef sf_curesult sf_cuDeviceGet_fn(sf_cudevice *device, int ordinal);
typedef sf_curesult sf_cuDeviceGetCount_fn(int *count);
typedef sf_curesult sf_cuDevicePrimaryCtxRetain_fn(sf_cucontext *pctx, sf_cudevice dev);
typedef sf_curesult sf_cuDevicePrimaryCtxRelease_fn(sf_cudevice dev);
typedef sf_curesult sf_cuCtxPushCurrent_fn(sf_cucontext ctx);
typedef sf_curesult sf_cuCtxPopCurrent_fn(sf_cucontext *pctx);
typedef sf_curesult sf_cuMemHostRegister_fn(void *p, size_t bytesize, unsigned int flags);
typedef sf_curesult sf_cuMemHostUnregister_fn(void *p);
typedef sf_curesult sf_cuMemAlloc_fn(sf_cudeviceptr *dptr, size_t bytesize);
typedef sf_curesult sf_cuMemFree_fn(sf_cudeviceptr dptr);
typedef sf_curesult sf_cuMemcpyHtoDAsync_fn(sf_cudeviceptr dst, const void *src, size_t bytes,
					    sf_custream stream);
typedef sf_curesult sf_cuMemcpyHtoD_fn(sf_cudeviceptr dst, const void *src, size_t bytes);
typedef sf_curesult sf_cuMemcpyDtoH_fn(void *dst, sf_cudeviceptr src, size_t bytes);
typedef sf_curesult sf_cuMemAllocHost_fn(void **pp, size_t bytesize);
typedef sf_curesult sf_cuMemFreeHost_fn(void *p);
typedef sf_curesult sf_cuStreamCreate_fn(sf_custream *stream, unsigned int flags);
typedef sf_curesult sf_cuStreamDestroy_fn(sf_custream stream);
typedef sf_curesult sf_cuStreamWaitEvent_fn(sf_custream stream, sf_cuevent event,
					    unsigned int flags);
typedef sf_curesult sf_cuStreamSynchronize_fn(sf_custream stream);
typedef sf_curesult sf_cuEventCreate_fn(sf_cuevent *event, unsigned int flags);
typedef sf_curesult sf_cuEventRecord_fn(sf_cuevent event, sf_custream stream);
typedef sf_curesult sf_cuEventQuery_fn(sf_cuevent event);
typedef sf_curesult sf_cuEventSynchronize_fn(sf_cuevent event);
typedef sf_curesult sf_cuEventDestroy_fn(sf_cuevent event);
typedef sf_curesult sf_cuGetErrorName_fn(sf_curesult error, const char **pstr);
typedef sf_curesult sf_cuGetErrorString_fn(sf_curesult error, const char **pstr);

/*
 * The table's symbols: each field with the name dlsym() looks up, the versioned symbol
 * that cuda.h (CUDA 12 and 13, without per-thread default streams) maps the function to.
 * tests/gpu/check_cuda_names.c compares each name with cuda.h's mapping where the header
 * is installed (the fake driver exports exactly these names, so it cannot tell).
 */
#define CUDA_SYMBOLS(X)                                                                            \
	X(cuInit, "cuInit")                                                                        \
	X(cuDeviceGet, "cuDeviceGet")                                                              \
	X(cuDeviceGetCount, "cuDeviceGetCount")                                                    \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                    \
	X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")                               \
	X(cuCtxPushCurrent, "cuCtxPushCurrent_v2")                                                 \
	X(cuCtxPopCurrent, "cuCtxPopCurrent_v2")                                                   \
	X(cuMemHostRegister, "cuMemHostRegister_v2")                                               \
	X(cuMemHostUnregister, "cuMemHostUnregister")                                              \
	X(cuMemAlloc, "cuMemAlloc_v2")                                                             \
	X(cuMemFree, "cuMemFree_v2")                                                               \
	X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")                                               \
	X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                                                         \
	X(cuMemcpyDtoH, "cuMemcpyDtoH_v2")                                                         \
	X(cuMemAllocHost, "cuMemAllocHost_v2")                                                     \
	X(cuMemFreeHost, "cuMemFreeHost")                                                          \
	X(cuStreamCreate, "cuStreamCreate")                                                        \
	X(cuStreamDestroy, "cuStreamDestroy_v2")                                                   \
	X(cuStreamWaitEvent, "cuStreamWaitEvent")                                                  \
	X(cuStreamSynchronize, "cuStreamSynchronize")                                              \
	X(cuEventCreate, "cuEventCreate")                                                          \
	X(cuEventRecord, "cuEventRecord")                                                          \
	X(cuEventQuery, "cuEventQuery")                                                            \
	X(cuEventSynchronize, "cuEventSynchronize")                                                \
	X(cuEventDestroy, "cuEventDestroy_v2")                                                     \
	X(cuGetErrorName, "cuGetErrorName")                                                        \
	X(cuGetErrorString, "cuGetErrorString")

struct sf_cuda {
	sf_cuInit_fn *cuInit;
	sf_cuDeviceGet_fn *cuDeviceGet;
	sf_cuDeviceGetCount_fn *cuDeviceGetCount;
	sf_cuDevicePrimaryCtxRetain_fn *cuDevicePrimaryCtxRetain;
	sf_cuDevicePrimaryCtxRelease_fn *cuDevicePrimaryCtxRelease;
	sf_cuCtxPushCurrent_fn *cuCtxPushCurrent;
	sf_cuCtxPopCurrent_fn *cuCtxPopCurrent;
	sf_cuMemHostRegister_fn *cuMemHostRegister;
	sf_cuMemHostUnregister_fn *cuMemHostUnregister;
	sf_cuMemAlloc_fn *cuMemAlloc;
	sf_cuMemFree_fn *cuMemFree;
	sf_cuMemcpyHtoDAsync_fn *cuMemcpyHtoDAsync;
	sf_cuMemcpyHtoD_fn *cuMemcpyHtoD;
	sf_cuMemcpyDtoH_fn *cuMemcpyDtoH;
	sf_cuMemAllocHost_fn *cuMemAllocHost;
	sf_cuMemFreeHost_fn *cuMemFreeHost;
	sf_cuStreamCreate_fn *cuStreamCreate;
	sf_cuStreamDestroy_fn *cuStreamDestroy;
	sf_cuStreamWaitEvent_fn *cuStreamWaitEvent;
	sf_cuStreamSynchronize_fn *cuStreamSynchronize;
	sf_cuEventCreate_fn *cuEventCreate;
	sf_cuEventRecord_fn *cuEventRecord;
	sf_cuEventQuery_fn *cuEventQuery;
	sf_cuEventSynchronize_fn *cuEventSynchronize;
	sf_cuEventDestroy_fn *cuEventDestroy;
	sf_cuGetErrorName_fn *cuGetErrorName;
	sf_cuGetErrorString_fn *cuGetErrorString;
};

/*
 * sf__cuda_load - load libcuda.so.1, resolve the table and cuInit(0). Returns 0 and the
 * process-wide table in *ret_cuda; -ENODEV when there is no driver library or no device
 * (the caller then knows this machine has no GPU), SF_E_CUDA when the driver fails
 * otherwise. Detail in `e`.
 */
int sf__cuda_load(const struct sf_cuda **ret_cuda, struct sf_err *e);

/* sf__cuda_error_name - the CUresult's name ("CUDA_ERROR_OUT_OF_MEMORY"); never NULL. */
const char *sf__cuda_error_name(const struct sf_cuda *cu, sf_curesult r);
/* sf__cuda_error_text - the driver's description of it ("out of memory"); never NULL. */
const char *sf__cuda_error_text(const struct sf_cuda *cu, sf_curesult r);

/*
 * sf__cuda_sticky - whether `r` is an error after which the context is unusable (every
 * later call fails the same: no work queued in it will run).
 */
bool sf__cuda_sticky(sf_curesult r);

/*
 * sf__cuda_check - 0 when r is CUDA_SUCCESS, else SF_E_CUDA with "WHAT: NAME (r)" in `e`.
 */
int sf__cuda_check(const struct sf_cuda *cu, sf_curesult r, const char *what, struct sf_err *e);

#endif
