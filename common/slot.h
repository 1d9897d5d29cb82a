/*
 * The slot protocol. Slot i of rank r's ring serves steps i, i+K, i+2K, ...; its word
 * says which (the lap) and in what state:
 *
 *   FREE(lap) --producer CAS--> FILLING(owner, lap) --release store--> READY(lap)
 *   READY(lap) --consumer CAS--> CLAIMED(owner, lap) --release store--> FREE(lap+1)
 *
 * Producers take the FREE slot with the lowest step over all rings (ties go round the
 * ranks), so no rank starves. The consumer of a rank owns its ring alone and takes its
 * steps in order. Sleepers wait on shared futexes with an eventcount: a waiter announces
 * itself in a *_waiters counter before its final check, and a publisher wakes only when
 * that counter is non-zero, so the common case costs no syscall.
 *
 * After a participant is known dead, sf__arena_repair() returns its FILLING slots to FREE
 * and its CLAIMED slots to READY, at the same lap: content is a pure function of (rank,
 * step), so any producer refills a slot identically.
 */
#ifndef SF_COMMON_SLOT_H
#define SF_COMMON_SLOT_H

#include <stdint.h>

#include "common/arena.h"

/*
 * Test-only kill points between protocol steps. Tests set sf__test_hook; in production
 * it stays NULL and each point costs one predictable branch.
 */
#define SF_TP_PRODUCER_CLAIMED	 1
#define SF_TP_PRODUCER_FILLED	 2
#define SF_TP_PRODUCER_PUBLISHED 3
#define SF_TP_CONSUMER_CLAIMED	 4
#define SF_TP_CONSUMER_READ	 5
#define SF_TP_CONSUMER_RELEASED	 6
#define SF_TP_COUNT		 7
/* Points for deterministic interleavings, not kills: a reclaimer holds a stale arena's
 * creator byte and is about to unlink it; a seek of an unattached rank holds its entry;
 * an attach has opened its descriptors and is about to read and map the arena. */
#define SF_TP_RECLAIM_FENCED 100
#define SF_TP_SEEK_HELD	     101
#define SF_TP_ATTACH_OPENED  102
/* A text file's index build has mapped the file and is about to scan it; has counted
 * the chunks of the files it cut and is about to walk again those that had skips. A
 * walk over a chunk's documents has its file mapped and is about to read it. */
#define SF_TP_INDEX_MAPPED  103
#define SF_TP_INDEX_COUNTED 104
#define SF_TP_WALK_MAPPED   105
/* A seek has moved one slot of the ring (a kill point: the others are not moved yet). */
#define SF_TP_SEEK_MOVED 106
/* A pre-tokenized file is mapped for its checks at open, or a view of its first tokens
 * taken for `check`'s vocabulary test; a compressed text file is open and about to be
 * read to be decompressed. */
#define SF_TP_TOKENS_MAPPED   107
#define SF_TP_DECOMPRESS_READ 108
/* sf__rename_pair() has moved the old pair aside, and is about to move the new one in. */
#define SF_TP_PAIR_ASIDE 109

extern void (*sf__test_hook)(int point);

#define SF_TEST_POINT(p)                                                                           \
	do {                                                                                       \
		if (__builtin_expect(sf__test_hook != 0, 0))                                       \
			sf__test_hook(p);                                                          \
	} while (0)

/* A slot a producer has claimed for filling. */
struct sf_fill {
	uint32_t rank;	      /* local rank: the ring */
	uint32_t global_rank; /* rank base + rank, as the node's ranks stood at the claim */
	uint32_t index;	      /* ring index */
	uint32_t pad;
	uint64_t step;
	uint64_t lap;
	struct sf_slot *slot;
	unsigned char *payload; /* payload_stride bytes, writable */
};

/*
 * How long to spin before sleeping on a futex, in polls (a few tens of microseconds).
 * Waking a sleeper costs 25-70 us on a VM (bench_slot, section 3), so a waiter that
 * gives up after a few microseconds turns every slow hand-off into that cost; measured
 * with bench_slot's ping-pong, 200 polls left a p99.9 of 77 us in some runs, 1000 keeps
 * it under 1 us. The spin happens once per wait, so an idle waiter still sleeps.
 */
