/*
 * Raw text, tokenized on demand in producers. Each producer tokenizes one chunk at a
 * time (producer/text_index.h), together with the first T+1 tokens after the chunk, so
 * every window starting in the chunk is served from one place: an entry of the shared
 * chunk cache (producer/chunk_share.h), where each chunk is tokenized by one producer
 * for all of them, or, when that cache cannot serve it, the process's own buffer.
 * Windows mode makes caching effective by taking the windows of a chunk together (in a
 * permuted order) before moving to the next permuted chunk (producer/text_order.h). The T+1 tokens
 * after a chunk are the head of the next one, which is tokenized anyway when that chunk's turn
 * comes: a second shared table keeps every chunk's head, so that whichever of the two
 * needs it first tokenizes it and the other copies it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/chunk_share.h"
#include "producer/source/file_cache.h"
#include "producer/text_cache.h"
#include "producer/text_index.h"
#include "producer/token_copy.h"
#include "producer/tokenizer/tokenizer.h"

/* ---- per-process cache and shared cache ---- */

/*
 * Where a chunk is tokenized to: the process's own buffer or a shared entry. It holds
 * the chunk's tokens, then up to T+1 tokens of the chunks after it, and the offset of
 * every document start among them.
 */
struct tok_dest {
	uint32_t *tokens;
	uint64_t cap;
	uint64_t n;
	uint64_t *doc_starts;
	uint64_t docs_cap;
	uint64_t n_docs;
};

struct sf_text_cache {
	const struct sf_dataset *ds;
	/* One encoder per raw text span (source of a mixture): an encoder's piece cache
	 * and work arrays stay warm for the kind of text its source holds. */
	struct sf_tok_encoder **encs;
	uint32_t n_encs;
	char *scratch;
	struct tok_dest own;
	uint64_t chunk;	      /* the chunk `own` holds; UINT64_MAX: none */
	struct tok_dest head; /* a head being tokenized, before it goes to its entry */
	uint64_t encoded;
};

/*
 * Tokens and document starts an entry must hold: the largest chunk and T+1 after it, and
 * one more, which tells whether a chunk read whole as a tail holds more than its count
 * (encode_tail()).
 */
static uint64_t dest_tokens_cap(const struct sf_dataset *ds)
{
	return ds->max_chunk_tokens + ds->seq_len + 2;
}

static uint64_t dest_docs_cap(const struct sf_dataset *ds)
{
	return ds->max_chunk_docs + ds->seq_len + 2;
}

/*
 * Chunk heads. The head of a chunk is its first documents, whole, up to and including
 * the first one that reaches T+1 tokens (all of them in a shorter chunk): a pure function
 * of the chunk, written by whichever producer tokenizes it first, the one filling the
 * chunk or the one filling the chunk before it (whose tail it is). It holds at most T
 * tokens before its last document, which holds at most max_doc_bytes + 1 (a token covers
 * at least a byte, then <|endoftext|>), and at most T+1 documents.
 *
 * An entry keeps the head's tokens at the job's token width and the number of its
 * documents, not their starts: each document ends with <|endoftext|>, which ordinary
 * text never encodes to, so the starts are 0 and every position after one. There is one
 * entry per chunk, each written once, so the pages an entry touches are fresh memory: at
 * T = 1024 a head of 2-byte tokens fills about one page, where 4-byte tokens and a table
 * of starts took three or four.
 */
static uint64_t head_tokens_cap(const struct sf_dataset *ds)
{
	uint64_t doc = ds->max_doc_bytes + 1;

	return ds->seq_len + 1 + (doc < ds->max_chunk_tokens ? doc : ds->max_chunk_tokens);
}

static uint64_t head_docs_cap(const struct sf_dataset *ds)
{
	return ds->seq_len + 2;
}

/* The longest pre-tokenization piece the encoder is warmed up on (see warm_encoder()). */
#define WARM_PIECE_BYTES (64u * 1024u)

/*
 * An encoder's buffers grow to the largest document it has met and then stay: the ids
 * to the document's bytes, the BPE work arrays to its longest pre-tokenization piece.
 * So that building batches does not allocate, the encoder meets the worst case before
 * the first batch: a document of max_doc_bytes (the longest document or JSON line of the
 * sources) made of short words, which sizes the ids, then a run of one letter, which
 * every built-in pattern takes as a single piece, as long as the longest document but
 * at most WARM_PIECE_BYTES: the BPE arrays cost about 40 bytes per byte of piece, and
 * real pieces are words. A piece longer than that (a run of 64 Ki letters) still grows
 * them, once per producer. It costs one encode of max_doc_bytes per process. A
 * vocabulary of characters, which has no pieces and may hold neither 'a' nor a space,
 * meets a document of its first character instead.
 */
