/*
 * Tokenizer files without the families' packages: format detection, a .tiktoken file of
 * no known family (refused without a pattern, loaded with one), small tekken files (the
 * ids after the special tokens, the vocabulary cut to default_vocab_size, the default
 * and listed special tokens, malformed JSON refused at its byte), bos/eos policies, and
 * allowed sets over more than 64 special tokens. The real files are tested against their
 * references by test_families_ref.py.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"

static char path[64];

static void remove_file(void)
{
	if (path[0])
		unlink(path);
	path[0] = '\0';
}

/* A fresh file of `text` (the one written before in the same test is removed). */
static void write_file(const char *text)
{
	int fd;

	remove_file();
	snprintf(path, sizeof(path), "/tmp/sf-tokfile-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

TestSuite(tok_file, .fini = remove_file);

/* The 256 single bytes as .tiktoken lines (ranks 0..255) plus `extra`. */
static char *byte_lines(const char *extra)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc(256 * 16 + strlen(extra) + 1), *o = out;

	for (int i = 0; i < 256; i++)
		o += sprintf(o, "%c%c== %d\n", b64[i >> 2], b64[(i & 3) << 4], i);
	strcpy(o, extra);
	return out;
}

/* The same bytes as a tekken vocab list. */
static char *tekken_json(const char *config, const char *specials, const char *extra)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc(256 * 80 + 4096 + strlen(config) + strlen(specials) + strlen(extra)),
	     *o = out;

	o += sprintf(o, "{\"config\": %s,%s \"vocab\": [", config, specials);
	for (int i = 0; i < 256; i++)
		o += sprintf(o,
			     "%s{\"rank\": %d, \"token_bytes\": \"%c%c==\", \"token_str\": null}",
			     i ? ", " : "", i, b64[i >> 2], b64[(i & 3) << 4]);
	sprintf(o, "%s], \"image\": {\"size\": [1, 2.5e3, true]}}", extra);
	return out;
}

static void encode(struct sf_tok *tok, const char *text, uint64_t allowed, uint32_t *ids, size_t *n)
{
	struct sf_tok_encoder *enc;
	struct sf_err e = {0};
	const uint32_t *got;

	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__tok_encode(enc, text, strlen(text), allowed, &got, n, &e), 0, "%s", e.msg);
	memcpy(ids, got, *n * sizeof(*ids));
	sf__tok_encoder_free(enc);
}

Test(tok_file, unknown_tiktoken_needs_a_pattern)
{
	char *text = byte_lines("YWI= 1000\n");
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	uint32_t ids[8];
	size_t n;

	write_file(text);
	free(text);
	o.path = path;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER);
	cr_assert(
		strstr(e.msg, "no known family") &&
			strstr(e.msg, "tokenizer.pattern in a job, --pattern on the command line"),
		"%s", e.msg);
	/* Named by its tokens and its ranks: a gap made the count "1001 ranks" (a review). */
	cr_assert(strstr(e.msg, "(257 tokens, ranks 0..1000)"), "%s", e.msg);
	o.pattern = "\\p{L}+|\\s+|.";
	o.format = SF_TOK_FORMAT_TIKTOKEN;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), 0, "%s", e.msg);
	cr_assert_eq(tok->pretok, SF_PRETOK_PCRE);
	cr_assert_str_eq(sf__tok_family(tok), "");
	cr_assert_eq(sf__tok_bos(tok), SF_E_TOKENIZER);
	encode(tok, "ab a", 0, ids, &n);
	cr_assert_eq(n, 3);
	cr_assert_eq(ids[0], 1000);
	cr_assert_eq(ids[1], ' ');
	cr_assert_eq(ids[2], 'a');
	sf__tok_free(tok);
}

/* Load a tekken file of `config` and `specials` (the special_tokens member, or ""). */
static int load_tekken(const char *config, const char *specials, struct sf_tok **ret,
		       struct sf_err *e)
{
	char *text = tekken_json(config, specials, "");
	struct sf_tok_file_opts o = {0};

