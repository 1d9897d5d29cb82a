/*
 * A dataset's mixture: each source, pre-tokenized files or raw text, keeps its own span
 * of the token stream (the sources laid out in their order), its own sample order under
 * a seed of its own (the job's seed mixed with the source's name) and its own epochs:
 * pre-tokenized windows permuted per epoch (producer/sampler.h), raw text windows in
 * the chunk order of producer/text_order.h, or random offsets. The mixture
 * (producer/mixture.h) says which source global sample k comes from and which of that
 * source's samples it is. The dataset calls in here only when its config has a mixture.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
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

int sf__dataset_mix_source_files(struct sf_dataset *ds, const struct sf_config *cfg,
				 uint32_t source, uint32_t first_token_file,
				 uint32_t first_text_file, struct sf_err *e)
{
	struct sf_mix_source *m;

	if (!ds->mix_sources)
		return 0;
	m = &ds->mix_sources[source];
	m->first_token_file = first_token_file;
	m->n_token_files = ds->n_token_files - first_token_file;
	m->text_slot = UINT32_MAX;
	if (ds->n_text_files == first_text_file)
		return 0;
	if (m->n_token_files)
		return sf__err(e, SF_E_CONFIG,
			       "%s: source '%s' holds both raw text (%s) and pre-tokenized files "
			       "(%s): in a mixture each source is one or the other",
			       cfg->path ? cfg->path : "config", cfg->sources[source].name,
			       ds->text_files[first_text_file].path,
			       ds->token_files[first_token_file].path);
	m->text_slot = ds->n_text_spans++;
	return 0;
}

void sf__dataset_mix_layout(struct sf_dataset *ds)
{
	uint64_t pos = 0, c = 0;

	if (!ds->mix_sources)
		return;
	for (uint32_t i = 0; i < ds->n_sources; i++) {
		struct sf_mix_source *m = &ds->mix_sources[i];

		m->start = pos;
		for (uint32_t f = m->first_token_file; f < m->first_token_file + m->n_token_files;
		     f++) {
			ds->token_files[f].start = pos;
			pos += ds->token_files[f].n_tokens;
		}
		/* Chunks are in the order of their files, which is the sources' order. */
		m->first_chunk = c;
		for (; c < ds->n_chunks && ds->text_files[ds->chunks[c].file].source == i; c++) {
			ds->chunks[c].start = pos;
			pos += ds->chunks[c].n_tokens;
		}
		m->n_chunks = c - m->first_chunk;
		m->n_tokens = pos - m->start;
	}
	ds->n_tokens = pos;
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

uint32_t sf__dataset_mix_pick(const struct sf_dataset *ds, uint64_t k, uint64_t *ret_j)
{
	return sf__mix_locate(ds->mix, k, ret_j);
}