static int warm_encoder(struct sf_text_cache *c, struct sf_tok_encoder *enc, struct sf_err *e)
{
	const uint64_t n = c->ds->max_doc_bytes;
	const uint64_t piece = n < WARM_PIECE_BYTES ? n : WARM_PIECE_BYTES;
	const uint32_t *ids;
	char ch[4];
	const size_t ch_len = sf__tok_first_char(c->ds->tok, ch);
	size_t n_ids;
	int r;

	if (!n)
		return 0;
	if (ch_len) {
		for (uint64_t i = 0; i + ch_len <= n; i += ch_len)
			memcpy(c->scratch + i, ch, ch_len);
		return sf__tok_encode(enc, c->scratch, n / ch_len * ch_len, SF_TOK_ALLOW_NONE, &ids,
				      &n_ids, e);
	}
	for (uint64_t i = 0; i < n; i++)
		c->scratch[i] = i % 2 ? ' ' : 'a';
	r = sf__tok_encode(enc, c->scratch, n, SF_TOK_ALLOW_NONE, &ids, &n_ids, e);
	if (r < 0)
		return r;
	memset(c->scratch, 'a', piece);
	return sf__tok_encode(enc, c->scratch, piece, SF_TOK_ALLOW_NONE, &ids, &n_ids, e);
}

/*
 * Map the plain (uncompressed) text files ahead, as many as the process's file cache
 * holds: a mapping reads nothing until a chunk is tokenized, and a job whose files all
 * fit then maps nothing while it builds batches (steady state allocates nothing). With
 * more files than that, a miss maps one file (and unmaps another) per chunk that needs
 * it. A file that cannot be mapped now fails later, when a chunk of it is read.
 */
static void premap_files(const struct sf_dataset *ds)
{
	uint32_t cap, n = 0;
	struct sf_err ignored;

	if (!ds->text_maps) /* no text file to read: a part of a corpus may have none */
		return;
	sf__file_cache_open_count(ds->text_maps, &cap);
	for (uint32_t i = 0; i < ds->n_text_files && n < cap; i++) {
		const char *data;
		size_t len;

		if (ds->text_files[i].compressed || !ds->text_files[i].n_chunks)
			continue;
		sf__file_cache_get(ds->text_maps, i, &data, &len, &ignored);
		n++;
	}
}

int sf__text_cache_create(const struct sf_dataset *ds, struct sf_text_cache **ret_c,
			  struct sf_err *e)
{
	struct sf_text_cache *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return sf__err(e, -ENOMEM, "out of memory");
	c->ds = ds;
	c->chunk = UINT64_MAX;
	c->own.cap = dest_tokens_cap(ds);
	c->own.docs_cap = dest_docs_cap(ds);
	c->own.tokens = malloc(c->own.cap * sizeof(*c->own.tokens));
	c->own.doc_starts = malloc(c->own.docs_cap * sizeof(*c->own.doc_starts));
	c->scratch = malloc(ds->max_doc_bytes + 1);
	c->head.cap = head_tokens_cap(ds);
	c->head.docs_cap = head_docs_cap(ds);
	c->head.tokens = malloc(c->head.cap * sizeof(*c->head.tokens));
	c->head.doc_starts = malloc(c->head.docs_cap * sizeof(*c->head.doc_starts));
	if (!c->own.tokens || !c->own.doc_starts || !c->scratch || !c->head.tokens ||
	    !c->head.doc_starts) {
		sf__text_cache_free(c);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	c->n_encs = ds->n_text_spans ? ds->n_text_spans : 1;
	c->encs = calloc(c->n_encs, sizeof(*c->encs));
	r = c->encs ? 0 : sf__err(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->n_encs && r >= 0; i++) {
		r = sf__tok_encoder_create(ds->tok, &c->encs[i], e);
		if (r >= 0)
			r = warm_encoder(c, c->encs[i], e);
	}
	if (r >= 0)
		premap_files(ds);
	if (r < 0) {
		sf__text_cache_free(c);
		return r;
	}
	*ret_c = c;
	return 0;
}

void sf__text_cache_free(struct sf_text_cache *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; c->encs && i < c->n_encs; i++)
		sf__tok_encoder_free(c->encs[i]);
	free(c->encs);
	free(c->own.tokens);
	free(c->own.doc_starts);
	free(c->head.tokens);
	free(c->head.doc_starts);
	free(c->scratch);
	free(c);
}

uint64_t sf__text_cache_encoded(const struct sf_text_cache *c)
{
	return c->encoded;
}

