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

/* Codes below this have their cut kind in a table of two bits each (16 KiB). */
#define SF_SP_KIND_CODES 0x10000

struct sf_sp_split {
	uint8_t kind[SF_SP_KIND_CODES / 4]; /* code c's cut kind in bits 2 (c & 3) and up */
	uint64_t ascii_pair[128][2]; /* row a, bit b: a piece holds a then b (both < 128) */
	uint64_t *set; /* the other pairs, and singles and held codes above the table; 0: empty */
	size_t mask;
	bool byte_fallback; /* sf__sp_byte_fallback() */
};

/* sf__sp_split_build - the tables of a model's pieces; free with sf__sp_split_free(). */
int sf__sp_split_build(const struct sf_sp *sp, uint32_t n_vocab, struct sf_sp_split **ret,
		       struct sf_err *e);

void sf__sp_split_free(struct sf_sp_split *t);

/*
 * sf__sp_split_cuts - the ends of the parts of s[0..n) (n >= 1), the first part starting
 * at 0: the cuts after 0 in order, then n, in ends[0..k); stops after max (>= 1) ends,
 * where ends[k - 1] may be a cut before n. Returns k.
 */
size_t sf__sp_split_cuts(const struct sf_sp_split *t, const uint8_t *s, size_t n, size_t *ends,
			 size_t max);

#endif
