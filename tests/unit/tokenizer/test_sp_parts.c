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
 * Then models written here field by field, with pieces the trainer does not make: a
 * piece that is a literal ' ' (the normalizer writes spaces as U+2581, so it matches
 * nothing), pieces holding a NUL byte, a user-defined piece that is not valid UTF-8
 * (the library matches those byte by byte, so such models are encoded whole); and a
 * text whose ids, more than its bytes, fill the encoder's buffer exactly before a special
 * token.
 *
 * A plain program: 0 pass, 1 fail, 77 skip (no shared data, or a build without
 * libsentencepiece).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/sp_shim.h"
#include "producer/tokenizer/sp_split.h"
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

/* A protobuf message being written (sentencepiece_model.proto's fields). */
struct pb {
	uint8_t b[8192];
	size_t n;
};

static void pb_varint(struct pb *m, uint64_t v)
{
	for (; v >= 0x80; v >>= 7)
		m->b[m->n++] = (uint8_t)(v | 0x80);
	m->b[m->n++] = (uint8_t)v;
}

static void pb_uint(struct pb *m, uint32_t field, uint64_t v)
{
	pb_varint(m, (uint64_t)field << 3);
	pb_varint(m, v);
}

static void pb_bytes(struct pb *m, uint32_t field, const void *p, size_t len)
{
	pb_varint(m, (uint64_t)field << 3 | 2);
	pb_varint(m, len);
	memcpy(m->b + m->n, p, len);
	m->n += len;
}

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, BYTE = 6 };

struct piece {
	const char *bytes;
	size_t len;
	float score;
	int type;
};

static void pb_piece(struct pb *m, const char *bytes, size_t len, float score, int type)
{
	struct pb p = {.n = 0};

	pb_bytes(&p, 1, bytes, len);
	pb_varint(&p, 2 << 3 | 5);
	memcpy(p.b + p.n, &score, 4);
	p.n += 4;
	pb_uint(&p, 3, (uint64_t)type);
	pb_bytes(m, 1, p.b, p.n);
}

/* How a model's TrainerSpec.byte_fallback is written: not at all, as the varint 1, or
 * (wrongly) as the bytes "\x01", which protobuf parsers skip as an unknown field. */
enum fallback { FALLBACK_NONE, FALLBACK_ON, FALLBACK_AS_BYTES };

/*
 * Write a BPE model: the unknown piece (text `unk`), <s>, </s>, the 256 byte pieces with
 * FALLBACK_ON, then `pieces`; the identity normalizer, spaces as U+2581, a space before
 * each text.
 */
static void write_model_as(const char *path, const struct piece *pieces, size_t n,
			   enum fallback fallback, const char *unk)
{
	struct pb *m = calloc(1, sizeof(*m)), sub = {.n = 0};
	const bool byte_fallback = fallback == FALLBACK_ON;
	char name[8];
	FILE *f;
	size_t i;

	if (!m)
		abort();
	pb_piece(m, unk, strlen(unk), 0, UNKNOWN);
	pb_piece(m, "<s>", 3, 0, CONTROL);
	pb_piece(m, "</s>", 4, 0, CONTROL);
	for (i = 0; byte_fallback && i < 256; i++) {
		snprintf(name, sizeof(name), "<0x%02X>", (unsigned)i);
		pb_piece(m, name, 6, 0, BYTE);
	}
	for (i = 0; i < n; i++)
		pb_piece(m, pieces[i].bytes, pieces[i].len, pieces[i].score, pieces[i].type);
	pb_uint(&sub, 3, 2); /* TrainerSpec.model_type: BPE */
	if (byte_fallback)
		pb_uint(&sub, 35, 1);
	else if (fallback == FALLBACK_AS_BYTES)
		pb_bytes(&sub, 35, "\x01", 1);
	pb_bytes(m, 2, sub.b, sub.n);
	sub.n = 0;
	pb_bytes(&sub, 1, "identity", 8);
	pb_uint(&sub, 3, 1); /* add_dummy_prefix */
	pb_uint(&sub, 4, 0); /* remove_extra_whitespaces */
	pb_uint(&sub, 5, 1); /* escape_whitespaces */
	pb_bytes(m, 3, sub.b, sub.n);
	f = fopen(path, "wb");
	if (!f || fwrite(m->b, 1, m->n, f) != m->n || fclose(f)) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	free(m);
}

