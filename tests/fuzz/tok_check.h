/*
 * The check that the tokenizer-file fuzz targets make of a tokenizer that loaded: `text`
 * encoded with special tokens allowed and not, the ids within sf__tok_ids_bound() and
 * decoded, and, with `round_trip`, the ids of the first pass decoded back to `text`. An
 * encode or decode failure (other than memory) means the loader took a file its
 * tokenizer cannot run: it aborts, as every broken promise in a fuzz target does.
 */
#ifndef SF_TESTS_FUZZ_TOK_CHECK_H
#define SF_TESTS_FUZZ_TOK_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/tokenizer.h"

static void fuzz_tok_check(const struct sf_tok *tok, const uint8_t *text, size_t len,
			   bool round_trip)
{
	struct sf_tok_encoder *enc;
	struct sf_err err = {0};
	const uint32_t *ids;
	size_t n, out_len;
	char *buf;

	if (sf__tok_encoder_create(tok, &enc, &err) < 0) {
		fprintf(stderr, "encoder: %s\n", err.msg);
		abort();
	}
	for (int pass = 0; pass < 2; pass++) {
		if (sf__tok_encode(enc, text, len, pass ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE,
				   &ids, &n, &err) < 0) {
			fprintf(stderr, "encode failed: %s\n", err.msg);
			abort();
		}
		if (n > sf__tok_ids_bound(tok, len)) {
			fprintf(stderr, "%zu ids for %zu bytes: above the bound\n", n, len);
			abort();
		}
		if (sf__tok_decoded_len(tok, ids, n, &out_len, &err) < 0) {
			fprintf(stderr, "decode failed: %s\n", err.msg);
			abort();
		}
		buf = malloc(out_len + 1);
		if (!buf || sf__tok_decode(tok, ids, n, buf, out_len, &out_len, &err) < 0)
			abort();
		if (round_trip && pass == 0 && (out_len != len || memcmp(buf, text, len) != 0)) {
			fprintf(stderr, "%zu bytes decoded back as %zu other bytes\n", len,
				out_len);
			abort();
		}
		free(buf);
	}
	sf__tok_encoder_free(enc);
}

#endif
