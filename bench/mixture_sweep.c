/*
 * How exact mixtures are beyond what is proved: for random weight vectors of a phase
 * without end, the bound the loader finds (producer/mixture.h): its best tree shape's,
 * exact over a whole period where the period Q is at most EXACT_LIMIT, else proved from
 * the tree; the period table's, exact, where the tree's is 1 or more and the table fits
 * (producer/mixture.h: Q at most SF_MIX_TABLE_MAX, its memory SF_MIX_TABLE_BYTES); else
 * the blocks', 1 - 1/Q, proved, where the lightest source is heavy enough. Four
 * families of weights in turn: uniform in 1..1000, uniform in 1..10^6, one source of 10^6
 * with the others in 1..100, and mostly 1..10 with a quarter of them up to 10^5.
 *
 * usage: mixture_sweep TRIALS MIN_SOURCES SPAN [EXACT_LIMIT]   (sources in
 * [MIN_SOURCES, MIN_SOURCES + SPAN), at most 4096; EXACT_LIMIT default 2^20)
 */
#include <stdio.h>
#include <stdlib.h>

#include "producer/mixture.h"

int main(int argc, char **argv)
{
	unsigned seed = 7;
	int trials, over = 0, exact = 0, blocks = 0;
	uint32_t lo, span;
	uint64_t limit = UINT64_C(1) << 20;
	double worst = 0;

	if (argc < 4 || (trials = atoi(argv[1])) < 1 || (lo = (uint32_t)atoi(argv[2])) < 2 ||
	    (span = (uint32_t)atoi(argv[3])) < 1 || lo + span - 1 > 4096) {
		fprintf(stderr, "usage: mixture_sweep TRIALS MIN_SOURCES SPAN [EXACT_LIMIT]\n");
		return 2;
	}
	if (argc > 4)
		limit = strtoull(argv[4], NULL, 10);
	for (int t = 0; t < trials; t++) {
		uint32_t n = lo + (uint32_t)rand_r(&seed) % span;
		static uint64_t w[4096];
		struct sf_mix_set s;

		for (uint32_t i = 0; i < n; i++) {
			switch (t % 4) {
			case 0:
				w[i] = 1 + (uint64_t)rand_r(&seed) % 1000;
				break;
			case 1:
				w[i] = 1 + (uint64_t)rand_r(&seed) % 1000000;
				break;
			case 2:
				w[i] = i == 0 ? 1000000 : 1 + (uint64_t)rand_r(&seed) % 100;
				break;
			default:
				w[i] = 1 + (uint64_t)(rand_r(&seed) % 4 == 0
							      ? rand_r(&seed) % 100000
							      : rand_r(&seed) % 10);
			}
		}
		if (sf__mix_set_init(&s, w, n, limit, SF_MIX_SEARCH_MAX, UINT64_MAX) < 0)
			return 1;
		if (s.bound >= 1) {
			over++;
			printf("%u sources, bound %.6f (%s), Q %llu:", n, s.bound,
			       s.exact ? "exact" : "proved", (unsigned long long)s.total);
			for (uint32_t i = 0; i < n; i++)
				printf(" %llu", (unsigned long long)w[i]);
			printf("\n");
		}
		exact += (int)s.exact;
		blocks += s.block != 0;
		worst = s.bound > worst ? s.bound : worst;
		sf__mix_set_free(&s);
	}
	printf("%d mixtures of %u-%u sources: %d with a bound of 1 or more, %d bounds exact, "
	       "%d in blocks, worst %.9f\n",
	       trials, lo, lo + span - 1, over, exact, blocks, worst);
	return 0;
}
