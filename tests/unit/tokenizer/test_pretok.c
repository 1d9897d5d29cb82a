/*
 * The hand-written pre-tokenizers against PCRE2 running tiktoken's patterns (the
 * oracle), the heap merge against tiktoken's merge loop, and the inputs that make naive
 * regex scanning or merging quadratic. Random inputs draw from a pool of characters
 * chosen to exercise every alternative of the patterns, and from every code point (PCRE2
 * 10.42's tables are Unicode 14.0, but the patterns get 16.0's general categories, as the
 * scanners have).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <time.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"
#include "tok_test_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t bound)
{
	return tok_test_rnd(&rng_state, bound);
}

/* A character that stresses the patterns: ASCII classes, case, marks, spaces, numbers. */
static uint32_t pick_char(void)
{
	static const uint32_t pool[] = {
		'a',	'b',	'Z',	 'Q',	  's',	 'S',	't',	'r',	'e',	 'v',
		'm',	'l',	'L',	 'd',	  'D',	 '\'',	'\'',	'\'',	' ',	 ' ',
		' ',	'\t',	'\n',	 '\n',	  '\r',	 '\v',	'\f',	'0',	'7',	 '!',
		'/',	'/',	'.',	 '-',	  0xa0,	 0x85,	0x1680, 0x2003, 0x3000,	 0x180e,
		0x17f,	0x212a, 0xc0,	 0xe9,	  0x1c5, 0x2b0, 0x2b0,	0x5d0,	0x4e00,	 0xac00,
		0x300,	0x301,	0x301,	 0x20dd,  0x903, 0x663, 0xbd,	0x2160, 0x1f44d, 0x1f600,
		0x200d, 0xfe0f, 0x10400, 0x10428, 0xaa,	 0x3a3, 0x3c2,	0x1e9e, 0xdf,	 0x2028,
	};

	if (rnd(8) == 0) {
		uint32_t cp = rnd(4) ? rnd(0x3400) : rnd(0x110000);

		if (cp < 0xd800 || cp > 0xdfff)
			return cp;
	}
	return pool[rnd(sizeof(pool) / sizeof(pool[0]))];
}

static size_t random_text(uint8_t *buf, size_t max_chars)
{
	size_t n = 0, chars = 1 + rnd((uint32_t)max_chars), i;

	for (i = 0; i < chars; i++)
		n += sf__utf8_encode(pick_char(), buf + n);
	return n;
}

/* Compare the piece boundaries of the scanner and of PCRE2 on s[0..n). */
static void compare_split(int pretok, pcre2_code *re, pcre2_match_data *md, const uint8_t *s,
			  size_t n)
{
	size_t p = 0, start, end, want;
	int rc;

	while (p < n) {
		end = sf__pretok_next(pretok, s, n, p);
		rc = sf__pcre_next(re, md, s, n, p, &start, &want);
		cr_assert_eq(rc, 1);
		cr_assert(start == p && end == want,
			  "pattern %d: piece at %zu ends at %zu, PCRE2 says %zu..%zu in '%.*s'",
			  pretok, p, end, start, want, (int)n, s);
		p = end;
	}
}

/* The scanner against PCRE2 on `rounds` random strings, then on every tok_test_word(). */
static void against_oracle(int pretok, int rounds)
{
	pcre2_code *re = NULL;
	pcre2_match_data *md;
	struct sf_err err = {0};
	uint8_t buf[64 * 4];
	int i;

	cr_assert_eq(sf__pcre_compile(sf__pretok_pattern(pretok), &re, NULL, &err), 0, "%s",
		     err.msg);
	md = pcre2_match_data_create_from_pattern(re, NULL);
	for (i = 0; i < rounds; i++) {
		size_t n = random_text(buf, 48);

		compare_split(pretok, re, md, buf, n);
	}
	for (i = 0; i < TOK_TEST_WORDS; i++)
		compare_split(pretok, re, md, buf, tok_test_word((size_t)i, buf));
	pcre2_match_data_free(md);
	pcre2_code_free(re);
}

Test(oracle, r50k_random)
{
	against_oracle(SF_PRETOK_R50K, 30000);
}

Test(oracle, cl100k_random)
{
	against_oracle(SF_PRETOK_CL100K, 30000);
}

Test(oracle, o200k_random)
{
	against_oracle(SF_PRETOK_O200K, 30000);
}

/* The reference texts, split whole, as a longer deterministic check. */
Test(oracle, reference_texts)
{
	static const char *const files[] = {"tokref/unicode_mix.txt", "corpus/tinyshakespeare.txt"};
	char path[4096];
	int pretok;
	size_t f, n;

	for (f = 0; f < 2; f++) {
		uint8_t *text;

		snprintf(path, sizeof(path), "%s/%s", tok_test_data(), files[f]);
		text = tok_test_read(path, &n);
		cr_assert_not_null(text);
		for (pretok = SF_PRETOK_R50K; pretok <= SF_PRETOK_O200K; pretok++) {
			pcre2_code *re = NULL;
			pcre2_match_data *md;

			cr_assert_eq(sf__pcre_compile(sf__pretok_pattern(pretok), &re, NULL, NULL),
				     0);
			md = pcre2_match_data_create_from_pattern(re, NULL);
			compare_split(pretok, re, md, text, n);
			pcre2_match_data_free(md);
			pcre2_code_free(re);
		}
		free(text);
	}
}

