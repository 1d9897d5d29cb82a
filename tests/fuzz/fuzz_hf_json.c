/*
 * Fuzz target for the tokenizer.json loader: the input is the file. When it loads, the
 * input's own bytes are encoded (special tokens allowed and not) and the ids decoded; any
 * crash, sanitizer report, id the decoder does not know, or an encode failure other than
 * a full buffer is a bug. A refused file is fine: refusing is the loader's job.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the committed
 * corpus (tests/fuzz/corpus/hf_json).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_tok_encoder *enc = NULL;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	size_t len = size < 4096 ? size : 4096, n, out_len;
	const uint32_t *ids;
	char *buf;
	int pass;

	if (sf__tok_load_hf_json_mem("fuzz.json", (const char *)data, size, &tok, &err) < 0)
		return 0;
	if (sf__tok_encoder_create(tok, &enc, &err) < 0)
		abort();
	for (pass = 0; pass < 2; pass++) {
		if (sf__tok_encode(enc, data, len, pass ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE,
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
		free(buf);
	}
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	return 0;
}