	write_file(text);
	free(text);
	o.path = path;
	return sf__tok_load_file(&o, ret, e);
}

static const char tekken_config[] =
	"{\"pattern\": \"\\\\p{L}+|\\\\s+|.\", \"num_vocab_tokens\": 259, "
	"\"default_vocab_size\": 283, \"default_num_special_tokens\": 25, \"version\": \"v3\"}";

Test(tok_file, tekken_ids_follow_the_specials)
{
	/* 259 ranks in the file, 283 - 25 = 258 kept: "ab" (256) and "ba" (257) stay,
	 * "aba" (258) is cut, as mistral-common cuts it. */
	char *text =
		tekken_json(tekken_config, "",
			    ", {\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}"
			    ", {\"rank\": 257, \"token_bytes\": \"YmE=\", \"token_str\": \"ba\"}"
			    ", {\"rank\": 258, \"token_bytes\": \"YWJh\", \"token_str\": "
			    "\"a\\u00e9\\ud83d\\ude00\"}");
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	int32_t id;
	uint32_t ids[8];
	size_t n;

	write_file(text);
	free(text);
	o.path = path;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), 0, "%s", e.msg);
	cr_assert_str_eq(sf__tok_family(tok), "tekken");
	cr_assert_eq(sf__tok_n_vocab(tok), 283);
	cr_assert_eq(sf__tok_bos(tok), 1);
	cr_assert_eq(sf__tok_eot(tok), 2);
	cr_assert_eq(sf__tok_special(tok, "[INST]", NULL), 3);
	cr_assert_eq(sf__tok_special(tok, "<SPECIAL_24>", NULL), 24);
	encode(tok, "aba", 0, ids, &n);
	cr_assert_eq(n, 2);
	cr_assert_eq(ids[0], 25 + 256);
	cr_assert_eq(ids[1], 25 + 'a');
	/* Special-token text is ordinary text unless allowed. */
	encode(tok, "[INST]", 0, ids, &n);
	cr_assert_eq(n, 6);
	encode(tok, "[INST]", SF_TOK_ALLOW_ALL, ids, &n);
	cr_assert_eq(n, 1);
	cr_assert_eq(ids[0], 3);
	cr_assert_eq(sf__tok_marker(tok, "auto", 1, &id, &e), 0);
	cr_assert_eq(id, 1);
	cr_assert_eq(sf__tok_marker(tok, "none", 1, &id, &e), 0);
	cr_assert_eq(id, -1);
	cr_assert_eq(sf__tok_marker(tok, "[INST]", 0, &id, &e), 0);
	cr_assert_eq(id, 3);
	cr_assert_eq(sf__tok_marker(tok, "none", 0, &id, &e), SF_E_TOKENIZER);
	cr_assert_eq(sf__tok_marker(tok, "<nope>", 1, &id, &e), SF_E_TOKENIZER);
	/* A special token's id for its text: named as such (the message said "3 is not a
	 * special token", a review). */
	cr_assert_eq(sf__tok_marker(tok, "3", 1, &id, &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "bos 3: the id of [INST]; give its text (bos: \"[INST]\")"), "%s",
		  e.msg);
	sf__tok_free(tok);
}

Test(tok_file, tekken_listed_specials)
{
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};

	cr_assert_eq(load_tekken("{\"pattern\": \".\", \"default_vocab_size\": 259, "
				 "\"default_num_special_tokens\": 3, \"version\": \"v13\"}",
				 " \"special_tokens\": [{\"rank\": 0, \"token_str\": \"<unk>\", "
				 "\"is_control\": true}, {\"rank\": 1, \"token_str\": \"<s>\", "
				 "\"is_control\": true}, {\"rank\": 2, \"token_str\": \"</s>\", "
				 "\"is_control\": true}],",
				 &tok, &e),
		     0, "%s", e.msg);
	cr_assert_eq(sf__tok_n_vocab(tok), 259);
	cr_assert_eq(sf__tok_eot(tok), 2);
	cr_assert_str_eq(sf__tok_special_text(tok, 1), "<s>");
	sf__tok_free(tok);
}

