/*
 * The node's global ranks: agreement of the consumers on the rank base, and the re-base
 * of a node whose ranks changed at an elastic restart (see node_ranks.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/node_ranks.h"
#include "common/proc.h"
#include "common/slot.h"

/* How often a re-base looks again at slots still being filled, or at an entry another
 * process is repairing; and how many times at most for the latter (2 s). */
#define DRAIN_POLL_US 1000
#define REPAIR_TRIES  2000

int sf__node_ranks_known(const struct sf_arena *a, uint32_t *ret_base)
{
	/* Acquire: pairs with the release store of a known base in set_base(). */
	uint64_t w = atomic_load_explicit(&a->hdr->node_ranks, memory_order_acquire);

	return sf__node_ranks_decode(w, &a->geo, ret_base) > 0;
}

void sf__node_ranks_describe(const struct sf_arena *a, char *buf, size_t len)
{
	uint64_t w = atomic_load_explicit(&a->hdr->node_ranks, memory_order_acquire);
	int automatic = (a->geo.flags & SF_ARENA_F_RANK_AUTO) != 0;
	uint32_t base = 0;
	int known = sf__node_ranks_decode(w, &a->geo, &base);

	if (known > 0)
		snprintf(buf, len, "%u..%u%s", base, base + a->geo.ranks - 1,
			 automatic ? " (auto)" : "");
	else if (known == 0)
		snprintf(buf, len, "auto, not yet known");
	else
		snprintf(buf, len, "invalid (0x%016llx)", (unsigned long long)w);
}

/*
 * What the claim says the base is: 0 and *ret_want (-1 when the claim has no global
 * rank), or an error naming the variables that disagree.
 */
static int claimed_base(const struct sf_arena *a, uint32_t rank, const struct sf_rank_env *c,
			int64_t *ret_want, struct sf_err *e)
{
	const struct sf_geometry *g = &a->geo;
	const char *job = a->hdr->job;
	int64_t lr = c->local_rank >= 0 ? c->local_rank : rank, want;
	const struct {
		const char *name;
		int64_t v;
	} fields[] = {{"RANK", c->rank},
		      {"WORLD_SIZE", c->world_size},
		      {"LOCAL_WORLD_SIZE", c->local_world_size},
		      {"GROUP_RANK", c->group_rank}};

	/* -1 is "not known"; any other negative is a launcher's mistake, not taken as -1. */
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (fields[i].v < -1)
			return sf__err(e, SF_E_RANGE,
				       "%s=%lld is not valid (-1 stands for not known; others are "
				       "0 or more)",
				       fields[i].name, (long long)fields[i].v);
	if (c->world_size >= 0 && c->world_size != g->world_size)
		return sf__err(e, SF_E_GEOMETRY,
			       "WORLD_SIZE=%lld, but job '%s' serves world size %u (global batch "
			       "%u x %u = %llu samples): start as many ranks as the job's "
			       "consumers.world_size, or set it to the ranks started (`--set "
			       "consumers.world_size=N`); a world size that changes at a restart "
			       "needs a new job whose world_size x batch.size is the same, resumed "
			       "from the ranks' states (load_state_dict)",
			       (long long)c->world_size, job, g->world_size, g->world_size,
			       g->batch, (unsigned long long)g->world_size * g->batch);
	if (c->local_world_size >= 0 && c->local_world_size != g->ranks)
		return sf__err(e, SF_E_GEOMETRY,
			       "LOCAL_WORLD_SIZE=%lld, but job '%s' serves %u ranks on this node "
			       "(consumers.local_ranks)",
			       (long long)c->local_world_size, job, g->ranks);
	if (lr != rank)
		return sf__err(e, SF_E_RANGE, "LOCAL_RANK=%lld, but attaching as local rank %u",
			       (long long)lr, rank);
	*ret_want = -1;
	if (c->rank < 0)
		return 0;
	want = c->rank - lr;
	if (want < 0 || want > (int64_t)(g->world_size - g->ranks)) {
		char last[24]; /* want + ranks - 1 without overflow: want > -2^63 */

		if (want >= 0)
			snprintf(last, sizeof(last), "%llu",
				 (unsigned long long)want + g->ranks - 1);
		else
			snprintf(last, sizeof(last), "%lld",
				 (long long)(want + (int64_t)g->ranks - 1));
		return sf__err(e, SF_E_RANGE,
			       "RANK=%lld with LOCAL_RANK=%lld puts this node's ranks at %lld..%s, "
			       "outside world size %u",
			       (long long)c->rank, (long long)lr, (long long)want, last,
			       g->world_size);
	}
	/* torchrun numbers the nodes' ranks one after another in group-rank order, each node
	 * with its own --nproc_per_node: node 0 starts at rank 0, and node k at rank k or
	 * later (each node before it holds a rank at least). Nothing more is known of the
	 * other nodes' sizes. */
	if (c->group_rank >= 0 && ((c->group_rank == 0) != (want == 0) || want < c->group_rank))
		return sf__err(e, SF_E_RANGE,
			       "RANK=%lld - LOCAL_RANK=%lld = %lld is this node's first rank, but "
			       "GROUP_RANK=%lld: node 0 starts at rank 0, and each node before "
			       "this one holds at least one rank; the launcher's ranks contradict "
			       "each other",
			       (long long)c->rank, (long long)lr, (long long)want,
			       (long long)c->group_rank);
	*ret_want = want;
	return 0;
}

