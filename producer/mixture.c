/*
 * Weight sets, their trees, and phases over steps (producer/mixture.h). All arithmetic on
 * counts is integer (64-bit, 128-bit for products), so no rounding of a float ever moves
 * a sample from one source to another; floats appear only in the reported bound.
 */
#include <errno.h>
#include <float.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "producer/last_at_or_before.h"
#include "producer/mixture.h"
#include "producer/mixture_impl.h"

#define LEAF(i)	       (-(int32_t)(i)-1)
#define IS_LEAF(c)     ((c) < 0)
#define LEAF_SOURCE(c) ((uint32_t)(-(c)-1))

/* floor(P_l c / P_v + 1/2), in 64 bits when the numerator fits. */
static inline uint64_t split(uint64_t pl, uint64_t pv, uint64_t c)
{
	if (c < (UINT64_C(1) << 32) && pl < (UINT64_C(1) << 30))
		return (2 * pl * c + pv) / (2 * pv);
	return (uint64_t)(((u128)2 * pl * c + pv) / ((u128)2 * pv));
}

static inline uint64_t child_weight(const struct sf_mix_set *s, int32_t c)
{
	return IS_LEAF(c) ? s->weights[LEAF_SOURCE(c)] : s->nodes[c].weight;
}

/*
 * The child of node `node` that sample c (0-based, the (c+1)-th to reach the node) goes
 * to, and its index there in *c: one division, since split(c + 1) is split(c) or one
 * more, as the remainder of split(c)'s division tells.
 */
static inline int32_t descend(const struct sf_mix_set *s, const struct sf_mix_node *node,
			      uint64_t *c)
{
	uint64_t pl = child_weight(s, node->child[0]), pv = node->weight, q;
	int went_left;

	if (*c < (UINT64_C(1) << 32) && pl < (UINT64_C(1) << 30)) {
		uint64_t num = 2 * pl * *c + pv, den = 2 * pv;

		q = num / den;
		went_left = num % den + 2 * pl >= den;
	} else {
		u128 num = (u128)2 * pl * *c + pv, den = (u128)2 * pv;

		q = (uint64_t)(num / den);
		went_left = num % den + (u128)2 * pl >= den;
	}
	/* Left: c is its count before, split(c) = q. Right: c - split(c). */
	*c = went_left ? q : *c - q;
	return node->child[went_left ? 0 : 1];
}

static uint64_t entries(const void *t, uint32_t k, uint64_t at, uint64_t r, uint32_t a)
{
	uint64_t c = 0;

	if (entry_size(k) == 2) {
		const uint16_t *e = t;

		for (uint64_t x = at; x < r; x++)
			c += e[x] == a;
	} else {
		const uint8_t *e = t;

		for (uint64_t x = at; x < r; x++)
			c += e[x] == a;
	}
	return c;
}

uint64_t sf__mix_since_mark(const void *t, const uint32_t *marks, uint32_t k, uint32_t stride,
			    uint64_t r, uint32_t a)
{
	const uint64_t at = r - r % stride;

	return marks[at / stride * k + a] + entries(t, k, at, r, a);
}

void sf__mix_add_since_mark(const void *t, const uint32_t *marks, const uint32_t *ranked,
			    uint32_t k, uint32_t stride, uint64_t r, uint64_t *counts)
{
	const uint64_t at = r - r % stride;

	for (uint32_t a = 0; a < k; a++)
		counts[ranked[a]] += marks[at / stride * k + a];
	for (uint64_t x = at; x < r; x++)
		counts[ranked[entry_at(t, k, x)]]++;
}

/* Sample n from the table: its whole periods' counts (a periodic table), then its block's. */
static uint32_t table_locate(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_index)
{
	const uint64_t p = n / s->table_len, r = n % s->table_len;
	const uint32_t a = entry_at(s->period, s->n_ranked, r);

	*ret_index = p * s->weights[s->ranked[a]] +
		     sf__mix_since_mark(s->period, s->marks, s->n_ranked, s->stride, r, a);
	return s->ranked[a];
}

uint32_t sf__mix_set_locate(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_index)
{
	uint64_t c = n; /* samples that reached the node before n's */
	int32_t v = s->root;

	if (s->block && n < SF_MIX_BLOCK_END)
		return sf__mix_block_locate(s, n, ret_index);
	/* A table of a phase's samples only, shorter than a period, serves no more. */
	if (s->period && (s->table_len == s->total || n < s->table_len))
		return table_locate(s, n, ret_index);
	while (!IS_LEAF(v))
		v = descend(s, &s->nodes[v], &c);
	*ret_index = c;
	return LEAF_SOURCE(v);
}

