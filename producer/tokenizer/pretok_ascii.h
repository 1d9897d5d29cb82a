/*
 * The scanners' fast paths for the commonest piece, ASCII letters with an optional
 * one-byte prefix (pretok.c, pretok_family.c). They give the same end as the general
 * scanners, which they leave the piece to (by returning 0) whenever a byte of 0x80 or
 * above could change it: a non-ASCII letter or mark may continue a run, and only the
 * tables know.
 */
#ifndef SF_PRODUCER_TOKENIZER_PRETOK_ASCII_H
#define SF_PRODUCER_TOKENIZER_PRETOK_ASCII_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static inline bool ascii_upper(uint8_t b)
{
	return (unsigned)(b - 'A') < 26u;
}

static inline bool ascii_lower(uint8_t b)
{
	return (unsigned)(b - 'a') < 26u;
}

static inline bool ascii_alpha(uint8_t b)
{
	return ascii_lower(b | 0x20);
}

/* An ASCII byte that [^\r\n\p{L}\p{N}] matches. */
static inline bool ascii_prefix(uint8_t b)
{
	return b < 0x80 && !ascii_alpha(b) && (unsigned)(b - '0') >= 10u && b != '\r' && b != '\n';
}

#ifdef __SSE2__
/*
 * Bit i of *up (of *lo) is set where s[i] is an ASCII upper- (lower-)case letter, for the
 * 16 bytes at s. A word's end is then a count of trailing ones, not a loop whose exit
 * the branch predictor misses at nearly every word.
 */
static inline void ascii_case_masks(const uint8_t *s, unsigned *up, unsigned *lo)
{
	const __m128i v = _mm_loadu_si128((const __m128i *)s);
	const __m128i bit5 = _mm_set1_epi8(0x20);
	/* v | 0x20 in 'a'..'z', as a signed compare after moving 'a' to -128. */
	const __m128i alpha = _mm_cmplt_epi8(
		_mm_add_epi8(_mm_or_si128(v, bit5), _mm_set1_epi8((char)(128 - 'a'))),
		_mm_set1_epi8(-128 + 26));
	const __m128i lower = _mm_cmpeq_epi8(_mm_and_si128(v, bit5), bit5);

	*up = (unsigned)_mm_movemask_epi8(_mm_andnot_si128(lower, alpha));
	*lo = (unsigned)_mm_movemask_epi8(_mm_and_si128(lower, alpha));
}
#endif

/* The end of the run of ASCII letters at s[q]. */
static inline size_t ascii_alpha_end(const uint8_t *s, size_t n, size_t q)
{
	size_t e = q;

#ifdef __SSE2__
	if (n - q >= 16) {
		unsigned up, lo;

		ascii_case_masks(s + q, &up, &lo);
		e = q + (unsigned)__builtin_ctz(~(up | lo));
		if (e < q + 16)
			return e;
	}
#endif
	while (e < n && ascii_alpha(s[e]))
		e++;
	return e;
}

/* The end of [A-Z]*[a-z]* at s[q]. */
static inline size_t ascii_upper_lower_end(const uint8_t *s, size_t n, size_t q)
{
	size_t e = q;

#ifdef __SSE2__
	if (n - q >= 16) {
		unsigned up, lo, u, l;

		ascii_case_masks(s + q, &up, &lo);
		u = (unsigned)__builtin_ctz(~up);
		l = (unsigned)__builtin_ctz(~(lo >> u));
		e = q + u + l;
		if (u + l < 16)
			return e;
		if (u < 16)
			goto lower;
	}
#endif
	while (e < n && ascii_upper(s[e]))
		e++;
#ifdef __SSE2__
lower:
#endif
	while (e < n && ascii_lower(s[e]))
		e++;
	return e;
}

/* The end of a run of ASCII letters at s[q], or 0 when it is empty or a byte >= 0x80 ends it. */
static inline size_t ascii_word(const uint8_t *s, size_t n, size_t q)
{
	size_t e = ascii_alpha_end(s, n, q);

	return e > q && (e == n || s[e] < 0x80) ? e : 0;
}

#endif
