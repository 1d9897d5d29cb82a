/*
 * Blocks: the assignment of a weight set that no tree keeps within 1 of its targets and
 * whose period is too long for a table (docs/mixtures.md, "Blocks").
 *
 * The positions are cut into blocks of L samples, L at least Q / (the second lightest
 * weight). At each block's edge T = bL the counts are a pure function of T (cut_at()): each
 * source has floor(w_i T) samples or one more, and the sources one above are chosen so
 * that the samples before the edge could all have been placed in their windows
 * (|count_i - w_i t| < 1 at every position t) and the samples after it still can: a
 * matroid greedy over the sources whose next sample's window spans the edge. Inside a
 * block, the earliest-deadline assignment goes from one edge's counts to the next's.
 * Every count stays within 1 - 1/Q of its target (proved in the docs).
 *
 * A block is built when first asked for, in O(L log k + k^2) for k sources, by the thread
 * that asks, and kept in that thread's cache: a producer reading its samples in order
 * builds each block once. All arithmetic on positions is integer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/mixture_impl.h"

/* One thread's block, and the scratch that builds it. */
struct block_cache {
	uint64_t id, b; /* the set and the block held (id 0: none) */
	void *pos;	/* the block's entries */
	uint32_t *marks; /* each source's count since the block's start, every stride-th entry */
	/* Per source, cap_k each: the counts at the block's two edges; the remainder of w T
	 * and, for a source whose next sample's window spans the edge, how far back it opened
	 * and how far on it closes; Q / P and Q mod P; a window's floor and remainder, its
	 * opening and its deadline; the counts while the block fills. */
	uint64_t *start, *end, *rem, *ago, *pdue, *qq, *rr, *fq, *gq, *gr, *opens, *due, *cnt;
	void *arrays; /* the one allocation they are in (start and end trade places) */
	int64_t *room;	       /* per distinct deadline of the spanning windows */
	uint32_t *pend, *by_due; /* the spanning sources, by opening and by deadline */
	uint32_t *ready, *waiting;
	unsigned char *in; /* one above floor(w_i T) */
	uint32_t cap_k;
	uint64_t cap_pos, cap_marks;
};

static atomic_uint_fast64_t next_id = 1;
static _Thread_local struct block_cache *mine;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static bool cache_keyed;

static void free_arrays(struct block_cache *c)
{
	free(c->arrays);
	free(c->pos);
	free(c->marks);
}

/* At a thread's exit. */
static void cache_free(void *p)
{
	struct block_cache *c = p;

	free_arrays(c);
	free(c);
	if (mine == c)
		mine = NULL;
}

static void cache_key_make(void)
{
	cache_keyed = pthread_key_create(&cache_key, cache_free) == 0;
}

static _Noreturn void die(const char *what)
{
	fprintf(stderr, "shmfeed: mixture blocks: %s\n", what);
	abort();
}

