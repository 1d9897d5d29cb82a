/*
 * Unicode Normalization Form C for the tokenizer.json normalizer "NFC": canonical
 * decomposition (Hangul computed, the rest from the tables of nfc_tables.c), canonical
 * ordering, canonical composition (UAX #15). Bytes that are not valid UTF-8 pass through
 * unchanged and block composition, as characters of class 0 that compose with nothing.
 */
#ifndef SF_PRODUCER_TOKENIZER_NFC_H
#define SF_PRODUCER_TOKENIZER_NFC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern const char sf__nfc_version[];
extern const uint32_t sf__nfc_ccc[]; /* cp << 8 | class, sorted */
extern const uint32_t sf__nfc_n_ccc;
extern const uint32_t sf__nfc_decomp_cp[]; /* sorted */
extern const uint16_t sf__nfc_decomp_off[];
extern const uint32_t sf__nfc_decomp_chars[];
extern const uint32_t sf__nfc_n_decomp;
extern const uint64_t sf__nfc_comp[]; /* first << 42 | second << 21 | composite, sorted */
extern const uint32_t sf__nfc_n_comp;

/*
 * sf__nfc_is_identity - true when NFC leaves s[0..n) as it is for certain: no character
 * at or above U+0300 (no lead byte from 0xcc up), so nothing combines or decomposes.
 */
static inline bool sf__nfc_is_identity(const uint8_t *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] >= 0xcc)
			return false;
	return true;
}

/*
 * sf__nfc - the NFC form of s[0..n) into `out`, which must hold 3 * n bytes, using `cps`
 * (room for 4 * n code points) as scratch. Returns the length written.
 */
size_t sf__nfc(const uint8_t *s, size_t n, uint8_t *out, uint32_t *cps);

#endif
