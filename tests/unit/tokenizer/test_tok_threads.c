/*
 * One loaded vocabulary shared by several threads: for each BPE encoding the vocabulary
 * is loaded once, and 4 threads, each with its own encoder, encode tinyshakespeare and
 * unicode_mix (twice, so that each encoder also reuses its grown buffers) and compare
 * every id with tiktoken's reference ids. Built with -Db_sanitize=thread this is the
 * ThreadSanitizer check that a struct sf_tok is only ever read after sf__tok_load().
 *
 * A plain program (exit 0 pass, 1 fail, 77 skip without the shared data), since Criterion
 * does not run under ThreadSanitizer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/tokenizer.h"
#include "tok_test_util.h"

#define THREADS 4
#define PASSES	2

struct text {
	const char *label;
	char *bytes;
	size_t len;
	uint32_t *ref;
	size_t ref_len;
};

struct job {
	const char *encoding;
	const struct sf_tok *tok;
	const struct text *texts;
	size_t n_texts;
	int thread;
	int failed;
};

static void *encode_all(void *arg)
{
	struct job *job = arg;
	struct sf_tok_encoder *enc;
	struct sf_err err = {0};
	const uint32_t *ids;
	size_t t, n, i;
	int pass;

	if (sf__tok_encoder_create(job->tok, &enc, &err) < 0) {
		fprintf(stderr, "thread %d: %s\n", job->thread, err.msg);
		job->failed = 1;
		return NULL;
	}
	for (pass = 0; pass < PASSES; pass++) {
		for (t = 0; t < job->n_texts; t++) {
			const struct text *x = &job->texts[t];

			if (sf__tok_encode(enc, x->bytes, x->len, SF_TOK_ALLOW_NONE, &ids, &n,
					   &err) < 0) {
				fprintf(stderr, "thread %d: %s on %s: %s\n", job->thread,
					job->encoding, x->label, err.msg);
				job->failed = 1;
				continue;
			}
			for (i = 0; i < n && i < x->ref_len; i++)
				if (ids[i] != x->ref[i])
					break;
			if (i != n || n != x->ref_len) {
				fprintf(stderr,
					"FAIL: thread %d: %s on %s: first difference at id %zu of "
					"%zu (reference has %zu)\n",
					job->thread, job->encoding, x->label, i, n, x->ref_len);
				job->failed = 1;
			}
		}
	}
	sf__tok_encoder_free(enc);
	return NULL;
}

static int read_text(const char *dir, const char *rel, const char *label, const char *encoding,
		     struct text *x)
{
	char path[4096];

	x->label = label;
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	x->bytes = tok_test_read(path, &x->len);
	if (!x->bytes) {
		fprintf(stderr, "cannot read %s\n", path);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/tokref/%s.%s.u32", dir, label, encoding);
	x->ref = tok_test_read(path, &x->ref_len);
	if (!x->ref) {
		fprintf(stderr, "cannot read %s\n", path);
		return -1;
	}
	x->ref_len /= sizeof(uint32_t);
	return 0;
}

int main(void)
{
	static const char *const encodings[] = {"r50k_base", "cl100k_base", "o200k_base"};
	const char *dir = tok_test_data();
	struct job jobs[THREADS];
	pthread_t threads[THREADS];
	struct text texts[2];
	size_t e;
	int i, fail = 0;

	for (e = 0; e < sizeof(encodings) / sizeof(encodings[0]); e++) {
		struct sf_tok *tok = tok_test_load(encodings[e]);

		if (!tok)
			return 1;
		if (read_text(dir, "corpus/tinyshakespeare.txt", "tinyshakespeare", encodings[e],
			      &texts[0]) < 0 ||
		    read_text(dir, "tokref/unicode_mix.txt", "unicode_mix", encodings[e],
			      &texts[1]) < 0)
			return 1;
		for (i = 0; i < THREADS; i++) {
			jobs[i] = (struct job){.encoding = encodings[e],
					       .tok = tok,
					       .texts = texts,
					       .n_texts = 2,
					       .thread = i};
			if (pthread_create(&threads[i], NULL, encode_all, &jobs[i])) {
				fprintf(stderr, "pthread_create failed\n");
				return 1;
			}
		}
		for (i = 0; i < THREADS; i++) {
			pthread_join(threads[i], NULL);
			fail |= jobs[i].failed;
		}
		printf("%-12s %d threads x %d passes over tinyshakespeare (%zu ids) and "
		       "unicode_mix (%zu ids): %s\n",
		       encodings[e], THREADS, PASSES, texts[0].ref_len, texts[1].ref_len,
		       fail ? "FAIL" : "ok");
		for (i = 0; i < 2; i++) {
			free(texts[i].bytes);
			free(texts[i].ref);
		}
		sf__tok_free(tok);
	}
	printf("%s\n", fail ? "FAIL" : "ok");
	return fail;
}
