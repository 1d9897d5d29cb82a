/*
 * Loading the pre-tokenizer of a tokenizer.json (hf_json.c) into stages: Sequence, Split
 * (regex or string, every behaviour, invert), Digits and ByteLevel, last; refusing every
 * other type, and the regex constructs that Oniguruma and PCRE2 read differently.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/json.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/hf_load.h"

/* The GPT-2 pattern of ByteLevel's use_regex (tokenizers' byte_level.rs). */
static const char gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_stage(struct sf_hf_loader *l, const char *path, const struct sf_hf_stage *stage)
{
	if (l->hf->n_stages == SF_HF_MAX_STAGES)
		return sf__hf_refuse(l, path, "more than %d pre-tokenizer stages",
				     SF_HF_MAX_STAGES);
	l->hf->stages[l->hf->n_stages++] = *stage;
	l->hf->any_fast |= stage->re_fast != NULL;
	return 0;
}

static int behavior_of(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path,
		       int *ret)
{
	static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious",
					    "MergedWithNext", "Contiguous"};
	const struct sf_json_node *b = sf__json_tree_get(l->doc, obj, "behavior");
	char where[300];
	int i;

	snprintf(where, sizeof(where), "%s.behavior", path);
	if (!b || b->type != SF_JSON_STRING)
		return sf__hf_refuse(l, where, "missing");
	for (i = 0; i < 5; i++) {
		if (!strcmp(sf__json_tree_str(l->doc, b), names[i])) {
			*ret = SF_HF_ISOLATED + i;
			return 0;
		}
	}
	return sf__hf_refuse(l, where, "\"%s\" not supported", sf__json_tree_str(l->doc, b));
}

/*
 * tokenizers compiles Split patterns with Oniguruma (Ruby syntax); PCRE2 reads the
 * patterns these files use the same way, except for constructs refused here: ^ and $
 * (line anchors in Ruby), (?m) (dot-all in Ruby) and (?s) (not Ruby), \h and \H (hex
 * digits in Ruby), \w, \W, \b and \B (Oniguruma's word characters are not PCRE2's: U+00BD
 * is one, and a combining mark counts for \b), \A, \z, \Z, \G, \K and \R, a class
 * inside a class ([a[bc]]: a union in Ruby, a '[' in PCRE2) and && in a class (an
 * intersection in Ruby), {,n} (at most n in Ruby, literal text in PCRE2 10.42), and
 * case-insensitive matching where Oniguruma folds one character to several ("ss" and
 * "ß", "fi" and "ﬁ"; PCRE2 folds one to one): under (?i), a character outside ASCII, a
 * \x, \u or \o escape, or one of the letter pairs ss, st, ff, fi and fl. Also a pattern
 * that can match the empty string (whose iteration rules differ between the engines).
 */
/*
 * The position of the letter that follows the letter pat[i] in the text a match reads:
 * past the opening and closing of groups, their flags and comments between them
 * (Oniguruma folds s(?:s) and (?:f)(?:i) as it folds ss and fi).
 */
static size_t next_letter(const char *pat, size_t i)
{
	for (i++; pat[i];) {
		size_t end = sf__regex_comment(pat, i);

		if (end && end != SIZE_MAX) {
			i = end;
		} else if (pat[i] == ')') {
			i++;
		} else if (pat[i] == '(') {
			bool on;
			char flag;
			size_t j = sf__regex_flags(pat, i, false, "", &on, &flag);

			/* (, (?:, (?flags: or (?flags); a lookaround or (?<name> is no letter. */
			if (pat[i + 1] != '?')
				i++;
			else if ((pat[j] == ':' || pat[j] == ')') && j > i + 1)
				i = j + 1;
			else
				return i;
		} else {
			return i;
		}
	}
	return i;
}

/*
 * The letter pair that starts at the letter pat[i] when one character folds to it under
 * (?i) (ss, st, ff, fi, fl), the second letter possibly after group syntax: its second
 * letter, or 0.
 */
static char folded_pair(const char *pat, size_t i)
{
	static const char *const pairs[] = {"ss", "st", "ff", "fi", "fl"};
	const char second = pat[next_letter(pat, i)];
	char a = (char)(pat[i] | 0x20), b = (char)(second | 0x20);

	for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++)
		if (a == pairs[k][0] && b == pairs[k][1])
			return second;
	return 0;
}

