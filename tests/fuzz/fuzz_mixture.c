/*
 * Fuzz target of a job's mixture: any bytes go through sf__config_load_string(), and a
 * job it accepts as a mixture through sf__mixture_from_config(), which must build it or
 * refuse it with a message. A built mixture must then keep its promises (docs/mixtures.md)
 * at the samples where they are most likely to break: each phase's first and last samples
 * and their neighbours, the first samples of the stream, and samples picked by the input's
 * hash far into an open last phase. At each such sample k:
 *  - the counts of the first k samples add up to k;
 *  - sample k's source and index agree with the counts before and after it;
 *  - within the phase of k, each source's count since the phase began is within the
 *    phase's bound of its weight times the samples since then (the targets' difference).
 * And each phase's first WALK samples are walked one by one through sf__mix_locate()
 * alone: each index must be its source's running count, and every running count within
 * the phase's bound of its weight times the samples so far.
 * Any crash, sanitizer report or broken promise is a bug.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the committed
 * corpus (tests/fuzz/corpus/mixture).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "common/config.h"
#include "producer/mixture_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct probe {
	const struct sf_mixture *m;
	uint64_t *counts, *next, *start_counts;
	double *target, *start_target, bound; /* the bound of the phase being checked */
};

/* Samples walked one by one at the start of each phase. */
#define WALK 4096

static void broken(const char *what, uint64_t k, uint32_t source)
{
	fprintf(stderr, "sample %llu, source %u: %s\n", (unsigned long long)k, source, what);
	abort();
}

/* The checks above at sample k of the phase that starts at sample `start`. */
static void check_at(struct probe *pr, uint64_t start, uint64_t k)
{
	const struct sf_mixture *m = pr->m;
	uint64_t sum = 0, index;
	uint32_t s, i;

	sf__mix_counts(m, k, pr->counts);
	sf__mix_counts(m, k + 1, pr->next);
	sf__mix_counts(m, start, pr->start_counts);
	sf__mix_target(m, k, pr->target);
	sf__mix_target(m, start, pr->start_target);
	for (i = 0; i < m->n_sources; i++)
		sum += pr->counts[i];
	if (sum != k)
		broken("the counts do not add up to k", k, 0);
	s = sf__mix_locate(m, k, &index);
	if (s >= m->n_sources)
		broken("located outside the sources", k, s);
	if (pr->counts[s] != index)
		broken("its index is not the source's count before it", k, s);
	for (i = 0; i < m->n_sources; i++) {
		double got = (double)(pr->counts[i] - pr->start_counts[i]);
		double want = pr->target[i] - pr->start_target[i];

		if (pr->next[i] != pr->counts[i] + (i == s))
			broken("the counts after it do not add it to its source", k, i);
		/* Doubles hold the targets to about 2^-52 of k: allow for that. */
		if (fabs(got - want) > pr->bound + 1e-9 + (double)k * 0x1p-50)
			broken("the count since the phase began is beyond the bound", k, i);
	}
}

/* The first samples of the phase `ph`, which spans samples [start, end), one by one. */
static void walk_phase(struct probe *pr, const struct sf_mix_phase *ph, uint64_t start,
		       uint64_t end)
{
	const struct sf_mixture *m = pr->m;
	uint64_t k, index, *run = pr->next;
	uint32_t s, i;

	sf__mix_counts(m, start, run);
	memcpy(pr->start_counts, run, m->n_sources * sizeof(*run));
	for (k = start; k < end && k < start + WALK; k++) {
		s = sf__mix_locate(m, k, &index);
		if (s >= m->n_sources || index != run[s])
			broken("its index is not its source's running count", k, s);
		run[s]++;
		for (i = 0; i < m->n_sources; i++) {
			double share = (double)ph->set.weights[i] / (double)ph->set.total;
			double err = (double)(run[i] - pr->start_counts[i]) -
				     share * (double)(k + 1 - start);

			if (fabs(err) > pr->bound + 1e-9)
				broken("a running count is beyond the phase's bound", k, i);
		}
	}
	sf__mix_counts(m, k, pr->counts);
	if (memcmp(pr->counts, run, m->n_sources * sizeof(*run)))
		broken("the running counts differ from the counts", k, 0);
}

static void check_mixture(const struct sf_mixture *m, const uint8_t *data, size_t size)
{
	const uint64_t G = m->step_samples;
	uint64_t seed = XXH3_64bits(data, size);
	struct probe pr = {.m = m};
	uint32_t p;

	pr.counts = calloc(m->n_sources, sizeof(*pr.counts));
	pr.next = calloc(m->n_sources, sizeof(*pr.next));
	pr.start_counts = calloc(m->n_sources, sizeof(*pr.start_counts));
	pr.target = calloc(m->n_sources, sizeof(*pr.target));
	pr.start_target = calloc(m->n_sources, sizeof(*pr.start_target));
	if (!pr.counts || !pr.next || !pr.start_counts || !pr.target || !pr.start_target)
		abort();
	for (p = 0; p < m->n_phases; p++) {
		const struct sf_mix_phase *ph = &m->phases[p];
		/* Samples beyond 2^62 are not asked for: no run reaches them. */
		const uint64_t limit = UINT64_C(1) << 62;
		uint64_t start, end, k;

		if (ph->first_step > limit / G)
			break;
		start = ph->first_step * G;
		end = ph->end_step == UINT64_MAX || ph->end_step > limit / G ? limit
									     : ph->end_step * G;
		pr.bound = ph->set.bound;
		walk_phase(&pr, ph, start, end);
		/* The phase's first samples and its last ones, as far as they are apart. */
		for (k = start; k < end && k < start + 3; k++)
			check_at(&pr, start, k);
		for (k = end - 3 > start + 3 ? end - 3 : start + 3; k < end; k++)
			check_at(&pr, start, k);
		/* And a few anywhere in it, from the input's hash. */
		for (int j = 0; j < 4; j++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			k = start + (seed >> 1) % (end - start);
			check_at(&pr, start, k);
		}
	}
	free(pr.counts);
	free(pr.next);
	free(pr.start_counts);
	free(pr.target);
	free(pr.start_target);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_mixture *m = NULL;
	struct sf_config cfg;
	struct sf_err e = {0};

	if (sf__config_load_string("fuzz.yaml", (const char *)data, size, &cfg, &e) < 0)
		return 0;
	if (cfg.mixture) {
		if (sf__mixture_from_config(&cfg, &m, &e) < 0) {
			if (!e.msg[0])
				abort();
		} else {
			check_mixture(m, data, size);
			sf__mix_free(m);
		}
	}
	sf__config_free(&cfg);
	return 0;
}