/*
 * The tree and heap merges must pick the same pairs as tiktoken's loop on every piece,
 * and so must the scan and the tree told that 8 bytes past the piece can be read, with
 * random bytes there that no key may take in.
 */
Test(bpe, tree_and_heap_equal_scan)
{
	static const char *const encodings[] = {"r50k_base", "cl100k_base", "o200k_base"};
	static const char alphabet[] = "aaaabbcdee    \n!!=-0011st'";
	uint32_t a[SF_BPE_SHORT_MAX], b[SF_BPE_SHORT_MAX], c[SF_BPE_SHORT_MAX];
	uint8_t piece[SF_BPE_SHORT_MAX + 8];
	size_t e, na, nb, nc, i;
	int round;

	for (e = 0; e < 3; e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);
		struct sf_tok_encoder *enc;

		cr_assert_not_null(tok);
		cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
		for (round = 0; round < 20000; round++) {
			/* Mostly up to 64 bytes; one in 16 up to the tree's longest. */
			size_t len = 2 + rnd(rnd(16) ? 63 : SF_BPE_SHORT_MAX - 1);

			for (i = 0; i < len + 8; i++)
				piece[i] = rnd(4) ? (uint8_t)alphabet[rnd(sizeof(alphabet) - 1)]
						  : (uint8_t)rnd(256);
			cr_assert_eq(sf__bpe_heap(enc, piece, len, c, &nc), 0);
			for (int padded = 0; padded < 2; padded++) {
				cr_assert_eq(sf__bpe_scan(&tok->ranks, piece, len, a, &na, padded),
					     0);
				cr_assert_eq(sf__bpe_tree(&tok->ranks, piece, len, b, &nb, padded),
					     0);
				cr_assert(na == nc && !memcmp(a, c, na * sizeof(*a)),
					  "%s: scan merges (padded %d) differ on a piece of %zu "
					  "bytes",
					  encodings[e], padded, len);
				cr_assert(nb == nc && !memcmp(b, c, nb * sizeof(*b)),
					  "%s: tree merges (padded %d) differ on a piece of %zu "
					  "bytes",
					  encodings[e], padded, len);
			}
		}
		sf__tok_encoder_free(enc);
		sf__tok_free(tok);
	}
}

/*
 * A piece past the merges' 32-bit positions (a 4 GiB run of one punctuation byte) was
 * merged as its length modulo 2^32, the rest dropped, or never finished at 2^32 - 1: it
 * is refused. (The length is checked before any byte is read, so a short buffer stands
 * in for the piece.)
 */
Test(bpe, a_piece_past_32_bit_positions_is_refused)
{
	struct sf_tok *tok = tok_test_load("r50k_base");
	struct sf_tok_encoder *enc;
	const uint8_t piece[4] = "!!!!";
	uint32_t out[4];
	size_t n;

	cr_assert_not_null(tok);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
	cr_expect_eq(sf__bpe_heap(enc, piece, (size_t)SF_BPE_PIECE_MAX + 1, out, &n), -EFBIG);
	cr_expect_eq(sf__bpe_heap(enc, piece, (size_t)1 << 32, out, &n), -EFBIG);
	cr_expect_eq(sf__bpe_heap(enc, piece, 4, out, &n), 0);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
}

/*
 * CPU time of this thread: the bound is on the work an input costs (a quadratic merge
 * would take minutes), and wall time on a machine shared with other builds also counts
 * their turns on the core.
 */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if defined(__SANITIZE_ADDRESS__)
#define LONG_RUN_LIMIT 10.0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LONG_RUN_LIMIT 10.0
#endif
#endif
#ifndef LONG_RUN_LIMIT
#define LONG_RUN_LIMIT 1.0
#endif

/* A megabyte of one character (or pattern) encodes in under a CPU second, and round trips. */
Test(long_runs, one_megabyte)
{
	static const char *const encodings[] = {"r50k_base", "cl100k_base", "o200k_base"};
	static const char *const units[] = {"a", " ",	     "1",  "^",	  "\n",
					    "A", "\xcc\x81", "ab", " \n", "\xe4\xb8\x80"};
	const size_t size = 1 << 20;
	uint8_t *text = malloc(size), *back = malloc(size);
	size_t e, u, i, n, len;

	for (e = 0; e < 3; e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);
		struct sf_tok_encoder *enc;

		cr_assert_not_null(tok);
		cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
		for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
			size_t ulen = strlen(units[u]);
			const uint32_t *ids;
			double t0, dt;

			for (i = 0; i + ulen <= size; i += ulen)
				memcpy(text + i, units[u], ulen);
			n = i;
			t0 = now();
			cr_assert_eq(sf__tok_encode(enc, text, n, 0, &ids, &len, NULL), 0);
			dt = now() - t0;
			cr_expect(dt < LONG_RUN_LIMIT, "%s: 1 MB of '%s' took %.3f s", encodings[e],
				  units[u], dt);
			cr_assert_eq(sf__tok_decode(tok, ids, len, back, size, &len, NULL), 0);
			cr_assert(len == n && !memcmp(back, text, n));
		}
		sf__tok_encoder_free(enc);
		sf__tok_free(tok);
	}
	free(text);
	free(back);
}

