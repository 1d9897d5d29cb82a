/*
 * `shmfeed encode` and `shmfeed decode`: the tokenizer on standard input and output,
 * ids as little-endian uint32, and `encode --bench` for its single-core throughput.
 * The whole input is one document: no special tokens unless --specials, nothing added.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/log.h"
#include "producer/tokenizer/tokenizer.h"

struct tok_args {
	const char *encoding;
	const char *vocab;
	const char *tokenizer; /* a Hugging Face tokenizer.json */
	const char *bench;
	int specials;
};

static int parse(int argc, char **argv, int encode, struct tok_args *a)
{
	static const struct option opts[] = {
		{"encoding", required_argument, NULL, 'e'},
		{"vocab", required_argument, NULL, 'v'},
		{"specials", no_argument, NULL, 's'},
		{"bench", required_argument, NULL, 'b'},
		{"tokenizer", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(a, 0, sizeof(*a));
	optind = 1;
	while ((c = getopt_long(argc, argv, "e:h", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			a->encoding = optarg;
			break;
		case 'v':
			a->vocab = optarg;
			break;
		case 's':
			a->specials = 1;
			break;
		case 'b':
			a->bench = optarg;
			break;
		case 't':
			a->tokenizer = optarg;
			break;
		default:
			goto usage;
		}
	}
	if (!a->encoding == !a->tokenizer || (a->tokenizer && a->vocab) || optind != argc ||
	    (!encode && (a->specials || a->bench)))
		goto usage;
	return 0;
usage:
	fprintf(stderr,
		"usage: shmfeed encode -e ENCODING [--vocab FILE] [--specials] < text > ids.u32\n"
		"       shmfeed encode -e ENCODING [--vocab FILE] --bench FILE\n"
		"       shmfeed decode -e ENCODING [--vocab FILE] < ids.u32 > text\n"
		"       (--tokenizer tokenizer.json instead of -e: a Hugging Face byte-level BPE)\n"
		"ENCODING: r50k_base (gpt2), cl100k_base, o200k_base, bytes, char:CORPUS;\n"
		"the vocabulary is --vocab or $%s/ENCODING.tiktoken\n",
		SF_TOK_VOCAB_DIR_ENV);
	return -EINVAL;
}

/* Read a stream to its end into a malloc'ed buffer. */
static int read_all(FILE *f, uint8_t **ret_buf, size_t *ret_len)
{
	uint8_t *buf = NULL, *grown;
	size_t len = 0, cap = 0, got;

	do {
		if (cap - len < 65536) {
			cap = cap ? cap * 2 : 1 << 20;
			grown = realloc(buf, cap);
			if (!grown) {
				free(buf);
				return -ENOMEM;
			}
			buf = grown;
		}
		got = fread(buf + len, 1, cap - len, f);
		len += got;
	} while (got);
	if (ferror(f)) {
		free(buf);
		return -EIO;
	}
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

static int load(const struct tok_args *a, struct sf_tok **ret_tok)
{
	struct sf_err err = {0};

	if (a->tokenizer ? sf__tok_load_hf_json(a->tokenizer, ret_tok, &err) < 0
			 : sf__tok_load(a->encoding, a->vocab, ret_tok, &err) < 0) {
		sf__log_error("%s", err.msg);
		return 1;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench(struct sf_tok_encoder *enc, const char *path)
{
	struct sf_err err = {0};
	const uint32_t *ids;
	double best = 1e9, total = 0;
	size_t len, n = 0;
	uint8_t *text;
	FILE *f;
	int pass, rc;

	f = fopen(path, "rb");
	if (!f) {
		sf__log_error("cannot open %s: %s", path, strerror(errno));
		return 1;
	}
	rc = read_all(f, &text, &len);
	fclose(f);
	if (rc < 0) {
		sf__log_error("cannot read %s: %s", path, strerror(-rc));
		return 1;
	}
	for (pass = 0; pass < 10 || total < 1.0; pass++) {
		double t = now(), dt;

		if (sf__tok_encode(enc, text, len, SF_TOK_ALLOW_NONE, &ids, &n, &err) < 0) {
			sf__log_error("%s", err.msg);
			free(text);
			return 1;
		}
		dt = now() - t;
		total += dt;
		if (dt < best)
			best = dt;
	}
	printf("%s: %zu bytes, %zu tokens, %.1f MB/s, %.0f tokens/s (one core, best of %d)\n", path,
	       len, n, (double)len / best / 1e6, (double)n / best, pass);
	free(text);
	return 0;
}

int sf__cmd_encode(int argc, char **argv)
{
	struct sf_tok_encoder *enc = NULL;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	struct tok_args a;
	const uint32_t *ids;
	uint8_t *text = NULL, *out = NULL;
	size_t len, n, i;
	int rc, status = 1;

	if (parse(argc, argv, 1, &a) < 0)
		return 2;
	if (load(&a, &tok))
		return 1;
	if (sf__tok_encoder_create(tok, &enc, &err) < 0) {
		sf__log_error("%s", err.msg);
		goto out;
	}
	if (a.bench) {
		status = bench(enc, a.bench);
		goto out;
	}
	rc = read_all(stdin, &text, &len);
	if (rc < 0) {
		sf__log_error("cannot read standard input: %s", strerror(-rc));
		goto out;
	}
	if (sf__tok_encode(enc, text, len, a.specials ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE, &ids,
			   &n, &err) < 0) {
		sf__log_error("%s", err.msg);
		goto out;
	}
	out = malloc(n * 4 + 1);
	if (!out) {
		sf__log_error("out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		out[4 * i] = (uint8_t)ids[i];
		out[4 * i + 1] = (uint8_t)(ids[i] >> 8);
		out[4 * i + 2] = (uint8_t)(ids[i] >> 16);
		out[4 * i + 3] = (uint8_t)(ids[i] >> 24);
	}
	if (fwrite(out, 4, n, stdout) != n || fflush(stdout)) {
		sf__log_error("cannot write standard output: %s", strerror(errno));
		goto out;
	}
	status = 0;
out:
	free(out);
	free(text);
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
	return status;
}

int sf__cmd_decode(int argc, char **argv)
{
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	struct tok_args a;
	uint8_t *raw = NULL;
	uint32_t *ids = NULL;
	char *text = NULL;
	size_t len, n, i, text_len;
	int rc, status = 1;

	if (parse(argc, argv, 0, &a) < 0)
		return 2;
	if (load(&a, &tok))
		return 1;
	rc = read_all(stdin, &raw, &len);
	if (rc < 0) {
		sf__log_error("cannot read standard input: %s", strerror(-rc));
		goto out;
	}
	if (len % 4) {
		sf__log_error("input is %zu bytes, not a whole number of uint32 ids", len);
		goto out;
	}
	n = len / 4;
	ids = malloc(n * sizeof(*ids) + 1);
	if (!ids) {
		sf__log_error("out of memory");
		goto out;
	}
	for (i = 0; i < n; i++)
		ids[i] = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
			 (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
	if (sf__tok_decoded_len(tok, ids, n, &text_len, &err) < 0) {
		sf__log_error("%s", err.msg);
		goto out;
	}
	text = malloc(text_len + 1);
	if (!text || sf__tok_decode(tok, ids, n, text, text_len + 1, &text_len, &err) < 0) {
		sf__log_error("%s", text ? err.msg : "out of memory");
		goto out;
	}
	/* The bytes go out as they are, valid UTF-8 or not, so that decode inverts encode. */
	if (fwrite(text, 1, text_len, stdout) != text_len || fflush(stdout)) {
		sf__log_error("cannot write standard output: %s", strerror(errno));
		goto out;
	}
	status = 0;
out:
	free(text);
	free(ids);
	free(raw);
	sf__tok_free(tok);
	return status;
}
