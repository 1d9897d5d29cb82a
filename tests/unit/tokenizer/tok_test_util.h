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

/*
 * Texts around a run of ASCII letters, for the scanners' fast paths, which look at 16
 * bytes at once: a one-character prefix, 0 to 19 uppercase then 0 to 19 lowercase
 * letters, and what follows the run (the text's end, a space and a letter, a letter or a
 * mark of two bytes, a contraction, a digit, a newline, uppercase after it). So every
 * run length on both sides of 16 meets every ending, at every distance from the text's
 * end up to 43 bytes. tok_test_word() writes the i-th, i below TOK_TEST_WORDS, to `buf`
 * (64 bytes) and returns its length.
 */
#define TOK_TEST_WORD_PREFIXES 7
#define TOK_TEST_WORD_ENDS     9
#define TOK_TEST_WORDS	       (TOK_TEST_WORD_PREFIXES * 20 * 20 * TOK_TEST_WORD_ENDS)

static inline size_t tok_test_word(size_t i, uint8_t *buf)
{
	static const char *const prefixes[TOK_TEST_WORD_PREFIXES] = {
		"", " ", "'", "-", "\n", "\xc3\xa9", "\xcc\x81",
	};
	static const char *const ends[TOK_TEST_WORD_ENDS] = {
		"", " x", "\xc3\xa9", "\xcc\x81", "'s", "'LL", "1", "\n", "Ab",
	};
	static const char upper[] = "QWERTYUIOPASDFGHJKLZ", lower[] = "sdmtlvrexqwyuiopafgh";
	const char *prefix = prefixes[i % TOK_TEST_WORD_PREFIXES],
		   *end = ends[i / TOK_TEST_WORD_PREFIXES % TOK_TEST_WORD_ENDS];
	size_t u = i / (TOK_TEST_WORD_PREFIXES * TOK_TEST_WORD_ENDS) % 20,
	       l = i / (TOK_TEST_WORD_PREFIXES * TOK_TEST_WORD_ENDS * 20), n = strlen(prefix);

	memcpy(buf, prefix, n);
	memcpy(buf + n, upper, u);
	memcpy(buf + n + u, lower, l);
	memcpy(buf + n + u + l, end, strlen(end));
	return n + u + l + strlen(end);
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
