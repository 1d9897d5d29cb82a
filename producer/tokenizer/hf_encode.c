/*
 * Encoding with a Hugging Face tokenizer.json (hf_json.h), as `tokenizers`'
 * Tokenizer.encode(text, add_special_tokens=False) does it:
 *
 *  1. added tokens whose "normalized" is false are found in the raw text, leftmost-longest
 *     (tokenizers' Aho-Corasick, MatchKind::LeftmostLongest); the text between them goes on;
 *  2. what is left is normalized (NFC, or nothing), each stretch on its own, and the
 *     added tokens whose "normalized" is true are found the same way in it;
 *  3. each stretch of text goes through the pre-tokenizer stages in order, each stage
 *     splitting every piece of the one before (so a regex sees one piece as its whole
 *     subject, and a lookahead stops at the piece's end), empty pieces dropped;
 *  4. each piece is byte-level BPE: start from its bytes and repeatedly apply the merge
 *     of lowest rank among adjacent pairs, leftmost on a tie, where a pair's rank is its
 *     index in the file's merge list (tokenizers' word.rs merge_all), not the rank of the
 *     merged token as in tiktoken.
 *
 * A special token is matched only when the allowed set says so; otherwise it is skipped
 * over as text, as tokenizers does with encode_special_tokens set. A non-special added
 * token is always matched, as tokenizers always does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/nfc.h"
#include "producer/tokenizer/unicode.h"

/* Pieces up to this many bytes merge by rescanning the parts; longer ones with a heap. */
#define HF_SCAN_MAX 48

/* A part of a piece being merged: its id and the merge with its successor. */
struct sf_hf_part {
	uint32_t start;
	uint32_t id;
	uint32_t rank; /* of the pair with the next part; SF_RANK_NONE: none */
	uint32_t merged;
	uint32_t prev;
	uint32_t next;
};

bool sf__hf_merge_lookup(const struct sf_tok_hf *hf, uint32_t left, uint32_t right,
			 struct sf_hf_merge_result *ret)
{
	uint64_t key = (uint64_t)left << 32 | right, i, h;

	h = key * 0x9e3779b97f4a7c15ull;
	for (i = (h ^ (h >> 29)) & hf->merge_mask;; i = (i + 1) & hf->merge_mask) {
		const struct sf_hf_merge *m = &hf->merges[i];

		if (m->key == key) {
			ret->rank = m->rank;
			ret->id = m->id;
			return true;
		}
		if (m->key == UINT64_MAX)
			return false;
	}
}

/* Set the pair of part `a` with part `b` (ids), or none. */
static inline void set_pair(const struct sf_tok_hf *hf, struct sf_hf_part *a, uint32_t b_id)
{
	struct sf_hf_merge_result m;

	if (sf__hf_merge_lookup(hf, a->id, b_id, &m)) {
		a->rank = m.rank;
		a->merged = m.id;
	} else {
		a->rank = SF_RANK_NONE;
	}
}

static void init_parts(const struct sf_tok_hf *hf, struct sf_hf_part *p, const uint8_t *piece,
		       size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		p[i].start = (uint32_t)i;
		p[i].id = hf->byte_id[piece[i]];
		p[i].prev = (uint32_t)i - 1;
		p[i].next = (uint32_t)i + 1;
		if (i + 1 < len) {
			const struct sf_hf_merge *m = &hf->byte_merge[piece[i] << 8 | piece[i + 1]];

			p[i].rank = m->rank;
			p[i].merged = m->id;
		} else {
			p[i].rank = SF_RANK_NONE;
		}
	}
}

