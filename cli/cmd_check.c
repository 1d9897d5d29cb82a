/*
 * `shmfeed check CONFIG [--set KEY=VALUE ...] [--strict]`: load and validate a job file,
 * then print the resolved config (every default filled in) as YAML, followed by what
 * each source pattern matches today, the resolved token width and the config digest as
 * comments. The sources are opened and the tokenizer loaded as `run` does before it
 * starts anything (sf__dataset_check()), so the check fails where `run` would: a glob
 * matching nothing, a missing or malformed file or vocabulary, a dtype that cannot hold
 * a source's tokens. --strict is accepted for scripts written when a source matching
 * nothing passed without it; it now always fails. CURVE key files are read as `run` reads
 * them; a plain tcp:// endpoint (control.insecure_tcp) is warned about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/config.h"
#include "common/log.h"
#include "producer/tokenizer/tokenizer.h"
#include "launcher/launcher.h"
#include "producer/producer.h"

/* The bytes of `path`, a regular file, else 0; counts it in *files. */
static unsigned long long file_bytes(const char *path, size_t *files)
{
	struct stat sb;

	if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
		return 0;
	(*files)++;
	return (unsigned long long)sb.st_size;
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
			struct sf_source_config one = *src;
			unsigned long long bytes = 0;
			struct sf_err e = {0};
			char **paths = NULL;
			size_t n = 0, files = 0;

			one.paths = &src->paths[j];
			one.n_paths = 1;
			if (sf__source_expand(&one, &paths, &n, &e) == 0) {
				for (size_t k = 0; k < n; k++) {
					size_t had = files;

					bytes += file_bytes(paths[k], &files);
					if (files == had) {
						char *bin = NULL, *idx = NULL;

						if (asprintf(&bin, "%s.bin", paths[k]) >= 0 &&
						    asprintf(&idx, "%s.idx", paths[k]) >= 0) {
							bytes += file_bytes(bin, &files);
							bytes += file_bytes(idx, &files);
						}
						free(bin);
						free(idx);
					}
					free(paths[k]);
				}
				free(paths);
			}
			printf("# source %u: %s: %zu file%s, %llu bytes\n", i, src->paths[j], files,
			       files == 1 ? "" : "s", bytes);
		}
	}
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
	int32_t bos, eos;

	if (sf__tok_load_file(&opts, &tok, &e) < 0 ||
	    sf__tok_marker(tok, cfg->bos, 1, &bos, &e) < 0 ||
	    sf__tok_marker(tok, cfg->eos, 0, &eos, &e) < 0) {
		sf__log_error("%s", e.msg);
		sf__tok_free(tok);
		return -1;
	}
	printf("# tokenizer %s: %s, %u ids; each document: bos %d %s, eos %d %s\n",
	       sf__tok_name(tok), *sf__tok_family(tok) ? sf__tok_family(tok) : "unknown family",
	       sf__tok_n_vocab(tok), bos, marker_text(tok, bos), eos, marker_text(tok, eos));
	sf__tok_free(tok);
	return 0;
}

int sf__cmd_check(int argc, char **argv)
{
	const char *path = NULL;
	const char **sets = calloc((size_t)argc, sizeof(*sets));
	struct sf_config cfg;
	struct sf_err e = {0};
	uint32_t n_sets = 0;
	uint32_t token_bytes = 0;
	int r;

	if (!sets)
		return 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--set") && i + 1 < argc)
			sets[n_sets++] = argv[++i];
		else if (!strncmp(argv[i], "--set=", 6))
			sets[n_sets++] = argv[i] + 6;
		else if (!strcmp(argv[i], "--strict"))
			continue;
		else if (argv[i][0] == '-' || path) {
			fprintf(stderr, "usage: shmfeed check CONFIG [--set KEY=VALUE ...] "
					"[--strict]\n");
			free(sets);
			return 2;
		} else
			path = argv[i];
	}
	if (!path) {
		fprintf(stderr, "usage: shmfeed check CONFIG [--set KEY=VALUE ...] [--strict]\n");
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
	/* Sources and vocabulary are opened as `run` opens them before it starts. */
	r = sf__dataset_check(&cfg, &token_bytes, &e);
	if (r < 0) {
		sf__log_error("%s: %s", path, e.msg);
		sf__config_free(&cfg);
		return 1;
	}
	printf("# %s: valid\n", path);
	sf__config_write(&cfg, stdout);
	report_sources(&cfg);
	printf("# batch.dtype %s: the arena holds %s tokens\n",
	       cfg.dtype == SF_DTYPE_AUTO ? "auto"
	       : token_bytes == 2	  ? "uint16"
					  : "int32",
	       token_bytes == 2 ? "uint16" : "int32");
	if (cfg.tok_file && report_tokenizer(&cfg) < 0) {
		sf__config_free(&cfg);
		return 1;
	}
	printf("# config digest %016llx\n", (unsigned long long)sf__config_digest(&cfg));
	sf__config_free(&cfg);
	return 0;
}