static void write_model(const char *path, const struct piece *pieces, size_t n, bool byte_fallback)
{
	write_model_as(path, pieces, n, byte_fallback ? FALLBACK_ON : FALLBACK_NONE, "<unk>");
}

#define P(s, score, type) {s, sizeof(s) - 1, score, type}

struct crafted {
	const char *name;
	struct piece pieces[8];
	size_t n_pieces;
	bool byte_fallback;
	const char *how;
	const char *texts[4];
	size_t lens[4];
	enum fallback fallback; /* when not FALLBACK_NONE, instead of byte_fallback */
	const char *unk;	/* the unknown piece's text, when not <unk> */
};

static const struct crafted crafted[] = {
	/* Without a U+2581 piece a space is <unk>, and a run of them one <unk>: the
	 * literal ' ' piece must not make ' ' a character to cut beside. */
	{"literal-space",
	 {P("a", -1, NORMAL), P(" ", -1, NORMAL)},
	 2,
	 false,
	 "in parts",
	 {"  ", "a  a", " a", "   "},
	 {2, 4, 2, 3},
	 FALLBACK_NONE,
	 NULL},
	/* Pairs across a NUL byte: the piece's length is not strlen()'s. */
	{"nul",
	 {P("x", -1, NORMAL), P("\0", -1, NORMAL), P("a", -1, NORMAL), P("b", -1, NORMAL),
	  P("x\0", -2, NORMAL), P("x\0a", -3, NORMAL), P("x\0ab", -4, NORMAL)},
	 7,
	 false,
	 "in parts",
	 {"x\0ab", "ab", "x\0a b"},
	 {4, 2, 6},
	 FALLBACK_NONE,
	 NULL},
	/* A user-defined piece ending inside U+2581: the library matches it in the raw text. */
	{"user-defined-bytes",
	 {P("a", -1, NORMAL), P("\xe2\x96\x81", -1, NORMAL), P("a\xe2\x96", 0, USER_DEFINED)},
	 3,
	 false,
	 "whole: a user-defined piece is not valid UTF-8",
	 {"a\xe2\x96\x81", "xa ",
	  "a\xe2\x96\x81"
	  "a"},
	 {4, 3, 5},
	 FALLBACK_NONE,
	 NULL},
	/* The unknown piece's text is also an ordinary piece's: the library gives that text
	 * the unknown id (its reserved pieces come first), and merges it with the <unk> of a
	 * character no piece holds, or of another such text, across any cut. */
	{"unknown-text-a",
	 {P("a", -1, NORMAL), P("\xe2\x96\x81", -1, NORMAL)},
	 2,
	 false,
	 "whole: a piece's text is also another piece's",
	 {"a\n", "aa", "a a\n\na"},
	 {2, 2, 7},
	 FALLBACK_NONE,
	 "a"},
	{"unknown-text-ab",
	 {P("a", -1, NORMAL), P("b", -1, NORMAL), P("ab", 0, NORMAL),
	  P("\xe2\x96\x81", -1, NORMAL)},
	 4,
	 false,
	 "whole: a piece's text is also another piece's",
	 {"abab", "ab\nab", "ba"},
	 {4, 5, 2},
	 FALLBACK_NONE,
	 "ab"},
	/* byte_fallback written as bytes: the library skips the field, so unknown characters
	 * are <unk>, a run of them one. */
	{"fallback-as-bytes",
	 {P("a", -1, NORMAL), P("b", -1, NORMAL), P("\xe2\x96\x81", -1, NORMAL)},
	 3,
	 false,
	 "whole: its settings could not be read",
	 {"a\n\nb", "\n\n", "a\xc3\xa9\n"},
	 {4, 2, 5},
	 FALLBACK_AS_BYTES,
	 NULL},
};

