/*
 * bench_node: per-rank tail latency of a node's ranks, with the processes placed as on a
 * GPU node or left to the scheduler. The test feed serves R ranks (default 8) of B x
 * (T+1) uint16 tokens (default 8 x 1025, random windows of --tokens) with P producers;
 * R forked ranks each attach and take --steps batches, a simulated training step of
 * --step-us between calls: a sleep by default (a GPU rank mostly waits for its device),
 * or busy CPU work with --busy. Each rank records, per call, the time next() waited for
 * data (sf_batch.wait_ns) and the whole call, and reports their p50 and p99.
 *
 * Placement (--layout):
 *   shared  no affinity: producers and ranks go where the scheduler puts them;
 *   node    producers on --producer-cpus (default: the last allowed CPU), ranks spread
 *           round-robin over the other allowed CPUs (all of them when none is left), as
 *           a node gives its data pipeline dedicated cores next to the training
 *           processes. shmfeed run does the same for producers with producers.cpus.
 * Prints one line per rank and the worst, or one JSON object with --json.
 *
 * usage: bench_node --tokens FILE [--ranks R] [--producers P] [--batch B] [--seq-len T]
 *                   [--slots K] [--steps N] [--step-us US] [--busy]
 *                   [--layout shared|node] [--producer-cpus LIST] [--json]
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/cpus.h"
#include "common/proc.h"
#include "bench/bench_feed.h"
#include "bench/percentiles.h"

struct rank_result {
	int ok;
	int cpu; /* pinned CPU, or -1 */
	uint64_t wait_p50, wait_p99, call_p50, call_p99, wait_max;
};

static void step(unsigned us, int busy)
{
	if (busy) {
		uint64_t end = sf__now_ns() + us * 1000ull;

		while (sf__now_ns() < end)
			;
	} else if (us) {
		struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};

		nanosleep(&ts, NULL);
	}
}

