/*
 * Tokenizer tests against tiktoken: the reference ids of the shared data for every
 * encoding and file, golden vectors from tiktoken's own tests, special tokens, decoding
 * and its invalid-UTF-8 rendering, and the byte and character tokenizers.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tokenizer.h"
#include "tok_test_util.h"

static void expect_ids(struct sf_tok *tok, const char *text, uint64_t allowed, const uint32_t *want,
		       size_t n_want)
{
	struct sf_tok_encoder *enc;
	struct sf_err err = {0};
	const uint32_t *ids;
	size_t n, i;

	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &err), 0);
	cr_assert_eq(sf__tok_encode(enc, text, strlen(text), allowed, &ids, &n, &err), 0, "%s",
		     err.msg);
	cr_expect_eq(n, n_want, "%s: '%s': %zu ids, want %zu", sf__tok_name(tok), text, n, n_want);
	for (i = 0; i < n && i < n_want; i++)
		cr_expect_eq(ids[i], want[i], "%s: '%s': id %zu is %u, want %u", sf__tok_name(tok),
			     text, i, ids[i], want[i]);
	sf__tok_encoder_free(enc);
}

#define EXPECT(tok, text, allowed, ...)                                                            \
	do {                                                                                       \
		const uint32_t want_[] = {__VA_ARGS__};                                            \
		expect_ids(tok, text, allowed, want_, sizeof(want_) / sizeof(want_[0]));           \
	} while (0)

static void check_reference(const char *encoding, const char *text_path, const char *ref_name)
{
	const char *dir = tok_test_data();
	struct sf_tok *tok = tok_test_load(encoding);
	struct sf_tok_encoder *enc;
	struct sf_err err = {0};
	char path[4096];
	const uint32_t *ids;
	uint32_t *ref;
	char *text, *back;
	size_t text_len, ref_len, n, i, back_len;

	cr_assert_not_null(tok);
	snprintf(path, sizeof(path), "%s/%s", dir, text_path);
	text = tok_test_read(path, &text_len);
	cr_assert_not_null(text, "cannot read %s", path);
	snprintf(path, sizeof(path), "%s/tokref/%s.%s.u32", dir, ref_name, encoding);
	ref = tok_test_read(path, &ref_len);
	cr_assert_not_null(ref, "cannot read %s", path);
	ref_len /= 4;

	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &err), 0);
	cr_assert_eq(sf__tok_encode(enc, text, text_len, SF_TOK_ALLOW_NONE, &ids, &n, &err), 0,
		     "%s", err.msg);
	for (i = 0; i < n && i < ref_len; i++)
		if (ids[i] != ref[i])
			break;
	cr_assert(i == n && n == ref_len,
		  "%s on %s: first difference at id %zu of %zu (reference has %zu): %u vs %u",
		  encoding, ref_name, i, n, ref_len, i < n ? ids[i] : 0, i < ref_len ? ref[i] : 0);

	/* The same ids straight into the caller's buffer; too small a buffer is refused, and
	 * the encoder keeps its own buffer. */
	{
		uint32_t *out = malloc((text_len + 1) * sizeof(*out));
		size_t n2 = 0;

		cr_assert_eq(sf__tok_encode_to(enc, text, text_len, SF_TOK_ALLOW_NONE, out,
					       text_len + 1, &n2, &err),
			     0, "%s", err.msg);
		cr_assert(n2 == ref_len && !memcmp(out, ref, n2 * sizeof(*out)));
		cr_assert_eq(sf__tok_encode_to(enc, text, text_len, SF_TOK_ALLOW_NONE, out,
					       text_len, &n2, &err),
			     -ENOBUFS);
		free(out);
		cr_assert_eq(sf__tok_encode(enc, text, text_len, SF_TOK_ALLOW_NONE, &ids, &n, &err),
			     0);
		cr_assert(n == ref_len && !memcmp(ids, ref, n * sizeof(*ids)));
	}

	/* decode(encode(x)) == x */
	back = malloc(text_len);
	cr_assert_eq(sf__tok_decode(tok, ids, n, back, text_len, &back_len, &err), 0, "%s",
		     err.msg);
	cr_assert_eq(back_len, text_len);
	cr_assert(!memcmp(back, text, text_len));

	free(back);
	free(ref);
	free(text);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
}

Test(tokref, r50k_shakespeare)
{
	check_reference("r50k_base", "corpus/tinyshakespeare.txt", "tinyshakespeare");
}

