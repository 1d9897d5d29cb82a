/*
 * The added tokens of a tokenizer.json (hf_json.c): their ids checked against the ones
 * tokenizers assigns, the leftmost-longest matchers of the raw and the normalized ones,
 * and the table of bytes that ids outside the byte-level vocabulary decode to.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "producer/json.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/hf_load.h"
#include "producer/tokenizer/nfc.h"

/*
 * Strings by number, found in O(1): an open-addressing table of the numbers of the
 * strings added, whose texts text_of() gives. (The pairwise comparisons it replaced took
 * 34 s to load 120,000 added tokens, from a review.)
 */
struct str_set {
	uint32_t *slot; /* number + 1; 0: empty */
	uint64_t mask;
	const char *(*text_of)(const void *ctx, uint32_t i, size_t *len);
	const void *ctx;
};

static int str_set_init(struct str_set *set, uint32_t n,
			const char *(*text_of)(const void *ctx, uint32_t i, size_t *len),
			const void *ctx)
{
	uint64_t size = 16;

	while (size < 2 * (uint64_t)n)
		size *= 2;
	*set = (struct str_set){calloc(size, sizeof(uint32_t)), size - 1, text_of, ctx};
	return set->slot ? 0 : -ENOMEM;
}

/* The slot of the string s[0..len): its number + 1, or an empty slot (0). */
static uint32_t *str_set_slot(const struct str_set *set, const char *s, size_t len)
{
	uint64_t i = XXH3_64bits(s, len) & set->mask;

	for (;; i = (i + 1) & set->mask) {
		size_t n;
		const char *t;

		if (!set->slot[i])
			return &set->slot[i];
		t = set->text_of(set->ctx, set->slot[i] - 1, &n);
		if (n == len && !memcmp(t, s, len))
			return &set->slot[i];
	}
}

static const char *odd_text(const void *ctx, uint32_t i, size_t *len)
{
	const struct sf_hf_loader *l = ctx;
	const struct sf_json_node *m = sf__json_tree_child(l->doc, l->vocab, l->odd[i]);

	*len = m->key_len;
	return sf__json_tree_key(l->doc, m);
}

static const char *added_text(const void *ctx, uint32_t i, size_t *len)
{
	const struct sf_tok_hf *hf = ctx;

	*len = hf->added[i].len;
	return hf->added[i].text;
}

/* The added_tokens list of a file, for written_text(). */
struct added_list {
	const struct sf_json_doc *doc;
	const struct sf_json_node *list;
};

/* The content of added_tokens[i], as written. */
static const char *written_text(const void *ctx, uint32_t i, size_t *len)
{
	const struct added_list *a = ctx;
	const struct sf_json_node *c =
		sf__json_tree_get(a->doc, sf__json_tree_child(a->doc, a->list, i), "content");

	*len = c->len;
	return sf__json_tree_str(a->doc, c);
}

/* The model's id of the token string s[0..len), or -1; `odd` holds the vocabulary's
 * strings outside the byte-level alphabet. */
static long vocab_id(const struct sf_hf_loader *l, const struct str_set *odd, const char *s,
		     size_t len)
{
	uint8_t *buf = malloc(len + 1);
	long id = -1, n = buf ? sf__hf_token_bytes(l, s, len, buf) : -1;

	if (n > 0) {
		uint32_t rank = sf__tok_rank(&l->tok->ranks, buf, (size_t)n);

		id = rank == SF_RANK_NONE ? -1 : (long)rank;
	} else {
		uint32_t k = *str_set_slot(odd, s, len);

		if (k)
			id = sf__hf_get_id(l->doc,
					   sf__json_tree_child(l->doc, l->vocab, l->odd[k - 1]));
	}
	free(buf);
	return id;
}

/*
 * The added tokens that end a document under `eos: auto`: GPT-2's and Qwen's, DeepSeek's
 * (its tokenizer_config.json's eos_token), Llama 3's, SentencePiece's. A tokenizer.json
 * says nothing of bos, so `bos: auto` is none (DeepSeek's add_bos_token is false).
 */
