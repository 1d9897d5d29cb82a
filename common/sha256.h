/*
 * SHA-256 (FIPS 180-4), for the manifests of `shmfeed tokenize --shard`, which record the
 * digest of each part's files so that `--merge` can tell a part that changed or was cut
 * short from the one its manifest describes. Not on any hot path: a plain, portable
 * implementation.
 */
#ifndef SF_COMMON_SHA256_H
#define SF_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sf_sha256 {
	uint32_t h[8];
	uint64_t n_bytes;
	unsigned char block[64];
	uint32_t fill; /* bytes waiting in block */
};

void sf__sha256_init(struct sf_sha256 *s);
void sf__sha256_update(struct sf_sha256 *s, const void *data, size_t len);
/* sf__sha256_final - the 32-byte digest into ret_digest; `s` must be initialised again
 * before reuse. */
void sf__sha256_final(struct sf_sha256 *s, unsigned char ret_digest[32]);
/* sf__sha256_hex - the 64 lowercase hex digits of `digest`, NUL-terminated, into ret_hex. */
void sf__sha256_hex(const unsigned char digest[32], char ret_hex[65]);

#endif