Test(tokref, cl100k_shakespeare)
{
	check_reference("cl100k_base", "corpus/tinyshakespeare.txt", "tinyshakespeare");
}

Test(tokref, o200k_shakespeare)
{
	check_reference("o200k_base", "corpus/tinyshakespeare.txt", "tinyshakespeare");
}

Test(tokref, r50k_unicode_mix)
{
	check_reference("r50k_base", "tokref/unicode_mix.txt", "unicode_mix");
}

Test(tokref, cl100k_unicode_mix)
{
	check_reference("cl100k_base", "tokref/unicode_mix.txt", "unicode_mix");
}

Test(tokref, o200k_unicode_mix)
{
	check_reference("o200k_base", "tokref/unicode_mix.txt", "unicode_mix");
}

/* Vectors from tiktoken's tests/test_encoding.py and checked against tiktoken 0.14. */
Test(golden, hello_world)
{
	struct sf_tok *r50k = tok_test_load("r50k_base");
	struct sf_tok *cl100k = tok_test_load("cl100k_base");
	struct sf_tok *o200k = tok_test_load("o200k_base");

	cr_assert(r50k && cl100k && o200k);
	EXPECT(r50k, "hello world", 0, 31373, 995);
	EXPECT(cl100k, "hello world", 0, 15339, 1917);
	EXPECT(o200k, "hello world", 0, 24912, 2375);
	EXPECT(cl100k, "rer", 0, 38149);
	EXPECT(cl100k, "'rer", 0, 2351, 81);
	EXPECT(cl100k, "today\n ", 0, 31213, 198, 220);
	EXPECT(cl100k, "today\n \n", 0, 31213, 27907);
	EXPECT(cl100k, "today\n  \n", 0, 31213, 14211);
	EXPECT(cl100k,
	       " \xc2\x85"
	       "0",
	       0, 220, 126, 227, 15);
	EXPECT(r50k, "   x  \t\ny", 0, 220, 220, 2124, 220, 220, 197, 198, 88);
	EXPECT(cl100k, "   x  \t\ny", 0, 256, 865, 99351, 88);
	EXPECT(o200k, "   x  \t\ny", 0, 256, 1215, 256, 2775, 88);
	EXPECT(r50k, "1234567 89", 0, 10163, 2231, 3134, 9919);
	EXPECT(cl100k, "1234567 89", 0, 4513, 10961, 22, 220, 4578);
	EXPECT(r50k, "He's DON'T", 0, 1544, 338, 23917, 6, 51);
	EXPECT(cl100k, "He's DON'T", 0, 1548, 596, 45373, 17773);
	EXPECT(o200k, "He's DON'T", 0, 98880, 153384);
	EXPECT(o200k, "\xf0\x9f\x91\x8d ok", 0, 82514, 4763);
	EXPECT(cl100k,
	       "\xc7\x85ungla \xc3\x80"
	       "B\xcc\x81"
	       "c",
	       0, 131, 227, 2234, 4355, 65381, 33, 54939, 66);
	EXPECT(o200k,
	       "\xc7\x85ungla \xc3\x80"
	       "B\xcc\x81"
	       "c",
	       0, 131, 227, 988, 1675, 27643, 33, 13430, 66);
	sf__tok_free(r50k);
	sf__tok_free(cl100k);
	sf__tok_free(o200k);
}

Test(special, allowed_or_text)
{
	struct sf_tok *r50k = tok_test_load("r50k_base");
	struct sf_tok *cl100k = tok_test_load("cl100k_base");
	uint64_t eot_bit = 0, fim_bit = 0;

	cr_assert(r50k && cl100k);
	cr_assert_eq(sf__tok_eot(r50k), 50256);
	cr_assert_eq(sf__tok_eot(cl100k), 100257);
	cr_assert_eq(sf__tok_n_vocab(cl100k), 100277);
	cr_assert_eq(sf__tok_special(cl100k, "<|endoftext|>", &eot_bit), 100257);
	cr_assert_eq(sf__tok_special(cl100k, "<|fim_prefix|>", &fim_bit), 100258);
	cr_assert_eq(sf__tok_special(cl100k, "<|nope|>", NULL), -ENOENT);

	EXPECT(r50k, "hello <|endoftext|>", SF_TOK_ALLOW_ALL, 31373, 220, 50256);
	EXPECT(r50k, "hello <|endoftext|>", SF_TOK_ALLOW_NONE, 31373, 1279, 91, 437, 1659, 5239, 91,
	       29);
	EXPECT(cl100k, "hello <|endoftext|>", SF_TOK_ALLOW_ALL, 15339, 220, 100257);
	EXPECT(cl100k, "hello <|endoftext|>", SF_TOK_ALLOW_NONE, 15339, 83739, 8862, 728, 428, 91,
	       29);
	/* Only the allowed token is special; the other is text. */
	EXPECT(cl100k, "<|fim_prefix|><|endoftext|>", eot_bit, 27, 91, 69, 318, 14301, 91, 29,
	       100257);
	EXPECT(cl100k, "<|endoftext|><|endoftext|>x", eot_bit, 100257, 100257, 87);
	/* The text on each side of a special token is split on its own, as tiktoken does. */
	EXPECT(cl100k, "a  <|endoftext|>  b", eot_bit, 64, 256, 100257, 220, 293);
	sf__tok_free(r50k);
	sf__tok_free(cl100k);
}

