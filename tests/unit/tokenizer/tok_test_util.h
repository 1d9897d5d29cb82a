/*
 * Helpers shared by the tokenizer tests: where the shared test data is, reading a file
 * whole, and loading a vocabulary from the data directory. Tests that need the data
 * skip (exit 77) with a message when it is absent.
 */
#ifndef SF_TESTS_TOK_TEST_UTIL_H
#define SF_TESTS_TOK_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "producer/tokenizer/tokenizer.h"

/* The shared data directory, from $SF_TEST_DATA; exits 77 when it is missing. */
static inline const char *tok_test_data(void)
{
	const char *dir = getenv("SF_TEST_DATA");
	char probe[4096];

	if (dir) {
		snprintf(probe, sizeof(probe), "%s/vocab/cl100k_base.tiktoken", dir);
		if (!access(probe, R_OK))
			return dir;
	}
	fprintf(stderr, "skip: test data not found (set SF_TEST_DATA to ../shared/data)\n");
	exit(77);
}

/* Read a whole file; NULL when it cannot be read. The caller frees the buffer. */
static inline void *tok_test_read(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long len;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)len + 1);
	if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf)
		*ret_len = (size_t)len;
	return buf;
}

/* A xorshift64 draw below `bound` from *state (not zero): random test input, repeatable. */
static inline uint32_t tok_test_rnd(uint64_t *state, uint32_t bound)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return (uint32_t)(*state % bound);
}

/* Load a BPE encoding from the data directory; NULL (with a message) on failure. */
static inline struct sf_tok *tok_test_load(const char *encoding)
{
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	char path[4096];

	snprintf(path, sizeof(path), "%s/vocab/%s.tiktoken", tok_test_data(), encoding);
	if (sf__tok_load(encoding, path, &tok, &err) < 0)
		fprintf(stderr, "load %s: %s\n", encoding, err.msg);
	return tok;
}

#endif