/* This thread's cache, sized for k sources, `len` entries and `n_marks` marks. */
static struct block_cache *cache(uint32_t k, uint64_t len, uint64_t n_marks)
{
	struct block_cache *c = mine;

	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c)
			die("out of memory");
		mine = c;
		pthread_once(&cache_once, cache_key_make);
		if (cache_keyed)
			pthread_setspecific(cache_key, c);
	}
	if (k > c->cap_k) {
		/* 13 arrays of 64-bit integers, one of signed, four of 32-bit, one of bytes */
		unsigned char *m = malloc((size_t)k * (14 * 8 + 4 * 4 + 1));
		uint64_t **u64[] = {&c->start, &c->end, &c->rem, &c->ago,   &c->pdue,
				    &c->qq,    &c->rr,	 &c->fq,  &c->gq,    &c->gr,
				    &c->opens, &c->due,	 &c->cnt};
		uint32_t **u32[] = {&c->pend, &c->by_due, &c->ready, &c->waiting};

		if (!m)
			die("out of memory");
		free(c->arrays);
		c->arrays = m;
		for (size_t i = 0; i < sizeof(u64) / sizeof(u64[0]); i++, m += (size_t)k * 8)
			*u64[i] = (uint64_t *)(void *)m;
		c->room = (int64_t *)(void *)m;
		m += (size_t)k * 8;
		for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++, m += (size_t)k * 4)
			*u32[i] = (uint32_t *)(void *)m;
		c->in = m;
		c->cap_k = k;
		c->id = 0;
	}
	if (len * entry_size(k) > c->cap_pos) {
		free(c->pos);
		c->pos = malloc(len * entry_size(k));
		if (!c->pos)
			die("out of memory");
		c->cap_pos = len * entry_size(k);
		c->id = 0;
	}
	if (n_marks * k > c->cap_marks) {
		free(c->marks);
		c->marks = malloc(n_marks * k * sizeof(*c->marks));
		if (!c->marks)
			die("out of memory");
		c->cap_marks = n_marks * k;
		c->id = 0;
	}
	return c;
}

static bool due_before(const struct edf *e, uint32_t x, uint32_t y)
{
	return e->due[x] != e->due[y] ? e->due[x] < e->due[y] : x < y;
}

