/*
 * SentencePiece in parts (sp_split.h, docs/tokenizer.md): the ids shmfeed gives a text of
 * a SentencePiece model equal the library's ids of the whole text, for models trained
 * here by the library's own trainer on tinyshakespeare and unicode_mix in several
 * configurations. Those the conditions allow are encoded in parts (checked), the others
 * whole (checked): parts cut where the model's pieces say, each part through the library
 * alone or found in the encoder's part caches.
 *
 * The texts: cases made to meet each rule of the cut (runs of spaces and of U+2581,
 * bytes that are not UTF-8 beside them, user-defined symbols, characters the model does
 * not know, empty and all-space texts), 4,000 random strings from a pool of such
 * characters, the corpus's paragraphs and two 16 KiB stretches of it; each encoded twice
 * by one encoder (the second
 * time through its caches) and once by a fresh one.
 *
 * A plain program: 0 pass, 1 fail, 77 skip (no shared data, or a build without
 * libsentencepiece).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "producer/tokenizer/sp_shim.h"
#include "producer/tokenizer/tok_impl.h"
#include "tok_test_util.h"

int sp_test_train(const char *args, char *msg, size_t msg_cap);

struct config {
	const char *name;
	const char *args;
	const char *how; /* what sf__tok_how() says: "in parts", or "whole: " and why */
};

#define BASE                                                                                       \
	"--model_type=bpe --vocab_size=1200 --character_coverage=0.98 "                            \
	"--minloglevel=2 --num_threads=1 --user_defined_symbols=[INST],<x>,a▁b "
#define IDENTITY "--normalization_rule_name=identity --remove_extra_whitespaces=false "

static const struct config configs[] = {
	/* Mistral's kind: identity, a space before each text, byte fallback. */
	{"identity", BASE IDENTITY "--byte_fallback=true --allow_whitespace_only_pieces=true",
	 "in parts"},
	{"no-dummy-prefix", BASE IDENTITY "--byte_fallback=true --add_dummy_prefix=false",
	 "in parts"},
	/* Pieces across words ("e▁t"): no cut may fall inside them. */
	{"across-words", BASE IDENTITY "--byte_fallback=true --split_by_whitespace=false",
	 "in parts"},
	/* Unknown characters become <unk>, and runs of them one <unk>. */
	{"unknowns", BASE IDENTITY "--byte_fallback=false", "in parts"},
	{"digits", BASE IDENTITY "--byte_fallback=true --split_digits=true", "in parts"},
	/* Whole texts only: NFKC, extra spaces removed, spaces after words, unigram. */
	{"nfkc", BASE "--byte_fallback=true",
	 "whole: its normalizer has a character map (NFKC or other rules)"},
	{"extra-spaces", BASE "--normalization_rule_name=identity --byte_fallback=true",
	 "whole: its normalizer removes extra spaces"},
	{"suffix", BASE IDENTITY "--treat_whitespace_as_suffix=true",
	 "whole: it puts spaces after words"},
	{"unigram",
	 "--model_type=unigram --vocab_size=1200 --character_coverage=0.98 --minloglevel=2 "
	 "--num_threads=1 " IDENTITY,
	 "whole: not a BPE model"},
};

static const char *const cases[] = {
	"",
	" ",
	"  ",
	"\xe2\x96\x81",
	" \xe2\x96\x81 ",
	"a",
	" a",
	"a ",
	"  a  b   c ",
	"hello world",
	"hello  world",
	"hello\xe2\x96\x81world",
	"hello \xe2\x96\x81world",
	"hello\xe2\x96\x81\xe2\x96\x81 world",
	"\xe2\x96\x81hello",
	"[INST]hello[INST] world",
	"a[INST]b",
	"[INST] [INST]",
	"<x><x> <x>",
	"a\xe2\x96\x81"
	"b a b a\xe2\x96\x81",
	"\xff",
	" \xff",
	"\xff ",
	"a\xff b",
	"\xe2\x96 a",
	"a \xe2\x96",
	"\xe2\x96\xe2\x96\x81",
	"\xe2 \x96\x81",
	"\xc3",
	"caf\xc3\xa9 cr\xc3\xa8me",
	"\t\tindent\n\n  x",
	"\r\n \r\n",
	"\xe4\xb8\xad\xe6\x96\x87 \xe4\xb8\xad\xe6\x96\x87\xe4\xb8\xad",
	"\xf0\x9f\x91\x8d \xf0\x9f\x91\x8d\xf0\x9f\x91\x8d",
	"\xea\xb0\x80\xea\xb0\x81 x",
	"0123456789 9876",
	"x=1;y=22;z=333",
	"\xe2\x80\x83\xe3\x80\x80 wide spaces",
	"First Citizen:\nBefore we proceed any further, hear me speak.",
};