/* The encoder of the span that `chunk` belongs to. */
static struct sf_tok_encoder *chunk_encoder(const struct sf_text_cache *c, uint64_t chunk)
{
	const struct sf_dataset *ds = c->ds;

	if (!ds->mix_sources)
		return c->encs[0];
	return c->encs[ds->mix_sources[ds->text_files[ds->chunks[chunk].file].source].text_slot];
}

/*
 * The walk over `chunk` failed with `why`: bad records were counted when the index was
 * built and are passed over silently here, so what fails is the chunk not holding what
 * its index says (its cached index is then removed), or its file.
 */
static int walk_failed(const struct sf_text_cache *c, const struct sf_doc_walk *w, uint64_t chunk,
		       const struct sf_err *why, struct sf_err *e)
{
	*e = *why;
	return w->index_lie ? sf__text_index_lied(c->ds, chunk, e) : e->code;
}

/*
 * Tokenize the documents of `chunk` into `d`, appending up to `limit` tokens in total,
 * after passing over its first `skip` documents (already in `d`, copied from its head).
 */
static int encode_docs(struct sf_text_cache *c, struct tok_dest *d, uint64_t chunk, uint64_t limit,
		       uint64_t skip, uint32_t *doc_lens, struct sf_err *e)
{
	struct sf_tok_encoder *enc = chunk_encoder(c, chunk);
	struct sf_doc_walk w;
	const char *doc;
	size_t len;
	int r = 0;
	struct sf_err ignored;

	r = sf__text_walk_init(&w, c->ds, chunk, c->scratch, &ignored);
	if (r < 0)
		return walk_failed(c, &w, chunk, &ignored, e);
	/* Bad records were counted when the index was built; here they are passed over
	 * silently, the same ones every time. */
	while (skip && (r = sf__text_next_doc(&w, &doc, &len, &ignored)) == 1)
		skip--;
	if (r < 0)
		return walk_failed(c, &w, chunk, &ignored, e);
	while (d->n < limit && (r = sf__text_next_doc(&w, &doc, &len, &ignored)) == 1) {
		const uint32_t *ids;
		size_t n, take;
		/* A document is [bos] ids eot; `nb` is 1 with a bos, else 0. */
		const size_t nb = c->ds->bos != UINT32_MAX;
		/* Straight into the destination when the ids fit there, whatever the limit:
		 * only the first `take` count (more than len + 1 ids with a tokenizer.json that
		 * adds text, none known before encoding with SentencePiece). */
		const size_t bound = sf__tok_ids_bound(c->ds->tok, len);
		int direct = bound != SIZE_MAX && d->cap - d->n >= bound + nb;

		if (direct)
			r = sf__tok_encode_to(enc, doc, len, c->ds->allowed, d->tokens + d->n + nb,
					      (size_t)(d->cap - d->n - nb), &n, e);
		else
			r = sf__tok_encode(enc, doc, len, c->ds->allowed, &ids, &n, e);
		if (r < 0)
			return sf__doc_walk_blame(&w, r, e);
		/* The supervisor reads progress from the heartbeat this renews. */
		sf__producer_progress(len);
		c->encoded += nb + n + 1;
		/* The loop runs while d->n < limit, so take >= 1 >= nb. */
		take = nb + n + 1 <= limit - d->n ? nb + n : (size_t)(limit - d->n);
		if (d->n_docs < d->docs_cap)
			d->doc_starts[d->n_docs++] = d->n;
		/* Within the chunk's own lengths, as many as its index counts: a chunk that
		 * holds more is refused by the caller, and wrote nothing past them. */
		if (doc_lens && d->n_docs <= c->ds->chunks[chunk].n_docs) {
			/* Megatron's index holds a document's length as an int32. */
			if (nb + n + 1 > INT32_MAX)
				return sf__err(
					e, SF_E_RANGE,
					"%s: a document of %zu tokens; a Megatron index holds "
					"at most %d per document",
					c->ds->text_files[c->ds->chunks[chunk].file].path,
					nb + n + 1, INT32_MAX);
			doc_lens[d->n_docs - 1] = (uint32_t)(nb + n + 1);
		}
		if (nb)
			d->tokens[d->n] = c->ds->bos;
		if (!direct)
			memcpy(d->tokens + d->n + nb, ids, (take - nb) * sizeof(*ids));
		d->n += take;
		if (d->n < limit)
			d->tokens[d->n++] = c->ds->eot;
	}
	return r < 0 ? walk_failed(c, &w, chunk, &ignored, e) : 0;
}

/*
 * A chunk that does not hold the tokens (or documents) its index says. The file was
 * checked unchanged just before, so a cached index lied: it is removed, so that the next
 * run rebuilds it, and the job stops, since every offset after the chunk depends on it.
 */
