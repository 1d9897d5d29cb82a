/*
 * Mistral's tekken JSON: a strict JSON scanner that walks the document once, keeps what
 * the tokenizer needs (config.pattern, config.default_vocab_size,
 * config.default_num_special_tokens, config.version, vocab[].rank and .token_bytes,
 * special_tokens[].rank and .token_str) and skips the rest (images, audio settings), with
 * the rules of mistral-common's Tekkenizer: vocab entries in rank order from 0, the
 * vocabulary cut to default_vocab_size - default_num_special_tokens ranks.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_tekken.h"
#include "producer/tokenizer/unicode.h"

/* Nesting deeper than this is not a tekken file. */
#define MAX_DEPTH 64

struct scan {
	const char *s;
	size_t n, p;
	const char *path;
	struct sf_err *e;
	/* The vocabulary as .tiktoken text, and where each entry's line ends. */
	char *out;
	size_t out_len, out_cap;
	size_t *line_end;
	size_t n_lines, cap_lines;
};

static int bad(struct scan *sc, const char *what)
{
	return sf__err(sc->e, SF_E_TOKENIZER, "%s: byte %zu: %s", sc->path, sc->p, what);
}

static void ws(struct scan *sc)
{
	while (sc->p < sc->n && (sc->s[sc->p] == ' ' || sc->s[sc->p] == '\t' ||
				 sc->s[sc->p] == '\n' || sc->s[sc->p] == '\r'))
		sc->p++;
}

static bool eat(struct scan *sc, char c)
{
	ws(sc);
	if (sc->p < sc->n && sc->s[sc->p] == c) {
		sc->p++;
		return true;
	}
	return false;
}

static int hex4(struct scan *sc, uint32_t *ret)
{
	uint32_t v = 0;

	if (sc->n - sc->p < 4)
		return bad(sc, "truncated \\u escape");
	for (int i = 0; i < 4; i++) {
		char c = sc->s[sc->p++];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			v |= (uint32_t)((c | 0x20) - 'a' + 10);
		else
			return bad(sc, "bad \\u escape");
	}
	*ret = v;
	return 0;
}

/*
 * A string at sc->p, unescaped into a malloc'ed NUL-terminated copy (*ret, when not
 * NULL; else only checked). Unescaping never grows a string.
 */
static int string(struct scan *sc, char **ret)
{
	char *out = NULL;
	size_t o = 0, start;
	int rc;

	ws(sc);
	if (sc->p >= sc->n || sc->s[sc->p] != '"')
		return bad(sc, "expected a string");
	start = ++sc->p;
	while (sc->p < sc->n && sc->s[sc->p] != '"')
		sc->p += sc->s[sc->p] == '\\' ? 2 : 1;
	if (sc->p >= sc->n)
		return bad(sc, "unterminated string");
	if (ret) {
		out = malloc(sc->p - start + 1);
		if (!out)
			return sf__err(sc->e, -ENOMEM, "%s: out of memory", sc->path);
	}
	for (sc->p = start; sc->s[sc->p] != '"';) {
		unsigned char c = (unsigned char)sc->s[sc->p++];
		uint32_t cp, lo;

		if (c < 0x20) {
			rc = bad(sc, "control character in a string");
			goto fail;
		}
		if (c != '\\') {
			if (out)
				out[o++] = (char)c;
			continue;
		}
		c = (unsigned char)sc->s[sc->p++];
		switch (c) {
		case '"':
		case '\\':
		case '/':
			break;
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
		case 'u':
			rc = hex4(sc, &cp);
			if (rc < 0)
				goto fail;
			if (cp >= 0xd800 && cp < 0xdc00) {
				if (sc->n - sc->p < 6 || sc->s[sc->p] != '\\' ||
				    sc->s[sc->p + 1] != 'u') {
					rc = bad(sc, "unpaired surrogate");
					goto fail;
				}
				sc->p += 2;
				rc = hex4(sc, &lo);
				if (rc < 0)
					goto fail;
				if (lo < 0xdc00 || lo >= 0xe000) {
					rc = bad(sc, "unpaired surrogate");
					goto fail;
				}
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xdc00 && cp < 0xe000) {
				rc = bad(sc, "unpaired surrogate");
				goto fail;
			}
			if (out)
				o += sf__utf8_encode(cp, (uint8_t *)out + o);
			continue;
		default:
			rc = bad(sc, "bad escape");
			goto fail;
		}
		if (out)
			out[o++] = (char)c;
	}
	sc->p++;
	if (ret) {
		out[o] = '\0';
		*ret = out;
	}
	return 0;
fail:
	free(out);
	return rc;
}

