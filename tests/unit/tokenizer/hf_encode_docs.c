/*
 * A helper of the tokenizer.json tests (test_hf_json.py): loads a tokenizer.json and
 * encodes documents framed on standard input, each a little-endian uint32 byte count and
 * the bytes, writing for each a uint32 id count and the ids (little-endian uint32). With
 * --specials the special tokens are allowed (SF_TOK_ALLOW_ALL), otherwise none is; with
 * --decode it decodes the ids it produced and fails unless they give the document back.
 * Exit status 1 with the loader's message on standard error when the file is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/tokenizer.h"

static int read_exact(void *buf, size_t len)
{
	return fread(buf, 1, len, stdin) == len ? 0 : -1;
}

int main(int argc, char **argv)
{
	uint64_t allowed = SF_TOK_ALLOW_NONE;
	struct sf_tok_encoder *enc = NULL;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	uint8_t *doc = NULL, *back = NULL;
	size_t cap = 0;
	int i, decode = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: hf_encode_docs TOKENIZER.json [--specials] [--decode]\n");
		return 2;
	}
	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--specials"))
			allowed = SF_TOK_ALLOW_ALL;
		else if (!strcmp(argv[i], "--decode"))
			decode = 1;
	}
	if (sf__tok_load_hf_json(argv[1], &tok, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	if (sf__tok_encoder_create(tok, &enc, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	for (;;) {
		const uint32_t *ids;
		uint32_t len, n32;
		size_t n, back_len;

		if (read_exact(&len, 4) < 0)
			break;
		if (len + 1 > cap) {
			cap = 2 * ((size_t)len + 1);
			doc = realloc(doc, cap);
			back = realloc(back, 4 * cap);
			if (!doc || !back)
				return 1;
		}
		if (read_exact(doc, len) < 0)
			return 1;
		if (sf__tok_encode(enc, doc, len, allowed, &ids, &n, &err) < 0) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		if (decode && (sf__tok_decode(tok, ids, n, back, 4 * cap, &back_len, &err) < 0 ||
			       back_len != len || memcmp(back, doc, len))) {
			fprintf(stderr, "decode does not give the document back: %s\n", err.msg);
			return 1;
		}
		n32 = (uint32_t)n;
		if (fwrite(&n32, 4, 1, stdout) != 1 || fwrite(ids, 4, n, stdout) != n)
			return 1;
	}
	fflush(stdout);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	free(doc);
	free(back);
	return 0;
}
