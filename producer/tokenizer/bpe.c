/*
 * Byte pair merging with tiktoken's semantics (byte_pair_merge in its src/lib.rs): start
 * from single bytes, and repeatedly merge the adjacent pair whose concatenation has the
 * lowest rank, the leftmost one on a tie, until no adjacent pair is in the vocabulary.
 * Three ways to find that pair, chosen by the length of the piece:
 *  - up to SF_BPE_SCAN_MAX bytes, tiktoken's own loop: rescan the parts after each merge
 *    (fastest for a handful of bytes);
 *  - up to SF_BPE_SHORT_MAX, a tournament tree over the parts, on the stack;
 *  - longer, a linked list of parts and a binary heap of candidate pairs ordered by
 *    (rank, start), in the encoder's scratch.
 * All three pick the same pair at every step; the tests compare them.
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

/* The rank of a join of at least 3 bytes; `padded`: 8 bytes can be read at s (tok_impl.h). */
static inline __attribute__((always_inline)) uint32_t
joined(const struct sf_tok_ranks *r, const uint8_t *s, size_t len, bool padded)
{
	return padded ? sf__tok_rank_joined_8(r, s, len) : sf__tok_rank_joined(r, s, len);
}

/* Each merge loop below is built twice, with `padded` a constant. */
static inline __attribute__((always_inline)) int scan(const struct sf_tok_ranks *r,
						      const uint8_t *piece, size_t len,
						      uint32_t *out, size_t *ret_n, bool padded)
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
			p[best - 1].pair = joined(r, piece + p[best - 1].start,
						  p[best + 1].start - p[best - 1].start, padded);
		p[best].pair = best + 1 < parts ? joined(r, piece + p[best].start,
							 p[best + 2].start - p[best].start, padded)
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

int sf__bpe_scan(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n, bool padded)
{
	return padded ? scan(r, piece, len, out, ret_n, true)
		      : scan(r, piece, len, out, ret_n, false);
}

/*
 * Pieces of more than SF_BPE_SCAN_MAX bytes (up to SF_BPE_SHORT_MAX) keep their candidate
 * pairs in a tournament tree instead, since rescanning all parts after every merge costs
 * more than the tree once there are more than a dozen: leaf i holds (rank << 32 | i) for the part
 * that starts at byte i and its successor, so the root is the leftmost lowest pair, as the scan
 * finds it, and each merge updates three leaves in O(log n) instead of rescanning. The parts are a
 * linked list over their first bytes. The tree has exactly one leaf per byte, at t[len + i],
 * and node k is the smaller of t[2k] and t[2k + 1]: every index from 2 up is some node's
 * child, so the root t[1] is the smallest leaf for any len, not only a power of two.
 */
#define TREE_NONE ((uint64_t)SF_RANK_NONE << 32)

static inline void tree_set(uint64_t *t, size_t size, size_t i, uint64_t v)
{
	i += size;
	t[i] = v;
	/*
	 * v climbs as the minimum of the nodes it passes: each level reads only the sibling,
	 * never a node this walk has just stored, so the loads of one walk do not wait for
	 * each other. A node whose minimum stays the same leaves everything above it the
	 * same too.
	 */
	for (; i > 1; i >>= 1) {
		uint64_t sibling = t[i ^ 1];

		v = v < sibling ? v : sibling;
		if (t[i >> 1] == v)
			break;
		t[i >> 1] = v;
	}
}

