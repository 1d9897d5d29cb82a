/*
 * Loading a Hugging Face tokenizer.json whose model is byte-level BPE (GPT-2, Llama 3,
 * Qwen, DeepSeek and the files `tokenizers` trains with a ByteLevel pre-tokenizer) into
 * the tokenizer's internal form: the vocabulary as byte strings in the rank table (an id
 * is a rank), the merges as a table from an id pair to its rank and result, the
 * pre-tokenizer as a list of stages, the added tokens as two leftmost-longest matchers.
 *
 * Every key of the file is either understood or refused: a construct whose effect on the
 * ids this code does not reproduce exactly is an error naming its JSON path, e.g.
 * `pre_tokenizer.pretokenizers[2].type: "Metaspace" not supported`.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/json.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/hf_load.h"
#include "producer/tokenizer/unicode.h"

/* An error about the value at `path`: "NAME: PATH: MESSAGE". */
__attribute__((format(printf, 3, 4))) int sf__hf_refuse(struct sf_hf_loader *l, const char *path,
							const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return sf__err(l->e, SF_E_TOKENIZER, "%s: %s: %s", l->name, path, msg);
}

int sf__hf_oom(struct sf_hf_loader *l)
{
	return sf__err(l->e, -ENOMEM, "%s: out of memory", l->name);
}

/*
 * GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xa1..0xac and 0xae..0xff stand
 * for themselves, the others for U+0100 onwards in byte order.
 */
static void byte_alphabet(struct sf_hf_loader *l)
{
	uint32_t next = 256;
	int b;

	for (b = 0; b < 324; b++)
		l->byte_of[b] = -1;
	for (b = 0; b < 256; b++) {
		bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;

		l->char_of[b] = printable ? (uint32_t)b : next++;
		l->byte_of[l->char_of[b]] = (int16_t)b;
	}
}

/*
 * The bytes a byte-level token string stands for, into `out` (room for `len` bytes):
 * their count, or -1 when a character is outside the byte-level alphabet.
 */
long sf__hf_token_bytes(const struct sf_hf_loader *l, const char *s, size_t len, uint8_t *out)
{
	size_t p = 0;
	long n = 0;
	uint32_t cp;

	while (p < len) {
		p += sf__utf8_next((const uint8_t *)s + p, len - p, &cp);
		if (cp >= 324 || l->byte_of[cp] < 0)
			return -1;
		out[n++] = (uint8_t)l->byte_of[cp];
	}
	return n;
}

int sf__hf_get_bool(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *key,
		    const char *path, int absent, bool *ret)
{
	const struct sf_json_node *n = sf__json_tree_get(l->doc, obj, key);

	if (!n && absent == SF_HF_NEEDED)
		return sf__hf_refuse(l, path, "%s missing: tokenizers requires it", key);
	if (!n) {
		*ret = absent;
		return 0;
	}
	if (n->type == SF_JSON_NULL && absent == 0) {
		*ret = false;
		return 0;
	}
	if (n->type != SF_JSON_TRUE && n->type != SF_JSON_FALSE)
		return sf__hf_refuse(l, path, "%s: expected true or false", key);
	*ret = n->type == SF_JSON_TRUE;
	return 0;
}

/*
 * Refuse a member given twice in `obj`, an object read as a struct. tokenizers refuses
 * some ("duplicate field" in an added token), and takes one of others by rules of its
 * own (a component's type, the top level's members), where the tree here keeps the
 * last: a second "special": false made <|endoftext|> ordinary text (a review).
 */
static int refuse_repeated_fields(struct sf_hf_loader *l, const struct sf_json_node *obj,
				  const char *path)
{
	for (uint32_t i = 1; i < obj->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, obj, i);
		const char *key = sf__json_tree_key(l->doc, m);

		for (uint32_t j = 0; j < i; j++) {
			const struct sf_json_node *p = sf__json_tree_child(l->doc, obj, j);

			if (p->key_len == m->key_len &&
			    !memcmp(sf__json_tree_key(l->doc, p), key, m->key_len))
				return sf__hf_refuse(l, path, "\"%s\" is given twice: give it once",
						     key);
		}
	}
	return 0;
}

