/*
 * The strict JSON reader of producer/json.h: a recursive-descent validator with a depth
 * limit, which unescapes the one string member it is asked for. Strings are checked to be
 * valid UTF-8, \u escapes decoded with surrogate pairs joined (a lone surrogate is an
 * error, as it cannot be written in UTF-8).
 */
#include <string.h>

#include "producer/json.h"

#define MAX_DEPTH 256

struct parser {
	const unsigned char *s;
	size_t n, i;
	int depth;
	const char *what;
};

static int fail(struct parser *p, const char *what)
{
	if (!p->what)
		p->what = what;
	return -1;
}

static void skip_ws(struct parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
			       p->s[p->i] == '\r'))
		p->i++;
}

static int hex4(struct parser *p, unsigned *ret)
{
	unsigned v = 0;

	if (p->n - p->i < 4)
		return fail(p, "truncated \\u escape");
	for (int k = 0; k < 4; k++) {
		unsigned char c = p->s[p->i + k];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return fail(p, "bad hex digit in \\u escape");
	}
	p->i += 4;
	*ret = v;
	return 0;
}

static size_t put_utf8(char *out, unsigned cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[k] & 0x3f);
	}
	/* Overlong forms, surrogates and code points past U+10FFFF are not UTF-8. */
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/* Parse a string at p->i (the opening quote); unescape into `out` when not NULL. */
static int parse_string(struct parser *p, char *out, size_t *ret_len)
{
	size_t o = 0;

	p->i++;
	for (;;) {
		unsigned char c;

		if (p->i >= p->n)
			return fail(p, "unterminated string");
		c = p->s[p->i];
		if (c == '"') {
			p->i++;
			if (ret_len)
				*ret_len = o;
			return 0;
		}
		if (c < 0x20)
			return fail(p, "control character in string");
		if (c == '\\') {
			unsigned cp;

			if (++p->i >= p->n)
				return fail(p, "unterminated escape");
			c = p->s[p->i++];
			switch (c) {
			case '"':
			case '\\':
			case '/':
				cp = c;
				break;
			case 'b':
				cp = '\b';
				break;
			case 'f':
				cp = '\f';
				break;
			case 'n':
				cp = '\n';
				break;
			case 'r':
				cp = '\r';
				break;
			case 't':
				cp = '\t';
				break;
			case 'u':
				if (hex4(p, &cp) < 0)
					return -1;
				if (cp >= 0xdc00 && cp <= 0xdfff)
					return fail(p, "lone low surrogate");
				if (cp >= 0xd800 && cp <= 0xdbff) {
					unsigned lo;

					if (p->n - p->i < 2 || p->s[p->i] != '\\' ||
					    p->s[p->i + 1] != 'u')
						return fail(p,
							    "high surrogate without low surrogate");
					p->i += 2;
					if (hex4(p, &lo) < 0)
						return -1;
					if (lo < 0xdc00 || lo > 0xdfff)
						return fail(p,
							    "high surrogate without low surrogate");
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				}
				break;
			default:
				p->i--;
				return fail(p, "invalid escape");
			}
			if (out)
				o += put_utf8(out + o, cp);
			continue;
		}
		{
			size_t len = utf8_len(p->s + p->i, p->n - p->i);

			if (!len)
				return fail(p, "invalid UTF-8 in string");
			if (out)
				memcpy(out + o, p->s + p->i, len);
			o += len;
			p->i += len;
		}
	}
}

static int is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int parse_number(struct parser *p)
{
	if (p->s[p->i] == '-')
		p->i++;
	if (p->i >= p->n || !is_digit(p->s[p->i]))
		return fail(p, "invalid number");
	if (p->s[p->i] == '0')
		p->i++;
	else
		while (p->i < p->n && is_digit(p->s[p->i]))
			p->i++;
	if (p->i < p->n && p->s[p->i] == '.') {
		p->i++;
		if (p->i >= p->n || !is_digit(p->s[p->i]))
			return fail(p, "invalid number");
		while (p->i < p->n && is_digit(p->s[p->i]))
			p->i++;
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || !is_digit(p->s[p->i]))
			return fail(p, "invalid number");
		while (p->i < p->n && is_digit(p->s[p->i]))
			p->i++;
	}
	return 0;
}