static int index_mismatch(const struct sf_dataset *ds, uint64_t chunk, const char *what,
			  uint64_t n, uint64_t said, struct sf_err *e)
{
	const struct sf_chunk *ch = &ds->chunks[chunk];

	sf__err(e, SF_E_SOURCE, "%s: byte %llu: the chunk holds %llu %s but its index says %llu",
		ds->text_files[ch->file].path, (unsigned long long)ch->off, (unsigned long long)n,
		what, (unsigned long long)said);
	return sf__text_index_lied(ds, chunk, e);
}

static int count_mismatch(const struct sf_dataset *ds, uint64_t chunk, uint64_t n, struct sf_err *e)
{
	return index_mismatch(ds, chunk, "tokens", n, ds->chunks[chunk].n_tokens, e);
}

/*
 * How long a head lookup waits for another producer filling it: long enough to check
 * whether that filler died (and take its entry over), never long enough to wait for a
 * live one, since tokenizing the head again costs about as much as waiting for it.
 */
#define HEAD_WAIT_NS 1

/* A head that does not fit its entry (a document longer than its bytes allow). */
#define HEAD_TOO_BIG 1

/*
 * Append the head in entry `h` to `d` up to `limit` tokens, with the document starts
 * encode_docs() would record: the first token and each one after <|endoftext|>, an id
 * that ordinary text never encodes to (a vocabulary whose ranks include a special
 * token's id is refused at load; a job whose text may spell it has no heads).
 */
static void append_head(const struct sf_dataset *ds, struct tok_dest *d,
			const struct sf_share_ref *h, uint64_t limit)
{
	uint64_t take = h->n_tokens < limit - d->n ? h->n_tokens : limit - d->n;
	uint32_t *out = d->tokens + d->n;
	size_t bad;

	sf__copy_tokens(out, 4, h->tokens, ds->token_bytes, take, &bad);
	for (uint64_t i = 0; i < take && d->n_docs < d->docs_cap; i++)
		if (i == 0 || out[i - 1] == ds->eot)
			d->doc_starts[d->n_docs++] = d->n + i;
	d->n += take;
}

/* Write the first `n` tokens of `src` (whole documents) to the head entry `ref` this
 * producer claimed; nobody else writes it until it is published. */
static void write_head(const struct sf_dataset *ds, const struct sf_share_ref *ref,
		       const uint32_t *src, uint64_t n)
{
	size_t bad;

	/* With 2-byte tokens every id fits: the vocabulary was checked at open. */
	sf__copy_tokens(ref->tokens, ds->token_bytes, src, 4, n, &bad);
}

/* Tokenize the head of `chunk` into `h`. Returns 0, HEAD_TOO_BIG or an error. */
static int encode_head(struct sf_text_cache *c, struct tok_dest *h, uint64_t chunk,
		       struct sf_err *e)
{
	const uint64_t L = c->ds->seq_len + 1;
	const size_t nb = c->ds->bos != UINT32_MAX; /* a document is [bos] ids eot */
	struct sf_doc_walk w;
	const char *doc;
	size_t len;
	int r = 0;
	struct sf_err ignored;

	r = sf__text_walk_init(&w, c->ds, chunk, c->scratch, &ignored);
	if (r < 0)
		return walk_failed(c, &w, chunk, &ignored, e);
	while (h->n < L && (r = sf__text_next_doc(&w, &doc, &len, &ignored)) == 1) {
		const uint32_t *ids;
		size_t n;

		r = sf__tok_encode(chunk_encoder(c, chunk), doc, len, c->ds->allowed, &ids, &n, e);
		if (r < 0)
			return sf__doc_walk_blame(&w, r, e);
		/* The supervisor reads progress from the heartbeat this renews. */
		sf__producer_progress(len);
		c->encoded += nb + n + 1;
		if (nb + n + 1 > h->cap - h->n || h->n_docs == h->docs_cap)
			return HEAD_TOO_BIG;
		h->doc_starts[h->n_docs++] = h->n;
		if (nb)
			h->tokens[h->n++] = c->ds->bos;
		memcpy(h->tokens + h->n, ids, n * sizeof(*ids));
		h->n += n;
		h->tokens[h->n++] = c->ds->eot;
	}
	if (r < 0)
		return walk_failed(c, &w, chunk, &ignored, e);
	/* The head is the whole chunk: its count is verified here (see encode_tail()); a
	 * head that reached L is no more than the chunk holds. */
	if (h->n < L && h->n != c->ds->chunks[chunk].n_tokens)
		return count_mismatch(c->ds, chunk, h->n, e);
	if (h->n > c->ds->chunks[chunk].n_tokens)
		return index_mismatch(c->ds, chunk, "tokens or more", h->n,
				      c->ds->chunks[chunk].n_tokens, e);
	return 0;
}

