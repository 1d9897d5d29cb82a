/*
 * Start-up cost of a raw text job: the dataset opened (the launcher's work: sources, index
 * built or loaded) and the first batch built, in one process, with its time, CPU and
 * memory. Run it twice over the same corpus and cache directory for a cold and a warm
 * start (bench/warm_start.sh does, for 10 MB, 1 GB and 10 GB of JSONL).
 *
 *   bench_warm_start CORPUS ENCODING PRODUCERS [VOCAB_DIR]
 *
 * prints one line: open_s, first_batch_s (from before the open to the first batch),
 * cpu_s (user + system of this process and its index workers), rss_open_kib (resident
 * after the open), rss_batch_kib (after the first batch), hwm_kib (peak), index_loaded,
 * index_bytes, chunks, files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "shmfeed/shmfeed.h"
#include "common/config.h"
#include "producer/producer.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A field of /proc/self/status in KiB. */
static unsigned long status_kib(const char *field)
{
	char line[256];
	unsigned long v = 0;
	size_t n = strlen(field);
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = strtoul(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

static double cpu_s(void)
{
	struct rusage self, kids;

	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
			kids.ru_stime.tv_sec) +
	       (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec +
			kids.ru_stime.tv_usec) /
		       1e6;
}

int main(int argc, char **argv)
{
	static char *paths[1];
	static struct sf_source_config src;
	struct sf_config cfg;
	struct sf_dataset *ds = NULL;
	struct sf_builder *b = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	unsigned long rss_open;
	uint64_t first;
	uint32_t len;
	double t0, t1, t2;
	void *payload;

	if (argc < 4) {
		fprintf(stderr, "usage: %s CORPUS ENCODING PRODUCERS [VOCAB_DIR]\n", argv[0]);
		return 2;
	}
	sf__config_defaults(&cfg);
	paths[0] = argv[1];
	src.paths = paths;
	src.n_paths = 1;
	cfg.sources = &src;
	cfg.n_sources = 1;
	cfg.encoding = argv[2];
	cfg.producers = (uint32_t)strtoul(argv[3], NULL, 10);
	if (argc > 4)
		cfg.vocab_dir = argv[4];
	cfg.batch_size = 8;
	cfg.seq_len = 1024;
	cfg.world_size = 1;
	cfg.local_ranks = 1;

	t0 = now_s();
	if (sf__dataset_open(&cfg, &ds, &e) < 0) {
		fprintf(stderr, "bench_warm_start: %s\n", e.msg);
		return 1;
	}
	t1 = now_s();
	rss_open = status_kib("VmRSS");
	if (sf__builder_create(ds, &b, &e) < 0 ||
	    !(payload = malloc(sf__dataset_payload_bytes(ds))) ||
	    sf__builder_fill(b, 0, 0, payload, &len, &first, &e) < 0) {
		fprintf(stderr, "bench_warm_start: %s\n", e.msg);
		return 1;
	}
	t2 = now_s();
	sf__dataset_stats(ds, &st);
	printf("open_s=%.4f first_batch_s=%.4f cpu_s=%.3f rss_open_kib=%lu rss_batch_kib=%lu "
	       "hwm_kib=%lu index_loaded=%u index_bytes=%llu chunks=%llu files=%llu\n",
	       t1 - t0, t2 - t0, cpu_s(), rss_open, status_kib("VmRSS"), status_kib("VmHWM"),
	       st.index_loaded, (unsigned long long)st.index_bytes,
	       (unsigned long long)st.n_chunks, (unsigned long long)st.n_files);
	sf__builder_free(b);
	sf__dataset_close(ds);
	free(payload);
	return 0;
}