/* An empty special_tokens list is the file's (all fillers, no <s> or </s>), as
 * mistral-common reads it: v3 took the deprecated names (bos <s> 1), v13 was refused. A
 * null list is none (v3: the deprecated names); it was refused ("expected an array"). */
Test(tok_file, tekken_empty_special_list)
{
	static const char *const versions[] = {"v3", "v13"};

	struct sf_tok *tok = NULL;
	struct sf_err e = {0};

	for (size_t v = 0; v < 2; v++) {
		char config[256];

		snprintf(config, sizeof(config),
			 "{\"pattern\": \".\", \"default_vocab_size\": 259, "
			 "\"default_num_special_tokens\": 3, \"version\": \"%s\"}",
			 versions[v]);
		cr_assert_eq(load_tekken(config, " \"special_tokens\": [],", &tok, &e), 0, "%s: %s",
			     versions[v], e.msg);
		cr_expect_str_eq(sf__tok_special_text(tok, 1), "<SPECIAL_1>", "%s", versions[v]);
		cr_expect_lt(sf__tok_special(tok, "<s>", NULL), 0, "%s", versions[v]);
		cr_expect_lt(sf__tok_bos(tok), 0, "%s", versions[v]);
		cr_expect_lt(sf__tok_eot(tok), 0, "%s", versions[v]);
		sf__tok_free(tok);
	}
	cr_assert_eq(load_tekken("{\"pattern\": \".\", \"default_vocab_size\": 279, "
				 "\"default_num_special_tokens\": 23, \"version\": \"v3\"}",
				 " \"special_tokens\": null,", &tok, &e),
		     0, "null: %s", e.msg);
	cr_expect_eq(sf__tok_bos(tok), 1);
	sf__tok_free(tok);
}

