/*
 * `shmfeed check CONFIG [--set KEY=VALUE ...] [--strict] [--tokens N]`: load and validate a job
 * file, then print the resolved config (every default filled in) as YAML, followed by what each
 * source pattern matches today, the resolved token width and the config digest as comments. The
 * sources are opened and the tokenizer loaded as `run` does before it starts anything
 * (sf__dataset_check()), so the check fails where `run` would: a glob matching nothing, a missing
 * or malformed file or vocabulary, a dtype that cannot hold a source's tokens, ids outside the
 * vocabulary among the first of each token file. --strict is accepted
 * for scripts written when a source matching nothing passed without it; it now always fails. CURVE
 * key files are read as `run` reads them; a plain tcp:// endpoint (control.insecure_tcp) is warned
 * about. With --tokens N (or, for a mixture whose schedule ends, without it) the dataset is opened
 * as `run` opens it and the samples, tokens and epochs each source delivers over that budget are
 * printed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/arena.h"
#include "common/config.h"
#include "common/cpus.h"
#include "common/io.h"
#include "common/log.h"
#include "producer/tokenizer/tokenizer.h"
#include "launcher/launcher.h"
#include "producer/producer.h"
#include "producer/source/paths.h"

/* The bytes of `path`, a regular file, else 0; counts it in *files. */
static unsigned long long file_bytes(const char *path, size_t *files)
{
	struct stat sb;

	if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
		return 0;
	(*files)++;
	return (unsigned long long)sb.st_size;
}

/* The formats of a path's files, as `run` will read them: ", megatron", or ", nanogpt 2,
 * llmc 1" where they differ (format auto goes by each file's name and header). */
static void print_formats(const size_t of_format[SF_FMT_JSONL + 1])
{
	unsigned kinds = 0;

	for (uint32_t f = SF_FMT_NANOGPT; f <= SF_FMT_JSONL; f++)
		kinds += of_format[f] != 0;
	for (uint32_t f = SF_FMT_NANOGPT; f <= SF_FMT_JSONL; f++) {
		if (!of_format[f])
			continue;
		printf(", %s", sf__config_format_name(f));
		if (kinds > 1)
			printf(" %zu", of_format[f]);
	}
	putchar('\n');
}

/*
 * Print what each source path matches, found as the producers will find it
 * (sf__source_expand()): files, or for a Megatron prefix its .bin and .idx.
 */
static void report_sources(const struct sf_config *cfg)
{
	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		const struct sf_source_config *src = &cfg->sources[i];

		for (uint32_t j = 0; j < src->n_paths; j++) {
			unsigned long long bytes = 0;
			struct sf_err e = {0};
			char **paths = NULL;
			size_t n = 0, files = 0, of_format[SF_FMT_JSONL + 1] = {0};

			printf("# source %u: ", i);
			sf__config_write_text(stdout, src->paths[j]);
			if (sf__source_expand_path(src, j, &paths, &n, &e) < 0) {
				printf(": %s\n", e.msg);
				continue;
			}
			for (size_t k = 0; k < n; k++) {
				uint32_t format = src->format;
				size_t had = files;

				if (format != SF_FMT_AUTO ||
				    sf__source_detect_format(paths[k], &format) == 0)
					of_format[format <= SF_FMT_JSONL ? format : 0]++;

				/* A Megatron pair is its .bin and .idx, however named. */
				if (format != SF_FMT_MEGATRON)
					bytes += file_bytes(paths[k], &files);
				if (files == had) {
					char *bin = sf__megatron_file(paths[k], ".bin"),
					     *idx = sf__megatron_file(paths[k], ".idx");

					if (bin && idx) {
						bytes += file_bytes(bin, &files);
						bytes += file_bytes(idx, &files);
					}
					free(bin);
					free(idx);
				}
				free(paths[k]);
			}
			free(paths);
			printf(": %zu file%s, %llu bytes", files, files == 1 ? "" : "s", bytes);
			print_formats(of_format);
		}
	}
}

