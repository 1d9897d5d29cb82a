/*
 * Tokenizer objects: the built-in encodings and their special tokens, loading (BPE from a
 * .tiktoken file, the byte tokenizer, the character tokenizer from a corpus), lookups of
 * special tokens, and decoding ids back to bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/sp_shim.h"
#include "producer/tokenizer/sp_split.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"

static const char eot_text[] = "<|endoftext|>";

struct preset {
	const char *name;
	const char *alias;
	int pretok;
	struct sf_tok_special specials[5];
	uint32_t n_specials;
	uint32_t n_ranks; /* of its published .tiktoken file */
};

/* The special tokens are those of tiktoken_ext/openai_public.py. */
static const struct preset presets[] = {
	{"r50k_base", "gpt2", SF_PRETOK_R50K, {{eot_text, 50256}}, 1, 50256},
	{"cl100k_base",
	 NULL,
	 SF_PRETOK_CL100K,
	 {{eot_text, 100257},
	  {"<|fim_prefix|>", 100258},
	  {"<|fim_middle|>", 100259},
	  {"<|fim_suffix|>", 100260},
	  {"<|endofprompt|>", 100276}},
	 5,
	 100256},
	{"o200k_base",
	 NULL,
	 SF_PRETOK_O200K,
	 {{eot_text, 199999}, {"<|endofprompt|>", 200018}},
	 2,
	 199998},
};

int sf__tok_add_special(struct sf_tok *tok, const char *text, uint32_t id, struct sf_err *e)
{
	struct sf_tok_special_entry *s;

	if (tok->n_specials == SF_TOK_MAX_SPECIALS)
		return sf__err(e, SF_E_TOKENIZER, "%s: more than %d special tokens", tok->name,
			       SF_TOK_MAX_SPECIALS);
	if (!*text)
		return sf__err(e, SF_E_TOKENIZER, "%s: empty special token", tok->name);
	if (tok->n_specials == tok->cap_specials) {
		uint32_t cap = tok->cap_specials ? tok->cap_specials * 2 : 8;

		s = realloc(tok->specials, cap * sizeof(*s));
		if (!s)
			return sf__err(e, -ENOMEM, "%s: out of memory", tok->name);
		tok->specials = s;
		tok->cap_specials = cap;
	}
	s = &tok->specials[tok->n_specials];
	s->text = strdup(text);
	if (!s->text)
		return sf__err(e, -ENOMEM, "%s: out of memory", tok->name);
	s->len = (uint32_t)strlen(text);
	s->id = id;
	tok->n_specials++;
	if (id >= tok->n_vocab)
		tok->n_vocab = id + 1;
	/* The end of text of the built-in encodings; a file's own choice, made before its
	 * specials are added (SentencePiece's eos id, a tokenizer.json's first end-of-text
	 * token), stands. */
	if (tok->eot < 0 && !strcmp(text, eot_text))
		tok->eot = (int32_t)id;
	return 0;
}

struct sf_tok *sf__tok_new(const char *name, int kind)
{
	struct sf_tok *tok = calloc(1, sizeof(*tok));

	if (!tok)
		return NULL;
	snprintf(tok->name, sizeof(tok->name), "%s", name);
	tok->kind = kind;
	tok->eot = -1;
	tok->bos = -1;
	return tok;
}

int sf__tok_finish_bpe(struct sf_tok *tok, const char *pattern, struct sf_err *e)
{
	uint32_t i;

	for (i = 0; i < tok->n_specials; i++) {
		uint32_t id = tok->specials[i].id;

		if (id < tok->ranks.n_ranks && tok->ranks.off[id] != tok->ranks.off[id + 1])
			return sf__err(e, SF_E_TOKENIZER,
				       "%s: special token %s has the id %u of a rank", tok->name,
				       tok->specials[i].text, id);
	}
	tok->pretok = sf__pretok_preset(pattern);
	if (!tok->pretok)
		tok->pretok = sf__pretok_family_preset(pattern);
	if (!tok->pretok) {
		tok->pretok = SF_PRETOK_PCRE;
		return sf__pcre_compile(pattern, &tok->re, &tok->re_fast, e);
	}
	return 0;
}

