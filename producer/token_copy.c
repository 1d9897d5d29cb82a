/*
 * Token ids from one width to another (producer/token_copy.h).
 */
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "shmfeed/shmfeed.h"
#include "producer/token_copy.h"

/*
 * Ids of src_width bytes to dst_width bytes. Narrowing (every raw text row: ids are
 * encoded as uint32) checks eight ids at a time for bits above 16 and packs them with
 * SSE2: biased by -0x8000, every id fits the signed saturating pack exactly, and the bias
 * is undone on the 16-bit lanes.
 */
int sf__copy_tokens(void *dst, uint32_t dst_width, const void *src, uint32_t src_width, size_t n,
		    size_t *ret_bad)
{
	const unsigned char *s = src;
	size_t i = 0;

	if (dst_width == src_width) {
		memcpy(dst, src, n * src_width);
		return 0;
	}
	if (dst_width == 4) {
		uint32_t *d = dst;

		for (; i < n; i++) {
			uint16_t v;

			memcpy(&v, s + 2 * i, 2);
			d[i] = v;
		}
		return 0;
	}
#ifdef __SSE2__
	{
		const __m128i bias = _mm_set1_epi32(0x8000), zero = _mm_setzero_si128();
		const __m128i unbias = _mm_set1_epi16((short)0x8000);

		for (; i + 8 <= n; i += 8) {
			__m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + 4 * i));
			__m128i b =
				_mm_loadu_si128((const __m128i *)(const void *)(s + 4 * i + 16));
			__m128i high = _mm_or_si128(_mm_srli_epi32(a, 16), _mm_srli_epi32(b, 16));

			if (_mm_movemask_epi8(_mm_cmpeq_epi32(high, zero)) != 0xffff)
				break; /* the loop below finds which */
			_mm_storeu_si128((__m128i *)(void *)((unsigned char *)dst + 2 * i),
					 _mm_xor_si128(_mm_packs_epi32(_mm_sub_epi32(a, bias),
								       _mm_sub_epi32(b, bias)),
						       unbias));
		}
	}
#endif
	{
		uint16_t *d = dst;

		for (; i < n; i++) {
			uint32_t v;

			memcpy(&v, s + 4 * i, 4);
			if (v > UINT16_MAX) {
				*ret_bad = i;
				return SF_E_RANGE;
			}
			d[i] = (uint16_t)v;
		}
	}
	return 0;
}
