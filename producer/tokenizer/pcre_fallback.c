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
/*
 * The general categories of the code points WORD gained from PCRE2's Unicode 14.0 to the
 * scanners' 16.0: every one of them is a letter, a mark, Nl, Nd or Pc, and none lost its
 * place (checked with the `regex` module of PyPI, 2026.12.2, at stop 44; a new letter is
 * Alphabetic by definition, and every new Other_Alphabetic code point is a mark).
 */
#define WORD_GC                                                                                    \
	(1u << SF_UC_GC_LU | 1u << SF_UC_GC_LL | 1u << SF_UC_GC_LT | 1u << SF_UC_GC_LM |           \
	 1u << SF_UC_GC_LO | 1u << SF_UC_GC_MN | 1u << SF_UC_GC_MC | 1u << SF_UC_GC_ME |           \
	 1u << SF_UC_GC_NL | 1u << SF_UC_GC_ND | 1u << SF_UC_GC_PC)

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

size_t sf__regex_comment(const char *pat, size_t i)
{
	if (pat[i] != '(' || pat[i + 1] != '?' || pat[i + 2] != '#')
		return 0;
	for (i += 3; pat[i]; i++) {
		if (pat[i] == '\\' && pat[i + 1])
			i++;
		else if (pat[i] == ')')
			return i + 1;
	}
	return SIZE_MAX;
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
 * The script that the property name `name` (up to `end`, between \p{ and }) names, as
 * \p{sc=NAME} compiled, or NULL where it names none. PCRE2 10.40 and later read \p{Han} as
 * Script_Extensions (U+3001 is then Han), where tiktoken's regex and Oniguruma read Script
 * (U+3001 is Common). A name that PCRE2 takes as sc=NAME is a script's, and so is the value
 * of sc=NAME or Script=NAME (sc:, script:; the key compared as the engines compare it);
 * a general category (L, Lu), any other key=value (scx=Han) or a binary property is not.
 * *ret_name gets where the script's name starts.
 */
static pcre2_code *script_named(const char *name, const char *end, const char **ret_name)
{
	const char *value = name;
	char key[8], probe[80];
	bool long_key = false;
	PCRE2_SIZE where;
	size_t k = 0;
	int err;

	for (const char *p = name; p < end; p++) {
		if (*p == '=' || *p == ':') {
			key[k] = 0;
			if (value != name || long_key ||
			    (strcmp(key, "sc") && strcmp(key, "script")))
				return NULL;
			value = p + 1;
		} else if (value == name && *p != '_' && *p != '-' && *p != ' ') {
			if (k + 1 < sizeof(key))
				key[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p | 0x20 : *p);
			else
				long_key = true;
		}
	}
	if (end - value > 64 || end == value)
		return NULL;
	*ret_name = value;
	snprintf(probe, sizeof(probe), "\\p{sc=%.*s}", (int)(end - value), value);
	return pcre2_compile((PCRE2_SPTR)probe, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
			     &where, NULL);
}

/* Whether the property name [name, end) is `lower`, compared as the engines compare names. */
static bool same_name(const char *name, const char *end, const char *lower)
{
	for (; name < end; name++) {
		const char c = *name >= 'A' && *name <= 'Z' ? (char)(*name | 0x20) : *name;

		if (c == '_' || c == '-' || c == ' ')
			continue;
		if (c != *lower++)
			return false;
	}
	return !*lower;
}

/*
 * The general categories a property name stands for (bits SF_UC_GC_*), 0 for a name that
 * is none (a script, a binary property such as Alphabetic): L, Lu, L&, LC, compared as
 * the engines compare them (case, '_', '-' and spaces aside). PCRE2 10.42 knows no long
 * names (Letter): they fail to compile.
 */
static uint32_t gc_mask(const char *name, size_t len)
{
	static const char codes[SF_UC_GC_COUNT][3] = {
		"cc", "cf", "cn", "co", "cs", "ll", "lm", "lo", "lt", "lu",
		"mc", "me", "mn", "nd", "nl", "no", "pc", "pd", "pe", "pf",
		"pi", "po", "ps", "sc", "sk", "sm", "so", "zl", "zp", "zs"};
	char n[8];
	uint32_t mask = 0;
	size_t k = 0;

	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (c == '_' || c == '-' || c == ' ')
			continue;
		if (k + 1 >= sizeof(n))
			return 0;
		n[k++] = (char)(c >= 'A' && c <= 'Z' ? c | 0x20 : c);
	}
	n[k] = 0;
	if (!strcmp(n, "l&") || !strcmp(n, "lc"))
		return 1u << SF_UC_GC_LU | 1u << SF_UC_GC_LL | 1u << SF_UC_GC_LT;
	for (size_t i = 0; i < SF_UC_GC_COUNT; i++)
		if (n[1] ? !strcmp(n, codes[i]) : n[0] && n[0] == codes[i][0])
			mask |= 1u << i;
	return mask;
}