/* The crafted models: ids against the library's, and what sf__tok_how() says. */
static int check_crafted(const char *dir_path)
{
	int failed = 0;

	for (size_t k = 0; k < sizeof(crafted) / sizeof(*crafted); k++) {
		const struct crafted *c = &crafted[k];
		char model[4096], label[128], how_buf[160];
		struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
		struct sf_tok_encoder *enc;
		struct sf_err err = {0};
		struct sf_tok *tok;
		const char *how;
		int bad = 0;

		snprintf(model, sizeof(model), "%s/%s.model", dir_path, c->name);
		write_model_as(model, c->pieces, c->n_pieces,
			       c->fallback != FALLBACK_NONE ? c->fallback
			       : c->byte_fallback	    ? FALLBACK_ON
							    : FALLBACK_NONE,
			       c->unk ? c->unk : "<unk>");
		if (sf__tok_load_file(&opts, &tok, &err) < 0 ||
		    sf__tok_encoder_create(tok, &enc, &err) < 0) {
			fprintf(stderr, "%s: %s\n", c->name, err.msg);
			return 1;
		}
		how = sf__tok_how(tok, how_buf, sizeof(how_buf));
		if (!how || strcmp(how, c->how)) {
			fprintf(stderr, "%s: encoded %s, expected %s\n", c->name, how ? how : "?",
				c->how);
			bad = 1;
		}
		for (size_t i = 0; i < 4 && c->texts[i]; i++) {
			snprintf(label, sizeof(label), "%s: text %zu", c->name, i);
			bad += check_one(tok, enc, label, c->texts[i], c->lens[i]);
		}
		printf("%s %s\n", bad ? "FAIL" : "ok", c->name);
		failed |= bad != 0;
		unlink(model);
		sf__tok_encoder_free(enc);
		sf__tok_free(tok);
	}
	return failed;
}

/*
 * Where texts are cut. Beside a character no piece holds (a newline, a letter the model
 * never saw) no merge can reach, so a text is cut there as beside a single; between two
 * such characters only with byte fallback, since without it a run of them is one <unk>.
 * The parts are listed with '|' between them; the ids are checked against the library's.
 */
static int check_cuts(const char *dir_path)
{
	/* Above U+FFFF (the split's table of kinds; sets beyond it): U+1F600 and U+1F601
	 * are singles and a pair, U+1F603 and U+1F604 held by a piece but no single,
	 * U+1F602 no piece's. */
	static const struct piece pieces[] = {
		P("a", -1, NORMAL),
		P("b", -1, NORMAL),
		P("ab", 0, NORMAL),
		P("\xe2\x96\x81", -1, NORMAL),
		P("\xf0\x9f\x98\x80", -1, NORMAL),
		P("\xf0\x9f\x98\x81", -1, NORMAL),
		P("\xf0\x9f\x98\x80\xf0\x9f\x98\x81", 0, NORMAL),
		P("\xf0\x9f\x98\x83\xf0\x9f\x98\x84", 0, NORMAL),
	};
	static const struct {
		bool byte_fallback;
		const char *text, *parts;
	} cases_cut[] = {
		{true, "ab\nab", "ab|\n|ab"},
		{true, "a\n\nb", "a|\n|\n|b"},
		{true,
		 "a\xc3\xa9\xe4\xb8\xad"
		 "b",
		 "a|\xc3\xa9|\xe4\xb8\xad|b"},
		{true, "\n a", "\n| |a"},
		{true, "a\xff\nb", "a\xff\n|b"},
		{false, "a\n\nb", "a|\n\n|b"},
		{false, "ab\nab", "ab|\n|ab"},
		{false, "\xc3\xa9\n", "\xc3\xa9\n"},
		{true,
		 "a\xf0\x9f\x98\x80\xf0\x9f\x98\x81"
		 "b",
		 "a|\xf0\x9f\x98\x80\xf0\x9f\x98\x81|b"},
		{true, "\xf0\x9f\x98\x81\xf0\x9f\x98\x80", "\xf0\x9f\x98\x81|\xf0\x9f\x98\x80"},
		{true,
		 "a\xf0\x9f\x98\x82"
		 "b",
		 "a|\xf0\x9f\x98\x82|b"},
		{true, "\xf0\x9f\x98\x82\xf0\x9f\x98\x82", "\xf0\x9f\x98\x82|\xf0\x9f\x98\x82"},
		{false, "\xf0\x9f\x98\x82\xf0\x9f\x98\x82", "\xf0\x9f\x98\x82\xf0\x9f\x98\x82"},
		{true,
		 "a\xf0\x9f\x98\x83"
		 "b",
		 "a\xf0\x9f\x98\x83"
		 "b"},
	};
	int bad = 0;

	for (size_t k = 0; k < sizeof(cases_cut) / sizeof(*cases_cut); k++) {
		const char *text = cases_cut[k].text;
		const size_t n = strlen(text);
		char model[4096], got[64] = "", label[64];
		struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
		struct sf_tok_encoder *enc;
		struct sf_err err = {0};
		struct sf_tok *tok;
		size_t p, end, g = 0;

		snprintf(model, sizeof(model), "%s/cuts.model", dir_path);
		write_model(model, pieces, sizeof(pieces) / sizeof(*pieces),
			    cases_cut[k].byte_fallback);
		if (sf__tok_load_file(&opts, &tok, &err) < 0 ||
		    sf__tok_encoder_create(tok, &enc, &err) < 0) {
			fprintf(stderr, "cuts: %s\n", err.msg);
			return 1;
		}
		for (p = 0; tok->sp_split && p < n; p = end) {
			/* One end a call: every cut is also where a call starts again. */
			sf__sp_split_cuts(tok->sp_split, (const uint8_t *)text + p, n - p, &end, 1);
			end += p;
			g += (size_t)snprintf(got + g, sizeof(got) - g, "%s%.*s", p ? "|" : "",
					      (int)(end - p), text + p);
		}
		if (strcmp(got, cases_cut[k].parts)) {
			fprintf(stderr, "cuts %zu (byte fallback %d): parts \"%s\", want \"%s\"\n",
				k, cases_cut[k].byte_fallback, got, cases_cut[k].parts);
			bad = 1;
		}
		snprintf(label, sizeof(label), "cuts %zu", k);
		bad |= check_one(tok, enc, label, text, n);
		unlink(model);
		sf__tok_encoder_free(enc);
		sf__tok_free(tok);
	}
	printf("%s cuts beside characters no piece holds\n", bad ? "FAIL" : "ok");
	return bad;
}

