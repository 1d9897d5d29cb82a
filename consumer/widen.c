/*
 * Token widening: the arena keeps ids at the job's width (uint16 or int32), and models
 * index embeddings with int64 (or int32). These loops write the wider ids into buffers
 * the caller owns, eight ids a step with SSE2 where the CPU is x86-64 (the baseline of
 * every x86-64 CPU, so no dispatch), and plainly elsewhere. They are memory-bound: at
 * B=12 T=1024 one batch is 24 KiB in and 96 KiB out.
 */
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SF_WIDEN_AVX2 1
#endif

#include "shmfeed/shmfeed.h"
#include "consumer/widen.h"

#ifdef SF_WIDEN_AVX2
/* AVX2 where the CPU has it (checked once at run time): one 32-byte store per 4 ids
 * halves the stores of the SSE2 loop, which is what a batch's widening is bound by. */
__attribute__((target("avx2"))) static uint64_t u16_to_i64_avx2(const uint16_t *src, int64_t *dst,
								uint64_t n)
{
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256i a = _mm256_cvtepu16_epi64(
			_mm_loadl_epi64((const __m128i *)(const void *)(src + i)));
		__m256i b = _mm256_cvtepu16_epi64(
			_mm_loadl_epi64((const __m128i *)(const void *)(src + i + 4)));
		__m256i c = _mm256_cvtepu16_epi64(
			_mm_loadl_epi64((const __m128i *)(const void *)(src + i + 8)));
		__m256i d = _mm256_cvtepu16_epi64(
			_mm_loadl_epi64((const __m128i *)(const void *)(src + i + 12)));

		_mm256_storeu_si256((__m256i *)(void *)(dst + i), a);
		_mm256_storeu_si256((__m256i *)(void *)(dst + i + 4), b);
		_mm256_storeu_si256((__m256i *)(void *)(dst + i + 8), c);
		_mm256_storeu_si256((__m256i *)(void *)(dst + i + 12), d);
	}
	return i;
}

static int have_avx2(void)
{
	static int known = -1;

	if (known < 0)
		known = __builtin_cpu_supports("avx2") ? 1 : 0;
	return known;
}
#endif

static void u16_to_i64(const uint16_t *src, int64_t *dst, uint64_t n)
{
	uint64_t i = 0;
#ifdef SF_WIDEN_AVX2
	if (have_avx2())
		i = u16_to_i64_avx2(src, dst, n);
#endif
#ifdef __SSE2__
	const __m128i zero = _mm_setzero_si128();

	for (; i + 8 <= n; i += 8) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
		__m128i lo = _mm_unpacklo_epi16(x, zero), hi = _mm_unpackhi_epi16(x, zero);

		_mm_storeu_si128((__m128i *)(void *)(dst + i), _mm_unpacklo_epi32(lo, zero));
		_mm_storeu_si128((__m128i *)(void *)(dst + i + 2), _mm_unpackhi_epi32(lo, zero));
		_mm_storeu_si128((__m128i *)(void *)(dst + i + 4), _mm_unpacklo_epi32(hi, zero));
		_mm_storeu_si128((__m128i *)(void *)(dst + i + 6), _mm_unpackhi_epi32(hi, zero));
	}
#endif
	for (; i < n; i++)
		dst[i] = src[i];
}

static void u16_to_i32(const uint16_t *src, int32_t *dst, uint64_t n)
{
	uint64_t i = 0;
#ifdef __SSE2__
	const __m128i zero = _mm_setzero_si128();

	for (; i + 8 <= n; i += 8) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(src + i));

		_mm_storeu_si128((__m128i *)(void *)(dst + i), _mm_unpacklo_epi16(x, zero));
		_mm_storeu_si128((__m128i *)(void *)(dst + i + 4), _mm_unpackhi_epi16(x, zero));
	}
#endif
	for (; i < n; i++)
		dst[i] = src[i];
}

static void i32_to_i64(const int32_t *src, int64_t *dst, uint64_t n)
{
	uint64_t i = 0;
#ifdef __SSE2__
	for (; i + 4 <= n; i += 4) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
		__m128i sign = _mm_srai_epi32(x, 31);

		_mm_storeu_si128((__m128i *)(void *)(dst + i), _mm_unpacklo_epi32(x, sign));
		_mm_storeu_si128((__m128i *)(void *)(dst + i + 2), _mm_unpackhi_epi32(x, sign));
	}
#endif
	for (; i < n; i++)
		dst[i] = src[i];
}

int sf__widen_valid(uint32_t src_dtype, uint32_t dst_dtype)
{
	return (src_dtype == SF_DTYPE_U16 || src_dtype == SF_DTYPE_I32) &&
	       (dst_dtype == SF_DTYPE_I32 || dst_dtype == SF_DTYPE_I64);
}

int sf_tokens_widen(const void *src, uint32_t src_dtype, void *dst, uint32_t dst_dtype, uint64_t n)
{
	if (!sf__widen_valid(src_dtype, dst_dtype))
		return SF_E_RANGE;
	if (src_dtype == SF_DTYPE_U16 && dst_dtype == SF_DTYPE_I64)
		u16_to_i64(src, dst, n);
	else if (src_dtype == SF_DTYPE_U16)
		u16_to_i32(src, dst, n);
	else if (dst_dtype == SF_DTYPE_I64)
		i32_to_i64(src, dst, n);
	else
		memcpy(dst, src, n * sizeof(int32_t));
	return 0;
}
