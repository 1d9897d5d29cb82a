/*
 * The strict JSON reader of producer/json.h: a recursive-descent validator with a depth
 * limit, which unescapes the one string member it is asked for, and a tree builder on the
 * same scanners. Strings are checked to be valid UTF-8, \u escapes decoded with surrogate
 * pairs joined (a lone surrogate is an error, as it cannot be written in UTF-8).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
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
			/* Without `out`, still count: the length sizes the second pass. */
			if (out)
				o += put_utf8(out + o, cp);
			else
				o += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
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

/*
 * Whether the name at `key_at`, written with escapes, decodes to `field` (of `flen`
 * bytes, its decoded length): Python's json.dumps escapes every non-ASCII character of
 * a key. Names of more than 256 bytes are compared only as written.
 */
static bool escaped_name_is(const struct parser *p, size_t key_at, const char *field, size_t flen)
{
	struct parser q = *p;
	char name[256];

	if (flen > sizeof(name))
		return false;
	q.i = key_at - 1;
	return parse_string(&q, name, NULL) == 0 && !memcmp(name, field, flen);
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
		match = field && key_len == flen &&
			(p->i - 1 - key_at == flen ? !memcmp(p->s + key_at, field, flen)
						   : escaped_name_is(p, key_at, field, flen));
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

/*
 * The tree: nodes in one array, an array's or object's children consecutive in it; all
 * strings, member names and number texts in one byte array, each followed by a NUL.
 * While a container is parsed its children collect on a stack (a child's own children
 * go to the node array first), and are copied to the node array when it closes, so that
 * they end up consecutive.
 */
struct sf_json_doc {
	struct sf_json_node *nodes;
	size_t n_nodes, cap_nodes;
	struct sf_json_node *stack;
	size_t n_stack, cap_stack;
	char *strings;
	size_t n_strings, cap_strings;
	struct sf_json_node root;
	int oom;
};

/*
 * Grow the array whose pointer is at `bufp` (any object pointer type, copied in and out
 * by memcpy) to hold `need` elements of `size` bytes. Returns 0, or -1 when out of memory
 * (the array is then unchanged).
 */
static int reserve(void *bufp, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 1024;
	void *buf, *grown;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	memcpy(&buf, bufp, sizeof(buf));
	grown = realloc(buf, c * size);
	if (!grown)
		return -1;
	memcpy(bufp, &grown, sizeof(grown));
	*cap = c;
	return 0;
}

#define RESERVE(d, field, cap, need)                                                               \
	(reserve(&(d)->field, &(d)->cap, (need), sizeof(*(d)->field)) == 0)

/* Copy the string at p->i (its opening quote) into the document: its offset and length. */
static int tree_string(struct parser *p, struct sf_json_doc *d, uint32_t *ret_off,
		       uint32_t *ret_len)
{
	size_t start = p->i, len;

	if (parse_string(p, NULL, &len) < 0)
		return -1;
	if (!RESERVE(d, strings, cap_strings, d->n_strings + len + 1)) {
		d->oom = 1;
		return fail(p, "out of memory");
	}
	p->i = start;
	parse_string(p, d->strings + d->n_strings, &len);
	d->strings[d->n_strings + len] = '\0';
	*ret_off = (uint32_t)d->n_strings;
	*ret_len = (uint32_t)len;
	d->n_strings += len + 1;
	return 0;
}

static int tree_value(struct parser *p, struct sf_json_doc *d, struct sf_json_node *out);

/* Push a parsed child onto the stack of the container being parsed. */
static int push_child(struct parser *p, struct sf_json_doc *d, const struct sf_json_node *child)
{
	if (!RESERVE(d, stack, cap_stack, d->n_stack + 1)) {
		d->oom = 1;
		return fail(p, "out of memory");
	}
	d->stack[d->n_stack++] = *child;
	return 0;
}

/* Move the `count` children on top of the stack to the node array. */
static int close_container(struct parser *p, struct sf_json_doc *d, size_t count,
			   struct sf_json_node *out)
{
	if (!RESERVE(d, nodes, cap_nodes, d->n_nodes + count)) {
		d->oom = 1;
		return fail(p, "out of memory");
	}
	/* An empty container may come before anything was allocated: no memcpy of NULL. */
	if (count)
		memcpy(d->nodes + d->n_nodes, d->stack + d->n_stack - count,
		       count * sizeof(*d->nodes));
	out->off = (uint32_t)d->n_nodes;
	out->len = (uint32_t)count;
	d->n_nodes += count;
	d->n_stack -= count;
	return 0;
}

static int tree_array(struct parser *p, struct sf_json_doc *d, struct sf_json_node *out)
{
	size_t count = 0;

	p->i++;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == ']') {
		p->i++;
		return close_container(p, d, 0, out);
	}
	for (;;) {
		struct sf_json_node child = {0};

		if (tree_value(p, d, &child) < 0 || push_child(p, d, &child) < 0)
			return -1;
		count++;
		skip_ws(p);
		if (p->i >= p->n)
			return fail(p, "unterminated array");
		if (p->s[p->i] == ']') {
			p->i++;
			return close_container(p, d, count, out);
		}
		if (p->s[p->i] != ',')
			return fail(p, "expected ',' or ']'");
		p->i++;
	}
}