Test(tok_file, tekken_refusals)
{
	static const char *const bad[] = {
		/* version v13 without special_tokens */
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\"}, \"vocab\": [{\"rank\": "
		"0, \"token_bytes\": \"AA==\", \"token_str\": null}]}",
		/* a trailing comma */
		"{\"config\": {\"pattern\": \".\",}, \"vocab\": []}",
		/* ranks out of order */
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 1, \"version\": \"v3\"}, \"vocab\": [{\"rank\": "
		"1, \"token_bytes\": \"AA==\", \"token_str\": null}]}",
		/* more vocabulary than the file has */
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 300, "
		"\"default_num_special_tokens\": 1, \"version\": \"v3\"}, \"vocab\": [{\"rank\": "
		"0, \"token_bytes\": \"AA==\", \"token_str\": null}]}",
		/* a version mistral-common does not know (v4 was read as 4, v7abc as 7) */
		"{\"config\": {\"pattern\": \".\", \"version\": \"v7abc\"}, \"vocab\": []}",
		/* two special tokens of one text, and one with a NUL (it read as "<s>") */
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\"}, \"special_tokens\": "
		"[{\"rank\": 0, \"token_str\": \"<s>\"}, {\"rank\": 1, \"token_str\": \"<s>\"}], "
		"\"vocab\": [{\"rank\": 0, \"token_bytes\": \"AA==\", \"token_str\": null}]}",
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\"}, \"special_tokens\": "
		"[{\"rank\": 0, \"token_str\": \"<s>\"}, {\"rank\": 1, \"token_str\": "
		"\"<s>\\u0000x\"}], \"vocab\": [{\"rank\": 0, \"token_bytes\": \"AA==\", "
		"\"token_str\": null}]}",
		/* bad base64 at vocab rank 0, which was named by its id (rank + 2 specials) */
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\"}, \"special_tokens\": "
		"[{\"rank\": 0, \"token_str\": \"<s>\"}, {\"rank\": 1, \"token_str\": \"</s>\"}], "
		"\"vocab\": [{\"rank\": 0, \"token_bytes\": \"A!==\", \"token_str\": null}]}",
		/* A NUL in token_bytes, the pattern or the version cut the string there: other
		 * bytes, another pattern, v3 for "v3\0x" (a review). */
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\"}, \"special_tokens\": "
		"[{\"rank\": 0, \"token_str\": \"<s>\"}, {\"rank\": 1, \"token_str\": \"</s>\"}], "
		"\"vocab\": [{\"rank\": 0, \"token_bytes\": \"AA==\\u0000AQ==\", \"token_str\": "
		"null}]}",
		"{\"config\": {\"pattern\": \".|\\u0000\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\"}, \"special_tokens\": "
		"[{\"rank\": 0, \"token_str\": \"<s>\"}, {\"rank\": 1, \"token_str\": \"</s>\"}], "
		"\"vocab\": [{\"rank\": 0, \"token_bytes\": \"AA==\", \"token_str\": null}]}",
		"{\"config\": {\"pattern\": \".\", \"default_vocab_size\": 3, "
		"\"default_num_special_tokens\": 2, \"version\": \"v13\\u0000x\"}, "
		"\"special_tokens\": [{\"rank\": 0, \"token_str\": \"<s>\"}, {\"rank\": 1, "
		"\"token_str\": \"</s>\"}], \"vocab\": [{\"rank\": 0, \"token_bytes\": \"AA==\", "
		"\"token_str\": null}]}",
	};
	static const char *const why[] = {"must list its special_tokens",
					  "byte",
					  "ranks in order",
					  "does not fit",
					  "none of mistral-common's",
					  "token_str also at an earlier special token",
					  "a NUL character in token_str",
					  "vocab rank 0: token_bytes is not base64",
					  "a NUL character in token_bytes",
					  "a NUL character in pattern",
					  "a NUL character in version"};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct sf_tok_file_opts o = {0};
		struct sf_tok *tok = NULL;
		struct sf_err e = {0};

		write_file(bad[i]);
		o.path = path;
		o.format = SF_TOK_FORMAT_TEKKEN;
		cr_assert_lt(sf__tok_load_file(&o, &tok, &e), 0, "case %zu loaded", i);
		cr_assert(strstr(e.msg, why[i]), "case %zu: %s", i, e.msg);
		remove_file();
	}
}

/* A tekken file with `config`, `specials` and vocabulary ranks 256 on (`extra`); `from`
 * replaced by `to` in it. Loaded: its error, or 0. */
