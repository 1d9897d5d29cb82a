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
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/tokenizer.h"
#include "tok_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};

	if (sf__tok_load_hf_json_mem("fuzz.json", (const char *)data, size, &tok, &err) < 0)
		return 0;
	fuzz_tok_check(tok, data, size < 4096 ? size : 4096, false);
	sf__tok_free(tok);
	return 0;
}