static bool is_end_of_text(const char *text)
{
	static const char *const names[] = {
		"<|endoftext|>",
		"<\xef\xbd\x9c"
		"end\xe2\x96\x81"
		"of\xe2\x96\x81"
		"sentence\xef\xbd\x9c>",
		"<|end_of_text|>",
		"</s>",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(text, names[i]))
			return true;
	return false;
}

/* Byte order of the tokens' texts, a prefix before what extends it. */
static int cmp_added(const void *a, const void *b)
{
	const struct sf_hf_added *x = *(struct sf_hf_added *const *)a;
	const struct sf_hf_added *y = *(struct sf_hf_added *const *)b;
	int c = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);

	if (c)
		return c;
	return (x->len > y->len) - (x->len < y->len);
}

static bool is_prefix(const struct sf_hf_added *p, const struct sf_hf_added *t)
{
	return p->len < t->len && !memcmp(p->text, t->text, p->len);
}

/* Build a leftmost-longest matcher over the added tokens whose `normalized` is `norm`. */
static int build_matcher(struct sf_hf_loader *l, struct sf_hf_matcher *m, const bool *normalized,
			 bool norm)
{
	uint32_t i, k, depth = 0, *stack;

	for (i = 0; i < 256; i++)
		m->single[i] = -1;
	m->tokens = malloc((l->hf->n_added + 1) * sizeof(*m->tokens));
	m->prefix = malloc((l->hf->n_added + 1) * sizeof(*m->prefix));
	m->bucket = calloc(65537, sizeof(*m->bucket));
	stack = malloc((l->hf->n_added + 1) * sizeof(*stack));
	if (!m->tokens || !m->prefix || !m->bucket || !stack) {
		free(stack);
		return sf__hf_oom(l);
	}
	for (i = 0; i < l->hf->n_added; i++) {
		struct sf_hf_added *a = &l->hf->added[i];

		if (normalized[i] != norm)
			continue;
		m->first[(uint8_t)a->text[0]] = 1;
		m->any = true;
		if (a->len == 1)
			m->single[(uint8_t)a->text[0]] = (int32_t)i;
		else
			m->tokens[m->n++] = a;
	}
	qsort(m->tokens, m->n, sizeof(*m->tokens), cmp_added);
	/* In byte order a token's prefixes come before it, and the tokens between a prefix
	 * and it extend that prefix too: a stack of the prefixes of the last token. */
	for (i = 0; i < m->n; i++) {
		while (depth && !is_prefix(m->tokens[stack[depth - 1]], m->tokens[i]))
			depth--;
		m->prefix[i] = depth ? (int32_t)stack[depth - 1] : -1;
		stack[depth++] = i;
	}
	free(stack);
	for (i = 0, k = 0; k <= 65536; k++) {
		while (i < m->n && ((uint32_t)(uint8_t)m->tokens[i]->text[0] << 8 |
				    (uint8_t)m->tokens[i]->text[1]) < k)
			i++;
		m->bucket[k] = i;
	}
	return 0;
}

