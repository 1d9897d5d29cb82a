/*
 * Data mixtures: which source global sample k comes from, and which of that source's
 * samples it is, as a pure function of the mixture and k, in time and memory that do not
 * grow with k (O(number of sources) per call). Only a weight set that no tree keeps
 * within 1 of its targets, and whose period is short, keeps a table of that period.
 *
 * A weight set holds one non-negative integer weight P_i per source (the config's
 * decimal weights scaled to integers; w_i = P_i / Q with Q = sum P_i). Its sources hang
 * as leaves of a binary tree; internal node v of weight P_v passes the first c samples
 * that reach it to its left child l as split(c) = floor(P_l c / P_v + 1/2) and the rest to
 * its right child. split() is monotone with steps of 0 or 1, so every prefix of a node's
 * samples divides between its children; the count of source i among the first n samples
 * is the count its leaf receives when the root receives n. See docs/mixtures.md for the
 * bound this gives and how the tree is chosen.
 *
 * A mixture is a list of phases over training steps, each with its own weight set; a
 * linear ramp between two weight sets is cut into constant stages. A phase counts its
 * samples from its own first step; each source's index continues where the earlier
 * phases left it (a table of phases x sources integers, built once).
 */
#ifndef SF_PRODUCER_MIXTURE_H
#define SF_PRODUCER_MIXTURE_H

#include <stdint.h>

/* Largest total weight Q of a weight set: keeps 2 * P * c below 2^127 for any count. */
#define SF_MIX_MAX_TOTAL (UINT64_C(1) << 62)

/*
 * The default and largest number of constant stages a ramp is cut into; by default also
 * at most 65536 / sources, since each stage builds a tree (O(sources^2) for the fixed
 * shapes: about 90 ms per stage at 4096 sources here).
 */
#define SF_MIX_MAX_STAGES 1024u

/* An internal node: its weight and two children (>= 0: a node; < 0: source -(c + 1)). */
struct sf_mix_node {
	uint64_t weight;
	int32_t child[2];
};

/* One constant weight set and its tree. Read-only after sf__mix_set_init(). */
struct sf_mix_set {
	uint32_t n_sources;
	int32_t root;	   /* as a child: a node index or a leaf */
	uint64_t total;	   /* Q */
	uint64_t *weights; /* P_i, n_sources of them */
	struct sf_mix_node *nodes;
	/* The largest |count_i(n) - w_i n| over all n and i: exact when `exact` (checked over
	 * one whole period of Q samples, after which the pattern repeats), else the bound
	 * proved from the tree (docs/mixtures.md). */
	double bound;
	/* 1 - bound, where a double would round it: for a tree of depth 2 at most the
	 * smallest of w_sibling / (2 W_parent) over its leaves, from the weights, so that a
	 * bound of 1 - 5e-19 (weights 10^18 apart) is not 1; 1 - bound otherwise. Above 0:
	 * below 1 (docs/mixtures.md). */
	double slack;
	uint32_t exact;
	uint32_t n_nodes;
	uint64_t walked; /* samples walked to find exact bounds (sf__mix_set_init's cost) */
	/* Where no tree is below 1: the earliest-deadline assignment instead (docs/mixtures.md)
	 * over one period (table_len = Q: it repeats) or over the samples the set serves
	 * (table_len < Q, at most SF_MIX_TABLE_MAX), as the source of each position (period[n]
	 * indexes `ranked`, the sources of weight > 0: one byte each, two (uint16_t) where
	 * they are more than 256) and each of those sources' counts before every stride-th
	 * position (`marks`, n_ranked per mark). NULL: the tree decides. */
	void *period;
	uint32_t *marks;
	uint32_t *ranked;
	uint32_t n_ranked;
	uint32_t stride;
	uint64_t table_len;
	/* Where neither a tree below 1 nor a table serves: blocks of `block` samples
	 * (docs/mixtures.md), each built when first asked for by the thread that asks and
	 * kept in that thread's cache under `id`; `ranked` and `stride` as for a table. 0: no
	 * blocks. */
	uint64_t block;
	uint64_t id;
	/* A copy of an earlier phase's set of the same weights, whose arrays it shares:
	 * sf__mix_set_free() leaves them to that one. */
	uint32_t shared;
	uint32_t pad;
};

/* The longest table, and the most memory it takes (positions, 1 or 2 bytes each, and
 * marks of every source's count: the stride between marks doubles from
 * SF_MIX_TABLE_STRIDE up to SF_MIX_TABLE_STRIDE_MAX until they fit). Built in
 * O(positions x log sources) time: about a second for 2^24 positions here. */
#define SF_MIX_TABLE_MAX	(UINT64_C(1) << 24)
#define SF_MIX_TABLE_BYTES	(UINT64_C(1) << 25)
#define SF_MIX_TABLE_STRIDE	256u
#define SF_MIX_TABLE_STRIDE_MAX 4096u

/*
 * Blocks: at least SF_MIX_BLOCK_MIN samples, and at least Q / (the second lightest
 * weight), so that every source but the lightest has a sample in each; at most
 * SF_MIX_BLOCK_MAX, whose entries and marks take at most SF_MIX_BLOCK_BYTES in each
 * thread that asks (a set with two lighter sources keeps its tree, as does one whose
 * lightest source has less than 1 / SF_MIX_BLOCK_LIGHT_MAX of the weight). Built in
 * O(block x log sources + sources^2).
 */