static inline __attribute__((always_inline)) int tree(const struct sf_tok_ranks *r,
						      const uint8_t *piece, size_t len,
						      uint32_t *out, size_t *ret_n, bool padded)
{
	uint64_t t[2 * SF_BPE_SHORT_MAX];
	uint32_t next[SF_BPE_SHORT_MAX + 1], prev[SF_BPE_SHORT_MAX + 1];
	uint32_t rank[SF_BPE_SHORT_MAX];
	size_t size = len, i, n = 0;

	for (i = 0; i < len; i++) {
		uint32_t pair =
			i + 1 < len ? r->pair_rank[piece[i] << 8 | piece[i + 1]] : SF_RANK_NONE;

		next[i] = (uint32_t)i + 1;
		prev[i] = (uint32_t)i - 1;
		rank[i] = r->byte_rank[piece[i]];
		t[size + i] = (uint64_t)pair << 32 | i;
	}
	for (i = size - 1; i; i--)
		t[i] = t[2 * i] < t[2 * i + 1] ? t[2 * i] : t[2 * i + 1];

	while ((t[1] >> 32) != SF_RANK_NONE) {
		uint32_t a = (uint32_t)t[1], b = next[a], c = next[b];

		/* Part b joins part a; then the pairs of a and of its predecessor change. */
		rank[a] = (uint32_t)(t[1] >> 32);
		next[a] = c;
		if (c < len)
			prev[c] = a;
		tree_set(t, size, b, TREE_NONE | b);
		tree_set(t, size, a,
			 (uint64_t)(c < len ? joined(r, piece + a, next[c] - a, padded)
					    : SF_RANK_NONE)
					 << 32 |
				 a);
		if (a > 0) {
			uint32_t p = prev[a];

			tree_set(t, size, p,
				 (uint64_t)joined(r, piece + p, c - p, padded) << 32 | p);
		}
	}
	for (i = 0; i < len; i = next[i]) {
		if (rank[i] == SF_RANK_NONE)
			return SF_E_TOKENIZER;
		out[n++] = rank[i];
	}
	*ret_n = n;
	return 0;
}

int sf__bpe_tree(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		 size_t *ret_n, bool padded)
{
	return padded ? tree(r, piece, len, out, ret_n, true)
		      : tree(r, piece, len, out, ret_n, false);
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

/*
 * A piece of megabytes takes seconds to merge: every SF_TOK_PROGRESS_POPS + 1 steps of a
 * loop over it, a producer's heartbeat goes on (sf__tok_progress).
 */
static inline void progress_every(uint32_t step)
{
	if (!(step & SF_TOK_PROGRESS_POPS) && sf__tok_progress)
		sf__tok_progress(0);
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

int sf__bpe_too_long(struct sf_err *e, const char *name, size_t len)
{
	return sf__err(e, SF_E_TOKENIZER,
		       "%s: a piece of %zu bytes, more than the %llu one piece may have (a piece "
		       "is one match of the pre-tokenizer, often a run of one kind of character)",
		       name, len, (unsigned long long)SF_BPE_PIECE_MAX);
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

	if (len > SF_BPE_PIECE_MAX)
		return -EFBIG;
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
		progress_every(i);
		nodes[i].pair_rank = pair_rank(r, nodes, piece, i, end);
		if (nodes[i].pair_rank != SF_RANK_NONE)
			sf__heap_push(heap, &n_heap, (uint64_t)nodes[i].pair_rank << 32 | i);
	}
	nodes[end].pair_rank = SF_RANK_NONE;

	for (uint32_t pops = 1; n_heap; pops++) {
		uint64_t key = sf__heap_pop(heap, &n_heap);
		uint32_t rank = (uint32_t)(key >> 32), j;

		progress_every(pops);
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
			sf__heap_push(heap, &n_heap, (uint64_t)nodes[i].pair_rank << 32 | i);
		if (i > 0) {
			uint32_t p = nodes[i].prev;

			nodes[p].pair_rank = pair_rank(r, nodes, piece, p, end);
			if (nodes[p].pair_rank != SF_RANK_NONE)
				sf__heap_push(heap, &n_heap,
					      (uint64_t)nodes[p].pair_rank << 32 | p);
		}
	}

	for (i = 0; i != end; i = nodes[i].next) {
		progress_every((uint32_t)n_out);
		if (emit(r, piece + i, nodes[nodes[i].next].start - i, out + n_out++) < 0)
			return SF_E_TOKENIZER;
	}
	*ret_n = n_out;
	return 0;
}

int sf__bpe_short(const struct sf_tok_ranks *r, const uint8_t *piece, size_t len, uint32_t *out,
		  size_t *ret_n, bool padded)
{
	if (len <= SF_BPE_SCAN_MAX)
		return sf__bpe_scan(r, piece, len, out, ret_n, padded);
	return sf__bpe_tree(r, piece, len, out, ret_n, padded);
}
