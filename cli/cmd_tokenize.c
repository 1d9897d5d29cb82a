/*
 * `shmfeed tokenize CONFIG -o PREFIX [--tokenizer FILE] [--set KEY=VALUE ...] [-q]`:
 * tokenize the raw text sources of a job with all its producer processes and write them
 * as a Megatron PREFIX.bin / PREFIX.idx pair, showing progress (bytes, documents,
 * tokens/s, ETA). --tokenizer FILE stands for --set tokenizer.file=FILE with the job's
 * encoding set aside.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/config.h"
#include "common/log.h"
#include "producer/producer.h"

struct progress_state {
	int tty;
	int quiet;
	uint64_t last_line_ns;
};

static void show_progress(const struct sf_tokenize_progress *p, void *arg)
{
	struct progress_state *ps = arg;
	double secs = (double)p->elapsed_ns / 1e9;
	double rate = secs > 0 ? (double)p->tokens / secs : 0;
	double frac = p->total_bytes ? (double)p->bytes / (double)p->total_bytes : 1;
	double eta = frac > 0 ? secs / frac - secs : 0;

	if (ps->quiet)
		return;
	/* On a terminal the line is redrawn in place; in a log, one line every 5 s. */
	if (!ps->tty && !p->done && p->elapsed_ns - ps->last_line_ns < 5000000000ull)
		return;
	ps->last_line_ns = p->elapsed_ns;
	fprintf(stderr,
		"%sshmfeed: tokenize: %.1f of %.1f MB (%.0f%%), %llu docs, %llu tokens, "
		"%.2f M tokens/s, %s %d:%02d%s",
		ps->tty ? "\r" : "", (double)p->bytes / 1e6, (double)p->total_bytes / 1e6,
		frac * 100, (unsigned long long)p->docs, (unsigned long long)p->tokens, rate / 1e6,
		p->done ? "took" : "ETA", (int)((p->done ? secs : eta) / 60),
		(int)(p->done ? secs : eta) % 60, ps->tty && !p->done ? "" : "\n");
}

int sf__cmd_tokenize(int argc, char **argv)
{
	const char *path = NULL, *prefix = NULL;
	const char **sets = calloc((size_t)argc, sizeof(*sets));
	char *file_set = NULL;
	struct progress_state ps = {.tty = isatty(2)};
	struct sf_dataset_stats st;
	struct sf_dataset *ds = NULL;
	struct sf_config cfg;
	struct sf_err e = {0};
	uint32_t n_sets = 0;
	int r;

	if (!sets)
		return 1;
	sf__log_set_who("tokenize");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-o") && i + 1 < argc)
			prefix = argv[++i];
		else if (!strcmp(argv[i], "--set") && i + 1 < argc)
			sets[n_sets++] = argv[++i];
		else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc && !file_set) {
			/* Two words of argv make two overrides: sets has room. */
			if (asprintf(&file_set, "tokenizer.file=%s", argv[++i]) < 0) {
				free(sets);
				return 1;
			}
			sets[n_sets++] = "tokenizer.encoding=null";
			sets[n_sets++] = file_set;
		} else if (!strcmp(argv[i], "-q"))
			ps.quiet = 1;
		else if (argv[i][0] == '-' || path)
			path = NULL, prefix = NULL, i = argc;
		else
			path = argv[i];
	}
	if (!path || !prefix) {
		fprintf(stderr, "usage: shmfeed tokenize CONFIG -o PREFIX [--tokenizer FILE] "
				"[--set KEY=VALUE ...] [-q]\n");
		free(sets);
		free(file_set);
		return 2;
	}
	r = sf__config_load_overrides(path, sets, n_sets, &cfg, &e);
	free(sets);
	free(file_set);
	if (r < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	r = sf__dataset_open(&cfg, &ds, &e);
	if (r < 0) {
		sf__log_error("%s", e.msg);
		sf__config_free(&cfg);
		return 1;
	}
	sf__dataset_stats(ds, &st);
	if (!ps.quiet)
		sf__log_info(
			"%llu files, %.1f MB of text, %llu chunks; chunk index %s (%llu bytes, "
			"%.2f s to build)",
			(unsigned long long)st.n_files, (double)st.text_bytes / 1e6,
			(unsigned long long)st.n_chunks,
			st.index_loaded ? "loaded from cache" : "built",
			(unsigned long long)st.index_bytes, (double)st.index_build_ns / 1e9);
	if (st.skipped)
		sf__log_info("%llu bad records skipped; the first: %s",
			     (unsigned long long)st.skipped, sf__dataset_first_skip(ds));
	r = sf__dataset_write_megatron(ds, prefix, cfg.producers, show_progress, &ps, &e);
	if (r < 0)
		sf__log_error("%s", e.msg);
	else if (!ps.quiet)
		sf__log_info("wrote %s.bin and %s.idx: %llu documents, %llu tokens (%s)", prefix,
			     prefix, (unsigned long long)st.n_docs, (unsigned long long)st.n_tokens,
			     st.token_bytes == 2 ? "uint16" : "int32");
	sf__dataset_close(ds);
	sf__config_free(&cfg);
	return r < 0 ? 1 : 0;
}