/* The shared entry this producer filled was taken over meanwhile (its liveness was
 * misjudged): what it read back from the entry may be the taker's, so the batch fails. */
static int taken_over(uint64_t chunk, struct sf_err *e)
{
	return sf__err(e, SF_E_STATE,
		       "chunk %llu: the shared cache entry was taken over while this producer "
		       "filled it",
		       (unsigned long long)chunk);
}

/*
 * Append the tokens of `chunk` to `d` up to `limit`, tokenizing them. A chunk shorter than
 * T+1 tokens, in which no window may start, is never tokenized as a chunk of its own, so
 * its count is verified here: when the limit takes the whole chunk as its index counts
 * it, the chunk is read one token further, which it must not hold (the stream's last
 * chunk, said too short, was read up to its count, the stream's end: the rest of its
 * tokens were left out of every epoch); when the chunk ends before the limit, it must
 * hold what its index says.
 */
static int encode_tail(struct sf_text_cache *c, struct tok_dest *d, uint64_t chunk, uint64_t limit,
		       struct sf_err *e)
{
	const uint64_t n0 = d->n, said = c->ds->chunks[chunk].n_tokens;
	const bool whole = limit - n0 >= said;
	int r = encode_docs(c, d, chunk, whole ? n0 + said + 1 : limit, 0, NULL, e);

	if (r == 0 && whole && d->n - n0 > said)
		return index_mismatch(c->ds, chunk, "tokens or more", d->n - n0, said, e);
	if (r == 0 && d->n < limit && d->n - n0 != said)
		return count_mismatch(c->ds, chunk, d->n - n0, e);
	return r;
}

/*
 * Append the tokens of `chunk` to `d` up to `limit`, as the tail of the chunk before it
 * (limit - d->n <= T+1, so its head holds them): copied from the chunk's head when
 * another producer has tokenized it, else tokenized, copied and stored as the head.
 */
static int append_tail(struct sf_text_cache *c, struct tok_dest *d, uint64_t chunk, uint64_t limit,
		       struct sf_err *e)
{
	const struct sf_dataset *ds = c->ds;
	const uint64_t n0 = d->n, docs0 = d->n_docs;
	struct sf_share_ref ref;
	struct tok_dest *h;
	int r;

	if (!ds->heads)
		return encode_tail(c, d, chunk, limit, e);
	r = sf__share_acquire(ds->heads, chunk, chunk, HEAD_WAIT_NS, &ref);
	if (r == SF_SHARE_HIT) {
		append_head(ds, d, &ref, limit);
		if (sf__share_valid(ds->heads, &ref))
			return 0;
		/* Refilled while it was copied: what was copied may be another chunk's. */
		d->n = n0;
		d->n_docs = docs0;
	}
	if (r != SF_SHARE_FILL)
		return encode_tail(c, d, chunk, limit, e);
	h = &c->head;
	h->n = 0;
	h->n_docs = 0;
	r = encode_head(c, h, chunk, e);
	if (r) {
		sf__share_abandon(&ref);
		return r < 0 ? r : encode_tail(c, d, chunk, limit, e);
	}
	write_head(ds, &ref, h->tokens, h->n);
	ref.n_tokens = h->n;
	append_head(ds, d, &ref, limit);
	if (sf__share_publish(&ref, chunk, h->n, h->n_docs) < 0)
		return taken_over(chunk, e);
	return 0;
}

/*
 * Look up the head of `chunk` before tokenizing the chunk into `d` (empty). On a hit it
 * is copied into `d` and *ret_skip is the number of its documents; on a claim *ret_ref
 * is the entry this producer now owns and must publish (publish_head()) or abandon.
 * Returns SF_SHARE_HIT, SF_SHARE_FILL or SF_SHARE_BUSY.
 */
static int lookup_head(struct sf_text_cache *c, struct tok_dest *d, uint64_t chunk,
		       struct sf_share_ref *ret_ref, uint64_t *ret_skip)
{
	const struct sf_dataset *ds = c->ds;
	int r;

	*ret_skip = 0;
	if (!ds->heads)
		return SF_SHARE_BUSY;
	r = sf__share_acquire(ds->heads, chunk, chunk, HEAD_WAIT_NS, ret_ref);
	if (r != SF_SHARE_HIT)
		return r;
	append_head(ds, d, ret_ref, d->cap);
	if (sf__share_valid(ds->heads, ret_ref)) {
		*ret_skip = ret_ref->n_docs;
		return r;
	}
	d->n = 0;
	d->n_docs = 0;
	return SF_SHARE_BUSY;
}

