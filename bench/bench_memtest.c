/*
 * bench_memtest: the seed's pool-versus-malloc comparison (SEEDS.md, "memtest")
 * reproduced on the arena, so its table can be read beside ours.
 *
 * One operation hands one batch from a producer to a consumer and back with a live set
 * of L batches per size class, on one thread (as the seed measured): the arena claims a FREE slot,
 * writes the batch, publishes it, and the consumer side claims and releases the batch
 * from L steps earlier; malloc allocates a buffer, writes it, and frees the buffer of the
 * same class from L steps earlier (the same live set: up to 4 x L buffers when routed). Shapes:
 *   fixed  - every batch has one size;
 *   routed - sizes drawn from four classes; the arena routes each to its class's arena
 *            (one arena per class, each with exactly L slots: capacity right-sized to the
 *            live set, unlike the seed's 160,000 blocks for ~1,050 live).
 * Each configuration runs in a fresh process so peak RSS (VmHWM, which counts the shared
 * memory pages the process touched) is its own. The arena runs twice: with payload
 * pages pre-touched before timing, and without.
 *
 * Usage: bench_memtest [-n OPERATIONS] [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/proc.h"
#include "common/slot.h"

#define LIVE	8
#define CLASSES 4

static const uint32_t class_bytes[CLASSES] = {256, 2048, 16384, 131072};
static const uint32_t fixed_bytes = 2048;

struct result {
	double mops, p50, p99, p999, peak_rss_mib, shm_mib;
};

static struct result *res; /* shared with the child that measured */
static uint64_t *lat;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double peak_rss_mib(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	double kib = 0;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = atof(line + 6);
	if (f)
		fclose(f);
	return kib / 1024;
}

/* The size of operation i: a fixed size, or a class drawn by a cheap hash of i. */
static uint32_t class_of(uint64_t i, int routed)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;

	return routed ? (uint32_t)((x >> 61) & (CLASSES - 1)) : 0;
}

static void finish(size_t n, uint64_t elapsed, double shm_mib)
{
	qsort(lat, n, sizeof(*lat), cmp_u64);
	res->mops = n / (elapsed / 1e9) / 1e6;
	res->p50 = (double)lat[n / 2];
	res->p99 = (double)lat[(size_t)(n * 0.99)];
	res->p999 = (double)lat[(size_t)(n * 0.999)];
	res->peak_rss_mib = peak_rss_mib();
	res->shm_mib = shm_mib;
}

/* The same live set as the arena's: LIVE batches per class (one class unless routed),
 * each freed LIVE steps of its class later. */
static void run_malloc(size_t n, int routed)
{
	void *live[CLASSES][LIVE] = {{0}};
	uint64_t next[CLASSES] = {0}; /* next step per class */
	uint64_t t0 = sf__now_ns();

	for (size_t i = 0; i < n; i++) {
		uint64_t t = sf__now_ns();
		uint32_t c = class_of(i, routed);
		uint32_t size = routed ? class_bytes[c] : fixed_bytes;
		void **slot = &live[c][next[c]++ % LIVE];
		void *p;

		free(*slot);
		p = malloc(size);
		memset(p, (int)i, size);
		*slot = p;
		lat[i] = sf__now_ns() - t;
	}
	finish(n, sf__now_ns() - t0, 0);
	for (int c = 0; c < CLASSES; c++)
		for (int i = 0; i < LIVE; i++)
			free(live[c][i]);
}

