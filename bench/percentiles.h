/*
 * Percentiles of latency samples for the C benchmarks: sort with cmp_u64, then read
 * pct(). Header-only, included by each benchmark program.
 */
#ifndef SF_BENCH_PERCENTILES_H
#define SF_BENCH_PERCENTILES_H

#include <stddef.h>
#include <stdint.h>

/* qsort comparison of two uint64_t. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank) of `n` sorted samples. */
static uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
	size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);

	return sorted[i < n ? i : n - 1];
}

#endif