/* decode(encode(x)) == x for random valid UTF-8 and for arbitrary bytes. */
Test(roundtrip, random)
{
	static const char *const encodings[] = {"r50k_base", "cl100k_base", "o200k_base"};
	uint8_t buf[256 * 4], back[256 * 4];
	size_t e, n, len, i;
	int round;

	for (e = 0; e < 3; e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);
		struct sf_tok_encoder *enc;

		cr_assert_not_null(tok);
		cr_assert_eq(sf__tok_encoder_create(tok, &enc, NULL), 0);
		for (round = 0; round < 5000; round++) {
			const uint32_t *ids;
			size_t count;

			if (round % 2) {
				n = random_text(buf, 200);
			} else {
				n = rnd(200);
				for (i = 0; i < n; i++)
					buf[i] = (uint8_t)rnd(256);
			}
			cr_assert_eq(
				sf__tok_encode(enc, buf, n, SF_TOK_ALLOW_ALL, &ids, &count, NULL),
				0);
			cr_assert_eq(
				sf__tok_decode(tok, ids, count, back, sizeof(back), &len, NULL), 0);
			cr_assert(len == n && !memcmp(back, buf, n), "%s: round trip failed",
				  encodings[e]);
		}
		sf__tok_encoder_free(enc);
		sf__tok_free(tok);
	}
}

/* A custom pattern runs through PCRE2 and still round trips. */
Test(custom, pcre_pattern)
{
	static const struct sf_tok_special specials[] = {{"<|endoftext|>", 100257}};
	struct sf_tok_spec spec = {
		.name = "words", .pattern = "\\p{L}+|\\s+", .specials = specials, .n_specials = 1};
	struct sf_tok_encoder *enc;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	const char text[] = "hello world!! 42 <|endoftext|>\xff";
	const uint32_t *ids;
	char path[4096], back[64];
	size_t n, len;

	snprintf(path, sizeof(path), "%s/vocab/cl100k_base.tiktoken", tok_test_data());
	spec.vocab_path = path;
	cr_assert_eq(sf__tok_load_spec(&spec, &tok, &err), 0, "%s", err.msg);
	cr_assert_eq(tok->pretok, SF_PRETOK_PCRE);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &err), 0);
	cr_assert_eq(sf__tok_encode(enc, text, sizeof(text) - 1, SF_TOK_ALLOW_ALL, &ids, &n, &err),
		     0, "%s", err.msg);
	cr_assert_eq(ids[0], 15339);
	cr_assert_eq(ids[n - 2], 100257);
	cr_assert_eq(sf__tok_decode(tok, ids, n, back, sizeof(back), &len, &err), 0);
	cr_assert(len == sizeof(text) - 1 && !memcmp(back, text, len));
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);

	spec.pattern = "[\\S]";
	cr_assert_eq(sf__tok_load_spec(&spec, &tok, &err), SF_E_TOKENIZER);
	spec.pattern = "(";
	cr_assert_eq(sf__tok_load_spec(&spec, &tok, &err), SF_E_TOKENIZER);
}

/* sf__pcre_compile() of `pattern` in tiktoken's syntax, or with `hf` in tokenizer.json's. */
static int compile_as(bool hf, const char *pattern, pcre2_code **ret_re, struct sf_err *e)
{
	return hf ? sf__pcre_compile_hf(pattern, ret_re, NULL, e)
		  : sf__pcre_compile(pattern, ret_re, NULL, e);
}

/* The pieces `pattern` (tiktoken's syntax, or with `hf` tokenizer.json's) cuts `text` into,
 * joined by '|'. */