/*
 * A property whose code points may have changed since PCRE2's Unicode: the general
 * categories `mask` (bits SF_UC_GC_*), or, with `script`, the script that \p{sc=NAME}
 * compiled matches (`md` its match data).
 */
struct prop {
	uint32_t mask;
	const pcre2_code *script;
	pcre2_match_data *md;
};

/* Whether the script of p holds cp in PCRE2's tables (never SF_UC_SC_NONE). */
static bool script_has(const struct prop *p, uint32_t cp)
{
	uint8_t buf[4];

	if (cp == SF_UC_SC_NONE)
		return false;
	return pcre2_match(p->script, buf, sf__utf8_encode(cp, buf), 0, PCRE2_ANCHORED, p->md,
			   NULL) >= 0;
}

/*
 * Append to out + *o, as class ranges, the code points that property p holds in the
 * scanners' Unicode and did not in PCRE2's (gained), or the other way round (!gained).
 * With out NULL, only counts them. Returns the number of ranges.
 */
static size_t put_changes(char *out, size_t *o, const struct prop *p, bool gained)
{
	const size_t n_changes = p->script ? sf__uc_sc_changes_n : sf__uc_gc_changes_n;
	size_t n = 0;

	for (size_t i = 0; i < n_changes; i++) {
		uint32_t lo, hi;
		bool then, now;

		if (p->script) {
			const struct sf_uc_sc_change *c = &sf__uc_sc_changes[i];

			lo = c->lo;
			hi = c->hi;
			then = script_has(p, c->then);
			now = script_has(p, c->now);
		} else {
			const struct sf_uc_gc_change *c = &sf__uc_gc_changes[i];

			lo = c->lo;
			hi = c->hi;
			then = p->mask >> c->then & 1;
			now = p->mask >> c->now & 1;
		}
		if (gained ? now && !then : then && !now) {
			if (out)
				*o += (size_t)sprintf(out + *o, "\\x{%x}-\\x{%x}", (unsigned)lo,
						      (unsigned)hi);
			n++;
		}
	}
	return n;
}

/* The most put_prop() writes: every change once, its own brackets and \p{sc=NAME}. */
#define GC_TEXT_BOUND                                                                              \
	((sf__uc_gc_changes_n > sf__uc_sc_changes_n ? sf__uc_gc_changes_n : sf__uc_sc_changes_n) * \
		 22 +                                                                              \
	 112)

/*
 * Give PCRE2 (whose tables are Unicode 14.0) the property escape `written` (`len` bytes,
 * \p{L}, \P{Lu}, \p{^N}, \pL, \d, \D, \p{Han}) of property p, as `esc` (`esc_len` bytes: the
 * escape PCRE2 is to read, \p{sc=Han} for \p{Han}), as p is in the scanners' Unicode (16.0,
 * what tiktoken's regex crate and the Oniguruma of `tokenizers` read): the code points
 * gained since are added, those lost are taken out. Inside a class, what would have to be
 * taken out of it cannot be: refused. Returns 1 where the escape changed, 0 where its
 * code points did not, or SF_E_TOKENIZER.
 */