/*
 * The control pieces are the special tokens a job can name, whatever their ids and texts
 * (only those of ids 0-2 starting with '<' were, <unk> among them); an <|endoftext|>
 * control piece leaves the model's own eos the document's end.
 */
static int check_specials(const char *dir_path)
{
	static const struct piece pieces[] = {P("a", -1, NORMAL), P("[INST]", 0, CONTROL),
					      P("<|endoftext|>", 0, CONTROL)};
	char model[4096];
	struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
	struct sf_err err = {0};
	struct sf_tok *tok;
	int bad = 0;

	snprintf(model, sizeof(model), "%s/specials.model", dir_path);
	write_model(model, pieces, 3, false);
	if (sf__tok_load_file(&opts, &tok, &err) < 0) {
		fprintf(stderr, "specials: %s\n", err.msg);
		return 1;
	}
	if (sf__tok_special(tok, "[INST]", NULL) != 4 ||
	    sf__tok_special(tok, "<|endoftext|>", NULL) != 5 ||
	    sf__tok_special(tok, "</s>", NULL) != 2 || sf__tok_special(tok, "<unk>", NULL) >= 0 ||
	    sf__tok_eot(tok) != 2 || sf__tok_bos(tok) != 1) {
		fprintf(stderr,
			"specials: [INST] %d, <|endoftext|> %d, </s> %d, <unk> %d, eos %d, bos %d; "
			"want 4, 5, 2, -1, 2, 1\n",
			sf__tok_special(tok, "[INST]", NULL),
			sf__tok_special(tok, "<|endoftext|>", NULL),
			sf__tok_special(tok, "</s>", NULL), sf__tok_special(tok, "<unk>", NULL),
			sf__tok_eot(tok), sf__tok_bos(tok));
		bad = 1;
	}
	printf("%s specials\n", bad ? "FAIL" : "ok");
	unlink(model);
	sf__tok_free(tok);
	return bad;
}

/*
 * decode writes the bytes of the ids, the special tokens' texts among them, as it does for
 * the other formats: the library's Decode() writes nothing for a control piece, so `</s>`
 * document ends and `[INST]` vanished from decoded text (a review). Byte pieces of a
 * character around them still make the character.
 */