/* Whether pat[at] is escaped: an odd number of backslashes right before it. */
static bool escaped(const char *pat, size_t at)
{
	size_t n = 0;

	while (at > n && pat[at - n - 1] == '\\')
		n++;
	return n % 2;
}

/*
 * Whether pat[end] ('}') closes an interval quantifier {n}, {n,} or {n,m} (*ret_exact: {n}):
 * not an escaped brace, nor the braces of an escape that owns them (\x{41}, \o{..},
 * \u{..}, \p{..}; \d{2} is \d and an interval).
 */
static bool interval_before(const char *pat, size_t end, bool *ret_exact)
{
	size_t i = end, commas = 0;

	while (i > 0 && ((pat[i - 1] >= '0' && pat[i - 1] <= '9') || pat[i - 1] == ',')) {
		commas += pat[i - 1] == ',';
		i--;
	}
	if (i == 0 || pat[i - 1] != '{' || i == end || commas > 1 || escaped(pat, i - 1))
		return false;
	if (i >= 2 && strchr("xoupP", pat[i - 2]) && escaped(pat, i - 2))
		return false;
	*ret_exact = commas == 0;
	return true;
}

/*
 * Whether a '|' of the group that encloses position `p` of `pat` comes after p (escapes,
 * classes and nested groups skipped): a (?flags) before it, not at the start of its
 * branch, is read otherwise by Oniguruma and PCRE2.
 */
static bool alternative_follows(const char *pat, size_t p)
{
	size_t depth = 0;
	bool in_class = false;

	for (; pat[p]; p++) {
		if (pat[p] == '\\' && pat[p + 1])
			p++;
		else if (in_class)
			in_class = pat[p] != ']';
		else if (pat[p] == '[')
			in_class = true;
		else if (pat[p] == '(')
			depth++;
		else if (pat[p] == ')' && !depth--)
			return false;
		else if (pat[p] == '|' && !depth)
			return true;
	}
	return false;
}

/* Groups deep enough for any tokenizer.json; deeper patterns are refused. */
#define PATTERN_DEPTH_MAX 64

