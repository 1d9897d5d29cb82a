/*
 * `shmfeed check CONFIG [--set KEY=VALUE ...] [--strict]`: load and validate a job file,
 * then print the resolved config (every default filled in) as YAML, followed by what
 * each source pattern matches today and the config digest as comments. The tokenizer is
 * loaded, so a missing or malformed vocabulary fails the check. With --strict, a source
 * that matches no file fails the check. CURVE key files are read as `run` reads them; a
 * plain tcp:// endpoint (control.insecure_tcp) is warned about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/config.h"
#include "common/log.h"
#include "launcher/launcher.h"
#include "producer/producer.h"

/*
 * Print what each source path matches, found as the producers will find it
 * (sf__source_expand()); returns the number of paths matching nothing.
 */
static int report_sources(const struct sf_config *cfg)
{
	int missing = 0;

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
					struct stat sb;

					if (stat(paths[k], &sb) == 0 && S_ISREG(sb.st_mode)) {
						bytes += (unsigned long long)sb.st_size;
						files++;
					}
					free(paths[k]);
				}
				free(paths);
			}
			if (files)
				printf("# source %u: %s: %zu file%s, %llu bytes\n", i,
				       src->paths[j], files, files == 1 ? "" : "s", bytes);
			else
				printf("# source %u: %s: matches no file%s\n", i, src->paths[j],
				       src->format == SF_FMT_MEGATRON ? " (a Megatron prefix is "
									"checked by the producers)"
								      : "");
			if (!files && src->format != SF_FMT_MEGATRON)
				missing++;
		}
	}
	return missing;
}

int sf__cmd_check(int argc, char **argv)
{
	const char *path = NULL;
	const char **sets = calloc((size_t)argc, sizeof(*sets));
	struct sf_config cfg;
	struct sf_err e = {0};
	uint32_t n_sets = 0;
	int strict = 0, missing, r;

	if (!sets)
		return 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--set") && i + 1 < argc)
			sets[n_sets++] = argv[++i];
		else if (!strncmp(argv[i], "--set=", 6))
			sets[n_sets++] = argv[i] + 6;
		else if (!strcmp(argv[i], "--strict"))
			strict = 1;
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
	/* The vocabulary (or char corpus) must exist and parse, as the producers need it. */
	r = sf__dataset_check_tokenizer(&cfg, &e);
	if (r < 0) {
		sf__log_error("%s: tokenizer %s: %s", path, cfg.encoding ? cfg.encoding : "(none)",
			      e.msg);
		sf__config_free(&cfg);
		return 1;
	}
	printf("# %s: valid\n", path);
	sf__config_write(&cfg, stdout);
	missing = report_sources(&cfg);
	printf("# config digest %016llx\n", (unsigned long long)sf__config_digest(&cfg));
	sf__config_free(&cfg);
	if (missing && strict) {
		sf__log_error("%s: %d source pattern%s match no file", path, missing,
			      missing == 1 ? "" : "s");
		return 1;
	}
	return 0;
}