/* A file that two sources read (sf__sources_shared_files()): warned about, not refused. */
static void warn_shared(uint32_t a, uint32_t b, const char *path, const char *effect)
{
	printf("# warning: sources %u and %u both read ", a, b);
	sf__config_write_text(stdout, path);
	printf(": %s\n", effect);
}

#define USAGE "usage: shmfeed check CONFIG [--set KEY=VALUE ...] [--strict] [--tokens N]\n"

/* A token budget: digits, optionally followed by k, M, G or T (powers of 1000). */
static int parse_tokens(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	uint64_t scale = 1;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	if (*end == 'k')
		scale = 1000;
	else if (*end == 'M')
		scale = 1000000;
	else if (*end == 'G')
		scale = 1000000000;
	else if (*end == 'T')
		scale = 1000000000000ull;
	if (scale > 1)
		end++;
	if (*end || v == 0 || v > UINT64_MAX / scale)
		return -1;
	*ret = v * scale;
	return 0;
}

/* A mixture's bound on |count - weight x samples|, and a warning at 1 or more. */
static void print_bound(const struct sf_dataset *ds)
{
	uint32_t exact;
	double slack;
	const double raw = sf__dataset_mix_bound(ds, &exact, &slack);
	const char *how = exact ? "exact, walked over every prefix" : "proved";
	/* Rounded up, so that the printed bound is never below the true one; with as many
	 * digits past six as a bound below 1 needs to show below 1 (rounded up to six, a
	 * bound of 1 - 10^-8 read 1.000000). */
	int digits = 6;
	double bound = ceil(raw * 1e6) / 1e6;

	while (raw < 1 && bound >= 1 && digits < 15) {
		digits++;
		bound = ceil(raw * pow(10, digits)) / pow(10, digits);
	}
	/* Below 1 by less than fifteen digits show (weights 10^18 apart): said as such, the
	 * slack cut to two digits (never more than it is). */
	if (bound >= 1 && slack > 0) {
		const double unit = pow(10, floor(log10(slack)) - 1);

		printf("# mixture: at every prefix of every phase each source's count is within "
		       "1 - %.2g of weight x samples (%s)\n",
		       floor(slack / unit) * unit, how);
	} else {
		printf("# mixture: at every prefix of every phase each source's count is within "
		       "%.*f of weight x samples (%s)\n",
		       digits, bound, how);
	}
	if (slack <= 0)
		printf("# warning: with these weights a source's count may differ from weight x "
		       "samples by %.6f, not less than 1 (docs/mixtures.md: below 1 for up to 4 "
		       "sources, where a period, or a phase, of at most 2^24 samples fits a "
		       "table of 32 MiB, and where every source but the lightest has at least "
		       "1/2^22 of the weight and a block fits 8 MiB)\n",
		       bound);
}

/*
 * What the job delivers over a budget of `tokens` training tokens (T per sample), or
 * (tokens 0) to the end of its schedule: for a mixture, each source's samples, tokens and
 * epochs; for one stream, its own.
 */
