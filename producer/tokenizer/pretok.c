/*
 * Hand-written pre-tokenizers: one scanner per built-in pattern, each returning the end
 * of the piece that starts at a given offset, exactly as tiktoken's regex (Rust regex /
 * fancy-regex, leftmost-first alternation, greedy quantifiers) would. Every alternative
 * is decided by looking at one or two characters and then consuming a run, so a scanner
 * costs time linear in the piece it returns plus at most a few passes over one run of
 * letters or spaces; no input makes it quadratic.
 */
#include <string.h>

#include "producer/tokenizer/pretok_ascii.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"

static const char pat_r50k[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char pat_cl100k[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char pat_o200k[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{"
	"M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}"
	"\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Neither letter, number nor space: the [^\s\p{L}\p{N}] class. */
#define OTHER(c) (!((c) & (SF_UC_L | SF_UC_N | SF_UC_WS)))

static size_t run(const uint8_t *s, size_t n, size_t p, unsigned mask)
{
	size_t len;

	while (p < n && (sf__uc_at(s, n, p, &len) & mask))
		p += len;
	return p;
}

static size_t run_other(const uint8_t *s, size_t n, size_t p)
{
	size_t len;

	while (p < n && OTHER(sf__uc_at(s, n, p, &len)))
		p += len;
	return p;
}

/* \p{N}{1,3} at a number. */
static size_t run_digits3(const uint8_t *s, size_t n, size_t p)
{
	size_t len;
	int i;

	for (i = 0; i < 3 && p < n && (sf__uc_at(s, n, p, &len) & SF_UC_N); i++)
		p += len;
	return p;
}

/*
 * The length of 's|'t|'re|'ve|'m|'ll|'d at s[p], or 0. Case-insensitive matching in
 * Unicode mode also lets U+017F (long s) stand for s; none of the other letters has a
 * case variant outside ASCII.
 */
static size_t contraction(const uint8_t *s, size_t n, size_t p, bool icase)
{
	uint8_t c, d;

	if (p + 1 >= n || s[p] != '\'')
		return 0;
	c = s[p + 1];
	if (icase) {
		if (c == 0xc5 && p + 2 < n && s[p + 2] == 0xbf)
			return 3;
		c |= (c >= 'A' && c <= 'Z') ? 0x20 : 0;
	}
	if (c == 's' || c == 't' || c == 'm' || c == 'd')
		return 2;
	if (p + 2 >= n)
		return 0;
	d = s[p + 2];
	if (icase)
		d |= (d >= 'A' && d <= 'Z') ? 0x20 : 0;
	if (((c == 'r' || c == 'v') && d == 'e') || (c == 'l' && d == 'l'))
		return 3;
	return 0;
}

/*
 * The whitespace alternatives at a space character s[p]: \s*[\r\n]+ (when `newlines`),
 * then \s+(?!\S), then \s+. The first takes the run up to and including its last CR or
 * LF; the second the whole run when it ends the text, else the run less its last
 * character (which then starts the next piece) when that leaves something; the third
 * a single character.
 */
static size_t whitespace(const uint8_t *s, size_t n, size_t p, bool newlines)
{
	size_t e = p, last = p, len;
	size_t newline_end = 0;

	while (e < n && (sf__uc_at(s, n, e, &len) & SF_UC_WS)) {
		if (s[e] == '\r' || s[e] == '\n')
			newline_end = e + 1;
		last = e;
		e += len;
	}
	if (newlines && newline_end)
		return newline_end;
	if (e == n || last == p)
		return e;
	return last;
}

static size_t next_r50k(const uint8_t *s, size_t n, size_t p)
{
	size_t k, len, q = p;
	unsigned c;

	/* Tested here, not in a call at every piece: few pieces start with an apostrophe. */
	if (s[p] == '\'' && (k = contraction(s, n, p, false)))
		return p + k;
	/* ` ?\p{L}+` on ASCII letters. */
	k = ascii_word(s, n, p + (s[p] == ' '));
	if (k)
		return k;
	c = sf__uc_at(s, n, p, &len);
	if (s[p] == ' ' && p + 1 < n) {
		unsigned c1 = sf__uc_at(s, n, p + 1, &len);

		if (!(c1 & SF_UC_WS)) {
			q = p + 1;
			c = c1;
		}
	}
	if (c & SF_UC_L)
		return run(s, n, q, SF_UC_L);
	if (c & SF_UC_N)
		return run(s, n, q, SF_UC_N);
	if (OTHER(c))
		return run_other(s, n, q);
	return whitespace(s, n, p, false);
}

/* [\r\n]* (cl100k_base) or [\r\n/]* (o200k_base) after a run of other characters. */
static size_t trailing_newlines(const uint8_t *s, size_t n, size_t p, bool slash)
{
	while (p < n && (s[p] == '\r' || s[p] == '\n' || (slash && s[p] == '/')))
		p++;
	return p;
}

static size_t next_cl100k(const uint8_t *s, size_t n, size_t p)
{
	size_t k, len, len1;
	unsigned c, c1;

	if (s[p] == '\'' && (k = contraction(s, n, p, true)))
		return p + k;
	/* [^\r\n\p{L}\p{N}]?\p{L}+ on ASCII letters. */
	k = ascii_word(s, n, p + ascii_prefix(s[p]));
	if (k)
		return k;
	c = sf__uc_at(s, n, p, &len);
	/* [^\r\n\p{L}\p{N}]?\p{L}+ */
	if (c & SF_UC_L)
		return run(s, n, p, SF_UC_L);
	if (!(c & SF_UC_N) && s[p] != '\r' && s[p] != '\n' && p + len < n &&
	    (sf__uc_at(s, n, p + len, &len1) & SF_UC_L))
		return run(s, n, p + len, SF_UC_L);
	if (c & SF_UC_N)
		return run_digits3(s, n, p);
	/* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
	if (s[p] == ' ' && p + 1 < n) {
		c1 = sf__uc_at(s, n, p + 1, &len1);
		if (OTHER(c1))
			return trailing_newlines(s, n, run_other(s, n, p + 1), false);
	}
	if (OTHER(c))
		return trailing_newlines(s, n, run_other(s, n, p), false);
	return whitespace(s, n, p, true);
}

/* `end` and the optional (?i:'s|'t|...) after it; most pieces have no apostrophe there. */
static inline size_t with_contraction(const uint8_t *s, size_t n, size_t end)
{
	return end < n && s[end] == '\'' ? end + contraction(s, n, end, true) : end;
}

/*
 * [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ at s[q]: the end of the match,
 * or 0 when there is none. The greedy first run gives back characters until the second
 * can start, so the second starts right after the whole first run when it can, else at
 * the last character of the first run that belongs to both classes.
 */
static size_t o200k_lower(const uint8_t *s, size_t n, size_t q)
{
	size_t u = q, both_end = 0, len;
	unsigned c = 0;

	while (u < n) {
		c = sf__uc_at(s, n, u, &len);
		if (!(c & SF_UC_UP))
			break;
		u += len;
		if (c & SF_UC_LO)
			both_end = u;
	}
	/* The loop stopped at s[u], of class c and length len, unless at the end. */
	if (u < n && (c & SF_UC_LO))
		return run(s, n, u + len, SF_UC_LO);
	/*
	 * Else the second run is the last character of the first that is in both classes:
	 * what follows it in the first run is not lowercase, and neither is s[u].
	 */
	return both_end;
}

/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]* at s[q], or 0. */
static size_t o200k_upper(const uint8_t *s, size_t n, size_t q)
{
	size_t u = run(s, n, q, SF_UC_UP);

	if (u == q)
		return 0;
	return run(s, n, u, SF_UC_LO);
}

static size_t next_o200k(const uint8_t *s, size_t n, size_t p)
{
	size_t len, len1, end;
	unsigned c, c1;
	bool prefix;

	/*
	 * ASCII letters: [A-Z] is in the first class of either letter alternative and [a-z]
	 * in the second only, so both come down to [A-Z]*[a-z]* when that is not empty.
	 */
	end = ascii_upper_lower_end(s, n, p + ascii_prefix(s[p]));
	if (end > p + ascii_prefix(s[p]) && (end == n || s[end] < 0x80))
		return with_contraction(s, n, end);

	c = sf__uc_at(s, n, p, &len);
	/* [^\r\n\p{L}\p{N}]? before either letter alternative. */
	prefix = !(c & (SF_UC_L | SF_UC_N)) && s[p] != '\r' && s[p] != '\n' && p + len < n;
	if ((prefix && (end = o200k_lower(s, n, p + len))) || (end = o200k_lower(s, n, p)))
		return with_contraction(s, n, end);
	if ((prefix && (end = o200k_upper(s, n, p + len))) || (end = o200k_upper(s, n, p)))
		return with_contraction(s, n, end);
	if (c & SF_UC_N)
		return run_digits3(s, n, p);
	/* ` ?[^\s\p{L}\p{N}]+[\r\n/]*` */
	if (s[p] == ' ' && p + 1 < n) {
		c1 = sf__uc_at(s, n, p + 1, &len1);
		if (OTHER(c1))
			return trailing_newlines(s, n, run_other(s, n, p + 1), true);
	}
	if (OTHER(c))
		return trailing_newlines(s, n, run_other(s, n, p), true);
	return whitespace(s, n, p, true);
}

size_t sf__pretok_next(int pretok, const uint8_t *s, size_t n, size_t p)
{
	switch (pretok) {
	case SF_PRETOK_R50K:
		return next_r50k(s, n, p);
	case SF_PRETOK_CL100K:
		return next_cl100k(s, n, p);
	case SF_PRETOK_QWEN:
	case SF_PRETOK_TEKKEN:
	case SF_PRETOK_QWEN3_5:
		return sf__pretok_family_next(pretok, s, n, p);
	default:
		return next_o200k(s, n, p);
	}
}

const char *sf__pretok_pattern(int pretok)
{
	switch (pretok) {
	case SF_PRETOK_R50K:
		return pat_r50k;
	case SF_PRETOK_CL100K:
		return pat_cl100k;
	default:
		return pat_o200k;
	}
}

/* The same splits as written by tiktoken_ext/openai_public.py today, with possessive
 * quantifiers ("equivalent, but executes faster", its comment says): a pattern copied
 * from there gets the scanner too. */
static const struct {
	const char *pattern;
	int pretok;
} pattern_aliases[] = {
	{"'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s",
	 SF_PRETOK_R50K},
	{"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| "
	 "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s",
	 SF_PRETOK_CL100K},
};

int sf__pretok_preset(const char *pattern)
{
	int p;

	for (p = SF_PRETOK_R50K; p <= SF_PRETOK_O200K; p++)
		if (!strcmp(pattern, sf__pretok_pattern(p)))
			return p;
	for (size_t i = 0; i < sizeof(pattern_aliases) / sizeof(pattern_aliases[0]); i++)
		if (!strcmp(pattern, pattern_aliases[i].pattern))
			return pattern_aliases[i].pretok;
	return 0;
}