int sf__tok_every_byte(const struct sf_tok_ranks *r, const char *what, struct sf_err *e)
{
	for (unsigned i = 0; i < 256; i++)
		if (r->byte_rank[i] == SF_RANK_NONE)
			return sf__err(e, SF_E_TOKENIZER,
				       "%s: no token for the byte 0x%02x: a byte-level BPE vocabulary "
				       "needs one for each of the 256 bytes",
				       what, i);
	return 0;
}

int sf__tok_load_spec(const struct sf_tok_spec *spec, struct sf_tok **ret_tok, struct sf_err *e)
{
	struct sf_tok *tok;
	uint32_t i;
	int rc;

	tok = sf__tok_new(spec->name, SF_TOK_BPE);
	if (!tok)
		return sf__err(e, -ENOMEM, "out of memory");
	rc = sf__tok_ranks_load(&tok->ranks, spec->vocab_path, e);
	if (rc >= 0)
		rc = sf__tok_every_byte(&tok->ranks, spec->vocab_path, e);
	if (rc < 0)
		goto fail;
	tok->n_vocab = tok->ranks.n_ranks;
	for (i = 0; i < spec->n_specials; i++) {
		rc = sf__tok_add_special(tok, spec->specials[i].text, spec->specials[i].id, e);
		if (rc < 0)
			goto fail;
	}
	rc = sf__tok_finish_bpe(tok, spec->pattern, e);
	if (rc < 0)
		goto fail;
	*ret_tok = tok;
	return 0;
fail:
	sf__tok_free(tok);
	return rc;
}