static int tree_object(struct parser *p, struct sf_json_doc *d, struct sf_json_node *out)
{
	size_t count = 0;

	p->i++;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == '}') {
		p->i++;
		return close_container(p, d, 0, out);
	}
	for (;;) {
		struct sf_json_node child = {0};
		uint32_t key, key_len;

		skip_ws(p);
		if (p->i >= p->n || p->s[p->i] != '"')
			return fail(p, "expected a member name");
		if (tree_string(p, d, &key, &key_len) < 0)
			return -1;
		skip_ws(p);
		if (p->i >= p->n || p->s[p->i] != ':')
			return fail(p, "expected ':'");
		p->i++;
		if (tree_value(p, d, &child) < 0)
			return -1;
		child.key = key;
		child.key_len = key_len;
		if (push_child(p, d, &child) < 0)
			return -1;
		count++;
		skip_ws(p);
		if (p->i >= p->n)
			return fail(p, "unterminated object");
		if (p->s[p->i] == '}') {
			p->i++;
			return close_container(p, d, count, out);
		}
		if (p->s[p->i] != ',')
			return fail(p, "expected ',' or '}'");
		p->i++;
	}
}

static int tree_value(struct parser *p, struct sf_json_doc *d, struct sf_json_node *out)
{
	size_t start;
	int r;

	skip_ws(p);
	if (p->i >= p->n)
		return fail(p, "expected a value");
	if (++p->depth > MAX_DEPTH)
		return fail(p, "nested too deeply");
	out->at = (uint32_t)p->i;
	switch (p->s[p->i]) {
	case '{':
		out->type = SF_JSON_OBJECT;
		r = tree_object(p, d, out);
		break;
	case '[':
		out->type = SF_JSON_ARRAY;
		r = tree_array(p, d, out);
		break;
	case '"':
		out->type = SF_JSON_STRING;
		r = tree_string(p, d, &out->off, &out->len);
		break;
	case 't':
		out->type = SF_JSON_TRUE;
		r = parse_literal(p, "true");
		break;
	case 'f':
		out->type = SF_JSON_FALSE;
		r = parse_literal(p, "false");
		break;
	case 'n':
		out->type = SF_JSON_NULL;
		r = parse_literal(p, "null");
		break;
	default:
		out->type = SF_JSON_NUMBER;
		start = p->i;
		r = parse_number(p);
		if (r == 0) {
			size_t len = p->i - start;

			if (!RESERVE(d, strings, cap_strings, d->n_strings + len + 1)) {
				d->oom = 1;
				r = fail(p, "out of memory");
				break;
			}
			memcpy(d->strings + d->n_strings, p->s + start, len);
			d->strings[d->n_strings + len] = '\0';
			out->off = (uint32_t)d->n_strings;
			out->len = (uint32_t)len;
			d->n_strings += len + 1;
		}
	}
	p->depth--;
	return r;
}

int sf__json_tree_parse(const char *text, size_t len, struct sf_json_doc **ret_doc,
			size_t *ret_error_at, const char **ret_what)
{
	struct parser p = {.s = (const unsigned char *)text, .n = len};
	struct sf_json_doc *d;
	int r;

	if (len >= (1u << 31)) {
		*ret_error_at = 0;
		*ret_what = "document larger than 2 GiB";
		return SF_JSON_INVALID;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	r = tree_value(&p, d, &d->root);
	if (r == 0) {
		skip_ws(&p);
		if (p.i != p.n)
			r = fail(&p, "trailing characters after the value");
	}
	free(d->stack);
	d->stack = NULL;
	if (r < 0) {
		int oom = d->oom;

		sf__json_tree_free(d);
		if (oom)
			return -ENOMEM;
		*ret_error_at = p.i;
		*ret_what = p.what;
		return SF_JSON_INVALID;
	}
	*ret_doc = d;
	return SF_JSON_OK;
}

void sf__json_tree_free(struct sf_json_doc *doc)
{
	if (!doc)
		return;
	free(doc->nodes);
	free(doc->stack);
	free(doc->strings);
	free(doc);
}

const struct sf_json_node *sf__json_tree_root(const struct sf_json_doc *doc)
{
	return &doc->root;
}

const struct sf_json_node *sf__json_tree_child(const struct sf_json_doc *doc,
					       const struct sf_json_node *node, uint32_t i)
{
	return &doc->nodes[node->off + i];
}

const struct sf_json_node *sf__json_tree_get(const struct sf_json_doc *doc,
					     const struct sf_json_node *node, const char *name)
{
	size_t len = strlen(name);
	uint32_t i;

	if (node->type != SF_JSON_OBJECT)
		return NULL;
	for (i = node->len; i-- > 0;) {
		const struct sf_json_node *m = &doc->nodes[node->off + i];

		if (m->key_len == len && !memcmp(doc->strings + m->key, name, len))
			return m;
	}
	return NULL;
}

const char *sf__json_tree_str(const struct sf_json_doc *doc, const struct sf_json_node *node)
{
	if (node->type != SF_JSON_STRING && node->type != SF_JSON_NUMBER)
		return "";
	return doc->strings + node->off;
}

const char *sf__json_tree_key(const struct sf_json_doc *doc, const struct sf_json_node *node)
{
	return doc->strings + node->key;
}
