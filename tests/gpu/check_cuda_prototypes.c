/*
 * Compile-time check of consumer/cuda.h against the real cuda.h: each function pointer of
 * the dlopen table must accept the address of the function cuda.h declares (through its
 * versioned macro, e.g. cuMemAlloc -> cuMemAlloc_v2). Built with
 * -Werror=incompatible-pointer-types where cuda.h is installed; running it checks the
 * constants too.
 */
#include <cuda.h>
#include <stdio.h>

#include "consumer/cuda.h"

_Static_assert(sizeof(CUdeviceptr) == sizeof(sf_cudeviceptr), "CUdeviceptr");
_Static_assert(CUDA_SUCCESS == SF_CUDA_SUCCESS, "CUDA_SUCCESS");
_Static_assert(CUDA_ERROR_NO_DEVICE == SF_CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE");
_Static_assert(CUDA_ERROR_NOT_READY == SF_CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY");
_Static_assert(CU_MEMHOSTREGISTER_PORTABLE == SF_CU_MEMHOSTREGISTER_PORTABLE, "PORTABLE");
_Static_assert(CU_STREAM_NON_BLOCKING == SF_CU_STREAM_NON_BLOCKING, "NON_BLOCKING");
_Static_assert(CU_EVENT_DISABLE_TIMING == SF_CU_EVENT_DISABLE_TIMING, "DISABLE_TIMING");

int main(void)
{
	struct sf_cuda t;

	t.cuInit = &cuInit;
	t.cuDeviceGet = &cuDeviceGet;
	t.cuDeviceGetCount = &cuDeviceGetCount;
	t.cuDevicePrimaryCtxRetain = &cuDevicePrimaryCtxRetain;
	t.cuDevicePrimaryCtxRelease = &cuDevicePrimaryCtxRelease;
	t.cuCtxPushCurrent = &cuCtxPushCurrent;
	t.cuCtxPopCurrent = &cuCtxPopCurrent;
	t.cuMemHostRegister = &cuMemHostRegister;
	t.cuMemHostUnregister = &cuMemHostUnregister;
	t.cuMemAlloc = &cuMemAlloc;
	t.cuMemFree = &cuMemFree;
	t.cuMemcpyHtoDAsync = &cuMemcpyHtoDAsync;
	t.cuMemcpyHtoD = &cuMemcpyHtoD;
	t.cuMemcpyDtoH = &cuMemcpyDtoH;
	t.cuMemAllocHost = &cuMemAllocHost;
	t.cuMemFreeHost = &cuMemFreeHost;
	t.cuStreamCreate = &cuStreamCreate;
	t.cuStreamDestroy = &cuStreamDestroy;
	t.cuStreamWaitEvent = &cuStreamWaitEvent;
	t.cuStreamSynchronize = &cuStreamSynchronize;
	t.cuEventCreate = &cuEventCreate;
	t.cuEventRecord = &cuEventRecord;
	t.cuEventQuery = &cuEventQuery;
	t.cuEventSynchronize = &cuEventSynchronize;
	t.cuEventDestroy = &cuEventDestroy;
	t.cuGetErrorName = &cuGetErrorName;
	t.cuGetErrorString = &cuGetErrorString;
	printf("consumer/cuda.h matches cuda.h %d (%zu table entries)\n", CUDA_VERSION,
	       sizeof(t) / sizeof(void *));
	return 0;
}