static void counts_below(const struct sf_mix_set *s, int32_t v, uint64_t c, uint64_t *counts)
{
	while (!IS_LEAF(v)) {
		const struct sf_mix_node *node = &s->nodes[v];
		uint64_t l = split(child_weight(s, node->child[0]), node->weight, c);

		counts_below(s, node->child[0], l, counts);
		c -= l;
		v = node->child[1];
	}
	counts[LEAF_SOURCE(v)] = c;
}

void sf__mix_set_counts(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_counts)
{
	if (s->block && n < SF_MIX_BLOCK_END) {
		sf__mix_block_counts(s, n, ret_counts);
		return;
	}
	memset(ret_counts, 0, s->n_sources * sizeof(*ret_counts));
	if (s->period && (s->table_len == s->total || n <= s->table_len)) {
		const uint64_t p = s->table_len == s->total ? n / s->total : 0,
			       r = n - p * s->table_len;

		for (uint32_t a = 0; a < s->n_ranked; a++)
			ret_counts[s->ranked[a]] = p * s->weights[s->ranked[a]];
		sf__mix_add_since_mark(s->period, s->marks, s->ranked, s->n_ranked, s->stride, r,
				       ret_counts);
		return;
	}
	counts_below(s, s->root, n, ret_counts);
}

/* ---- tree shapes ---- */

/* Leaves sorted by weight, heaviest first, ties by source index (a fixed order). */
struct builder {
	struct sf_mix_set *s;
	const uint32_t *order; /* positive-weight sources, sorted */
	const double *cum;     /* cum[i]: the first i sorted weights' sum, to choose shapes */
	uint32_t shape;
};

enum {
	SHAPE_WEIGHT_HALVES,
	SHAPE_POW2_BLOCK,
	SHAPE_COUNT_HALVES,
	SHAPE_HUFFMAN,
	SHAPE_SEARCHED,
	N_SHAPES
};

static int32_t new_node(struct sf_mix_set *s, int32_t l, int32_t r)
{
	int32_t v = (int32_t)s->n_nodes++;

	s->nodes[v].child[0] = l;
	s->nodes[v].child[1] = r;
	s->nodes[v].weight = child_weight(s, l) + child_weight(s, r);
	return v;
}

/* Where to cut the sorted leaves [lo, hi) (hi - lo >= 2) into two subtrees. */
static uint32_t cut(const struct builder *b, uint32_t lo, uint32_t hi)
{
	const uint64_t *w = b->s->weights;
	uint32_t n = hi - lo, best = lo + 1;

	if (b->shape == SHAPE_COUNT_HALVES)
		return lo + n / 2;
	if (b->shape == SHAPE_POW2_BLOCK) {
		uint32_t p = 1;

		while (2 * p < n)
			p *= 2;
		return lo + p;
	}
	{
		/* Weight halves: the prefix whose weight is nearest half the range's. */
		uint64_t total = 0, prefix = 0;
		u128 best_gap = ~(u128)0;

		for (uint32_t i = lo; i < hi; i++)
			total += w[b->order[i]];
		for (uint32_t m = lo + 1; m < hi; m++) {
			u128 gap;

			prefix += w[b->order[m - 1]];
			gap = 2 * (u128)prefix > total ? 2 * (u128)prefix - total
						       : total - 2 * (u128)prefix;
			if (gap < best_gap) {
				best_gap = gap;
				best = m;
			}
		}
	}
	return best;
}

static int32_t build_range(const struct builder *b, uint32_t lo, uint32_t hi)
{
	uint32_t m;

	if (hi - lo == 1)
		return LEAF(b->order[lo]);
	m = cut(b, lo, hi);
	{
		int32_t l = build_range(b, lo, m);
		int32_t r = build_range(b, m, hi);

		return new_node(b->s, l, r);
	}
}

/*
 * The bound proved for the subtree that the fixed shape of `b` builds on [lo, hi) when
 * its root's own error is at most e (see proved_below()).
 */
static double shape_bound(const struct builder *b, uint32_t lo, uint32_t hi, double e)
{
	double wv = b->cum[hi] - b->cum[lo], l, r;
	uint32_t m;

	if (hi - lo == 1)
		return e;
	m = cut(b, lo, hi);
	l = shape_bound(b, lo, m, 0.5 + e * (b->cum[m] - b->cum[lo]) / wv);
	r = shape_bound(b, m, hi, 0.5 + e * (b->cum[hi] - b->cum[m]) / wv);
	return l > r ? l : r;
}

