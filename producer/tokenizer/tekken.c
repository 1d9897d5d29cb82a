/*
 * Mistral's tekken JSON, read with the project's JSON tree (producer/json.h): what the
 * tokenizer needs (config.pattern, config.default_vocab_size,
 * config.default_num_special_tokens, config.version, vocab[].rank and .token_bytes,
 * special_tokens[].rank and .token_str), with the rules of mistral-common's Tekkenizer:
 * vocab entries in rank order from 0, the vocabulary cut to default_vocab_size -
 * default_num_special_tokens ranks. The rest (images, audio settings) is not looked at.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/json.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/tok_tekken.h"

struct reader {
	const struct sf_json_doc *d;
	const char *path;
	struct sf_err *e;
};

static int bad(const struct reader *r, const struct sf_json_node *at, const char *what)
{
	return sf__err(r->e, SF_E_TOKENIZER, "%s: byte %u: %s", r->path, at->at, what);
}

/*
 * Member `name` of object `obj` when it has the JSON type `type`; NULL when absent. A
 * string that holds a NUL (\u0000) is refused: read as C strings, token_bytes, the
 * pattern and the version were cut there, into other bytes, another pattern, v3 for
 * "v3\u0000x" (a review), and token_str into another special's text.
 */
static int member(const struct reader *r, const struct sf_json_node *obj, const char *name,
		  uint32_t type, const struct sf_json_node **ret)
{
	const struct sf_json_node *n = sf__json_tree_get(r->d, obj, name);

	*ret = n;
	if (n && n->type == SF_JSON_STRING && type == SF_JSON_STRING &&
	    strlen(sf__json_tree_str(r->d, n)) != n->len) {
		char what[64];

		snprintf(what, sizeof(what), "a NUL character in %s", name);
		return bad(r, n, what);
	}
	if (!n || n->type == type)
		return 0;
	return bad(r, n, type == SF_JSON_STRING   ? "expected a string"
			 : type == SF_JSON_NUMBER ? "expected an unsigned integer"
			 : type == SF_JSON_ARRAY  ? "expected an array"
						  : "expected an object");
}

/* member() for a list that may be null, which counts as absent (as mistral-common reads
 * special_tokens: null). */
static int optional_list(const struct reader *r, const struct sf_json_node *obj,
			 const char *name, const struct sf_json_node **ret)
{
	const struct sf_json_node *n = sf__json_tree_get(r->d, obj, name);

	if (n && n->type == SF_JSON_NULL) {
		*ret = NULL;
		return 0;
	}
	return member(r, obj, name, SF_JSON_ARRAY, ret);
}

/* An unsigned integer below 2^32. */
static int uint_value(const struct reader *r, const struct sf_json_node *n, uint64_t *ret)
{
	const char *s = sf__json_tree_str(r->d, n);
	uint64_t v = 0;

	if (!*s || (s[0] == '0' && s[1]))
		return bad(r, n, "expected an unsigned integer");
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return bad(r, n, "expected an unsigned integer");
		if (v > (UINT32_MAX - 9) / 10)
			return bad(r, n, "number too large");
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*ret = v;
	return 0;
}

static int read_config(const struct reader *r, const struct sf_json_node *cfg,
		       struct sf_tekken *tk)
{
	const struct sf_json_node *n;
	const char *version;
	uint64_t v;
	int rc;

	if ((rc = member(r, cfg, "pattern", SF_JSON_STRING, &n)) < 0)
		return rc;
	if (n && !(tk->pattern = strdup(sf__json_tree_str(r->d, n))))
		return sf__err(r->e, -ENOMEM, "%s: out of memory", r->path);
	if ((rc = member(r, cfg, "default_vocab_size", SF_JSON_NUMBER, &n)) < 0 ||
	    (n && (rc = uint_value(r, n, &v)) < 0))
		return rc;
	if (n)
		tk->vocab_size = (uint32_t)v;
	if ((rc = member(r, cfg, "default_num_special_tokens", SF_JSON_NUMBER, &n)) < 0 ||
	    (n && (rc = uint_value(r, n, &v)) < 0))
		return rc;
	if (n)
		tk->n_specials = (uint32_t)v;
	if ((rc = member(r, cfg, "version", SF_JSON_STRING, &n)) < 0 || !n)
		return rc;
	/* mistral-common's TokenizerVersion: another is refused there too. */
	static const struct {
		const char *name;
		uint32_t number;
	} known[] = {{"v1", 1}, {"v2", 2}, {"v3", 3}, {"v7", 7}, {"v11", 11}, {"v13", 13}, {"v15", 15}};

	version = sf__json_tree_str(r->d, n);
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]) && !tk->version; i++)
		if (!strcmp(version, known[i].name))
			tk->version = known[i].number;
	return tk->version ? 0
			   : bad(r, n,
				 "config.version is none of mistral-common's: v1, v2, v3, v7, v11, "
				 "v13, v15");
}