/* Write the head of the chunk just tokenized into `d` to the claimed entry `ref`. */
static void publish_head(const struct sf_dataset *ds, const struct tok_dest *d, uint64_t chunk,
			 const struct sf_share_ref *ref)
{
	uint64_t k = 0, n;

	while (k < d->n_docs && d->doc_starts[k] < ds->seq_len + 1)
		k++;
	n = k < d->n_docs ? d->doc_starts[k] : d->n;
	if (n > head_tokens_cap(ds) || k > head_docs_cap(ds)) {
		sf__share_abandon(ref);
		return;
	}
	write_head(ds, ref, d->tokens, n);
	sf__share_publish(ref, chunk, n, k);
}

/* Tokenize `chunk` and the T+1 tokens after it into `d`. */
static int fill_dest(struct sf_text_cache *c, struct tok_dest *d, uint64_t chunk, struct sf_err *e)
{
	const struct sf_dataset *ds = c->ds;
	const struct sf_chunk *ch = &ds->chunks[chunk];
	struct sf_share_ref head;
	uint64_t limit, need, skip;
	int hr, r;

	/* The file must still be the one indexed: a stat, against a tokenization. */
	r = sf__file_id_check(ds->text_files[ch->file].path, &ds->text_files[ch->file].id, e);
	if (r < 0)
		return r;
	d->n = 0;
	d->n_docs = 0;
	hr = lookup_head(c, d, chunk, &head, &skip);
	r = encode_docs(c, d, chunk, ch->n_tokens + 1, skip, NULL, e);
	if (r >= 0 && d->n != ch->n_tokens)
		r = count_mismatch(ds, chunk, d->n, e);
	/* The starts' room is sized from the documents counted: more would be left out. */
	if (r >= 0 && d->n_docs != ch->n_docs)
		r = index_mismatch(ds, chunk, "documents", d->n_docs, ch->n_docs, e);
	if (hr == SF_SHARE_FILL) {
		if (r < 0)
			sf__share_abandon(&head);
		else
			publish_head(ds, d, chunk, &head);
	}
	if (r < 0)
		return r;
	/* The window starting at the chunk's last token reads T more after it, within the
	 * chunk's span of the stream (a source of a mixture, or the whole stream). */
	need = sf__dataset_chunk_end(ds, chunk) - ch->start;
	limit = ch->n_tokens + ds->seq_len + 1 < need ? ch->n_tokens + ds->seq_len + 1 : need;
	for (uint64_t next = chunk + 1; d->n < limit && next < ds->n_chunks; next++) {
		r = append_tail(c, d, next, limit, e);
		if (r < 0)
			return r;
	}
	return 0;
}

int sf__text_encode_chunk(struct sf_text_cache *c, uint64_t chunk, const uint32_t **ret_ids,
			  uint64_t *ret_n, uint32_t *doc_lens, uint64_t *ret_n_docs,
			  struct sf_err *e)
{
	const struct sf_chunk *ch = &c->ds->chunks[chunk];
	int r = 0;

	c->chunk = UINT64_MAX;
	c->own.n = 0;
	c->own.n_docs = 0;
	if (ch->n_tokens)
		r = encode_docs(c, &c->own, chunk, ch->n_tokens + 1, 0, doc_lens, e);
	if (r < 0)
		return r;
	if (c->own.n != ch->n_tokens)
		return count_mismatch(c->ds, chunk, c->own.n, e);
	/* The same tokens in other documents (separators moved in a file whose size and
	 * mtime stayed): its documents' lengths would be wrong. */
	if (c->own.n_docs != ch->n_docs)
		return index_mismatch(c->ds, chunk, "documents", c->own.n_docs, ch->n_docs, e);
	*ret_ids = c->own.tokens;
	*ret_n = c->own.n;
	*ret_n_docs = c->own.n_docs;
	return 0;
}

/*
 * Copy the row at `pos` of a tokenized chunk (global offset `off`) and its document
 * starts. The caller has checked that pos + T + 1 <= d->n.
 */
static int copy_row(const struct sf_dataset *ds, const struct tok_dest *d, uint64_t pos,
		    uint64_t off, unsigned char *row, uint32_t *starts, struct sf_err *e)
{
	const uint32_t L = ds->seq_len + 1;
	uint32_t n_starts = 0;
	uint64_t lo = 0, hi = d->n_docs;
	size_t bad;

	if (sf__copy_tokens(row, ds->token_bytes, d->tokens + pos, 4, L, &bad) < 0)
		return sf__err(e, SF_E_SOURCE, "token %u at offset %llu does not fit uint16",
			       d->tokens[pos + bad], (unsigned long long)(off + bad));
	if (!starts)
		return 0;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (d->doc_starts[mid] < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < d->n_docs && d->doc_starts[lo] < pos + L && n_starts < ds->doc_starts; lo++)
		starts[n_starts++] = (uint32_t)(d->doc_starts[lo] - pos);
	for (uint32_t i = n_starts; i < ds->doc_starts; i++)
		starts[i] = UINT32_MAX;
	return 0;
}