/* Store a known base and wake the producers that wait for one. */
static void set_base(struct sf_arena *a, uint32_t generation, uint32_t base)
{
	/* Release: pairs with the acquire loads in sf__node_ranks_known() and the
	 * producers' claim, so the discarded slots (re-base) are FREE before the base is
	 * seen. */
	atomic_store_explicit(&a->hdr->node_ranks, sf__node_ranks_word(generation, base, 1),
			      memory_order_release);
	sf__producers_wake(a);
}

/* A live consumer other than local rank `rank`, or -1: a rank of the current base. */
static int64_t live_consumer(struct sf_arena *a, uint32_t rank, int32_t *ret_pid)
{
	const uint32_t P = a->geo.max_producers;

	for (uint32_t j = 0; j < a->geo.ranks; j++) {
		int32_t pid;

		if (j == rank)
			continue;
		/* Acquire: pairs with the release store of pid in registration. A role-less
		 * holder (pid < 0, a launcher repositioning the rank) is no rank. */
		pid = atomic_load_explicit(&a->participants[P + j].pid, memory_order_acquire);
		if (pid > 0 && sf__participant_alive(a, P + j)) {
			*ret_pid = pid;
			return j;
		}
	}
	return -1;
}

/*
 * Steps 1-3 of a re-base (node_ranks.h) to base `base`, generation `generation`, by the
 * consumer of local rank `rank`; the caller holds SF_LOCK_NODE_RANKS and has found no
 * live consumer of the old base.
 */
static int rebase(struct sf_arena *a, uint32_t rank, uint32_t generation, uint32_t base,
		  struct sf_err *e)
{
	struct sf_arena_header *h = a->hdr;
	const uint32_t P = a->geo.max_producers;
	const uint32_t nslots = a->geo.ranks * a->geo.slots_per_rank;
	uint32_t filling;

	/* Seq_cst store and full fence: pairs with the fence between a producer's claim
	 * and its load of the word (sf__producer_claim()): either it sees "not known" and
	 * hands its slot back, or the scan below sees the slot FILLING. */
	atomic_store_explicit(&h->node_ranks, sf__node_ranks_word(generation, 0, 0),
			      memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	/* Claims of the old ranks' dead consumers come back as READY, to be discarded. No
	 * live rank holds an entry now (checked under the lock, which every registration
	 * takes), so a repair refused (SF_E_BUSY) is one the launcher is making of the same
	 * dead rank, behind the same fence: wait until it is done, so that the slots it
	 * returns to READY are discarded below. */
	for (uint32_t j = 0; j < a->geo.ranks; j++) {
		if (j == rank)
			continue;
		for (uint32_t tries = 0; sf__arena_repair(a, P + j) == SF_E_BUSY; tries++) {
			if (tries >= REPAIR_TRIES)
				return sf__err(e, SF_E_BUSY,
					       "job '%s': cannot repair local rank %u of the old "
					       "base: its entry stays held",
					       h->job, j);
			usleep(DRAIN_POLL_US);
		}
	}
	do {
		filling = 0;
		for (uint32_t i = 0; i < nslots; i++) {
			uint64_t w = atomic_load_explicit(&a->slots[i].word, memory_order_acquire);

			if (sf__slot_state(w) != SF_SLOT_FILLING)
				continue;
			filling++;
			/* A filler that died meanwhile is repaired here (its slot back to FREE);
			 * a live one finishes, and its batch is discarded below. */
			sf__arena_repair(a, sf__slot_owner(w));
		}
		if (!filling)
			break;
		if (atomic_load_explicit(&h->job_state, memory_order_acquire) == SF_JOB_STOPPING)
			return sf__err(e, SF_E_STOPPED, "job '%s' is stopping", h->job);
		if (!sf__arena_creator_alive(a))
			return sf__err(e, SF_E_JOB_GONE, "the launcher of job '%s' is gone",
				       h->job);
		usleep(DRAIN_POLL_US);
	} while (filling);
	for (uint32_t i = 0; i < nslots; i++) {
		struct sf_slot *s = &a->slots[i];
		uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);

		/* Producers and repairs make slots READY, and none does now (the repairs
		 * are above); a slot that is not READY any more (a concurrent seek of the
		 * launcher) is left as it is. */
		if (sf__slot_state(w) == SF_SLOT_READY)
			atomic_compare_exchange_strong_explicit(
				&s->word, &w, sf__slot_word(SF_SLOT_FREE, 0, sf__slot_lap(w)),
				memory_order_acq_rel, memory_order_relaxed);
	}
	set_base(a, generation, base);
	return 0;
}