static int put_prop(char *out, size_t *o, const char *written, size_t len, const char *esc,
		    size_t esc_len, const struct prop *p, bool neg, bool in_class, struct sf_err *e)
{
	/* What the escape gains, and loses, as a set: its complement's for \P. */
	const bool add_gained = !neg;
	const size_t add = put_changes(NULL, NULL, p, add_gained);
	const size_t drop = put_changes(NULL, NULL, p, !add_gained);

	/* [\p{L}-z] is an invalid range to PCRE2 (and to Rust); with ranges after the escape
	 * the - would be a character. (-- is a set operation, refused as such.) */
	if (in_class && written[len] == '-' && written[len + 1] != ']' && written[len + 1] != '-')
		return sf__err(
			e, SF_E_TOKENIZER,
			"pattern: %.*s- inside a character class: a range from a property is "
			"not supported",
			(int)len, written);
	if (in_class && drop)
		return sf__err(e, SF_E_TOKENIZER,
			       "pattern: %.*s inside a character class is not supported (%zu "
			       "ranges of code points changed %s between PCRE2's Unicode "
			       "14.0 and Unicode %s, which a class cannot take out)",
			       (int)len, written, drop, p->script ? "script" : "category",
			       sf__uc_version);
	if (!in_class && drop) {
		*o += (size_t)sprintf(out + *o, "(?:(?![");
		put_changes(out, o, p, !add_gained);
		*o += (size_t)sprintf(out + *o, "])");
	}
	if (!in_class && add)
		out[(*o)++] = '[';
	memcpy(out + *o, esc, esc_len);
	*o += esc_len;
	put_changes(out, o, p, add_gained);
	if (!in_class && add)
		out[(*o)++] = ']';
	if (!in_class && drop)
		out[(*o)++] = ')';
	return add || drop;
}

/*
 * The script escape `written` (\p{Han}, \P{sc=Han}, \p{^Script=Han}, up to `end`, its '}')
 * of the script `script` named `name`, as \p{sc=NAME} (a Script, not Script_Extensions),
 * with `gc` the code points that the script gained or lost since PCRE2's Unicode put in
 * or taken out (put_prop()). Returns as put_prop() does.
 */
static int put_script(char *out, size_t *o, const char *written, const char *end, const char *name,
		      const pcre2_code *script, bool neg, bool gc, bool in_class, struct sf_err *e)
{
	char esc[96];
	const size_t len = (size_t)snprintf(esc, sizeof(esc), "\\%c{%ssc=%.*s}", written[1],
					    neg ? "^" : "", (int)(end - name), name);
	struct prop p = {0, script, NULL};
	int rc;

	if (!gc) {
		memcpy(out + *o, esc, len);
		*o += len;
		return 0;
	}
	p.md = pcre2_match_data_create(1, NULL);
	if (!p.md)
		return sf__err(e, -ENOMEM, "pattern: out of memory");
	rc = put_prop(out, o, written, (size_t)(end + 1 - written), esc, len, &p,
		      neg != (written[1] == 'P'), in_class, e);
	pcre2_match_data_free(p.md);
	return rc;
}

/* The rewriting of one escape is at most this many times the two characters it replaces
 * (\b: about 230 characters), and GC_TEXT_BOUND for each word class in it. */
#define REWRITE_GROWTH 128

/*
 * The word class (\w, \W, \b, \B) as written before `after`: "[" WORD "]" with `open`
 * "[", "[^" or "" (inside a class), and with `gc` the code points it gained since 14.0.
 */
static void put_word(char *out, size_t *o, const char *open, bool gc, const char *after)
{
	const struct prop word = {WORD_GC, NULL, NULL};

	*o += (size_t)sprintf(out + *o, "%s" WORD, open);
	if (gc)
		put_changes(out, o, &word, true);
	*o += (size_t)sprintf(out + *o, "%s%s", *open ? "]" : "", after);
}