#define SF_SPIN_POLLS 1000

/*
 * sf__participant_register - take participant entry `index` for the calling process with
 * `role` and `rank`: take the entry's lock byte (see arena.h), which a live holder keeps,
 * then repair what a dead previous holder left. Returns the new incarnation (>= 1),
 * SF_E_BUSY when a live process holds the entry, SF_E_RANGE, or -errno.
 */
int sf__participant_register(struct sf_arena *a, uint32_t index, uint32_t role, int32_t rank,
			     struct sf_err *e);

/*
 * Registering with role SF_ROLE_NONE holds the entry without acting in it (its pid reads
 * negative): a registrant meanwhile waits up to 2 s instead of being refused.
 */

/*
 * sf__participant_unregister - give entry `index` back (the caller holds no slot).
 * Returns 0, or SF_E_STATE when the entry no longer names this process (it was taken
 * from it); the entry's lock is given back either way.
 */
int sf__participant_unregister(struct sf_arena *a, uint32_t index);

/* sf__participant_alive - 1 when a live process holds entry `index` (or when that cannot
 * be told), 0 when nobody does. */
int sf__participant_alive(struct sf_arena *a, uint32_t index);

/*
 * sf__arena_repair - if the holder of participant `index` is dead (its lock byte is free,
 * and taken here as a fence), return its FILLING slots to FREE and its CLAIMED slots to
 * READY (same lap) and free its entry. Returns the number of slots repaired, 0 when the
 * entry was free or is held without a role, or SF_E_BUSY when its holder is alive or
 * its liveness cannot be told (nothing touched).
 */
int sf__arena_repair(struct sf_arena *a, uint32_t index);

/*
 * sf__producer_claim - claim the FREE slot with the lowest step for producer `me`.
 * Waits up to timeout_ns (< 0: no limit) when every slot is taken, or while the job is
 * PAUSED or the node's ranks are not known (it claims nothing then; node_ranks.h). The
 * slot is to be filled for ret_fill->global_rank. Returns 0 and fills *ret_fill;
 * SF_E_TIMEOUT, or SF_E_STOPPED once the job is stopping.
 */
int sf__producer_claim(struct sf_arena *a, uint32_t me, int64_t timeout_ns,
		       struct sf_fill *ret_fill);

/*
 * sf__producer_publish - publish a filled slot: record `length` payload bytes, the digest
 * of its tokens (and the checksum of all the bytes when the arena asks for one) and
 * `first_sample`, then make it READY and wake the rank's consumer if it sleeps. Returns 0, or
 * SF_E_STATE when the slot is no longer this producer's FILLING slot (nothing is published).
 */
int sf__producer_publish(struct sf_arena *a, uint32_t me, const struct sf_fill *fill,
			 uint32_t length, uint64_t first_sample);

/*
 * sf__consumer_claim - wait up to timeout_ns (< 0: no limit, 0: do not wait) until step
 * `step` of `rank` is READY and claim it for participant `me`. Returns 0 and the slot
 * in *ret_slot; SF_E_AGAIN (timeout 0), SF_E_TIMEOUT, SF_E_STOPPED, SF_E_STATE when
 * the step is no longer in the ring (already released), or SF_E_CHECKSUM (the claim is
 * kept, so the caller can release it). With SF_ARENA_F_CHECKSUM, the steps that are
 * multiples of the header's verify_every are hashed again and compared with the slot's
 * checksum and digest; other steps are not read.
 */
int sf__consumer_claim(struct sf_arena *a, uint32_t me, uint32_t rank, uint64_t step,
		       int64_t timeout_ns, struct sf_slot **ret_slot);

/*
 * sf__consumer_release - release a slot claimed by the consumer of `rank`: FREE for the
 * step K later. Returns 0, or SF_E_STATE when the slot is not that consumer's claim any
 * more (nothing is changed).
 */