static int check_decode_specials(const char *dir_path)
{
	static const struct piece pieces[] = {P("a", -1, NORMAL), P("[INST]", 0, CONTROL),
					      P("<|endoftext|>", 0, CONTROL)};
	static const char want[] = "<s>[INST]a\xc3\xa9"
				   "a<|endoftext|>a</s>";
	char model[4096], got[64];
	struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
	struct sf_err err = {0};
	struct sf_tok *tok;
	/* <s> [INST] a <0xC3> <0xA9> a <|endoftext|> a </s>: the byte pieces are ids 3-258. */
	const uint32_t ids[9] = {1, 260, 259, 3 + 0xc3, 3 + 0xa9, 259, 261, 259, 2};
	size_t n = 0;
	int bad = 0;

	snprintf(model, sizeof(model), "%s/decode.model", dir_path);
	write_model(model, pieces, 3, true);
	if (sf__tok_load_file(&opts, &tok, &err) < 0) {
		fprintf(stderr, "decode specials: %s\n", err.msg);
		return 1;
	}
	if (sf__tok_decode(tok, ids, 9, got, sizeof(got), &n, &err) < 0 || n != sizeof(want) - 1 ||
	    memcmp(got, want, n)) {
		fprintf(stderr, "decode specials: got '%.*s' (%s), want '%s'\n", (int)n, got,
			err.msg, want);
		bad = 1;
	}
	printf("%s decode specials\n", bad ? "FAIL" : "ok");
	unlink(model);
	sf__tok_free(tok);
	return bad;
}

/*
 * A model of more control pieces than the special tokens a tokenizer holds (4,096): refused
 * at load, naming the limit. Those past it were left out silently, encoded as text.
 */
static int check_too_many_controls(const char *dir_path)
{
	size_t cap = 65536, n;
	char *args = malloc(cap), model[4096], msg[512] = "";
	struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
	struct sf_err err = {0};
	struct sf_tok *tok = NULL;
	int bad = 0;

	if (!args)
		return 1;
	n = (size_t)snprintf(args, cap,
			     "--input=%s/corpus.txt --model_prefix=%s/many --model_type=bpe "
			     "--vocab_size=6000 --character_coverage=0.98 --hard_vocab_limit=false "
			     "--minloglevel=2 "
			     "--num_threads=1 --control_symbols=",
			     dir_path, dir_path);
	for (int i = 0; i < 4100; i++)
		n += (size_t)snprintf(args + n, cap - n, "%s<c%d>", i ? "," : "", i);
	if (sp_test_train(args, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "many: training: %s\n", msg);
		free(args);
		return 1;
	}
	free(args);
	snprintf(model, sizeof(model), "%s/many.model", dir_path);
	if (sf__tok_load_file(&opts, &tok, &err) == 0) {
		fprintf(stderr, "many: 4,100 control pieces loaded\n");
		sf__tok_free(tok);
		bad = 1;
	} else if (!strstr(err.msg, "more than 4096 special tokens")) {
		fprintf(stderr, "many: %s\n", err.msg);
		bad = 1;
	}
	printf("%s too many control pieces\n", bad ? "FAIL" : "ok");
	unlink(model);
	snprintf(model, sizeof(model), "%s/many.vocab", dir_path);
	unlink(model);
	return bad;
}

/*
 * Each invalid byte is U+FFFD to the normalizer, three byte pieces when that is no piece:
 * a run of them gives 3 ids a byte. Make a run whose ids fill the encoder's first buffer
 * (4,096 ids) exactly, follow it with </s>, and allow the special tokens: its id must
 * land inside the buffer, after the run's.
 */
