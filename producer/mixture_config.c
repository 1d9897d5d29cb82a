/*
 * From a job's mixture config (source weights, groups, schedule) to the integer weight
 * sets of producer/mixture.h. A grouped source weighs its group's weight times its own
 * share of the group (its `weight`, default 1, over the group's sum); the vector of one
 * phase is scaled to integers over a common denominator and divided by its greatest
 * common divisor, all in 128-bit integers, so the weights stay exactly what the config
 * says.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/mixture_config.h"

__extension__ typedef unsigned __int128 u128;

static u128 gcd128(u128 a, u128 b)
{
	while (b) {
		u128 t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* A source's own weight within its group (default 1). */
static uint64_t in_group(const struct sf_source_config *src)
{
	return src->weight == SF_WEIGHT_UNSET ? SF_WEIGHT_SCALE : src->weight;
}

/* Where the weights of `map` (NULL: mixture.groups) were given, or the job's file. */
static const char *given_at(const struct sf_config *cfg, const struct sf_weights_config *map)
{
	if (!map)
		map = &cfg->groups;
	return map->at[0] ? map->at : cfg->path ? cfg->path : "config";
}

/* The weight that `map` (or, when NULL, the sources and mixture.groups) gives `name`. */
static uint64_t weight_named(const struct sf_config *cfg, const struct sf_weights_config *map,
			     const char *name)
{
	if (!map)
		map = &cfg->groups;
	for (uint32_t i = 0; i < map->n; i++)
		if (!strcmp(map->v[i].name, name))
			return map->v[i].weight;
	return 0;
}

static int resolve(const struct sf_config *cfg, const struct sf_weights_config *map, uint32_t phase,
		   bool ramp_to, uint64_t *out, struct sf_err *e)
{
	const uint32_t n = cfg->n_sources;
	u128 lcm = 1, g = 0, total = 0;
	u128 *v = calloc(n, sizeof(*v));

	if (!v)
		return sf__err(e, -ENOMEM, "out of memory");
	/* The common denominator: the lcm of the sums of the groups that weigh something
	 * here (a group of weight 0 takes no share, whatever its sources weigh). */
	for (uint32_t i = 0; i < n; i++) {
		const char *group = cfg->sources[i].group;
		uint64_t gw;
		u128 sum = 0;

		if (!group || !(gw = weight_named(cfg, map, group)))
			continue;
		for (uint32_t j = 0; j < n; j++)
			if (cfg->sources[j].group && !strcmp(cfg->sources[j].group, group))
				sum += in_group(&cfg->sources[j]);
		if (!sum) {
			char frac[16], where[32] = "";
			int len;

			/* Its share would go to the other sources without a word. */
			free(v);
			len = snprintf(frac, sizeof(frac), ".%09llu",
				       (unsigned long long)(gw % SF_WEIGHT_SCALE));
			while (len > 0 && (frac[len - 1] == '0' || frac[len - 1] == '.'))
				frac[--len] = 0;
			if (map)
				snprintf(where, sizeof(where), " schedule phase %u%s", phase + 1,
					 ramp_to ? " ramp_to" : "");
			return sf__err(e, SF_E_CONFIG,
				       "%s: mixture%s: group '%s' has weight %llu%s but all its "
				       "sources weigh 0 in it: give one a weight, or the group 0",
				       given_at(cfg, map), where, group,
				       (unsigned long long)(gw / SF_WEIGHT_SCALE), frac);
		}
		/* The lcm is at least the sum: one of 2^64 or more is too precise, and the
		 * product below, past 2^128, wrapped to a value that passed the check, the
		 * other groups' sources then weighing lcm / sum = 0 (a review). */
		if (sum >> 64)
			goto too_precise;
		lcm = lcm / gcd128(lcm, sum) * sum;
		if (lcm >> 64)
			goto too_precise;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct sf_source_config *src = &cfg->sources[i];

		if (!src->group) {
			v[i] = (u128)(map ? weight_named(cfg, map, src->name) : src->weight) * lcm;
		} else {
			u128 sum = 0;

			for (uint32_t j = 0; j < n; j++)
				if (cfg->sources[j].group &&
				    !strcmp(cfg->sources[j].group, src->group))
					sum += in_group(&cfg->sources[j]);
			if (sum && weight_named(cfg, map, src->group))
				v[i] = (u128)weight_named(cfg, map, src->group) *
				       ((u128)in_group(src) * (lcm / sum));
		}
		if (v[i] >> 126)
			goto too_precise;
		g = gcd128(g, v[i]);
	}
	if (!g) {
		free(v);
		if (map)
			return sf__err(
				e, SF_E_CONFIG,
				"%s: mixture schedule phase %u: every source weighs 0 in its "
				"%s",
				given_at(cfg, map), phase + 1, ramp_to ? "ramp_to" : "weights");
		return sf__err(e, SF_E_CONFIG, "%s: mixture: every source weighs 0",
			       cfg->path ? cfg->path : "config");
	}
	/* Each term is below 2^126 and there may be thousands: the sum is checked as it
	 * grows, so that it never wraps. */
	for (uint32_t i = 0; i < n; i++) {
		v[i] /= g;
		total += v[i];
		if (v[i] > SF_MIX_MAX_TOTAL || total > SF_MIX_MAX_TOTAL)
			goto too_precise;
		out[i] = (uint64_t)v[i];
	}
	free(v);
	return 0;
too_precise:
	free(v);
	return sf__err(e, SF_E_CONFIG,
		       "%s: the mixture's weights are too precise to hold exactly (as whole "
		       "numbers over their common denominator they sum past 2^62): give them "
		       "fewer digits",
		       map || cfg->groups.n ? given_at(cfg, map)
		       : cfg->path	    ? cfg->path
					    : "config");
}

int sf__mixture_from_config(const struct sf_config *cfg, struct sf_mixture **ret_m,
			    struct sf_err *e)
{
	const uint32_t n = cfg->n_sources, n_phases = cfg->n_phases ? cfg->n_phases : 1;
	struct sf_mix_phase_spec *spec = calloc(n_phases, sizeof(*spec));
	uint64_t *w = calloc((size_t)2 * n_phases * n, sizeof(*w));
	const char *why;
	int r = 0;

	if (!spec || !w) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t p = 0; p < n_phases && r == 0; p++) {
		const struct sf_phase_config *ph = cfg->n_phases ? &cfg->schedule[p] : NULL;
		uint64_t *a = w + (size_t)2 * p * n, *b = a + n;

		r = resolve(cfg, ph ? &ph->weights : NULL, p, false, a, e);
		spec[p].weights = a;
		spec[p].end_step = ph ? ph->until_step : UINT64_MAX;
		if (r == 0 && ph && ph->ramp_to.v) {
			r = resolve(cfg, &ph->ramp_to, p, true, b, e);
			spec[p].ramp_to = b;
			spec[p].stages = ph->stages;
		}
	}
	if (r == 0) {
		r = sf__mix_create(spec, n_phases, n, (uint64_t)cfg->batch_size * cfg->world_size,
				   ret_m, &why);
		if (r < 0)
			r = sf__err(e, r == -ENOMEM ? r : SF_E_CONFIG, "%s: mixture: %s",
				    cfg->path ? cfg->path : "config", why);
	}
out:
	free(spec);
	free(w);
	return r;
}