static int check_pattern(struct sf_hf_loader *l, const char *where, const char *pat)
{
	bool in_class = false, caseless = false, exact;
	char second;	    /* of a letter pair one character folds to */
	uint64_t outer = 0; /* bit d: (?i) in force in the group enclosing depth d */
	size_t i, class_start = 0, depth = 0, comment_end;

	for (i = 0; pat[i]; i++) {
		char c = pat[i];

		/* A comment is nothing to either engine (and left out of what PCRE2 gets). */
		comment_end = in_class ? 0 : sf__regex_comment(pat, i);
		if (comment_end == SIZE_MAX)
			return sf__hf_refuse(l, where, "a comment (?#...) that is not closed");
		if (comment_end) {
			i = comment_end - 1;
			continue;
		}
		if ((unsigned char)c >= 0x80 && caseless)
			return sf__hf_refuse(l, where,
					     "a character outside ASCII under (?i) not supported "
					     "(Oniguruma folds some to several: ß matches ss)");
		if (c == '\\' && pat[i + 1]) {
			/* Letters: only those the two engines read alike (\pL is the text pL
			 * to Oniguruma, \v a vertical tab only, \Q..\E and \C-x its own). */
			if (((pat[i + 1] | 0x20) >= 'a' && (pat[i + 1] | 0x20) <= 'z' &&
			     !strchr("dDsStnrfaexpP", pat[i + 1])) ||
			    (pat[i + 1] >= '0' && pat[i + 1] <= '9') ||
			    ((pat[i + 1] == 'p' || pat[i + 1] == 'P') && pat[i + 2] != '{'))
				return sf__hf_refuse(l, where,
						     "\\%c%s not supported (it differs between "
						     "Oniguruma and PCRE2)",
						     pat[i + 1],
						     pat[i + 1] == 'p' || pat[i + 1] == 'P'
							     ? " without {}"
							     : "");
			if (caseless && strchr("xuo", pat[i + 1]))
				return sf__hf_refuse(
					l, where,
					"\\%c under (?i) not supported (Oniguruma folds "
					"some characters to several: ß matches ss)",
					pat[i + 1]);
			/* Oniguruma folds a cased property in a class only. */
			if ((pat[i + 1] == 'p' || pat[i + 1] == 'P') && caseless && in_class &&
			    sf__regex_cased_property(pat + i + 2))
				return sf__hf_refuse(
					l, where,
					"a cased property in a class under (?i) not "
					"supported (Oniguruma folds it, PCRE2 does not)");
			/* \p{...}: a property, whose name may hold ^ (negation) or letters;
			 * Oniguruma knows no NAME=VALUE (NAME:VALUE) and no L&, which PCRE2
			 * reads, and tokenizers refuses a file with them. */
			if ((pat[i + 1] == 'p' || pat[i + 1] == 'P') && pat[i + 2] == '{') {
				const char *close = strchr(pat + i + 2, '}');
				const char *name = pat + i + 3 + (pat[i + 3] == '^');
				size_t sep = close ? strcspn(name, "=:}") : 0;

				if (close && name + sep < close)
					return sf__hf_refuse(
						l, where,
						"%.*s not supported (Oniguruma, which tokenizers "
						"uses, knows no NAME=VALUE property: write "
						"\\%c{%.*s%.*s})",
						(int)(close + 1 - (pat + i)), pat + i, pat[i + 1],
						(int)(name - (pat + i + 3)), "^",
						(int)(close - (name + sep + 1)), name + sep + 1);
				/* No name of Oniguruma's holds '&'; PCRE2 reads l&, L_& as L&. */
				if (close && memchr(name, '&', (size_t)(close - name)))
					return sf__hf_refuse(
						l, where,
						"%.*s not supported (Oniguruma, which tokenizers "
						"uses, knows no L&: write \\p{LC})",
						(int)(close + 1 - (pat + i)), pat + i);
				if (close) {
					i = (size_t)(close - pat);
					continue;
				}
			}
			i++;
			continue;
		}
		if (in_class) {
			if (c == ']' && i != class_start)
				in_class = false;
			else if (c == '[' && pat[i + 1] == ':')
				return sf__hf_refuse(
					l, where,
					"a POSIX class not supported (Oniguruma and "
					"PCRE2 give [[:alpha:]] and its kin other sets)");
			else if (c == '[')
				return sf__hf_refuse(
					l, where,
					"a class inside a class not supported (a union "
					"in Oniguruma, a '[' in PCRE2)");
			else if (c == '&' && pat[i + 1] == '&')
				return sf__hf_refuse(l, where,
						     "&& in a class not supported (an intersection "
						     "in Oniguruma)");
			continue;
		}
		if (caseless && (second = folded_pair(pat, i)))
			return sf__hf_refuse(l, where,
					     "\"%c%c\" under (?i) not supported (Oniguruma also "
					     "matches it with one character: ss with ß, fi with ﬁ)",
					     pat[i], second);
		if (c == '[') {
			in_class = true;
			class_start = i + 1 + (pat[i + 1] == '^');
		} else if (c == '^' || c == '$') {
			return sf__hf_refuse(l, where,
					     "the anchor %c not supported (a line anchor in "
					     "Oniguruma)",
					     c);
		} else if (c == '{' && pat[i + 1] == ',') {
			return sf__hf_refuse(l, where,
					     "{,n} not supported (at most n in Oniguruma, literal "
					     "text in PCRE2)");
		} else if (c == '}' && (pat[i + 1] == '+' || pat[i + 1] == '?') &&
			   interval_before(pat, i, &exact) && (pat[i + 1] == '+' || exact)) {
			return sf__hf_refuse(
				l, where,
				"%s not supported (in Oniguruma's Ruby syntax a repeat "
				"of the interval, or an optional {n}; possessive or lazy "
				"to PCRE2)",
				pat[i + 1] == '+' ? "{n,m}+" : "{n}?");
		} else if (c == '(') {
			bool on;
			char flag;
			/* The flags of a group, (?on-off:...) or (?on-off) for the rest of the
			 * enclosing group: letters and '-' up to ':' or ')'. */
			size_t j = sf__regex_flags(pat, i, caseless, "ms", &on, &flag);

			/* Extended syntax: its # comments would hide from these checks what
			 * the engines read; other letters are no option of Oniguruma's
			 * (tokenizers refuses (?U), (?J), (?n)), some of them PCRE2's. */
			for (size_t k = i + 2; pat[i + 1] == '?' && k < j; k++)
				if (pat[k] != '-' && !strchr("ims", pat[k]))
					return sf__hf_refuse(
						l, where, "the flag (?%c) not supported%s", pat[k],
						pat[k] == 'x' ? " (its # comments are not checked)"
							      : " (no option of Oniguruma's: "
								"tokenizers refuses it)");
			if (flag == 'm')
				return sf__hf_refuse(l, where,
						     "the flag (?m) not supported (dot-all in "
						     "Oniguruma)");
			if (flag == 's')
				return sf__hf_refuse(
					l, where,
					"the flag (?s) not supported (not Oniguruma's: "
					"tokenizers refuses it)");
			if (pat[i + 1] == '?' && pat[j] == ')' && j > i + 2) {
				if (i && pat[i - 1] != '(' && pat[i - 1] != '|' &&
				    alternative_follows(pat, j + 1))
					return sf__hf_refuse(
						l, where,
						"(?flags) inside a branch with a | after it not "
						"supported (Oniguruma reads x(?i)y|z as "
						"x(?i:y|z), PCRE2 as xy|(?i)z)");
				caseless = on;
				i = j;
				continue;
			}
			if (depth == PATTERN_DEPTH_MAX)
				return sf__hf_refuse(l, where, "groups nested more than %d deep",
						     PATTERN_DEPTH_MAX);
			outer = (outer & ~(UINT64_C(1) << depth)) | (uint64_t)caseless << depth;
			depth++;
			if (pat[i + 1] == '?' && pat[j] == ':' && j > i + 2) {
				caseless = on;
				i = j;
			}
		} else if (c == ')' && depth) {
			depth--;
			caseless = outer >> depth & 1;
		}
	}
	return 0;
}