static void pieces(const char *pattern, bool hf, const char *text, char *out, size_t cap)
{
	pcre2_code *re = NULL;
	pcre2_match_data *md;
	struct sf_err err = {0};
	size_t p = 0, start, end, o = 0;
	int r;

	r = compile_as(hf, pattern, &re, &err);
	cr_assert_eq(r, 0, "%s: %s", pattern, err.msg);
	md = pcre2_match_data_create_from_pattern(re, NULL);
	while (sf__pcre_next(re, md, (const uint8_t *)text, strlen(text), p, &start, &end) > 0) {
		o += (size_t)snprintf(out + o, cap - o, "%s%.*s", o ? "|" : "", (int)(end - start),
				      text + start);
		p = end;
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
}

/*
 * \p{Han}, \p{Greek}: a script, as tiktoken's regex and Oniguruma read it. PCRE2 10.40 and
 * later read a bare script name as Script_Extensions, where U+3001 (、, Script Common) is
 * Han too: "中、文" was one piece, and the ids differed from tiktoken's and tokenizers'
 * (a review). Categories, sc= and negations keep their meaning.
 */
Test(custom, script_properties_are_scripts)
{
	static const struct {
		const char *pattern, *text, *want;
	} cases[] = {
		{"\\p{Han}+|.", "中、文", "中|、|文"},
		{"[\\p{Han}\\p{Greek}]+|.", "中、β文", "中|、|β文"},
		{"\\p{Greek}+|\\p{Han}+|.", "ᾶβ 中、文", "ᾶβ| |中|、|文"},
		{"\\P{Han}+|.", "、a中", "、a|中"},
		{"\\p{^Han}+|.", "、a中", "、a|中"},
		{"\\p{sc=Han}+|.", "中、文", "中|、|文"},
		{"\\p{L}+|.", "中、文", "中|、|文"},
		/* Unicode 16.0's scripts, not PCRE2's 14.0: U+31350 (CJK Ext H, 15.0) is Han. */
		{"\\p{Han}+|.", "中\U00031350文", "中\U00031350文"},
		{"[\\p{Han}]+|.", "中\U00031350文", "中\U00031350文"},
		{"\\p{sc=Han}+|.", "中\U00031350文", "中\U00031350文"},
		{"\\p{Script=Han}+|.", "中\U00031350文", "中\U00031350文"},
		{"\\p{ SC = Han}+|.", "中\U00031350文", "中\U00031350文"},
		{"\\P{Han}+|.", "a\U00031350b", "a|\U00031350|b"},
		{"\\p{^Han}+|.", "a\U00031350b", "a|\U00031350|b"},
		{"[^\\p{Han}]+|.", "a\U00031350b", "a|\U00031350|b"},
		{"\\p{Unknown}+|.", "\U00031350\U00031351", "\U00031350|\U00031351"},
		{"\\p{Latin}+|.", "a\ua7cbb", "a\ua7cbb"},
	};
	char got[256];

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		for (int hf = 0; hf < 2; hf++) {
			pieces(cases[k].pattern, hf, cases[k].text, got, sizeof(got));
			cr_expect_str_eq(got, cases[k].want, "%s (%s) on %s", cases[k].pattern,
					 hf ? "tokenizer.json" : "tiktoken", cases[k].text);
		}
}

/* `pattern` is refused in both syntaxes, tiktoken's and tokenizer.json's, saying `needle`. */
static void expect_refused_as_both(const char *pattern, const char *needle)
{
	for (int hf = 0; hf < 2; hf++) {
		pcre2_code *re = NULL;
		struct sf_err err = {0};

		cr_expect_eq(compile_as(hf, pattern, &re, &err), SF_E_TOKENIZER, "%s", pattern);
		cr_expect(strstr(err.msg, needle), "%s: %s", pattern, err.msg);
		pcre2_code_free(re);
	}
}

/*
 * Properties other than general categories and scripts (binary ones such as Alphabetic,
 * Script_Extensions, PCRE2's own Xwd) are PCRE2's Unicode 14.0 there: refused rather
 * than read with other code points than tiktoken's regex and Oniguruma read them with
 * (\p{scx=Han} was taken as it was). Any and ASCII are the same in every version.
 */
Test(custom, other_properties_are_refused)
{
	static const char *const refused[] = {"\\p{Alphabetic}+|.", "\\p{scx=Han}+|.",
					      "[\\p{White_Space}x]|.", "\\P{Alpha}|.",
					      "\\p{^Xwd}|."};
	static const char *const accepted[] = {"\\p{Any}", "\\p{ASCII}+|\\P{ascii}+"};

	for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++)
		expect_refused_as_both(refused[k], "not supported (PCRE2's properties other than");
	for (size_t k = 0; k < sizeof(accepted) / sizeof(accepted[0]); k++)
		for (int hf = 0; hf < 2; hf++) {
			pcre2_code *re = NULL;
			struct sf_err err = {0};

			cr_expect_eq(compile_as(hf, accepted[k], &re, &err), 0, "%s: %s",
				     accepted[k], err.msg);
			pcre2_code_free(re);
		}
}

/* Whether `re` matches all of `text` from its start. */
static bool matches_text(const pcre2_code *re, pcre2_match_data *md, const char *text)
{
	size_t len = strlen(text);

	return pcre2_match(re, (PCRE2_SPTR)text, len, 0, PCRE2_ANCHORED, md, NULL) >= 0 &&
	       pcre2_get_ovector_pointer(md)[1] == len;
}