static int tekken_edited(const char *config, const char *specials, const char *extra,
			 const char *from, const char *to, struct sf_err *e)
{
	char *text = tekken_json(config, specials, extra), *at = strstr(text, from), *edited;
	struct sf_tok_file_opts o = {.format = SF_TOK_FORMAT_TEKKEN};
	struct sf_tok *tok = NULL;
	int r;

	cr_assert(at, "%s", from);
	edited = malloc(strlen(text) + strlen(to) + 1);
	sprintf(edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	write_file(edited);
	free(edited);
	free(text);
	o.path = path;
	r = sf__tok_load_file(&o, &tok, e);
	sf__tok_free(tok);
	remove_file();
	return r;
}

/*
 * tekken files that lie (a review): a token_bytes with a space and a newline in it wrote
 * more "base64 rank" lines, ranks past the vocabulary (id 400 of 400, and with 4e9
 * specials a rank that wrapped the tables: SIGSEGV); 500,000,000 specials sized tables
 * of 2 GB before they were refused; two first ranks swapped, or a listed special that is
 * also a filler's text, loaded where mistral-common refuses them; 100,000 listed specials
 * took 18 s to be refused (their texts compared pairwise).
 */
Test(tok_file, tekken_files_that_lie_are_refused)
{
	static const char config[] = "{\"pattern\": \".\", \"default_vocab_size\": 356, "
				     "\"default_num_special_tokens\": 100, \"version\": \"v3\"}";
	static const char huge[] =
		"{\"pattern\": \".\", \"default_vocab_size\": 500000300, "
		"\"default_num_special_tokens\": 500000000, \"version\": \"v3\"}";
	const char *injected =
		", {\"rank\": 256, \"token_bytes\": \"YWI= 300\\nYWJj\", \"token_str\": null}";
	struct sf_err e = {0};
	char *many;
	size_t n = 0;

	cr_expect_eq(tekken_edited(config, "", injected, "", "", &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "vocab rank 256: token_bytes is not base64"), "%s", e.msg);
	cr_expect_eq(tekken_edited(huge, "", "", "", "", &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "default_vocab_size 500000300, more than the 16777216"), "%s",
		  e.msg);
	/* Ranks 97 and 98 ('a', 'b') swapped. */
	cr_expect_eq(tekken_edited(config, "", "", "\"YQ==\"", "\"Yg==\"", &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "rank 97 is not the byte 97"), "%s", e.msg);
	cr_expect_eq(tekken_edited(config,
				   " \"special_tokens\": [{\"rank\": 0, \"token_str\": \"<s>\"}, "
				   "{\"rank\": 1, \"token_str\": \"<SPECIAL_5>\"}],",
				   "", "", "", &e),
		     SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "<SPECIAL_5> is listed, and is also the filler of rank 5"), "%s",
		  e.msg);
	many = malloc(100000 * 48 + 64);
	n += (size_t)sprintf(many, " \"special_tokens\": [");
	for (int i = 0; i < 100000; i++)
		n += (size_t)sprintf(many + n, "%s{\"rank\": %d, \"token_str\": \"<t%d>\"}",
				     i ? ", " : "", i, i);
	strcpy(many + n, "],");
	cr_expect_eq(tekken_edited(config, many, "", "", "", &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "more than 4096 special tokens"), "%s", e.msg);
	free(many);
	/* Two vocab entries of one token: named by the file's ranks (they were named by
	 * their ids, rank + 100 specials: "ranks 356 and 357"; a review). */
	cr_expect_eq(tekken_edited(config, "",
				   ", {\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": "
				   "null}, {\"rank\": 257, "
				   "\"token_bytes\": \"YWI=\", \"token_str\": null}",
				   "356", "358", &e),
		     SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "vocab ranks 256 and 257 have the same bytes"), "%s", e.msg);
}

/*
 * mistral-common asserts that each vocabulary entry has rank, token_bytes and
 * token_str, and no other key: one without token_str, or with another key, loaded here
 * (a review).
 */
Test(tok_file, tekken_vocab_entries_have_mistral_commons_keys)
{
	static const char config[] = "{\"pattern\": \".\", \"default_vocab_size\": 356, "
				     "\"default_num_special_tokens\": 100, \"version\": \"v3\"}";
	static const char *const to[] = {"}", ", \"token_str\": null, \"is_control\": false}"};
	struct sf_err e = {0};

	for (size_t i = 0; i < 2; i++) {
		cr_expect_eq(tekken_edited(config, "", "", ", \"token_str\": null}", to[i], &e),
			     SF_E_TOKENIZER, "case %zu loaded", i);
		cr_expect(strstr(e.msg, "vocab rank 0: an entry has rank, token_bytes and "
					"token_str, and nothing else"),
			  "case %zu: %s", i, e.msg);
	}
	cr_expect_eq(tekken_edited(config, "", "", ", \"token_str\": null}",
				   ", \"token_str\": \"\\u0000\"}", &e),
		     0, "%s", e.msg);
}

/*
 * A tokenizer.json is known by its model: one holding "token_bytes" (an added token's
 * content) or "default_num_special_tokens" (a vocabulary key) was read as a tekken file
 * and refused with tekken's message (a review).
 */
