/*
 * Files are a resource: a corpus of many small JSONL files opens, runs and resumes with a
 * bounded number of mappings and descriptors, whatever the file count.
 *
 *   test_producer_many_files FILES NOFILE [PIPELINE_STEPS]
 *
 * writes FILES small JSONL files into one directory, lowers RLIMIT_NOFILE to NOFILE (so
 * the per-process cache of mapped files holds NOFILE / 2), and checks, counting from
 * /proc/self/maps and /proc/self/fd:
 * - `check` (sf__dataset_check()) and the cold open leave no source mapped and no
 *   descriptor open, and write one index for the directory;
 * - building every batch of an epoch never has more source files mapped than the cache
 *   holds, nor more descriptors open than before;
 * - `tokenize` (sf__dataset_write_megatron(), one worker: in this process) keeps the same
 *   bound;
 * - the warm open reads the index (no file is cut again) and gives the same batches;
 * - 2,000 pre-tokenized (nanoGPT) files keep the same bound in `check`, open and batches.
 * With PIPELINE_STEPS, also the whole pipeline (2 producer processes) runs that many steps
 * and a run resumed half-way gives the same batches. The default suite runs 5,000 files;
 * the stress suite 1,000,000 (TMPDIR=/dev/shm makes creating and unlinking them fast).
 * The directory is removed at exit, also after a failure.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "producer/producer.h"
#include "tests/producer/harness.h"

static char *tmp;
static pid_t owner;

static void cleanup(void)
{
	if (tmp && getpid() == owner)
		h_rmtree(tmp);
}

/*
 * A fresh directory under $TMPDIR (default /tmp: h_tmpdir()), DIR/cache the index cache:
 * a million files are created and unlinked far faster on a tmpfs than on a busy disk.
 */
static char *many_files_dir(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096], cache[4200];

	if (!base || !base[0])
		return h_tmpdir();
	snprintf(tmpl, sizeof(tmpl), "%s/sf-prodtest-XXXXXX", base);
	H_CHECK(mkdtemp(tmpl), "mkdtemp %s: %s", tmpl, strerror(errno));
	snprintf(cache, sizeof(cache), "%s/cache", tmpl);
	H_CHECK(setenv("SHMFEED_CACHE_DIR", cache, 1) == 0, "setenv");
	return strdup(tmpl);
}

/* Killed by a timeout (meson sends SIGTERM): the million files go too. */
static void on_term(int sig)
{
	(void)sig;
	cleanup();
	_exit(1);
}

/* Mappings of files under `dir` in this process. */
static unsigned maps_under(const char *dir)
{
	char line[8192];
	unsigned n = 0;
	FILE *f = fopen("/proc/self/maps", "re");

	H_CHECK(f, "/proc/self/maps: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strstr(line, dir))
			n++;
	fclose(f);
	return n;
}

/* Open descriptors of this process (the listing's own excluded). */
static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	H_CHECK(d, "/proc/self/fd: %s", strerror(errno));
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the listing's descriptor */
}

/* FILES files of 1-4 short documents each, one directory. */
static void write_corpus(const char *dir, unsigned long n_files)
{
	char path[4300];

	for (unsigned long i = 0; i < n_files; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/f%07lu.jsonl", dir, i);
		f = fopen(path, "we");
		H_CHECK(f, "%s: %s", path, strerror(errno));
		for (unsigned long d = 0; d < 1 + i % 4; d++)
			fprintf(f, "{\"text\": \"file %lu document %lu: %.*s\"}\n", i, d,
				(int)(20 + (i * 7 + d * 13) % 60),
				"the quick brown fox jumps over the lazy dog and then some more "
				"words follow here");
		H_CHECK(fclose(f) == 0, "%s", path);
	}
}

