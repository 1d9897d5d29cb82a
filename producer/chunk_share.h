/*
 * The shared chunk cache: tokenized raw text chunks in MAP_SHARED memory that the
 * launcher maps before it forks the producers, so a chunk tokenized by one producer is
 * read by all of them. Without it each producer keeps only its own last chunk, and since
 * consecutive steps go to different producers, every producer would tokenize nearly
 * every chunk.
 *
 * The cache is a table of entries, each holding one chunk's tokens (with the tokens that
 * follow it, up to T+1, so any window starting in the chunk is served from one entry)
 * and its document starts. An entry is found by a placement key chosen by the caller
 * (the chunk's position in the epoch's chunk order, so the chunks that producers need
 * at the same time never collide) modulo the number of entries, and holds whatever
 * chunk was last put there; its `chunk` field says which.
 *
 * Protocol of an entry's word (state | pid | generation):
 *   EMPTY or READY(chunk) --CAS by a producer--> FILLING(pid, gen+1) --release--> READY
 * Whoever wins the CAS tokenizes the chunk into the entry; nobody else writes it. Readers
 * copy out of a READY entry without taking it (a seqlock: they re-read the word after
 * copying and discard the copy when it changed), so a reader that dies leaves nothing
 * behind and never delays a writer. A producer that dies while FILLING leaves its pid in
 * the word; the next producer that needs the entry and finds that process gone takes the
 * entry over (the content is a pure function of the chunk, so it simply refills it). A
 * live filler is never preempted: after a bounded wait, a reader tokenizes the chunk
 * locally instead, which gives the same bytes (D1).
 */
#ifndef SF_PRODUCER_CHUNK_SHARE_H
#define SF_PRODUCER_CHUNK_SHARE_H

#include <stdint.h>

#include "common/errors.h"

struct sf_chunk_share;

/* What sf__share_acquire() found. */
#define SF_SHARE_HIT  0 /* the entry holds the chunk: copy from it, then validate */
#define SF_SHARE_FILL 1 /* the caller owns the entry: fill it, then publish or abandon */
#define SF_SHARE_BUSY 2 /* another live producer fills the entry */

/* A view of one entry, valid until validated, published or abandoned. */
struct sf_share_ref {
	uint64_t word;	      /* the entry's word when acquired */
	void *tokens;	      /* tokens_cap ids of token_bytes each */
	uint64_t *doc_starts; /* docs_cap offsets into tokens (none when docs_cap is 0) */
	uint64_t n_tokens;    /* HIT: tokens held (<= tokens_cap) */
	uint64_t n_docs;      /* HIT: document starts held (<= docs_cap) */
	void *entry;
};

/*
 * sf__share_create - map `n_entries` entries of `tokens_cap` ids of `token_bytes` (2 or 4)
 * each and `docs_cap` document starts, shared with the processes forked afterwards. With
 * `docs_cap` 0 an entry keeps a count of documents (n_docs) but not their starts.
 * Returns 0 and *ret_share (free with sf__share_free()), or -ENOMEM.
 */
int sf__share_create(uint64_t n_entries, uint64_t tokens_cap, uint32_t token_bytes,
		     uint64_t docs_cap, struct sf_chunk_share **ret_share, struct sf_err *e);

/* sf__share_free - unmap; accepts NULL. Other processes keep their own mappings. */
void sf__share_free(struct sf_chunk_share *s);

/* sf__share_entries - the number of entries. */
uint64_t sf__share_entries(const struct sf_chunk_share *s);

/*
 * sf__share_acquire - look up `chunk` at placement `key`. Returns SF_SHARE_HIT (the
 * entry holds it: read it through ref, then call sf__share_valid()), SF_SHARE_FILL (the
 * entry was free, held another chunk, or belonged to a dead filler: it is now the
 * caller's to fill), or SF_SHARE_BUSY (a live producer fills it). With wait_ns > 0 a
 * busy entry is waited for up to that long before SF_SHARE_BUSY is returned.
 */
int sf__share_acquire(struct sf_chunk_share *s, uint64_t key, uint64_t chunk, int64_t wait_ns,
		      struct sf_share_ref *ret_ref);

/*
 * sf__share_valid - 1 when the entry did not change since sf__share_acquire() returned
 * SF_SHARE_HIT, so what was copied from it is the chunk's; 0 when it was refilled
 * meanwhile and the copy must be discarded.
 */
int sf__share_valid(struct sf_chunk_share *s, const struct sf_share_ref *ref);

/*
 * sf__share_publish - make a filled entry READY with `n_tokens` ids and `n_docs` starts.
 * Returns 0, or SF_E_STATE when the entry is no longer this fill's (it was taken over):
 * nothing is published, and what the caller read back from the entry is not to be
 * trusted.
 */
int sf__share_publish(const struct sf_share_ref *ref, uint64_t chunk, uint64_t n_tokens,
		      uint64_t n_docs);

/* sf__share_abandon - give back an entry whose fill failed (it becomes EMPTY). Returns 0,
 * or SF_E_STATE when the entry is no longer this fill's (left as it is). */
int sf__share_abandon(const struct sf_share_ref *ref);

/* Counters of this process, for the benchmark and the tests. */
struct sf_share_counters {
	uint64_t hits;	      /* reads served by an entry another process or this one filled */
	uint64_t fills;	      /* entries this process filled */
	uint64_t busy;	      /* acquisitions that found a live filler and gave up */
	uint64_t waits;	      /* acquisitions that slept on a filler */
	uint64_t takeovers;   /* entries taken over from a dead filler */
	uint64_t stale_reads; /* copies discarded because the entry changed */
};

/* sf__share_counters - this process's counters (each forked process has its own). */
void sf__share_counters(const struct sf_chunk_share *s, struct sf_share_counters *ret);

#endif
