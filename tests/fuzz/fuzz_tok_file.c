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
#include "tok_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int formats[8] = {
	SF_TOK_FORMAT_AUTO, SF_TOK_FORMAT_TIKTOKEN,	 SF_TOK_FORMAT_TEKKEN,
	SF_TOK_FORMAT_HF,   SF_TOK_FORMAT_SENTENCEPIECE, SF_TOK_FORMAT_AUTO,
	SF_TOK_FORMAT_AUTO, SF_TOK_FORMAT_TIKTOKEN,
};

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
		/*
		 * Byte-level BPE gives the bytes back; SentencePiece and a tokenizer.json may
		 * normalize them.
		 */
		fuzz_tok_check(tok, data + 1, size - 1 < 4096 ? size - 1 : 4096,
			       strcmp(sf__tok_family(tok), "sentencepiece") != 0 &&
				       strcmp(sf__tok_family(tok), "hf-json") != 0);
		sf__tok_free(tok);
	}
	close(fd);
	return 0;
}