/* The shared entry `ref` as a destination to tokenize into (empty). */
static struct tok_dest entry_dest(const struct sf_dataset *ds, const struct sf_share_ref *ref)
{
	return (struct tok_dest){.tokens = ref->tokens,
				 .cap = dest_tokens_cap(ds),
				 .doc_starts = ref->doc_starts,
				 .docs_cap = dest_docs_cap(ds)};
}

/* Tokenize `chunk` into the entry `ref` this producer claimed and publish it, or give
 * the entry back on an error. */
static int fill_entry(struct sf_text_cache *c, struct sf_share_ref *ref, uint64_t chunk,
		      struct sf_err *e)
{
	struct tok_dest d = entry_dest(c->ds, ref);
	int r = fill_dest(c, &d, chunk, e);

	if (r < 0) {
		sf__share_abandon(ref);
		return r;
	}
	if (sf__share_publish(ref, chunk, d.n, d.n_docs) < 0)
		return taken_over(chunk, e);
	return 0;
}

/*
 * How many times a row goes round acquiring and filling a shared entry before it gives
 * up and tokenizes locally: an entry that other producers keep refilling with other
 * chunks (more chunks in flight than entries) must not keep a producer spinning.
 */
#define SHARE_ROUNDS 4

/* read_row_shared() could not serve the row: tokenize its chunk locally. */
#define READ_LOCALLY 2
_Static_assert(READ_LOCALLY != SF_TEXT_DEFERRED, "distinct outcomes");

/*
 * Read the row through the shared cache. Returns 0 (row copied), SF_TEXT_DEFERRED
 * (another producer fills the chunk and wait_ns is 0), READ_LOCALLY, or an error.
 */
static int read_row_shared(struct sf_text_cache *c, uint64_t chunk, uint64_t pos, uint64_t off,
			   uint64_t key, int64_t wait_ns, unsigned char *row, uint32_t *starts,
			   struct sf_err *e)
{
	const struct sf_dataset *ds = c->ds;
	struct sf_chunk_share *share = ds->share;

	for (int round = 0; round < SHARE_ROUNDS; round++) {
		struct sf_share_ref ref;
		struct tok_dest d;
		int r = sf__share_acquire(share, key, chunk, wait_ns, &ref);

		if (r == SF_SHARE_BUSY)
			return wait_ns > 0 ? READ_LOCALLY : SF_TEXT_DEFERRED;
		if (r == SF_SHARE_FILL) {
			r = fill_entry(c, &ref, chunk, e);
			if (r < 0)
				return r;
			/* Read it back as any reader would: once published, another producer
			 * may already be replacing it. */
			continue;
		}
		d = entry_dest(ds, &ref);
		d.n = ref.n_tokens;
		d.n_docs = ref.n_docs;
		r = pos + ds->seq_len + 1 <= d.n ? copy_row(ds, &d, pos, off, row, starts, e)
						 : READ_LOCALLY;
		if (sf__share_valid(share, &ref))
			return r;
	}
	return READ_LOCALLY;
}

int sf__text_work_ahead(struct sf_text_cache *c, uint64_t chunk, uint64_t key)
{
	struct sf_share_ref ref;
	struct sf_err ignored;

	if (!c->ds->share || chunk == c->chunk ||
	    sf__share_acquire(c->ds->share, key, chunk, 0, &ref) != SF_SHARE_FILL)
		return 0;
	/* A chunk that fails (a file changed since it was indexed, a corrupt record) fails
	 * the batch that reads it, when that batch is built, not this one: the entry is
	 * given back and the work counts as done. */
	fill_entry(c, &ref, chunk, &ignored);
	return 1;
}

int sf__text_read_row(struct sf_text_cache *c, uint64_t off, uint64_t key, int64_t wait_ns,
		      unsigned char *row, uint32_t *starts, struct sf_err *e)
{
	const struct sf_dataset *ds = c->ds;
	uint64_t chunk = sf__text_find_chunk(ds, off), pos = off - ds->chunks[chunk].start;
	int r;

	if (chunk != c->chunk && ds->share) {
		r = read_row_shared(c, chunk, pos, off, key == UINT64_MAX ? chunk : key, wait_ns,
				    row, starts, e);
		if (r != READ_LOCALLY)
			return r;
	}
	if (chunk != c->chunk) {
		c->chunk = UINT64_MAX;
		r = fill_dest(c, &c->own, chunk, e);
		if (r < 0)
			return r;
		c->chunk = chunk;
	}
	return copy_row(ds, &c->own, pos, off, row, starts, e);
}

