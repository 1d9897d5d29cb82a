/*
 * Reading Mistral's tekken JSON (tekken.c): its config (pattern, vocabulary size, number
 * of special tokens, version), its vocabulary turned into .tiktoken text for
 * sf__tok_ranks_parse(), and the special tokens it lists.
 */
#ifndef SF_PRODUCER_TOKENIZER_TOK_TEKKEN_H
#define SF_PRODUCER_TOKENIZER_TOK_TEKKEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"

struct sf_tekken_special {
	char *text;
	uint32_t id;
};

struct sf_tekken {
	char *pattern;
	uint32_t vocab_size; /* default_vocab_size: special tokens and ranks together */
	uint32_t n_specials; /* default_num_special_tokens: rank r has id r + n_specials */
	uint32_t version;    /* N of "vN" */
	char *tiktoken;	     /* "base64 rank" lines of the first vocab_size - n_specials ranks */
	size_t tiktoken_len;
	struct sf_tekken_special *specials; /* the file's special_tokens, or none */
	uint32_t n_defined;
	uint32_t listed; /* the file has special_tokens, even an empty list */
};

/*
 * sf__tekken_parse - parse `len` bytes of a tekken file named `path` into *ret. Returns 0,
 * or SF_E_TOKENIZER naming the byte offset of what is wrong. Free with sf__tekken_free().
 */
int sf__tekken_parse(struct sf_tekken *ret, const char *path, const char *text, size_t len,
		     struct sf_err *e);

/* sf__tekken_free - accepts a zeroed struct. */
void sf__tekken_free(struct sf_tekken *tk);

#endif