/* The spanning sources whose window opened first, further back; ties by rank. */
static int by_opening(const void *a, const void *b, void *arg)
{
	const struct block_cache *c = arg;
	const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (c->ago[x] != c->ago[y])
		return c->ago[x] > c->ago[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int by_deadline(const void *a, const void *b, void *arg)
{
	const struct block_cache *c = arg;
	const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (c->pdue[x] != c->pdue[y])
		return c->pdue[x] < c->pdue[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* j Q / P as floor *q and remainder *r, to (j + 1) Q / P: Q / P = qq, Q mod P = rr. */
static inline void next_multiple(uint64_t *q, uint64_t *r, uint64_t qq, uint64_t rr, uint64_t P)
{
	*q += qq;
	*r += rr;
	if (*r >= P) {
		(*q)++;
		*r -= P;
	}
}

/* The sample due first in rooms()'s heap falls due: its source's next one (ceil(j Q / P),
 * kept as floor fq and remainder gr, relative to the edge) takes its place. */
static inline void fall_due(const struct sf_mix_set *s, struct block_cache *c, struct edf *e)
{
	const uint32_t x = edf_pop(e, e->waiting, &e->n_waiting, due_before);

	next_multiple(&c->fq[x], &c->gr[x], c->qq[x], c->rr[x], s->weights[s->ranked[x]]);
	c->due[x] = c->fq[x] + (c->gr[x] != 0);
	edf_push(e, e->waiting, &e->n_waiting, x, due_before);
}

/*
 * The room after the edge T for the n_p spanning samples, per distinct deadline d_g among
 * them (ascending): over every t >= d_g, the fewest of positions T+1 .. T+t that the
 * samples due there that do not span the edge leave free (past the last d_g every count
 * is within its share). fl: floor(w_i T) per source.
 */
static void rooms(const struct sf_mix_set *s, struct block_cache *c, uint64_t T,
		  const uint64_t *fl, uint32_t n_p)
{
	const uint32_t k = s->n_ranked;
	const uint64_t Q = s->total;
	struct edf e = {.due = c->due, .waiting = c->waiting};
	uint64_t taken = 0;
	uint32_t g = 0, n_s = n_p;

	for (uint32_t x = 0; x < k; x++) {
		const uint64_t P = s->weights[s->ranked[x]];
		/* Its first sample after the edge that does not span it. */
		const u128 v = (u128)(fl[x] + 1 + (c->rem[x] != 0)) * Q;

		c->fq[x] = (uint64_t)(v / P - T);
		c->gr[x] = (uint64_t)(v % P);
		c->due[x] = c->fq[x] + (c->gr[x] != 0);
		edf_push(&e, e.waiting, &e.n_waiting, x, due_before);
	}
	/*
	 * A spanning sample due more than a block after the edge is the lightest source's
	 * (every other one is due within Q / P <= L): past the other deadlines the room is
	 * at least the number of untaken spanning samples, so none binds it (docs).
	 */
	if (n_p && c->pdue[c->by_due[n_p - 1]] > s->block)
		n_s--;
	for (uint32_t i = 0; i < n_s;) {
		const uint64_t d = c->pdue[c->by_due[i]];
		uint64_t until;
		int64_t low;

		while (i < n_s && c->pdue[c->by_due[i]] == d)
			i++;
		until = i < n_s ? c->pdue[c->by_due[i]] : d + 1;
		for (; c->due[e.waiting[0]] <= d; taken++)
			fall_due(s, c, &e);
		low = (int64_t)d - (int64_t)taken;
		/* Between two deadlines the room is lowest just after samples fall due. */
		while (c->due[e.waiting[0]] < until) {
			const uint64_t t = c->due[e.waiting[0]];

			for (; c->due[e.waiting[0]] == t; taken++)
				fall_due(s, c, &e);
			low = (int64_t)t - (int64_t)taken < low ? (int64_t)t - (int64_t)taken : low;
		}
		c->room[g++] = low;
	}
	for (uint32_t h = g; h-- > 1;)
		c->room[h - 1] = c->room[h] < c->room[h - 1] ? c->room[h] : c->room[h - 1];
	if (n_s < n_p)
		c->room[g] = INT64_MAX;
}

/*
 * Whether the `size` spanning sources marked in c->in complete to r marked ones whose
 * unmarked rest can all be placed after the edge: the r - size missing are the unmarked
 * ones due first; then at most room[g] unmarked ones are due by each distinct deadline.
 */
static bool completes(const struct block_cache *c, uint32_t n_p, uint64_t r, uint64_t size)
{
	uint64_t add = r - size, late = 0;
	uint32_t g = 0;

	for (uint32_t i = 0; i < n_p; i++) {
		const uint32_t x = c->by_due[i];

		if (!c->in[x]) {
			if (add)
				add--;
			else
				late++;
		}
		if (i + 1 == n_p || c->pdue[c->by_due[i + 1]] != c->pdue[x]) {
			if ((int64_t)late > c->room[g])
				return false;
			g++;
		}
	}
	return true;
}

/*
 * The counts at the edge T (before position T + 1, 1-based), per ranked source, into A.
 * Source i has floor(w_i T), or one more where its next sample's window spans the edge
 * and the greedy below takes it: r = sum of the fractional parts of w_i T of them are
 * one more. Those left after the edge must fit the room there (completes()); among the
 * sets that do, the spanning sources are taken in the order their windows opened, so
 * that every set of the latest-opened ones holds as few taken ones as any such set can
 * (the greedy basis of a matroid): the samples before the edge then fit their windows
 * whenever any choice's do, and one does (the earliest-deadline assignment's from the
 * start). Returns 0, or -1 where no choice was found (which the proof rules out).
 */
static int cut_at(const struct sf_mix_set *s, struct block_cache *c, uint64_t T, uint64_t *A)
{
	const uint32_t k = s->n_ranked;
	const uint64_t Q = s->total;
	u128 sum = 0;
	uint64_t r, taken = 0;
	uint32_t n_p = 0;

	for (uint32_t x = 0; x < k; x++) {
		const uint64_t P = s->weights[s->ranked[x]];
		const u128 v = (u128)P * T;

		A[x] = (uint64_t)(v / Q);
		c->rem[x] = (uint64_t)(v % Q);
		c->qq[x] = Q / P;
		c->rr[x] = Q % P;
		c->in[x] = 0;
		sum += c->rem[x];
		if (!c->rem[x])
			continue;
		/* Its sample A + 1 opened at floor(A Q / P) + 1 <= T and is due by
		 * ceil((A + 1) Q / P) > T. */
		c->ago[x] = T - (uint64_t)((u128)A[x] * Q / P) - 1;
		c->pdue[x] = (uint64_t)(((u128)(A[x] + 1) * Q + P - 1) / P - T);
		c->pend[n_p] = x;
		c->by_due[n_p++] = x;
	}
	r = (uint64_t)(sum / Q);
	if (!n_p)
		return 0;
	qsort_r(c->pend, n_p, sizeof(*c->pend), by_opening, c);
	qsort_r(c->by_due, n_p, sizeof(*c->by_due), by_deadline, c);
	rooms(s, c, T, A, n_p);
	for (uint32_t i = 0; i < n_p && taken < r; i++) {
		c->in[c->pend[i]] = 1;
		if (completes(c, n_p, r, taken + 1))
			taken++;
		else
			c->in[c->pend[i]] = 0;
	}
	if (taken != r)
		return -1;
	for (uint32_t x = 0; x < k; x++)
		A[x] += c->in[x];
	return 0;
}

/* Source x's window for its sample cnt + 1 in the block [T + 1, T + L]: it opens after
 * floor(cnt Q / P) (fq) and is due by ceil((cnt + 1) Q / P) (gq, gr), cut to the block. */
static inline void window(struct block_cache *c, uint32_t x, uint64_t T, uint64_t L)
{
	const uint64_t due = c->gq[x] + (c->gr[x] != 0);

	c->opens[x] = c->fq[x] + 1 > T ? c->fq[x] + 1 - T : 1;
	c->due[x] = due <= T ? 0 : due - T < L ? due - T : L;
}

/* Block [T + 1, T + L] from c->start to c->end, earliest deadline first. Returns 0, or -1
 * where a window closed unserved (which the proof rules out). */
static int fill(const struct sf_mix_set *s, struct block_cache *c, uint64_t T)
{
	const uint32_t k = s->n_ranked, stride = s->stride;
	const uint64_t Q = s->total, L = s->block;
	struct edf e = {.opens = c->opens, .due = c->due, .ready = c->ready, .waiting = c->waiting};

	for (uint32_t x = 0; x < k; x++) {
		const uint64_t P = s->weights[s->ranked[x]];
		const u128 v = (u128)c->start[x] * Q;

		c->cnt[x] = c->start[x];
		if (c->cnt[x] == c->end[x])
			continue;
		c->fq[x] = (uint64_t)(v / P);
		c->gq[x] = (uint64_t)((v + Q) / P);
		c->gr[x] = (uint64_t)((v + Q) % P);
		window(c, x, T, L);
		edf_push(&e, e.waiting, &e.n_waiting, x, opens_first);
	}
	for (uint64_t t = 1; t <= L; t++) {
		uint32_t x;

		if ((t - 1) % stride == 0)
			for (uint32_t y = 0; y < k; y++)
				c->marks[(t - 1) / stride * k + y] = (uint32_t)(c->cnt[y] - c->start[y]);
		while (e.n_waiting && c->opens[e.waiting[0]] <= t)
			edf_push(&e, e.ready, &e.n_ready,
				 edf_pop(&e, e.waiting, &e.n_waiting, opens_first), due_before);
		if (!e.n_ready || c->due[e.ready[0]] < t)
			return -1;
		x = edf_pop(&e, e.ready, &e.n_ready, due_before);
		entry_put(c->pos, k, t - 1, x);
		if (++c->cnt[x] == c->end[x])
			continue;
		c->fq[x] = c->gq[x];
		next_multiple(&c->gq[x], &c->gr[x], c->qq[x], c->rr[x], s->weights[s->ranked[x]]);
		window(c, x, T, L);
		edf_push(&e, e.waiting, &e.n_waiting, x, opens_first);
	}
	for (uint32_t x = 0; x < k; x++)
		if (c->cnt[x] != c->end[x])
			return -1;
	return 0;
}

/* Block b of set s, in this thread's cache. */
static const struct block_cache *block_of(const struct sf_mix_set *s, uint64_t b)
{
	const uint64_t L = s->block, T = b * L;
	struct block_cache *c = cache(s->n_ranked, L, L / s->stride + 1);

	if (c->id == s->id && c->b == b)
		return c;
	if (c->id == s->id && c->b + 1 == b) {
		uint64_t *t = c->start;

		c->start = c->end;
		c->end = t;
	} else if (cut_at(s, c, T, c->start) < 0) {
		die("no counts at a block's edge (a bug: docs/mixtures.md proves there are)");
	}
	c->id = 0;
	if (cut_at(s, c, T + L, c->end) < 0)
		die("no counts at a block's edge (a bug: docs/mixtures.md proves there are)");
	if (fill(s, c, T) < 0)
		die("a sample missed its window (a bug: docs/mixtures.md proves none does)");
	c->id = s->id;
	c->b = b;
	return c;
}

int sf__mix_block_init(struct sf_mix_set *s, const uint32_t *order, uint32_t k)
{
	uint64_t len;
	uint32_t stride;

	/* The lightest source may be lighter than 1 / L (docs); its windows' ends must stay
	 * below 2^64 past SF_MIX_BLOCK_END. L is set by the second lightest. */
	if (k < 2 || s->total / s->weights[order[k - 1]] >= SF_MIX_BLOCK_LIGHT_MAX)
		return 1;
	len = (s->total - 1) / s->weights[order[k - 2]] + 1;
	len = len < SF_MIX_BLOCK_MIN ? SF_MIX_BLOCK_MIN : len;
	stride = len <= SF_MIX_BLOCK_MAX ? sf__mix_stride(len, k, SF_MIX_BLOCK_BYTES) : 0;
	if (!stride)
		return 1;
	s->ranked = malloc(k * sizeof(*s->ranked));
	if (!s->ranked)
		return -ENOMEM;
	memcpy(s->ranked, order, k * sizeof(*order));
	s->n_ranked = k;
	s->stride = stride;
	s->block = len;
	s->id = atomic_fetch_add(&next_id, 1);
	return 0;
}

uint32_t sf__mix_block_locate(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_index)
{
	const struct block_cache *c = block_of(s, n / s->block);
	const uint64_t r = n % s->block;
	const uint32_t a = entry_at(c->pos, s->n_ranked, r);

	*ret_index =
		c->start[a] + sf__mix_since_mark(c->pos, c->marks, s->n_ranked, s->stride, r, a);
	return s->ranked[a];
}

void sf__mix_block_counts(const struct sf_mix_set *s, uint64_t n, uint64_t *ret_counts)
{
	const uint32_t k = s->n_ranked;
	const uint64_t r = n % s->block, b = n / s->block;
	const struct block_cache *c;

	memset(ret_counts, 0, s->n_sources * sizeof(*ret_counts));
	if (!r) {
		/* At an edge: the held block's start or end, else the cut alone (no fill). */
		struct block_cache *h = cache(k, s->block, s->block / s->stride + 1);
		const uint64_t *at = h->id != s->id  ? NULL
				     : h->b == b     ? h->start
				     : h->b + 1 == b ? h->end
						     : NULL;

		if (!at && cut_at(s, h, n, h->cnt) < 0)
			die("no counts at a block's edge (a bug: docs/mixtures.md proves there "
			    "are)");
		for (uint32_t a = 0; a < k; a++)
			ret_counts[s->ranked[a]] = at ? at[a] : h->cnt[a];
		return;
	}
	c = block_of(s, b);
	for (uint32_t a = 0; a < k; a++)
		ret_counts[s->ranked[a]] = c->start[a];
	sf__mix_add_since_mark(c->pos, c->marks, s->ranked, k, s->stride, r, ret_counts);
}
