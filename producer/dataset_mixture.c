/*
 * A dataset's mixture: each pre-tokenized source keeps its own span of the token stream,
 * its own sample order (windows permuted per epoch, or random offsets) under a seed of
 * its own (the job's seed mixed with the source's name), and its own epochs; the mixture
 * (producer/mixture.h) says which source global sample k comes from and which of that
 * source's samples it is. The dataset calls in here only when its config has a mixture.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "producer/dataset_impl.h"
#include "producer/mixture.h"
#include "producer/mixture_config.h"
#include "producer/sampler.h"

int sf__dataset_mix_prepare(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	if (!cfg->mixture)
		return 0;
	ds->mix_sources = calloc(cfg->n_sources, sizeof(*ds->mix_sources));
	if (!ds->mix_sources)
		return sf__err(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < cfg->n_sources; i++)
		ds->mix_sources[i].seed =
			sf__mix64(cfg->seed ^
				  XXH3_64bits(cfg->sources[i].name, strlen(cfg->sources[i].name)));
	return 0;
}

void sf__dataset_mix_source_span(struct sf_dataset *ds, uint32_t source, uint64_t start)
{
	if (ds->mix_sources) {
		ds->mix_sources[source].start = start;
		ds->mix_sources[source].n_tokens = ds->n_tokens - start;
	}
}

int sf__dataset_mix_check(const struct sf_dataset *ds, const struct sf_config *cfg,
			  struct sf_err *e)
{
	if (cfg->mixture && ds->n_text_files)
		return sf__err(e, SF_E_CONFIG,
			       "%s: a mixture reads pre-tokenized sources (tokenize raw text first "
			       "with `shmfeed tokenize`)",
			       cfg->path ? cfg->path : "config");
	return 0;
}

int sf__dataset_mix_open(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	const char *job = cfg->path ? cfg->path : "config";
	int r;

	if (!cfg->mixture)
		return 0;
	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		struct sf_mix_source *s = &ds->mix_sources[i];

		if (s->n_tokens < (uint64_t)cfg->seq_len + 1)
			return sf__err(e, SF_E_SOURCE,
				       "%s: source '%s' holds %llu tokens, fewer than one sequence "
				       "of %u",
				       job, cfg->sources[i].name, (unsigned long long)s->n_tokens,
				       cfg->seq_len + 1);
		s->n_windows = (s->n_tokens - 1) / cfg->seq_len;
	}
	r = sf__mixture_from_config(cfg, &ds->mix, e);
	if (r < 0)
		return r;
	ds->n_steps = sf__mix_end_step(ds->mix);
	return 0;
}

void sf__dataset_mix_close(struct sf_dataset *ds)
{
	sf__mix_free(ds->mix);
	free(ds->mix_sources);
	ds->mix = NULL;
	ds->mix_sources = NULL;
}

uint64_t sf__dataset_mix_offset(const struct sf_dataset *ds, uint64_t k, uint32_t *ret_source)
{
	uint64_t j;
	uint32_t i = sf__mix_locate(ds->mix, k, &j);
	const struct sf_mix_source *s = &ds->mix_sources[i];
	struct sf_perm p;

	*ret_source = i;
	if (ds->mode == SF_SAMPLE_RANDOM)
		return s->start + sf__random_below(s->seed, j, s->n_tokens - ds->seq_len);
	sf__perm_init(&p, s->n_windows, s->seed, j / s->n_windows, 1);
	return s->start + sf__perm_apply(&p, j % s->n_windows) * ds->seq_len;
}

uint32_t sf__dataset_mix_sources(const struct sf_dataset *ds)
{
	return ds->mix ? ds->mix->n_sources : 0;
}

void sf__dataset_mix_expect(const struct sf_dataset *ds, uint64_t k, uint64_t *ret_counts,
			    uint64_t *ret_windows)
{
	if (ret_counts)
		sf__mix_counts(ds->mix, k, ret_counts);
	for (uint32_t i = 0; ret_windows && i < ds->mix->n_sources; i++)
		ret_windows[i] = ds->mix_sources[i].n_windows;
}

double sf__dataset_mix_bound(const struct sf_dataset *ds, uint32_t *ret_exact)
{
	return sf__mix_bound(ds->mix, ret_exact);
}

void sf__dataset_mix_target(const struct sf_dataset *ds, uint64_t k, double *ret_target)
{
	sf__mix_target(ds->mix, k, ret_target);
}