#define SF_MIX_BLOCK_MIN       (UINT64_C(1) << 12)
#define SF_MIX_BLOCK_MAX       (UINT64_C(1) << 22)
#define SF_MIX_BLOCK_BYTES     (UINT64_C(1) << 23)
#define SF_MIX_BLOCK_LIGHT_MAX (UINT64_C(1) << 62)

/* Blocks serve positions below this (no run reaches 2^63 samples: 292 years at 10^9 a
 * second); at and past it, where a block's far edge could pass 2^64, the set's tree
 * answers (its bound holds there, not the blocks'). */
#define SF_MIX_BLOCK_END (UINT64_C(1) << 63)

/*
 * A mixture's constant phases walk their periods for exact bounds only while the phases
 * before have walked fewer samples than this in all (a second or so): a schedule of many
 * phases takes the proved bounds of the later ones rather than minutes to load.
 */
#define SF_MIX_WALK_BUDGET (UINT64_C(1) << 24)

/* The searched tree shape costs O(k^4) time to build: for up to this many sources (about
 * 35 ms at 64 here), and fewer in ramp stages, which build one tree each. */
#define SF_MIX_SEARCH_MAX	64u
#define SF_MIX_SEARCH_MAX_STAGE 16u

/*
 * sf__mix_set_init - the tree for integer weights `weights[0..n)` (not all zero, total at
 * most SF_MIX_MAX_TOTAL): of a few candidate shapes, the one with the smallest bound;
 * the searched shape among them when at most `search_limit` sources weigh more than 0.
 * A total up to `exact_limit` is checked exactly over its period. `span` is how many
 * samples the set serves (UINT64_MAX: without end; 0: build no table): where the bound
 * is 1 or more, a table of the earliest-deadline assignment over one period, or over the
 * `span` samples where fewer (at most SF_MIX_TABLE_MAX positions and SF_MIX_TABLE_BYTES
 * of memory), replaces the tree when its exact bound is smaller. Only
 * n < span samples are asked of such a set (counts up to n = span). Returns 0, -EINVAL
 * for weights all zero or too large, or -ENOMEM. Free with sf__mix_set_free().
 */
int sf__mix_set_init(struct sf_mix_set *s, const uint64_t *weights, uint32_t n,
		     uint64_t exact_limit, uint32_t search_limit, uint64_t span);

/* sf__mix_set_free - free what sf__mix_set_init() allocated; accepts a zeroed set. */
void sf__mix_set_free(struct sf_mix_set *s);

/*
 * sf__mix_set_locate - the source of the sample at position n (0-based) of the set's
 * stream, and in *ret_index how many samples of that source came before it: O(tree
 * depth), or O(the table's stride, 256 to 4096) with a table.
 */
uint32_t sf__mix_set_locate(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_index);

/* sf__mix_set_counts - the count of each source among the first n samples. */
void sf__mix_set_counts(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_counts);

/* One phase as the config gives it. */
struct sf_mix_phase_spec {
	uint64_t end_step;	 /* the phase ends before this step; UINT64_MAX: never (last) */
	const uint64_t *weights; /* n_sources integers */
	const uint64_t *ramp_to; /* NULL: constant; else a linear ramp to these weights */
	uint32_t stages;	 /* ramp: constant stages (0: one per step, at most 1024) */
};

struct sf_mix_phase {
	uint64_t first_step;
	uint64_t end_step; /* UINT64_MAX: open */
	uint64_t *before;  /* per source: its samples in the phases before this one */
	struct sf_mix_set set;
};

struct sf_mixture {
	uint32_t n_sources;
	uint32_t n_phases;
	uint64_t step_samples; /* G, global samples per step */
	struct sf_mix_phase *phases;
	uint64_t *before; /* n_phases x n_sources */
};

/*
 * sf__mix_create - the mixture of `n_phases` phases over `n_sources` sources with `G`
 * samples per step. Phases are in order, each ending after the one before; only the last
 * may be open. Returns 0 and *ret_m (free with sf__mix_free()), -EINVAL with the reason in
 * `why` (a short phrase), or -ENOMEM.
 */
int sf__mix_create(const struct sf_mix_phase_spec *phases, uint32_t n_phases, uint32_t n_sources,
		   uint64_t G, struct sf_mixture **ret_m, const char **why);

/* sf__mix_free - accepts NULL. */
void sf__mix_free(struct sf_mixture *m);

/*
 * sf__mix_locate - the source of global sample k and, in *ret_index, its index among the
 * samples of that source (counted over all phases). O(log phases + tree depth).
 */
uint32_t sf__mix_locate(const struct sf_mixture *m, uint64_t k, uint64_t *ret_index);

/* sf__mix_counts - each source's count among the first k global samples. */
void sf__mix_counts(const struct sf_mixture *m, uint64_t k, uint64_t *ret_counts);

/*
 * sf__mix_target - each source's expected count among the first k global samples: the
 * sum over the phases of weight x samples in that phase (what the counts stay within one
 * of, phase by phase).
 */
void sf__mix_target(const struct sf_mixture *m, uint64_t k, double *ret_target);

/* sf__mix_end_step - the step after the last phase, or UINT64_MAX when it is open. */
uint64_t sf__mix_end_step(const struct sf_mixture *m);

/* sf__mix_bound - the largest bound (struct sf_mix_set) over the phases; *ret_exact: 1
 * when every phase's bound is exact; *ret_slack: the smallest slack. */
double sf__mix_bound(const struct sf_mixture *m, uint32_t *ret_exact, double *ret_slack);

#endif