/* Short pieces: find the leftmost lowest pair by a scan, merge, repeat. */
static void bpe_scan(const struct sf_tok_hf *hf, struct sf_hf_part *p, size_t len, uint32_t *out,
		     size_t *ret_n)
{
	size_t parts = len, i, best;
	uint32_t min;

	for (;;) {
		min = SF_RANK_NONE;
		best = 0;
		for (i = 0; i + 1 < parts; i++) {
			bool lower = p[i].rank < min;

			min = lower ? p[i].rank : min;
			best = lower ? i : best;
		}
		if (min == SF_RANK_NONE)
			break;
		p[best].id = p[best].merged;
		parts--;
		memmove(p + best + 1, p + best + 2, (parts - best - 1) * sizeof(*p));
		if (best > 0)
			set_pair(hf, &p[best - 1], p[best].id);
		if (best + 1 < parts)
			set_pair(hf, &p[best], p[best + 1].id);
		else
			p[best].rank = SF_RANK_NONE;
	}
	for (i = 0; i < parts; i++)
		out[i] = p[i].id;
	*ret_n = parts;
}

/*
 * Long pieces: the parts are a linked list, the candidate pairs a heap ordered by (rank,
 * position), as in tokenizers. An entry is stale when its part's pair has changed since:
 * a rank names one pair, and a part's pair never comes back once it has changed (its
 * bytes only grow), so comparing ranks tells.
 */
static void bpe_heap(const struct sf_tok_hf *hf, struct sf_hf_part *p, uint64_t *heap, size_t len,
		     uint32_t *out, size_t *ret_n)
{
	size_t n_heap = 0, n = 0;
	uint32_t i;

	for (i = 0; i < len; i++)
		if (p[i].rank != SF_RANK_NONE)
			sf__heap_push(heap, &n_heap, (uint64_t)p[i].rank << 32 | i);
	for (uint32_t pops = 1; n_heap; pops++) {
		uint64_t key = sf__heap_pop(heap, &n_heap);
		uint32_t rank = (uint32_t)(key >> 32), j;

		/* A piece of megabytes takes seconds: a producer's heartbeat goes on. */
		if (!(pops & SF_TOK_PROGRESS_POPS) && sf__tok_progress)
			sf__tok_progress(0);
		i = (uint32_t)key;
		if (p[i].rank != rank)
			continue;
		j = p[i].next;
		p[i].id = p[i].merged;
		p[i].next = p[j].next;
		p[j].rank = SF_RANK_NONE;
		p[j].id = SF_RANK_NONE;
		if (p[i].next < len) {
			p[p[i].next].prev = i;
			set_pair(hf, &p[i], p[p[i].next].id);
			if (p[i].rank != SF_RANK_NONE)
				sf__heap_push(heap, &n_heap, (uint64_t)p[i].rank << 32 | i);
		} else {
			p[i].rank = SF_RANK_NONE;
		}
		if (i > 0) {
			uint32_t q = p[i].prev;

			set_pair(hf, &p[q], p[i].id);
			if (p[q].rank != SF_RANK_NONE)
				sf__heap_push(heap, &n_heap, (uint64_t)p[q].rank << 32 | q);
		}
	}
	for (i = 0; i < len; i = p[i].next)
		out[n++] = p[i].id;
	*ret_n = n;
}

