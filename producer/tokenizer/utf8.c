/*
 * Rendering decoded bytes for display. Decoding gives bytes, which need not be valid
 * UTF-8 when the ids were cut in the middle of a character; this replaces each maximal
 * invalid subsequence by U+FFFD, the Unicode recommendation that Python's
 * errors="replace" follows, so that what a person sees matches what tiktoken users see.
 */
#include "producer/tokenizer/tokenizer.h"
#include "producer/tokenizer/unicode.h"

/*
 * The length of the longest prefix of s[0..n) (n >= 1, s[0] not ASCII) that could start
 * a well-formed sequence: at least 1, so the lead byte alone when nothing fits.
 */
static size_t maximal_prefix(const uint8_t *s, size_t n)
{
	uint8_t lo = 0x80, hi = 0xbf;
	size_t need, i;

	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		need = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		need = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		need = 4;
	else
		return 1;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	for (i = 1; i < need && i < n; i++) {
		if (s[i] < lo || s[i] > hi)
			break;
		lo = 0x80;
		hi = 0xbf;
	}
	return i;
}

size_t sf__utf8_replace(const void *in, size_t len, char *out)
{
	const uint8_t *s = in;
	size_t p = 0, o = 0, step, i;
	uint32_t cp;

	while (p < len) {
		step = sf__utf8_next(s + p, len - p, &cp);
		if (cp != SF_UC_INVALID) {
			for (i = 0; i < step; i++)
				out[o++] = (char)s[p + i];
			p += step;
			continue;
		}
		out[o++] = (char)0xef;
		out[o++] = (char)0xbf;
		out[o++] = (char)0xbd;
		p += maximal_prefix(s + p, len - p);
	}
	return o;
}
