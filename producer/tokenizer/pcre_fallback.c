/*
 * The PCRE2 pre-tokenizer: runs a pattern that has no hand-written scanner, and serves
 * the tests as the oracle for the scanners. tiktoken's patterns are Rust regex syntax,
 * which PCRE2 (with UTF and UCP) reads the same way except for \s: Rust means the
 * Unicode White_Space property, PCRE2 a slightly different set (it leaves out U+0085,
 * for one). So \s and \S are rewritten into explicit White_Space classes before
 * compiling.
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

/*
 * Rewrite \s and \S of `pattern` into `out` (which has room for 64 times the pattern).
 * Returns 0, or SF_E_TOKENIZER for \S inside a bracket class, which PCRE2 cannot express
 * as a range list.
 */
static int rewrite_spaces(const char *pattern, char *out, struct sf_err *e)
{
	bool in_class = false;
	size_t class_start = 0;
	size_t i, o = 0;

	for (i = 0; pattern[i]; i++) {
		char c = pattern[i];

		if (c == '\\' && pattern[i + 1]) {
			char d = pattern[++i];

			if (d == 's' && in_class) {
				o += (size_t)sprintf(out + o, "%s", white_space);
			} else if (d == 's') {
				o += (size_t)sprintf(out + o, "[%s]", white_space);
			} else if (d == 'S' && !in_class) {
				o += (size_t)sprintf(out + o, "[^%s]", white_space);
			} else if (d == 'S') {
				return sf__err(
					e, SF_E_TOKENIZER,
					"pattern: \\S inside a character class is not supported");
			} else {
				out[o++] = c;
				out[o++] = d;
			}
			continue;
		}
		if (!in_class && c == '[') {
			in_class = true;
			class_start = i + 1;
			if (pattern[class_start] == '^')
				class_start++;
		} else if (in_class && c == ']' && i != class_start) {
			in_class = false;
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return 0;
}

int sf__pcre_compile(const char *pattern, pcre2_code **ret_re, struct sf_err *e)
{
	PCRE2_UCHAR msg[256];
	PCRE2_SIZE where;
	pcre2_code *re;
	char *rewritten;
	int err, rc;

	rewritten = malloc(strlen(pattern) * 64 + 1);
	if (!rewritten)
		return sf__err(e, -ENOMEM, "pattern: out of memory");
	rc = rewrite_spaces(pattern, rewritten, e);
	if (rc < 0) {
		free(rewritten);
		return rc;
	}
	re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED,
			   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &where, NULL);
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
			return SF_E_TOKENIZER;
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