/* Whether `re` matches all of the character cp (false for a pattern that matches less). */
static bool matches_whole(const pcre2_code *re, pcre2_match_data *md, uint32_t cp)
{
	uint8_t buf[4];
	size_t len = sf__utf8_encode(cp, buf);

	return pcre2_match(re, buf, len, 0, PCRE2_ANCHORED, md, NULL) >= 0 &&
	       pcre2_get_ovector_pointer(md)[1] == len;
}

/*
 * Patterns are matched as in Unicode 16.0 by correcting PCRE2's tables from 14.0 (Debian
 * 12's 10.42) up, which is right for a PCRE2 of any Unicode from 14.0 to 16.0 and wrong
 * for one of another (a later PCRE2's Unicode 17.0 would let a custom pattern take code
 * points as letters that tiktoken and tokenizers do not): such a PCRE2 is refused, saying
 * why, and the one here fits.
 */
Test(custom, a_pcre2_of_another_unicode_is_refused)
{
	static const char *const fit[] = {"14.0.0", "15.0.0", "15.1.0", "16.0.0", "16.0"};
	static const char *const unfit[] = {"13.0.0", "17.0.0", "16.1.0", "", "sixteen", "16"};
	struct sf_err e = {0};
	char here[32] = "";
	pcre2_code *re = NULL, *fast = NULL;

	for (size_t i = 0; i < sizeof(fit) / sizeof(*fit); i++)
		cr_expect_eq(sf__pcre_unicode_fits(fit[i], &e), 0, "%s: %s", fit[i], e.msg);
	for (size_t i = 0; i < sizeof(unfit) / sizeof(*unfit); i++) {
		cr_expect_eq(sf__pcre_unicode_fits(unfit[i], &e), SF_E_TOKENIZER, "%s", unfit[i]);
		cr_expect(strstr(e.msg, "a PCRE2 of Unicode 14.0 to 16.0.0 is needed"), "%s",
			  e.msg);
	}
	cr_assert_geq(pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, here), 0);
	cr_expect_eq(sf__pcre_unicode_fits(here, &e), 0, "this PCRE2's %s: %s", here, e.msg);
	cr_expect_eq(sf__pcre_compile("\\p{L}+", &re, &fast, &e), 0, "%s", e.msg);
	pcre2_code_free(re);
	pcre2_code_free(fast);
}

/*
 * Every code point whose script changed since PCRE2's Unicode changed category too, so that
 * a text that holds one runs the pattern with the scripts of Unicode 16.0
 * (sf__pcre_text_changed()); and each was unassigned (script Unknown) in PCRE2's own
 * tables, as is the code point `then` that names its old script there.
 */
Test(custom, script_changes_are_pcre2s)
{
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);
	pcre2_code *unknown;
	PCRE2_SIZE where;
	int err;

	/* PCRE2 itself: sf__pcre_compile() would give it Unicode 16.0's Unknown. */
	unknown = pcre2_compile((PCRE2_SPTR) "\\p{sc=Unknown}", PCRE2_ZERO_TERMINATED,
				PCRE2_UTF | PCRE2_UCP, &err, &where, NULL);
	cr_assert(unknown);
	cr_assert_gt(sf__uc_sc_changes_n, 0);
	for (size_t i = 0; i < sf__uc_sc_changes_n; i++) {
		const struct sf_uc_sc_change *c = &sf__uc_sc_changes[i];

		cr_expect(c->lo <= c->hi && (i == 0 || sf__uc_sc_changes[i - 1].hi < c->lo),
			  "range %zu", i);
		for (uint32_t cp = c->lo; cp <= c->hi; cp++) {
			uint8_t buf[4];
			size_t len = sf__utf8_encode(cp, buf);

			cr_expect(sf__pcre_text_changed(buf, len), "U+%04X", cp);
			cr_expect(matches_whole(unknown, md, cp) &&
					  matches_whole(unknown, md, c->then),
				  "U+%04X", cp);
		}
	}
	pcre2_code_free(unknown);
	pcre2_match_data_free(md);
}

/*
 * A general category, \p{L} and the like, is Unicode 16.0's, as in tiktoken's regex crate
 * and the Oniguruma of `tokenizers` 0.23, not PCRE2 10.42's Unicode 14.0: for every code
 * point the rewritten patterns agree with the scanners' tables (Unicode 16.0). They missed
 * the 10,291 code points assigned since, e.g. the Kawi letter U+11F21, which DeepSeek's
 * file split off another piece than `tokenizers` did (a review).
 */