/*
 * Rewrite \s, \S, \w, \W, \b and \B of `pattern` into `out`, and with `gc` the general
 * categories, \d and \D, and the word class's Unicode (put_gc(), put_word(); *ret_changed
 * tells whether any changed). `out` has room for REWRITE_GROWTH times the pattern and
 * GC_TEXT_BOUND per property, \d, \D, \w and \W, four per \b and \B; starts[k] gets the
 * offset in `out` where the rewriting of pattern[k] begins (bytes inside an escape or a
 * comment are left as they were). Comments are left out. Returns 0, or
 * SF_E_TOKENIZER for what PCRE2 cannot express in a bracket class (\S, \W, \b, \B there)
 * or reads differently (nested classes, set operations, POSIX classes).
 */
static int rewrite_escapes(const char *pattern, bool rust, bool gc, char *out, size_t *starts,
			   bool *ret_changed, struct sf_err *e)
{
	bool in_class = false, caseless = false;
	uint64_t outer = 0; /* bit d: (?i) in force in the group enclosing depth d */
	size_t class_start = 0, depth = 0;
	size_t i, o = 0, comment_end;

	for (i = 0; pattern[i]; i++) {
		char c = pattern[i];

		starts[i] = o;
		/* A comment (?#...) is left out: PCRE2 would end it at an escaped ')'. */
		comment_end = in_class ? 0 : sf__regex_comment(pattern, i);
		if (comment_end == SIZE_MAX)
			return sf__err(e, SF_E_TOKENIZER,
				       "pattern: the comment at offset %zu is not closed", i);
		if (comment_end) {
			i = comment_end - 1;
			continue;
		}
		if (c == '\\' && pattern[i + 1]) {
			char d = pattern[++i];

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
			/* \d is \p{Nd} to both (and to PCRE2 with UCP), new digits included. */
			if (gc && (d == 'd' || d == 'D')) {
				const struct prop nd = {1u << SF_UC_GC_ND, NULL, NULL};
				int rc = put_prop(out, &o, pattern + i - 1, 2, pattern + i - 1, 2,
						  &nd, d == 'D', in_class, e);

				if (rc < 0)
					return rc;
				*ret_changed |= rc > 0;
				continue;
			}
			if ((d == 'p' || d == 'P') && pattern[i + 1]) {
				const bool braces = pattern[i + 1] == '{';
				const char *name = pattern + i + (braces ? 2 : 1);
				const char *end = braces ? strchr(name, '}') : name + 1;
				const bool neg = braces && *name == '^';
				const uint32_t mask =
					end ? gc_mask(name + neg, (size_t)(end - name) - neg) : 0;

				if (mask && gc) {
					const struct prop p = {mask, NULL, NULL};
					const char *esc = pattern + i - 1;
					const size_t len = (size_t)(end - esc) + braces;
					int rc = put_prop(out, &o, esc, len, esc, len, &p,
							  neg != (d == 'P'), in_class, e);

					if (rc < 0)
						return rc;
					*ret_changed |= rc > 0;
					i = (size_t)(end - pattern) - !braces;
					continue;
				}
			}
			if ((d == 'p' || d == 'P') && pattern[i + 1] == '{') {
				const char *name = pattern + i + 2, *end = strchr(name, '}');
				const bool neg = *name == '^';
				const char *sc = NULL;
				pcre2_code *script =
					end ? script_named(name + neg, end, &sc) : NULL;

				if (script) {
					int rc = put_script(out, &o, pattern + i - 1, end, sc,
							    script, neg, gc, in_class, e);

					pcre2_code_free(script);
					if (rc < 0)
						return rc;
					*ret_changed |= rc > 0;
					i = (size_t)(end - pattern);
					continue;
				}
				if (end && !gc_mask(name + neg, (size_t)(end - name) - neg) &&
				    !same_name(name + neg, end, "any") &&
				    !same_name(name + neg, end, "ascii"))
					return sf__err(e, SF_E_TOKENIZER,
						       "pattern: \\%c{%.*s} not supported (PCRE2's "
						       "properties "
						       "other than general categories and scripts "
						       "are Unicode "
						       "14.0, those of tiktoken's regex and of "
						       "Oniguruma 16.0)",
						       d, (int)(end - name), name);
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
			if (in_class && d == 'w' && pattern[i + 1] == '-' &&
			    pattern[i + 2] != ']' && pattern[i + 2] != '-')
				return sf__err(
					e, SF_E_TOKENIZER,
					"pattern: \\w- inside a character class: a range from "
					"a class is not supported");
			if (d == 'w' || d == 'W') {
				put_word(out, &o, in_class ? "" : d == 'w' ? "[" : "[^", gc, "");
				*ret_changed |= gc;
				continue;
			}
			if (d == 'b' || d == 'B') {
				/* A boundary: a word character on one side only (\b) or on both or
				 * neither (\B). */
				o += (size_t)sprintf(out + o, "(?:(?<=");
				put_word(out, &o, "[", gc, d == 'b' ? ")(?!" : ")(?=");
				put_word(out, &o, "[", gc, ")|(?<!");
				put_word(out, &o, "[", gc, d == 'b' ? ")(?=" : ")(?!");
				put_word(out, &o, "[", gc, "))");
				*ret_changed |= gc;
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

/*
 * The offset in the pattern of offset `at` in its rewriting (`out_len` bytes): starts[k]
 * is where the rewriting of pattern[k] begins, SIZE_MAX for a byte inside an escape. An
 * offset inside an escape's rewriting is the escape's.
 */
static size_t offset_written(const size_t *starts, size_t len, size_t out_len, size_t at)
{
	size_t k = 0;

	if (at >= out_len)
		return len;
	for (size_t i = 0; i < len; i++)
		if (starts[i] <= at)
			k = i;
	return k;
}

/* Rewrite `pattern` (with `gc`, its general categories too, *ret_changed saying whether
 * that changed it) and compile it into *ret_re. */
static int compile_one(const char *pattern, bool rust, bool gc, pcre2_code **ret_re,
		       bool *ret_changed, struct sf_err *e)
{
	const uint32_t options =
		PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (rust ? PCRE2_DOLLAR_ENDONLY : 0);
	const size_t len = strlen(pattern);
	PCRE2_UCHAR msg[256];
	PCRE2_SIZE where;
	pcre2_code *re;
	char *rewritten;
	size_t props = 0, *starts;
	int err, rc;

	for (const char *p = strchr(pattern, '\\'); p && p[1]; p = strchr(p + 2, '\\'))
		props += strchr("bB", p[1]) ? 4 : !!strchr("pPdDwW", p[1]);
	rewritten = malloc(len * REWRITE_GROWTH + props * GC_TEXT_BOUND + 1);
	starts = malloc((len + 1) * sizeof(*starts));
	if (!rewritten || !starts) {
		free(rewritten);
		free(starts);
		return sf__err(e, -ENOMEM, "pattern: out of memory");
	}
	memset(starts, 0xff, (len + 1) * sizeof(*starts));
	*ret_changed = false;
	rc = rewrite_escapes(pattern, rust, gc, rewritten, starts, ret_changed, e);
	/* Rust's $ is the end of the text alone (without (?m)); PCRE2's also matches before a
	 * newline that ends it. tokenizer.json patterns refuse $ (check_pattern()). */
	re = rc < 0 ? NULL
		    : pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED, options, &err,
				    &where, NULL);
	if (rc == 0 && !re) {
		pcre2_get_error_message(err, msg, sizeof(msg));
		rc = sf__err(e, SF_E_TOKENIZER, "pattern: %s at offset %zu", (char *)msg,
			     offset_written(starts, len, strlen(rewritten), (size_t)where));
	}
	free(rewritten);
	free(starts);
	if (rc < 0)
		return rc;
	/* Without JIT PCRE2 still matches, only slower, so a JIT failure is not an error. */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*ret_re = re;
	return 0;
}

/* "MAJOR.MINOR[.PATCH]" as MAJOR * 1000 + MINOR, or -1. */
static long unicode_number(const char *v)
{
	char *end;
	long major = strtol(v, &end, 10), minor;

	if (end == v || *end != '.' || major < 0 || major > 999)
		return -1;
	v = end + 1;
	minor = strtol(v, &end, 10);
	if (end == v || minor < 0 || minor > 999)
		return -1;
	return major * 1000 + minor;
}

int sf__pcre_unicode_fits(const char *pcre_version, struct sf_err *e)
{
	const long have = unicode_number(pcre_version), want = unicode_number(sf__uc_version);

	if (have >= 14000 && have <= want)
		return 0;
	return sf__err(e, SF_E_TOKENIZER,
		       "pattern: this PCRE2 library's Unicode is %s, and patterns are matched as "
		       "in Unicode %s (tiktoken's and tokenizers' own) by correcting PCRE2's "
		       "tables from Unicode 14.0 up: a PCRE2 of Unicode 14.0 to %s is needed "
		       "(Debian 12 has 10.42, Unicode 14.0), or the pattern's ids could differ "
		       "from the reference's",
		       pcre_version, sf__uc_version, sf__uc_version);
}

/* sf__pcre_unicode_fits() for the PCRE2 this process runs with. */
static int pcre_unicode_fits(struct sf_err *e)
{
	char version[32] = "";

	if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version) < 0)
		return sf__err(e, SF_E_TOKENIZER,
			       "pattern: PCRE2 does not say its Unicode version");
	return sf__pcre_unicode_fits(version, e);
}

/*
 * The pattern with the general categories of the scanners' Unicode in *ret_re and, where
 * `ret_fast` is given, the pattern with PCRE2's own in *ret_fast, NULL if it has no
 * property whose code points changed (it has none of the longer classes' cost: DeepSeek's
 * file took 30 instead of 51 MB/s of English prose with them; sf__pcre_text_changed()).
 */
static int compile(const char *pattern, bool rust, pcre2_code **ret_re, pcre2_code **ret_fast,
		   struct sf_err *e)
{
	bool changed;
	int rc = pcre_unicode_fits(e);

	if (rc < 0)
		return rc;
	rc = compile_one(pattern, rust, true, ret_re, &changed, e);
	if (rc < 0 || !ret_fast)
		return rc;
	*ret_fast = NULL;
	if (!changed)
		return 0;
	rc = compile_one(pattern, rust, false, ret_fast, &changed, e);
	if (rc < 0) {
		pcre2_code_free(*ret_re);
		*ret_re = NULL;
	}
	return rc;
}

int sf__pcre_compile(const char *pattern, pcre2_code **ret_re, pcre2_code **ret_fast,
		     struct sf_err *e)
{
	return compile(pattern, true, ret_re, ret_fast, e);
}

int sf__pcre_compile_hf(const char *pattern, pcre2_code **ret_re, pcre2_code **ret_fast,
			struct sf_err *e)
{
	return compile(pattern, false, ret_re, ret_fast, e);
}

/* Whether the general category of cp changed since PCRE2's Unicode. */
static bool gc_changed(uint32_t cp)
{
	size_t lo = 0, hi = sf__uc_gc_changes_n;

	if (cp >= 0x110000 || !(sf__uc_gc_changed_blocks[cp >> 11] >> (cp >> 8 & 7) & 1))
		return false;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cp < sf__uc_gc_changes[mid].lo)
			hi = mid;
		else if (cp > sf__uc_gc_changes[mid].hi)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

bool sf__pcre_text_changed(const uint8_t *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint32_t cp;

		/* Nothing below U+0800 changed: ASCII and two-byte characters go by. */
		if (s[i] < 0xe0) {
			i++;
			continue;
		}
		i += sf__utf8_next(s + i, n - i, &cp);
		if (gc_changed(cp))
			return true;
	}
	return false;
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
