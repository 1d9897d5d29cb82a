/*
 * The PCRE2 pre-tokenizer: runs a pattern that has no hand-written scanner, and serves
 * the tests as the oracle for the scanners. tiktoken's patterns are Rust regex syntax,
 * which PCRE2 (with UTF and UCP) reads the same way except for:
 *  - \s: Rust means the Unicode White_Space property, PCRE2 a slightly different set (it
 *    leaves out U+0085, for one);
 *  - \w: Rust means Alphabetic, marks, decimal digits, connector punctuation and the
 *    join controls, PCRE2 10.42 letters, digits and '_' (a mark such as U+093F is no word
 *    character to it), and so \W, \b and \B too.
 * These are rewritten into explicit classes (and lookarounds for \b and \B) before
 * compiling. Class syntax PCRE2 does not have or reads otherwise is refused: a class
 * inside a class and the set operations &&, -- and ~~ (PCRE2 would read them as
 * characters), and POSIX classes ([[:alpha:]] is ASCII to Rust, Unicode to PCRE2 with
 * UCP). Tokenizer.json patterns (Oniguruma's syntax, sf__pcre_compile_hf()) come here
 * after hf_pretok.c's checks, which refuse the word escapes, nested classes and && for
 * Oniguruma's own reasons; the Rust class checks are not theirs ([+--] is a range there,
 * as in PCRE2).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"

/* White_Space (PropList.txt), as the body of a character class. */
static const char white_space[] = "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
				  "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

/* Rust's Unicode \w (regex-syntax's perl_word), as the body of a character class. */
#define WORD "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"

size_t sf__regex_flags(const char *pat, size_t i, bool caseless, const char *watch,
		       bool *ret_caseless, char *ret_flag)
{
	bool off = false;
	size_t j = i + 1;

	*ret_caseless = caseless;
	*ret_flag = 0;
	if (pat[j] != '?')
		return j;
	for (j = i + 2; ((pat[j] | 0x20) >= 'a' && (pat[j] | 0x20) <= 'z') || pat[j] == '-'; j++) {
		if (!*ret_flag && pat[j] != '-' && strchr(watch, pat[j]))
			*ret_flag = pat[j];
		if (pat[j] == '-')
			off = true;
		else if (pat[j] == 'i')
			*ret_caseless = !off;
	}
	return j;
}

bool sf__regex_cased_property(const char *p)
{
	/* Names as the engines match them: case, '_', '-' and spaces aside. */
	static const char *const cased[] = {
		"lu",	     "ll",	   "lt",	"lc",		   "l&",
		"uppercase", "lowercase",  "cased",	"titlecase",	   "upper",
		"lower",     "title",	   "uppercaseletter", "lowercaseletter", "titlecaseletter",
		"casedletter"};
	char name[32];
	size_t n = 0;

	if (*p != '{')
		return false; /* \pL: a one-letter name, none cased */
	p++;
	if (*p == '^')
		p++;
	for (; *p && *p != '}' && n + 1 < sizeof(name); p++) {
		if (*p == '=' || *p == ':') /* gc=Lu, General_Category:Lu */
			n = 0;
		else if (*p != '_' && *p != '-' && *p != ' ')
			name[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p | 0x20 : *p);
	}
	name[n] = 0;
	for (size_t k = 0; k < sizeof(cased) / sizeof(cased[0]); k++)
		if (!strcmp(name, cased[k]))
			return true;
	return false;
}

/*
 * Whether the property name `name` (`len` bytes, between \p{ and }) is a script's: PCRE2
 * 10.40 and later read \p{Han} as Script_Extensions (U+3001 is then Han), where tiktoken's
 * regex and Oniguruma read Script (U+3001 is Common). A name that PCRE2 takes as sc=NAME
 * is one; a general category (L, Lu, Letter), sc=... or a binary property is not.
 */
static bool script_name(const char *name, size_t len)
{
	char probe[80];
	pcre2_code *re;
	PCRE2_SIZE where;
	int err;

	if (len > 64 || memchr(name, '=', len) || memchr(name, ':', len))
		return false;
	snprintf(probe, sizeof(probe), "\\p{sc=%.*s}", (int)len, name);
	re = pcre2_compile((PCRE2_SPTR)probe, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
			   &where, NULL);
	pcre2_code_free(re);
	return re != NULL;
}