static void run_arena(size_t n, int routed, int pretouch)
{
	struct sf_arena *a[CLASSES];
	uint64_t next[CLASSES] = {0}; /* next step per class */
	int nclasses = routed ? CLASSES : 1;
	double shm_mib = 0;
	uint64_t t0;

	for (int c = 0; c < nclasses; c++) {
		uint32_t bytes = routed ? class_bytes[c] : fixed_bytes;
		struct sf_geometry g = {.ranks = 1,
					.slots_per_rank = LIVE,
					.max_producers = 1,
					.batch = 1,
					.seq_tokens = bytes / 2,
					.token_bytes = 2,
					.world_size = 1};
		struct sf_err e = {0};
		char job[64];

		snprintf(job, sizeof(job), "bench-memtest-%d-%d", (int)getpid(), c);
		if (sf__arena_create(job, &g, NULL, &a[c], NULL, 0, &e) < 0) {
			fprintf(stderr, "bench_memtest: %s\n", e.msg);
			exit(1);
		}
		sf__arena_set_job_state(a[c], SF_JOB_RUNNING);
		if (pretouch)
			memset(a[c]->payloads, 0, LIVE * a[c]->hdr->payload_stride);
		shm_mib += a[c]->hdr->total_size / 1048576.0;
	}
	t0 = sf__now_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t t = sf__now_ns();
		uint32_t c = class_of(i, routed);
		uint32_t size = routed ? class_bytes[c] : fixed_bytes;
		struct sf_fill f;
		struct sf_slot *s;

		/* Keep LIVE batches in flight: release the one from LIVE steps ago first,
		 * which frees the slot this step needs. */
		if (next[c] >= LIVE && sf__consumer_claim(a[c], 1, 0, next[c] - LIVE, 0, &s) == 0)
			sf__consumer_release(a[c], 0, s);
		sf__producer_claim(a[c], 0, 0, &f);
		memset(f.payload, (int)i, size);
		sf__producer_publish(a[c], 0, &f, size, f.step);
		next[c]++;
		lat[i] = sf__now_ns() - t;
	}
	finish(n, sf__now_ns() - t0, shm_mib);
	for (int c = 0; c < nclasses; c++)
		sf__arena_destroy(a[c]);
}

static void measure(const char *backend, const char *shape, size_t n, int routed, int arena,
		    int pretouch)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (arena)
			run_arena(n, routed, pretouch);
		else
			run_malloc(n, routed);
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	printf("| %-22s | %-6s | %7.2f | %5.0f | %5.0f | %6.0f | %8.1f | %8.2f |\n", backend, shape,
	       res->mops, res->p50, res->p99, res->p999, res->peak_rss_mib, res->shm_mib);
}

int main(int argc, char **argv)
{
	size_t n = 1000000;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			n = 100000;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: bench_memtest [-n OPERATIONS] [--quick]\n");
			return 2;
		}
	}
	res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	lat = malloc(n * sizeof(*lat));
	/* Touch the latency array here so that the children inherit it already resident and
	 * their peak RSS differs only by what each backend touched. */
	memset(lat, 0, n * sizeof(*lat));
	printf("memtest on the arena: %zu operations, live set %d, fixed %u bytes, routed "
	       "classes 256/2048/16384/131072 bytes; latency in ns per operation (includes two "
	       "clock reads)\n\n",
	       n, LIVE, fixed_bytes);
	printf("| %-22s | %-6s | %7s | %5s | %5s | %6s | %8s | %8s |\n", "backend", "shape",
	       "Mops/s", "p50", "p99", "p99.9", "peak RSS", "shm size");
	printf("|------------------------|--------|---------|-------|-------|--------|----------|"
	       "----------|\n");
	measure("malloc/free", "fixed", n, 0, 0, 0);
	measure("malloc/free", "routed", n, 1, 0, 0);
	measure("arena", "fixed", n, 0, 1, 0);
	measure("arena", "routed", n, 1, 1, 0);
	measure("arena, pre-touched", "fixed", n, 0, 1, 1);
	measure("arena, pre-touched", "routed", n, 1, 1, 1);
	printf("\npeak RSS in MiB (VmHWM of the measuring process, with the %zu MiB latency array "
	       "in every row); shm size: arena bytes reserved in /dev/shm, in MiB\n",
	       n * sizeof(*lat) >> 20);
	free(lat);
	return 0;
}