static int load_split(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path)
{
	static const char *const known[] = {"type", "pattern", "behavior", "invert", NULL};
	const struct sf_json_node *pattern = sf__json_tree_get(l->doc, obj, "pattern"), *p;
	struct sf_hf_stage stage = {.kind = SF_HF_STAGE_PCRE};
	char where[300];
	const char *text;
	size_t min_len = 0;
	int rc;

	rc = sf__hf_only_keys(l, obj, path, known);
	if (rc < 0)
		return rc;
	rc = behavior_of(l, obj, path, &stage.behavior);
	if (rc < 0)
		return rc;
	rc = sf__hf_get_bool(l, obj, "invert", path, SF_HF_NEEDED, &stage.invert);
	if (rc < 0)
		return rc;
	snprintf(where, sizeof(where), "%s.pattern", path);
	if (!pattern || pattern->type != SF_JSON_OBJECT || pattern->len != 1 ||
	    sf__json_tree_child(l->doc, pattern, 0)->type != SF_JSON_STRING)
		return sf__hf_refuse(l, where, "expected {\"Regex\": ...} or {\"String\": ...}");
	p = sf__json_tree_child(l->doc, pattern, 0);
	text = sf__json_tree_str(l->doc, p);
	if (!strcmp(sf__json_tree_key(l->doc, p), "Regex")) {
		snprintf(where, sizeof(where), "%s.pattern.Regex", path);
		rc = check_pattern(l, where, text);
		if (rc < 0)
			return rc;
		stage.preset = sf__pretok_preset(text);
		if (stage.preset && stage.behavior == SF_HF_ISOLATED && !stage.invert) {
			stage.kind = SF_HF_STAGE_PRESET;
			return add_stage(l, path, &stage);
		}
		if (strlen(text) != p->len)
			return sf__hf_refuse(l, where, "a NUL character in the pattern");
		rc = sf__pcre_compile_hf(text, &stage.re, &stage.re_fast, l->e);
		if (rc < 0)
			return sf__hf_refuse(l, where, "%s", l->e ? l->e->msg : "does not compile");
	} else if (!strcmp(sf__json_tree_key(l->doc, p), "String")) {
		int err;
		PCRE2_SIZE at;

		snprintf(where, sizeof(where), "%s.pattern.String", path);
		stage.re = pcre2_compile((PCRE2_SPTR)text, p->len,
					 PCRE2_LITERAL | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err,
					 &at, NULL);
		if (!stage.re)
			return sf__hf_refuse(l, where, "does not compile");
		pcre2_jit_compile(stage.re, PCRE2_JIT_COMPLETE);
	} else {
		return sf__hf_refuse(l, where, "expected {\"Regex\": ...} or {\"String\": ...}");
	}
	pcre2_pattern_info(stage.re, PCRE2_INFO_MINLENGTH, &min_len);
	if (!min_len) {
		pcre2_code_free(stage.re);
		pcre2_code_free(stage.re_fast);
		return sf__hf_refuse(l, where, "can match the empty string: not supported");
	}
	rc = add_stage(l, path, &stage);
	if (rc < 0) {
		pcre2_code_free(stage.re);
		pcre2_code_free(stage.re_fast);
	}
	return rc;
}

