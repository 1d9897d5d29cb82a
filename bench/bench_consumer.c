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
 * distribution plot. --no-checksum makes the arena's producers store no checksums,
 * --verify-every N has consumers verify one step in N; --slots K sets the ring;
 * --b2b-steps N the back-to-back calls (default: --steps; 0 skips them); --pin runs the
 * producers on the last CPU and this process on the first (with two CPUs or more).
 * --evict BYTES writes that many bytes of a private buffer before each timed call, as a
 * training step would, so that every payload size is timed with the same cold caches:
 * without it, a call that waited long for a large batch finds its caches evicted by
 * whatever else ran on its CPU meanwhile, and one that waited a few microseconds for a
 * small batch does not.
 *
 * usage: bench_consumer [--tokens FILE] [--steps N] [--producers P] [--batch B]
 *                       [--seq-len T] [--slots K] [--no-checksum] [--verify-every N]
 *                       [--b2b-steps N] [--pin] [--full] [--evict BYTES]
 *                       [--json] [--csv FILE]
 *
 * --full waits, before each timed call, until the ring is full, so that the producers
 * are idle during the call.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/proc.h"
#include "common/slot.h"
#include "bench/bench_feed.h"
#include "bench/percentiles.h"

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
	size_t steps = 20000, b2b_steps = SIZE_MAX;
	int json = 0, pin = 0, full = 0;
	size_t evict = 0;
	unsigned char *evict_buf = NULL;
	const char *csv = NULL;
	char job[64], msg[256];
	struct sf_consumer *c;
	struct sf_batch b;
	struct feed *f;
	uint64_t *ahead, *b2b, t_b2b;

	for (int i = 1; i < argc; i++) {
		if (bench_feed_arg(&o, argc, argv, &i))
			continue;
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--no-checksum"))
			o.checksum = 0;
		else if (!strcmp(argv[i], "--verify-every") && i + 1 < argc)
			o.verify_every = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--b2b-steps") && i + 1 < argc)
			b2b_steps = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--pin"))
			pin = 1;
		else if (!strcmp(argv[i], "--full"))
			full = 1;
		else if (!strcmp(argv[i], "--evict") && i + 1 < argc)
			evict = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
			csv = argv[++i];
		else {
			fprintf(stderr,
				"usage: bench_consumer [--tokens FILE] [--steps N] "
				"[--producers P] [--batch B] [--seq-len T] [--slots K] "
				"[--no-checksum] [--verify-every N] [--b2b-steps N] [--pin] "
				"[--full] [--evict BYTES] [--json] [--csv FILE]\n");
			return 2;
		}
	}
	if (bench_feed_start(&o, "bench_consumer", "bench-consumer", job, sizeof(job), &f) < 0)
		return 1;
	if (b2b_steps == SIZE_MAX)
		b2b_steps = steps;
	if (pin) {
		cpu_set_t all, one;
		int first = -1, last = -1;

		sched_getaffinity(0, sizeof(all), &all);
		for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
			if (CPU_ISSET(cpu, &all)) {
				first = first < 0 ? cpu : first;
				last = cpu;
			}
		if (first != last) {
			CPU_ZERO(&one);
			CPU_SET(last, &one);
			for (uint32_t p = 0; p < o.producers; p++)
				sched_setaffinity(f->pids[p], sizeof(one), &one);
			CPU_ZERO(&one);
			CPU_SET(first, &one);
			sched_setaffinity(0, sizeof(one), &one);
		}
	}
	if (sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "bench_consumer: %s\n", msg);
		feed_stop(f);
		return 1;
	}
	ahead = calloc(steps, sizeof(*ahead));
	if (evict)
		evict_buf = malloc(evict);
	if (evict && !evict_buf) {
		fprintf(stderr, "bench_consumer: out of memory\n");
		return 1;
	}
	b2b = calloc(b2b_steps ? b2b_steps : 1, sizeof(*b2b));
	for (size_t i = 0; i < steps; i++) {
		/* The step this call will claim (with --full, the last step the ring can
		 * hold beside the slot still held, so that the producers are idle), and its
		 * slot's READY word. */
		const uint32_t K = o.slots_per_rank;
		const uint64_t w = full && K >= 2 ? i + K - 2 : i;
		struct sf_slot *s = sf__arena_slot(f->arena, 0, (uint32_t)(w % K));
		uint64_t ready = sf__slot_word(SF_SLOT_READY, 0, w / K), t0;

		while (atomic_load_explicit(&s->word, memory_order_acquire) != ready) {
			/* The ring refills only once woken: a consumer leaves a well-stocked
			 * ring to the producers' own rescan (every 100 ms). */
			if (full)
				sf__producers_wake(f->arena);
			/* Pinned, the wait spins as a training step computes: a caller that
			 * slept measures its CPU waking up (cold caches, a halted vCPU). */
			if (!pin)
				usleep(5);
		}
		if (evict)
			memset(evict_buf, (int)i, evict);
		t0 = sf__now_ns();
		if (sf_consumer_next(c, -1, &b) < 0) {
			fprintf(stderr, "bench_consumer: %s\n", sf_consumer_errmsg(c));
			return 1;
		}
		ahead[i] = sf__now_ns() - t0;
	}
	t_b2b = sf__now_ns();
	for (size_t i = 0; i < b2b_steps; i++) {
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
	qsort(b2b, b2b_steps, sizeof(*b2b), cmp_u64);
	if (json) {
		printf("{\"steps\": %zu, \"batch\": %u, \"seq_len\": %u, \"ahead_p50_ns\": %llu, "
		       "\"ahead_p95_ns\": %llu, \"ahead_p99_ns\": %llu, \"ahead_p999_ns\": %llu, "
		       "\"b2b_p50_ns\": %llu, \"b2b_p99_ns\": %llu, \"b2b_batches_per_s\": %.0f}\n",
		       steps, o.batch, o.seq_len, (unsigned long long)pct(ahead, steps, 50),
		       (unsigned long long)pct(ahead, steps, 95),
		       (unsigned long long)pct(ahead, steps, 99),
		       (unsigned long long)pct(ahead, steps, 99.9),
		       (unsigned long long)(b2b_steps ? pct(b2b, b2b_steps, 50) : 0),
		       (unsigned long long)(b2b_steps ? pct(b2b, b2b_steps, 99) : 0),
		       (double)b2b_steps / ((double)t_b2b * 1e-9));
	} else {
		printf("sf_consumer_next(), B=%u T=%u uint16, %zu calls, %u producer(s), %s\n",
		       o.batch, o.seq_len, steps, o.producers,
		       o.token_file ? o.token_file : "synthetic tokens");
		printf("  producers ahead: p50 %6.2f us  p99 %6.2f us  p99.9 %6.2f us\n",
		       pct(ahead, steps, 50) / 1e3, pct(ahead, steps, 99) / 1e3,
		       pct(ahead, steps, 99.9) / 1e3);
		if (b2b_steps)
			printf("  back-to-back:    p50 %6.2f us  p99 %6.2f us  %.0f batches/s\n",
			       pct(b2b, b2b_steps, 50) / 1e3, pct(b2b, b2b_steps, 99) / 1e3,
			       (double)b2b_steps / ((double)t_b2b * 1e-9));
	}
	free(ahead);
	free(b2b);
	free(evict_buf);
	return 0;
}