Test(custom, general_categories_are_unicode_16)
{
	static const struct {
		const char *pattern;
		unsigned bits; /* SF_UC_* */
		bool outside;  /* the code points outside `bits` match */
		bool rust_only;
	} cases[] = {
		{"\\p{L}", SF_UC_L, false, false},
		{"\\pL", SF_UC_L, false, true},
		{"\\p{N}", SF_UC_N, false, false},
		{"\\P{L}", SF_UC_L, true, false},
		{"\\PN", SF_UC_N, true, true},
		{"\\p{^N}", SF_UC_N, true, false},
		{"\\P{^L}", SF_UC_L, false, false},
		{"[^\\p{L}\\p{N}]", SF_UC_L | SF_UC_N, true, false},
		{"[x\\p{N}\\p{L}]", SF_UC_L | SF_UC_N, false, false},
		{"[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]", SF_UC_UP, false, false},
		{"[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]", SF_UC_LO, false, false},
	};
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		for (int hf = 0; hf < 2; hf++) {
			pcre2_code *re = NULL;
			struct sf_err err = {0};
			uint32_t first = 0;
			size_t bad = 0;

			if (hf && cases[k].rust_only)
				continue;
			cr_assert_eq(compile_as(hf, cases[k].pattern, &re, &err), 0, "%s: %s",
				     cases[k].pattern, err.msg);
			for (uint32_t cp = 0; cp < 0x110000; cp++) {
				bool in = (sf__uc_class(cp) & cases[k].bits) != 0;

				if (cp >= 0xd800 && cp <= 0xdfff)
					continue;
				if (matches_whole(re, md, cp) != (in != cases[k].outside) && !bad++)
					first = cp;
			}
			cr_expect_eq(bad, 0,
				     "%s (%s): %zu code points otherwise than Unicode %s, "
				     "the first U+%04X",
				     cases[k].pattern, hf ? "tokenizer.json" : "tiktoken", bad,
				     sf__uc_version, first);
			pcre2_code_free(re);
		}
	pcre2_match_data_free(md);
}

/*
 * \d and \D are \p{Nd} and \P{Nd} to tiktoken's regex and to Oniguruma, of Unicode 16.0: they
 * match what those do (checked above against the scanners' tables) at every code point, the
 * digits new since PCRE2's Unicode 14.0 included (Kawi U+11F50, Nag Mundari U+1E4F0, Garay
 * U+10D40).
 */
Test(custom, digit_escapes_are_unicode_16)
{
	static const char *const cases[][2] = {
		{"\\d", "\\p{Nd}"},	  {"\\D", "\\P{Nd}"},	    {"[\\d]", "[\\p{Nd}]"},
		{"[^\\d]", "[^\\p{Nd}]"}, {"[x\\d]", "[x\\p{Nd}]"},
	};
	static const uint32_t new_digits[] = {0x11f50, 0x1e4f0, 0x10d40};
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		for (int hf = 0; hf < 2; hf++) {
			pcre2_code *re[2] = {NULL, NULL};
			struct sf_err err = {0};
			uint32_t first = 0;
			size_t bad = 0;

			for (int j = 0; j < 2; j++)
				cr_assert_eq(compile_as(hf, cases[k][j], &re[j], &err), 0, "%s: %s",
					     cases[k][j], err.msg);
			for (uint32_t cp = 0; cp < 0x110000; cp++) {
				if (cp >= 0xd800 && cp <= 0xdfff)
					continue;
				if (matches_whole(re[0], md, cp) != matches_whole(re[1], md, cp) &&
				    !bad++)
					first = cp;
			}
			cr_expect_eq(bad, 0,
				     "%s (%s): %zu code points otherwise than %s, the first U+%04X",
				     cases[k][0], hf ? "tokenizer.json" : "tiktoken", bad,
				     cases[k][1], first);
			for (size_t d = 0; d < sizeof(new_digits) / sizeof(new_digits[0]); d++)
				cr_expect_eq(matches_whole(re[0], md, new_digits[d]),
					     strstr(cases[k][0], "\\d") &&
						     !strchr(cases[k][0], '^'),
					     "%s (%s) at U+%04X", cases[k][0],
					     hf ? "tokenizer.json" : "tiktoken", new_digits[d]);
			pcre2_code_free(re[0]);
			pcre2_code_free(re[1]);
		}
	pcre2_match_data_free(md);
	/* In a class \D would have to take the new digits out: refused, as [\P{Nd}] is. */
	{
		pcre2_code *re = NULL;
		struct sf_err err = {0};

		cr_expect_eq(sf__pcre_compile("[\\Dx]", &re, NULL, &err), SF_E_TOKENIZER);
		cr_expect(strstr(err.msg, "\\D inside a character class is not supported"), "%s",
			  err.msg);
		pcre2_code_free(re);
	}
}

/*
 * \w (tiktoken's: Alphabetic, marks, Nd, Pc, Join_Control), \W, \b and \B are Unicode 16.0's
 * as well: every letter of the scanners' tables is a word character (the letters new since
 * 14.0 were not), every word character of PCRE2's own 14.0 class still is, \W is its
 * complement, and a new letter after "a" makes no boundary.
 */