/*
 * The shared cache is sized so that the chunks all producers need at once fit without
 * colliding: in windows mode a batch of B windows spans at most min(B, ceil(B / windows
 * per chunk)) + 1 consecutive chunks of the epoch's order, P producers fill P batches
 * at once, and the batches just before and after theirs share boundary chunks with
 * them, hence (P + 2) batches' worth; a producer works ahead into the P batches after
 * its own (see work_ahead() in dataset.c), while the oldest batch in flight may be P - 1
 * before it, hence 2P + 2. A mixture has that many for each of its raw text sources
 * (counted with the fewest windows per chunk of any), placed apart: a chunk's key is
 * its key in its source's order times the number of raw text sources plus the source's
 * index among them (sf__dataset_share_key()), and the count of entries a multiple of
 * that number. Random offsets have no such locality: the same
 * count of entries, placed by chunk index, serves repeats when the data is small. Never
 * more entries than chunks, and at most SHARE_MAX_BYTES in all (entries hold whole
 * chunks, so a corpus of huge documents gets fewer, or none below two).
 */
#define SHARE_MAX_BYTES (UINT64_C(1) << 30)

static uint64_t page_round(uint64_t n)
{
	return (n + 4095) / 4096 * 4096;
}

/* The fewest windows per chunk of the raw text spans of `ds` (at least 1). */
static uint64_t min_windows_per_chunk(const struct sf_dataset *ds)
{
	uint64_t wpc = UINT64_MAX;

	for (uint32_t i = 0; ds->mix_sources && i < ds->n_sources; i++) {
		const struct sf_mix_source *m = &ds->mix_sources[i];

		if (m->text_slot != UINT32_MAX && m->n_chunks && m->n_windows / m->n_chunks < wpc)
			wpc = m->n_windows / m->n_chunks;
	}
	if (!ds->mix_sources)
		wpc = ds->n_windows / ds->n_chunks;
	return wpc ? wpc : 1;
}

int sf__text_share_create(struct sf_dataset *ds, struct sf_err *e)
{
	uint64_t B = ds->batch, per_batch, n, entry_bytes;
	const uint64_t spans = ds->n_text_spans;
	int r;
	uint64_t wpc = min_windows_per_chunk(ds);

	per_batch = (B + wpc - 1) / wpc < B ? (B + wpc - 1) / wpc + 1 : B + 1;
	n = (uint64_t)(2 * ds->producers + 2) * per_batch * spans;
	if (n > ds->n_chunks)
		n = ds->n_chunks;
	/* An entry takes whole pages (sf__share_create() rounds its stride up to 4 KiB): a
	 * million small files, a chunk each, would otherwise get a million 4 KiB heads. */
	entry_bytes = page_round(dest_tokens_cap(ds) * sizeof(uint32_t) +
				 dest_docs_cap(ds) * sizeof(uint64_t));
	if (n * entry_bytes > SHARE_MAX_BYTES)
		n = SHARE_MAX_BYTES / entry_bytes;
	if (n >= spans)
		n -= n % spans;
	if (n >= 2) {
		r = sf__share_create(n, dest_tokens_cap(ds), sizeof(uint32_t), dest_docs_cap(ds),
				     &ds->share, e);
		if (r < 0)
			return r;
	}
	/* A head keeps its documents' count, not their starts, which append_head() finds
	 * after each end-of-text id: text that may spell that id itself (specials allowed,
	 * or a tokenizer.json whose merges build it), or documents that begin with it too
	 * (bos the end-of-text id), get no heads, and their tails are tokenized where they
	 * are read. */
	if (ds->allowed != SF_TOK_ALLOW_NONE || (ds->bos != UINT32_MAX && ds->bos == ds->eot) ||
	    (ds->eot != UINT32_MAX && sf__tok_text_may_give(ds->tok, ds->eot)))
		return 0;
	/* One head per chunk, placed by chunk index, within the same bound. */
	n = ds->n_chunks;
	entry_bytes = page_round(head_tokens_cap(ds) * ds->token_bytes);
	if (n * entry_bytes > SHARE_MAX_BYTES)
		n = SHARE_MAX_BYTES / entry_bytes;
	if (n < 2)
		return 0;
	return sf__share_create(n, head_tokens_cap(ds), ds->token_bytes, 0, &ds->heads, e);
}