Test(tok_file, a_tokenizer_json_with_tekken_words_is_a_tokenizer_json)
{
	static const char *const files[] = {
		"{\"added_tokens\": [{\"content\": \"token_bytes\"}], \"model\": {\"type\": "
		"\"BPE\"}}",
		"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"default_num_special_tokens\": "
		"0, \"a\\\"b}\": 1, \"token_bytes\": 2}}}",
	};
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};

	o.path = path;
	for (size_t i = 0; i < 2; i++) {
		write_file(files[i]);
		cr_expect_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER, "case %zu", i);
		cr_expect(strstr(e.msg, "model") && !strstr(e.msg, "config"), "case %zu: %s", i,
			  e.msg);
		remove_file();
	}
}

/*
 * A tekken file is known by its vocabulary's token_bytes too: one without
 * default_num_special_tokens (or with the key written with an escape) went to the
 * tokenizer.json loader, which said `unknown key "config"` (a review).
 */
Test(tok_file, a_tekken_file_is_known_without_its_special_count)
{
	char *text = tekken_json("{\"pattern\": \".\", \"default_vocab_size\": 356, "
				 "\"version\": \"v3\"}",
				 "", "");
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};

	write_file(text);
	free(text);
	o.path = path;
	cr_expect_lt(sf__tok_load_file(&o, &tok, &e), 0);
	cr_expect(!strstr(e.msg, "unknown key") && strstr(e.msg, "0 special tokens"), "%s", e.msg);
	sf__tok_free(tok);
	remove_file();
}

/*
 * A byte-level vocabulary needs a token for each of the 256 bytes: without one, a text
 * holding that byte cannot be encoded. Such a file loaded and the first document with the
 * byte failed mid-run ("a byte of the piece at 0 is not a token", found by
 * fuzz_tok_file); it is refused at load, naming the byte.
 */
Test(tok_file, a_vocabulary_without_every_byte_is_refused)
{
	char *text = byte_lines("YWI= 256\n");
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	char *line;

	/* The line of byte 0x41 ('A', base64 "QQ==") dropped: rank 65 is absent. */
	line = strstr(text, "QQ== 65\n");
	cr_assert_not_null(line);
	memmove(line, line + 8, strlen(line + 8) + 1);
	write_file(text);
	free(text);
	o.path = path;
	o.pattern = "\\p{L}+|\\s+|.";
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER);
	cr_assert(strstr(e.msg, "no token for the byte 0x41"), "%s", e.msg);
	remove_file();

	text = tekken_json("{\"pattern\": \"\\\\p{L}+|\\\\s+|.\", \"num_vocab_tokens\": 256, "
			   "\"default_vocab_size\": 281, \"default_num_special_tokens\": 25, "
			   "\"version\": \"v3\"}",
			   "", "");
	line = strstr(text, "{\"rank\": 65,");
	cr_assert_not_null(line);
	/* Rank 65's entry, written by tekken_json() with the bytes of 0x41, now holds "ab". */
	memcpy(strstr(line, "QQ=="), "YWI=", 4);
	write_file(text);
	free(text);
	o.pattern = NULL;
	/* A tekken file's first 256 ranks must be the bytes in order (mistral-common). */
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER);
	cr_assert(strstr(e.msg, "rank 65 is not the byte 65"), "%s", e.msg);
}

Test(tok_file, formats_detected_and_named)
{
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};

	cr_assert_eq(sf__tok_format_parse("auto"), SF_TOK_FORMAT_AUTO);
	cr_assert_eq(sf__tok_format_parse("tiktoken"), SF_TOK_FORMAT_TIKTOKEN);
	cr_assert_eq(sf__tok_format_parse("tekken"), SF_TOK_FORMAT_TEKKEN);
	cr_assert_eq(sf__tok_format_parse("hf"), SF_TOK_FORMAT_HF);
	cr_assert_eq(sf__tok_format_parse("sentencepiece"), SF_TOK_FORMAT_SENTENCEPIECE);
	cr_assert_eq(sf__tok_format_parse("spm"), -1);
	write_file("{\"model\": {\"type\": \"BPE\"}}");
	o.path = path;
	/* Detected as a tokenizer.json: hf_json.c refuses it, naming the JSON path. */
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER);
	cr_assert(strstr(e.msg, "model.vocab"), "%s", e.msg);
	o.pattern = "\\w+";
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER);
	cr_assert(strstr(e.msg, "takes no pattern"), "%s", e.msg);
	o.pattern = NULL;
	remove_file();
	write_file("hello world\n");
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER);
	cr_assert(strstr(e.msg, "not a tokenizer file"), "%s", e.msg);
	remove_file();
	/* A protobuf that is no SentencePiece model: refused by the library (or by the
	 * build without it), never taken for something else. */
	write_file("\x0a\x05\x0a\x03"
		   "abc");
	cr_assert_lt(sf__tok_load_file(&o, &tok, &e), 0);
	cr_assert(strstr(e.msg, path) && !strstr(e.msg, "not a tokenizer file"), "%s", e.msg);
}