Test(custom, word_escapes_are_unicode_16)
{
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);
	pcre2_code *w = NULL, *nw = NULL, *w14, *b = NULL;
	struct sf_err err = {0};
	size_t bad_letter = 0, bad_old = 0, bad_not = 0;
	uint32_t first[3] = {0, 0, 0};
	int code;
	PCRE2_SIZE where;

	cr_assert_eq(sf__pcre_compile("\\w", &w, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(sf__pcre_compile("\\W", &nw, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(sf__pcre_compile("a\\B.", &b, NULL, &err), 0, "%s", err.msg);
	w14 = pcre2_compile((PCRE2_SPTR) "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]",
			    PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &where, NULL);
	cr_assert(w14);
	for (uint32_t cp = 0; cp < 0x110000; cp++) {
		bool word;

		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		word = matches_whole(w, md, cp);
		if ((sf__uc_class(cp) & SF_UC_L) && !word && !bad_letter++)
			first[0] = cp;
		if (matches_whole(w14, md, cp) && !word && !bad_old++)
			first[1] = cp;
		if (matches_whole(nw, md, cp) == word && !bad_not++)
			first[2] = cp;
	}
	cr_expect_eq(bad_letter, 0, "%zu letters are no \\w, the first U+%04X", bad_letter,
		     first[0]);
	cr_expect_eq(bad_old, 0, "%zu word characters of 14.0 are no \\w, the first U+%04X",
		     bad_old, first[1]);
	cr_expect_eq(bad_not, 0, "\\W is not the complement of \\w at %zu, the first U+%04X",
		     bad_not, first[2]);
	/* "a" then the Garay letter U+10D4A (16.0): both word characters, no boundary. */
	cr_expect(pcre2_match(b, (PCRE2_SPTR) "a\xf0\x90\xb5\x8a", 5, 0, PCRE2_ANCHORED, md,
			      NULL) >= 0,
		  "a\\B. does not match \"a\" + U+10D4A");
	pcre2_code_free(w);
	pcre2_code_free(nw);
	pcre2_code_free(w14);
	pcre2_code_free(b);
	pcre2_match_data_free(md);
}

/*
 * A comment (?#...) is nothing, as Oniguruma and tiktoken's fancy-regex read it: \P{L} in
 * one was rewritten into a lookahead whose ')' ended the comment early, and the pattern was
 * refused; an escaped ')' ends none for them, but did for PCRE2 (a review: a(?#\)(b)c
 * matched "abc" here, "ac" there). One never closed is refused, as they refuse it.
 */
Test(custom, a_comment_is_nothing)
{
	static const struct {
		const char *pattern, *match, *no_match;
	} cases[] = {{"a(?#\\P{L} \\w \\d)b", "ab", "a"},
		     {"a(?#\\)(b)c", "ac", "abc"},
		     {"a(?#[)b", "ab", "a[b"}};
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		for (int hf = 0; hf < 2; hf++) {
			pcre2_code *re = NULL;
			struct sf_err err = {0};
			const char *pattern = cases[k].pattern;

			cr_assert_eq(compile_as(hf, pattern, &re, &err), 0, "%s: %s", pattern,
				     err.msg);
			cr_expect(matches_text(re, md, cases[k].match),
				  "%s does not match %s whole", pattern, cases[k].match);
			cr_expect(!matches_text(re, md, cases[k].no_match), "%s matches %s whole",
				  pattern, cases[k].no_match);
			pcre2_code_free(re);
		}
	pcre2_match_data_free(md);
	for (int hf = 0; hf < 2; hf++) {
		pcre2_code *re = NULL;
		struct sf_err err = {0};

		cr_expect_eq(compile_as(hf, "a(?#\\)|.", &re, &err), SF_E_TOKENIZER);
		cr_expect(strstr(err.msg, "the comment at offset 1 is not closed"), "%s", err.msg);
	}
}

/* A pattern PCRE2 refuses is named with an offset in it as written, not in its rewriting
 * (which put \p{L}'s added ranges before the error: offset 959 here). */
Test(custom, an_error_offset_is_in_the_pattern_as_written)
{
	for (int hf = 0; hf < 2; hf++) {
		pcre2_code *re = NULL;
		struct sf_err err = {0};
		const char *pattern = "\\p{L}\\s(a";

		cr_assert_eq(compile_as(hf, pattern, &re, &err), SF_E_TOKENIZER);
		cr_expect(strstr(err.msg, "missing closing parenthesis") &&
				  !strcmp(strstr(err.msg, " at offset "), " at offset 9"),
			  "%s", err.msg);
	}
	/* Mapped back from the rewriting, not found again in the pattern as written: PCRE2
	 * refuses [\v-z] itself (\v is a class to it), which tiktoken and the rewriting
	 * take (a review). */
	{
		pcre2_code *re = NULL;
		struct sf_err err = {0};

		cr_assert_eq(sf__pcre_compile("[\\v-z](", &re, NULL, &err), SF_E_TOKENIZER);
		cr_expect(strstr(err.msg, "missing closing parenthesis at offset 7"), "%s",
			  err.msg);
	}
	/* [\w-z]: the class's last range then made the - a character, where tiktoken refuses
	 * a range from a class (a review). */
	{
		pcre2_code *re = NULL;
		struct sf_err err = {0};

		cr_expect_eq(sf__pcre_compile("[\\w-z]", &re, NULL, &err), SF_E_TOKENIZER);
		cr_expect(strstr(err.msg, "\\w- inside a character class"), "%s", err.msg);
	}
}

/* The ids of `text` under a tokenizer of cl100k_base's ranks split by `pattern`. */
static size_t encode_with(const char *pattern, const char *text, uint32_t *out, size_t cap,
			  bool *ret_fast)
{
	struct sf_tok_spec spec = {.name = "custom", .pattern = pattern};
	struct sf_tok_encoder *enc;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	const uint32_t *ids;
	char path[4096];
	size_t n;

	snprintf(path, sizeof(path), "%s/vocab/cl100k_base.tiktoken", tok_test_data());
	spec.vocab_path = path;
	cr_assert_eq(sf__tok_load_spec(&spec, &tok, &err), 0, "%s", err.msg);
	cr_assert_eq(tok->pretok, SF_PRETOK_PCRE);
	*ret_fast = tok->re_fast != NULL;
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &err), 0);
	cr_assert_eq(sf__tok_encode(enc, text, strlen(text), 0, &ids, &n, &err), 0, "%s", err.msg);
	cr_assert_leq(n, cap);
	memcpy(out, ids, n * sizeof(*ids));
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	return n;
}

/* A text with a symbol new since PCRE2's Unicode runs the pattern with Unicode 16.0's
 * classes (U+1FAE9, a symbol since 16.0, stays with the space before it: " \xf0\x9f" is
 * one id of cl100k_base's), one without it the pattern as written (which the tokenizer
 * keeps beside). */
Test(custom, a_text_with_a_new_symbol_takes_the_exact_pattern)
{
	static const char *const texts[] = {" \xf0\x9f\xab\xa9", " \xc2\xa9\xc2\xae",
					    " \xe2\x98\x83\xe2\x98\x83"};
	uint32_t split[64], whole[64];
	bool fast;

	for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
		size_t w = encode_with(" ?[^ ]+|(?s:.)", texts[k], whole, 64, &fast);
		size_t n;

		cr_assert(!fast, "no \\p: no second pattern");
		n = encode_with(" ?\\p{S}+|(?s:.)", texts[k], split, 64, &fast);
		cr_assert(fast, "\\p{S}: a second pattern with PCRE2's classes");
		cr_expect(n == w && !memcmp(split, whole, n * sizeof(*split)),
			  "text %zu: the symbols split otherwise than whole", k);
	}
}