static int load_bytes(struct sf_tok **ret_tok, struct sf_err *e)
{
	struct sf_tok *tok = sf__tok_new("bytes", SF_TOK_BYTES);
	int rc;

	if (!tok)
		return sf__err(e, -ENOMEM, "out of memory");
	tok->n_vocab = 256;
	rc = sf__tok_add_special(tok, eot_text, 256, e);
	if (rc < 0) {
		sf__tok_free(tok);
		return rc;
	}
	*ret_tok = tok;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The character tokenizer works on code points, as nanoGPT's shakespeare_char does with
 * Python characters, so that its vocabulary and ids are the same as nanoGPT's.
 */
static int load_char(const char *name, const char *path, struct sf_tok **ret_tok, struct sf_err *e)
{
	uint8_t *seen = NULL, *buf = NULL;
	size_t cap = 1 << 16, len = 0, got, i;
	struct sf_tok *tok;
	FILE *f = NULL;
	uint32_t cp;
	int rc;

	tok = sf__tok_new(name, SF_TOK_CHAR);
	seen = calloc(0x110000, 1);
	buf = malloc(cap);
	if (!tok || !seen || !buf) {
		rc = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	/* Any size: the corpus is read as a stream, and only its alphabet is kept. */
	rc = sf__tok_open_regular(path, 0, &f, e);
	if (rc < 0)
		goto out;
	/* Read in blocks, carrying an incomplete character over to the next block. */
	for (;;) {
		size_t pos = 0;

		errno = 0;
		got = fread(buf + len, 1, cap - len, f);
		len += got;
		while (pos < len) {
			size_t step = sf__utf8_next(buf + pos, len - pos, &cp);

			if (cp == SF_UC_INVALID && got && len - pos < 4)
				break;
			if (cp == SF_UC_INVALID) {
				rc = sf__err(e, SF_E_TOKENIZER, "%s: not valid UTF-8", path);
				goto out;
			}
			seen[cp] = 1;
			pos += step;
		}
		memmove(buf, buf + pos, len - pos);
		len -= pos;
		if (!got)
			break;
	}
	if (ferror(f)) {
		const int code = errno ? errno : EIO;

		rc = sf__err(e, -code, "cannot read %s: %s", path, strerror(code));
		goto out;
	}
	for (cp = 0; cp < 0x110000; cp++)
		tok->n_chars += seen[cp];
	if (!tok->n_chars) {
		rc = sf__err(e, SF_E_TOKENIZER, "%s: empty corpus", path);
		goto out;
	}
	tok->chars = malloc(tok->n_chars * sizeof(*tok->chars));
	if (!tok->chars) {
		rc = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (cp = 0, i = 0; cp < 0x110000; cp++)
		if (seen[cp])
			tok->chars[i++] = cp;
	qsort(tok->chars, tok->n_chars, sizeof(*tok->chars), cmp_u32);
	tok->n_vocab = tok->n_chars;
	rc = sf__tok_add_special(tok, eot_text, tok->n_chars, e);
	if (rc < 0)
		goto out;
	*ret_tok = tok;
	tok = NULL;
out:
	if (f)
		fclose(f);
	free(buf);
	free(seen);
	sf__tok_free(tok);
	return rc;
}

const char *sf__tok_vocab_name(const char *encoding)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (presets[i].alias && !strcmp(encoding, presets[i].alias))
			return presets[i].name;
	return encoding;
}

int sf__tok_load(const char *encoding, const char *vocab_path, struct sf_tok **ret_tok,
		 struct sf_err *e)
{
	const struct preset *p = NULL;
	struct sf_tok_spec spec;
	char path[4096];
	const char *dir;
	size_t i;
	int rc;

	if (!strcmp(encoding, "bytes"))
		return load_bytes(ret_tok, e);
	if (!strncmp(encoding, "char:", 5))
		return load_char(encoding, encoding + 5, ret_tok, e);
	for (i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcmp(encoding, presets[i].name) ||
		    (presets[i].alias && !strcmp(encoding, presets[i].alias)))
			p = &presets[i];
	if (!p)
		return sf__err(e, SF_E_TOKENIZER,
			       "unknown encoding '%s' (r50k_base, gpt2, cl100k_base, o200k_base, "
			       "bytes, char:CORPUS)",
			       encoding);
	if (!vocab_path) {
		dir = getenv(SF_TOK_VOCAB_DIR_ENV);
		if (!dir || !*dir)
			return sf__err(
				e, SF_E_TOKENIZER,
				"%s: no vocabulary file given (a job's tokenizer.vocab or "
				"tokenizer.vocab_dir, --vocab on the command line) and %s is "
				"not set; download "
				"https://openaipublic.blob.core.windows.net/encodings/"
				"%s.tiktoken",
				p->name, SF_TOK_VOCAB_DIR_ENV, p->name);
		if ((size_t)snprintf(path, sizeof(path), "%s/%s.tiktoken", dir, p->name) >=
		    sizeof(path))
			return sf__err(e, -ENAMETOOLONG, "%s: path too long", SF_TOK_VOCAB_DIR_ENV);
		vocab_path = path;
	}
	spec.name = p->name;
	spec.vocab_path = vocab_path;
	spec.pattern = sf__pretok_pattern(p->pretok);
	spec.specials = p->specials;
	spec.n_specials = p->n_specials;
	rc = sf__tok_load_spec(&spec, ret_tok, e);
	/* Another encoding's file would give other ids for every word, without a sign. */
	if (rc == 0 && (*ret_tok)->ranks.n_ranks != p->n_ranks) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: %s has %u ranks, and %s's vocabulary has %u: the file of "
			     "another encoding?",
			     p->name, vocab_path, (*ret_tok)->ranks.n_ranks, p->name, p->n_ranks);
		sf__tok_free(*ret_tok);
		*ret_tok = NULL;
	}
	return rc;
}

void sf__tok_free(struct sf_tok *tok)
{
	uint32_t i;

	if (!tok)
		return;
	for (i = 0; i < tok->n_specials; i++)
		free(tok->specials[i].text);
	free(tok->specials);
	sf__sp_free(tok->sp);
	sf__sp_split_free(tok->sp_split);
	sf__tok_ranks_free(&tok->ranks);
	pcre2_code_free(tok->re);
	pcre2_code_free(tok->re_fast);
	free(tok->chars);
	sf__hf_free(tok->hf);
	free(tok);
}

const char *sf__tok_name(const struct sf_tok *tok)
{
	return tok->name;
}

uint32_t sf__tok_n_vocab(const struct sf_tok *tok)
{
	return tok->n_vocab;
}

int sf__tok_eot(const struct sf_tok *tok)
{
	return tok->eot >= 0 ? tok->eot : SF_E_TOKENIZER;
}

