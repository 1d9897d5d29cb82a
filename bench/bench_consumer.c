/*
 * bench_consumer: the cost of sf_consumer_next() in C, uint16 tokens, B=12 T=1024 by
 * default (nanoGPT's geometry; --batch and --seq-len set others), in two regimes:
 *  - ahead: before each timed call the bench waits, outside the timed region, until the
 *    producers have published the step, so the call measures the consumer's own path
 *    (release of the previous slot, claim, checksum check, provenance) with the data
 *    there, as in training where a step takes far longer than a refill;
 *  - back-to-back: calls in a loop, bounded by how fast the producers refill.
 * Producers are the test feed's (synthetic tokens, or random windows of a uint16 token
 * file with --tokens, as nanoGPT samples). Prints a table, or one JSON line with --json;
 * --csv FILE also writes every "ahead" latency in ns, one per line in call order, for a
 * distribution plot.
 *
 * usage: bench_consumer [--tokens FILE] [--steps N] [--producers P] [--batch B]
 *                       [--seq-len T] [--json] [--csv FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/proc.h"
#include "common/slot.h"
#include "tests/unit/consumer/feed.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
	size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);

	return sorted[i < n ? i : n - 1];
}

int main(int argc, char **argv)
{
	struct feed_options o = {.ranks = 1,
				 .batch = 12,
				 .seq_len = 1024,
				 .slots_per_rank = 8,
				 .producers = 1,
				 .token_bytes = 2,
				 .checksum = 1,
				 .seed = 1};
	size_t steps = 20000;
	int json = 0;
	const char *csv = NULL;
	char job[64], msg[256];
	struct sf_err e = {0};
	struct sf_consumer *c;
	struct sf_batch b;
	struct feed *f;
	uint64_t *ahead, *b2b, t_b2b;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
			o.token_file = argv[++i];
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--producers") && i + 1 < argc)
			o.producers = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			o.batch = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seq-len") && i + 1 < argc)
			o.seq_len = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
			csv = argv[++i];
		else {
			fprintf(stderr, "usage: bench_consumer [--tokens FILE] [--steps N] "
					"[--producers P] [--batch B] [--seq-len T] [--json] "
					"[--csv FILE]\n");
			return 2;
		}
	}
	snprintf(job, sizeof(job), "bench-consumer-%d", (int)getpid());
	o.job = job;
	if (feed_start(&o, &f, &e) < 0) {
		fprintf(stderr, "bench_consumer: %s\n", e.msg);
		return 1;
	}
	if (sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "bench_consumer: %s\n", msg);
		feed_stop(f);
		return 1;
	}
	ahead = calloc(steps, sizeof(*ahead));
	b2b = calloc(steps, sizeof(*b2b));
	for (size_t i = 0; i < steps; i++) {
		/* The step this call will claim, and its slot's READY word. */
		const uint32_t K = o.slots_per_rank;
		struct sf_slot *s = sf__arena_slot(f->arena, 0, (uint32_t)(i % K));
		uint64_t ready = sf__slot_word(SF_SLOT_READY, 0, i / K), t0;

		while (atomic_load_explicit(&s->word, memory_order_acquire) != ready)
			usleep(5);
		t0 = sf__now_ns();
		if (sf_consumer_next(c, -1, &b) < 0) {
			fprintf(stderr, "bench_consumer: %s\n", sf_consumer_errmsg(c));
			return 1;
		}
		ahead[i] = sf__now_ns() - t0;
	}
	t_b2b = sf__now_ns();
	for (size_t i = 0; i < steps; i++) {
		uint64_t t0 = sf__now_ns();

		if (sf_consumer_next(c, -1, &b) < 0) {
			fprintf(stderr, "bench_consumer: %s\n", sf_consumer_errmsg(c));
			return 1;
		}
		b2b[i] = sf__now_ns() - t0;
	}
	t_b2b = sf__now_ns() - t_b2b;
	sf_consumer_detach(c);
	feed_stop(f);
	if (csv) {
		FILE *out = fopen(csv, "w");

		for (size_t i = 0; out && i < steps; i++)
			fprintf(out, "%llu\n", (unsigned long long)ahead[i]);
		if (!out || fclose(out)) {
			fprintf(stderr, "bench_consumer: cannot write %s\n", csv);
			return 1;
		}
	}
	qsort(ahead, steps, sizeof(*ahead), cmp_u64);
	qsort(b2b, steps, sizeof(*b2b), cmp_u64);
	if (json) {
		printf("{\"steps\": %zu, \"batch\": %u, \"seq_len\": %u, \"ahead_p50_ns\": %llu, "
		       "\"ahead_p95_ns\": %llu, \"ahead_p99_ns\": %llu, \"ahead_p999_ns\": %llu, "
		       "\"b2b_p50_ns\": %llu, \"b2b_p99_ns\": %llu, \"b2b_batches_per_s\": %.0f}\n",
		       steps, o.batch, o.seq_len, (unsigned long long)pct(ahead, steps, 50),
		       (unsigned long long)pct(ahead, steps, 95),
		       (unsigned long long)pct(ahead, steps, 99),
		       (unsigned long long)pct(ahead, steps, 99.9),
		       (unsigned long long)pct(b2b, steps, 50),
		       (unsigned long long)pct(b2b, steps, 99),
		       (double)steps / ((double)t_b2b * 1e-9));
	} else {
		printf("sf_consumer_next(), B=%u T=%u uint16, %zu calls, %u producer(s), %s\n",
		       o.batch, o.seq_len, steps, o.producers,
		       o.token_file ? o.token_file : "synthetic tokens");
		printf("  producers ahead: p50 %6.2f us  p99 %6.2f us  p99.9 %6.2f us\n",
		       pct(ahead, steps, 50) / 1e3, pct(ahead, steps, 99) / 1e3,
		       pct(ahead, steps, 99.9) / 1e3);
		printf("  back-to-back:    p50 %6.2f us  p99 %6.2f us  %.0f batches/s\n",
		       pct(b2b, steps, 50) / 1e3, pct(b2b, steps, 99) / 1e3,
		       (double)steps / ((double)t_b2b * 1e-9));
	}
	free(ahead);
	free(b2b);
	return 0;
}
