/*
 * Raw text with a tokenizer file whose family puts a token before each document (a small
 * tekken file written here: <s> 1 and </s> 2 around each document, ids after its 25
 * special tokens), so it needs nothing from outside:
 *  - every window of an epoch equals the stream built from sf__tok_encode() of each
 *    document with <s> before and </s> after;
 *  - document starts are exactly the positions of <s>;
 *  - `bos: none` and `eos` naming another special token change the stream accordingly;
 *  - 1 and 2 producer processes deliver identical batches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/dataset_impl.h"
#include "producer/producer.h"
#include "producer/sampler.h"
#include "producer/tokenizer/tokenizer.h"
#include "tests/producer/harness.h"

/* A tekken file: the 256 bytes and the merges "ab", "ba", "abab", with 25 specials. */
static void write_tekken(const char *path)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc(1 << 16), *o = out;

	o += sprintf(o, "{\"config\": {\"pattern\": \"\\\\p{L}+|\\\\s+|.\", "
			"\"default_vocab_size\": 284, \"default_num_special_tokens\": 25, "
			"\"version\": \"v3\"}, \"vocab\": [");
	for (int i = 0; i < 256; i++)
		o += sprintf(o,
			     "{\"rank\": %d, \"token_bytes\": \"%c%c==\", \"token_str\": null}, ",
			     i, b64[i >> 2], b64[(i & 3) << 4]);
	o += sprintf(o, "{\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": null}, "
			"{\"rank\": 257, \"token_bytes\": \"YmE=\", \"token_str\": null}, "
			"{\"rank\": 258, \"token_bytes\": \"YWJhYg==\", \"token_str\": null}]}");
	h_write_file(path, out, (size_t)(o - out));
	free(out);
}

/* Documents of a, b and spaces, 1 to 40 bytes, separated by blank lines; with `spell`,
 * one in three also spells the end-of-document token "</s>" inside. */
static char *corpus(size_t n_docs, int spell, size_t *ret_len)
{
	char *text = malloc(n_docs * 52), *o = text;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (size_t d = 0; d < n_docs; d++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		for (uint64_t i = 0, n = 1 + x % 40; i < n; i++) {
			*o++ = "ab  aab"[(x >> (i % 50)) % 7];
			if (spell && d % 3 == 0 && i == n / 2)
				o += sprintf(o, "</s>");
		}
		if (d + 1 < n_docs) {
			*o++ = '\n';
			*o++ = '\n';
		}
	}
	*ret_len = (size_t)(o - text);
	return text;
}

/* The stream the producers should make: [bos] ids eos per document. */
static uint32_t *expected_stream(const char *tok_path, const char *text, size_t len, int32_t bos,
				 int32_t eos, uint64_t allowed, size_t *ret_n)
{
	struct sf_tok_file_opts opts = {tok_path, 0, NULL};
	struct sf_tok_encoder *enc;
	struct sf_tok *tok;
	struct sf_err e = {0};
	uint32_t *out = malloc((len + 1) * 3 * sizeof(*out));
	size_t n = 0;

	H_CHECK(sf__tok_load_file(&opts, &tok, &e) == 0, "%s", e.msg);
	H_CHECK(sf__tok_encoder_create(tok, &enc, &e) == 0, "%s", e.msg);
	for (const char *p = text, *end = text + len; p < end;) {
		const char *q = memmem(p, (size_t)(end - p), "\n\n", 2);
		size_t dl = q ? (size_t)(q - p) : (size_t)(end - p), ni;
		const uint32_t *ids;

		if (dl) {
			H_CHECK(sf__tok_encode(enc, p, dl, allowed, &ids, &ni, &e) == 0, "%s",
				e.msg);
			if (bos >= 0)
				out[n++] = (uint32_t)bos;
			memcpy(out + n, ids, ni * sizeof(*ids));
			n += ni;
			out[n++] = (uint32_t)eos;
		}
		p = q ? q + 2 : end;
	}
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	*ret_n = n;
	return out;
}

/* Every window of epoch 0 against `want`, and the document starts against `bos` (which,
 * where it is also the end-of-text id, starts a document only after another). */
