/*
 * The tokenizer.json loader's state and helpers, shared by its files: hf_json.c (the
 * document, the model, normalizer and decoder), hf_pretok.c (the pre-tokenizer) and
 * hf_added.c (added tokens, decoding of ids outside the byte-level vocabulary). Errors
 * name the JSON path of the value they are about.
 */
#ifndef SF_PRODUCER_TOKENIZER_HF_LOAD_H
#define SF_PRODUCER_TOKENIZER_HF_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "producer/json.h"
#include "producer/tokenizer/hf_json.h"

struct sf_hf_loader {
	const char *name;
	const struct sf_json_doc *doc;
	struct sf_tok *tok;
	struct sf_tok_hf *hf;
	struct sf_err *e;
	/* The byte-level alphabet: the character of each byte, and back (-1: none). */
	uint32_t char_of[256];
	int16_t byte_of[324];
	/* The model's vocabulary, and its members that are not byte-level strings. */
	const struct sf_json_node *vocab;
	uint32_t *odd;
	uint32_t n_odd;
};

/* An error about the value at `path`: "NAME: PATH: MESSAGE"; returns SF_E_TOKENIZER. */
__attribute__((format(printf, 3, 4))) int sf__hf_refuse(struct sf_hf_loader *l, const char *path,
							const char *fmt, ...);
/* -ENOMEM, with a message. */
int sf__hf_oom(struct sf_hf_loader *l);
/*
 * The bytes a byte-level token string stands for, into `out` (room for `len` bytes):
 * their count, or -1 when a character is outside the byte-level alphabet.
 */
long sf__hf_token_bytes(const struct sf_hf_loader *l, const char *s, size_t len, uint8_t *out);
/*
 * A boolean member as tokenizers reads it: `absent` is what a missing member means, one
 * of SF_HF_NEEDED (tokenizers refuses the file without it), true or false; null is false
 * where the member may be missing with false, else refused as tokenizers does.
 * Anything but a boolean is refused.
 */
#define SF_HF_NEEDED (-1)
int sf__hf_get_bool(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *key,
		    const char *path, int absent, bool *ret);
/* Refuse members of `obj` not in the NULL-terminated list `known`. */
int sf__hf_only_keys(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path,
		     const char *const *known);
/* A non-negative integer below 2^31, or -1. */
long sf__hf_get_id(const struct sf_json_doc *doc, const struct sf_json_node *n);
/* The type member of a component object, or NULL. */
const char *sf__hf_type_of(struct sf_hf_loader *l, const struct sf_json_node *obj);

/* hf_pretok.c: the pre-tokenizer object at `path`; sets *seen_byte_level at ByteLevel. */
int sf__hf_load_pretok(struct sf_hf_loader *l, const struct sf_json_node *obj, const char *path,
		       bool *seen_byte_level);

/* hf_added.c: the added_tokens list, then the decoding table (after the vocabulary). */
int sf__hf_load_added(struct sf_hf_loader *l, const struct sf_json_node *list);
int sf__hf_build_extra(struct sf_hf_loader *l, const struct sf_json_node *vocab);

#endif
