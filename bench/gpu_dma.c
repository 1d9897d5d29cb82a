/*
 * gpu_dma: host-to-device bandwidth of the three kinds of host memory a loader can copy
 * from, in one run on one device: a shared-memory mapping registered with
 * cuMemHostRegister (what a shmfeed consumer copies from), pageable malloc memory with
 * cuMemcpyHtoD (what a plain loader copies from), and cuMemAllocHost pinned memory (the
 * driver's peak). Each size is copied many times with cuMemcpyHtoDAsync (or
 * cuMemcpyHtoD for pageable memory) on one stream and timed with the wall clock around
 * the queue and a stream synchronize, so launch latency shows at small sizes.
 * Sizes go from 64 KiB to MAX_BYTES (default 256 MiB) by factors of 4; each measurement
 * moves about BUDGET_BYTES (default 2 GiB; 3 to 2000 copies). scripts/gpu-check runs it,
 * with small values against the fake driver. Exits 77 where there is no CUDA driver or
 * device.
 *
 * usage: gpu_dma [DEVICE [MAX_BYTES [BUDGET_BYTES]]]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "consumer/cuda.h"

static const struct sf_cuda *cu;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(sf_curesult r, const char *what)
{
	if (r == SF_CUDA_SUCCESS)
		return 0;
	fprintf(stderr, "gpu_dma: %s: %s (%u): %s\n", what, sf__cuda_error_name(cu, r), r,
		sf__cuda_error_text(cu, r));
	exit(1);
}

/* GB/s of `reps` copies of `bytes` from `src` to `dst`; async on `stream`, or sync. */
static double copy_rate(sf_cudeviceptr dst, const void *src, size_t bytes, int reps,
			sf_custream stream, int async)
{
	double t0;

	/* One untimed copy warms the path (TLB, driver lookups of the registration). */
	check(cu->cuMemcpyHtoD(dst, src, bytes), "warm-up copy");
	t0 = now_s();
	for (int i = 0; i < reps; i++) {
		if (async)
			check(cu->cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
		else
			check(cu->cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
	}
	/* A synchronous copy from pageable memory may return once its bytes are staged, the
	 * DMA still to come on the legacy stream (handle 0): wait for that stream too. */
	check(cu->cuStreamSynchronize(async ? stream : NULL), "cuStreamSynchronize");
	return (double)bytes * reps / (now_s() - t0) / 1e9;
}

int main(int argc, char **argv)
{
	struct sf_err e = {0};
	int ordinal = argc > 1 ? atoi(argv[1]) : 0;
	size_t max = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)256 << 20;
	double budget = argc > 3 ? strtod(argv[3], NULL) : 2.0 * (1u << 30);
	sf_cucontext ctx, popped;
	sf_custream stream;
	sf_cudeviceptr dbuf;
	sf_cudevice dev;
	void *shm, *pageable, *pinned;
	int r, fd;

	r = sf__cuda_load(&cu, &e);
	if (r == -ENODEV) {
		printf("SKIP: %s\n", e.msg);
		return 77;
	}
	if (r < 0) {
		fprintf(stderr, "gpu_dma: %s\n", e.msg);
		return 1;
	}
	check(cu->cuDeviceGet(&dev, ordinal), "cuDeviceGet");
	check(cu->cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cu->cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
	check(cu->cuStreamCreate(&stream, SF_CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	check(cu->cuMemAlloc(&dbuf, max), "cuMemAlloc");

	/* A shared-memory mapping like the arena's payloads. */
	fd = memfd_create("gpu_dma", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)max) < 0) {
		perror("gpu_dma: memfd");
		return 1;
	}
	shm = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	pageable = malloc(max);
	if (shm == MAP_FAILED || !pageable) {
		perror("gpu_dma: memory");
		return 1;
	}
	memset(shm, 1, max);
	memset(pageable, 1, max);
	check(cu->cuMemHostRegister(shm, max, SF_CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister");
	check(cu->cuMemAllocHost(&pinned, max), "cuMemAllocHost");
	memset(pinned, 1, max);

	printf("device %d, H2D GB/s (wall clock, one stream)\n", ordinal);
	printf("%12s %14s %14s %14s %10s\n", "bytes", "registered-shm", "pageable", "pinned-peak",
	       "shm/peak");
	if (max < (64u << 10)) {
		fprintf(stderr, "gpu_dma: MAX_BYTES below 64 KiB\n");
		return 1;
	}
	for (size_t n = 64u << 10; n <= max; n *= 4) {
		double want = budget / (double)n;
		int reps = want < 3 ? 3 : want > 2000 ? 2000 : (int)want;
		double reg = copy_rate(dbuf, shm, n, reps, stream, 1);
		double pag = copy_rate(dbuf, pageable, n, reps, stream, 0);
		double pin = copy_rate(dbuf, pinned, n, reps, stream, 1);

		printf("%12zu %14.2f %14.2f %14.2f %9.0f%%\n", n, reg, pag, pin, 100.0 * reg / pin);
	}
	cu->cuMemHostUnregister(shm);
	cu->cuMemFreeHost(pinned);
	cu->cuMemFree(dbuf);
	cu->cuStreamDestroy(stream);
	cu->cuCtxPopCurrent(&popped);
	cu->cuDevicePrimaryCtxRelease(dev);
	munmap(shm, max);
	close(fd);
	free(pageable);
	return 0;
}