/* Refuse members of `obj` not in the NULL-terminated list `known`, or given twice. */
int sf__hf_only_keys(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path,
		     const char *const *known)
{
	uint32_t i;
	int rc = refuse_repeated_fields(l, obj, path);

	if (rc < 0)
		return rc;
	for (i = 0; i < obj->len; i++) {
		const char *key = sf__json_tree_key(l->doc, sf__json_tree_child(l->doc, obj, i));
		const char *const *k;

		for (k = known; *k && strcmp(*k, key); k++)
			;
		if (!*k)
			return sf__hf_refuse(l, path, "unknown key \"%s\"", key);
	}
	return 0;
}

/* A non-negative integer below 2^31, or -1. */
long sf__hf_get_id(const struct sf_json_doc *doc, const struct sf_json_node *n)
{
	const char *s;
	char *end;
	long v;

	if (!n || n->type != SF_JSON_NUMBER)
		return -1;
	s = sf__json_tree_str(doc, n);
	if (*s == '-')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v >= (1l << 31))
		return -1;
	return v;
}

/* The type member of a component object, or NULL (the caller refuses). */
const char *sf__hf_type_of(struct sf_hf_loader *l, const struct sf_json_node *obj)
{
	const struct sf_json_node *t = sf__json_tree_get(l->doc, obj, "type");

	return t && t->type == SF_JSON_STRING ? sf__json_tree_str(l->doc, t) : NULL;
}

/* ---- the model ---- */

static uint64_t merge_hash(uint64_t key)
{
	key *= 0x9e3779b97f4a7c15ull;
	return key ^ (key >> 29);
}

/* Insert or overwrite (a later duplicate of a pair wins, as in tokenizers' HashMap). */
static void merge_put(struct sf_tok_hf *hf, uint32_t left, uint32_t right, uint32_t rank,
		      uint32_t id)
{
	uint64_t key = (uint64_t)left << 32 | right, i;

	for (i = merge_hash(key) & hf->merge_mask;; i = (i + 1) & hf->merge_mask) {
		if (hf->merges[i].key == key || hf->merges[i].key == UINT64_MAX) {
			hf->merges[i] = (struct sf_hf_merge){.key = key, .rank = rank, .id = id};
			return;
		}
	}
}

/*
 * The id of a byte-level token string, or -1 when the vocabulary does not have it;
 * `scratch` has room for `cap` bytes. A string of `cap` bytes or more is no token's
 * (load_merges() sizes it above the longest): it was decoded into it all the same, past
 * its end (a merge of two long strings, from a review).
 */
static long token_id(const struct sf_hf_loader *l, const char *s, size_t len, uint8_t *scratch,
		     size_t cap)
{
	long n = len < cap ? sf__hf_token_bytes(l, s, len, scratch) : -1;
	uint32_t rank;

	if (n <= 0)
		return -1;
	rank = sf__tok_rank(&l->tok->ranks, scratch, (size_t)n);
	return rank == SF_RANK_NONE ? -1 : (long)rank;
}

struct vocab_key {
	const char *key;
	size_t len;
	long id;
};

static int cmp_vocab_key(const void *a, const void *b)
{
	const struct vocab_key *x = a, *y = b;
	int c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);

	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * A key given twice in the vocabulary is refused: tokenizers reads the vocabulary into a
 * map, which keeps the last id of a key; the tables here would keep one of them by chance.
 */
static int refuse_repeated_keys(struct sf_hf_loader *l, const struct sf_json_node *vocab)
{
	struct vocab_key *k = malloc(((size_t)vocab->len + 1) * sizeof(*k));
	int rc = 0;

	if (!k)
		return sf__hf_oom(l);
	for (uint32_t i = 0; i < vocab->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, vocab, i);

		k[i] = (struct vocab_key){sf__json_tree_key(l->doc, m), m->key_len,
					  sf__hf_get_id(l->doc, m)};
	}
	qsort(k, vocab->len, sizeof(*k), cmp_vocab_key);
	for (uint32_t i = 1; i < vocab->len && rc == 0; i++)
		if (k[i].len == k[i - 1].len && !memcmp(k[i].key, k[i - 1].key, k[i].len))
			rc = sf__hf_refuse(l, "model.vocab",
					   "\"%.*s\" is given twice (ids %ld and %ld): tokenizers "
					   "keeps the last; remove the other",
					   (int)(k[i].len < 64 ? k[i].len : 64), k[i].key,
					   k[i - 1].id, k[i].id);
	free(k);
	return rc;
}