static double best_fixed_bound(const struct builder *b, uint32_t lo, uint32_t hi, double e)
{
	struct builder t = *b;
	double best = 0;

	for (uint32_t shape = 0; shape < SHAPE_HUFFMAN; shape++) {
		double x;

		t.shape = shape;
		x = shape_bound(&t, lo, hi, e);
		best = !shape || x < best ? x : best;
	}
	return best;
}

/*
 * The searched shape: at each node, of every cut of the sorted leaves [lo, hi), the one
 * whose two sides, each in its best fixed shape, give the smallest bound, knowing the
 * node's own error bound e; then the same below each side.
 */
static int32_t build_searched(const struct builder *b, uint32_t lo, uint32_t hi, double e)
{
	double wv = b->cum[hi] - b->cum[lo], best = 0, el = 0, er = 0;
	uint32_t best_m = lo + 1;

	if (hi - lo == 1)
		return LEAF(b->order[lo]);
	for (uint32_t m = lo + 1; m < hi; m++) {
		double l = 0.5 + e * (b->cum[m] - b->cum[lo]) / wv;
		double r = 0.5 + e * (b->cum[hi] - b->cum[m]) / wv;
		double x = best_fixed_bound(b, lo, m, l), y = best_fixed_bound(b, m, hi, r);

		x = x > y ? x : y;
		if (m == lo + 1 || x < best) {
			best = x;
			best_m = m;
			el = l;
			er = r;
		}
	}
	{
		int32_t l = build_searched(b, lo, best_m, el);
		int32_t r = build_searched(b, best_m, hi, er);

		return new_node(b->s, l, r);
	}
}

/* Huffman: merge the two lightest subtrees until one is left (ties: the earlier one). */
static int32_t build_huffman(const struct builder *b, uint32_t n, int32_t *pool)
{
	for (uint32_t i = 0; i < n; i++)
		pool[i] = LEAF(b->order[i]);
	while (n > 1) {
		uint32_t a = 0, c = 1;

		if (child_weight(b->s, pool[c]) < child_weight(b->s, pool[a])) {
			a = 1;
			c = 0;
		}
		for (uint32_t i = 2; i < n; i++) {
			uint64_t wi = child_weight(b->s, pool[i]);

			if (wi < child_weight(b->s, pool[a])) {
				c = a;
				a = i;
			} else if (wi < child_weight(b->s, pool[c])) {
				c = i;
			}
		}
		pool[a < c ? a : c] = new_node(b->s, pool[c], pool[a]);
		pool[a < c ? c : a] = pool[--n];
	}
	return pool[0];
}

/*
 * The bound proved from the tree: a child's error is its own rounding (at most 1/2) plus
 * r times its parent's, r = P_child / P_parent, and the root's is 0. The largest over the
 * leaves.
 */
static double proved_below(const struct sf_mix_set *s, int32_t v, double e)
{
	double worst = 0;

	while (!IS_LEAF(v)) {
		const struct sf_mix_node *node = &s->nodes[v];
		double el =
			0.5 + e * (double)child_weight(s, node->child[0]) / (double)node->weight;
		double er =
			0.5 + e * (double)child_weight(s, node->child[1]) / (double)node->weight;
		double x = proved_below(s, node->child[0], el);

		worst = x > worst ? x : worst;
		v = node->child[1];
		e = er;
	}
	return e > worst ? e : worst;
}

/* The slack of the tree's proved bound (struct sf_mix_set): from the weights where the
 * tree is at most two deep (a leaf under the root: 1/2), else 1 - proved. */
static double tree_slack(const struct sf_mix_set *s, double proved)
{
	double slack = 0.5;

	if (IS_LEAF(s->root))
		return 1;
	for (int c = 0; c < 2; c++) {
		const int32_t v = s->nodes[s->root].child[c];

		for (int k = 0; !IS_LEAF(v) && k < 2; k++) {
			const struct sf_mix_node *node = &s->nodes[v];
			double x;

			if (!IS_LEAF(node->child[k]))
				return 1 - proved;
			x = (double)child_weight(s, node->child[1 - k]) /
			    (2.0 * (double)node->weight);
			slack = x < slack ? x : slack;
		}
	}
	return slack;
}

/*
 * The larger of `worst` and the errors (times Q) of a source of weight P just before and
 * just after its sample at position n (0-based), `idx` of its samples before it.
 */
static i128 sample_errors(i128 worst, uint64_t Q, uint64_t P, uint64_t idx, uint64_t n)
{
	i128 before = (i128)idx * Q - (i128)P * n;
	i128 after = before + Q - P;

	before = before < 0 ? -before : before;
	after = after < 0 ? -after : after;
	worst = before > worst ? before : worst;
	return after > worst ? after : worst;
}