static int report_budget(const struct sf_config *cfg, const struct sf_dataset *ds,
			 uint64_t tokens)
{
	const uint64_t G = (uint64_t)cfg->batch_size * cfg->world_size, T = cfg->seq_len;
	struct sf_dataset_stats st;
	uint64_t steps, n, *counts, *windows;
	uint32_t ns;

	sf__dataset_stats(ds, &st);
	ns = sf__dataset_mix_sources(ds);
	/* The bound is the weights', whatever the budget: said even without one, as is a
	 * pattern the ranks share. */
	if (ns) {
		char ranks[SF_DATASET_ADVICE_MAX];

		print_bound(ds);
		if (sf__dataset_mix_ranks(ds, ranks, sizeof(ranks)))
			printf("# warning: %s\n", ranks);
	}
	if (!tokens && st.n_steps == UINT64_MAX) {
		printf("# the run has no end (its last phase is open): give --tokens N for a "
		       "budget\n");
		return 0;
	}
	steps = tokens ? tokens / (G * T) + (tokens % (G * T) != 0) : st.n_steps;
	if (steps > st.n_steps) {
		steps = st.n_steps;
		printf("# the run ends at step %llu (%s), before the %llu tokens asked for\n",
		       (unsigned long long)steps,
		       ns ? "the schedule's last until_step" : "sampling.epochs",
		       (unsigned long long)tokens);
	}
	/* Tokens are counted in 64 bits: a budget beyond that (a schedule's last phase may
	 * end at step 2^64 - 2) is cut to what they hold. */
	if (steps > UINT64_MAX / G / T) {
		steps = UINT64_MAX / G / T;
		printf("# the budget is cut to %llu steps: 2^64 tokens is the most counted\n",
		       (unsigned long long)steps);
	}
	n = steps * G;
	printf("# budget: %llu steps of %llu samples of %llu tokens: %llu samples, %llu tokens\n",
	       (unsigned long long)steps, (unsigned long long)G, (unsigned long long)T,
	       (unsigned long long)n, (unsigned long long)(n * T));
	if (!ns) {
		printf("# stream: %.3f epochs of %llu samples\n", (double)n / (double)st.n_windows,
		       (unsigned long long)st.n_windows);
		return 0;
	}
	counts = calloc(ns, sizeof(*counts));
	windows = calloc(ns, sizeof(*windows));
	if (!counts || !windows) {
		free(counts);
		free(windows);
		return -1;
	}
	sf__dataset_mix_expect(ds, n, counts, windows);
	for (uint32_t i = 0; i < ns; i++)
		printf("# source %u %s: %llu samples (%.6f), %llu tokens, %.3f epochs of %llu "
		       "samples\n",
		       i, cfg->sources[i].name, (unsigned long long)counts[i],
		       (double)counts[i] / (double)n, (unsigned long long)(counts[i] * T),
		       (double)counts[i] / (double)windows[i], (unsigned long long)windows[i]);
	free(counts);
	free(windows);
	return 0;
}

/* The text of special token `id`, or "none". */
static const char *marker_text(const struct sf_tok *tok, int32_t id)
{
	const char *text = id >= 0 ? sf__tok_special_text(tok, (uint32_t)id) : NULL;

	return text ? text : "none";
}

/* What the tokenizer file is and which ids go around each document. */
static int report_tokenizer(const struct sf_config *cfg)
{
	struct sf_tok_file_opts opts = {cfg->tok_file, (int)cfg->tok_format, cfg->tok_pattern};
	struct sf_tok *tok = NULL;
	struct sf_err e = {0};
	char how[160];
	int32_t bos, eos;

	if (sf__tok_load_file(&opts, &tok, &e) < 0 ||
	    sf__tok_marker(tok, cfg->bos, 1, &bos, &e) < 0 ||
	    sf__tok_marker(tok, cfg->eos, 0, &eos, &e) < 0) {
		sf__log_error("%s", e.msg);
		sf__tok_free(tok);
		return -1;
	}
	printf("# tokenizer %s: %s, %u ids; each document: ", sf__tok_name(tok),
	       *sf__tok_family(tok) ? sf__tok_family(tok) : "unknown family", sf__tok_n_vocab(tok));
	if (bos < 0) /* none: no id to show (it printed -1) */
		printf("bos none");
	else
		printf("bos %d %s", bos, marker_text(tok, bos));
	printf(", eos %d %s\n", eos, marker_text(tok, eos));
	if (sf__tok_how(tok, how, sizeof(how)))
		printf("# tokenizer %s: texts encoded %s\n", sf__tok_name(tok), how);
	sf__tok_free(tok);
	return 0;
}

