/*
 * The windows order of raw text over a span of chunks. Epoch e of the span visits its
 * chunks in the order of a keyed bijection of [0, n_chunks) (seed, epoch e, tweak 1);
 * within the chunk at position i, the windows whose first token lies in it are taken
 * together, in the order of a bijection of their count keyed by (seed, e, 2 + the
 * chunk's index in the span). So sample j is found without state, and the samples that
 * follow each other share a chunk, which a producer then tokenizes once for them all.
 *
 * Finding the position whose windows hold sample j needs the running sum of window
 * counts along the epoch's chunk order: a per-process table keeps it at every
 * EPOCH_STRIDE-th position, for the two epochs used last.
 */
#include <errno.h>
#include <stdlib.h>

#include "producer/dataset_impl.h"
#include "producer/last_at_or_before.h"
#include "producer/sampler.h"
#include "producer/text_order.h"

/*
 * Where the windows of an epoch's chunk positions begin, kept for one position in
 * EPOCH_STRIDE only: a lookup binary-searches these and walks at most EPOCH_STRIDE - 1
 * positions on from one (a Feistel evaluation and an index read each). 1 TB of text in
 * 64 KiB chunks takes 2 MiB per table, against the index's 24 bytes per chunk.
 */
#define EPOCH_STRIDE 64u

struct epoch_table {
	uint64_t epoch;
	int valid;
	struct sf_perm order; /* the epoch's chunk order */
	uint64_t *prefix;     /* windows before position j * EPOCH_STRIDE, j < n_chunks / STRIDE */
	/* The position found last, which the next samples mostly fall in again: its chunk
	 * (in the span), the chunk's first window, and the order of the chunk's windows. */
	uint64_t last_pos, last_start, last_count, last_chunk, last_first;
	struct sf_perm last_windows;
	int last_valid;
};

struct sf_text_order {
	const struct sf_dataset *ds;
	struct sf_text_span span;
	struct epoch_table epochs[2];
	uint32_t next_epoch_slot;
};

int sf__text_order_create(const struct sf_dataset *ds, const struct sf_text_span *span,
			  struct sf_text_order **ret_o, struct sf_err *e)
{
	struct sf_text_order *o = calloc(1, sizeof(*o));
	const uint64_t strides = (span->n_chunks + EPOCH_STRIDE - 1) / EPOCH_STRIDE;

	if (!o)
		return sf__err(e, -ENOMEM, "out of memory");
	o->ds = ds;
	o->span = *span;
	for (int i = 0; i < 2; i++) {
		o->epochs[i].prefix = malloc((strides ? strides : 1) * sizeof(uint64_t));
		if (!o->epochs[i].prefix) {
			sf__text_order_free(o);
			return sf__err(e, -ENOMEM, "out of memory");
		}
	}
	*ret_o = o;
	return 0;
}

void sf__text_order_free(struct sf_text_order *o)
{
	if (!o)
		return;
	for (int i = 0; i < 2; i++)
		free(o->epochs[i].prefix);
	free(o);
}

/* Windows of the span whose first token lies in its chunk `chunk` (an index in the
 * span): [*ret_first, +count). */
static uint64_t chunk_windows(const struct sf_text_order *o, uint64_t chunk, uint64_t *ret_first)
{
	const struct sf_chunk *ch = &o->ds->chunks[o->span.first_chunk + chunk];
	const uint64_t T = o->ds->seq_len, rel = ch->start - o->span.start;
	uint64_t first = (rel + T - 1) / T, end = (rel + ch->n_tokens + T - 1) / T;

	if (end > o->span.n_windows)
		end = o->span.n_windows;
	*ret_first = first;
	return end > first ? end - first : 0;
}

static struct epoch_table *epoch_table(struct sf_text_order *o, uint64_t epoch)
{
	const uint64_t n = o->span.n_chunks;
	struct epoch_table *t;
	uint64_t sum = 0;

	for (int i = 0; i < 2; i++)
		if (o->epochs[i].valid && o->epochs[i].epoch == epoch)
			return &o->epochs[i];
	/* Two tables: a batch may straddle an epoch boundary, and producers alternate. */
	t = &o->epochs[o->next_epoch_slot];
	o->next_epoch_slot ^= 1;
	sf__perm_init(&t->order, n, o->span.seed, epoch, 1);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t first;

		if (i % EPOCH_STRIDE == 0)
			t->prefix[i / EPOCH_STRIDE] = sum;
		sum += chunk_windows(o, sf__perm_apply(&t->order, i), &first);
	}
	t->epoch = epoch;
	t->valid = 1;
	t->last_valid = 0;
	return t;
}

/* Make position `i` of the epoch's chunk order, whose windows start at `start`, the
 * table's last position; returns its window count. */
static uint64_t set_last(const struct sf_text_order *o, struct epoch_table *t, uint64_t i,
			 uint64_t start)
{
	t->last_pos = i;
	t->last_start = start;
	t->last_chunk = sf__perm_apply(&t->order, i);
	t->last_count = chunk_windows(o, t->last_chunk, &t->last_first);
	t->last_valid = 1;
	return t->last_count;
}

/*
 * Find the position of the epoch's chunk order whose windows hold `pos` and make it the
 * table's last. Positions are walked from the last position, when `pos` lies past its
 * windows but before the next table entry (consecutive samples do), else from the last
 * table entry at or before `pos`: at most EPOCH_STRIDE - 1 steps either way (positions of
 * chunks without windows are passed over).
 */
static void find_position(const struct sf_text_order *o, struct epoch_table *t, uint64_t pos)
{
	const uint64_t n = o->span.n_chunks, n_strides = (n + EPOCH_STRIDE - 1) / EPOCH_STRIDE;
	uint64_t i, at, next;

	if (t->last_valid && pos >= t->last_start + t->last_count && t->last_pos + 1 < n &&
	    ((next = (t->last_pos + 1) / EPOCH_STRIDE + 1) >= n_strides || pos < t->prefix[next])) {
		i = t->last_pos + 1;
		at = t->last_start + t->last_count;
	} else {
		uint64_t lo = sf__last_at_or_before(t->prefix, n_strides, sizeof(t->prefix[0]), 0,
						    pos);

		i = lo * EPOCH_STRIDE;
		at = t->prefix[lo];
	}
	for (;; i++) {
		uint64_t count = set_last(o, t, i, at);

		if (pos - at < count)
			return;
		at += count;
	}
}

uint64_t sf__text_order_offset(struct sf_text_order *o, uint64_t j, uint64_t *ret_key)
{
	const struct sf_text_span *s = &o->span;
	const uint64_t epoch = j / s->n_windows, pos = j % s->n_windows;
	struct epoch_table *t = epoch_table(o, epoch);

	if (!t->last_valid || pos < t->last_start || pos - t->last_start >= t->last_count) {
		find_position(o, t, pos);
		sf__perm_init(&t->last_windows, t->last_count, s->seed, epoch, 2 + t->last_chunk);
	}
	if (ret_key)
		*ret_key = epoch * s->n_chunks + t->last_pos;
	return s->start + (t->last_first + sf__perm_apply(&t->last_windows, pos - t->last_start)) *
				  o->ds->seq_len;
}
