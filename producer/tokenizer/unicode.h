/*
 * Unicode support for the pre-tokenizer: the character-class bits of the generated table
 * in unicode_tables.c, and a strict UTF-8 decoder. The scanners only ever ask "which of
 * these classes does the character at this byte offset belong to, and how long is it",
 * so both live here as inline functions, with the UTF-8 encoder of one code point that
 * the character tokenizer decodes with.
 */
#ifndef SF_PRODUCER_TOKENIZER_UNICODE_H
#define SF_PRODUCER_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define SF_UC_L	 0x01u /* \p{L} */
#define SF_UC_N	 0x02u /* \p{N} */
#define SF_UC_WS 0x04u /* White_Space, which is what \s means in Rust's regex crate */
#define SF_UC_UP 0x08u /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] of the o200k_base pattern */
#define SF_UC_LO 0x10u /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] of the o200k_base pattern */

/* The general categories, in the order of tools/gen_gc_changes.py. */
enum {
	SF_UC_GC_CC,
	SF_UC_GC_CF,
	SF_UC_GC_CN,
	SF_UC_GC_CO,
	SF_UC_GC_CS,
	SF_UC_GC_LL,
	SF_UC_GC_LM,
	SF_UC_GC_LO,
	SF_UC_GC_LT,
	SF_UC_GC_LU,
	SF_UC_GC_MC,
	SF_UC_GC_ME,
	SF_UC_GC_MN,
	SF_UC_GC_ND,
	SF_UC_GC_NL,
	SF_UC_GC_NO,
	SF_UC_GC_PC,
	SF_UC_GC_PD,
	SF_UC_GC_PE,
	SF_UC_GC_PF,
	SF_UC_GC_PI,
	SF_UC_GC_PO,
	SF_UC_GC_PS,
	SF_UC_GC_SC,
	SF_UC_GC_SK,
	SF_UC_GC_SM,
	SF_UC_GC_SO,
	SF_UC_GC_ZL,
	SF_UC_GC_ZP,
	SF_UC_GC_ZS,
	SF_UC_GC_COUNT
};

/* Code points lo..hi, of general category `then` in PCRE2 10.42's Unicode (14.0) and `now`
 * in the scanners' (sf__uc_version), from unicode_gc_changes.c. */
struct sf_uc_gc_change {
	uint32_t lo, hi;
	uint8_t then, now;
};

extern const struct sf_uc_gc_change sf__uc_gc_changes[];
extern const size_t sf__uc_gc_changes_n;
extern const uint8_t sf__uc_gc_changed_blocks[0x220]; /* bit b: block b has a change */

/*
 * Code points lo..hi whose Script in the scanners' Unicode differs from PCRE2 10.42's, from
 * unicode_sc_changes.c: `then` is a code point of their script in PCRE2, `now` one that
 * PCRE2 puts in their script of today (SF_UC_SC_NONE where PCRE2 knows no such script).
 * Every one of them changed general category too (sf__uc_gc_changed_blocks covers it).
 */
#define SF_UC_SC_NONE UINT32_MAX

struct sf_uc_sc_change {
	uint32_t lo, hi;
	uint32_t then, now;
};

extern const struct sf_uc_sc_change sf__uc_sc_changes[];
extern const size_t sf__uc_sc_changes_n;

/* The code point that sf__utf8_next() reports for a byte that starts no valid sequence. */
#define SF_UC_INVALID UINT32_MAX

extern const char sf__uc_version[];
extern const uint8_t sf__uc_stage1[0x1100];
extern const uint8_t sf__uc_stage2[][256];

/* sf__uc_class - the SF_UC_* bits of a code point; 0 for SF_UC_INVALID. */
static inline unsigned sf__uc_class(uint32_t cp)
{
	if (cp >= 0x110000)
		return 0;
	return sf__uc_stage2[sf__uc_stage1[cp >> 8]][cp & 0xff];
}

static inline int sf__utf8_cont(uint8_t b)
{
	return (b & 0xc0) == 0x80;
}

/*
 * sf__utf8_next - decode the character at s[0], reading no further than s[n - 1] (n >= 1).
 * Stores the code point in *ret_cp and returns its length in bytes. A byte that does not
 * start a well-formed sequence (a stray continuation, an overlong form, a surrogate, a
 * value above U+10FFFF, or a sequence cut short) decodes as SF_UC_INVALID of length 1,
 * so that every byte of any input belongs to exactly one character.
 */
static inline size_t sf__utf8_next(const uint8_t *s, size_t n, uint32_t *ret_cp)
{
	uint8_t b = s[0];

	if (b < 0x80) {
		*ret_cp = b;
		return 1;
	}
	if (b >= 0xc2 && b <= 0xdf) {
		if (n >= 2 && sf__utf8_cont(s[1])) {
			*ret_cp = ((uint32_t)(b & 0x1f) << 6) | (s[1] & 0x3fu);
			return 2;
		}
	} else if (b >= 0xe0 && b <= 0xef) {
		uint8_t lo = b == 0xe0 ? 0xa0 : 0x80;
		uint8_t hi = b == 0xed ? 0x9f : 0xbf;

		if (n >= 3 && s[1] >= lo && s[1] <= hi && sf__utf8_cont(s[2])) {
			*ret_cp = ((uint32_t)(b & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) |
				  (s[2] & 0x3fu);
			return 3;
		}
	} else if (b >= 0xf0 && b <= 0xf4) {
		uint8_t lo = b == 0xf0 ? 0x90 : 0x80;
		uint8_t hi = b == 0xf4 ? 0x8f : 0xbf;

		if (n >= 4 && s[1] >= lo && s[1] <= hi && sf__utf8_cont(s[2]) &&
		    sf__utf8_cont(s[3])) {
			*ret_cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
				  ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3fu);
			return 4;
		}
	}
	*ret_cp = SF_UC_INVALID;
	return 1;
}

/*
 * sf__utf8_encode - the UTF-8 form of code point `cp` (at most U+10FFFF, not a surrogate)
 * in out[0..3]; returns its length in bytes.
 */
static inline size_t sf__utf8_encode(uint32_t cp, uint8_t *out)
{
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xc0 | cp >> 6);
		out[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xe0 | cp >> 12);
		out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (uint8_t)(0xf0 | cp >> 18);
	out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

/* sf__uc_at - the class bits of the character at s[p] (p < n); its length in *ret_len. */
static inline __attribute__((always_inline)) unsigned sf__uc_at(const uint8_t *s, size_t n,
								size_t p, size_t *ret_len)
{
	uint32_t cp;

	if (s[p] < 0x80) {
		*ret_len = 1;
		return sf__uc_stage2[0][s[p]];
	}
	*ret_len = sf__utf8_next(s + p, n - p, &cp);
	return sf__uc_class(cp);
}

#endif