int sf__hf_load_added(struct sf_hf_loader *l, const struct sf_json_node *list)
{
	static const char *const known[] = {"id",     "content",    "single_word", "lstrip",
					    "rstrip", "normalized", "special",	   NULL};
	static const char *const unsupported[] = {"single_word", "lstrip", "rstrip"};
	struct sf_tok_hf *hf = l->hf;
	struct sf_tok *tok = l->tok;
	/* The added contents so far as written, and as matched: seen[1] the normalized
	 * tokens', seen[0] the others'. */
	struct str_set odd = {0}, seen[2] = {{0}, {0}}, written = {0};
	const struct added_list added = {l->doc, list};
	uint32_t i, j, *cps = NULL;
	long n_new = 0;	       /* added tokens so far that the vocabulary lacks */
	uint8_t *taken = NULL; /* a bit per id an added token has */
	bool *normalized;
	int rc = 0;

	if (!list || list->type == SF_JSON_NULL)
		return 0;
	if (list->type != SF_JSON_ARRAY)
		return sf__hf_refuse(l, "added_tokens", "expected a list");
	hf->added = calloc(list->len + 1, sizeof(*hf->added));
	normalized = calloc(list->len + 1, sizeof(*normalized));
	/* An added token's id is its vocabulary id (below 2^24) or the vocabulary's size
	 * (at most 2^24) plus fewer than list->len. */
	taken = calloc((((size_t)1 << 24) + list->len + 8) / 8, 1);
	if (!hf->added || !normalized || !taken || str_set_init(&odd, l->n_odd, odd_text, l) < 0 ||
	    str_set_init(&seen[0], list->len, added_text, hf) < 0 ||
	    str_set_init(&seen[1], list->len, added_text, hf) < 0 ||
	    str_set_init(&written, list->len, written_text, &added) < 0) {
		rc = sf__hf_oom(l);
		goto out;
	}
	for (i = 0; i < l->n_odd; i++) {
		size_t n;
		const char *key = odd_text(l, i, &n);
		uint32_t *slot = str_set_slot(&odd, key, n);

		if (!*slot) /* the first of equal keys, as the scan found it */
			*slot = i + 1;
	}
	for (i = 0; i < list->len; i++) {
		const struct sf_json_node *a = sf__json_tree_child(l->doc, list, i), *c;
		struct sf_hf_added *t = &hf->added[i];
		char path[64];
		long id;
		bool flag;

		snprintf(path, sizeof(path), "added_tokens[%u]", i);
		if (a->type != SF_JSON_OBJECT) {
			rc = sf__hf_refuse(l, path, "expected an object");
			goto out;
		}
		rc = sf__hf_only_keys(l, a, path, known);
		for (j = 0; rc == 0 && j < 3; j++) {
			rc = sf__hf_get_bool(l, a, unsupported[j], path, SF_HF_NEEDED, &flag);
			if (rc == 0 && flag) {
				char where[96];

				snprintf(where, sizeof(where), "%s.%s", path, unsupported[j]);
				rc = sf__hf_refuse(l, where, "true not supported");
			}
		}
		if (rc == 0)
			rc = sf__hf_get_bool(l, a, "special", path, SF_HF_NEEDED, &t->special);
		if (rc == 0)
			rc = sf__hf_get_bool(l, a, "normalized", path, SF_HF_NEEDED,
					     &normalized[i]);
		if (rc < 0)
			goto out;
		id = sf__hf_get_id(l->doc, sf__json_tree_get(l->doc, a, "id"));
		c = sf__json_tree_get(l->doc, a, "content");
		if (id < 0 || !c || c->type != SF_JSON_STRING || !c->len) {
			rc = sf__hf_refuse(l, path, "expected an id and a non-empty content");
			goto out;
		}
		if (strlen(sf__json_tree_str(l->doc, c)) != c->len) {
			rc = sf__hf_refuse(l, path,
					   "a content holding the character U+0000 not supported");
			goto out;
		}
		{
			uint32_t *slot =
				str_set_slot(&written, sf__json_tree_str(l->doc, c), c->len);

			if (*slot) {
				rc = sf__hf_refuse(l, path,
						   "content \"%s\" also at added_tokens[%u]",
						   sf__json_tree_str(l->doc, c), *slot - 1);
				goto out;
			}
			*slot = i + 1;
		}
		/*
		 * tokenizers does not take the file's id: it adds the tokens again, all in one
		 * call, each getting its id in the model's vocabulary, else the vocabulary's
		 * size plus the number of earlier ones the vocabulary lacks (since 0.22; the
		 * rule was the next id above every earlier one, which differs where the
		 * vocabulary's ids have gaps: a review found a token encoded as 301 that
		 * tokenizers gives 257). A file whose ids disagree would be encoded with other
		 * ids than it says: refuse it. Two added tokens of one id tokenizers matches as
		 * one of them: refuse that too.
		 */
		{
			long want = vocab_id(l, &odd, sf__json_tree_str(l->doc, c), c->len);

			if (want < 0)
				want = (long)l->vocab->len + n_new++;
			if (want != id) {
				rc = sf__hf_refuse(l, path,
						   "id %ld, but tokenizers gives \"%s\" the id %ld",
						   id, sf__json_tree_str(l->doc, c), want);
				goto out;
			}
			if (taken[id >> 3] >> (id & 7) & 1) {
				rc = sf__hf_refuse(
					l, path,
					"id %ld is an earlier added token's too: tokenizers "
					"matches one of the two",
					id);
				goto out;
			}
			taken[id >> 3] |= (uint8_t)(1u << (id & 7));
		}
		/* A normalized token is matched in normalized text: normalize it too. */
		t->text = malloc(3 * (size_t)c->len + 1);
		cps = realloc(cps, 4 * ((size_t)c->len + 1) * sizeof(*cps));
		if (!t->text || !cps) {
			free(t->text);
			t->text = NULL;
			rc = sf__hf_oom(l);
			goto out;
		}
		if (normalized[i] && hf->nfc) {
			t->len = (uint32_t)sf__nfc((const uint8_t *)sf__json_tree_str(l->doc, c),
						   c->len, (uint8_t *)t->text, cps);
		} else {
			memcpy(t->text, sf__json_tree_str(l->doc, c), c->len);
			t->len = c->len;
		}
		t->text[t->len] = '\0';
		t->id = (uint32_t)id;
		/*
		 * One whose matched text another's of its kind (normalized or not: each kind
		 * is matched on its own, the raw text first) already is would match the same
		 * text as it (tokenizers picks either, docs/tokenizer.md). Contents were
		 * compared as written with the others as matched only: the same content
		 * written twice passed when NFC changed it, with an id tokenizers never gives.
		 */
		{
			uint32_t *slot = str_set_slot(&seen[normalized[i]], t->text, t->len);

			if (*slot) {
				if (t->len == c->len &&
				    !memcmp(t->text, sf__json_tree_str(l->doc, c), c->len))
					rc = sf__hf_refuse(l, path,
							   "content \"%s\" is also what "
							   "added_tokens[%u] matches (after NFC)",
							   t->text, *slot - 1);
				else
					rc = sf__hf_refuse(l, path,
							   "content \"%s\" is matched as \"%s\" "
							   "(NFC), as added_tokens[%u] is",
							   sf__json_tree_str(l->doc, c), t->text,
							   *slot - 1);
				/* Not counted yet: the tokens freed with the tokenizer are those.
				 */
				free(t->text);
				t->text = NULL;
				goto out;
			}
			*slot = i + 1;
		}
		t->bit = -1;
		hf->n_added++;
		if ((uint32_t)id >= tok->n_vocab)
			tok->n_vocab = (uint32_t)id + 1;
		/*
		 * Special tokens are the tokenizer's specials too (sf__tok_special(), a job's
		 * bos/eos names), with the bit of an allowed set sf__tok_special() gives: their
		 * own for the first 63, bit 63 shared by the rest. One with a NUL in it, or
		 * beyond SF_TOK_MAX_SPECIALS, only SF_TOK_ALLOW_ALL allows.
		 */
		if (t->special && t->len && strlen(t->text) == t->len &&
		    tok->n_specials < SF_TOK_MAX_SPECIALS) {
			uint32_t idx = tok->n_specials;

			rc = sf__tok_add_special(tok, t->text, t->id, l->e);
			if (rc < 0)
				goto out;
			t->bit = idx < 63 ? (int)idx : 63;
		}
		/* The document's eos: the first special end-of-text token, one that a job
		 * could also name (a non-special added token is no special token). */
		if (tok->eot < 0 && t->special && is_end_of_text(t->text))
			tok->eot = (int32_t)id;
	}
	rc = build_matcher(l, &hf->raw, normalized, false);
	if (rc == 0)
		rc = build_matcher(l, &hf->norm, normalized, true);
out:
	free(odd.slot);
	free(seen[0].slot);
	free(seen[1].slot);
	free(written.slot);
	free(cps);
	free(normalized);
	free(taken);
	return rc;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static int cmp_u32_pair(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * The decoded bytes of ids the rank table does not give: added tokens (which take
 * precedence, as in tokenizers' decode) and vocabulary tokens outside the byte-level
 * alphabet. The ByteLevel decoder maps a token's characters back to bytes when all are in
 * the alphabet, and otherwise keeps the token's UTF-8 text.
 */
int sf__hf_build_extra(struct sf_hf_loader *l, const struct sf_json_node *vocab)
{
	struct sf_tok_hf *hf = l->hf;
	uint32_t cap = hf->n_added + 1, i, total = 0, (*pairs)[2];
	const char **texts;
	uint32_t *lens, *added_ids = NULL;
	int rc = 0;

	for (i = 0; i < vocab->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, vocab, i);
		long id = sf__hf_get_id(l->doc, m);

		if (l->tok->ranks.off[id + 1] == l->tok->ranks.off[id])
			cap++;
	}
	pairs = malloc(cap * sizeof(*pairs));
	texts = malloc(cap * sizeof(*texts));
	lens = malloc(cap * sizeof(*lens));
	if (!pairs || !texts || !lens) {
		rc = sf__hf_oom(l);
		goto out;
	}
	for (i = 0; i < hf->n_added; i++) {
		pairs[hf->n_extra][0] = hf->added[i].id;
		pairs[hf->n_extra][1] = hf->n_extra;
		texts[hf->n_extra] = hf->added[i].text;
		lens[hf->n_extra++] = hf->added[i].len;
		total += hf->added[i].len;
	}
	/* The added ids sorted, to skip the vocabulary's tokens they replace. */
	added_ids = malloc((hf->n_added + 1) * sizeof(*added_ids));
	if (!added_ids) {
		rc = sf__hf_oom(l);
		goto out;
	}
	for (i = 0; i < hf->n_added; i++)
		added_ids[i] = hf->added[i].id;
	qsort(added_ids, hf->n_added, sizeof(*added_ids), cmp_u32);
	for (i = 0; i < vocab->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, vocab, i);
		long id = sf__hf_get_id(l->doc, m);
		uint32_t key = (uint32_t)id;

		if (l->tok->ranks.off[id + 1] != l->tok->ranks.off[id])
			continue;
		if (bsearch(&key, added_ids, hf->n_added, sizeof(*added_ids), cmp_u32))
			continue;
		pairs[hf->n_extra][0] = (uint32_t)id;
		pairs[hf->n_extra][1] = hf->n_extra;
		texts[hf->n_extra] = sf__json_tree_key(l->doc, m);
		lens[hf->n_extra++] = m->key_len;
		total += m->key_len;
	}
	/* Stable by id: an added token comes first among equal ids and wins. */
	for (i = 0; i < hf->n_extra; i++)
		pairs[i][1] = i;
	qsort(pairs, hf->n_extra, sizeof(*pairs), cmp_u32_pair);
	hf->extra_ids = malloc((hf->n_extra + 1) * sizeof(*hf->extra_ids));
	hf->extra_off = malloc((hf->n_extra + 1) * sizeof(*hf->extra_off));
	hf->extra_bytes = malloc(total + 1);
	if (!hf->extra_ids || !hf->extra_off || !hf->extra_bytes) {
		rc = sf__hf_oom(l);
		goto out;
	}
	{
		uint32_t n = 0, off = 0;

		for (i = 0; i < hf->n_extra; i++) {
			uint32_t k = pairs[i][1];
			long got;

			if (n && hf->extra_ids[n - 1] == pairs[i][0])
				continue;
			got = sf__hf_token_bytes(l, texts[k], lens[k], hf->extra_bytes + off);
			if (got < 0) {
				memcpy(hf->extra_bytes + off, texts[k], lens[k]);
				got = lens[k];
			}
			hf->extra_ids[n] = pairs[i][0];
			hf->extra_off[n++] = off;
			off += (uint32_t)got;
		}
		hf->extra_off[n] = off;
		hf->n_extra = n;
	}
out:
	free(added_ids);
	free(pairs);
	free(texts);
	free(lens);
	return rc;
}