static int load_vocab(struct sf_hf_loader *l, const struct sf_json_node *vocab)
{
	struct sf_tok_ranks *r = &l->tok->ranks;
	uint32_t i, max_id = 0, total = 0;
	uint8_t *buf, *seen = NULL;
	int rc = 0;

	if (!vocab || vocab->type != SF_JSON_OBJECT || !vocab->len)
		return sf__hf_refuse(l, "model.vocab", "expected an object of token: id");
	for (i = 0; i < vocab->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, vocab, i);
		long id = sf__hf_get_id(l->doc, m);

		if (id < 0)
			return sf__hf_refuse(l, "model.vocab",
					     "\"%s\": expected an id from 0 to 2^31-1",
					     sf__json_tree_key(l->doc, m));
		/* Refused before the tables by id are sized from it. */
		if (id >= SF_TOK_MAX_RANKS)
			return sf__hf_refuse(l, "model.vocab",
					     "\"%s\": id %ld, more than the %u ids supported",
					     sf__json_tree_key(l->doc, m), id, SF_TOK_MAX_RANKS);
		if ((uint32_t)id > max_id)
			max_id = (uint32_t)id;
		total += m->key_len;
	}
	rc = refuse_repeated_keys(l, vocab);
	if (rc < 0)
		return rc;
	r->n_ranks = max_id + 1;
	r->off = calloc((size_t)r->n_ranks + 1, sizeof(*r->off));
	r->bytes = malloc(total + 1);
	buf = malloc(total + 1);
	seen = calloc((size_t)r->n_ranks / 8 + 1, 1);
	if (!r->off || !r->bytes || !buf || !seen) {
		free(buf);
		free(seen);
		return sf__hf_oom(l);
	}
	/* Lengths by id first (a token's bytes are never more than its string's). */
	for (i = 0; i < vocab->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, vocab, i);
		long id = sf__hf_get_id(l->doc, m);
		long n = sf__hf_token_bytes(l, sf__json_tree_key(l->doc, m), m->key_len, buf);

		if (seen[id / 8] & (1u << (id % 8))) {
			rc = sf__hf_refuse(l, "model.vocab", "id %ld appears twice", id);
			goto out;
		}
		seen[id / 8] |= (uint8_t)(1u << (id % 8));
		if (n > 0)
			r->off[id + 1] = (uint32_t)n;
	}
	for (i = 0; i < r->n_ranks; i++)
		r->off[i + 1] += r->off[i];
	for (i = 0; i < vocab->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, vocab, i);
		long id = sf__hf_get_id(l->doc, m);

		if (r->off[id + 1] != r->off[id])
			sf__hf_token_bytes(l, sf__json_tree_key(l->doc, m), m->key_len,
					   r->bytes + r->off[id]);
	}
	rc = sf__tok_ranks_index(r, l->name, l->e);
	if (rc < 0)
		goto out;
	l->vocab = vocab;
	l->odd = malloc(((size_t)vocab->len + 1) * sizeof(*l->odd));
	if (!l->odd) {
		rc = sf__hf_oom(l);
		goto out;
	}
	for (i = 0; i < vocab->len; i++) {
		long id = sf__hf_get_id(l->doc, sf__json_tree_child(l->doc, vocab, i));

		if (r->off[id + 1] == r->off[id])
			l->odd[l->n_odd++] = i;
	}
	for (i = 0; i < 256; i++) {
		uint8_t b = (uint8_t)i;

		if (r->byte_rank[b] == SF_RANK_NONE) {
			char ch[5] = {0};

			sf__utf8_encode(l->char_of[i], (uint8_t *)ch);
			rc = sf__hf_refuse(
				l, "model.vocab",
				"no token for byte 0x%02x (\"%s\"): not a byte-level BPE", i, ch);
			goto out;
		}
		l->hf->byte_id[i] = r->byte_rank[b];
	}
	l->tok->n_vocab = r->n_ranks;
out:
	free(buf);
	free(seen);
	return rc;
}

