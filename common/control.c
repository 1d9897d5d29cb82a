/*
 * Control messages: a bounded, strict JSON reader (RFC 8259 values into a flat token
 * array, depth- and count-limited, no allocation), the validation of requests against
 * the versioned request schema, and the small writers the supervisor and the clients
 * use. Everything that arrives from a socket goes through sf__json_parse() first, so a
 * malformed message is an error return, never a crash.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/control.h"

static const char *const op_names[] = {
	[SF_CTL_HELLO] = "hello", [SF_CTL_STATUS] = "status", [SF_CTL_STATS] = "stats",
	[SF_CTL_PAUSE] = "pause", [SF_CTL_RESUME] = "resume", [SF_CTL_SEEK] = "seek",
	[SF_CTL_STOP] = "stop",
};

const char *sf__ctl_op_name(uint32_t op)
{
	if (op == 0 || op >= sizeof(op_names) / sizeof(op_names[0]))
		return NULL;
	return op_names[op];
}

struct reader {
	const char *buf;
	size_t len, pos;
	struct sf_json_token *tok;
	uint32_t max, n;
	struct sf_err *e;
};

static int bad(struct reader *R, const char *what)
{
	return sf__err(R->e, SF_E_PROTOCOL, "malformed JSON at byte %zu: %s", R->pos, what);
}

static void skip_ws(struct reader *R)
{
	while (R->pos < R->len && (R->buf[R->pos] == ' ' || R->buf[R->pos] == '\t' ||
				   R->buf[R->pos] == '\n' || R->buf[R->pos] == '\r'))
		R->pos++;
}

static int hex4(struct reader *R, uint32_t *ret)
{
	uint32_t v = 0;

	if (R->len - R->pos < 4)
		return bad(R, "short \\u escape");
	for (int i = 0; i < 4; i++) {
		char c = R->buf[R->pos++];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return bad(R, "bad hex digit in \\u escape");
	}
	*ret = v;
	return 0;
}

/* The length of the UTF-8 sequence at p (1..4), or 0 when it is not valid UTF-8. */
static size_t utf8_len(const unsigned char *p, size_t avail)
{
	uint32_t cp;
	size_t n;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1fu;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, cp = p[0] & 0x0fu;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07u;
	else
		return 0;
	if (avail < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3fu);
	}
	/* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static int scan_string(struct reader *R)
{
	R->pos++; /* the opening quote */
	while (R->pos < R->len) {
		unsigned char c = (unsigned char)R->buf[R->pos];

		if (c == '"') {
			R->pos++;
			return 0;
		}
		if (c < 0x20)
			return bad(R, "control character in string");
		if (c == '\\') {
			uint32_t u, lo;

			if (++R->pos >= R->len)
				return bad(R, "unterminated escape");
			c = (unsigned char)R->buf[R->pos++];
			if (strchr("\"\\/bfnrt", c) && c)
				continue;
			if (c != 'u')
				return bad(R, "unknown escape");
			if (hex4(R, &u) < 0)
				return SF_E_PROTOCOL;
			if (u >= 0xdc00 && u <= 0xdfff)
				return bad(R, "lone low surrogate");
			if (u >= 0xd800 && u <= 0xdbff) {
				if (R->len - R->pos < 2 || R->buf[R->pos] != '\\' ||
				    R->buf[R->pos + 1] != 'u')
					return bad(R, "high surrogate without its pair");
				R->pos += 2;
				if (hex4(R, &lo) < 0)
					return SF_E_PROTOCOL;
				if (lo < 0xdc00 || lo > 0xdfff)
					return bad(R, "high surrogate without its pair");
			}
			continue;
		}
		{
			size_t n =
				utf8_len((const unsigned char *)R->buf + R->pos, R->len - R->pos);

			if (!n)
				return bad(R, "invalid UTF-8 in string");
			R->pos += n;
		}
	}
	return bad(R, "unterminated string");
}

static int scan_number(struct reader *R)
{
	size_t start = R->pos;

	if (R->buf[R->pos] == '-')
		R->pos++;
	if (R->pos >= R->len)
		return bad(R, "bad number");
	if (R->buf[R->pos] == '0')
		R->pos++;
	else if (R->buf[R->pos] >= '1' && R->buf[R->pos] <= '9')
		while (R->pos < R->len && R->buf[R->pos] >= '0' && R->buf[R->pos] <= '9')
			R->pos++;
	else
		return bad(R, "bad number");
	if (R->pos < R->len && R->buf[R->pos] == '.') {
		size_t d = ++R->pos;

		while (R->pos < R->len && R->buf[R->pos] >= '0' && R->buf[R->pos] <= '9')
			R->pos++;
		if (R->pos == d)
			return bad(R, "bad fraction");
	}
	if (R->pos < R->len && (R->buf[R->pos] == 'e' || R->buf[R->pos] == 'E')) {
		size_t d;

		R->pos++;
		if (R->pos < R->len && (R->buf[R->pos] == '+' || R->buf[R->pos] == '-'))
			R->pos++;
		d = R->pos;
		while (R->pos < R->len && R->buf[R->pos] >= '0' && R->buf[R->pos] <= '9')
			R->pos++;
		if (R->pos == d)
			return bad(R, "bad exponent");
	}
	return R->pos - start > 64 ? bad(R, "number too long") : 0;
}

