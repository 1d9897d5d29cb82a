/*
 * Single-core throughput of the tokenizer.json encoder, for bench_hf_json.py: loads a
 * tokenizer.json (not timed), reads documents framed as in tests/unit/tokenizer's helper
 * (a little-endian uint32 byte count, then the bytes) from a file, and encodes them all,
 * one call per document, in passes until at least ten passes and one second; prints the
 * median pass as "MB/s tokens/s PASSES" (the driver times its peer by the same rule).
 * Time is the process's CPU time, which a machine shared with other work disturbs far
 * less than wall-clock time.
 *
 * usage: bench_hf_json TOKENIZER.json DOCS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "producer/tokenizer/tokenizer.h"

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

int main(int argc, char **argv)
{
	struct sf_tok_encoder *enc;
	struct sf_tok *tok;
	struct sf_err err = {0};
	double times[4096], total = 0, median;
	size_t len, pos, n, tokens = 0;
	uint8_t *buf;
	long size;
	FILE *f;
	int pass;

	if (argc != 3) {
		fprintf(stderr, "usage: bench_hf_json TOKENIZER.json DOCS\n");
		return 2;
	}
	if (sf__tok_load_hf_json(argv[1], &tok, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	f = fopen(argv[2], "rb");
	if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		perror(argv[2]);
		return 1;
	}
	len = (size_t)size;
	buf = malloc(len + 1);
	if (!buf || fread(buf, 1, len, f) != len) {
		perror(argv[2]);
		return 1;
	}
	fclose(f);
	/* Check the framing once; `size` becomes the text's byte count. */
	for (pos = 0, size = 0; pos + 4 <= len; pos += 4 + n) {
		uint32_t doc;

		memcpy(&doc, buf + pos, 4);
		n = doc;
		if (n > len - pos - 4) {
			fprintf(stderr, "%s: bad framing\n", argv[2]);
			return 1;
		}
		size += (long)n;
	}
	len = pos;
	for (pass = 0; (pass < 10 || total < 1.0) && pass < 4096; pass++) {
		double t, dt;

		/* A fresh encoder each pass, as bench_tokenizer and `encode --bench` time it:
		 * no pass starts with the caches of the one before. */
		if (sf__tok_encoder_create(tok, &enc, &err) < 0) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		t = now();
		tokens = 0;
		for (pos = 0; pos < len;) {
			const uint32_t *ids;
			uint32_t doc;

			memcpy(&doc, buf + pos, 4);
			if (sf__tok_encode(enc, buf + pos + 4, doc, SF_TOK_ALLOW_NONE, &ids, &n,
					   &err) < 0) {
				fprintf(stderr, "%s\n", err.msg);
				return 1;
			}
			tokens += n;
			pos += 4 + doc;
		}
		dt = now() - t;
		sf__tok_encoder_free(enc);
		total += dt;
		times[pass] = dt;
	}
	qsort(times, (size_t)pass, sizeof(*times), cmp_double);
	median = pass % 2 ? times[pass / 2] : (times[pass / 2 - 1] + times[pass / 2]) / 2;
	printf("%.2f MB/s %.0f tokens/s %d\n", (double)size / median / 1e6,
	       (double)tokens / median, pass);
	sf__tok_free(tok);
	free(buf);
	return 0;
}