static int number(struct scan *sc, uint64_t *ret)
{
	uint64_t v = 0;
	size_t start;

	ws(sc);
	start = sc->p;
	while (sc->p < sc->n && sc->s[sc->p] >= '0' && sc->s[sc->p] <= '9') {
		if (v > (UINT32_MAX - 9) / 10)
			return bad(sc, "number too large");
		v = v * 10 + (uint64_t)(sc->s[sc->p++] - '0');
	}
	if (sc->p == start || (sc->p - start > 1 && sc->s[start] == '0'))
		return bad(sc, "expected an unsigned integer");
	*ret = v;
	return 0;
}

static int skip_value(struct scan *sc, int depth)
{
	int rc;

	if (depth > MAX_DEPTH)
		return bad(sc, "nested too deeply");
	ws(sc);
	if (sc->p >= sc->n)
		return bad(sc, "expected a value");
	switch (sc->s[sc->p]) {
	case '"':
		return string(sc, NULL);
	case '{':
		sc->p++;
		if (eat(sc, '}'))
			return 0;
		do {
			if ((rc = string(sc, NULL)) < 0)
				return rc;
			if (!eat(sc, ':'))
				return bad(sc, "expected ':'");
			if ((rc = skip_value(sc, depth + 1)) < 0)
				return rc;
		} while (eat(sc, ','));
		return eat(sc, '}') ? 0 : bad(sc, "expected ',' or '}'");
	case '[':
		sc->p++;
		if (eat(sc, ']'))
			return 0;
		do {
			if ((rc = skip_value(sc, depth + 1)) < 0)
				return rc;
		} while (eat(sc, ','));
		return eat(sc, ']') ? 0 : bad(sc, "expected ',' or ']'");
	default:
		break;
	}
	/* A number or a literal: the characters that can make one. */
	{
		size_t start = sc->p;

		while (sc->p < sc->n && strchr("0123456789+-.eEtrufalsn", sc->s[sc->p]))
			sc->p++;
		if (sc->p == start)
			return bad(sc, "expected a value");
	}
	return 0;
}

/*
 * An object at sc->p: calls `member` for each key (with sc->p at its value), which must
 * consume the value.
 */
static int object(struct scan *sc, int (*member)(struct scan *sc, const char *key, void *arg),
		  void *arg)
{
	char *key;
	int rc;

	if (!eat(sc, '{'))
		return bad(sc, "expected an object");
	if (eat(sc, '}'))
		return 0;
	do {
		if ((rc = string(sc, &key)) < 0)
			return rc;
		if (!eat(sc, ':')) {
			free(key);
			return bad(sc, "expected ':'");
		}
		rc = member(sc, key, arg);
		free(key);
		if (rc < 0)
			return rc;
	} while (eat(sc, ','));
	return eat(sc, '}') ? 0 : bad(sc, "expected ',' or '}'");
}

static int array(struct scan *sc, int (*item)(struct scan *sc, void *arg), void *arg)
{
	int rc;

	if (!eat(sc, '['))
		return bad(sc, "expected an array");
	if (eat(sc, ']'))
		return 0;
	do {
		if ((rc = item(sc, arg)) < 0)
			return rc;
	} while (eat(sc, ','));
	return eat(sc, ']') ? 0 : bad(sc, "expected ',' or ']'");
}

struct entry {
	uint64_t rank;
	char *b64;  /* token_bytes */
	char *text; /* token_str of a special token */
	bool has_rank;
	bool special;
};

static int config_member(struct scan *sc, const char *key, void *arg)
{
	struct sf_tekken *tk = arg;
	uint64_t v;
	char *version;
	int rc;

	if (!strcmp(key, "pattern")) {
		free(tk->pattern);
		tk->pattern = NULL;
		return string(sc, &tk->pattern);
	}
	if (!strcmp(key, "default_vocab_size") || !strcmp(key, "default_num_special_tokens")) {
		rc = number(sc, &v);
		if (rc < 0)
			return rc;
		*(key[8] == 'v' ? &tk->vocab_size : &tk->n_specials) = (uint32_t)v;
		return 0;
	}
	if (!strcmp(key, "version")) {
		rc = string(sc, &version);
		if (rc < 0)
			return rc;
		tk->version = version[0] == 'v' ? (uint32_t)strtoul(version + 1, NULL, 10) : 0;
		rc = version[0] == 'v' && tk->version ? 0 : bad(sc, "config.version is not vN");
		free(version);
		return rc;
	}
	return skip_value(sc, 1);
}

static int entry_member(struct scan *sc, const char *key, void *arg)
{
	struct entry *en = arg;

	if (!strcmp(key, "rank")) {
		en->has_rank = true;
		return number(sc, &en->rank);
	}
	if (!strcmp(key, "token_bytes") && !en->special && !en->b64)
		return string(sc, &en->b64);
	if (!strcmp(key, "token_str") && en->special && !en->text)
		return string(sc, &en->text);
	return skip_value(sc, 2);
}