Test(tok_file, allowed_sets_beyond_64_specials)
{
	struct sf_tok_special specials[100];
	char texts[100][16], *lines = byte_lines("");
	struct sf_tok_spec spec = {.name = "many", .pattern = "\\p{L}+|\\s+|."};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	uint64_t bit;
	uint32_t ids[16];
	size_t n;

	write_file(lines);
	free(lines);
	for (int i = 0; i < 100; i++) {
		snprintf(texts[i], sizeof(texts[i]), "<|s%d|>", i);
		specials[i] = (struct sf_tok_special){texts[i], 256 + (uint32_t)i};
	}
	spec.vocab_path = path;
	spec.specials = specials;
	spec.n_specials = 100;
	cr_assert_eq(sf__tok_load_spec(&spec, &tok, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__tok_special(tok, "<|s80|>", &bit), 336);
	cr_assert_eq(bit, (uint64_t)1 << 63);
	cr_assert_eq(sf__tok_special(tok, "<|s5|>", &bit), 261);
	encode(tok, "<|s5|><|s80|>", bit, ids, &n);
	cr_assert_eq(ids[0], 261);
	cr_assert_eq(n, 1 + strlen("<|s80|>"));
	encode(tok, "<|s5|><|s80|>", SF_TOK_ALLOW_ALL, ids, &n);
	cr_assert_eq(n, 2);
	cr_assert_eq(ids[1], 336);
	sf__tok_free(tok);
}

/* A rank is decimal digits (and the \r of a CRLF line): strtoul took a sign, so that
 * -18446744073709551615 was rank 1, and a line "YWI= \r" with no rank was rank 0. */
Test(tok_file, tiktoken_ranks_are_digits)
{
	static const char *const bad[] = {"YWI= -18446744073709551615\n", "YWI= \r\n",
					  "YWI= +256\n", "YWI=  256\n", "YWI= 256 \n",
					  "YWI= 256\r\r\n"};
	struct sf_tok_file_opts o = {.format = SF_TOK_FORMAT_TIKTOKEN, .pattern = "\\S+|\\s+"};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	char *text;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		text = byte_lines(bad[i]);
		write_file(text);
		free(text);
		o.path = path;
		cr_expect_eq(sf__tok_load_file(&o, &tok, &e), SF_E_TOKENIZER, "accepted: %s",
			     bad[i]);
		cr_expect(strstr(e.msg, ":257: bad rank"), "%s: %s", bad[i], e.msg);
		remove_file();
	}
	/* A NUL after the rank ended it for strtoul: "IQ== 0\0junk" was rank 0 (a review). */
	{
		struct sf_tok_ranks r;
		uint8_t nul[] = "IQ== 0\0junk\n";

		cr_expect_eq(sf__tok_ranks_parse(&r, "mem", nul, sizeof(nul) - 1, 0, &e),
			     SF_E_TOKENIZER);
		cr_expect(strstr(e.msg, "mem:1: bad rank"), "%s", e.msg);
	}
	/* A file cut inside its last rank ("61597" as "61") said only "rank 61 appears
	 * twice" (a review): it says the file looks cut short. */
	{
		struct sf_tok_ranks r;
		uint8_t cut[] = "IQ== 0\nIg== 1\nIw== 2\nJA== 1";

		cr_expect_eq(sf__tok_ranks_parse(&r, "mem", cut, sizeof(cut) - 1, 0, &e),
			     SF_E_TOKENIZER);
		cr_expect(strstr(e.msg, "rank 1 appears twice, the second time on the last line, "
					"which has no line end: the file looks cut short"),
			  "%s", e.msg);
	}
	text = byte_lines("YWI= 256\r\n");
	write_file(text);
	free(text);
	o.path = path;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), 0, "%s", e.msg);
	sf__tok_free(tok);
}

