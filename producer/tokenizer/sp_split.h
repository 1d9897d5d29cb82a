/*
 * Where a SentencePiece text may be cut (sf__sp_parts()): between two characters a and b
 * when each is a piece of its own and no piece holds a followed by b. No merge of the
 * library's BPE can then join the two sides, so the ids of the text are those of its
 * parts, each encoded alone (docs/tokenizer.md, "SentencePiece in parts"). A character
 * that no piece holds at all (a newline in Mistral's models, a letter the model never
 * saw) joins nothing either, so it is cut beside as a single is; two of them are cut
 * apart only with byte fallback, since without it the library makes a run of unknown
 * characters one <unk>.
 *
 * Characters are taken as the model's normalizer gives them: ' ' is U+2581, which both
 * stand for here as code 0x20 (a piece that holds a literal ' ' matches nothing, so its
 * pairs only cost cuts, and it is never a single), and a byte that starts no valid UTF-8
 * sequence is never cut beside.
 */
#ifndef SF_PRODUCER_TOKENIZER_SP_SPLIT_H
#define SF_PRODUCER_TOKENIZER_SP_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"

struct sf_sp;

struct sf_sp_split {
	uint64_t ascii_single[2];    /* bit c: code c (< 128) is a piece of its own */
	uint64_t ascii_pair[128][2]; /* row a, bit b: a piece holds a then b (both < 128) */
	uint64_t ascii_held[2];	     /* bit c: some piece holds code c (< 128) */
	uint64_t *set;		     /* the other singles, pairs and held codes; 0: empty */
	size_t mask;
	bool byte_fallback; /* sf__sp_byte_fallback() */
};

/* sf__sp_split_build - the tables of a model's pieces; free with sf__sp_split_free(). */
int sf__sp_split_build(const struct sf_sp *sp, uint32_t n_vocab, struct sf_sp_split **ret,
		       struct sf_err *e);

void sf__sp_split_free(struct sf_sp_split *t);

/*
 * sf__sp_split_next - where the part of s[0..n) that starts at 0 ends: the first cut
 * after 0, or n.
 */
size_t sf__sp_split_next(const struct sf_sp_split *t, const uint8_t *s, size_t n);

#endif
