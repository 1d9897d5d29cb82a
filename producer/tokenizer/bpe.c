/*
 * Byte pair merging with tiktoken's semantics (byte_pair_merge in its src/lib.rs): start
 * from single bytes, and repeatedly merge the adjacent pair whose concatenation has the
 * lowest rank, the leftmost one on a tie, until no adjacent pair is in the vocabulary.
 * Short pieces use tiktoken's own loop (a rescan of the parts after each merge, fastest
 * for a handful of bytes); long ones keep the parts in a linked list and the candidate
 * pairs in a binary heap ordered by (rank, start), which picks the same pair every step
 * in O(log n) instead of O(n).
 */
#include <errno.h>
#include <stdlib.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"

/* A part whose bytes are not a token can only come from a vocabulary missing a byte. */
static int emit(const struct sf_tok_ranks *r, const uint8_t *s, size_t len, uint32_t *out)
{
	uint32_t rank = sf__tok_rank(r, s, len);

	if (rank == SF_RANK_NONE)
		return SF_E_TOKENIZER;
	*out = rank;
	return 0;
}

/*
 * A part of a short piece: where it starts, its own rank (known once it has been merged:
 * it is the rank of the pair that made it) and the rank of it joined with the next part.
 * Keeping the three together makes a merge one memmove and the output a copy.
 */
struct part {
	uint32_t start;
	uint32_t rank;
	uint32_t pair;
};

int sf__bpe_short(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		  size_t *ret_n)
{
	struct part p[SF_BPE_SHORT_MAX + 1];
	size_t parts = len, i, best;
	uint32_t min;

	for (i = 0; i < len; i++) {
		p[i].start = (uint32_t)i;
		p[i].rank = r->byte_rank[piece[i]];
		p[i].pair = i + 1 < len ? r->pair_rank[piece[i] << 8 | piece[i + 1]] : SF_RANK_NONE;
	}
	p[len].start = (uint32_t)len;

	/* `parts` counts the parts; p[parts] only marks the end of the last one. */
	for (;;) {
		/*
		 * The leftmost lowest pair. Written without a branch on the comparison, which
		 * the compiler turns into conditional moves: on text the branch is a coin toss.
		 */
		min = SF_RANK_NONE;
		best = 0;
		for (i = 0; i + 1 < parts; i++) {
			bool lower = p[i].pair < min;

			min = lower ? p[i].pair : min;
			best = lower ? i : best;
		}
		if (min == SF_RANK_NONE)
			break;
		/* Part best + 1 joins part best; then the two pairs touching it change. */
		p[best].rank = min;
		parts--;
		memmove(p + best + 1, p + best + 2, (parts - best) * sizeof(*p));
		if (best > 0)
			p[best - 1].pair = sf__tok_rank(r, piece + p[best - 1].start,
							p[best + 1].start - p[best - 1].start);
		p[best].pair = best + 1 < parts ? sf__tok_rank(r, piece + p[best].start,
							       p[best + 2].start - p[best].start)
						: SF_RANK_NONE;
	}
	for (i = 0; i < parts; i++) {
		if (p[i].rank == SF_RANK_NONE)
			return SF_E_TOKENIZER;
		out[i] = p[i].rank;
	}
	*ret_n = parts;
	return 0;
}

static void heap_push(uint64_t *heap, size_t *n, uint64_t key)
{
	size_t i = (*n)++;

	while (i > 0 && heap[(i - 1) / 2] > key) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = key;
}

static uint64_t heap_pop(uint64_t *heap, size_t *n)
{
	uint64_t top = heap[0], last = heap[--(*n)];
	size_t i = 0, child;

	while ((child = 2 * i + 1) < *n) {
		if (child + 1 < *n && heap[child + 1] < heap[child])
			child++;
		if (heap[child] >= last)
			break;
		heap[i] = heap[child];
		i = child;
	}
	heap[i] = last;
	return top;
}

/* The rank of node i joined with its successor, given that the successor is not the end. */
static uint32_t pair_rank(const struct sf_tok_ranks *r, const struct sf_bpe_node *nodes,
			  const uint8_t *piece, uint32_t i, uint32_t end_node)
{
	uint32_t j = nodes[i].next;

	if (j == end_node)
		return SF_RANK_NONE;
	return sf__tok_rank(r, piece + nodes[i].start, nodes[nodes[j].next].start - nodes[i].start);
}

static int grow(struct sf_tok_encoder *enc, size_t len)
{
	struct sf_bpe_node *nodes;
	uint64_t *heap;
	size_t cap;

	if (len <= enc->bpe_cap)
		return 0;
	cap = enc->bpe_cap ? enc->bpe_cap : 1024;
	while (cap < len)
		cap *= 2;
	nodes = realloc(enc->nodes, (cap + 1) * sizeof(*nodes));
	if (!nodes)
		return -ENOMEM;
	enc->nodes = nodes;
	/* Each merge pushes at most two pairs, on top of the len - 1 initial ones. */
	heap = realloc(enc->heap, 3 * cap * sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	enc->heap = heap;
	enc->bpe_cap = cap;
	return 0;
}

int sf__bpe_heap(struct sf_tok_encoder *enc, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n)
{
	const struct sf_tok_ranks *r = &enc->tok->ranks;
	struct sf_bpe_node *nodes;
	uint64_t *heap;
	size_t n_heap = 0, n_out = 0;
	uint32_t i, end = (uint32_t)len;
	int rc;

	rc = grow(enc, len);
	if (rc < 0)
		return rc;
	nodes = enc->nodes;
	heap = enc->heap;

	/* Node i starts as byte i; node len marks the end and is never merged. */
	for (i = 0; i <= end; i++) {
		nodes[i].start = i;
		nodes[i].prev = i - 1;
		nodes[i].next = i + 1;
	}
	for (i = 0; i < end; i++) {
		nodes[i].pair_rank = pair_rank(r, nodes, piece, i, end);
		if (nodes[i].pair_rank != SF_RANK_NONE)
			heap_push(heap, &n_heap, (uint64_t)nodes[i].pair_rank << 32 | i);
	}
	nodes[end].pair_rank = SF_RANK_NONE;

	while (n_heap) {
		uint64_t key = heap_pop(heap, &n_heap);
		uint32_t rank = (uint32_t)(key >> 32), j;

		i = (uint32_t)key;
		/*
		 * Entries are not removed when a pair changes, so skip stale ones. A node's pair
		 * only ever grows longer and a rank names one byte string, so an entry whose
		 * rank still matches its node is current; a merged-away node has no rank.
		 */
		if (nodes[i].pair_rank != rank)
			continue;
		j = nodes[i].next;
		nodes[i].next = nodes[j].next;
		nodes[nodes[j].next].prev = i;
		nodes[j].pair_rank = SF_RANK_NONE;

		nodes[i].pair_rank = pair_rank(r, nodes, piece, i, end);
		if (nodes[i].pair_rank != SF_RANK_NONE)
			heap_push(heap, &n_heap, (uint64_t)nodes[i].pair_rank << 32 | i);
		if (i > 0) {
			uint32_t p = nodes[i].prev;

			nodes[p].pair_rank = pair_rank(r, nodes, piece, p, end);
			if (nodes[p].pair_rank != SF_RANK_NONE)
				heap_push(heap, &n_heap, (uint64_t)nodes[p].pair_rank << 32 | p);
		}
	}

	for (i = 0; i != end; i = nodes[i].next)
		if (emit(r, piece + i, nodes[nodes[i].next].start - i, out + n_out++) < 0)
			return SF_E_TOKENIZER;
	*ret_n = n_out;
	return 0;
}
