/*
 * Fuzz target for the tokenizer: the first input byte picks a tokenizer (the three BPE
 * encodings, the byte tokenizer, or cl100k's vocabulary under a PCRE2 pattern; with bit
 * 0x40 set, cl100k's vocabulary under the Qwen, Qwen 3.5 and tekken patterns, which run
 * on the family scanners) and whether special tokens are allowed; the rest is encoded,
 * decoded, checked to come back byte for byte, and rendered with U+FFFD replacement. Any
 * crash, sanitizer report or failed round trip is a bug.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the files and
 * directories given as arguments (the committed corpus, in CI). The vocabularies come
 * from $SF_TEST_DATA/vocab; without them it exits 77 (skip).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_TOKS 8

/* The family patterns, as their packages spell them (see docs/tokenizer.md). */
static const char *const family_patterns[] = {
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
	"?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}"
	"\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}"
	"\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

static struct sf_tok *toks[N_TOKS];
static struct sf_tok_encoder *encs[N_TOKS];

static void setup(void)
{
	static const char *const names[] = {"r50k_base", "cl100k_base", "o200k_base"};
	static const struct sf_tok_special specials[] = {{"<|endoftext|>", 100257}};
	const char *dir = getenv("SF_TEST_DATA");
	struct sf_tok_spec spec = {.name = "custom",
				   .pattern =
					   "'s|\\p{L}+|\\p{N}{1,2}|\\s+(?!\\S)|\\s|[^\\s\\p{L}]+",
				   .specials = specials,
				   .n_specials = 1};
	struct sf_err err = {0};
	char path[4096];
	int i;

	for (i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/vocab/%s.tiktoken", dir ? dir : ".", names[i]);
		if (sf__tok_load(names[i], path, &toks[i], &err) < 0) {
			fprintf(stderr, "skip: %s (set SF_TEST_DATA to ../shared/data)\n", err.msg);
			exit(77);
		}
	}
	if (sf__tok_load("bytes", NULL, &toks[3], &err) < 0)
		abort();
	snprintf(path, sizeof(path), "%s/vocab/cl100k_base.tiktoken", dir ? dir : ".");
	spec.vocab_path = path;
	if (sf__tok_load_spec(&spec, &toks[4], &err) < 0)
		abort();
	for (i = 0; i < 3; i++) {
		spec.pattern = family_patterns[i];
		if (sf__tok_load_spec(&spec, &toks[5 + i], &err) < 0)
			abort();
	}
	for (i = 0; i < N_TOKS; i++)
		if (sf__tok_encoder_create(toks[i], &encs[i], &err) < 0)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint32_t *ids;
	size_t n, len, shown_len;
	uint8_t *back;
	char *shown;
	int which;

	if (!toks[0])
		setup();
	if (size < 1)
		return 0;
	/* The five of the first corpus keep their bytes; 0x40 picks a family pattern. */
	which = data[0] & 0x40 ? 5 + (data[0] & 0x3f) % 3 : data[0] % 5;
	if (sf__tok_encode(encs[which], data + 1, size - 1,
			   data[0] & 0x80 ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE, &ids, &n,
			   NULL) < 0)
		abort();
	back = malloc(size);
	if (sf__tok_decode(toks[which], ids, n, back, size - 1, &len, NULL) < 0 ||
	    len != size - 1 || memcmp(back, data + 1, len))
		abort();
	shown = malloc(3 * size);
	shown_len = sf__utf8_replace(data + 1, size - 1, shown);
	if (shown_len > 3 * (size - 1))
		abort();
	free(shown);
	free(back);
	return 0;
}