Test(decode, errors_and_rendering)
{
	struct sf_tok *cl100k = tok_test_load("cl100k_base");
	struct sf_err err = {0};
	const uint32_t bad[] = {15339, 100256};
	const uint32_t split[] = {9468, 239}; /* the first two bytes of U+1F44D */
	const uint32_t eot[] = {100257};
	char buf[64], shown[64];
	size_t len = 0, n;

	cr_assert_not_null(cl100k);
	cr_assert_eq(sf__tok_decode(cl100k, bad, 2, buf, sizeof(buf), &len, &err), SF_E_TOKENIZER);
	cr_assert_eq(sf__tok_decoded_len(cl100k, bad, 2, &len, &err), SF_E_TOKENIZER);
	cr_assert_eq(sf__tok_decode(cl100k, eot, 1, buf, 4, &len, &err), -ENOBUFS);
	cr_assert_eq(sf__tok_decode(cl100k, eot, 1, buf, sizeof(buf), &len, &err), 0);
	cr_assert_eq(len, 13);
	cr_assert(!memcmp(buf, "<|endoftext|>", 13));
	cr_assert_eq(sf__tok_decode(cl100k, split, 2, buf, sizeof(buf), &len, &err), 0);
	cr_assert_eq(len, 3);
	n = sf__utf8_replace(buf, len, shown);
	cr_assert_eq(n, 3);
	cr_assert(!memcmp(shown, "\xef\xbf\xbd", 3));
	sf__tok_free(cl100k);
}

/* Expected strings from Python: bytes.decode("utf-8", errors="replace"). */
Test(decode, replace_like_python)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"abc", "abc"},
		{"\x80", "\xef\xbf\xbd"},
		{"\xe2\x82", "\xef\xbf\xbd"},
		{"\xe2\x82x", "\xef\xbf\xbdx"},
		{"\xf0\x9f\x91", "\xef\xbf\xbd"},
		{"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
		{"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
		{"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
		{"\xe0\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
		{"a\xf0\x9f\x91\x8d\xff", "a\xf0\x9f\x91\x8d\xef\xbf\xbd"},
	};
	char out[64];
	size_t i, n;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = sf__utf8_replace(cases[i].in, strlen(cases[i].in), out);
		cr_expect(n == strlen(cases[i].out) && !memcmp(out, cases[i].out, n), "case %zu",
			  i);
	}
}

Test(simple, bytes)
{
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};

	cr_assert_eq(sf__tok_load("bytes", NULL, &tok, &err), 0);
	cr_assert_eq(sf__tok_eot(tok), 256);
	cr_assert_eq(sf__tok_n_vocab(tok), 257);
	EXPECT(tok, "hi\xff", 0, 'h', 'i', 255);
	EXPECT(tok, "a<|endoftext|>", SF_TOK_ALLOW_ALL, 'a', 256);
	sf__tok_free(tok);
}