int sf__hf_load_pretok(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path,
		       bool *seen_byte_level)
{
	const char *type;
	char where[300];
	int rc;

	if (!obj || obj->type != SF_JSON_OBJECT)
		return sf__hf_refuse(l, path, "expected a pre-tokenizer object");
	type = sf__hf_type_of(l, obj);
	snprintf(where, sizeof(where), "%s.type", path);
	if (!type)
		return sf__hf_refuse(l, where, "missing");
	if (*seen_byte_level)
		return sf__hf_refuse(l, where,
				     "\"%s\" after ByteLevel not supported (it would see the "
				     "byte-level characters)",
				     type);
	if (!strcmp(type, "Sequence")) {
		static const char *const known[] = {"type", "pretokenizers", NULL};
		const struct sf_json_node *list = sf__json_tree_get(l->doc, obj, "pretokenizers");
		uint32_t i;

		rc = sf__hf_only_keys(l, obj, path, known);
		if (rc < 0)
			return rc;
		snprintf(where, sizeof(where), "%s.pretokenizers", path);
		if (!list || list->type != SF_JSON_ARRAY)
			return sf__hf_refuse(l, where, "expected a list");
		for (i = 0; i < list->len; i++) {
			snprintf(where, sizeof(where), "%s.pretokenizers[%u]", path, i);
			rc = sf__hf_load_pretok(l, sf__json_tree_child(l->doc, list, i), where,
						seen_byte_level);
			if (rc < 0)
				return rc;
		}
		return 0;
	}
	if (!strcmp(type, "Split"))
		return load_split(l, obj, path);
	if (!strcmp(type, "Digits")) {
		static const char *const known[] = {"type", "individual_digits", NULL};
		struct sf_hf_stage stage = {.kind = SF_HF_STAGE_DIGITS};

		rc = sf__hf_only_keys(l, obj, path, known);
		if (rc == 0)
			rc = sf__hf_get_bool(l, obj, "individual_digits", path, SF_HF_NEEDED,
					     &stage.individual);
		return rc < 0 ? rc : add_stage(l, path, &stage);
	}
	if (!strcmp(type, "ByteLevel")) {
		static const char *const known[] = {"type", "add_prefix_space", "trim_offsets",
						    "use_regex", NULL};
		bool prefix, trim, use_regex;

		rc = sf__hf_only_keys(l, obj, path, known);
		if (rc == 0)
			rc = sf__hf_get_bool(l, obj, "add_prefix_space", path, SF_HF_NEEDED,
					     &prefix);
		/* trim_offsets moves offsets only; use_regex is true when absent (files older
		 * than tokenizers 0.14). */
		if (rc == 0)
			rc = sf__hf_get_bool(l, obj, "trim_offsets", path, SF_HF_NEEDED, &trim);
		if (rc == 0)
			rc = sf__hf_get_bool(l, obj, "use_regex", path, true, &use_regex);
		if (rc < 0)
			return rc;
		*seen_byte_level = true;
		if (prefix) {
			struct sf_hf_stage stage = {.kind = SF_HF_STAGE_PREFIX};

			rc = add_stage(l, path, &stage);
			if (rc < 0)
				return rc;
			l->hf->max_growth = 1;
		}
		if (use_regex) {
			struct sf_hf_stage stage = {.kind = SF_HF_STAGE_PRESET,
						    .preset = sf__pretok_preset(gpt2_pattern),
						    .behavior = SF_HF_ISOLATED};

			return add_stage(l, path, &stage);
		}
		return 0;
	}
	return sf__hf_refuse(l, where, "\"%s\" not supported", type);
}