/*
 * The exact largest |count_i(n) - w_i n| over all n: count_v(n + Q) = count_v(n) + P_v
 * for every node (split(c + P_v) = split(c) + P_l), so one period n < Q shows every
 * error there is. Between two samples of source i its error only falls, so its extremes
 * are just before and just after each of its samples.
 */
static double exact_bound(struct sf_mix_set *s)
{
	const uint64_t Q = s->total;
	i128 worst = 0;

	s->walked += Q;
	for (uint64_t n = 0; n < Q; n++) {
		uint64_t idx;
		uint32_t i = sf__mix_set_locate(s, n, &idx);

		worst = sample_errors(worst, Q, s->weights[i], idx, n);
	}
	return (double)worst / (double)Q;
}

static void drop_table(struct sf_mix_set *s)
{
	free(s->period);
	free(s->marks);
	free(s->ranked);
	s->period = NULL;
	s->marks = NULL;
	s->ranked = NULL;
	s->n_ranked = 0;
	s->stride = 0;
	s->table_len = 0;
}

/* A position (1-based), saturated: windows of very light sources open far past a table. */
static inline uint64_t position(u128 v)
{
	return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/*
 * Whether x's window ends before y's, exactly: (c_x b + a) / P_x < (c_y b + a) / P_y; on
 * a tie the heavier, then the lower source, which is the lower rank. (Counts below 2^24,
 * b below 2^14 for up to 8,192 sources, weights below 2^62: 128 bits hold the products.)
 */
static bool due_first(const struct edf *e, uint32_t x, uint32_t y)
{
	u128 l = (u128)((uint64_t)e->count[x] * e->b + e->a) * e->w[y],
	     r = (u128)((uint64_t)e->count[y] * e->b + e->a) * e->w[x];

	return l != r ? l < r : x < y;
}

/*
 * Source x's next window, for its sample j = count + 1 (positions 1-based): it opens at
 * ceil((j b - a) Q / (b P)) and is due by floor(((j - 1) b + a) Q / (b P)) + 1. Returns
 * whether the window is empty and would close within the table's `len` positions.
 */
static bool edf_window(struct edf *e, uint32_t x, uint64_t len)
{
	const u128 bp = (u128)e->b * e->w[x];

	e->opens[x] = position((((u128)(e->count[x] + 1) * e->b - e->a) * e->Q + bp - 1) / bp);
	e->due[x] = position(((u128)e->count[x] * e->b + e->a) * e->Q / bp + 1);
	return e->opens[x] > e->due[x] && e->due[x] < len;
}

uint32_t sf__mix_stride(uint64_t len, uint32_t k, uint64_t bytes)
{
	for (uint32_t stride = SF_MIX_TABLE_STRIDE; stride <= SF_MIX_TABLE_STRIDE_MAX; stride *= 2)
		if (len * entry_size(k) + (len / stride + 1) * k * sizeof(uint32_t) <= bytes)
			return stride;
	return 0;
}

/*
 * The first `len` positions of the earliest-deadline assignment with every error within
 * sigma = 1 - 1/(2k - 2) for k sources (Tijdeman, "The chairman assignment problem",
 * 1980): the j-th sample of source i is due in the window of positions t (1-based) where
 * |count_i - w_i t| <= sigma holds before and after it (edf_window()), and each position
 * goes to the source whose open window ends first (due_first()). With len = Q, one whole
 * period, after which the pattern repeats. `stride` from sf__mix_stride(). Returns 0,
 * -ENOMEM, or 1 when a position found no open window or a window closed unserved (kept
 * as the tree then).
 */
static int build_table(struct sf_mix_set *s, const uint32_t *order, uint32_t k, uint64_t len,
		       uint32_t stride, double *ret_bound)
{
	const uint64_t n_marks = len / stride + 1;
	struct edf e = {.Q = s->total, .b = 2 * (uint64_t)k - 2};
	uint64_t *w = malloc(k * sizeof(*w));
	i128 worst = 0;
	int r = -ENOMEM;

	e.a = e.b - 1;
	e.w = w;
	e.count = calloc(k, sizeof(*e.count));
	e.opens = malloc(k * sizeof(*e.opens));
	e.due = malloc(k * sizeof(*e.due));
	e.ready = malloc(k * sizeof(*e.ready));
	e.waiting = malloc(k * sizeof(*e.waiting));
	s->period = malloc(len * entry_size(k));
	s->marks = malloc(n_marks * k * sizeof(*s->marks));
	s->ranked = malloc(k * sizeof(*s->ranked));
	if (!w || !e.count || !e.opens || !e.due || !e.ready || !e.waiting || !s->period ||
	    !s->marks || !s->ranked)
		goto out;
	memcpy(s->ranked, order, k * sizeof(*order));
	s->n_ranked = k;
	s->stride = stride;
	s->table_len = len;
	r = 1;
	for (uint32_t x = 0; x < k; x++) {
		w[x] = s->weights[order[x]];
		if (edf_window(&e, x, len))
			goto out;
		edf_push(&e, e.waiting, &e.n_waiting, x, opens_first);
	}
	for (uint64_t t = 1; t <= len; t++) {
		uint32_t best;

		if ((t - 1) % stride == 0)
			memcpy(s->marks + (t - 1) / stride * k, e.count, k * sizeof(*e.count));
		while (e.n_waiting && e.opens[e.waiting[0]] <= t)
			edf_push(&e, e.ready, &e.n_ready,
				 edf_pop(&e, e.waiting, &e.n_waiting, opens_first), due_first);
		/* The open window that ends first: no window open, or that one closed
		 * already (it ends first of all the open ones), and the table fails. */
		if (!e.n_ready || e.due[e.ready[0]] < t)
			goto out;
		best = edf_pop(&e, e.ready, &e.n_ready, due_first);
		entry_put(s->period, k, t - 1, best);
		worst = sample_errors(worst, e.Q, w[best], e.count[best], t - 1);
		e.count[best]++;
		if (edf_window(&e, best, len))
			goto out;
		edf_push(&e, e.waiting, &e.n_waiting, best, opens_first);
	}
	/* The counts after the last position, for sf__mix_set_counts(s, len). */
	if (len % stride == 0)
		memcpy(s->marks + len / stride * k, e.count, k * sizeof(*e.count));
	/* A whole period ends where it began. In a shorter table a source's error falls
	 * after its last sample, to the end: measured there too. */
	for (uint32_t x = 0; x < k; x++) {
		i128 end = (i128)e.count[x] * e.Q - (i128)w[x] * len;

		if (len == e.Q && end != 0)
			goto out;
		end = end < 0 ? -end : end;
		worst = end > worst ? end : worst;
	}
	s->walked += len;
	*ret_bound = (double)worst / (double)e.Q;
	r = 0;
out:
	free(w);
	free(e.count);
	free(e.opens);
	free(e.due);
	free(e.ready);
	free(e.waiting);
	if (r != 0)
		drop_table(s);
	return r;
}

static int cmp_order(const void *a, const void *b, void *arg)
{
	const uint64_t *w = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (w[x] != w[y])
		return w[x] > w[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

int sf__mix_set_init(struct sf_mix_set *s, const uint64_t *weights, uint32_t n,
		     uint64_t exact_limit, uint32_t search_limit, uint64_t span)
{
	struct builder b = {.s = s};
	uint32_t *order = NULL, n_pos = 0;
	int32_t *pool = NULL;
	struct sf_mix_node *trial = NULL;
	double *cum = NULL;
	uint64_t total = 0, len;
	uint32_t stride;
	double best = 0;
	uint32_t best_nodes = 0;
	int32_t best_root = 0;
	int best_shape = -1, r = -ENOMEM;

	memset(s, 0, sizeof(*s));
	for (uint32_t i = 0; i < n; i++) {
		if (weights[i] > SF_MIX_MAX_TOTAL - total)
			return -EINVAL;
		total += weights[i];
		n_pos += weights[i] != 0;
	}
	if (!total)
		return -EINVAL;
	s->n_sources = n;
	s->total = total;
	s->weights = malloc(n * sizeof(*s->weights));
	order = malloc(n * sizeof(*order));
	pool = malloc(n * sizeof(*pool));
	s->nodes = malloc((n_pos ? n_pos : 1) * sizeof(*s->nodes));
	trial = malloc((n_pos ? n_pos : 1) * sizeof(*trial));
	cum = malloc((n_pos + 1) * sizeof(*cum));
	if (!s->weights || !order || !pool || !s->nodes || !trial || !cum)
		goto out;
	memcpy(s->weights, weights, n * sizeof(*weights));
	n_pos = 0;
	for (uint32_t i = 0; i < n; i++)
		if (weights[i])
			order[n_pos++] = i;
	qsort_r(order, n_pos, sizeof(*order), cmp_order, s->weights);
	b.order = order;
	cum[0] = 0;
	for (uint32_t i = 0; i < n_pos; i++)
		cum[i + 1] = cum[i] + (double)s->weights[order[i]];
	b.cum = cum;

	/* Every shape, its proved bound; then exact bounds, smallest proved first, while
	 * none is below 1 and the period is short enough to walk. */
	for (int shape = 0; shape < N_SHAPES; shape++) {
		double bound, proved, slack;
		uint32_t exact = 0;

		if (shape == SHAPE_SEARCHED && n_pos > search_limit)
			continue;
		s->n_nodes = 0;
		b.shape = (uint32_t)shape;
		s->root = shape == SHAPE_HUFFMAN    ? build_huffman(&b, n_pos, pool)
			  : shape == SHAPE_SEARCHED ? build_searched(&b, 0, n_pos, 0)
						    : build_range(&b, 0, n_pos);
		proved = proved_below(s, s->root, 0);
		bound = proved;
		slack = tree_slack(s, proved);
		if (proved >= 1 && total <= exact_limit) {
			bound = exact_bound(s);
			slack = 1 - bound;
			exact = 1;
		}
		/* Equal bounds: the exact one, or the one whose slack shows it lower. */
		if (best_shape < 0 || bound < best ||
		    (bound == best && ((exact && !s->exact) || slack > s->slack))) {
			best = bound;
			best_shape = shape;
			s->exact = exact;
			s->slack = slack;
			memcpy(trial, s->nodes, s->n_nodes * sizeof(*trial));
			best_nodes = s->n_nodes;
			best_root = s->root;
		}
	}
	s->n_nodes = best_nodes;
	s->root = best_root;
	memcpy(s->nodes, trial, s->n_nodes * sizeof(*trial));
	/* An exact bound below 1 needs no walk; report it when the walk is cheap. */
	if (!s->exact && total <= exact_limit) {
		s->bound = exact_bound(s);
		s->slack = 1 - s->bound;
		s->exact = 1;
	} else {
		s->bound = best;
	}
	/* No tree below 1: a table of one period, or of the samples served where fewer, if
	 * it does better. */
	len = span < total ? span : total;
	stride =
		len && len <= SF_MIX_TABLE_MAX ? sf__mix_stride(len, n_pos, SF_MIX_TABLE_BYTES) : 0;
	if (s->bound >= 1 && stride) {
		double bound;

		r = build_table(s, order, n_pos, len, stride, &bound);
		if (r < 0)
			goto out;
		if (r == 0 && bound < s->bound) {
			s->bound = bound;
			s->slack = 1 - bound;
			s->exact = 1;
		} else if (r == 0) {
			drop_table(s);
		}
	}
	/* Still none below 1: blocks, where the sources but the lightest are heavy enough. */
	if (s->bound >= 1 && !s->period) {
		r = sf__mix_block_init(s, order, n_pos);
		if (r < 0)
			goto out;
		if (r == 0) {
			/* 1 - 1/Q, which a double rounds to 1 above Q = 2^53: then the largest
			 * double below 1. */
			const double below = (double)(total - 1) / (double)total;

			s->bound = below < 1 ? below : 1 - DBL_EPSILON / 2;
			s->slack = 1 / (double)total;
			s->exact = 0;
		}
	}
	r = 0;
out:
	free(order);
	free(pool);
	free(trial);
	free(cum);
	if (r < 0)
		sf__mix_set_free(s);
	return r;
}

void sf__mix_set_free(struct sf_mix_set *s)
{
	if (s->shared) {
		memset(s, 0, sizeof(*s));
		return;
	}
	free(s->weights);
	free(s->nodes);
	drop_table(s);
	memset(s, 0, sizeof(*s));
}

/* ---- phases ---- */

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/*
 * Stage u of S of a ramp from A (total QA) to B (total QB): the weights at the stage's
 * midpoint, A (2S - 2u - 1) / 2S + B (2u + 1) / 2S, as integers over QA QB 2S, divided by
 * their common factor. -EINVAL when they do not fit SF_MIX_MAX_TOTAL.
 */
static int stage_weights(const uint64_t *a, const uint64_t *bw, uint32_t n, uint32_t u, uint32_t S,
			 uint64_t *out)
{
	u128 qa = 0, qb = 0, total = 0;
	uint64_t g = 0;

	for (uint32_t i = 0; i < n; i++) {
		qa += a[i];
		qb += bw[i];
	}
	for (uint32_t i = 0; i < n; i++) {
		/* Each product of two weights is checked before it is scaled (by at most
		 * 2 x 1024), so that nothing wraps: a term of 2^64 or more is refused anyway. */
		const u128 x = (u128)a[i] * qb, y = (u128)bw[i] * qa;
		u128 v;

		if (x >> 64 || y >> 64)
			return -EINVAL;
		v = x * (2 * (u128)S - 2 * u - 1) + y * (2 * (u128)u + 1);
		total += v;
		if (v >> 64 || total >> 64)
			return -EINVAL;
		out[i] = (uint64_t)v;
		g = gcd64(g, out[i]);
	}
	if (!g)
		return -EINVAL;
	total = 0;
	for (uint32_t i = 0; i < n; i++) {
		out[i] /= g;
		total += out[i];
	}
	return total > SF_MIX_MAX_TOTAL ? -EINVAL : 0;
}

/* A ramp's stages when its phase does not say: one per step, at most 1024, and at most
 * 65536 / sources (see SF_MIX_MAX_STAGES). */
static uint32_t default_stages(uint32_t n_sources)
{
	uint32_t cap = 65536u / (n_sources ? n_sources : 1);

	cap = cap ? cap : 1;
	return cap < SF_MIX_MAX_STAGES ? cap : SF_MIX_MAX_STAGES;
}

/* Exact bounds are walked for constant phases of totals up to this (about 10 ms a walk at a
 * few sources; a phase may walk once per candidate shape). */
#define EXACT_LIMIT (UINT64_C(1) << 20)

/* The samples a phase serves: UINT64_MAX for an open one (or more than 64 bits count). */
static uint64_t phase_samples(const struct sf_mix_phase *ph, uint64_t G)
{
	u128 n = (u128)(ph->end_step - ph->first_step) * G;

	return ph->end_step == UINT64_MAX || n > UINT64_MAX ? UINT64_MAX : (uint64_t)n;
}

/*
 * An earlier constant phase's set of weights `w` that serves `samples` samples as well as
 * one of its own would (a tree below 1, which no table replaces; a table of a whole
 * period; a phase's table at least that long), or NULL. A schedule that comes back to the
 * same weights, phase after phase, builds and walks them once, not until the walk budget
 * is spent.
 */
static const struct sf_mix_set *same_set(const struct sf_mixture *m, const uint64_t *w,
					 uint64_t samples)
{
	for (uint32_t p = 0; p < m->n_phases; p++) {
		const struct sf_mix_set *s = &m->phases[p].set;

		if (!memcmp(s->weights, w, m->n_sources * sizeof(*w)) &&
		    (s->block || (s->period ? s->table_len == s->total || s->table_len >= samples
					    : s->bound < 1)))
			return s;
	}
	return NULL;
}

int sf__mix_create(const struct sf_mix_phase_spec *spec, uint32_t n_phases, uint32_t n_sources,
		   uint64_t G, struct sf_mixture **ret_m, const char **why)
{
	struct sf_mixture *m = calloc(1, sizeof(*m));
	uint64_t *scratch = malloc(n_sources * sizeof(*scratch));
	uint64_t first = 0, walked = 0;
	uint32_t total_phases = 0;
	int r = -ENOMEM;

	*why = "out of memory";
	if (!m || !scratch)
		goto fail;
	for (uint32_t p = 0; p < n_phases; p++) {
		uint64_t len = spec[p].end_step - first;

		if (spec[p].end_step <= first ||
		    (spec[p].end_step == UINT64_MAX && p + 1 < n_phases)) {
			*why = "phases must end in increasing steps, only the last without an end";
			r = -EINVAL;
			goto fail;
		}
		if (!spec[p].ramp_to) {
			total_phases++;
		} else {
			uint32_t S = spec[p].stages ? spec[p].stages : default_stages(n_sources);

			if (spec[p].end_step == UINT64_MAX) {
				*why = "a ramp needs an end step";
				r = -EINVAL;
				goto fail;
			}
			total_phases += len < S ? (uint32_t)len : S;
		}
		first = spec[p].end_step;
	}
	m->n_sources = n_sources;
	m->step_samples = G;
	m->phases = calloc(total_phases, sizeof(*m->phases));
	m->before = calloc((size_t)total_phases * n_sources, sizeof(*m->before));
	if (!m->phases || !m->before)
		goto fail;
	first = 0;
	for (uint32_t p = 0; p < n_phases; p++) {
		uint64_t len = spec[p].end_step - first;
		uint32_t S = 1;

		if (spec[p].ramp_to) {
			S = spec[p].stages ? spec[p].stages : default_stages(n_sources);
			S = len < S ? (uint32_t)len : S;
		}
		for (uint32_t u = 0; u < S; u++) {
			struct sf_mix_phase *ph = &m->phases[m->n_phases];
			const struct sf_mix_set *same;
			const uint64_t *w = spec[p].weights;

			if (spec[p].ramp_to) {
				r = stage_weights(spec[p].weights, spec[p].ramp_to, n_sources, u, S,
						  scratch);
				if (r < 0) {
					*why = "the ramp's weights are too precise to cut into "
					       "stages exactly; give fewer digits or fewer stages";
					goto fail;
				}
				w = scratch;
				ph->first_step = first + (uint64_t)((u128)len * u / S);
				ph->end_step = first + (uint64_t)((u128)len * (u + 1) / S);
			} else {
				ph->first_step = first;
				ph->end_step = spec[p].end_step;
			}
			same = spec[p].ramp_to ? NULL : same_set(m, w, phase_samples(ph, G));
			if (same) {
				ph->set = *same;
				ph->set.shared = 1;
				ph->set.walked = 0;
				r = 0;
			} else {
				r = sf__mix_set_init(
					&ph->set, w, n_sources,
					spec[p].ramp_to || walked >= SF_MIX_WALK_BUDGET
						? 0
						: EXACT_LIMIT,
					spec[p].ramp_to ? SF_MIX_SEARCH_MAX_STAGE
							: SF_MIX_SEARCH_MAX,
					walked >= SF_MIX_WALK_BUDGET ? 0 : phase_samples(ph, G));
			}
			if (r < 0) {
				*why = r == -EINVAL ? "a phase's weights are all zero or too large"
						    : "out of memory";
				goto fail;
			}
			walked += ph->set.walked;
			ph->before = m->before + (size_t)m->n_phases * n_sources;
			if (m->n_phases) {
				const struct sf_mix_phase *prev = ph - 1;
				uint64_t n = (prev->end_step - prev->first_step) * G;

				sf__mix_set_counts(&prev->set, n, scratch);
				for (uint32_t i = 0; i < n_sources; i++)
					ph->before[i] = prev->before[i] + scratch[i];
			}
			m->n_phases++;
		}
		first = spec[p].end_step;
	}
	free(scratch);
	*ret_m = m;
	return 0;
fail:
	free(scratch);
	sf__mix_free(m);
	return r;
}

void sf__mix_free(struct sf_mixture *m)
{
	if (!m)
		return;
	for (uint32_t p = 0; p < m->n_phases; p++)
		sf__mix_set_free(&m->phases[p].set);
	free(m->phases);
	free(m->before);
	free(m);
}

/* The phase holding global sample k: the last that starts at or before its step. */
static const struct sf_mix_phase *phase_of(const struct sf_mixture *m, uint64_t k)
{
	return &m->phases[sf__last_at_or_before(m->phases, m->n_phases, sizeof(m->phases[0]),
						offsetof(struct sf_mix_phase, first_step),
						k / m->step_samples)];
}

uint32_t sf__mix_locate(const struct sf_mixture *m, uint64_t k, uint64_t *ret_index)
{
	const struct sf_mix_phase *ph = phase_of(m, k);
	uint64_t idx;
	uint32_t i = sf__mix_set_locate(&ph->set, k - ph->first_step * m->step_samples, &idx);

	*ret_index = ph->before[i] + idx;
	return i;
}

void sf__mix_counts(const struct sf_mixture *m, uint64_t k, uint64_t *ret_counts)
{
	const struct sf_mix_phase *ph = phase_of(m, k);

	sf__mix_set_counts(&ph->set, k - ph->first_step * m->step_samples, ret_counts);
	for (uint32_t i = 0; i < m->n_sources; i++)
		ret_counts[i] += ph->before[i];
}

void sf__mix_target(const struct sf_mixture *m, uint64_t k, double *ret_target)
{
	const struct sf_mix_phase *last = phase_of(m, k);

	for (uint32_t i = 0; i < m->n_sources; i++)
		ret_target[i] = 0;
	for (const struct sf_mix_phase *ph = m->phases; ph <= last; ph++) {
		uint64_t n = ph < last ? (ph->end_step - ph->first_step) * m->step_samples
				       : k - ph->first_step * m->step_samples;

		for (uint32_t i = 0; i < m->n_sources; i++)
			ret_target[i] +=
				(double)((long double)ph->set.weights[i] * n / ph->set.total);
	}
}

uint64_t sf__mix_end_step(const struct sf_mixture *m)
{
	return m->phases[m->n_phases - 1].end_step;
}

double sf__mix_bound(const struct sf_mixture *m, uint32_t *ret_exact, double *ret_slack)
{
	double worst = 0, slack = 1;
	uint32_t exact = 1;

	for (uint32_t p = 0; p < m->n_phases; p++) {
		const struct sf_mix_set *s = &m->phases[p].set;

		worst = s->bound > worst ? s->bound : worst;
		slack = s->slack < slack ? s->slack : slack;
		exact &= s->exact;
	}
	*ret_exact = exact;
	*ret_slack = slack;
	return worst;
}