static int run_rank(const char *job, int rank, int cpu, size_t steps, unsigned step_us, int busy,
		    int fd)
{
	struct rank_result res = {.cpu = cpu};
	uint64_t *wait = calloc(steps, sizeof(*wait)), *call = calloc(steps, sizeof(*call));
	struct sf_consumer *c;
	struct sf_batch b;
	char msg[256];

	if (cpu >= 0) {
		cpu_set_t one;

		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		sched_setaffinity(0, sizeof(one), &one);
	}
	if (!wait || !call ||
	    sf_consumer_attach(job, rank, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "bench_node: rank %d: %s\n", rank,
			wait && call ? msg : "no memory");
		return 1;
	}
	for (size_t i = 0; i < steps; i++) {
		uint64_t t0 = sf__now_ns();

		if (sf_consumer_next(c, 60000, &b) < 0) {
			fprintf(stderr, "bench_node: rank %d: %s\n", rank, sf_consumer_errmsg(c));
			return 1;
		}
		call[i] = sf__now_ns() - t0;
		wait[i] = b.wait_ns;
		step(step_us, busy);
	}
	sf_consumer_detach(c);
	qsort(wait, steps, sizeof(*wait), cmp_u64);
	qsort(call, steps, sizeof(*call), cmp_u64);
	res.ok = 1;
	res.wait_p50 = pct(wait, steps, 50);
	res.wait_p99 = pct(wait, steps, 99);
	res.wait_max = wait[steps - 1];
	res.call_p50 = pct(call, steps, 50);
	res.call_p99 = pct(call, steps, 99);
	return write(fd, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct feed_options o = {.ranks = 8,
				 .batch = 8,
				 .seq_len = 1024,
				 .slots_per_rank = 4,
				 .producers = 1,
				 .token_bytes = 2,
				 .checksum = 1,
				 .seed = 1};
	const char *layout = "shared", *pcpus = NULL;
	size_t steps = 2000;
	unsigned step_us = 1000;
	int busy = 0, json = 0, fds[2], failed = 0, ncpu = 0, cpus[CPU_SETSIZE];
	cpu_set_t allowed, prod;
	struct rank_result res[256];
	pid_t pids[256];
	struct feed *f;
	char job[64], msg[400], plist[256] = "", rlist[256] = "";

	for (int i = 1; i < argc; i++) {
		if (bench_feed_arg(&o, argc, argv, &i))
			continue;
		if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
			o.ranks = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--step-us") && i + 1 < argc)
			step_us = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--busy"))
			busy = 1;
		else if (!strcmp(argv[i], "--layout") && i + 1 < argc)
			layout = argv[++i];
		else if (!strcmp(argv[i], "--producer-cpus") && i + 1 < argc)
			pcpus = argv[++i];
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else {
			fprintf(stderr,
				"usage: bench_node --tokens FILE [--ranks R] [--producers P] "
				"[--batch B] [--seq-len T] [--slots K] [--steps N] [--step-us US] "
				"[--busy] [--layout shared|node] [--producer-cpus LIST] "
				"[--json]\n");
			return 2;
		}
	}
	if (!o.ranks || o.ranks > 256 || !steps ||
	    (strcmp(layout, "shared") && strcmp(layout, "node"))) {
		fprintf(stderr, "bench_node: 1..256 ranks, steps > 0, layout shared or node\n");
		return 2;
	}
	sched_getaffinity(0, sizeof(allowed), &allowed);
	CPU_ZERO(&prod);
	if (!strcmp(layout, "node")) {
		if (pcpus) {
			if (sf__cpu_list_allowed(pcpus, &prod, msg, sizeof(msg)) < 0) {
				fprintf(stderr, "bench_node: --producer-cpus: %s\n", msg);
				return 2;
			}
		} else {
			for (int c = CPU_SETSIZE - 1; c >= 0; c--)
				if (CPU_ISSET(c, &allowed)) {
					CPU_SET(c, &prod);
					break;
				}
		}
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &prod))
				cpus[ncpu++] = c;
		if (!ncpu)
			for (int c = 0; c < CPU_SETSIZE; c++)
				if (CPU_ISSET(c, &allowed))
					cpus[ncpu++] = c;
		sf__cpu_list_format(&prod, plist, sizeof(plist));
		{
			cpu_set_t r;

			CPU_ZERO(&r);
			for (int i = 0; i < ncpu; i++)
				CPU_SET(cpus[i], &r);
			sf__cpu_list_format(&r, rlist, sizeof(rlist));
		}
	}
	if (bench_feed_start(&o, "bench_node", "bench-node", job, sizeof(job), &f) < 0)
		return 1;
	if (ncpu)
		for (uint32_t p = 0; p < o.producers; p++)
			sched_setaffinity(f->pids[p], sizeof(prod), &prod);
	if (pipe(fds) < 0) {
		perror("pipe");
		feed_stop(f);
		return 1;
	}
	for (uint32_t r = 0; r < o.ranks; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			close(fds[0]);
			_exit(run_rank(job, (int)r, ncpu ? cpus[r % (uint32_t)ncpu] : -1, steps,
				       step_us, busy, fds[1]));
		}
	}
	close(fds[1]);
	for (uint32_t r = 0; r < o.ranks; r++)
		if (read(fds[0], &res[r], sizeof(res[r])) != (ssize_t)sizeof(res[r]) || !res[r].ok)
			failed = 1;
	for (uint32_t r = 0; r < o.ranks; r++)
		waitpid(pids[r], NULL, 0);
	feed_stop(f);
	if (failed)
		return 1;
	{
		uint64_t worst_w99 = 0, worst_c99 = 0, worst_w50 = 0;

		for (uint32_t r = 0; r < o.ranks; r++) {
			worst_w99 = res[r].wait_p99 > worst_w99 ? res[r].wait_p99 : worst_w99;
			worst_w50 = res[r].wait_p50 > worst_w50 ? res[r].wait_p50 : worst_w50;
			worst_c99 = res[r].call_p99 > worst_c99 ? res[r].call_p99 : worst_c99;
		}
		if (json) {
			printf("{\"layout\": \"%s\", \"producer_cpus\": \"%s\", \"rank_cpus\": "
			       "\"%s\", \"ranks\": %u, \"producers\": %u, \"batch\": %u, "
			       "\"seq_len\": "
			       "%u, \"steps\": %zu, \"step_us\": %u, \"busy\": %d, "
			       "\"worst_wait_p50_us\": %.2f, \"worst_wait_p99_us\": %.2f, "
			       "\"worst_call_p99_us\": %.2f, \"wait_p99_us\": [",
			       layout, plist, rlist, o.ranks, o.producers, o.batch, o.seq_len,
			       steps, step_us, busy, worst_w50 / 1e3, worst_w99 / 1e3,
			       worst_c99 / 1e3);
			for (uint32_t r = 0; r < o.ranks; r++)
				printf("%s%.2f", r ? ", " : "", res[r].wait_p99 / 1e3);
			printf("]}\n");
		} else {
			printf("layout %s (producers on %s, ranks on %s): %u ranks, %u producer%s, "
			       "B=%u T=%u, %zu steps of %u us %s\n",
			       layout, ncpu ? plist : "any CPU", ncpu ? rlist : "any CPU", o.ranks,
			       o.producers, o.producers == 1 ? "" : "s", o.batch, o.seq_len, steps,
			       step_us, busy ? "busy" : "sleep");
			for (uint32_t r = 0; r < o.ranks; r++)
				printf("  rank %u: wait p50 %8.2f us  p99 %8.2f us  max %9.2f us   "
				       "next() p50 %7.2f us  p99 %8.2f us\n",
				       r, res[r].wait_p50 / 1e3, res[r].wait_p99 / 1e3,
				       res[r].wait_max / 1e3, res[r].call_p50 / 1e3,
				       res[r].call_p99 / 1e3);
			printf("  worst rank: wait p50 %.2f us, p99 %.2f us; next() p99 %.2f us\n",
			       worst_w50 / 1e3, worst_w99 / 1e3, worst_c99 / 1e3);
		}
	}
	return 0;
}