/* Entry i of a vocab or special_tokens list: its rank (which must be i) and its string
 * member `field` (token_bytes or token_str). */
static int read_entry(const struct reader *r, const struct sf_json_node *en, uint64_t i,
		      const char *field, const char *why, const char **ret)
{
	const struct sf_json_node *rank, *str;
	uint64_t v;
	int rc;

	if (en->type != SF_JSON_OBJECT)
		return bad(r, en, "expected an object");
	if ((rc = member(r, en, "rank", SF_JSON_NUMBER, &rank)) < 0 ||
	    (rc = member(r, en, field, SF_JSON_STRING, &str)) < 0)
		return rc;
	if (!rank || !str)
		return bad(r, en, why);
	if ((rc = uint_value(r, rank, &v)) < 0)
		return rc;
	if (v != i)
		return bad(r, en, why);
	*ret = sf__json_tree_str(r->d, str);
	return 0;
}

/* Whether member `m` is named `name` (a key holding a NUL is none of these). */
static bool key_is(const struct reader *r, const struct sf_json_node *m, const char *name)
{
	return m->key_len == strlen(name) && !memcmp(sf__json_tree_key(r->d, m), name, m->key_len);
}

/* A vocab entry has rank, token_bytes and token_str and nothing else: mistral-common
 * asserts it (one without token_str, or with another key, loaded here; a review). */
static int check_entry_keys(const struct reader *r, const struct sf_json_node *en, uint32_t i)
{
	bool str = false, other = false;
	char what[128];

	for (uint32_t k = 0; k < en->len; k++) {
		const struct sf_json_node *m = sf__json_tree_child(r->d, en, k);

		if (key_is(r, m, "token_str"))
			str = true;
		else if (!key_is(r, m, "rank") && !key_is(r, m, "token_bytes"))
			other = true;
	}
	if (str && !other)
		return 0;
	snprintf(what, sizeof(what),
		 "vocab rank %u: an entry has rank, token_bytes and token_str, and nothing else "
		 "(mistral-common asserts it)",
		 i);
	return bad(r, en, what);
}

/*
 * token_bytes of rank i: base64 alone (a space or a newline in it wrote more lines of
 * ranks into the text below: ids past the vocabulary, from a review), and for the first
 * 256 ranks byte i itself, as mistral-common asserts (a file that swapped two encoded
 * other bytes).
 */
static int check_token_bytes(const struct reader *r, const struct sf_json_node *en, uint32_t i,
			     const char *b64)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strspn(b64, alphabet), pad = strspn(b64 + n, "=");

	if (!n || b64[n + pad] || pad > 2 || (n + pad) % 4)
		return sf__err(r->e, SF_E_TOKENIZER,
			       "%s: byte %u: vocab rank %u: token_bytes is not base64", r->path,
			       en->at, i);
	if (i < 256) {
		const char one[5] = {alphabet[i >> 2], alphabet[(i & 3) << 4], '=', '=', 0};

		if (strcmp(b64, one))
			return sf__err(r->e, SF_E_TOKENIZER,
				       "%s: byte %u: rank %u is not the byte %u (mistral-common "
				       "refuses it)",
				       r->path, en->at, i, i);
	}
	return 0;
}

/* The vocabulary as .tiktoken text ("base64 rank" lines); line_end[i] ends rank i. */
static int read_vocab(const struct reader *r, const struct sf_json_node *vocab, char **ret_out,
		      size_t **ret_line_end)
{
	size_t cap = 0, len = 0, *line_end = NULL;
	char *out = NULL;
	int rc = 0;

	if (vocab->len && !(line_end = malloc(vocab->len * sizeof(*line_end))))
		return sf__err(r->e, -ENOMEM, "%s: out of memory", r->path);
	for (uint32_t i = 0; i < vocab->len; i++) {
		const char *b64;
		size_t need;

		rc = read_entry(r, sf__json_tree_child(r->d, vocab, i), i, "token_bytes",
				"vocab entries need rank and token_bytes, ranks in order from 0",
				&b64);
		if (rc < 0)
			break;
		rc = check_entry_keys(r, sf__json_tree_child(r->d, vocab, i), i);
		if (rc < 0)
			break;
		rc = check_token_bytes(r, sf__json_tree_child(r->d, vocab, i), i, b64);
		if (rc < 0)
			break;
		need = strlen(b64) + 16;
		if (cap - len < need) {
			size_t ncap = cap ? cap * 2 : 1 << 22;
			char *grown;

			while (ncap - len < need)
				ncap *= 2;
			if (!(grown = realloc(out, ncap))) {
				rc = sf__err(r->e, -ENOMEM, "%s: out of memory", r->path);
				break;
			}
			out = grown;
			cap = ncap;
		}
		len += (size_t)snprintf(out + len, cap - len, "%s %u\n", b64, i);
		line_end[i] = len;
	}
	if (rc < 0) {
		free(out);
		free(line_end);
		return rc;
	}
	*ret_out = out;
	*ret_line_end = line_end;
	return 0;
}

