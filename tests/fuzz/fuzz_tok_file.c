/*
 * Fuzz target for the tokenizer files of model families (sf__tok_load_file()): the first
 * input byte picks the format (its low 3 bits: auto-detected, .tiktoken lines, tekken JSON,
 * tokenizer.json, SentencePiece model) and, with bit 0x08, a pattern for a .tiktoken file
 * of no known family; the rest is the file, given to the loader through a memfd as a user's
 * file would be. When it loads, the file's own bytes are encoded (special tokens allowed
 * and not), the ids checked against sf__tok_ids_bound() and decoded, and, for .tiktoken
 * and tekken files, decoded back to the encoded bytes. Any crash, sanitizer report or
 * failed check is a bug; a refused file is fine, refusing is the loader's job.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the committed
 * corpus (tests/fuzz/corpus/tok_file).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "producer/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int formats[8] = {
	SF_TOK_FORMAT_AUTO, SF_TOK_FORMAT_TIKTOKEN,	 SF_TOK_FORMAT_TEKKEN,
	SF_TOK_FORMAT_HF,   SF_TOK_FORMAT_SENTENCEPIECE, SF_TOK_FORMAT_AUTO,
	SF_TOK_FORMAT_AUTO, SF_TOK_FORMAT_TIKTOKEN,
};

static void check(const struct sf_tok *tok, const uint8_t *text, size_t len)
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
		/*
		 * Byte-level BPE gives the bytes back; SentencePiece and a tokenizer.json may
		 * normalize them.
		 */
		if (pass == 0 && strcmp(sf__tok_family(tok), "sentencepiece") != 0 &&
		    strcmp(sf__tok_family(tok), "hf-json") != 0 &&
		    (out_len != len || memcmp(buf, text, len) != 0)) {
			fprintf(stderr, "%zu bytes decoded back as %zu other bytes\n", len,
				out_len);
			abort();
		}
		free(buf);
	}
	sf__tok_encoder_free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_tok_file_opts opts = {0};
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	char path[64];
	int fd;

	if (size < 1)
		return 0;
	fd = memfd_create("fuzz-tok-file", MFD_CLOEXEC);
	if (fd < 0 || write(fd, data + 1, size - 1) != (ssize_t)(size - 1))
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	opts.path = path;
	opts.format = formats[data[0] & 7];
	if (data[0] & 0x08)
		opts.pattern = "'s|'t| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+";
	if (sf__tok_load_file(&opts, &tok, &err) == 0) {
		check(tok, data + 1, size - 1 < 4096 ? size - 1 : 4096);
		sf__tok_free(tok);
	}
	close(fd);
	return 0;
}