static int parse_literal(struct parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->n - p->i < n || memcmp(p->s + p->i, word, n))
		return fail(p, "invalid literal");
	p->i += n;
	return 0;
}

static int parse_value(struct parser *p);

static int parse_array(struct parser *p)
{
	p->i++;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == ']') {
		p->i++;
		return 0;
	}
	for (;;) {
		if (parse_value(p) < 0)
			return -1;
		skip_ws(p);
		if (p->i >= p->n)
			return fail(p, "unterminated array");
		if (p->s[p->i] == ']') {
			p->i++;
			return 0;
		}
		if (p->s[p->i] != ',')
			return fail(p, "expected ',' or ']'");
		p->i++;
	}
}

/* Parse an object; at depth 1 look for member `field` and unescape it into `out`. */
static int parse_object(struct parser *p, const char *field, char *out, size_t *ret_len,
			int *ret_found)
{
	size_t flen = field ? strlen(field) : 0;

	p->i++;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == '}') {
		p->i++;
		return 0;
	}
	for (;;) {
		size_t key_at, key_len;
		int match;

		skip_ws(p);
		if (p->i >= p->n || p->s[p->i] != '"')
			return fail(p, "expected a member name");
		key_at = p->i + 1;
		if (parse_string(p, NULL, &key_len) < 0)
			return -1;
		/* A name with escapes never matches: configured field names are plain. */
		match = field && key_len == flen && p->i - 1 - key_at == flen &&
			!memcmp(p->s + key_at, field, flen);
		skip_ws(p);
		if (p->i >= p->n || p->s[p->i] != ':')
			return fail(p, "expected ':'");
		p->i++;
		skip_ws(p);
		if (match) {
			if (p->i < p->n && p->s[p->i] == '"') {
				if (parse_string(p, out, ret_len) < 0)
					return -1;
				*ret_found = 1;
			} else {
				if (parse_value(p) < 0)
					return -1;
				*ret_found = 2;
			}
		} else if (parse_value(p) < 0) {
			return -1;
		}
		skip_ws(p);
		if (p->i >= p->n)
			return fail(p, "unterminated object");
		if (p->s[p->i] == '}') {
			p->i++;
			return 0;
		}
		if (p->s[p->i] != ',')
			return fail(p, "expected ',' or '}'");
		p->i++;
	}
}

static int parse_value(struct parser *p)
{
	int r;

	skip_ws(p);
	if (p->i >= p->n)
		return fail(p, "expected a value");
	if (++p->depth > MAX_DEPTH)
		return fail(p, "nested too deeply");
	switch (p->s[p->i]) {
	case '{':
		r = parse_object(p, NULL, NULL, NULL, NULL);
		break;
	case '[':
		r = parse_array(p);
		break;
	case '"':
		r = parse_string(p, NULL, NULL);
		break;
	case 't':
		r = parse_literal(p, "true");
		break;
	case 'f':
		r = parse_literal(p, "false");
		break;
	case 'n':
		r = parse_literal(p, "null");
		break;
	default:
		r = parse_number(p);
	}
	p->depth--;
	return r;
}

int sf__json_field(const char *text, size_t len, const char *field, char *out, size_t *ret_len,
		   size_t *ret_error_at, const char **ret_what)
{
	struct parser p = {.s = (const unsigned char *)text, .n = len};
	int found = 0, is_object, r;
	size_t got = 0;

	skip_ws(&p);
	is_object = p.i < p.n && p.s[p.i] == '{';
	if (is_object) {
		p.depth = 1;
		r = parse_object(&p, field, out, &got, &found);
	} else {
		r = parse_value(&p);
	}
	if (r == 0) {
		skip_ws(&p);
		if (p.i != p.n)
			r = fail(&p, "trailing characters after the value");
	}
	if (r < 0) {
		*ret_error_at = p.i;
		*ret_what = p.what;
		return SF_JSON_INVALID;
	}
	if (!is_object)
		return SF_JSON_NOT_OBJECT;
	if (!found)
		return SF_JSON_NO_FIELD;
	if (found == 2)
		return SF_JSON_NOT_STRING;
	*ret_len = got;
	return SF_JSON_OK;
}