/* Shared memory resident in this process (the shared chunk tables), in KiB. */
static unsigned long shmem_kib(void)
{
	char line[256];
	unsigned long v = 0;
	FILE *f = fopen("/proc/self/status", "re");

	H_CHECK(f, "/proc/self/status: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "RssShmem:", 9))
			v = strtoul(line + 9, NULL, 10);
	fclose(f);
	return v;
}

static unsigned count_index_files(const char *cache)
{
	char dir[4200];
	struct dirent *de;
	unsigned n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/index", cache);
	d = opendir(dir);
	H_CHECK(d, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".sfidx") != NULL;
	closedir(d);
	return n;
}

/* Every batch of rank 0 of an epoch, its hash in hashes[step]; the most source files
 * mapped and descriptors open seen after any batch. */
static void build_epoch(struct sf_dataset *ds, const char *dir, uint64_t *hashes, uint64_t steps,
			unsigned *ret_maps, unsigned *ret_fds)
{
	struct sf_builder *b = NULL;
	struct sf_err e = {0};
	void *payload = malloc(sf__dataset_payload_bytes(ds));
	unsigned most_maps = 0, most_fds = 0;

	H_CHECK(payload, "malloc");
	H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
	for (uint64_t s = 0; s < steps; s++) {
		uint32_t len;
		uint64_t first;
		unsigned m, f;

		H_CHECK(sf__builder_fill(b, 0, s, payload, &len, &first, &e) == 0, "step %llu: %s",
			(unsigned long long)s, e.msg);
		hashes[s] = XXH3_64bits(payload, len);
		if (s % 16 == 0 || s + 1 == steps) {
			m = maps_under(dir);
			f = open_fds();
			most_maps = m > most_maps ? m : most_maps;
			most_fds = f > most_fds ? f : most_fds;
		}
	}
	sf__builder_free(b);
	free(payload);
	*ret_maps = most_maps;
	*ret_fds = most_fds;
}

int main(int argc, char **argv)
{
	unsigned long n_files = argc > 1 ? strtoul(argv[1], NULL, 10) : 5000;
	rlim_t nofile = argc > 2 ? strtoul(argv[2], NULL, 10) : 64;
	uint64_t pipeline_steps = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
	char corpus[4200], cache[4200], prefix[4300];
	struct rlimit rl;
	struct sf_config cfg;
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	uint32_t width;
	uint64_t steps, *cold, *warm;
	unsigned fds0, most_maps, most_fds;
	const unsigned cap = (unsigned)(nofile / 2);

	owner = getpid();
	tmp = many_files_dir();
	H_CHECK(atexit(cleanup) == 0, "atexit");
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	snprintf(corpus, sizeof(corpus), "%s/corpus", tmp);
	snprintf(cache, sizeof(cache), "%s/cache", tmp);
	H_CHECK(mkdir(corpus, 0700) == 0, "mkdir");
	write_corpus(corpus, n_files);

	H_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
	H_CHECK(rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= nofile, "the limit is already %llu",
		(unsigned long long)rl.rlim_cur);
	rl.rlim_cur = nofile;
	H_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
	fds0 = open_fds();

	h_config(&cfg, corpus, 4, 64, 1);
	cfg.encoding = "bytes";
	cfg.epochs = 1;
	cfg.producers = 2;

	/* `check` opens every file and maps none. */
	H_CHECK(sf__dataset_check(&cfg, &width, &e) == 0, "check: %s", e.msg);
	H_CHECK(maps_under(corpus) == 0 && open_fds() == fds0, "check left %u maps, %u fds",
		maps_under(corpus), open_fds() - fds0);

	/* Cold: every file cut and counted; nothing left mapped; one index. */
	H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "cold open: %s", e.msg);
	sf__dataset_stats(ds, &st);
	H_CHECK(st.n_files == n_files && st.index_loaded == 0, "%llu files, loaded %u",
		(unsigned long long)st.n_files, st.index_loaded);
	H_CHECK(maps_under(corpus) == 0, "the launcher keeps %u files mapped", maps_under(corpus));
	H_CHECK(open_fds() == fds0, "%u descriptors more after the open", open_fds() - fds0);
	H_CHECK(count_index_files(cache) == 1, "%u index files for one directory",
		count_index_files(cache));
	steps = st.n_steps;
	cold = calloc(steps + 1, sizeof(*cold));
	warm = calloc(steps + 1, sizeof(*warm));
	H_CHECK(cold && warm, "calloc");
	build_epoch(ds, corpus, cold, steps, &most_maps, &most_fds);
	H_CHECK(most_maps > 0 && most_maps <= cap,
		"%u source files mapped at once, the cache holds %u", most_maps, cap);
	H_CHECK(most_fds == fds0, "%u descriptors more while building", most_fds - fds0);
	/* The shared chunk cache and the table of chunk heads hold at most 1 GiB each,
	 * however many chunks (before: a 4 KiB head per chunk, 4 GB for a million files). */
	H_CHECK(shmem_kib() <= 2 * 1024 * 1024 + 4096, "%lu KiB of shared tables", shmem_kib());
	printf("ok: %lu files, RLIMIT_NOFILE %llu: at most %u of %u files mapped, no descriptor "
	       "kept, over %llu batches\n",
	       n_files, (unsigned long long)nofile, most_maps, cap, (unsigned long long)steps);

	/* `tokenize` in this process (one worker): the same bound. */
	snprintf(prefix, sizeof(prefix), "%s/out", tmp);
	H_CHECK(sf__dataset_write_megatron(ds, prefix, 1, NULL, NULL, &e) == 0, "tokenize: %s",
		e.msg);
	H_CHECK(maps_under(corpus) <= cap && open_fds() == fds0,
		"tokenize: %u files mapped (cache %u), %u descriptors more", maps_under(corpus),
		cap, open_fds() - fds0);
	sf__dataset_close(ds);
	H_CHECK(maps_under(corpus) == 0, "%u maps after close", maps_under(corpus));

	/* Warm: the index read, nothing cut, the same batches. */
	H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "warm open: %s", e.msg);
	sf__dataset_stats(ds, &st);
	H_CHECK(st.index_loaded == 1 && st.index_build_ns == 0 && st.n_steps == steps,
		"warm: loaded %u, %llu steps", st.index_loaded, (unsigned long long)st.n_steps);
	H_CHECK(maps_under(corpus) == 0, "the warm open maps %u files", maps_under(corpus));
	build_epoch(ds, corpus, warm, steps, &most_maps, &most_fds);
	H_CHECK(!memcmp(cold, warm, steps * sizeof(*cold)), "warm batches differ from cold");
	sf__dataset_close(ds);
	printf("ok: the warm open reads one index, maps nothing, and gives the same %llu "
	       "batches\n",
	       (unsigned long long)steps);

	if (pipeline_steps) {
		struct h_run full, resumed;
		uint64_t half = pipeline_steps / 2;

		if (pipeline_steps > steps)
			pipeline_steps = steps;
		H_CHECK(h_pipeline(&cfg, 2, 0, pipeline_steps, &full) == 0, "pipeline");
		H_CHECK(h_pipeline(&cfg, 2, half, pipeline_steps - half, &resumed) == 0,
			"resumed pipeline");
		for (uint64_t s = half; s < pipeline_steps; s++)
			H_CHECK(full.hash[s] == resumed.hash[s - half] && full.hash[s] != 0,
				"step %llu differs after the resume", (unsigned long long)s);
		h_run_free(&full);
		h_run_free(&resumed);
		printf("ok: 2 producers ran %llu steps; resumed at step %llu, the same batches\n",
		       (unsigned long long)pipeline_steps, (unsigned long long)half);
	}
	/* Pre-tokenized files: the same bound, from `check` to the last batch (last: h_config()
	 * shares one source between configurations). */
	{
		char tokens[4200], file[4300];
		unsigned long n_tok = n_files < 2000 ? n_files : 2000;
		uint16_t ids[300];
		struct sf_config tcfg;

		snprintf(tokens, sizeof(tokens), "%s/tokens", tmp);
		H_CHECK(mkdir(tokens, 0700) == 0, "mkdir");
		for (unsigned long i = 0; i < n_tok; i++) {
			for (size_t k = 0; k < 300; k++)
				ids[k] = (uint16_t)((i * 131 + k * 7) % 50000);
			snprintf(file, sizeof(file), "%s/t%07lu.bin", tokens, i);
			h_write_nanogpt(file, ids, 100 + i % 200);
		}
		h_config(&tcfg, tokens, 4, 64, 1);
		tcfg.epochs = 1;
		H_CHECK(sf__dataset_check(&tcfg, &width, &e) == 0, "check: %s", e.msg);
		H_CHECK(maps_under(tokens) == 0 && open_fds() == fds0, "check left %u maps, %u fds",
			maps_under(tokens), open_fds() - fds0);
		H_CHECK(sf__dataset_open(&tcfg, &ds, &e) == 0, "token open: %s", e.msg);
		H_CHECK(maps_under(tokens) == 0, "the open keeps %u token files mapped",
			maps_under(tokens));
		sf__dataset_stats(ds, &st);
		free(cold);
		cold = calloc(st.n_steps + 1, sizeof(*cold));
		H_CHECK(cold, "calloc");
		build_epoch(ds, tokens, cold, st.n_steps, &most_maps, &most_fds);
		H_CHECK(most_maps > 0 && most_maps <= cap,
			"%u token files mapped at once, the cache holds %u", most_maps, cap);
		H_CHECK(most_fds == fds0, "%u descriptors more while building", most_fds - fds0);
		sf__dataset_close(ds);
		printf("ok: %lu token files: at most %u of %u mapped, no descriptor kept, over "
		       "%llu batches\n",
		       n_tok, most_maps, cap, (unsigned long long)st.n_steps);
	}

	free(cold);
	free(warm);
	return 0;
}