int sf__tok_bos(const struct sf_tok *tok)
{
	return tok->bos >= 0 ? tok->bos : SF_E_TOKENIZER;
}

size_t sf__tok_first_char(const struct sf_tok *tok, char out[4])
{
	if (tok->kind != SF_TOK_CHAR || !tok->n_chars)
		return 0;
	return sf__utf8_encode(tok->chars[0], (uint8_t *)out);
}

const char *sf__tok_special_text(const struct sf_tok *tok, uint32_t id)
{
	for (uint32_t i = 0; i < tok->n_specials; i++)
		if (tok->specials[i].id == id)
			return tok->specials[i].text;
	return NULL;
}

int sf__tok_marker(const struct sf_tok *tok, const char *policy, int is_bos, int32_t *ret_id,
		   struct sf_err *e)
{
	const char *what = is_bos ? "bos" : "eos", *special;
	int id;

	if (!strcmp(policy, "auto")) {
		*ret_id = is_bos ? tok->bos : tok->eot;
		return 0;
	}
	if (!strcmp(policy, "none")) {
		if (!is_bos)
			return sf__err(e, SF_E_TOKENIZER,
				       "%s: eos none: documents need a token that ends them",
				       tok->name);
		*ret_id = -1;
		return 0;
	}
	id = sf__tok_special(tok, policy, NULL);
	if (id < 0 && policy[0] && policy[strspn(policy, "0123456789")] == '\0' &&
	    strlen(policy) < 10 &&
	    (special = sf__tok_special_text(tok, (uint32_t)strtoul(policy, NULL, 10))))
		return sf__err(e, SF_E_TOKENIZER,
			       "%s: %s %s: the id of %s; give its text (%s: "
			       "\"%s\")",
			       tok->name, what, policy, special, what, special);
	if (id < 0)
		return sf__err(e, SF_E_TOKENIZER, "%s: %s %s is not a special token of %s",
			       tok->name, what, policy, tok->name);
	*ret_id = id;
	return 0;
}

const char *sf__tok_family(const struct sf_tok *tok)
{
	return tok->family;
}

const char *sf__tok_how(const struct sf_tok *tok, char *buf, size_t cap)
{
	const char *why;
	bool dummy_prefix;

	if (tok->kind != SF_TOK_SP)
		return NULL;
	if (sf__sp_parts(tok->sp, &dummy_prefix, &why))
		snprintf(buf, cap, "in parts");
	else
		snprintf(buf, cap, "whole: %s", why);
	return buf;
}

size_t sf__tok_ids_bound(const struct sf_tok *tok, size_t len)
{
	switch (tok->kind) {
	case SF_TOK_SP:
		return SIZE_MAX;
	case SF_TOK_HF:
		/* NFC makes text at most 3 times longer; a prefix space at most doubles it. */
		return (len + 1) * (tok->hf->nfc ? 3 : 1) * (1 + tok->hf->max_growth);
	default:
		return len + 1;
	}
}

bool sf__tok_text_may_give(const struct sf_tok *tok, uint32_t id)
{
	/* tokenizer.json: a token the merges build from its own bytes (a special token in
	 * model.vocab is one where they do), or under ignore_merges any with bytes, which a
	 * piece of those bytes becomes whole; elsewhere every rank, and no special. */
	if (id >= tok->ranks.n_ranks)
		return false;
	if (tok->hf && !tok->hf->ignore_merges)
		return tok->hf->whole && (tok->hf->whole[id / 8] >> (id % 8) & 1);
	return tok->ranks.off[id] != tok->ranks.off[id + 1];
}

int sf__tok_special(const struct sf_tok *tok, const char *text, uint64_t *ret_bit)
{
	uint32_t i;

	for (i = 0; i < tok->n_specials; i++) {
		if (!strcmp(tok->specials[i].text, text)) {
			if (ret_bit)
				*ret_bit = (uint64_t)1 << (i < 63 ? i : 63);
			return (int)tok->specials[i].id;
		}
	}
	return -ENOENT;
}

const char *sf__tok_unicode_version(void)
{
	return sf__uc_version;
}

