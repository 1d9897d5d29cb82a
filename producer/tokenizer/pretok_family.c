/*
 * Pre-tokenizers of family patterns that differ from a built-in one in a way that can
 * be stated piece by piece, so that they run on the hand-written scanners instead of
 * PCRE2:
 *
 *  - Qwen (qwen.tiktoken) is cl100k_base with \p{N} for \p{N}{1,3}. In cl100k_base only
 *    the number alternative can start at a number and no other alternative takes one,
 *    so a piece is one number character where cl100k_base starts digits, and
 *    cl100k_base's piece everywhere else.
 *  - Mistral tekken is o200k_base with \p{N} for \p{N}{1,3} and without the contraction
 *    suffix ((?i:'s|'t|'re|'ve|'m|'ll|'d)?) of its two letter alternatives. The same
 *    holds for numbers; a letter piece of o200k_base ends with a contraction exactly when
 *    it ends with one whose apostrophe is not the piece's first character (a letter
 *    piece holds an apostrophe only as its one-character prefix or in the suffix), and
 *    without the suffix the greedy letter runs stay what they were.
 *

 * Qwen 3.5/3.6 (qwen3_6.tiktoken) puts marks with letters ([\p{L}\p{M}]+, and marks out
 * of the punctuation class), which no built-in scanner knows: it has a scanner of its
 * own here, in the built-in ones' manner (decide by one or two characters, then take a
 * run).
 *
 * tests/unit/tokenizer/test_pretok_family.c checks all three against PCRE2 running the
 * families' own patterns, and test_families_ref.py every id against the references.
 */
#include <string.h>

#include "producer/tokenizer/pretok_ascii.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"

static const char pat_qwen[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
			       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char pat_qwen3_5[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
	"?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char pat_tekken[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
	"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/*
 * The length of a case-insensitive contraction that ends s[p..e), or 0: 's 't 'm 'd
 * (and 'ſ, U+017F, which matches s without case) or 're 've 'll.
 */
static size_t contraction_before(const uint8_t *s, size_t p, size_t e)
{
	uint8_t c, d;

	if (e - p >= 3 && s[e - 3] == '\'' && s[e - 2] == 0xc5 && s[e - 1] == 0xbf)
		return 3;
	if (e - p >= 2 && s[e - 2] == '\'') {
		c = s[e - 1] | 0x20;
		if (c == 's' || c == 't' || c == 'm' || c == 'd')
			return 2;
	}
	if (e - p >= 3 && s[e - 3] == '\'') {
		c = s[e - 2] | 0x20;
		d = s[e - 1] | 0x20;
		if (((c == 'r' || c == 'v') && d == 'e') || (c == 'l' && d == 'l'))
			return 3;
	}
	return 0;
}

/* \p{M}: the characters of both o200k_base letter classes that are not letters. */
static inline bool is_mark(unsigned c)
{
	return (c & (SF_UC_UP | SF_UC_LO | SF_UC_L)) == (SF_UC_UP | SF_UC_LO);
}

/* [\p{L}\p{M}] */
static inline bool letter_or_mark(unsigned c)
{
	return (c & SF_UC_L) || is_mark(c);
}

/* [^\s\p{L}\p{M}\p{N}] */
static inline bool other(unsigned c)
{
	return !(c & (SF_UC_L | SF_UC_N | SF_UC_WS)) && !is_mark(c);
}

static size_t run_letters_marks(const uint8_t *s, size_t n, size_t p)
{
	size_t len;

	while (p < n && letter_or_mark(sf__uc_at(s, n, p, &len)))
		p += len;
	return p;
}

/* [^\s\p{L}\p{M}\p{N}]+[\r\n]* from s[p], which is such a character. */
static size_t run_other_newlines(const uint8_t *s, size_t n, size_t p)
{
	size_t len;

	while (p < n && other(sf__uc_at(s, n, p, &len)))
		p += len;
	while (p < n && (s[p] == '\r' || s[p] == '\n'))
		p++;
	return p;
}

static size_t next_qwen3_5(const uint8_t *s, size_t n, size_t p)
{
	size_t len, len1, end;
	unsigned c, c1;

	/* (?i:'s|'t|'re|'ve|'m|'ll|'d): as in the end of a tekken piece, read backwards. */
	if (s[p] == '\'') {
		for (size_t k = 3; k >= 2; k--)
			if (p + k <= n && contraction_before(s, p, p + k) == k)
				return p + k;
	}
	/* [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ on ASCII letters (a mark is never ASCII). */
	end = ascii_word(s, n, p + ascii_prefix(s[p]));
	if (end)
		return end;
	c = sf__uc_at(s, n, p, &len);
	if (letter_or_mark(c))
		return run_letters_marks(s, n, p + len);
	/* [^\r\n\p{L}\p{N}]? before the run: any other character but CR and LF. */
	if (!(c & SF_UC_N) && s[p] != '\r' && s[p] != '\n' && p + len < n &&
	    letter_or_mark(sf__uc_at(s, n, p + len, &len1)))
		return run_letters_marks(s, n, p + len + len1);
	if (c & SF_UC_N)
		return p + len;
	if (s[p] == ' ' && p + 1 < n) {
		c1 = sf__uc_at(s, n, p + 1, &len1);
		if (other(c1))
			return run_other_newlines(s, n, p + 1);
	}
	if (other(c))
		return run_other_newlines(s, n, p);
	/*
	 * A space character followed by a number, a space or the end: only the whitespace
	 * alternatives are left, which are cl100k_base's (a mark after it, which cl100k_base
	 * would take as punctuation, went to the letter run above).
	 */
	return sf__pretok_next(SF_PRETOK_CL100K, s, n, p);
}

size_t sf__pretok_family_next(int pretok, const uint8_t *s, size_t n, size_t p)
{
	size_t len, e, k;

	if (pretok == SF_PRETOK_QWEN3_5)
		return next_qwen3_5(s, n, p);

	if ((unsigned)(s[p] - '0') < 10u)
		return p + 1;
	if (s[p] >= 0x80 && (sf__uc_at(s, n, p, &len) & SF_UC_N))
		return p + len;
	if (pretok == SF_PRETOK_QWEN)
		return sf__pretok_next(SF_PRETOK_CL100K, s, n, p);
	e = sf__pretok_next(SF_PRETOK_O200K, s, n, p);
	k = contraction_before(s, p, e);
	/* The apostrophe at p is a prefix, not a suffix; bytes of 0x80 and above are never
	 * an ASCII letter, so a match above is exact. */
	return k && e - k > p ? e - k : e;
}

int sf__pretok_family_preset(const char *pattern)
{
	if (!strcmp(pattern, pat_qwen))
		return SF_PRETOK_QWEN;
	if (!strcmp(pattern, pat_qwen3_5))
		return SF_PRETOK_QWEN3_5;
	if (!strcmp(pattern, pat_tekken))
		return SF_PRETOK_TEKKEN;
	return 0;
}
