/*
 * NFC (nfc.h): decompose every character fully, sort each run of combining marks by
 * class (stably), then compose each mark with the last starter when nothing between them
 * blocks it, by the Unicode Standard's reference algorithm.
 */
#include "producer/tokenizer/nfc.h"
#include "producer/tokenizer/unicode.h"

#define S_BASE	0xac00
#define L_BASE	0x1100
#define V_BASE	0x1161
#define T_BASE	0x11a7
#define L_COUNT 19
#define V_COUNT 21
#define T_COUNT 28
#define N_COUNT (V_COUNT * T_COUNT)
#define S_COUNT (L_COUNT * N_COUNT)

/* Code points above U+10FFFF stand for an invalid byte: 0x110000 + the byte. */
#define RAW_BYTE 0x110000u

static unsigned ccc(uint32_t cp)
{
	uint32_t lo = 0, hi = sf__nfc_n_ccc;

	if (cp < 0x300 || cp >= RAW_BYTE)
		return 0;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if ((sf__nfc_ccc[mid] >> 8) < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < sf__nfc_n_ccc && (sf__nfc_ccc[lo] >> 8) == cp ? sf__nfc_ccc[lo] & 0xff : 0;
}

/* Append the full canonical decomposition of cp to cps[n..]; returns the new count. */
static size_t decompose(uint32_t cp, uint32_t *cps, size_t n)
{
	uint32_t lo = 0, hi = sf__nfc_n_decomp, k;

	if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
		uint32_t s = cp - S_BASE;

		cps[n++] = L_BASE + s / N_COUNT;
		cps[n++] = V_BASE + (s % N_COUNT) / T_COUNT;
		if (s % T_COUNT)
			cps[n++] = T_BASE + s % T_COUNT;
		return n;
	}
	if (cp >= 0xc0 && cp < RAW_BYTE) {
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (sf__nfc_decomp_cp[mid] < cp)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < sf__nfc_n_decomp && sf__nfc_decomp_cp[lo] == cp) {
			for (k = sf__nfc_decomp_off[lo]; k < sf__nfc_decomp_off[lo + 1]; k++)
				cps[n++] = sf__nfc_decomp_chars[k];
			return n;
		}
	}
	cps[n++] = cp;
	return n;
}

/* The primary composite of a and b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
	uint64_t key;
	uint32_t lo = 0, hi = sf__nfc_n_comp;

	if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
		return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
	if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
	    b < T_BASE + T_COUNT)
		return a + (b - T_BASE);
	if (a >= RAW_BYTE || b >= RAW_BYTE)
		return 0;
	key = (uint64_t)a << 42 | (uint64_t)b << 21;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if ((sf__nfc_comp[mid] & ~(uint64_t)0x1fffff) < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < sf__nfc_n_comp && (sf__nfc_comp[lo] & ~(uint64_t)0x1fffff) == key)
		return (uint32_t)(sf__nfc_comp[lo] & 0x1fffff);
	return 0;
}

size_t sf__nfc(const uint8_t *s, size_t n, uint8_t *out, uint32_t *cps)
{
	size_t p = 0, count = 0, i, o = 0, starter = 0, kept;
	unsigned last;

	while (p < n) {
		uint32_t cp;
		size_t len = sf__utf8_next(s + p, n - p, &cp);

		count = decompose(cp == SF_UC_INVALID ? RAW_BYTE + s[p] : cp, cps, count);
		p += len;
	}
	/* Canonical ordering: a stable insertion sort of each run of non-starters. */
	for (i = 1; i < count; i++) {
		uint32_t c = cps[i];
		unsigned cc = ccc(c);
		size_t j = i;

		if (!cc)
			continue;
		while (j > 0 && ccc(cps[j - 1]) > cc) {
			cps[j] = cps[j - 1];
			j--;
		}
		cps[j] = c;
	}
	/* Composition, in place: cps[0..kept) is the output so far. */
	if (count) {
		last = ccc(cps[0]) ? 256 : 0;
		kept = 1;
		for (i = 1; i < count; i++) {
			uint32_t c = cps[i], composite = compose(cps[starter], c);
			unsigned cc = ccc(c);

			if (composite && (last < cc || last == 0)) {
				cps[starter] = composite;
				continue;
			}
			if (!cc)
				starter = kept;
			last = cc;
			cps[kept++] = c;
		}
		count = kept;
	}
	for (i = 0; i < count; i++) {
		if (cps[i] >= RAW_BYTE)
			out[o++] = (uint8_t)(cps[i] - RAW_BYTE);
		else
			o += sf__utf8_encode(cps[i], out + o);
	}
	return o;
}