/* A merge as "left right" or ["left", "right"]: the two ids, or an error. */
static int merge_parts(struct sf_hf_loader *l, const struct sf_json_node *m, uint32_t i,
		       uint8_t *buf, size_t cap, long *ret_left, long *ret_right, long *ret_merged)
{
	const char *left, *right;
	size_t left_len, right_len;
	char path[64], *joined;

	snprintf(path, sizeof(path), "model.merges[%u]", i);
	if (m->type == SF_JSON_STRING) {
		const char *s = sf__json_tree_str(l->doc, m), *sp = memchr(s, ' ', m->len);

		if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - s)))
			return sf__hf_refuse(l, path, "expected \"left right\" with one space");
		left = s;
		left_len = (size_t)(sp - s);
		right = sp + 1;
		right_len = m->len - left_len - 1;
	} else if (m->type == SF_JSON_ARRAY && m->len == 2 &&
		   sf__json_tree_child(l->doc, m, 0)->type == SF_JSON_STRING &&
		   sf__json_tree_child(l->doc, m, 1)->type == SF_JSON_STRING) {
		left = sf__json_tree_str(l->doc, sf__json_tree_child(l->doc, m, 0));
		left_len = sf__json_tree_child(l->doc, m, 0)->len;
		right = sf__json_tree_str(l->doc, sf__json_tree_child(l->doc, m, 1));
		right_len = sf__json_tree_child(l->doc, m, 1)->len;
	} else {
		return sf__hf_refuse(l, path, "expected \"left right\" or [\"left\", \"right\"]");
	}
	*ret_left = token_id(l, left, left_len, buf, cap);
	*ret_right = token_id(l, right, right_len, buf, cap);
	joined = malloc(left_len + right_len + 1);
	if (!joined)
		return sf__hf_oom(l);
	memcpy(joined, left, left_len);
	memcpy(joined + left_len, right, right_len);
	*ret_merged = token_id(l, joined, left_len + right_len, buf, cap);
	free(joined);
	if (*ret_left < 0 || *ret_right < 0 || *ret_merged < 0)
		return sf__hf_refuse(l, path,
				     "\"%.*s\" + \"%.*s\": %s is not a byte-level token of the "
				     "vocabulary",
				     (int)left_len, left, (int)right_len, right,
				     *ret_left < 0    ? "the left part"
				     : *ret_right < 0 ? "the right part"
						      : "the merged token");
	return 0;
}

static int load_merges(struct sf_hf_loader *l, const struct sf_json_node *merges)
{
	struct sf_tok_hf *hf = l->hf;
	uint64_t size = 1024;
	uint8_t *buf;
	size_t cap;
	uint32_t i;
	int rc = 0;

	if (!merges || merges->type != SF_JSON_ARRAY)
		return sf__hf_refuse(l, "model.merges", "expected a list");
	while (size < 2 * (uint64_t)merges->len)
		size *= 2;
	hf->merge_mask = size - 1;
	hf->merges = malloc(size * sizeof(*hf->merges));
	/* A token's string takes at most 2 bytes a byte (U+0100..U+0143). */
	cap = 2 * (size_t)l->tok->ranks.off[l->tok->ranks.n_ranks] + 2;
	buf = malloc(cap);
	if (!hf->merges || !buf) {
		free(buf);
		return sf__hf_oom(l);
	}
	for (i = 0; i < size; i++)
		hf->merges[i].key = UINT64_MAX;
	for (i = 0; i < 65536; i++)
		hf->byte_merge[i] = (struct sf_hf_merge){.key = UINT64_MAX, .rank = SF_RANK_NONE};
	for (i = 0; i < merges->len; i++) {
		const struct sf_json_node *m = sf__json_tree_child(l->doc, merges, i);
		const uint32_t first = sf__json_tree_child(l->doc, merges, 0)->type;
		long left = -1, right = -1, merged = -1;

		/* tokenizers reads the list as one form or the other (an untagged enum of
		 * two list types), and refuses one that mixes them. */
		if (i && m->type != first &&
		    (m->type == SF_JSON_STRING || m->type == SF_JSON_ARRAY) &&
		    (first == SF_JSON_STRING || first == SF_JSON_ARRAY)) {
			char path[64];

			snprintf(path, sizeof(path), "model.merges[%u]", i);
			rc = sf__hf_refuse(l, path, "%s after %s merges: tokenizers takes one form",
					   first == SF_JSON_STRING ? "[\"left\", \"right\"]"
								   : "\"left right\"",
					   first == SF_JSON_STRING ? "\"left right\""
								   : "[\"left\", \"right\"]");
			break;
		}

		/* tokenizers leaves out a "left right" merge that starts with #version (the
		 * header line of a merges.txt). */
		if (m->type == SF_JSON_STRING && m->len >= 8 &&
		    !memcmp(sf__json_tree_str(l->doc, m), "#version", 8))
			continue;
		rc = merge_parts(l, m, i, buf, cap, &left, &right, &merged);
		if (rc < 0)
			break;
		merge_put(hf, (uint32_t)left, (uint32_t)right, i, (uint32_t)merged);
	}
	free(buf);
	if (rc < 0)
		return rc;
	/* Pairs of two single bytes, the commonest lookup, get a direct table. */
	for (i = 0; i < 65536; i++) {
		struct sf_hf_merge_result m;

		if (sf__hf_merge_lookup(hf, hf->byte_id[i >> 8], hf->byte_id[i & 0xff], &m))
			hf->byte_merge[i] =
				(struct sf_hf_merge){.key = 0, .rank = m.rank, .id = m.id};
	}
	return 0;
}