static int parse_value(struct reader *R, uint32_t depth);

static int new_token(struct reader *R, uint32_t type, int *ret)
{
	if (R->n >= R->max)
		return sf__err(R->e, SF_E_PROTOCOL, "message has more than %u values", R->max);
	R->tok[R->n] = (struct sf_json_token){type, (uint32_t)R->pos, (uint32_t)R->pos, 0, 0};
	*ret = (int)R->n++;
	return 0;
}

static int parse_container(struct reader *R, uint32_t depth, int obj)
{
	char close = obj ? '}' : ']';
	int t = 0, r;

	if (depth >= SF_JSON_MAX_DEPTH)
		return bad(R, "nested too deeply");
	r = new_token(R, obj ? SF_JSON_OBJECT : SF_JSON_ARRAY, &t);
	if (r < 0)
		return r;
	R->pos++;
	skip_ws(R);
	if (R->pos < R->len && R->buf[R->pos] == close) {
		R->pos++;
		goto done;
	}
	for (;;) {
		if (obj) {
			skip_ws(R);
			if (R->pos >= R->len || R->buf[R->pos] != '"')
				return bad(R, "expected a string key");
			r = parse_value(R, depth + 1);
			if (r < 0)
				return r;
			skip_ws(R);
			if (R->pos >= R->len || R->buf[R->pos] != ':')
				return bad(R, "expected ':'");
			R->pos++;
		}
		r = parse_value(R, depth + 1);
		if (r < 0)
			return r;
		R->tok[t].size++;
		skip_ws(R);
		if (R->pos < R->len && R->buf[R->pos] == ',') {
			R->pos++;
			continue;
		}
		if (R->pos < R->len && R->buf[R->pos] == close) {
			R->pos++;
			break;
		}
		return bad(R, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
done:
	R->tok[t].end = (uint32_t)R->pos;
	R->tok[t].next = R->n;
	return 0;
}

static int parse_value(struct reader *R, uint32_t depth)
{
	static const struct {
		const char *word;
		uint32_t type;
	} words[] = {{"true", SF_JSON_TRUE}, {"false", SF_JSON_FALSE}, {"null", SF_JSON_NULL}};
	char c;
	int t = 0, r;

	skip_ws(R);
	if (R->pos >= R->len)
		return bad(R, "unexpected end");
	c = R->buf[R->pos];
	if (c == '{' || c == '[')
		return parse_container(R, depth, c == '{');
	if (c == '"') {
		r = new_token(R, SF_JSON_STRING, &t);
		if (r == 0)
			r = scan_string(R);
		if (r < 0)
			return r;
		R->tok[t].start++;
		R->tok[t].end = (uint32_t)R->pos - 1;
		R->tok[t].next = R->n;
		return 0;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		r = new_token(R, SF_JSON_NUMBER, &t);
		if (r == 0)
			r = scan_number(R);
		if (r < 0)
			return r;
		R->tok[t].end = (uint32_t)R->pos;
		R->tok[t].next = R->n;
		return 0;
	}
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		size_t n = strlen(words[i].word);

		if (R->len - R->pos >= n && !memcmp(R->buf + R->pos, words[i].word, n)) {
			r = new_token(R, words[i].type, &t);
			if (r < 0)
				return r;
			R->pos += n;
			R->tok[t].end = (uint32_t)R->pos;
			R->tok[t].next = R->n;
			return 0;
		}
	}
	return bad(R, "unexpected character");
}

int sf__json_parse(const char *buf, size_t len, struct sf_json_token *tok, uint32_t max,
		   struct sf_err *e)
{
	struct reader R = {buf, len, 0, tok, max, 0, e};
	int r;

	if (len > UINT32_MAX - 1)
		return sf__err(e, SF_E_PROTOCOL, "message too large");
	r = parse_value(&R, 0);
	if (r < 0)
		return r;
	skip_ws(&R);
	if (R.pos != len)
		return bad(&R, "trailing bytes after the value");
	return (int)R.n;
}

static int key_is(const char *buf, const struct sf_json_token *k, const char *key)
{
	size_t n = strlen(key);

	return k->type == SF_JSON_STRING && k->end - k->start == n &&
	       !memcmp(buf + k->start, key, n);
}

int sf__json_get(const char *buf, const struct sf_json_token *tok, int obj, const char *key)
{
	uint32_t t;

	if (obj < 0 || tok[obj].type != SF_JSON_OBJECT)
		return -1;
	t = (uint32_t)obj + 1;
	for (uint32_t i = 0; i < tok[obj].size; i++) {
		uint32_t v = t + 1;

		if (key_is(buf, &tok[t], key))
			return (int)v;
		t = tok[v].next;
	}
	return -1;
}

int sf__json_at(const struct sf_json_token *tok, int arr, uint32_t i)
{
	uint32_t t;

	if (arr < 0 || tok[arr].type != SF_JSON_ARRAY || i >= tok[arr].size)
		return -1;
	t = (uint32_t)arr + 1;
	while (i--)
		t = tok[t].next;
	return (int)t;
}

int sf__json_u64(const char *buf, const struct sf_json_token *tok, int t, uint64_t *ret)
{
	uint64_t v = 0;

	if (t < 0 || tok[t].type != SF_JSON_NUMBER)
		return SF_E_PROTOCOL;
	for (uint32_t i = tok[t].start; i < tok[t].end; i++) {
		unsigned d = (unsigned)(buf[i] - '0');

		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return SF_E_PROTOCOL;
		v = v * 10 + d;
	}
	*ret = v;
	return 0;
}

double sf__json_double(const char *buf, const struct sf_json_token *tok, int t)
{
	char num[72];
	uint32_t n;

	if (t < 0 || tok[t].type != SF_JSON_NUMBER)
		return 0.0;
	n = tok[t].end - tok[t].start;
	if (n >= sizeof(num))
		return 0.0;
	memcpy(num, buf + tok[t].start, n);
	num[n] = 0;
	return strtod(num, NULL);
}

int sf__json_string(const char *buf, const struct sf_json_token *tok, int t, char *out, size_t len)
{
	size_t o = 0;

	if (t < 0 || tok[t].type != SF_JSON_STRING || !len)
		return SF_E_PROTOCOL;
	for (uint32_t i = tok[t].start; i < tok[t].end && o + 1 < len; i++) {
		char c = buf[i];

		if (c == '\\') {
			c = buf[++i];
			switch (c) {
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u': {
				unsigned v = 0;

				/* The parser validated four hex digits here (read by hand:
				 * sscanf() would take the strlen() of a message without NUL). */
				for (int d = 0; d < 4; d++) {
					char h = buf[++i];

					v = v * 16 +
					    (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
				}
				/* A NUL would cut the string: "stop\u0000x" read as stop. */
				if (!v)
					return SF_E_PROTOCOL;
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			default:
				break;
			}
		}
		out[o++] = c;
	}
	out[o] = 0;
	return (int)o;
}

void sf__json_escape(char *buf, size_t len, size_t *pos, const char *s)
{
	size_t p = *pos;

#define PUT(ch)                                                                                    \
	do {                                                                                       \
		if (p + 1 < len)                                                                   \
			buf[p] = (ch);                                                             \
		p++;                                                                               \
	} while (0)
	PUT('"');
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\') {
			PUT('\\');
			PUT((char)*c);
		} else if (*c < 0x20) {
			char u[8];

			snprintf(u, sizeof(u), "\\u%04x", *c);
			for (int i = 0; u[i]; i++)
				PUT(u[i]);
		} else {
			PUT((char)*c);
		}
	}
	PUT('"');
#undef PUT
	if (len)
		buf[p < len ? p : len - 1] = 0;
	*pos = p;
}