static void check_windows(const struct sf_config *cfg, const uint32_t *want, size_t n_want,
			  int32_t bos, int bos_is_eot)
{
	const uint32_t T = cfg->seq_len, B = cfg->batch_size, D = cfg->doc_starts;
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_err e = {0};
	struct sf_dataset_stats st;
	unsigned char *buf;
	uint64_t starts_seen = 0;

	H_CHECK(sf__dataset_open(cfg, &ds, &e) == 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	H_CHECK(st.n_tokens == n_want, "%llu tokens, expected %zu", (unsigned long long)st.n_tokens,
		n_want);
	H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
	buf = malloc(sf__dataset_payload_bytes(ds));
	for (uint64_t s = 0; s * B < st.n_windows; s++) {
		uint32_t len;
		uint64_t first;
		const uint32_t *starts;

		H_CHECK(sf__builder_fill(b, 0, s, buf, &len, &first, &e) == 0, "%s", e.msg);
		starts = (const uint32_t *)(buf + sf__doc_starts_offset(B, T + 1, 2));
		for (uint32_t i = 0; i < B && s * B + i < st.n_windows; i++) {
			const uint16_t *row = (const uint16_t *)buf + i * (T + 1);
			uint64_t off = sf__builder_sample_offset(b, s * B + i);
			uint32_t n = 0;

			for (uint32_t j = 0; j <= T; j++) {
				H_CHECK(off + j < n_want && row[j] == want[off + j],
					"sample %llu token %u: %u, expected %u",
					(unsigned long long)(s * B + i), j, row[j],
					off + j < n_want ? want[off + j] : 0);
				/* A document starts at its bos; at 0 the row cannot tell. */
				if (bos < 0 || row[j] != (uint32_t)bos || n == D ||
				    (bos_is_eot && off + j && want[off + j - 1] != (uint32_t)bos))
					continue;
				H_CHECK(starts[i * D + n] == j || (j == 0 && n == 0),
					"sample %llu: start at %u not listed (%u)",
					(unsigned long long)(s * B + i), j, starts[i * D + n]);
				n++;
				starts_seen++;
			}
			H_CHECK(bos < 0 || n == D || starts[i * D + n] == UINT32_MAX,
				"sample %llu: extra start %u", (unsigned long long)(s * B + i),
				starts[i * D + n]);
		}
	}
	H_CHECK(bos < 0 || starts_seen > 100, "only %llu starts", (unsigned long long)starts_seen);
	/* Heads of chunks are shared and tokenized apart from the rest: have many (raw
	 * text; token files have none). */
	H_CHECK(st.n_chunks > 8 || (!st.n_chunks && st.n_files), "only %llu chunks",
		(unsigned long long)st.n_chunks);
	printf("   %llu tokens, %llu chunks, %llu windows, %llu document starts checked\n",
	       (unsigned long long)st.n_tokens, (unsigned long long)st.n_chunks,
	       (unsigned long long)st.n_windows, (unsigned long long)starts_seen);
	free(buf);
	sf__builder_free(b);
	sf__dataset_close(ds);
}

/* The test's directory, removed at exit by the process that made it, failed or not
 * (H_CHECK exits; forked producers and consumers leave it alone). */
static char *test_dir;
static pid_t test_pid;

static void remove_test_dir(void)
{
	if (test_dir && getpid() == test_pid)
		h_rmtree(test_dir);
}

int main(void)
{
	char tok_path[4096], text_path[4096];
	struct sf_config cfg;
	uint32_t *want;
	size_t text_len, n_want;
	char *dir = h_tmpdir(), *text = corpus(60000, 0, &text_len);

	setvbuf(stdout, NULL, _IOLBF, 0);
	test_dir = dir;
	test_pid = getpid();
	atexit(remove_test_dir);
	snprintf(tok_path, sizeof(tok_path), "%s/tekken.json", dir);
	snprintf(text_path, sizeof(text_path), "%s/docs.txt", dir);
	write_tekken(tok_path);
	h_write_file(text_path, text, text_len);

	h_config(&cfg, text_path, 4, 16, 1);
	cfg.encoding = NULL;
	cfg.tok_file = tok_path;
	cfg.sources[0].separator = "\n\n";
	cfg.doc_starts = 8;
	want = expected_stream(tok_path, text, text_len, 1, 2, 0, &n_want);
	check_windows(&cfg, want, n_want, 1, 0);
	free(want);
	printf("ok: every window is <s> ids </s> per document; starts are the <s> positions\n");

	cfg.bos = "none";
	cfg.eos = "[INST]";
	want = expected_stream(tok_path, text, text_len, -1, 3, 0, &n_want);
	check_windows(&cfg, want, n_want, -1, 0);
	free(want);
	printf("ok: bos none and eos [INST] give ids [INST] per document\n");

	/* bos and eos one id (GPT-2's <|endoftext|> around each document): a chunk head found
	 * its starts after every such id, so rows read from heads listed twice as many, and
	 * the chunk's count then disagreed with the index (review). */
	cfg.bos = "<s>";
	cfg.eos = "<s>";
	want = expected_stream(tok_path, text, text_len, 1, 1, 0, &n_want);
	check_windows(&cfg, want, n_want, 1, 1);
	free(want);
	printf("ok: bos and eos <s> give <s> ids <s> per document, starts at the first <s>\n");

	/* With specials allowed, "</s>" spelled in a document is the end-of-document id: the
	 * document starts are still those of the documents (at each <s>). Chunk heads found
	 * theirs after every end-of-document id, so a few rows listed starts there. */
	{
		char spelled_path[4096];
		size_t spelled_len;
		char *spelled = corpus(60000, 1, &spelled_len);

		snprintf(spelled_path, sizeof(spelled_path), "%s/spelled.txt", dir);
		h_write_file(spelled_path, spelled, spelled_len);
		cfg.sources[0].paths[0] = spelled_path;
		cfg.bos = NULL;
		cfg.eos = NULL;
		cfg.tok_specials = 1;
		want = expected_stream(tok_path, spelled, spelled_len, 1, 2, SF_TOK_ALLOW_ALL,
				       &n_want);
		check_windows(&cfg, want, n_want, 1, 0);
		free(want);
		free(spelled);
		cfg.sources[0].paths[0] = text_path;
		cfg.tok_specials = 0;
	}
	printf("ok: with specials, </s> spelled in a document is its id, and starts are the "
	       "documents'\n");

	/* A token file whose documents begin with the family's bos and have no end token
	 * (llm.c's Llama 3 shards: <|begin_of_text|> before each): a document starts at each
	 * bos. Starts were looked for after the end token only: none were listed. */
	{
		char bin_path[4096];
		uint16_t *ids;
		size_t n = 0;

		cfg.bos = NULL;
		cfg.eos = NULL;
		want = expected_stream(tok_path, text, text_len, 1, 2, 0, &n_want);
		ids = malloc(n_want * sizeof(*ids));
		for (size_t i = 0; i < n_want; i++)
			if (want[i] != 2)
				want[n] = want[i], ids[n++] = (uint16_t)want[i];
		snprintf(bin_path, sizeof(bin_path), "%s/bos_first.bin", dir);
		h_write_file(bin_path, ids, n * sizeof(*ids));
		cfg.sources[0].paths[0] = bin_path;
		cfg.sources[0].format = SF_FMT_NANOGPT;
		cfg.sources[0].separator = NULL;
		check_windows(&cfg, want, n, 1, 0);
		cfg.sources[0].paths[0] = text_path;
		cfg.sources[0].format = 0;
		cfg.sources[0].separator = "\n\n";
		free(ids);
		free(want);
	}
	printf("ok: a token file of <s> ids per document has its starts at each <s>\n");

	cfg.bos = NULL;
	cfg.eos = NULL;
	{
		struct h_run r1, r2;

		H_CHECK(h_pipeline(&cfg, 1, 0, 6, &r1) == 0, "pipeline P=1");
		H_CHECK(h_pipeline(&cfg, 2, 0, 6, &r2) == 0, "pipeline P=2");
		H_CHECK(!memcmp(r1.hash, r2.hash, r1.ranks * r1.steps * sizeof(*r1.hash)),
			"1 and 2 producers differ");
		h_run_free(&r1);
		h_run_free(&r2);
	}
	printf("ok: 1 and 2 producers deliver identical batches\n");

	/* Files of one short document each: <s> ids </s> are more tokens than the file has
	 * bytes, and a cached index holding such a chunk was refused as impossible, so it
	 * was built again at every start. */
	{
		char short_dir[4096], short_path[4096 + 16];
		struct sf_dataset *ds = NULL;
		struct sf_dataset_stats st;
		struct sf_err e = {0};

		snprintf(short_dir, sizeof(short_dir), "%s/short", dir);
		H_CHECK(mkdir(short_dir, 0700) == 0, "mkdir %s", short_dir);
		for (int i = 0; i < 12; i++) {
			snprintf(short_path, sizeof(short_path), "%s/%02d.txt", short_dir, i);
			h_write_file(short_path, "xyz", 3);
		}
		cfg.sources[0].paths[0] = short_dir;
		cfg.sources[0].separator = NULL;
		cfg.doc_starts = 0;
		for (int run = 0; run < 2; run++) {
			H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
			sf__dataset_stats(ds, &st);
			H_CHECK(st.n_tokens == 12 * 5, "%llu tokens", (unsigned long long)st.n_tokens);
			H_CHECK(st.index_loaded == (uint32_t)run,
				"run %d: the index was %s", run, run ? "built again" : "loaded");
			sf__dataset_close(ds);
		}
		cfg.sources[0].paths[0] = text_path;
	}
	printf("ok: the index of files of one short document each is used again\n");
	free(text);
	return 0;
}