static int scratch_grow(struct sf_hf_scratch *sc, size_t len)
{
	struct sf_hf_part *parts;
	uint64_t *heap;
	size_t cap;

	if (len <= sc->parts_cap)
		return 0;
	cap = sc->parts_cap ? sc->parts_cap : 256;
	while (cap < len)
		cap *= 2;
	parts = realloc(sc->parts, cap * sizeof(*parts));
	if (!parts)
		return -ENOMEM;
	sc->parts = parts;
	/* Each merge pushes at most two pairs, on top of the len - 1 initial ones. */
	heap = realloc(sc->heap, 3 * cap * sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	sc->heap = heap;
	sc->parts_cap = cap;
	return 0;
}

int sf__hf_bpe(const struct sf_tok_hf *hf, struct sf_hf_scratch *sc, const uint8_t *piece,
	       size_t len, uint32_t *out, size_t *ret_n)
{
	int rc = len > SF_BPE_PIECE_MAX ? -EFBIG : scratch_grow(sc, len);

	if (rc < 0)
		return rc;
	init_parts(hf, sc->parts, piece, len);
	if (len <= HF_SCAN_MAX)
		bpe_scan(hf, sc->parts, len, out, ret_n);
	else
		bpe_heap(hf, sc->parts, sc->heap, len, out, ret_n);
	return 0;
}

int sf__hf_scratch_create(const struct sf_tok *tok, struct sf_hf_scratch **ret)
{
	struct sf_hf_scratch *sc = calloc(1, sizeof(*sc));
	unsigned i;

	if (!sc)
		return -ENOMEM;
	for (i = 0; i < tok->hf->n_stages; i++) {
		if (tok->hf->stages[i].re) {
			/* Only the whole match is used: one pair suffices for any pattern. */
			sc->md = pcre2_match_data_create(1, NULL);
			if (!sc->md) {
				free(sc);
				return -ENOMEM;
			}
			break;
		}
	}
	*ret = sc;
	return 0;
}

void sf__hf_scratch_free(struct sf_hf_scratch *sc)
{
	if (!sc)
		return;
	free(sc->prefixed);
	free(sc->normalized);
	free(sc->cps);
	free(sc->parts);
	free(sc->heap);
	pcre2_match_data_free(sc->md);
	free(sc);
}

/* ---- encoding ---- */

struct run {
	struct sf_tok_encoder *enc;
	const struct sf_tok_hf *hf;
	size_t n_out;
	size_t unreported; /* bytes of pieces since the last sf__tok_progress() call */
	bool changed;	   /* the stretch holds code points of sf__pcre_text_changed() */
	struct sf_err *e;
};

/* Room for `more` ids after the ones so far: grows the encoder's own buffer only. */
static int reserve_ids(struct run *r, size_t more)
{
	struct sf_tok_encoder *enc = r->enc;
	size_t cap = enc->ids_cap;
	uint32_t *ids;

	if (r->n_out + more <= cap)
		return 0;
	if (enc->ids_lent)
		return sf__err(r->e, -ENOBUFS,
			       "%s: the ids do not fit the caller's buffer of %zu (see "
			       "sf__tok_ids_bound)",
			       enc->tok->name, cap);
	while (cap < r->n_out + more)
		cap = cap ? cap * 2 : 4096;
	ids = realloc(enc->ids, cap * sizeof(*ids));
	if (!ids)
		return sf__err(r->e, -ENOMEM, "%s: out of memory", enc->tok->name);
	enc->ids = ids;
	enc->ids_cap = cap;
	return 0;
}

/* Merge a piece that is not a whole token, through the encoder's piece cache. */
static int merge_piece(struct run *r, const uint8_t *s, size_t len, uint32_t *out, size_t *ret_n)
{
	struct sf_tok_encoder *enc = r->enc;
	struct sf_tok_cache_entry *c = NULL;
	uint64_t head = 0, tail = 0, h;
	int rc;

	if (len <= SF_TOK_CACHE_MAX_LEN) {
		head = sf__tok_key(s, len);
		tail = len > 8 ? sf__tok_load64(s + len - 8) : 0;
		h = (head ^ tail * 0xc2b2ae3d27d4eb4full ^ len) * 0x9e3779b97f4a7c15ull;
		c = &enc->cache[h >> (64 - SF_TOK_CACHE_BITS)];
		if (c->len == len && c->head == head && c->tail == tail) {
			memcpy(out, c->ids, c->n * sizeof(*out));
			*ret_n = c->n;
			return 0;
		}
	}
	rc = sf__hf_bpe(r->hf, enc->hf, s, len, out, ret_n);
	if (rc == -EFBIG)
		return sf__bpe_too_long(r->e, enc->tok->name, len);
	if (rc < 0)
		return sf__err(r->e, rc, "%s: out of memory", enc->tok->name);
	if (c && *ret_n <= SF_TOK_CACHE_IDS) {
		c->head = head;
		c->tail = tail;
		c->len = (uint32_t)len;
		c->n = (uint32_t)*ret_n;
		memcpy(c->ids, out, *ret_n * sizeof(*out));
	}
	return 0;
}

static int emit_piece(struct run *r, const uint8_t *s, size_t len)
{
	const struct sf_tok_hf *hf = r->hf;
	uint32_t id = sf__tok_rank(&r->enc->tok->ranks, s, len);
	size_t n;
	int rc;

	r->unreported += len;
	if (__builtin_expect(r->unreported >= SF_TOK_PROGRESS_BYTES, 0) && sf__tok_progress) {
		sf__tok_progress(r->unreported);
		r->unreported = 0;
	}
	rc = reserve_ids(r, len);
	if (rc < 0)
		return rc;
	if (id != SF_RANK_NONE && (hf->ignore_merges || (hf->whole[id / 8] >> (id % 8) & 1))) {
		r->enc->ids[r->n_out++] = id;
		return 0;
	}
	rc = merge_piece(r, s, len, r->enc->ids + r->n_out, &n);
	if (rc < 0)
		return rc;
	r->n_out += n;
	return 0;
}

static int pretok(struct run *r, unsigned k, const uint8_t *s, size_t n);

/*
 * Split behaviours over the ranges of a piece, each a match or the text between two: the
 * ranges arrive in order; `pending` holds the range not yet handed on, since the next one
 * may join it.
 */
struct splitter {
	struct run *r;
	unsigned next_stage;
	int behavior;
	const uint8_t *s;
	size_t start, end; /* pending range; start == end: none */
	bool prev_match;
};

static int flush(struct splitter *sp)
{
	int rc = 0;

	if (sp->end > sp->start)
		rc = pretok(sp->r, sp->next_stage, sp->s + sp->start, sp->end - sp->start);
	sp->start = sp->end;
	return rc;
}

static int range(struct splitter *sp, size_t start, size_t end, bool match)
{
	bool join = false;
	int rc;

	if (end == start)
		return 0;
	switch (sp->behavior) {
	case SF_HF_REMOVED:
		sp->prev_match = match;
		return match ? 0 : pretok(sp->r, sp->next_stage, sp->s + start, end - start);
	case SF_HF_MERGED_PREV:
		join = match && !sp->prev_match;
		break;
	case SF_HF_MERGED_NEXT:
		join = !match && sp->prev_match;
		break;
	case SF_HF_CONTIGUOUS:
		join = match == sp->prev_match;
		break;
	default:
		break;
	}
	sp->prev_match = match;
	if (join && sp->end > sp->start) {
		sp->end = end;
		return 0;
	}
	rc = flush(sp);
	sp->start = start;
	sp->end = end;
	return rc;
}

static int split_pcre(struct run *r, unsigned k, const uint8_t *s, size_t n)
{
	const struct sf_hf_stage *st = &r->hf->stages[k];
	struct splitter sp = {.r = r, .next_stage = k + 1, .behavior = st->behavior, .s = s};
	const pcre2_code *re = st->re_fast && !r->changed ? st->re_fast : st->re;
	size_t p = 0, start, end;
	int rc;

	for (;;) {
		rc = sf__pcre_next(re, r->enc->hf->md, s, n, p, &start, &end);
		if (rc < 0)
			return sf__pcre_fail(r->e, r->enc->tok->name, rc, p);
		if (rc == 0)
			break;
		rc = range(&sp, p, start, st->invert);
		if (rc == 0)
			rc = range(&sp, start, end, !st->invert);
		if (rc < 0)
			return rc;
		p = end;
	}
	rc = range(&sp, p, n, st->invert);
	return rc < 0 ? rc : flush(&sp);
}

/*
 * Rust's char::is_numeric (\p{N}), which Digits asks, is of the Unicode of the Rust that
 * built tokenizers: 17.0 for its 0.23 wheels, where the tables here are 16.0 (Oniguruma's,
 * which the Split patterns run on). 17.0 made these the only new numbers: Tolong Siki's
 * digits and U+16FF4-6, all of four bytes in UTF-8.
 */
static bool rust_numeric(unsigned cls, const uint8_t *s, size_t len)
{
	uint32_t cp;

	if (cls & SF_UC_N)
		return true;
	if (len != 4)
		return false;
	sf__utf8_next(s, len, &cp);
	return (cp >= 0x11de0 && cp <= 0x11de9) || (cp >= 0x16ff4 && cp <= 0x16ff6);
}

/*
 * Digits: each number character (above) is a match of its own and the text between them
 * one range, as tokenizers' character patterns find them; then Isolated
 * (individual_digits) or Contiguous, which joins runs of numbers.
 */
static int split_digits(struct run *r, unsigned k, const uint8_t *s, size_t n)
{
	bool individual = r->hf->stages[k].individual;
	struct splitter sp = {.r = r,
			      .next_stage = k + 1,
			      .behavior = individual ? SF_HF_ISOLATED : SF_HF_CONTIGUOUS,
			      .s = s};
	size_t p = 0, gap = 0, len;
	int rc;

	while (p < n) {
		unsigned cls = sf__uc_at(s, n, p, &len);

		if (rust_numeric(cls, s + p, len)) {
			rc = range(&sp, gap, p, false);
			if (rc == 0)
				rc = range(&sp, p, p + len, true);
			if (rc < 0)
				return rc;
			gap = p + len;
		}
		p += len;
	}
	rc = range(&sp, gap, n, false);
	return rc < 0 ? rc : flush(&sp);
}

static int prefix_space(struct run *r, unsigned k, const uint8_t *s, size_t n)
{
	struct sf_hf_scratch *sc = r->enc->hf;

	if (s[0] == ' ')
		return pretok(r, k + 1, s, n);
	if (n + 1 > sc->prefixed_cap) {
		size_t cap = sc->prefixed_cap ? sc->prefixed_cap : 4096;
		uint8_t *grown;

		while (cap < n + 1)
			cap *= 2;
		grown = realloc(sc->prefixed, cap);
		if (!grown)
			return sf__err(r->e, -ENOMEM, "%s: out of memory", r->enc->tok->name);
		sc->prefixed = grown;
		sc->prefixed_cap = cap;
	}
	sc->prefixed[0] = ' ';
	memcpy(sc->prefixed + 1, s, n);
	return pretok(r, k + 1, sc->prefixed, n + 1);
}

static int pretok(struct run *r, unsigned k, const uint8_t *s, size_t n)
{
	const struct sf_hf_stage *st;
	size_t p, end;
	int rc;

	if (k == r->hf->n_stages)
		return emit_piece(r, s, n);
	st = &r->hf->stages[k];
	switch (st->kind) {
	case SF_HF_STAGE_PRESET:
		for (p = 0; p < n; p = end) {
			end = sf__pretok_next(st->preset, s, n, p);
			rc = pretok(r, k + 1, s + p, end - p);
			if (rc < 0)
				return rc;
		}
		return 0;
	case SF_HF_STAGE_PCRE:
		return split_pcre(r, k, s, n);
	case SF_HF_STAGE_DIGITS:
		return split_digits(r, k, s, n);
	default:
		return prefix_space(r, k, s, n);
	}
}

/*
 * The longest token of tokens[lo..hi) (sorted by bytes, sharing their first two) that
 * s[0..n) starts with, or NULL. The last token not above s in byte order, q, is found by
 * bisection; every token s starts with lies between it and s, so q starts with it too:
 * the longest is q itself or the longest of q's prefixes within what q and s share.
 */
static const struct sf_hf_added *longest_at(const struct sf_hf_matcher *m, uint32_t lo, uint32_t hi,
					    const uint8_t *s, size_t n)
{
	int32_t q = -1;
	size_t common = 0;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct sf_hf_added *a = m->tokens[mid];
		int c = memcmp(a->text, s, a->len < n ? a->len : n);

		if (c < 0 || (c == 0 && a->len <= n)) {
			q = (int32_t)mid;
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	if (q < 0)
		return NULL;
	while (common < m->tokens[q]->len && common < n &&
	       (uint8_t)m->tokens[q]->text[common] == s[common])
		common++;
	while (q >= 0 && m->tokens[q]->len > common)
		q = m->prefix[q];
	return q >= 0 ? m->tokens[q] : NULL;
}

/*
 * The leftmost-longest added token of `m` at or after p: its position and the token, or
 * false when there is none.
 */
static bool find_added(const struct sf_hf_matcher *m, const uint8_t *s, size_t n, size_t p,
		       size_t *ret_at, const struct sf_hf_added **ret)
{
	for (; p < n; p++) {
		if (!m->first[s[p]])
			continue;
		if (p + 1 < n) {
			unsigned k = s[p] << 8 | s[p + 1];
			const struct sf_hf_added *a =
				m->bucket[k] < m->bucket[k + 1]
					? longest_at(m, m->bucket[k], m->bucket[k + 1], s + p,
						     n - p)
					: NULL;

			if (a) {
				*ret_at = p;
				*ret = a;
				return true;
			}
		}
		if (m->single[s[p]] >= 0) {
			*ret_at = p;
			*ret = NULL;
			return true;
		}
	}
	return false;
}

static bool allowed_token(const struct sf_hf_added *a, uint64_t allowed)
{
	if (!a->special || allowed == SF_TOK_ALLOW_ALL)
		return true;
	return a->bit >= 0 && (allowed >> a->bit & 1);
}

/* Encode s[0..n): the added tokens of `m` in it, and what is between them by `rest`. */
static int with_added(struct run *r, const struct sf_hf_matcher *m, const uint8_t *s, size_t n,
		      uint64_t allowed,
		      int (*rest)(struct run *, const uint8_t *, size_t, uint64_t))
{
	const struct sf_hf_added *a;
	size_t p = 0, at, from = 0;
	int rc;

	while (m->any && find_added(m, s, n, p, &at, &a)) {
		if (!a)
			a = &r->hf->added[m->single[s[at]]];
		p = at + a->len;
		if (!allowed_token(a, allowed))
			continue;
		if (at > from) {
			rc = rest(r, s + from, at - from, allowed);
			if (rc < 0)
				return rc;
		}
		rc = reserve_ids(r, 1);
		if (rc < 0)
			return rc;
		r->enc->ids[r->n_out++] = a->id;
		from = p;
	}
	return n > from ? rest(r, s + from, n - from, allowed) : 0;
}

static int stretch(struct run *r, const uint8_t *s, size_t n, uint64_t allowed)
{
	(void)allowed;
	r->changed = r->hf->any_fast && sf__pcre_text_changed(s, n);
	return pretok(r, 0, s, n);
}

static int normalized(struct run *r, const uint8_t *s, size_t n, uint64_t allowed)
{
	struct sf_hf_scratch *sc = r->enc->hf;

	if (r->hf->nfc && !sf__nfc_is_identity(s, n)) {
		if (n > sc->normalized_cap) {
			size_t cap = sc->normalized_cap ? sc->normalized_cap : 4096;
			uint8_t *text;
			uint32_t *cps;

			while (cap < n)
				cap *= 2;
			text = realloc(sc->normalized, 3 * cap);
			if (text)
				sc->normalized = text;
			cps = realloc(sc->cps, 4 * cap * sizeof(*cps));
			if (cps)
				sc->cps = cps;
			if (!text || !cps)
				return sf__err(r->e, -ENOMEM, "%s: out of memory",
					       r->enc->tok->name);
			sc->normalized_cap = cap;
		}
		n = sf__nfc(s, n, sc->normalized, sc->cps);
		s = sc->normalized;
	}
	return with_added(r, &r->hf->norm, s, n, allowed, stretch);
}

int sf__hf_encode(struct sf_tok_encoder *enc, const uint8_t *s, size_t len, uint64_t allowed,
		  size_t *ret_n, struct sf_err *e)
{
	struct run r = {.enc = enc, .hf = enc->tok->hf, .e = e};
	int rc;

	rc = with_added(&r, &r.hf->raw, s, len, allowed, normalized);
	if (rc < 0)
		return rc;
	*ret_n = r.n_out;
	return 0;
}

long sf__hf_id_bytes(const struct sf_tok_hf *hf, uint32_t id, const uint8_t **ret)
{
	uint32_t lo = 0, hi = hf->n_extra;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (hf->extra_ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < hf->n_extra && hf->extra_ids[lo] == id) {
		*ret = hf->extra_bytes + hf->extra_off[lo];
		return hf->extra_off[lo + 1] - hf->extra_off[lo];
	}
	return -1;
}