int sf__ctl_parse_request(const char *buf, size_t len, struct sf_ctl_request *ret, struct sf_err *e)
{
	struct sf_json_token tok[32];
	struct sf_ctl_request req = {0};
	int have_v = 0, have_rank = 0, have_step = 0, n;
	uint32_t t;

	ret->has_id = 0;
	if (len > SF_CTL_MAX_REQUEST)
		return sf__err(e, SF_E_PROTOCOL, "request of %zu bytes exceeds the %u-byte limit",
			       len, SF_CTL_MAX_REQUEST);
	n = sf__json_parse(buf, len, tok, sizeof(tok) / sizeof(tok[0]), e);
	if (n < 0)
		return n;
	if (tok[0].type != SF_JSON_OBJECT)
		return sf__err(e, SF_E_PROTOCOL, "a request must be a JSON object");
	/* The id first, for the reply to a request refused before its id is reached. */
	t = 1;
	for (uint32_t i = 0; i < tok[0].size; i++, t = tok[t + 1].next)
		if (key_is(buf, &tok[t], "id") &&
		    sf__json_u64(buf, tok, (int)t + 1, &ret->id) == 0) {
			ret->has_id = 1;
			break;
		}
	t = 1;
	for (uint32_t i = 0; i < tok[0].size; i++) {
		const struct sf_json_token *k = &tok[t];
		int v = (int)t + 1;
		uint64_t u;

		for (uint32_t j = 1; j < t; j = tok[j + 1].next)
			if (tok[j].end - tok[j].start == k->end - k->start &&
			    !memcmp(buf + tok[j].start, buf + k->start, k->end - k->start))
				return sf__err(e, SF_E_PROTOCOL, "duplicate key '%.*s'",
					       (int)(k->end - k->start), buf + k->start);
		if (key_is(buf, k, "v")) {
			if (sf__json_u64(buf, tok, v, &u) < 0 || u != SF_CTL_VERSION)
				return sf__err(e, SF_E_PROTOCOL,
					       "unsupported protocol version: \"v\" must be %u "
					       "(this job runs shmfeed %s: control it with the "
					       "shmfeed that started it)",
					       SF_CTL_VERSION, sf_version());
			have_v = 1;
		} else if (key_is(buf, k, "op")) {
			char op[16];

			if (tok[v].type != SF_JSON_STRING ||
			    tok[v].end - tok[v].start >= sizeof(op))
				return sf__err(e, SF_E_PROTOCOL, "\"op\" must be a short string");
			if (sf__json_string(buf, tok, v, op, sizeof(op)) < 0)
				return sf__err(e, SF_E_PROTOCOL, "\"op\" must be a short string");
			for (uint32_t o = 1; sf__ctl_op_name(o); o++)
				if (!strcmp(op, sf__ctl_op_name(o)))
					req.op = o;
			if (!req.op)
				return sf__err(e, SF_E_PROTOCOL,
					       "unknown op '%s'; expected hello, status, stats, "
					       "pause, resume, seek or stop",
					       op);
		} else if (key_is(buf, k, "id")) {
			if (sf__json_u64(buf, tok, v, &req.id) < 0)
				return sf__err(e, SF_E_PROTOCOL,
					       "\"id\" must be an unsigned integer");
			req.has_id = 1;
		} else if (key_is(buf, k, "rank")) {
			if (sf__json_u64(buf, tok, v, &u) < 0 || u >= SF_MAX_RANKS)
				return sf__err(e, SF_E_PROTOCOL,
					       "\"rank\" must be an unsigned integer below %u",
					       SF_MAX_RANKS);
			req.rank = (uint32_t)u;
			have_rank = 1;
		} else if (key_is(buf, k, "step")) {
			/* No geometry has steps beyond this one; the supervisor checks the
			 * job's own limit (sf__arena_step_limit()). */
			if (sf__json_u64(buf, tok, v, &req.step) < 0 || req.step >= SF_STEP_MAX)
				return sf__err(e, SF_E_PROTOCOL,
					       "\"step\" must be an unsigned integer below %llu",
					       (unsigned long long)SF_STEP_MAX);
			have_step = 1;
		} else {
			uint32_t cut = k->end - k->start > 32 ? 32 : k->end - k->start;

			/* Cut at a character's start: the reply stays UTF-8. */
			while (cut && cut < k->end - k->start && (buf[k->start + cut] & 0xc0) == 0x80)
				cut--;
			return sf__err(e, SF_E_PROTOCOL,
				       "unknown key '%.*s'; expected v, op, id, rank, step", (int)cut,
				       buf + k->start);
		}
		t = tok[v].next;
	}
	if (!have_v)
		return sf__err(e, SF_E_PROTOCOL, "missing \"v\" (protocol version %u)",
			       SF_CTL_VERSION);
	if (!req.op)
		return sf__err(e, SF_E_PROTOCOL, "missing \"op\"");
	if (req.op == SF_CTL_SEEK && !(have_rank && have_step))
		return sf__err(e, SF_E_PROTOCOL, "seek needs \"rank\" and \"step\"");
	if (req.op != SF_CTL_SEEK && (have_rank || have_step))
		return sf__err(e, SF_E_PROTOCOL, "\"rank\" and \"step\" belong to seek only");
	*ret = req;
	return 0;
}

int sf__ctl_format_request(const struct sf_ctl_request *req, char *buf, size_t len)
{
	const char *op = sf__ctl_op_name(req->op);
	int n;

	if (!op)
		return -EINVAL;
	n = snprintf(buf, len, "{\"v\":%u,\"op\":\"%s\"", SF_CTL_VERSION, op);
	if (req->has_id && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ",\"id\":%llu",
			      (unsigned long long)req->id);
	if (req->op == SF_CTL_SEEK && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ",\"rank\":%u,\"step\":%llu", req->rank,
			      (unsigned long long)req->step);
	if (n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, "}");
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}