/* U+1171E went from Mn to Mc in Unicode 15.0: \p{Mn} leaves it out, \p{Mc} and \p{M} take
 * it; inside a class, where PCRE2 cannot take it out of Mn, \p{Mn} is refused, as is any \P
 * of a category that gained code points, and a range from a category (PCRE2 refuses it).
 * So are a script that lost code points (Unknown) and the \P of one that gained some. */
Test(custom, a_category_that_lost_code_points)
{
	static const char *const refused[] = {
		"[\\p{Mn}]",  "[^\\p{Mn}x]", "[\\P{L}]",	"[x\\p{^N}]",	  "[\\p{Cn}]",
		"[\\p{L}-z]", "[\\P{Han}]",  "[x\\p{^sc=Han}]", "[\\p{Unknown}]", "[\\p{Han}-z]"};
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);
	static const struct {
		const char *pattern;
		bool match, match_300; /* U+1171E; U+0300, Mn in both versions */
	} cases[] = {{"\\p{Mn}", false, true}, {"\\p{Mc}", true, false}, {"\\p{M}", true, true},
		     {"[\\p{M}]", true, true}, {"\\P{Mn}", true, false}, {"\\P{Mc}", false, true}};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		for (int hf = 0; hf < 2; hf++) {
			pcre2_code *re = NULL;

			cr_assert_eq(compile_as(hf, cases[k].pattern, &re, NULL), 0, "%s",
				     cases[k].pattern);
			cr_expect_eq(matches_whole(re, md, 0x1171e), cases[k].match, "%s",
				     cases[k].pattern);
			cr_expect_eq(matches_whole(re, md, 0x300), cases[k].match_300,
				     "%s on U+0300", cases[k].pattern);
			pcre2_code_free(re);
		}
	for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++)
		expect_refused_as_both(refused[k], "inside a character class");
	pcre2_match_data_free(md);
}

/* $ in tiktoken's syntax is the end of the text, not also before a newline that ends it
 * (ab$ matched "ab" of "ab\n", where tiktoken gives a, b: a review). */
Test(custom, dollar_is_the_end_of_the_text)
{
	char got[64];

	pieces("ab$|(?s:.)", false, "ab\n", got, sizeof(got));
	cr_expect_str_eq(got, "a|b|\n");
	pieces("ab$|(?s:.)", false, "xab", got, sizeof(got));
	cr_expect_str_eq(got, "x|ab");
	pieces("(?m)ab$|(?s:.)", false, "ab\nab", got, sizeof(got));
	cr_expect_str_eq(got, "ab|\n|ab");
}