/*
 * The whole-piece shortcut: a piece that is a token is encoded by one lookup when merging
 * its bytes gives that token back, which holds for almost every token of a trained file
 * but is not guaranteed (a token the merges cannot reach). Decide it per token here by
 * merging each one's bytes, so that the shortcut is exact.
 */
static int mark_whole(struct sf_hf_loader *l)
{
	const struct sf_tok_ranks *r = &l->tok->ranks;
	struct sf_hf_scratch *sc;
	uint32_t id, *out;
	size_t n, longest = 1;
	int rc;

	l->hf->whole = calloc((size_t)r->n_ranks / 8 + 1, 1);
	if (!l->hf->whole)
		return sf__hf_oom(l);
	for (id = 0; id < r->n_ranks; id++)
		if (r->off[id + 1] - r->off[id] > longest)
			longest = r->off[id + 1] - r->off[id];
	out = malloc(longest * sizeof(*out));
	rc = sf__hf_scratch_create(l->tok, &sc);
	if (!out || rc < 0) {
		free(out);
		sf__hf_scratch_free(sc);
		return sf__hf_oom(l);
	}
	for (id = 0; id < r->n_ranks; id++) {
		size_t len = r->off[id + 1] - r->off[id];

		if (!len)
			continue;
		if (len == 1) {
			l->hf->whole[id / 8] |= (uint8_t)(1u << (id % 8));
			continue;
		}
		rc = sf__hf_bpe(l->hf, sc, r->bytes + r->off[id], len, out, &n);
		if (rc < 0)
			break;
		if (n == 1 && out[0] == id)
			l->hf->whole[id / 8] |= (uint8_t)(1u << (id % 8));
	}
	free(out);
	sf__hf_scratch_free(sc);
	return rc < 0 ? sf__hf_oom(l) : 0;
}

static int load_model(struct sf_hf_loader *l, const struct sf_json_node *model)
{
	static const char *const known[] = {"type",
					    "dropout",
					    "unk_token",
					    "continuing_subword_prefix",
					    "end_of_word_suffix",
					    "fuse_unk",
					    "byte_fallback",
					    "ignore_merges",
					    "vocab",
					    "merges",
					    NULL};
	static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	const struct sf_json_node *n;
	const char *type;
	size_t i;
	int rc;

	if (!model || model->type != SF_JSON_OBJECT)
		return sf__hf_refuse(l, "model", "expected an object");
	type = sf__hf_type_of(l, model);
	if (!type)
		return sf__hf_refuse(l, "model.type", "missing");
	if (strcmp(type, "BPE"))
		return sf__hf_refuse(l, "model.type", "\"%s\" not supported (only \"BPE\")", type);
	rc = sf__hf_only_keys(l, model, "model", known);
	if (rc < 0)
		return rc;
	n = sf__json_tree_get(l->doc, model, "dropout");
	if (n && n->type != SF_JSON_NULL &&
	    !(n->type == SF_JSON_NUMBER && strtod(sf__json_tree_str(l->doc, n), NULL) == 0.0))
		return sf__hf_refuse(l, "model.dropout", "%s not supported (random merges)",
				     sf__json_tree_str(l->doc, n));
	for (i = 0; i < 2; i++) {
		char path[64];

		n = sf__json_tree_get(l->doc, model, affixes[i]);
		snprintf(path, sizeof(path), "model.%s", affixes[i]);
		if (n && n->type != SF_JSON_NULL && !(n->type == SF_JSON_STRING && n->len == 0))
			return sf__hf_refuse(l, path, "\"%s\" not supported",
					     sf__json_tree_str(l->doc, n));
	}
	rc = sf__hf_get_bool(l, model, "ignore_merges", "model", false, &l->hf->ignore_merges);
	if (rc < 0)
		return rc;
	/*
	 * byte_fallback, unk_token and fuse_unk only act on a character the vocabulary lacks;
	 * load_vocab() requires all 256 byte characters, so they never do.
	 */
	rc = load_vocab(l, sf__json_tree_get(l->doc, model, "vocab"));
	if (rc < 0)
		return rc;
	rc = load_merges(l, sf__json_tree_get(l->doc, model, "merges"));
	if (rc < 0)
		return rc;
	return mark_whole(l);
}