Test(simple, chars)
{
	char path[] = "/tmp/sf_tok_chars_XXXXXX";
	const char corpus[] = "ba\xc3\xa9\nab";
	struct sf_tok_encoder *enc;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	const uint32_t *ids;
	char back[16];
	size_t n, len;
	int fd = mkstemp(path);
	char encoding[64];

	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, corpus, sizeof(corpus) - 1), (ssize_t)sizeof(corpus) - 1);
	close(fd);
	snprintf(encoding, sizeof(encoding), "char:%s", path);
	cr_assert_eq(sf__tok_load(encoding, NULL, &tok, &err), 0, "%s", err.msg);
	unlink(path);
	/* Sorted code points: \n a b é; <|endoftext|> after them. */
	cr_assert_eq(sf__tok_n_vocab(tok), 5);
	cr_assert_eq(sf__tok_eot(tok), 4);
	EXPECT(tok,
	       "\xc3\xa9"
	       "ab\n",
	       0, 3, 1, 2, 0);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &err), 0);
	cr_assert_eq(sf__tok_encode(enc, "abc", 3, 0, &ids, &n, &err), SF_E_TOKENIZER);
	cr_assert_eq(sf__tok_encode(enc, "\xc3\xa9", 2, 0, &ids, &n, &err), 0);
	cr_assert_eq(sf__tok_decode(tok, ids, n, back, sizeof(back), &len, &err), 0);
	cr_assert(len == 2 && !memcmp(back, "\xc3\xa9", 2));
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
}

Test(load, errors)
{
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};

	cr_assert_eq(sf__tok_load("p50k_base", NULL, &tok, &err), SF_E_TOKENIZER);
	cr_assert_eq(sf__tok_load("cl100k_base", "/nonexistent/cl100k.tiktoken", &tok, &err),
		     -ENOENT);
	unsetenv(SF_TOK_VOCAB_DIR_ENV);
	cr_assert_eq(sf__tok_load("cl100k_base", NULL, &tok, &err), SF_E_TOKENIZER);
	cr_assert(strstr(err.msg, "openaipublic"));
	cr_assert_null(tok);
}

/* A special token may not take the id of a rank: raw text relies on <|endoftext|> never
 * coming out of ordinary text (document ends, chunk heads). */
Test(load, special_id_of_a_rank)
{
	static const struct sf_tok_special eot = {"<|endoftext|>", 1};
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char path[] = "/tmp/sf-vocab-XXXXXX";
	int fd = mkstemp(path);
	struct sf_tok_spec spec = {"tiny", path, "[a-z]+", &eot, 1};
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	FILE *f;

	/* The 256 single bytes as ranks 0..255, base64: the special's id 1 is byte 0x01's. */
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	cr_assert_not_null(f);
	for (int i = 0; i < 256; i++)
		fprintf(f, "%c%c== %d\n", b64[i >> 2], b64[(i & 3) << 4], i);
	fclose(f);
	cr_assert_eq(sf__tok_load_spec(&spec, &tok, &err), SF_E_TOKENIZER);
	cr_assert(strstr(err.msg, "has the id 1 of a rank"), "%s", err.msg);
	cr_assert_null(tok);
	unlink(path);
}

static unsigned progress_calls;

static void count_progress(uint64_t bytes)
{
	(void)bytes;
	progress_calls++;
}

/*
 * A producer's heartbeat comes from the encoder's progress calls: a document that is one
 * long piece (40 million spaces, a review) made none while it was merged, for seconds,
 * and the producer was killed as stalled, six times, and the job stopped. The merge of a
 * long piece reports as it goes.
 */
Test(progress, one_long_piece_reports_while_it_merges)
{
	struct sf_tok *tok = tok_test_load("cl100k_base");
	struct sf_tok_encoder *enc;
	const size_t n = 1 << 20;
	char *spaces = malloc(n);
	const uint32_t *ids;
	size_t n_ids;

	cr_assert(tok && spaces);
	memset(spaces, ' ', n);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
	progress_calls = 0;
	sf__tok_progress = count_progress;
	cr_assert_eq(sf__tok_encode(enc, spaces, n, SF_TOK_ALLOW_NONE, &ids, &n_ids, NULL), 0);
	sf__tok_progress = NULL;
	cr_expect(progress_calls >= 8, "%u progress calls over one piece of %zu bytes",
		  progress_calls, n);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	/* The bytes encoding (one id a byte) made no call at all. */
	cr_assert_eq(sf__tok_load("bytes", NULL, &tok, NULL), 0);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
	progress_calls = 0;
	sf__tok_progress = count_progress;
	cr_assert_eq(sf__tok_encode(enc, spaces, n, SF_TOK_ALLOW_NONE, &ids, &n_ids, NULL), 0);
	sf__tok_progress = NULL;
	cr_expect(progress_calls >= 3, "bytes: %u progress calls over %zu bytes", progress_calls,
		  n);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	free(spaces);
}
