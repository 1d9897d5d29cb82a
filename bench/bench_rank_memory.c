/*
 * bench_rank_memory: the resident memory of each rank of a node, in C so that nothing
 * but shmfeed's own mapping shows: the test feed creates an arena of R ranks (default
 * 8) x K slots (default 8) of B x (T+1) uint16 tokens (default 8 x 1,048,576: 16 MiB a
 * slot, 128 MiB a rank), its producers fill it from a token file, and R forked ranks
 * each attach with sf_consumer_attach(), take --batches batches (zero-copy, reading
 * nothing), and report VmRSS, RssShmem and RssAnon from /proc/self/status. Prints one
 * line per rank and the sums, or one JSON object with --json.
 *
 * usage: bench_rank_memory --tokens FILE [--ranks R] [--slots K] [--batch B]
 *                          [--seq-len T] [--producers P] [--batches N] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "bench/bench_feed.h"

struct rank_memory {
	int ok;
	unsigned long long rss_kib, shmem_kib, anon_kib;
};

static void read_status(struct rank_memory *m)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %llu kB", &m->rss_kib);
		sscanf(line, "RssShmem: %llu kB", &m->shmem_kib);
		sscanf(line, "RssAnon: %llu kB", &m->anon_kib);
	}
	if (f)
		fclose(f);
}

/* A rank: attach, take `batches` batches, report through `fd`, wait for the parent to
 * read every rank (the other end of `hold` closes), detach. */
static int run_rank(const char *job, int rank, unsigned batches, int fd, int hold)
{
	struct rank_memory m = {0};
	struct sf_consumer *c;
	struct sf_batch b;
	char msg[256], byte;

	if (sf_consumer_attach(job, rank, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "bench_rank_memory: rank %d: %s\n", rank, msg);
		return 1;
	}
	for (unsigned i = 0; i < batches; i++)
		if (sf_consumer_next(c, 600000, &b) < 0) {
			fprintf(stderr, "bench_rank_memory: rank %d: %s\n", rank,
				sf_consumer_errmsg(c));
			return 1;
		}
	read_status(&m);
	m.ok = 1;
	if (write(fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		return 1;
	if (read(hold, &byte, 1) < 0)
		return 1;
	sf_consumer_detach(c);
	return 0;
}

int main(int argc, char **argv)
{
	struct feed_options o = {.ranks = 8,
				 .batch = 8,
				 .seq_len = 1048575,
				 .slots_per_rank = 8,
				 .producers = 2,
				 .token_bytes = 2,
				 .checksum = 0,
				 .seed = 1};
	unsigned batches = 3;
	int json = 0, report[2], hold[2], failed = 0;
	struct rank_memory m[1024], sum = {0};
	struct feed *f;
	char job[64];
	pid_t pids[1024];

	for (int i = 1; i < argc; i++) {
		if (bench_feed_arg(&o, argc, argv, &i))
			continue;
		if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
			o.ranks = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
			batches = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else {
			fprintf(stderr, "usage: bench_rank_memory --tokens FILE [--ranks R] "
					"[--slots K] [--batch B] [--seq-len T] [--producers P] "
					"[--batches N] [--json]\n");
			return 2;
		}
	}
	if (!o.ranks || o.ranks > 1024) {
		fprintf(stderr, "bench_rank_memory: 1..1024 ranks\n");
		return 2;
	}
	if (bench_feed_start(&o, "bench_rank_memory", "bench-rankmem", job, sizeof(job), &f) < 0)
		return 1;
	if (pipe(report) < 0 || pipe(hold) < 0) {
		perror("pipe");
		feed_stop(f);
		return 1;
	}
	for (uint32_t r = 0; r < o.ranks; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			close(report[0]);
			close(hold[1]);
			_exit(run_rank(job, (int)r, batches, report[1], hold[0]));
		}
	}
	close(report[1]);
	close(hold[0]);
	/* Reports come in any order; each rank's own numbers are what matter. */
	for (uint32_t r = 0; r < o.ranks; r++) {
		if (read(report[0], &m[r], sizeof(m[r])) != (ssize_t)sizeof(m[r]) || !m[r].ok) {
			failed = 1;
			break;
		}
		sum.rss_kib += m[r].rss_kib;
		sum.shmem_kib += m[r].shmem_kib;
		sum.anon_kib += m[r].anon_kib;
	}
	close(hold[1]);
	for (uint32_t r = 0; r < o.ranks; r++)
		if (pids[r] > 0)
			waitpid(pids[r], NULL, 0);
	if (!failed) {
		const struct sf_arena_header *h = f->arena->hdr;
		double ring_mib = (double)o.slots_per_rank * h->payload_stride / 1048576.0;

		if (json) {
			printf("{\"ranks\": %u, \"arena_mib\": %.1f, \"ring_mib\": %.1f, "
			       "\"rss_kib\": [",
			       o.ranks, h->total_size / 1048576.0, ring_mib);
			for (uint32_t r = 0; r < o.ranks; r++)
				printf("%s%llu", r ? ", " : "", m[r].rss_kib);
			printf("], \"shmem_kib\": [");
			for (uint32_t r = 0; r < o.ranks; r++)
				printf("%s%llu", r ? ", " : "", m[r].shmem_kib);
			printf("], \"sum_rss_kib\": %llu, \"sum_shmem_kib\": %llu}\n", sum.rss_kib,
			       sum.shmem_kib);
		} else {
			printf("arena %.1f MiB: %u ranks x %u slots of %.1f MiB (a ring: %.1f "
			       "MiB)\n",
			       h->total_size / 1048576.0, o.ranks, o.slots_per_rank,
			       h->payload_stride / 1048576.0, ring_mib);
			for (uint32_t r = 0; r < o.ranks; r++)
				printf("  a rank: RSS %8.1f MiB  RssShmem %8.1f MiB  RssAnon %6.1f "
				       "MiB\n",
				       m[r].rss_kib / 1024.0, m[r].shmem_kib / 1024.0,
				       m[r].anon_kib / 1024.0);
			printf("  sum:    RSS %8.1f MiB  RssShmem %8.1f MiB\n",
			       sum.rss_kib / 1024.0, sum.shmem_kib / 1024.0);
		}
	}
	feed_stop(f);
	return failed;
}