/* ---- normalizer, decoder, added tokens ---- */

static int load_normalizer(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path)
{
	const char *type;
	char where[300];
	uint32_t i;
	int rc;

	if (!obj || obj->type == SF_JSON_NULL)
		return 0;
	if (obj->type == SF_JSON_OBJECT && (rc = refuse_repeated_fields(l, obj, path)) < 0)
		return rc;
	type = obj->type == SF_JSON_OBJECT ? sf__hf_type_of(l, obj) : NULL;
	snprintf(where, sizeof(where), "%s.type", path);
	if (!type)
		return sf__hf_refuse(l, where, "missing");
	if (!strcmp(type, "Sequence")) {
		const struct sf_json_node *list = sf__json_tree_get(l->doc, obj, "normalizers");

		snprintf(where, sizeof(where), "%s.normalizers", path);
		if (!list || list->type != SF_JSON_ARRAY)
			return sf__hf_refuse(l, where, "expected a list");
		for (i = 0; i < list->len; i++) {
			snprintf(where, sizeof(where), "%s.normalizers[%u]", path, i);
			rc = load_normalizer(l, sf__json_tree_child(l->doc, list, i), where);
			if (rc < 0)
				return rc;
		}
		return 0;
	}
	if (!strcmp(type, "NFC")) {
		l->hf->nfc = true;
		return 0;
	}
	return sf__hf_refuse(l, where, "\"%s\" not supported", type);
}

static int load_decoder(struct sf_hf_loader *l, const struct sf_json_node *obj)
{
	const char *type;
	int rc;

	if (!obj || obj->type != SF_JSON_OBJECT)
		return sf__hf_refuse(l, "decoder",
				     "missing (a byte-level BPE needs the ByteLevel "
				     "decoder)");
	rc = refuse_repeated_fields(l, obj, "decoder");
	if (rc < 0)
		return rc;
	type = sf__hf_type_of(l, obj);
	if (!type)
		return sf__hf_refuse(l, "decoder.type", "missing");
	if (strcmp(type, "ByteLevel"))
		return sf__hf_refuse(l, "decoder.type", "\"%s\" not supported (only \"ByteLevel\")",
				     type);
	return 0;
}