/* Detection from the whole file: tekken's config after its vocab (mistral-common reads such
 * a file) was taken for a tokenizer.json, and a .tiktoken file starting with blank lines
 * (which the parser allows) for a SentencePiece model. */
/* `lead`, the byte lines and `extra` (a .tiktoken of 257 ranks) load as 257 ids. */
static void expect_257_ranks(const char *lead, const char *extra)
{
	struct sf_tok_file_opts o = {.pattern = "\\S+|\\s+"};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	char *text = byte_lines(extra), *all = malloc(strlen(lead) + strlen(text) + 1);

	sprintf(all, "%s%s", lead, text);
	free(text);
	write_file(all);
	free(all);
	o.path = path;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), 0, "%s", e.msg);
	cr_expect_eq(sf__tok_n_vocab(tok), 257);
	sf__tok_free(tok);
	remove_file();
}

Test(tok_file, formats_detected_beyond_the_head)
{
	struct sf_tok_file_opts o = {0};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	char *text, *json, *vocab;

	expect_257_ranks("\n\n\n", "YWI= 256\n");
	/* {"config": C, "vocab": [...]...} turned into {"vocab": [...]..., "config": C}. */
	json = tekken_json(tekken_config, "",
			   ", {\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}"
			   ", {\"rank\": 257, \"token_bytes\": \"YmE=\", \"token_str\": \"ba\"}");
	vocab = strstr(json, "\"vocab\"");
	text = malloc(strlen(json) + 70000 + 64);
	/* Its config beyond the first 64 KiB, as in a real file's 15 MB. */
	sprintf(text, "{%.*s, \"config\": %s}", (int)(strlen(vocab) - 1), vocab, tekken_config);
	{
		char *at = strstr(text, "\"image\": ");

		cr_assert(at);
		memmove(at + 70000, at, strlen(at) + 1);
		memset(at, ' ', 70000);
	}
	free(json);
	write_file(text);
	free(text);
	o.path = path;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), 0, "%s", e.msg);
	cr_expect_str_eq(sf__tok_family(tok), "tekken");
	sf__tok_free(tok);
}

/* A pattern that backtracks past PCRE2's match limit is named as such (the message was
 * "pattern match failed at byte 0"). */
Test(tok_file, a_runaway_pattern_is_named)
{
	char *text = byte_lines(""), *doc = malloc(5002);
	struct sf_tok_file_opts o = {.format = SF_TOK_FORMAT_TIKTOKEN,
				     .pattern = "(a+)+b|\\S+|\\s+"};
	struct sf_tok_encoder *enc;
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	const uint32_t *ids;
	size_t n;

	write_file(text);
	free(text);
	o.path = path;
	cr_assert_eq(sf__tok_load_file(&o, &tok, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__tok_encoder_create(tok, &enc, &e), 0);
	memset(doc, 'a', 5000);
	doc[5000] = 'c';
	doc[5001] = '\0';
	cr_assert_eq(sf__tok_encode(enc, doc, 5001, 0, &ids, &n, &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "match limit exceeded (it backtracks too much"), "%s", e.msg);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	free(doc);
}

/* Blank lines of a CRLF file are blank, as tiktoken's splitlines() takes them: a leading or
 * trailing "\r\n" was "expected 'base64 rank'" (detection, which skips them, took the file
 * for .tiktoken already). */
Test(tok_file, crlf_blank_lines)
{
	expect_257_ranks("\r\n", "YWI= 256\r\n\r\n");
}
