/* SHA-256 against the FIPS 180-4 examples and against itself fed in odd-sized pieces. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/sha256.h"

static void digest_hex(const void *data, size_t len, char hex[65])
{
	struct sf_sha256 s;
	unsigned char d[32];

	sf__sha256_init(&s);
	sf__sha256_update(&s, data, len);
	sf__sha256_final(&s, d);
	sf__sha256_hex(d, hex);
}

Test(sha256, fips_examples)
{
	char hex[65];

	digest_hex("", 0, hex);
	cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	digest_hex("abc", 3, hex);
	cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	digest_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
	cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test(sha256, million_a_in_pieces)
{
	static char a[1000000];
	struct sf_sha256 s;
	unsigned char d[32];
	char hex[65];
	size_t done = 0, step = 1;

	memset(a, 'a', sizeof(a));
	digest_hex(a, sizeof(a), hex);
	cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* Pieces of 1, 2, 3 ... bytes cross every position within a block. */
	sf__sha256_init(&s);
	while (done < sizeof(a)) {
		size_t n = step < sizeof(a) - done ? step : sizeof(a) - done;

		sf__sha256_update(&s, a + done, n);
		done += n;
		step = step % 131 + 1;
	}
	sf__sha256_final(&s, d);
	sf__sha256_hex(d, hex);
	cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
