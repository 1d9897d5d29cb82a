/*
 * The real producer side of `shmfeed run`: the supervisor's struct sf_producer_ops over
 * the dataset and producer loop of producer/producer.h.
 */
#include "common/log.h"
#include "launcher/launcher.h"
#include "producer/producer.h"

static int real_open(const struct sf_config *cfg, void **ret_ds, struct sf_err *e)
{
	struct sf_dataset *ds;
	int r = sf__dataset_open(cfg, &ds, e);

	if (r == 0) {
		struct sf_dataset_stats st;
		char advice[SF_DATASET_ADVICE_MAX];

		sf__sources_warn_shared(cfg);
		/* Known once the sources are open: said now, as tokenize says it. */
		sf__dataset_stats(ds, &st);
		if (st.skipped)
			sf__log_info("%llu bad records skipped; the first: %s",
				     (unsigned long long)st.skipped, sf__dataset_first_skip(ds));
		if (sf__dataset_note(ds)[0])
			sf__log_error("warning: %s", sf__dataset_note(ds));
		if (sf__dataset_mix_ranks(ds, advice, sizeof(advice)))
			sf__log_error("warning: %s", advice);
		if (sf__dataset_large_docs(ds, advice, sizeof(advice)))
			sf__log_error("warning: %s", advice);
		*ret_ds = ds;
	}
	return r;
}

static void real_close(void *ds)
{
	sf__dataset_close(ds);
}

static int real_geometry(const void *ds, const struct sf_config *cfg, struct sf_geometry *ret_geo,
			 struct sf_err *e)
{
	return sf__dataset_geometry(ds, cfg, ret_geo, e);
}

static int real_main(void *ds, struct sf_arena *a, uint32_t index, struct sf_err *e)
{
	return sf__producer_main(ds, a, index, e);
}

static uint64_t real_end_step(const void *ds)
{
	struct sf_dataset_stats st;

	sf__dataset_stats(ds, &st);
	return st.n_steps;
}

static void real_mixture(const void *ds, struct sf_stats *s)
{
	/* Every source's, computed in the launcher's one thread; no allocation a frame. */
	static uint64_t counts[SF_CONFIG_SOURCES_MAX];
	static double target[SF_CONFIG_SOURCES_MAX];
	uint32_t n = sf__dataset_mix_sources(ds);

	if (!n || n > SF_CONFIG_SOURCES_MAX)
		return;
	sf__dataset_mix_expect(ds, s->samples, counts, NULL);
	sf__dataset_mix_target(ds, s->samples, target);
	/* Per-source stats for the first SF_STATS_MAX_SOURCES sources only; the count of
	 * all of them says how many are not shown. */
	s->sources_total = n;
	if (n > SF_STATS_MAX_SOURCES)
		n = SF_STATS_MAX_SOURCES;
	for (uint32_t i = 0; i < n; i++) {
		s->source[i].delivered = counts[i];
		s->source[i].target = target[i];
	}
	s->n_sources = n;
}

const struct sf_producer_ops sf__real_producers = {
	.open = real_open,
	.close = real_close,
	.geometry = real_geometry,
	.main = real_main,
	.end_step = real_end_step,
	.mixture = real_mixture,
};