static int read_specials(const struct reader *r, const struct sf_json_node *list,
			 struct sf_tekken *tk)
{
	/* Before the quadratic check of their texts below. */
	if (list->len > SF_TOK_MAX_SPECIALS)
		return sf__err(r->e, SF_E_TOKENIZER, "%s: byte %u: more than %d special tokens",
			       r->path, list->at, SF_TOK_MAX_SPECIALS);
	if (list->len && !(tk->specials = calloc(list->len, sizeof(*tk->specials))))
		return sf__err(r->e, -ENOMEM, "%s: out of memory", r->path);
	for (uint32_t i = 0; i < list->len; i++) {
		const char *text;
		int rc = read_entry(r, sf__json_tree_child(r->d, list, i), i, "token_str",
				    "special_tokens need rank and token_str, ranks in order from 0",
				    &text);

		if (rc < 0)
			return rc;
		/* Two specials of one text mistral-common refuses. */
		for (uint32_t k = 0; k < i; k++)
			if (!strcmp(tk->specials[k].text, text))
				return bad(r, sf__json_tree_child(r->d, list, i),
					   "token_str also at an earlier special token");
		if (!(tk->specials[i].text = strdup(text)))
			return sf__err(r->e, -ENOMEM, "%s: out of memory", r->path);
		tk->specials[i].id = i;
		tk->n_defined = i + 1;
	}
	return 0;
}

int sf__tekken_parse(struct sf_tekken *ret, const char *path, const char *text, size_t len,
		     struct sf_err *e)
{
	struct sf_json_doc *d = NULL;
	struct reader r = {.path = path, .e = e};
	const struct sf_json_node *root, *cfg, *vocab, *specials;
	struct sf_tekken tk = {0};
	char *out = NULL;
	size_t *line_end = NULL, error_at, n_lines;
	const char *what;
	uint32_t inner;
	int rc = sf__json_tree_parse(text, len, &d, &error_at, &what);

	if (rc == -ENOMEM)
		return sf__err(e, -ENOMEM, "%s: out of memory", path);
	if (rc != SF_JSON_OK)
		return sf__err(e, SF_E_TOKENIZER, "%s: byte %zu: %s", path, error_at, what);
	r.d = d;
	root = sf__json_tree_root(d);
	if (root->type != SF_JSON_OBJECT) {
		rc = bad(&r, root, "expected an object");
		goto fail;
	}
	if ((rc = member(&r, root, "config", SF_JSON_OBJECT, &cfg)) < 0 ||
	    (cfg && (rc = read_config(&r, cfg, &tk)) < 0) ||
	    (rc = member(&r, root, "vocab", SF_JSON_ARRAY, &vocab)) < 0 ||
	    (vocab && (rc = read_vocab(&r, vocab, &out, &line_end)) < 0) ||
	    (rc = optional_list(&r, root, "special_tokens", &specials)) < 0 ||
	    (specials && (rc = read_specials(&r, specials, &tk)) < 0))
		goto fail;
	n_lines = vocab ? vocab->len : 0;
	tk.listed = specials != NULL;
	if (!tk.pattern || !tk.vocab_size || !tk.version) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: config needs pattern, default_vocab_size and version", path);
		goto fail;
	}
	/* Before anything is sized by them: a tokenizer has at most SF_TOK_MAX_RANKS ids
	 * (500,000,000 specials made tables of 2 GB before they were refused). */
	if (tk.vocab_size > SF_TOK_MAX_RANKS) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: default_vocab_size %u, more than the %u ids supported", path,
			     tk.vocab_size, SF_TOK_MAX_RANKS);
		goto fail;
	}
	if (tk.n_specials >= tk.vocab_size || tk.vocab_size - tk.n_specials > n_lines ||
	    tk.n_defined > tk.n_specials) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: default_vocab_size %u with %u special tokens (%u listed) does "
			     "not fit %zu vocab entries",
			     path, tk.vocab_size, tk.n_specials, tk.n_defined, n_lines);
		goto fail;
	}
	inner = tk.vocab_size - tk.n_specials;
	tk.tiktoken = out;
	tk.tiktoken_len = inner ? line_end[inner - 1] : 0;
	free(line_end);
	sf__json_tree_free(d);
	*ret = tk;
	return 0;
fail:
	free(out);
	free(line_end);
	sf__tekken_free(&tk);
	sf__json_tree_free(d);
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
