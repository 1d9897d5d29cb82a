/*
 * SHA-256 as FIPS 180-4 specifies it: 64-byte blocks, big-endian words, 64 rounds.
 */
#include <string.h>

#include "common/sha256.h"

static const uint32_t round_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static uint32_t rotr(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void compress_block(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, k;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
			      round_k[i] + w[i];
		uint32_t t2 =
			(rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));

		k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void sf__sha256_init(struct sf_sha256 *s)
{
	static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

	memcpy(s->h, initial, sizeof(initial));
	s->n_bytes = 0;
	s->fill = 0;
}

void sf__sha256_update(struct sf_sha256 *s, const void *data, size_t len)
{
	const unsigned char *p = data;

	s->n_bytes += len;
	if (s->fill) {
		size_t take = 64 - s->fill < len ? 64 - s->fill : len;

		memcpy(s->block + s->fill, p, take);
		s->fill += (uint32_t)take;
		p += take;
		len -= take;
		if (s->fill < 64)
			return;
		compress_block(s->h, s->block);
		s->fill = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		compress_block(s->h, p);
	memcpy(s->block, p, len);
	s->fill = (uint32_t)len;
}

void sf__sha256_final(struct sf_sha256 *s, unsigned char ret_digest[32])
{
	uint64_t bits = s->n_bytes * 8;

	s->block[s->fill++] = 0x80;
	if (s->fill > 56) {
		memset(s->block + s->fill, 0, 64 - s->fill);
		compress_block(s->h, s->block);
		s->fill = 0;
	}
	memset(s->block + s->fill, 0, 56 - s->fill);
	for (int i = 0; i < 8; i++)
		s->block[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
	compress_block(s->h, s->block);
	for (int i = 0; i < 8; i++) {
		ret_digest[4 * i] = (unsigned char)(s->h[i] >> 24);
		ret_digest[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
		ret_digest[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
		ret_digest[4 * i + 3] = (unsigned char)s->h[i];
	}
}

void sf__sha256_hex(const unsigned char digest[32], char ret_hex[65])
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		ret_hex[2 * i] = hex[digest[i] >> 4];
		ret_hex[2 * i + 1] = hex[digest[i] & 15];
	}
	ret_hex[64] = '\0';
}
