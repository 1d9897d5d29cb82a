/*
 * Tokenizer throughput on one core: MB/s and tokens/s of each BPE encoding on the shared
 * reference texts, best of several passes. Each pass encodes with a fresh encoder (made
 * before the clock starts) into an output buffer written once before, so that its piece
 * cache starts empty: a pass does not profit from the pieces the previous pass met in
 * the same text, which a producer reading new documents would not see again. Vocabulary
 * loading is timed separately.
 *
 * usage: bench_tokenizer [DATA_DIR] [ENCODING...]
 *        bench_tokenizer --serve DATA_DIR
 * DATA_DIR defaults to $SF_TEST_DATA, then ../shared/data.
 *
 * With --serve it times what it is asked on stdin, one request a line, so that a driver
 * (bench_tiktoken.py) can interleave it with other tokenizers in one run:
 *   ENCODING TEXT_PATH PASSES [IDS_PATH]
 * answered by one line "ok BYTES TOKENS CPU_S... WALL_S..." (or "error MESSAGE"): exactly
 * PASSES passes, each one's seconds of this process's CPU time, then each one's wall
 * time, so that the driver gives every tokenizer the same number of passes and the same
 * statistic over them. IDS_PATH, when given, receives the ids as little-endian uint32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "producer/tokenizer/tokenizer.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long len;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)len + 1);
	if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*ret_len = (size_t)len;
	return buf;
}

/* One pass with a fresh encoder: its CPU and wall seconds; NULL on success. */
static const char *one_pass(const struct sf_tok *tok, const char *text, size_t len,
			    uint32_t *out, double *ret_cpu, double *ret_wall, size_t *ret_n,
			    struct sf_err *err)
{
	struct sf_tok_encoder *enc;
	double c, t;
	int rc;

	if (sf__tok_encoder_create(tok, &enc, err) < 0)
		return err->msg;
	c = cpu_now();
	t = now();
	rc = sf__tok_encode_to(enc, text, len, 0, out, len + 1, ret_n, err);
	*ret_cpu = cpu_now() - c;
	*ret_wall = now() - t;
	sf__tok_encoder_free(enc);
	return rc < 0 ? err->msg : NULL;
}

/* An output buffer for `len` bytes of text, its pages touched so that no pass faults. */
static uint32_t *out_buffer(size_t len)
{
	uint32_t *out = malloc((len + 1) * sizeof(*out));

	if (out)
		memset(out, 0, (len + 1) * sizeof(*out));
	return out;
}

static int bench(const char *dir, const char *encoding)
{
	static const char *const files[][2] = {{"corpus/tinyshakespeare.txt", "tinyshakespeare"},
					       {"tokref/unicode_mix.txt", "unicode_mix"}};
	struct sf_tok *tok;
	struct sf_err err = {0};
	char path[4096];
	double t0, load_s;
	size_t f;

	snprintf(path, sizeof(path), "%s/vocab/%s.tiktoken", dir, encoding);
	t0 = now();
	if (sf__tok_load(encoding, path, &tok, &err) < 0) {
		fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
		return 1;
	}
	load_s = now() - t0;
	for (f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		double cpu, wall, best, total;
		const char *why;
		int pass;
		size_t len, n = 0;
		uint32_t *out;
		char *text;

		snprintf(path, sizeof(path), "%s/%s", dir, files[f][0]);
		text = read_file(path, &len);
		out = text ? out_buffer(len) : NULL;
		if (!out) {
			fprintf(stderr, "bench_tokenizer: cannot read %s\n", path);
			return 1;
		}
		/* At least a second and ten passes; the fastest pass by wall time. */
		best = 1e9;
		why = NULL;
		for (pass = 0, total = 0; !why && (pass < 10 || total < 1.0); pass++) {
			why = one_pass(tok, text, len, out, &cpu, &wall, &n, &err);
			total += wall;
			best = wall < best ? wall : best;
		}
		if (why) {
			fprintf(stderr, "bench_tokenizer: %s\n", why);
			return 1;
		}
		printf("%-12s %-16s %8.1f MB/s %10.0f tokens/s  (%zu bytes, %zu tokens, load %.2f "
		       "s)\n",
		       encoding, files[f][1], (double)len / best / 1e6, (double)n / best, len, n,
		       load_s);
		free(out);
		free(text);
	}
	sf__tok_free(tok);
	return 0;
}

/* The tokenizers loaded so far in --serve mode, by encoding name. */
#define SERVE_MAX 8
#define SERVE_MAX_PASSES 10000

static int serve(const char *dir)
{
	struct {
		char name[64];
		struct sf_tok *tok;
	} loaded[SERVE_MAX];
	size_t n_loaded = 0, i;
	char line[8192];

	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		char name[64], text_path[4096], ids_path[4096] = "";
		struct sf_err err = {0};
		double *cpu, *wall;
		const char *why = NULL;
		size_t len, n = 0;
		uint32_t *out;
		char *text;
		int passes, p;

		if (sscanf(line, "%63s %4095s %d %4095s", name, text_path, &passes, ids_path) < 3 ||
		    passes < 1 || passes > SERVE_MAX_PASSES) {
			printf("error bad request\n");
			continue;
		}
		for (i = 0; i < n_loaded && strcmp(loaded[i].name, name); i++)
			;
		if (i == n_loaded) {
			char path[4096];

			if (n_loaded == SERVE_MAX) {
				printf("error too many encodings\n");
				continue;
			}
			snprintf(path, sizeof(path), "%s/vocab/%s.tiktoken", dir,
				 sf__tok_vocab_name(name));
			if (sf__tok_load(name, path, &loaded[i].tok, &err) < 0) {
				printf("error %s\n", err.msg);
				continue;
			}
			snprintf(loaded[i].name, sizeof(loaded[i].name), "%s", name);
			n_loaded++;
		}
		text = read_file(text_path, &len);
		out = text ? out_buffer(len) : NULL;
		if (!out) {
			free(text);
			printf("error cannot read %s\n", text_path);
			continue;
		}
		cpu = malloc(2 * (size_t)passes * sizeof(*cpu));
		if (!cpu)
			why = "out of memory";
		else
			wall = cpu + passes;
		for (p = 0; !why && p < passes; p++)
			why = one_pass(loaded[i].tok, text, len, out, &cpu[p], &wall[p], &n, &err);
		if (!why && ids_path[0]) {
			FILE *f = fopen(ids_path, "wb");

			if (!f || fwrite(out, sizeof(*out), n, f) != n || fclose(f))
				why = "cannot write the ids";
		}
		free(out);
		free(text);
		if (why) {
			free(cpu);
			printf("error %s\n", why);
			continue;
		}
		printf("ok %zu %zu", len, n);
		for (p = 0; p < 2 * passes; p++)
			printf(" %.9f", cpu[p]);
		printf("\n");
		free(cpu);
	}
	for (i = 0; i < n_loaded; i++)
		sf__tok_free(loaded[i].tok);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const all[] = {"r50k_base", "cl100k_base", "o200k_base"};
	const char *dir = argc > 1 ? argv[1] : getenv("SF_TEST_DATA");
	int i, rc = 0;

	if (argc == 3 && !strcmp(argv[1], "--serve"))
		return serve(argv[2]);
	if (!dir)
		dir = "../shared/data";
	if (argc > 2) {
		for (i = 2; i < argc; i++)
			rc |= bench(dir, argv[i]);
	} else {
		for (i = 0; i < 3; i++)
			rc |= bench(dir, all[i]);
	}
	return rc;
}