/* The agreement itself, on the base `want` that claimed_base() took from `claim`; the
 * caller holds SF_LOCK_NODE_RANKS and the rank's entry. */
static int agree(struct sf_arena *a, uint32_t rank, const struct sf_rank_env *claim, int64_t want,
		 uint32_t *ret_base, struct sf_err *e)
{
	const struct sf_arena_header *h = a->hdr;
	uint64_t w = atomic_load_explicit(&h->node_ranks, memory_order_acquire);
	uint32_t base = 0, gen = sf__node_ranks_generation(w);
	int known = sf__node_ranks_decode(w, &a->geo, &base), r;
	int64_t other;
	int32_t pid = 0;

	if (known < 0)
		return sf__err(e, SF_E_LAYOUT, "job '%s': invalid node ranks 0x%016llx", h->job,
			       (unsigned long long)w);
	if (known && (want < 0 || want == base)) {
		*ret_base = base;
		return 0;
	}
	if (!known && want < 0)
		return sf__err(e, SF_E_RANGE,
			       "job '%s' (consumers.rank_base: auto) does not know this node's "
			       "global ranks yet: the first rank to attach must give its global "
			       "rank (RANK)",
			       h->job);
	if (known && !(a->geo.flags & SF_ARENA_F_RANK_AUTO))
		return sf__err(e, SF_E_RANGE,
			       "RANK=%lld with LOCAL_RANK=%u, but job '%s' serves global ranks "
			       "%u..%u on this node (consumers.rank_base: %u): local rank %u is "
			       "global rank %u",
			       (long long)claim->rank, rank, h->job, base, base + a->geo.ranks - 1,
			       base, rank, base + rank);
	if (known) {
		other = live_consumer(a, rank, &pid);
		if (other >= 0)
			return sf__err(
				e, SF_E_RANGE,
				"RANK=%lld with LOCAL_RANK=%u puts this node's ranks at "
				"%lld..%lld, but job '%s' serves %u..%u (agreed by its first "
				"rank), and local rank %lld (pid %d) of those still runs; a "
				"node re-bases only once every rank of the old base has exited",
				(long long)claim->rank, rank, (long long)want,
				(long long)want + a->geo.ranks - 1, h->job, base,
				base + a->geo.ranks - 1, (long long)other, (int)pid);
	}
	if (!known && gen == 0)
		set_base(a, 1, (uint32_t)want);
	else {
		/* A different base with no rank of the old one alive, or a re-base that
		 * died half-way (the word is "not known" past generation 0): discard. */
		r = rebase(a, rank, gen + 1, (uint32_t)want, e);
		if (r < 0)
			return r;
	}
	*ret_base = (uint32_t)want;
	return 0;
}

int sf__node_ranks_register(struct sf_arena *a, uint32_t rank, const struct sf_rank_env *claim,
			    uint32_t *ret_base, struct sf_err *e)
{
	const uint32_t me = a->geo.max_producers + rank;
	uint32_t base = 0;
	int64_t want = -1;
	int r;

	if (rank >= a->geo.ranks)
		return sf__err(e, SF_E_RANGE, "job '%s' has local ranks 0..%u, not %u", a->hdr->job,
			       a->geo.ranks - 1, rank);
	/* The claim alone, against the job's geometry: refused as such whoever holds the
	 * rank, so that a launcher's mistake is never reported as a rank taken. */
	r = claimed_base(a, rank, claim, &want, e);
	if (r < 0)
		return r;
	/* Registration and agreement in one step under the lock: a consumer registered
	 * is a consumer that agreed to the base as it stands (node_ranks.h). */
	r = sf__arena_lock_wait(a, SF_LOCK_NODE_RANKS);
	if (r < 0)
		return sf__err(e, r, "job '%s': cannot lock the node's ranks: %s", a->hdr->job,
			       strerror(-r));
	r = sf__participant_register(a, me, SF_ROLE_CONSUMER, (int32_t)rank, e);
	if (r >= 0) {
		r = agree(a, rank, claim, want, &base, e);
		if (r < 0)
			sf__participant_unregister(a, me);
	}
	sf__arena_unlock(a, SF_LOCK_NODE_RANKS);
	if (r < 0)
		return r;
	*ret_base = base;
	return 0;
}