static int vocab_item(struct scan *sc, void *arg)
{
	struct entry en = {0};
	size_t need;
	int rc;

	(void)arg;
	rc = object(sc, entry_member, &en);
	if (rc < 0)
		goto out;
	if (!en.has_rank || !en.b64 || en.rank != sc->n_lines) {
		rc = bad(sc, "vocab entries need rank and token_bytes, ranks in order from 0");
		goto out;
	}
	need = strlen(en.b64) + 16;
	if (sc->out_cap - sc->out_len < need || sc->n_lines == sc->cap_lines) {
		size_t cap = sc->out_cap ? sc->out_cap * 2 : 1 << 22;
		size_t cap_lines = sc->cap_lines ? sc->cap_lines * 2 : 1 << 16;
		char *grown = realloc(sc->out, cap);
		size_t *lines = realloc(sc->line_end, cap_lines * sizeof(*lines));

		if (grown)
			sc->out = grown;
		if (lines)
			sc->line_end = lines;
		if (!grown || !lines) {
			rc = sf__err(sc->e, -ENOMEM, "%s: out of memory", sc->path);
			goto out;
		}
		sc->out_cap = cap;
		sc->cap_lines = cap_lines;
	}
	sc->out_len += (size_t)snprintf(sc->out + sc->out_len, sc->out_cap - sc->out_len,
					"%s %llu\n", en.b64, (unsigned long long)en.rank);
	sc->line_end[sc->n_lines++] = sc->out_len;
out:
	free(en.b64);
	return rc;
}

static int special_item(struct scan *sc, void *arg)
{
	struct sf_tekken *tk = arg;
	struct sf_tekken_special *grown;
	struct entry en = {.special = true};
	int rc;

	rc = object(sc, entry_member, &en);
	if (rc < 0)
		goto out;
	if (!en.has_rank || !en.text || en.rank != tk->n_defined) {
		rc = bad(sc, "special_tokens need rank and token_str, ranks in order from 0");
		goto out;
	}
	grown = realloc(tk->specials, (tk->n_defined + 1) * sizeof(*grown));
	if (!grown) {
		rc = sf__err(sc->e, -ENOMEM, "%s: out of memory", sc->path);
		goto out;
	}
	tk->specials = grown;
	tk->specials[tk->n_defined].text = en.text;
	tk->specials[tk->n_defined++].id = (uint32_t)en.rank;
	en.text = NULL;
out:
	free(en.text);
	return rc;
}

static int top_member(struct scan *sc, const char *key, void *arg)
{
	if (!strcmp(key, "config"))
		return object(sc, config_member, arg);
	if (!strcmp(key, "vocab"))
		return array(sc, vocab_item, NULL);
	if (!strcmp(key, "special_tokens"))
		return array(sc, special_item, arg);
	return skip_value(sc, 1);
}

int sf__tekken_parse(struct sf_tekken *ret, const char *path, const char *text, size_t len,
		     struct sf_err *e)
{
	struct scan sc = {.s = text, .n = len, .path = path, .e = e};
	struct sf_tekken tk = {0};
	uint32_t inner;
	int rc;

	rc = object(&sc, top_member, &tk);
	if (rc >= 0) {
		ws(&sc);
		if (sc.p != sc.n)
			rc = bad(&sc, "text after the JSON object");
	}
	if (rc < 0)
		goto fail;
	if (!tk.pattern || !tk.vocab_size || !tk.version) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: config needs pattern, default_vocab_size and version", path);
		goto fail;
	}
	if (tk.n_specials >= tk.vocab_size || tk.vocab_size - tk.n_specials > sc.n_lines ||
	    tk.n_defined > tk.n_specials) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: default_vocab_size %u with %u special tokens (%u listed) does "
			     "not fit %zu vocab entries",
			     path, tk.vocab_size, tk.n_specials, tk.n_defined, sc.n_lines);
		goto fail;
	}
	inner = tk.vocab_size - tk.n_specials;
	tk.tiktoken = sc.out;
	tk.tiktoken_len = inner ? sc.line_end[inner - 1] : 0;
	free(sc.line_end);
	*ret = tk;
	return 0;
fail:
	free(sc.out);
	free(sc.line_end);
	sf__tekken_free(&tk);
	return rc;
}

void sf__tekken_free(struct sf_tekken *tk)
{
	for (uint32_t i = 0; i < tk->n_defined; i++)
		free(tk->specials[i].text);
	free(tk->specials);
	free(tk->pattern);
	free(tk->tiktoken);
	memset(tk, 0, sizeof(*tk));
}