uint64_t sf__dataset_mix_offset(const struct sf_dataset *ds, uint32_t i, uint64_t j)
{
	const struct sf_mix_source *s = &ds->mix_sources[i];
	struct sf_perm p;

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

double sf__dataset_mix_bound(const struct sf_dataset *ds, uint32_t *ret_exact, double *ret_slack)
{
	return sf__mix_bound(ds->mix, ret_exact, ret_slack);
}

void sf__dataset_mix_target(const struct sf_dataset *ds, uint64_t k, double *ret_target)
{
	sf__mix_target(ds->mix, k, ret_target);
}

/*
 * What sf__dataset_mix_ranks() looks at: up to RANK_PHASES phases (all, or as many spread
 * over the schedule, the first and the last among them: a ramp's stages are phases), the
 * first steps of each from its start (where the count rule's pattern starts again), about
 * RANK_SAMPLES samples in all but at least one step a phase, of RANK_RANKS ranks spread
 * over the world and RANK_ROWS rows of each (a rank of more rows holds long runs of
 * consecutive samples, which the count rule keeps near the mixture's share): at most
 * max(RANK_SAMPLES, RANK_PHASES x RANK_RANKS x RANK_ROWS) = 2^24 samples.
 */
#define RANK_SAMPLES (1u << 21)
#define RANK_PHASES  64u
#define RANK_RANKS   1024u
#define RANK_ROWS    256u

/* The rank most off of the phases looked at, and how many ranks are off in its phase. */
struct rank_worst {
	double key;
	uint64_t phase, rank;
	uint32_t source;
	double p, g;
	uint32_t off; /* ranks off, in the phase of the worst */
};

/*
 * The first `steps` steps of phase `ph`, `rows` rows of each of `ranks` ranks spread over
 * the world, counted into count[rank][source] and all[source]; its most off rank into *w
 * where it is more off than the one there.
 */
static void ranks_of_phase(const struct sf_dataset *ds, const struct sf_mix_phase *ph,
			   uint64_t steps, uint64_t ranks, uint64_t rows, uint64_t *count,
			   uint64_t *all, struct rank_worst *w)
{
	const uint64_t B = ds->batch, W = ds->world_size, G = B * W;
	const uint32_t n = ds->mix->n_sources;
	uint64_t j, looked = 0;
	uint32_t off = 0;
	struct rank_worst here = {0};

	memset(count, 0, (ranks * n + n) * sizeof(*count));
	for (uint64_t s = ph->first_step; s < ph->first_step + steps; s++)
		for (uint64_t q = 0; q < ranks; q++)
			for (uint64_t i = 0; i < rows; i++) {
				/* Rank q x W / ranks: every rank, or ranks spread evenly. */
				const uint32_t src =
					sf__mix_locate(ds->mix, s * G + q * W / ranks * B + i, &j);

				count[q * n + src]++;
				all[src]++;
				looked++;
			}
	for (uint64_t q = 0; q < ranks; q++) {
		bool q_off = false;

		for (uint32_t i = 0; i < n; i++) {
			const double g = (double)all[i] / (double)looked,
				     p = (double)count[q * n + i] / (double)(steps * rows),
				     d = fabs(p - g);
			double key;

			/* Off by half its share or more, and by five times what chance would
			 * give over as many rows: a pattern, not noise. A source of no share
			 * here (weight 0 in this phase) is off nowhere. */
			if (all[i] == 0 || d < 0.5 * g ||
			    d < 5 * sqrt(g * (1 - g) / (double)(steps * rows)))
				continue;
			q_off = true;
			/* The rank most off, to a thousandth of the share; of ties, one short
			 * of the source ("0 %" says it best). */
			key = floor(d / g * 1000) + (p < g ? 0.5 : 0);
			if (key > here.key)
				here = (struct rank_worst){.key = key,
							   .phase =
								   (uint64_t)(ph - ds->mix->phases),
							   .rank = q * W / ranks,
							   .source = i,
							   .p = p,
							   .g = g};
		}
		off += q_off;
	}
	here.off = off;
	if (off && here.key > w->key)
		*w = here;
}

int sf__dataset_mix_ranks(const struct sf_dataset *ds, char *buf, size_t len)
{
	const uint64_t B = ds->batch, W = ds->world_size, G = B * W;
	const uint32_t n = ds->mix ? ds->mix->n_sources : 0;
	const uint64_t ranks = W < RANK_RANKS ? W : RANK_RANKS,
		       rows = B < RANK_ROWS ? B : RANK_ROWS;
	const uint32_t phases =
		n && ds->mix->n_phases < RANK_PHASES ? ds->mix->n_phases : RANK_PHASES;
	struct rank_worst w = {0};
	uint64_t *count, budget;
	char phase[48] = "";

	if (!n || W < 2)
		return 0;
	/* Steps a phase: its share of RANK_SAMPLES, at least one. */
	budget =
		RANK_SAMPLES / phases / (ranks * rows) ? RANK_SAMPLES / phases / (ranks * rows) : 1;
	count = calloc(ranks * n + n, sizeof(*count));
	if (!count)
		return 0;
	for (uint32_t q = 0; q < phases; q++) {
		const uint32_t k =
			phases > 1
				? (uint32_t)((uint64_t)q * (ds->mix->n_phases - 1) / (phases - 1))
				: 0;
		const struct sf_mix_phase *ph = &ds->mix->phases[k];
		const uint64_t length = ph->end_step - ph->first_step,
			       steps = length < budget ? length : budget;

		/* A phase whose samples pass 2^64 (an until_step near it) is never reached:
		 * its indexes would wrap onto the first phase's (a review). */
		if (!steps || ph->first_step > UINT64_MAX / G - steps)
			continue;
		ranks_of_phase(ds, ph, steps, ranks, rows, count, count + ranks * n, &w);
	}
	free(count);
	if (!w.off)
		return 0;
	if (ds->mix->n_phases > 1)
		snprintf(phase, sizeof(phase), " from step %llu",
			 (unsigned long long)ds->mix->phases[w.phase].first_step);
	snprintf(buf, len,
		 "mixture: rank %llu gets source '%s' in %.3g %% of its rows against %.3g %% of "
		 "all rows%s (%u of the ranks looked at are off so): the count rule's pattern "
		 "falls on the ranks alike at B x W = %llu. Every global batch holds the "
		 "mixture's share, so averaged gradients are the mixture's, but each rank's own "
		 "rows are not (a loss logged by rank 0 alone): docs/mixtures.md, \"Which rank "
		 "gets which source\"",
		 (unsigned long long)w.rank, ds->sources[w.source].name, 100.0 * w.p, 100.0 * w.g,
		 phase, w.off, (unsigned long long)G);
	return 1;
}
