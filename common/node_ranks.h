/*
 * The node's global ranks. A job that spans several nodes serves, on this node, the
 * global ranks base .. base + R - 1. With a static base (consumers.rank_base: N) the job
 * file says which; with `rank_base: auto` the first rank that attaches says it, from
 * what its launcher (torchrun) told it: RANK - LOCAL_RANK, checked against GROUP_RANK,
 * LOCAL_WORLD_SIZE and WORLD_SIZE. The header's node_ranks word records it (see
 * arena.h); producers fill nothing while it is not known.
 *
 * Agreement. A consumer registers in its participant entry and agrees on the base in
 * one step under the SF_LOCK_NODE_RANKS lock, so every live registered consumer has
 * agreed to the word as it stands. A consumer whose base equals the word's goes on.
 * One whose base differs is refused while any other consumer of the node is alive (a
 * rank of the old base still runs: its participant lock is held); otherwise the node
 * re-bases:
 *   1. the word becomes "not known" (generation + 1), so producers claim no more work;
 *   2. dead consumers' claims are repaired, slots being filled are waited for (a dead
 *      filler is repaired), and every READY slot goes back to FREE for the same step:
 *      batches made for the old ranks are discarded, never delivered;
 *   3. the word gets the new base; producers refill the rings for the new ranks.
 * Each ring keeps its position (the step its local rank had reached); a restarted rank
 * loads its resume state (seek) to continue exactly where its checkpoint says.
 *
 * Ordering with producers (a Dekker pair): a producer claims a slot (CAS to FILLING),
 * then a full fence, then loads the word, and fills only for a known base, else hands
 * the slot back; the re-base stores "not known", a full fence, then looks at the slots.
 * Either the producer sees "not known", or the re-base sees its FILLING slot and waits
 * for it, then discards what it published.
 */
#ifndef SF_COMMON_NODE_RANKS_H
#define SF_COMMON_NODE_RANKS_H

#include <stdint.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"

/*
 * sf__node_ranks_register - register the consumer of local rank `rank` in its
 * participant entry and agree on the node's rank base with `claim` as described above,
 * re-basing when that is allowed. Returns 0 and *ret_base (the entry is then held:
 * sf__participant_unregister() gives it back); SF_E_GEOMETRY (world or node size differ
 * from the job's), SF_E_RANGE (a claim that contradicts itself, or the node's base while
 * ranks of that base live, or no global rank while the base is not known), SF_E_BUSY
 * (the rank is taken; a claim at odds with the job is refused first), SF_E_STOPPED,
 * SF_E_JOB_GONE or -errno, with the entry not held; detail in `e`, naming both values.
 */
int sf__node_ranks_register(struct sf_arena *a, uint32_t rank, const struct sf_rank_env *claim,
			    uint32_t *ret_base, struct sf_err *e);

/*
 * sf__node_ranks_known - the node's rank base when it is known: 1 and *ret_base, or 0.
 * sf__node_ranks_describe - "2..3", or "auto, not yet known", into buf.
 */
int sf__node_ranks_known(const struct sf_arena *a, uint32_t *ret_base);
void sf__node_ranks_describe(const struct sf_arena *a, char *buf, size_t len);

#endif