/* The rewriting of one escape is at most this many times the two characters it replaces
 * (\b: about 230 characters). */
#define REWRITE_GROWTH 128

/*
 * Rewrite \s, \S, \w, \W, \b and \B of `pattern` into `out` (which has room for
 * REWRITE_GROWTH times the pattern). Returns 0, or SF_E_TOKENIZER for what PCRE2 cannot
 * express in a bracket class (\S, \W, \b, \B there) or reads differently (nested classes,
 * set operations, POSIX classes).
 */
static int rewrite_escapes(const char *pattern, bool rust, char *out, struct sf_err *e)
{
	bool in_class = false, caseless = false;
	uint64_t outer = 0; /* bit d: (?i) in force in the group enclosing depth d */
	size_t class_start = 0, depth = 0;
	size_t i, o = 0;

	for (i = 0; pattern[i]; i++) {
		char c = pattern[i];

		if (c == '\\' && pattern[i + 1]) {
			char d = pattern[++i];
			const char *put = NULL;

			/* Rust syntax: letters and digits only where PCRE2 reads them alike
			 * (\h is a hex digit to tiktoken's fancy-regex, \Q..\E none of its). */
			if (rust &&
			    (((d | 0x20) >= 'a' && (d | 0x20) <= 'z') || (d >= '0' && d <= '9')) &&
			    !strchr("dDsSwWbBtnrfvpPxAz", d))
				return sf__err(
					e, SF_E_TOKENIZER,
					"pattern: \\%c is not supported (tiktoken's regex reads "
					"it otherwise than PCRE2, or not at all)",
					d);
			/* Under (?i) Rust folds a cased property to both cases; PCRE2 does not. */
			if (rust && caseless && (d == 'p' || d == 'P') &&
			    sf__regex_cased_property(pattern + i + 1))
				return sf__err(
					e, SF_E_TOKENIZER,
					"pattern: a cased property (\\%c%.12s) under (?i) is not "
					"supported (tiktoken's regex folds it, PCRE2 does not)",
					d, pattern + i + 1);
			if ((d == 'p' || d == 'P') && pattern[i + 1] == '{') {
				const char *name = pattern + i + 2, *end = strchr(name, '}');
				const bool neg = *name == '^';

				if (end && script_name(name + neg, (size_t)(end - name) - neg)) {
					o += (size_t)sprintf(out + o, "\\%c{%ssc=%.*s}", d,
							     neg ? "^" : "",
							     (int)(end - name) - neg, name + neg);
					i = (size_t)(end - pattern);
					continue;
				}
			}
			if (rust && d == 'v') { /* Rust: the vertical tab only */
				o += (size_t)sprintf(out + o, "\\x{0b}");
				continue;
			}

			if (in_class && strchr("SWbB", d))
				return sf__err(e, SF_E_TOKENIZER,
					       "pattern: \\%c inside a character class is not "
					       "supported",
					       d);
			if (d == 's' || d == 'S') {
				o += (size_t)sprintf(out + o, "%s%s%s",
						     in_class	? ""
						     : d == 's' ? "["
								: "[^",
						     white_space, in_class ? "" : "]");
				continue;
			}
			if (d == 'w')
				put = in_class ? WORD : "[" WORD "]";
			else if (d == 'W')
				put = "[^" WORD "]";
			else if (d == 'b')
				put = "(?:(?<=[" WORD "])(?![" WORD "])|(?<![" WORD "])(?=[" WORD
				      "]))";
			else if (d == 'B')
				put = "(?:(?<=[" WORD "])(?=[" WORD "])|(?<![" WORD "])(?![" WORD
				      "]))";
			if (put) {
				o += (size_t)sprintf(out + o, "%s", put);
				continue;
			}
			out[o++] = c;
			out[o++] = d;
			continue;
		}
		if (!in_class && c == '(' && rust) {
			bool on;
			char flag;
			size_t j = sf__regex_flags(pattern, i, caseless, "", &on, &flag);

			/* (?flags) for the rest of the group, (?flags:...) for its own. */
			if (pattern[i + 1] == '?' && pattern[j] == ')' && j > i + 2) {
				caseless = on;
			} else if (depth < 64) {
				outer = (outer & ~(UINT64_C(1) << depth)) | (uint64_t)caseless
										    << depth;
				depth++;
				if (pattern[i + 1] == '?' && pattern[j] == ':' && j > i + 2)
					caseless = on;
			} else {
				return sf__err(e, SF_E_TOKENIZER,
					       "pattern: groups nested more than 64 deep");
			}
		} else if (!in_class && c == ')' && rust && depth) {
			depth--;
			caseless = outer >> depth & 1;
		}
		if (!in_class && c == '[') {
			in_class = true;
			class_start = i + 1;
			if (pattern[class_start] == '^')
				class_start++;
		} else if (in_class && c == ']' && i != class_start) {
			in_class = false;
		} else if (rust && in_class && c == '[') {
			return sf__err(e, SF_E_TOKENIZER,
				       "pattern: %s inside a character class is not supported (PCRE2 "
				       "reads it otherwise than tiktoken's Rust regex)",
				       pattern[i + 1] == ':' ? "a POSIX class" : "a class");
		} else if (rust && in_class && (c == '&' || c == '-' || c == '~') &&
			   pattern[i + 1] == c) {
			return sf__err(e, SF_E_TOKENIZER,
				       "pattern: the class operation %c%c is not supported (PCRE2 reads "
				       "it as characters)",
				       c, c);
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return 0;
}

static int compile(const char *pattern, bool rust, pcre2_code **ret_re, struct sf_err *e)
{
	PCRE2_UCHAR msg[256];
	PCRE2_SIZE where;
	pcre2_code *re;
	char *rewritten;
	int err, rc;

	rewritten = malloc(strlen(pattern) * REWRITE_GROWTH + 1);
	if (!rewritten)
		return sf__err(e, -ENOMEM, "pattern: out of memory");
	rc = rewrite_escapes(pattern, rust, rewritten, e);
	if (rc < 0) {
		free(rewritten);
		return rc;
	}
	/* Rust's $ is the end of the text alone (without (?m)); PCRE2's also matches before a
	 * newline that ends it. tokenizer.json patterns refuse $ (check_pattern()). */
	re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED,
			   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
				   (rust ? PCRE2_DOLLAR_ENDONLY : 0),
			   &err, &where, NULL);
	free(rewritten);
	if (!re) {
		pcre2_get_error_message(err, msg, sizeof(msg));
		return sf__err(e, SF_E_TOKENIZER, "pattern: %s at offset %zu", (char *)msg,
			       (size_t)where);
	}
	/* Without JIT PCRE2 still matches, only slower, so a JIT failure is not an error. */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*ret_re = re;
	return 0;
}

int sf__pcre_compile(const char *pattern, pcre2_code **ret_re, struct sf_err *e)
{
	return compile(pattern, true, ret_re, e);
}

int sf__pcre_compile_hf(const char *pattern, pcre2_code **ret_re, struct sf_err *e)
{
	return compile(pattern, false, ret_re, e);
}

int sf__pcre_next(const pcre2_code *re, pcre2_match_data *md, const uint8_t *s, size_t n, size_t p,
		  size_t *ret_start, size_t *ret_end)
{
	PCRE2_SIZE *ov;
	uint32_t cp;
	int rc;

	while (p < n) {
		rc = pcre2_match(re, s, n, p, 0, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc < 0)
			return rc;
		ov = pcre2_get_ovector_pointer(md);
		if (ov[1] > ov[0]) {
			*ret_start = ov[0];
			*ret_end = ov[1];
			return 1;
		}
		/* An empty match yields no piece; search again one character further on. */
		p = ov[0] + sf__utf8_next(s + ov[0], n - ov[0], &cp);
	}
	return 0;
}

int sf__pcre_fail(struct sf_err *e, const char *name, int rc, size_t at)
{
	PCRE2_UCHAR msg[256];

	pcre2_get_error_message(rc, msg, sizeof(msg));
	return sf__err(e, SF_E_TOKENIZER,
		       "%s: the pattern failed at byte %zu: %s%s", name, at, (char *)msg,
		       rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
				       rc == PCRE2_ERROR_HEAPLIMIT
			       ? " (it backtracks too much: a nested quantifier such as (a+)+?)"
			       : "");
}
