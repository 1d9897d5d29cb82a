/*
 * `shmfeed encode` and `shmfeed decode`: the tokenizer on standard input and output,
 * ids as little-endian uint32, and `encode --bench` for its single-core throughput.
 * The whole input is one document: no special tokens unless --specials, nothing added.
 * `encode --records` encodes many documents in one run (the reference tests use it).
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
	const char *file; /* --tokenizer */
	const char *pattern;
	const char *bench;
	int format;
	int specials;
	int records;
	int info;
};

static int parse(int argc, char **argv, int encode, struct tok_args *a)
{
	static const struct option opts[] = {
		{"encoding", required_argument, NULL, 'e'},
		{"vocab", required_argument, NULL, 'v'},
		{"tokenizer", required_argument, NULL, 't'},
		{"format", required_argument, NULL, 'f'},
		{"pattern", required_argument, NULL, 'p'},
		{"specials", no_argument, NULL, 's'},
		{"bench", required_argument, NULL, 'b'},
		{"records", no_argument, NULL, 'r'},
		{"info", no_argument, NULL, 'i'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	/* What is wrong, said before the usage; a value option given twice is (the last one
	 * won). */
	const char *why = NULL;
	const char **value = NULL, *format = NULL;
	char twice[64];
	int c;

	memset(a, 0, sizeof(*a));
	optind = 1;
	while ((c = getopt_long(argc, argv, "e:h", opts, NULL)) != -1) {
		value = c == 'e'   ? &a->encoding
			: c == 'v' ? &a->vocab
			: c == 'b' ? &a->bench
			: c == 't' ? &a->file
			: c == 'p' ? &a->pattern
			: c == 'f' ? &format
				   : NULL;
		if (value && *value) {
			snprintf(twice, sizeof(twice), "%s given twice",
				 c == 'e'   ? "-e"
				 : c == 'v' ? "--vocab"
				 : c == 'b' ? "--bench"
				 : c == 't' ? "--tokenizer"
				 : c == 'f' ? "--format"
					    : "--pattern");
			why = twice;
			goto usage;
		}
		switch (c) {
		case 'e':
		case 'v':
		case 'b':
		case 't':
		case 'p':
			*value = optarg;
			break;
		case 's':
			a->specials = 1;
			break;
		case 'f':
			format = optarg;
			a->format = sf__tok_format_parse(optarg);
			if (a->format < 0) {
				why = "--format takes auto, tiktoken, tekken, hf or sentencepiece";
				goto usage;
			}
			break;
		case 'r':
			a->records = 1;
			break;
		case 'i':
			a->info = 1;
			break;
		default:
			goto usage;
		}
	}
	why = a->encoding && a->file	 ? "-e and --tokenizer: one tokenizer, not both"
	      : !a->encoding && !a->file ? "no tokenizer: -e ENCODING or --tokenizer FILE"
	      : optind != argc		 ? "an argument that is no option"
	      : !encode && (a->specials || a->bench || a->records || a->info)
		      ? "decode takes no --specials, --bench, --records or --info"
	      : a->bench && (a->specials || a->records || a->info)
		      ? "--bench FILE takes no --specials, --records or --info"
	      : a->info && (a->specials || a->records) ? "--info takes no --specials or --records"
	      : a->file && a->vocab		       ? "--vocab goes with -e, not --tokenizer"
	      : !a->file && (a->format || a->pattern)
		      ? "--format and --pattern go with --tokenizer, not -e"
		      : NULL;
	if (why)
		goto usage;
	/* A vocabulary the encoding would not read, as a job's config refuses it. */
	if (a->vocab && (!strcmp(a->encoding, "bytes") || !strncmp(a->encoding, "char:", 5))) {
		fprintf(stderr,
			"shmfeed %s: --vocab is a .tiktoken file, which encodings bytes and char "
			"do not read (r50k_base, gpt2, cl100k_base and o200k_base do)\n",
			encode ? "encode" : "decode");
		return -EINVAL;
	}
	return 0;
usage:
	if (why)
		fprintf(stderr, "shmfeed %s: %s\n", encode ? "encode" : "decode", why);
	fprintf(stderr,
		"usage: shmfeed encode TOKENIZER [--specials] [--records] < text > ids.u32\n"
		"       shmfeed encode TOKENIZER --bench FILE\n"
		"       shmfeed encode TOKENIZER --info\n"
		"       shmfeed decode TOKENIZER < ids.u32 > text\n"
		"TOKENIZER: -e ENCODING [--vocab FILE], ENCODING one of r50k_base (gpt2),\n"
		"cl100k_base, o200k_base, bytes, char:CORPUS (the vocabulary is --vocab or\n"
		"$%s/ENCODING.tiktoken); or --tokenizer FILE [--format auto|tiktoken|tekken|hf|\n"
		"sentencepiece] [--pattern REGEX]: a Llama 3/4 or Qwen .tiktoken file, a tekken\n"
		"JSON, a SentencePiece model, a Hugging Face tokenizer.json (byte-level BPE).\n"
		"--records: the input is records (uint32 length, bytes), each one document; the\n"
		"output is, per record, a uint32 count and the ids.\n",
		SF_TOK_VOCAB_DIR_ENV);
	return -EINVAL;
}

/* Read a stream to its end into a malloc'ed buffer. */
static int read_all(FILE *f, uint8_t **ret_buf, size_t *ret_len)
{
	uint8_t *buf = NULL, *grown;
	size_t len = 0, cap = 0, got;

	errno = 0;
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
		int r = errno ? -errno : -EIO; /* EISDIR for a directory */

		free(buf);
		return r;
	}
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

static int load(const struct tok_args *a, struct sf_tok **ret_tok)
{
	struct sf_err err = {0};

	struct sf_tok_file_opts opts = {a->file, a->format, a->pattern};

	if (a->file ? sf__tok_load_file(&opts, ret_tok, &err) < 0
		    : sf__tok_load(a->encoding, a->vocab, ret_tok, &err) < 0) {
		sf__log_error("%s", err.msg);
		return 1;
	}
	return 0;
}

/*
 * The process's CPU time: --bench measures one core's work, which time spent descheduled
 * on a shared machine would otherwise inflate.
 */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Each pass encodes the text with a fresh encoder, so that no pass finds in its caches
 * what an earlier pass of the same text left there: a producer meets a text once. At
 * least ten passes and a second (at most 100,000 passes, for a text of a few bytes); the
 * figure is the median pass (the best is printed
 * beside it), a statistic that does not favour a faster encoder for making more passes
 * in its second, so that a peer timed by the same rule compares like for like.
 */
static int bench(const struct sf_tok *tok, const char *path)
{
	struct sf_err err = {0};
	struct sf_tok_encoder *enc;
	const uint32_t *ids;
	double *times = NULL, total = 0, median;
	size_t len, n = 0, cap = 0, pass;
	uint8_t *text;
	FILE *f;
	int rc;

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
	for (pass = 0; (pass < 10 || total < 1.0) && pass < 100000; pass++) {
		double t, dt;

		if (pass == cap) {
			double *grown = realloc(times, (cap = cap ? 2 * cap : 64) * sizeof(*times));

			if (!grown) {
				sf__log_error("out of memory");
				goto fail;
			}
			times = grown;
		}
		if (sf__tok_encoder_create(tok, &enc, &err) < 0) {
			sf__log_error("%s", err.msg);
			goto fail;
		}
		t = now();
		rc = sf__tok_encode(enc, text, len, SF_TOK_ALLOW_NONE, &ids, &n, &err);
		dt = now() - t;
		sf__tok_encoder_free(enc);
		if (rc < 0) {
			sf__log_error("%s", err.msg);
			goto fail;
		}
		total += dt;
		times[pass] = dt;
	}
	qsort(times, pass, sizeof(*times), cmp_double);
	median = pass % 2 ? times[pass / 2] : (times[pass / 2 - 1] + times[pass / 2]) / 2;
	printf("%s: %zu bytes, %zu tokens, %.1f MB/s, %.0f tokens/s (one core, CPU time, median "
	       "of %zu passes; best %.1f MB/s)\n",
	       path, len, n, (double)len / median / 1e6, (double)n / median, pass,
	       (double)len / times[0] / 1e6);
	free(times);
	free(text);
	return 0;
fail:
	free(times);
	free(text);
	return 1;
}

static void put_u32(uint8_t *out, uint32_t v)
{
	out[0] = (uint8_t)v;
	out[1] = (uint8_t)(v >> 8);
	out[2] = (uint8_t)(v >> 16);
	out[3] = (uint8_t)(v >> 24);
}

/* Write a count and then `n` ids, as little-endian uint32. */
static int write_ids(const uint32_t *ids, size_t n, int counted)
{
	uint8_t buf[4096];
	size_t i = 0, k = 0;

	if (counted) {
		put_u32(buf, (uint32_t)n);
		k = 4;
	}
	for (; i < n; i++) {
		if (k == sizeof(buf)) {
			if (fwrite(buf, 1, k, stdout) != k)
				return -1;
			k = 0;
		}
		put_u32(buf + k, ids[i]);
		k += 4;
	}
	return fwrite(buf, 1, k, stdout) == k ? 0 : -1;
}

/* --records: each record of the input encoded as one document. */
static int encode_records(struct sf_tok_encoder *enc, const uint8_t *in, size_t len,
			  uint64_t allowed)
{
	struct sf_err err = {0};
	const uint32_t *ids;
	size_t p = 0, n, count = 0;
	uint32_t rec;

	while (p < len) {
		if (len - p < 4) {
			sf__log_error("record %zu: truncated length", count);
			return 1;
		}
		rec = (uint32_t)in[p] | (uint32_t)in[p + 1] << 8 | (uint32_t)in[p + 2] << 16 |
		      (uint32_t)in[p + 3] << 24;
		p += 4;
		if (rec > len - p) {
			sf__log_error("record %zu: a length of %u bytes, where %zu remain", count,
				      rec, len - p);
			return 1;
		}
		if (sf__tok_encode(enc, in + p, rec, allowed, &ids, &n, &err) < 0) {
			sf__log_error("record %zu: %s", count, err.msg);
			return 1;
		}
		if (write_ids(ids, n, 1) < 0) {
			sf__log_error("cannot write standard output: %s", strerror(errno));
			return 1;
		}
		p += rec;
		count++;
	}
	if (fflush(stdout)) {
		sf__log_error("cannot write standard output: %s", strerror(errno));
		return 1;
	}
	return 0;
}

/* --info: what `check` shows of a tokenizer (of a `file`, or a built-in encoding). */
static void info(const struct sf_tok *tok, int file)
{
	int bos = sf__tok_bos(tok), eot = sf__tok_eot(tok);
	char how[160];

	char b[16] = "none", t[16] = "none";

	if (bos >= 0)
		snprintf(b, sizeof(b), "%d", bos);
	if (eot >= 0)
		snprintf(t, sizeof(t), "%d", eot);
	printf("tokenizer: %s\nfamily: %s\nvocabulary: %u ids\nbos: %s\neos: %s\n",
	       sf__tok_name(tok),
	       *sf__tok_family(tok) ? sf__tok_family(tok)
	       : file		    ? "unknown family"
				    : "(built-in)",
	       sf__tok_n_vocab(tok), b, t);
	if (sf__tok_how(tok, how, sizeof(how)))
		printf("texts: %s\n", how);
}

/*
 * Whether the standard input (when `reads`) or output that the command's data would go
 * through was closed at start: it is /dev/null then, and the data would be lost or the
 * input taken for empty, with exit 0. Said, and 1.
 */
static int std_closed(bool reads)
{
	if (reads && (sf__cli_closed_std & 1u)) {
		sf__log_error("standard input is closed: nothing to read");
		return 1;
	}
	if (sf__cli_closed_std & 2u) {
		sf__log_error("standard output is closed: the output would be lost");
		return 1;
	}
	return 0;
}

int sf__cmd_encode(int argc, char **argv)
{
	struct sf_tok_encoder *enc = NULL;
	struct sf_tok *tok = NULL;
	struct sf_err err = {0};
	struct tok_args a;
	const uint32_t *ids;
	uint8_t *text = NULL;
	size_t len, n;
	int rc, status = 1;

	if (parse(argc, argv, 1, &a) < 0)
		return 2;
	if (std_closed(!a.bench && !a.info) || load(&a, &tok))
		return 1;
	if (sf__tok_encoder_create(tok, &enc, &err) < 0) {
		sf__log_error("%s", err.msg);
		goto out;
	}
	if (a.bench) {
		status = bench(tok, a.bench);
		goto out;
	}
	if (a.info) {
		info(tok, a.file != NULL);
		status = 0;
		goto out;
	}
	rc = read_all(stdin, &text, &len);
	if (rc < 0) {
		sf__log_error("cannot read standard input: %s", strerror(-rc));
		goto out;
	}
	if (a.records) {
		status = encode_records(enc, text, len,
					a.specials ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE);
		goto out;
	}
	if (sf__tok_encode(enc, text, len, a.specials ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE, &ids,
			   &n, &err) < 0) {
		sf__log_error("%s", err.msg);
		goto out;
	}
	if (write_ids(ids, n, 0) < 0 || fflush(stdout)) {
		sf__log_error("cannot write standard output: %s", strerror(errno));
		goto out;
	}
	status = 0;
out:
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
	if (std_closed(true) || load(&a, &tok))
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