/* Characters the random strings are drawn from: spaces and U+2581 in runs, letters the
 * corpus has, marks, CJK, an emoji, symbols, and bytes that start no UTF-8 sequence. */
static const char *const pool[] = {
	" ",
	" ",
	" ",
	"\xe2\x96\x81",
	"e",
	"t",
	"h",
	"a",
	"s",
	"T",
	"H",
	"'",
	",",
	".",
	"\n",
	"\t",
	"0",
	"7",
	"\xc3\xa9",
	"\xcc\x81",
	"\xe4\xb8\xad",
	"\xe6\x96\x87",
	"\xea\xb0\x80",
	"\xf0\x9f\x98\x80",
	"\xd0\xb4",
	"\xd7\x90",
	"[INST]",
	"<x>",
	"a\xe2\x96\x81"
	"b",
	"\xff",
	"\xe2\x96",
	"\xc0",
	"\xe2\x80\x83",
	"the",
	" the",
	"ing",
	"\xe3\x80\x80",
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* The library's ids of the whole text, against the encoder's. */
static int check_one(const struct sf_tok *tok, struct sf_tok_encoder *enc, const char *label,
		     const char *text, size_t len)
{
	/* A byte may become U+FFFD, three byte pieces; and a space before the text. */
	uint32_t *want = malloc((3 * len + 1) * sizeof(*want));
	const uint32_t *got;
	struct sf_err err = {0};
	char msg[256] = "";
	size_t n_want, n_got, i;

	int rc = 1;

	if (!want)
		abort();
	if (sf__sp_encode(tok->sp, false, text, len, want, 3 * len + 1, &n_want, msg, sizeof(msg)) <
	    0) {
		fprintf(stderr, "%s: the library: %s\n", label, msg);
		goto out;
	}
	if (sf__tok_encode(enc, text, len, SF_TOK_ALLOW_NONE, &got, &n_got, &err) < 0) {
		fprintf(stderr, "%s: %s\n", label, err.msg);
		goto out;
	}
	for (i = 0; i < n_want && i < n_got && want[i] == got[i]; i++)
		;
	if (i == n_want && i == n_got)
		rc = 0;
	else
		fprintf(stderr,
			"%s: %zu ids, the library %zu; first difference at %zu (%d, library %d)\n",
			label, n_got, n_want, i, i < n_got ? (int)got[i] : -1,
			i < n_want ? (int)want[i] : -1);
out:
	free(want);
	return rc;
}

struct texts {
	char **s;
	size_t *len;
	size_t n;
};

static void add_text(struct texts *t, const char *s, size_t len)
{
	t->s = realloc(t->s, (t->n + 1) * sizeof(*t->s));
	t->len = realloc(t->len, (t->n + 1) * sizeof(*t->len));
	if (!t->s || !t->len)
		abort();
	t->s[t->n] = malloc(len + 1);
	if (!t->s[t->n])
		abort();
	memcpy(t->s[t->n], s, len);
	t->s[t->n][len] = 0;
	t->len[t->n++] = len;
}

static void make_texts(struct texts *t, const char *corpus, size_t corpus_len)
{
	char buf[1024];
	size_t i, p, q;

	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		add_text(t, cases[i], strlen(cases[i]));
	for (i = 0; i < 4000; i++) {
		size_t n = 1 + rng() % 24, len = 0;

		while (n--) {
			const char *c = pool[rng() % (sizeof(pool) / sizeof(*pool))];

			memcpy(buf + len, c, strlen(c));
			len += strlen(c);
		}
		add_text(t, buf, len);
	}
	/* Paragraphs, and the first and last 16 KiB as texts. */
	for (p = 0; p < corpus_len; p = q + 2) {
		const char *end = memmem(corpus + p, corpus_len - p, "\n\n", 2);

		q = end ? (size_t)(end - corpus) : corpus_len;
		add_text(t, corpus + p, q - p);
	}
	add_text(t, corpus, corpus_len < 16384 ? corpus_len : 16384);
	if (corpus_len > 16384)
		add_text(t, corpus + corpus_len - 16384, 16384);
}

static char dir[] = "/tmp/sf-test-sp-parts-XXXXXX";

/* Remove what the test wrote, however it ends. */
static void remove_dir(void)
{
	static const char *const exts[] = {"model", "vocab"};
	char path[4096];
	size_t k, x;

	for (k = 0; k < sizeof(configs) / sizeof(*configs); k++)
		for (x = 0; x < 2; x++) {
			snprintf(path, sizeof(path), "%s/%s.%s", dir, configs[k].name, exts[x]);
			unlink(path);
		}
	snprintf(path, sizeof(path), "%s/corpus.txt", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const char *data = tok_test_data();
	char path[4096], args[2048], msg[512] = "";
	char *shakespeare, *mix, *corpus;
	size_t a_len, b_len, i, k;
	struct texts texts = {0};
	int failed = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/corpus/tinyshakespeare.txt", data);
	shakespeare = tok_test_read(path, &a_len);
	snprintf(path, sizeof(path), "%s/tokref/unicode_mix.txt", data);
	mix = tok_test_read(path, &b_len);
	if (!shakespeare || !mix || !mkdtemp(dir)) {
		fprintf(stderr, "cannot read the corpus or make %s\n", dir);
		return 1;
	}
	atexit(remove_dir);
	/* The texts: an eighth of tinyshakespeare and all of unicode_mix. The models learn
	 * from them with only the first 8 KiB of unicode_mix, so that the texts have
	 * characters the models do not know. */
	a_len /= 8;
	corpus = malloc(a_len + b_len);
	if (!corpus)
		return 1;
	memcpy(corpus, shakespeare, a_len);
	memcpy(corpus + a_len, mix, b_len);
	snprintf(path, sizeof(path), "%s/corpus.txt", dir);
	f = fopen(path, "wb");
	if (!f || fwrite(corpus, 1, a_len + 8192, f) != a_len + 8192 || fclose(f)) {
		fprintf(stderr, "cannot write %s\n", path);
		return 1;
	}
	make_texts(&texts, corpus, a_len + b_len);

	for (k = 0; k < sizeof(configs) / sizeof(*configs); k++) {
		const struct config *c = &configs[k];
		struct sf_tok_file_opts opts = {path, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
		struct sf_tok_encoder *enc = NULL, *fresh = NULL;
		char model[4096], label[128], how_buf[160];
		const char *how;
		struct sf_err err = {0};
		struct sf_tok *tok;
		int bad = 0, pass;

		snprintf(model, sizeof(model), "%s/%s.model", dir, c->name);
		snprintf(args, sizeof(args), "--input=%s/corpus.txt --model_prefix=%s/%s %s", dir,
			 dir, c->name, c->args);
		if (sp_test_train(args, msg, sizeof(msg)) < 0) {
			fprintf(stderr, "%s: training: %s\n", c->name, msg);
			return 1;
		}
		opts.path = model;
		if (sf__tok_load_file(&opts, &tok, &err) < 0) {
			if (strstr(err.msg, "without libsentencepiece")) {
				fprintf(stderr, "skip: %s\n", err.msg);
				return 77;
			}
			fprintf(stderr, "%s: %s\n", c->name, err.msg);
			return 1;
		}
		how = sf__tok_how(tok, how_buf, sizeof(how_buf));
		if (!how || strcmp(how, c->how) ||
		    (tok->sp_split != NULL) != !strcmp(c->how, "in parts")) {
			fprintf(stderr, "%s: encoded %s, expected %s\n", c->name, how ? how : "?",
				c->how);
			bad = 1;
		}
		if (sf__tok_encoder_create(tok, &enc, &err) < 0 ||
		    sf__tok_encoder_create(tok, &fresh, &err) < 0) {
			fprintf(stderr, "%s: %s\n", c->name, err.msg);
			return 1;
		}
		for (pass = 0; pass < 2; pass++)
			for (i = 0; i < texts.n && bad < 5; i++) {
				snprintf(label, sizeof(label), "%s: text %zu, pass %d", c->name, i,
					 pass);
				bad += check_one(tok, enc, label, texts.s[i], texts.len[i]);
			}
		/* A fresh encoder on the texts in reverse: other parts meet it first. */
		for (i = texts.n; i-- > 0 && bad < 5;) {
			snprintf(label, sizeof(label), "%s: text %zu, fresh encoder", c->name, i);
			bad += check_one(tok, fresh, label, texts.s[i], texts.len[i]);
		}
		printf("%s %s: %zu texts, %s\n", bad ? "FAIL" : "ok", c->name, texts.n, c->how);
		failed |= bad != 0;
		sf__tok_encoder_free(enc);
		sf__tok_encoder_free(fresh);
		sf__tok_free(tok);
	}
	for (i = 0; i < texts.n; i++)
		free(texts.s[i]);
	free(texts.s);
	free(texts.len);
	free(corpus);
	free(shakespeare);
	free(mix);
	return failed;
}