static int check_full_buffer(const char *dir_path)
{
	static const struct piece pieces[] = {P("\xe2\x96\x81", -1, NORMAL), P("a", -1, NORMAL)};
	char model[4096], msg[256] = "", *text;
	struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
	uint32_t *want = malloc(8192 * sizeof(*want));
	size_t run, n_want = 0, n_got, i;
	struct sf_tok_encoder *enc;
	struct sf_err err = {0};
	const uint32_t *got;
	struct sf_tok *tok;
	int bad = 0;

	snprintf(model, sizeof(model), "%s/full.model", dir_path);
	write_model(model, pieces, 2, true);
	text = malloc(2048);
	if (!want || !text || sf__tok_load_file(&opts, &tok, &err) < 0 ||
	    sf__tok_encoder_create(tok, &enc, &err) < 0) {
		fprintf(stderr, "full buffer: %s\n", err.msg);
		return 1;
	}
	memset(text, 0xff, 2048);
	for (run = 1300; run < 1400; run++) {
		if (sf__sp_encode(tok->sp, false, text, run, want, 8192, &n_want, msg,
				  sizeof(msg)) < 0) {
			fprintf(stderr, "full buffer: the library: %s\n", msg);
			return 1;
		}
		if (n_want == 4096)
			break;
	}
	if (run == 1400) {
		fprintf(stderr, "full buffer: no run of 0xff gives 4,096 ids\n");
		return 1;
	}
	memcpy(text + run, "</s>", 4);
	want[n_want++] = (uint32_t)tok->eot;
	if (sf__tok_encode(enc, text, run + 4, SF_TOK_ALLOW_ALL, &got, &n_got, &err) < 0) {
		fprintf(stderr, "full buffer: %s\n", err.msg);
		return 1;
	}
	if (n_got > enc->ids_cap) {
		fprintf(stderr, "full buffer: %zu ids written in a buffer of %zu\n", n_got,
			enc->ids_cap);
		bad = 1;
	}
	for (i = 0; i < n_want && i < n_got && got[i] == want[i]; i++)
		;
	if (i != n_want || i != n_got) {
		fprintf(stderr, "full buffer: %zu ids, expected %zu; first difference at %zu\n",
			n_got, n_want, i);
		bad = 1;
	}
	printf("%s full buffer: %zu ids, then </s>\n", bad ? "FAIL" : "ok", n_want - 1);
	unlink(model);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	free(text);
	free(want);
	return bad;
}

/*
 * A model the library throws on: a unigram model with a piece of one NUL byte, which its
 * trie (darts-clone) takes as an empty key and refuses with a C++ exception. The shim
 * caught only std::bad_alloc, so the exception ended the process (std::terminate: a core
 * dump from `shmfeed check`, found by fuzz_tok_file); it is now an error naming the model.
 */
static int check_library_exception(const char *dir_path)
{
	struct pb *m = calloc(1, sizeof(*m)), sub = {.n = 0};
	char model[4096];
	struct sf_tok_file_opts opts = {model, SF_TOK_FORMAT_SENTENCEPIECE, NULL};
	struct sf_err err = {0};
	struct sf_tok *tok = NULL;
	int bad;
	FILE *f;

	if (!m)
		abort();
	pb_piece(m, "<unk>", 5, 0, UNKNOWN);
	pb_piece(m, "<s>", 3, 0, CONTROL);
	pb_piece(m, "</s>", 4, 0, CONTROL);
	pb_piece(m, "a", 1, -1, NORMAL);
	pb_piece(m, "\0", 1, -2, NORMAL);
	pb_uint(&sub, 3, 1); /* TrainerSpec.model_type: UNIGRAM */
	pb_bytes(m, 2, sub.b, sub.n);
	sub.n = 0;
	pb_bytes(&sub, 1, "identity", 8);
	pb_bytes(m, 3, sub.b, sub.n);
	snprintf(model, sizeof(model), "%s/nul-unigram.model", dir_path);
	f = fopen(model, "wb");
	if (!f || fwrite(m->b, 1, m->n, f) != m->n || fclose(f)) {
		fprintf(stderr, "cannot write %s\n", model);
		exit(1);
	}
	free(m);
	bad = sf__tok_load_file(&opts, &tok, &err) != SF_E_TOKENIZER ||
	      !strstr(err.msg, "nul-unigram.model") || !strstr(err.msg, "zero-length key");
	printf("%s a library exception at load is an error: %s\n", bad ? "FAIL" : "ok",
	       err.msg);
	sf__tok_free(tok);
	unlink(model);
	return bad;
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
	failed |= check_crafted(dir);
	failed |= check_cuts(dir);
	failed |= check_specials(dir);
	failed |= check_decode_specials(dir);
	failed |= check_too_many_controls(dir);
	failed |= check_full_buffer(dir);
	failed |= check_library_exception(dir);
	for (i = 0; i < texts.n; i++)
		free(texts.s[i]);
	free(texts.s);
	free(texts.len);
	free(corpus);
	free(shakespeare);
	free(mix);
	return failed;
}