int sf__consumer_release(struct sf_arena *a, uint32_t rank, struct sf_slot *slot);

/*
 * sf__consumer_unclaim - hand a slot claimed by the consumer of `rank` back for the same
 * step, in one CAS: READY again with its content (`refill` 0: a copy out of it failed),
 * or FREE for a producer to fill it again (`refill` 1: its checksum failed). A release
 * followed by a seek back left, between the two, a ring without that step, which a
 * successor of a rank killed there skipped. Returns 0, or SF_E_STATE as
 * sf__consumer_release().
 */
int sf__consumer_unclaim(struct sf_arena *a, uint32_t rank, struct sf_slot *slot, int refill);

/*
 * sf__consumer_release_quiet - sf__consumer_release() without waking sleeping producers.
 * Waking one costs a futex syscall (several microseconds, more in a VM), so a consumer
 * whose ring still holds enough READY batches may leave the refill for later; it must
 * then call sf__producers_wake() once its ring runs low (sleeping producers also rescan
 * every 100 ms, so a forgotten wake costs latency, never liveness).
 */
int sf__consumer_release_quiet(struct sf_arena *a, uint32_t rank, struct sf_slot *slot);

/* sf__producers_wake - wake the producers sleeping for a FREE slot, if any. */
void sf__producers_wake(struct sf_arena *a);

/* sf__cpu_relax - the pause of a spin-wait loop (x86 PAUSE, arm64 YIELD). */
static inline void sf__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/*
 * sf__ring_next_step - the first step of `rank` not yet released: the lowest step any
 * slot of the ring currently serves.
 */
uint64_t sf__ring_next_step(const struct sf_arena *a, uint32_t rank);

/*
 * sf__ring_seek - reposition rank `rank` (whose consumer is `me`) so that its next step
 * is `step`. Slots already READY for a step still wanted keep their content. Waits for
 * slots being filled, repairing a dead filler. Returns 0, or SF_E_STOPPED.
 */
int sf__ring_seek(struct sf_arena *a, uint32_t me, uint32_t rank, uint64_t step);

/*
 * sf__ring_seek_unfinished - finish the seek of rank `rank` that its previous consumer
 * was killed in (the ring's seek_to; some slots moved, others not: no window of K steps),
 * for its successor `me`, which holds the entry now. Returns 0 (also when there was
 * none), SF_E_LAYOUT for a mark past the job's steps, or what sf__ring_seek() returns.
 */
int sf__ring_seek_unfinished(struct sf_arena *a, uint32_t me, uint32_t rank);

/*
 * The launcher's control `seek`, of a rank no consumer is attached to, in three calls
 * so that the supervisor never waits on a producer:
 * sf__ring_seek_hold - take the rank's consumer entry for the seek (a consumer that
 * attaches meanwhile waits). Returns 0, SF_E_RANGE, or SF_E_BUSY when a consumer is
 * attached; detail in `e`.
 * sf__ring_seek_try - one pass of sf__ring_seek() that waits for no slot: 0 when the
 * ring is repositioned, 1 when a slot is still being filled (call again), or an error.
 * sf__ring_seek_release - give the entry back.
 */
int sf__ring_seek_hold(struct sf_arena *a, uint32_t rank, struct sf_err *e);
int sf__ring_seek_try(struct sf_arena *a, uint32_t rank, uint64_t step);
void sf__ring_seek_release(struct sf_arena *a, uint32_t rank);

/* sf__payload_checksum - the checksum shmfeed stores: xxh3-64 of the bytes. */
uint64_t sf__payload_checksum(const void *p, size_t len);

/*
 * sf__payload_hashes - what a slot header records of a payload of `length` bytes in
 * arena `a`: *ret_digest, xxh3-64 of its token bytes (at most B x (T+1) x token size),
 * and, when `want_checksum`, *ret_checksum, xxh3-64 of all `length` bytes (else 0). One
 * pass over the bytes.
 */
void sf__payload_hashes(const struct sf_arena *a, const void *payload, uint32_t length,
			int want_checksum, uint64_t *ret_digest, uint64_t *ret_checksum);

#endif
