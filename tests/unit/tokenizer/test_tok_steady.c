/*
 * The tokenizer allocates nothing per document in the steady state: malloc, calloc,
 * realloc and mmap are interposed and counted while one encoder per tokenizer encodes all
 * of tinyshakespeare split into documents at its blank lines, after a warm-up on the
 * first few documents and the longest one (an encoder's buffers grow to the largest document
 * it has seen and then stay). Every BPE encoding, the byte tokenizer and the character
 * tokenizer are checked, and a Hugging Face tokenizer.json ($SF_HF_JSON, a small
 * byte-level file of the fuzz corpus); each must make 0 allocations over the whole
 * corpus, and the ids of the documents must decode back to the corpus byte for byte.
 *
 * A plain program (exit 0 pass, 1 fail, 77 skip), since Criterion's runner allocates
 * around each test. The sanitizers interpose the allocator themselves, so under them the
 * count is skipped and only the round trip is checked.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/tokenizer.h"
#include "tests/alloc_count.h"
#include "tok_test_util.h"

/* Documents the encoder is warmed up on: the first few, and then the longest one. */
#define WARM_FIRST 4

struct doc {
	size_t off, len;
};

/* Split text at blank lines: each document ends just after a "\n\n" or at the end. */
static struct doc *split(const char *text, size_t len, size_t *ret_n)
{
	struct doc *docs = NULL;
	size_t n = 0, cap = 0, start = 0, i;

	for (i = 0; i < len; i++) {
		bool end = i + 1 == len || (text[i] == '\n' && i > start && text[i - 1] == '\n');

		if (!end)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			docs = realloc(docs, cap * sizeof(*docs));
			if (!docs)
				return NULL;
		}
		docs[n].off = start;
		docs[n].len = i + 1 - start;
		n++;
		start = i + 1;
	}
	*ret_n = n;
	return docs;
}

static int encode_doc(struct sf_tok_encoder *enc, const char *text, const struct doc *d,
		      const uint32_t **ret_ids, size_t *ret_n)
{
	struct sf_err err = {0};

	if (sf__tok_encode(enc, text + d->off, d->len, SF_TOK_ALLOW_NONE, ret_ids, ret_n, &err) <
	    0) {
		fprintf(stderr, "encode: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/*
 * Warm `tok`'s encoder up, then encode every document with the counter reset; returns 0
 * when nothing was allocated and the ids decode back to the text.
 */
static int check(const char *encoding, struct sf_tok *tok, const char *text, size_t len,
		 const struct doc *docs, size_t n_docs)
{
	struct sf_tok_encoder *enc;
	struct sf_err err = {0};
	const uint32_t *ids;
	size_t n, i, longest = 0, back_len, total_ids = 0, decoded = 0;
	char *back = malloc(len);
	unsigned long counted;
	int fail = 0;

	if (!back || sf__tok_encoder_create(tok, &enc, &err) < 0) {
		fprintf(stderr, "%s: cannot make an encoder: %s\n", encoding, err.msg);
		free(back);
		return 1;
	}
	for (i = 0; i < WARM_FIRST && i < n_docs; i++)
		if (encode_doc(enc, text, &docs[i], &ids, &n) < 0)
			goto out_fail;
	/* The longest document: the id buffer then holds any of them. */
	for (i = 1; i < n_docs; i++)
		if (docs[i].len > docs[longest].len)
			longest = i;
	if (encode_doc(enc, text, &docs[longest], &ids, &n) < 0)
		goto out_fail;

	alloc_count_reset();
	for (i = 0; i < n_docs; i++) {
		if (encode_doc(enc, text, &docs[i], &ids, &n) < 0)
			goto out_fail;
		if (sf__tok_decode(tok, ids, n, back + decoded, len - decoded, &back_len, &err) <
		    0) {
			fprintf(stderr, "%s: decode: %s\n", encoding, err.msg);
			goto out_fail;
		}
		decoded += back_len;
		total_ids += n;
	}
	counted = alloc_count();

	if (decoded != len || memcmp(back, text, len)) {
		fprintf(stderr, "FAIL: %s: the documents do not decode back to the corpus\n",
			encoding);
		fail = 1;
	}
#ifdef SANITIZED
	(void)counted;
	printf("%-12s %zu documents, %zu ids: allocation count skipped under a sanitizer\n",
	       encoding, n_docs, total_ids);
#else
	printf("%-12s %zu documents, %zu ids: %lu allocations\n", encoding, n_docs, total_ids,
	       counted);
	if (counted)
		fail = 1;
#endif
	sf__tok_encoder_free(enc);
	free(back);
	return fail;

out_fail:
	sf__tok_encoder_free(enc);
	free(back);
	return 1;
}

int main(void)
{
	static const char *const bpe[] = {"r50k_base", "cl100k_base", "o200k_base"};
	const char *dir = tok_test_data();
	struct sf_err err = {0};
	struct sf_tok *tok;
	char path[4096], spec[4200];
	struct doc *docs;
	size_t len, n_docs, i;
	char *text;
	int fail = 0;

#ifndef SANITIZED
	/* The counter must see what it is meant to count, or a zero proves nothing. */
	alloc_count_require();
#endif
	snprintf(path, sizeof(path), "%s/corpus/tinyshakespeare.txt", dir);
	text = tok_test_read(path, &len);
	if (!text) {
		fprintf(stderr, "cannot read %s\n", path);
		return 1;
	}
	docs = split(text, len, &n_docs);
	if (!docs || n_docs < 100) {
		fprintf(stderr, "FAIL: %s: expected many blank-line separated documents\n", path);
		return 1;
	}

	for (i = 0; i < sizeof(bpe) / sizeof(bpe[0]); i++) {
		tok = tok_test_load(bpe[i]);
		if (!tok)
			return 1;
		fail |= check(bpe[i], tok, text, len, docs, n_docs);
		sf__tok_free(tok);
	}
	if (sf__tok_load("bytes", NULL, &tok, &err) < 0) {
		fprintf(stderr, "load bytes: %s\n", err.msg);
		return 1;
	}
	fail |= check("bytes", tok, text, len, docs, n_docs);
	sf__tok_free(tok);
	snprintf(spec, sizeof(spec), "char:%s", path);
	if (sf__tok_load(spec, NULL, &tok, &err) < 0) {
		fprintf(stderr, "load %s: %s\n", spec, err.msg);
		return 1;
	}
	fail |= check("char", tok, text, len, docs, n_docs);
	sf__tok_free(tok);
	if (getenv("SF_HF_JSON")) {
		if (sf__tok_load_hf_json(getenv("SF_HF_JSON"), &tok, &err) < 0) {
			fprintf(stderr, "load %s: %s\n", getenv("SF_HF_JSON"), err.msg);
			return 1;
		}
		fail |= check("tokenizer.json", tok, text, len, docs, n_docs);
		sf__tok_free(tok);
	}

	free(docs);
	free(text);
	printf("%s\n", fail ? "FAIL" : "ok");
	return fail;
}