/*
 * The bytes of one id: a pointer into the tokenizer, or into `scratch` (4 bytes) for a
 * byte or a character. Returns the length, or -1 for an id the tokenizer does not have.
 */
static long id_bytes(const struct sf_tok *tok, uint32_t id, const uint8_t **ret, uint8_t *scratch)
{
	uint32_t i;
	long len;

	switch (tok->kind) {
	case SF_TOK_HF:
		len = sf__hf_id_bytes(tok->hf, id, ret);
		if (len >= 0)
			return len;
		/* The byte-level tokens are in the rank table. */
		__attribute__((fallthrough));
	case SF_TOK_BPE:
		if (id < tok->ranks.n_ranks && tok->ranks.off[id] != tok->ranks.off[id + 1]) {
			*ret = tok->ranks.bytes + tok->ranks.off[id];
			return tok->ranks.off[id + 1] - tok->ranks.off[id];
		}
		break;
	case SF_TOK_BYTES:
		if (id < 256) {
			scratch[0] = (uint8_t)id;
			*ret = scratch;
			return 1;
		}
		break;
	default:
		if (id < tok->n_chars) {
			*ret = scratch;
			return (long)sf__utf8_encode(tok->chars[id], scratch);
		}
		break;
	}
	for (i = 0; i < tok->n_specials; i++) {
		if (tok->specials[i].id == id) {
			*ret = (const uint8_t *)tok->specials[i].text;
			return tok->specials[i].len;
		}
	}
	return -1;
}

/*
 * SentencePiece decodes whole sequences (a piece's leading U+2581 is a space except at
 * the start), so the library decodes; `buf` NULL only measures.
 */
static int sp_decode(const struct sf_tok *tok, const uint32_t *ids, size_t n, void *buf, size_t cap,
		     size_t *ret_len, struct sf_err *e)
{
	char msg[256] = "";
	size_t len = 0;
	int rc = sf__sp_decode(tok->sp, ids, n, buf, cap, &len, msg, sizeof(msg));

	if (rc == -ENOBUFS && !buf) {
		*ret_len = len;
		return 0;
	}
	if (rc == -ENOBUFS)
		return sf__err(e, rc, "%s: decode buffer of %zu bytes too small", tok->name, cap);
	if (rc < 0)
		return sf__err(e, rc, "%s: %s", tok->name, msg);
	*ret_len = len;
	return 0;
}

int sf__tok_decoded_len(const struct sf_tok *tok, const uint32_t *ids, size_t n, size_t *ret_len,
			struct sf_err *e)
{
	const uint8_t *bytes;
	uint8_t scratch[4];
	size_t i, total = 0;
	long len;

	if (tok->kind == SF_TOK_SP)
		return sp_decode(tok, ids, n, NULL, 0, ret_len, e);
	for (i = 0; i < n; i++) {
		len = id_bytes(tok, ids[i], &bytes, scratch);
		if (len < 0)
			return sf__err(e, SF_E_TOKENIZER, "%s: unknown id %u at index %zu",
				       tok->name, ids[i], i);
		total += (size_t)len;
	}
	*ret_len = total;
	return 0;
}

int sf__tok_decode(const struct sf_tok *tok, const uint32_t *ids, size_t n, void *buf, size_t cap,
		   size_t *ret_len, struct sf_err *e)
{
	uint8_t *out = buf;
	const uint8_t *bytes;
	uint8_t scratch[4];
	size_t i, total = 0;
	long len;

	if (tok->kind == SF_TOK_SP)
		return sp_decode(tok, ids, n, buf, cap, ret_len, e);
	for (i = 0; i < n; i++) {
		len = id_bytes(tok, ids[i], &bytes, scratch);
		if (len < 0)
			return sf__err(e, SF_E_TOKENIZER, "%s: unknown id %u at index %zu",
				       tok->name, ids[i], i);
		if ((size_t)len > cap - total)
			return sf__err(e, -ENOBUFS, "%s: decode buffer of %zu bytes too small",
				       tok->name, cap);
		memcpy(out + total, bytes, (size_t)len);
		total += (size_t)len;
	}
	*ret_len = total;
	return 0;
}