/* An error of the job file `path`, named once: some messages begin with it already. */
static void refuse(const char *path, const char *msg)
{
	size_t n = strlen(path);

	if (!strncmp(msg, path, n) && msg[n] == ':')
		sf__log_error("%s", msg);
	else
		sf__log_error("%s: %s", path, msg);
}

int sf__cmd_check(int argc, char **argv)
{
	char advice[SF_DATASET_ADVICE_MAX];
	const char *path = NULL;
	const char **sets = calloc((size_t)argc, sizeof(*sets));
	struct sf_arena_header layout = {0};
	struct sf_dataset *ds = NULL;
	struct sf_config cfg;
	struct sf_err e = {0};
	uint32_t n_sets = 0;
	uint32_t token_bytes = 0;
	uint64_t tokens = 0;
	int r, budget = 0, shared;

	if (!sets)
		return 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--set") && i + 1 < argc)
			sets[n_sets++] = argv[++i];
		else if (!strncmp(argv[i], "--set=", 6))
			sets[n_sets++] = argv[i] + 6;
		else if (!strcmp(argv[i], "--strict"))
			continue;
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc &&
			 parse_tokens(argv[i + 1], &tokens) == 0) {
			budget = 1;
			i++;
		} else if (argv[i][0] == '-' || path) {
			if (!strcmp(argv[i], "--tokens"))
				fprintf(stderr,
					"shmfeed: check: --tokens %s: expected a count of tokens "
					"from 1 to 2^64 - 1, with k, M, G or T (10^3 to 10^12) if "
					"you like\n",
					i + 1 < argc ? argv[i + 1] : "(missing)");
			else if (!strcmp(argv[i], "--set"))
				fprintf(stderr, "shmfeed: check: --set needs KEY=VALUE\n");
			else if (argv[i][0] == '-')
				fprintf(stderr, "shmfeed: check: unknown option '%s'\n", argv[i]);
			else
				fprintf(stderr, "shmfeed: check: one CONFIG, not '%s' and '%s'\n",
					path, argv[i]);
			fprintf(stderr, USAGE);
			free(sets);
			return 2;
		} else
			path = argv[i];
	}
	if (!path) {
		fprintf(stderr, "shmfeed: check: CONFIG is missing\n");
		fprintf(stderr, USAGE);
		free(sets);
		return 2;
	}
	r = sf__config_load_overrides(path, sets, n_sets, &cfg, &e);
	free(sets);
	if (r < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	/* The key files are read as the launcher reads them, so a job that checks starts. */
	if (cfg.curve_secret_key_file) {
		struct sf_curve_server curve = {0};

		r = sf__curve_server_load(&cfg, &curve, &e);
		sf__curve_server_free(&curve);
		if (r < 0) {
			sf__log_error("%s", e.msg);
			sf__config_free(&cfg);
			return 1;
		}
	}
	if (cfg.insecure_tcp)
		sf__log_error("warning: %s: control endpoint %s has no authentication "
			      "(control.insecure_tcp): anyone who can reach the port, any local "
			      "user included, can stop, pause or seek the job",
			      path, cfg.endpoint);
	/* The private runtime directory run keeps the job's discovery file (and its default
	 * sockets) in. */
	if ((cfg.metrics_file && sf__metrics_file_check(cfg.metrics_file, &e) < 0) ||
	    sf__job_paths_check(cfg.job, &e) < 0 || sf__ipc_endpoint_check(cfg.endpoint, &e) < 0 ||
	    sf__launcher_fds_check(cfg.producers, &cfg, &e) < 0) {
		refuse(path, e.msg);
		sf__config_free(&cfg);
		return 1;
	}
	/* Sources and vocabulary are opened as `run` opens them before it starts. */
	r = sf__dataset_check(&cfg, &token_bytes, &e);
	if (r < 0) {
		refuse(path, e.msg);
		sf__config_free(&cfg);
		return 1;
	}
	/* The arena as `run` lays it out, held to what this machine can map. */
	{
		struct sf_geometry g = {
			.ranks = cfg.local_ranks,
			.slots_per_rank = cfg.slots_per_rank,
			.max_producers = cfg.producers,
			.batch = cfg.batch_size,
			.seq_tokens = cfg.seq_len + 1,
			.token_bytes = token_bytes,
			.doc_starts_per_seq = cfg.doc_starts,
			.world_size = cfg.world_size,
			.rank_base = cfg.rank_base,
			/* A mixture's slots hold each row's source too. */
			.flags = cfg.mixture ? SF_ARENA_F_SOURCES : 0,
		};

		char why[128];

		/* Laid out as run lays it out: huge pages only where the kernel gives them. */
		r = sf__arena_layout(&g,
				     cfg.hugepages && sf__arena_hugepages_usable(why, sizeof(why)),
				     &layout, &e);
		if (r >= 0)
			r = sf__arena_fits(layout.total_size, NULL, &e);
		if (r < 0) {
			refuse(path, e.msg);
			sf__config_free(&cfg);
			return 1;
		}
	}
	/* A mixture's weights and schedule, and a budget, are judged by the dataset as `run`
	 * opens it: before "valid", which says that `run` takes the job. */
	if (budget || cfg.mixture) {
		r = sf__dataset_open(&cfg, &ds, &e);
		if (r < 0) {
			refuse(path, e.msg);
			sf__config_free(&cfg);
			return 1;
		}
	}
	printf("# %s: valid\n", path);
	if (ds && sf__dataset_note(ds)[0])
		printf("# warning: %s\n", sf__dataset_note(ds));
	if (ds && sf__dataset_large_docs(ds, advice, sizeof(advice)))
		printf("# warning: %s\n", advice);
	sf__config_write(&cfg, stdout);
	report_sources(&cfg);
	shared = sf__sources_shared_files(&cfg, warn_shared);
	if (shared > SF_SHARED_FILES_SAID)
		printf("# warning: " SF_SHARED_MORE "\n", shared - SF_SHARED_FILES_SAID);
	printf("# batch.dtype %s: the arena holds %s tokens\n",
	       cfg.dtype == SF_DTYPE_AUTO ? "auto"
	       : token_bytes == 2	  ? "uint16"
					  : "int32",
	       token_bytes == 2 ? "uint16" : "int32");
	printf("# arena: %llu bytes: %u rank%s x %u slots of %llu payload bytes (%llu with "
	       "alignment)\n",
	       (unsigned long long)layout.total_size, cfg.local_ranks,
	       cfg.local_ranks == 1 ? "" : "s", cfg.slots_per_rank,
	       (unsigned long long)layout.payload_bytes, (unsigned long long)layout.payload_stride);
	if (cfg.checksum && cfg.verify_every == 1)
		printf("# integrity: consumers verify the checksum of every step\n");
	else if (cfg.checksum)
		printf("# integrity: consumers verify the checksum of one step in %u\n",
		       cfg.verify_every);
	else
		printf("# integrity: no checksums; batch digests come from the producers\n");
	if (cfg.producer_cpus) {
		cpu_set_t set;
		char list[256], msg[400];

		if (sf__cpu_list_allowed(cfg.producer_cpus, &set, msg, sizeof(msg)) == 0) {
			sf__cpu_list_format(&set, list, sizeof(list));
			printf("# producers.cpus: producers run on CPU%s %s\n",
			       CPU_COUNT(&set) == 1 ? "" : "s", list);
		}
	}
	if (cfg.tok_file && report_tokenizer(&cfg) < 0)
		r = -1;
	if (r >= 0)
		printf("# config digest %016llx\n", (unsigned long long)sf__config_digest(&cfg));
	if (r >= 0 && ds)
		r = report_budget(&cfg, ds, tokens);
	sf__dataset_close(ds);
	sf__config_free(&cfg);
	return r < 0 ? 1 : 0;
}