static int load_doc(struct sf_hf_loader *l)
{
	static const char *const known[] = {
		"version",	 "truncation", "padding",	 "added_tokens", "normalizer",
		"pre_tokenizer", "model",      "post_processor", "decoder",	 NULL};
	const struct sf_json_node *root = sf__json_tree_root(l->doc), *n;
	bool seen_byte_level = false;
	int rc;

	if (root->type != SF_JSON_OBJECT)
		return sf__hf_refuse(l, "(top level)", "expected an object");
	rc = sf__hf_only_keys(l, root, "(top level)", known);
	if (rc < 0)
		return rc;
	/* tokenizers knows the version "1.0" only (and a file without one). */
	n = sf__json_tree_get(l->doc, root, "version");
	if (n && !(n->type == SF_JSON_STRING && !strcmp(sf__json_tree_str(l->doc, n), "1.0") &&
		   n->len == 3))
		return sf__hf_refuse(l, "version",
				     "%s%s%s is not \"1.0\", the one tokenizers knows",
				     n->type == SF_JSON_STRING ? "\"" : "",
				     n->type == SF_JSON_STRING || n->type == SF_JSON_NUMBER
					     ? sf__json_tree_str(l->doc, n)
					     : "a non-string",
				     n->type == SF_JSON_STRING ? "\"" : "");
	n = sf__json_tree_get(l->doc, root, "truncation");
	if (n && n->type != SF_JSON_NULL)
		return sf__hf_refuse(l, "truncation", "not supported (must be null)");
	n = sf__json_tree_get(l->doc, root, "padding");
	if (n && n->type != SF_JSON_NULL)
		return sf__hf_refuse(l, "padding", "not supported (must be null)");
	rc = load_model(l, sf__json_tree_get(l->doc, root, "model"));
	if (rc < 0)
		return rc;
	rc = load_normalizer(l, sf__json_tree_get(l->doc, root, "normalizer"), "normalizer");
	if (rc < 0)
		return rc;
	n = sf__json_tree_get(l->doc, root, "pre_tokenizer");
	if (!n || n->type == SF_JSON_NULL)
		return sf__hf_refuse(l, "pre_tokenizer",
				     "missing (a byte-level BPE needs ByteLevel)");
	rc = sf__hf_load_pretok(l, n, "pre_tokenizer", &seen_byte_level);
	if (rc < 0)
		return rc;
	if (!seen_byte_level)
		return sf__hf_refuse(l, "pre_tokenizer", "no ByteLevel: not a byte-level BPE");
	rc = load_decoder(l, sf__json_tree_get(l->doc, root, "decoder"));
	if (rc < 0)
		return rc;
	rc = sf__hf_load_added(l, sf__json_tree_get(l->doc, root, "added_tokens"));
	if (rc < 0)
		return rc;
	return sf__hf_build_extra(
		l, sf__json_tree_get(l->doc, sf__json_tree_get(l->doc, root, "model"), "vocab"));
}

int sf__tok_load_hf_json_mem(const char *name, const char *text, size_t len,
			     struct sf_tok **ret_tok, struct sf_err *e)
{
	struct sf_hf_loader l = {.name = name, .e = e};
	struct sf_json_doc *doc = NULL;
	const char *what = NULL;
	size_t at = 0;
	int rc;

	byte_alphabet(&l);
	rc = sf__json_tree_parse(text, len, &doc, &at, &what);
	if (rc == -ENOMEM)
		return sf__hf_oom(&l);
	if (rc != SF_JSON_OK)
		return sf__err(e, SF_E_TOKENIZER, "%s: not valid JSON at byte %zu: %s", name, at,
			       what);
	l.doc = doc;
	l.tok = sf__tok_new(name, SF_TOK_HF);
	l.hf = calloc(1, sizeof(*l.hf));
	if (!l.tok || !l.hf) {
		sf__tok_free(l.tok);
		free(l.hf);
		sf__json_tree_free(doc);
		return sf__hf_oom(&l);
	}
	l.tok->hf = l.hf;
	rc = load_doc(&l);
	free(l.odd);
	sf__json_tree_free(doc);
	if (rc < 0) {
		sf__tok_free(l.tok);
		return rc;
	}
	*ret_tok = l.tok;
	return 0;
}

int sf__tok_load_hf_json(const char *path, struct sf_tok **ret_tok, struct sf_err *e)
{
	const char *base = strrchr(path, '/');
	uint8_t *text = NULL;
	size_t len = 0;
	int rc;

	rc = sf__tok_read_file(path, &text, &len, e);
	if (rc < 0)
		return rc;
	rc = sf__tok_load_hf_json_mem(base ? base + 1 : path, (const char *)text, len, ret_tok, e);
	free(text);
	return rc;
}

void sf__hf_free(struct sf_tok_hf *hf)
{
	uint32_t i;

	if (!hf)
		return;
	for (i = 0; i < hf->n_stages; i++) {
		pcre2_code_free(hf->stages[i].re);
		pcre2_code_free(hf->stages[i].re_fast);
	}
	for (i = 0; i < hf->n_added; i++)
		free(hf->added[i].text);
	free(hf->added);
	free(hf->raw.tokens);
	free(hf->raw.prefix);
	free(hf->raw.bucket);
	free(hf->norm.tokens);
	free(hf->norm.prefix);
	free(hf->norm.bucket);
	free(hf->merges);
	free(hf->whole);
	free(hf->extra_ids);
	free(hf->extra_off);
	free(hf->extra_bytes);
	free(hf);
}
