/*
 * The slot protocol: participant registration, producer claim/publish, consumer
 * claim/release, seek, and repair after a participant's death. Nothing here allocates:
 * it runs on the hot path of producers and consumers.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#ifdef SF_HAVE_XXH3_DISPATCH
/* Replaces XXH3_64bits and its variants by libxxhash's runtime-dispatched versions:
 * the same hashes, computed with the widest vector unit the CPU has. */
#include <xxh_x86dispatch.h>
#endif

#include "shmfeed/shmfeed.h"
#include "common/futex.h"
#include "common/proc.h"
#include "common/slot.h"

/*
 * Participant pid values: > 0, the registered holder; 0, free; < 0, -q: process q holds
 * the entry without a role (a seek of an unattached rank). Who holds an entry is decided
 * by its lock byte, never by this field: it is what inspection shows, and a non-zero
 * value in an entry whose lock is free is what a dead holder left for repair.
 */
#define PID_FREE 0

/* Tries of a registration that finds the entry's lock held: a registered holder (pid >
 * 0) is refused after a few milliseconds (the time a repairer needs to clear a dead one's
 * pid); a role-less holder or a registrant in progress is waited for up to 2 s. */
#define REGISTER_TRIES_HELD 20
#define REGISTER_TRIES_MAX  2000

void (*sf__test_hook)(int point);

static uint32_t participants_count(const struct sf_arena *a)
{
	return a->geo.max_producers + a->geo.ranks;
}

uint64_t sf__payload_checksum(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}

void sf__payload_hashes(const struct sf_arena *a, const void *payload, uint32_t length,
			int want_checksum, uint64_t *ret_digest, uint64_t *ret_checksum)
{
	const struct sf_geometry *g = &a->geo;
	const uint64_t tokens = (uint64_t)g->batch * g->seq_tokens * g->token_bytes;
	XXH3_state_t st;

	if (!want_checksum) {
		*ret_digest = XXH3_64bits(payload, length < tokens ? length : (size_t)tokens);
		*ret_checksum = 0;
		return;
	}
	if (length <= tokens) {
		*ret_digest = *ret_checksum = XXH3_64bits(payload, length);
		return;
	}
	/* Document starts follow the tokens: one streaming pass yields the digest of the
	 * tokens on the way to the checksum of the whole payload (a streamed XXH3 equals
	 * the one-shot hash of the same bytes). */
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, payload, (size_t)tokens);
	*ret_digest = XXH3_64bits_digest(&st);
	XXH3_64bits_update(&st, (const unsigned char *)payload + tokens, length - (size_t)tokens);
	*ret_checksum = XXH3_64bits_digest(&st);
}

/* The waiter word and bit of producer `me` in the header's free_waiters bitmap. */
static _Atomic uint64_t *producer_waiter_word(struct sf_arena *a, uint32_t me, uint64_t *ret_bit)
{
	uint32_t b = me % SF_MAX_PRODUCERS;

	*ret_bit = UINT64_C(1) << (b % 64);
	return &a->hdr->free_waiters[b / 64];
}

/*
 * Clear what a sleeper of entry `index` may have left when it was killed in its sleep:
 * its bit among the producers' waiters, or its ring's waiter flag. The caller holds the
 * entry's lock, so that holder is gone and no new one sleeps yet.
 */
static void clear_waiter(struct sf_arena *a, uint32_t index)
{
	const uint32_t P = a->geo.max_producers;

	if (index < P) {
		uint64_t bit;
		_Atomic uint64_t *w = producer_waiter_word(a, index, &bit);

		atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed);
	} else {
		atomic_store_explicit(&a->rings[index - P].ready_waiters, 0, memory_order_relaxed);
	}
}

static void wake_producers(struct sf_arena *a);
static void wake_consumer(struct sf_arena *a, uint32_t rank);

/*
 * Return the slots a dead holder of entry `index` left: FILLING to FREE, CLAIMED to
 * READY, at the same lap (content is a pure function of the step). The caller holds the
 * entry's lock, which fences the dead holder: every slot owned by `index` is its.
 */
static uint32_t repair_slots(struct sf_arena *a, uint32_t index)
{
	uint32_t nslots = a->geo.ranks * a->geo.slots_per_rank, repaired = 0;

	for (uint32_t i = 0; i < nslots; i++) {
		struct sf_slot *s = &a->slots[i];
		uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
		uint32_t st = sf__slot_state(w);
		uint64_t to;

		if ((st != SF_SLOT_FILLING && st != SF_SLOT_CLAIMED) || sf__slot_owner(w) != index)
			continue;
		to = sf__slot_word(st == SF_SLOT_FILLING ? SF_SLOT_FREE : SF_SLOT_READY, 0,
				   sf__slot_lap(w));
		/* Published by the CAS (release) with the READY word. */
		if (st == SF_SLOT_CLAIMED)
			s->held_before = 1;
		/* The owner is fenced, so only a concurrent seek can change this word; if it
		 * did, the slot is no longer this participant's to repair. */
		if (atomic_compare_exchange_strong_explicit(&s->word, &w, to, memory_order_acq_rel,
							    memory_order_relaxed))
			repaired++;
	}
	clear_waiter(a, index);
	atomic_fetch_add_explicit(&a->hdr->repairs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&a->hdr->slots_repaired, repaired, memory_order_relaxed);
	wake_producers(a);
	for (uint32_t r = 0; r < a->geo.ranks; r++)
		wake_consumer(a, r);
	return repaired;
}

int sf__participant_register(struct sf_arena *a, uint32_t index, uint32_t role, int32_t rank,
			     struct sf_err *e)
{
	const int32_t self = (int32_t)getpid();
	struct sf_participant *p;
	uint64_t starttime = 0;
	uint32_t inc;
	int32_t old;
	int r = SF_E_BUSY;

	if (index >= participants_count(a))
		return sf__err(e, SF_E_RANGE, "participant %u out of range (%u)", index,
			       participants_count(a));
	p = &a->participants[index];
	for (int attempt = 0;; attempt++) {
		/* The probe sees a lock this process itself holds through another handle or
		 * an earlier registration of this entry, which taking the lock would not. */
		r = sf__arena_lock_held(a, SF_LOCK_PARTICIPANT(index));
		if (r == 0)
			r = sf__arena_lock(a, SF_LOCK_PARTICIPANT(index));
		else if (r == 1)
			r = SF_E_BUSY;
		if (r == 0)
			break;
		if (r != SF_E_BUSY)
			return sf__err(e, r, "participant %u: cannot lock its entry: %s", index,
				       strerror(-r));
		old = atomic_load_explicit(&p->pid, memory_order_relaxed);
		if (old < 0 && attempt >= REGISTER_TRIES_MAX)
			return sf__err(
				e, SF_E_BUSY,
				"participant %u is held by pid %d without a role (a launcher "
				"repositioning the rank); try again",
				index, -old);
		if ((old > 0 && attempt >= REGISTER_TRIES_HELD) || attempt >= REGISTER_TRIES_MAX)
			return sf__err(e, SF_E_BUSY, "participant %u is held by live pid %d", index,
				       old);
		usleep(1000);
	}
	/* This process holds the entry's lock: any earlier holder is dead. Acquire: pairs
	 * with the release stores of pid, so what a dead holder wrote is seen whole. */
	old = atomic_load_explicit(&p->pid, memory_order_acquire);
	if (old != PID_FREE)
		repair_slots(a, index);
	else
		clear_waiter(a, index);
	sf__proc_starttime(getpid(), &starttime);
	p->role = role;
	p->rank = rank;
	p->starttime = starttime;
	inc = atomic_fetch_add_explicit(&p->incarnation, 1, memory_order_relaxed) + 1;
	atomic_store_explicit(&p->heartbeat_ns, sf__now_ns(), memory_order_relaxed);
	/* Release: pairs with the acquire loads of pid in repair and inspection, which then
	 * read a complete identity. */
	atomic_store_explicit(&p->pid, role == SF_ROLE_NONE ? -self : self, memory_order_release);
	return (int)inc;
}

int sf__participant_unregister(struct sf_arena *a, uint32_t index)
{
	struct sf_participant *p = &a->participants[index];
	const int32_t self = (int32_t)getpid();
	int32_t pid = atomic_load_explicit(&p->pid, memory_order_relaxed);
	int r = 0;

	/* Release: the holder's last slot transitions happen before the entry is free. A
	 * pid that is not this process's means the entry was taken from it: say so. */
	if ((pid != self && pid != -self) ||
	    !atomic_compare_exchange_strong_explicit(&p->pid, &pid, PID_FREE, memory_order_release,
						     memory_order_relaxed))
		r = SF_E_STATE;
	sf__arena_unlock(a, SF_LOCK_PARTICIPANT(index));
	return r;
}

int sf__participant_alive(struct sf_arena *a, uint32_t index)
{
	if (index >= participants_count(a))
		return 0;
	return sf__arena_lock_held(a, SF_LOCK_PARTICIPANT(index)) != 0;
}

static void wake_producers(struct sf_arena *a)
{
	struct sf_arena_header *h = a->hdr;
	uint64_t any = 0;

	/* Store-load barrier: orders the slot store before the loads of free_waiters;
	 * pairs with the fence in eventcount_sleep() between a waiter's bit and its final
	 * look. Either the publisher sees the waiter, or the waiter sees the slot. */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < SF_MAX_PRODUCERS / 64; i++)
		any |= atomic_load_explicit(&h->free_waiters[i], memory_order_relaxed);
	if (any) {
		atomic_fetch_add_explicit(&h->free_seq, 1, memory_order_seq_cst);
		sf__futex_wake(&h->free_seq, INT32_MAX);
	}
}

static void wake_consumer(struct sf_arena *a, uint32_t rank)
{
	struct sf_ring *ring = &a->rings[rank];

	/* Pairs with the fence in eventcount_sleep(); see wake_producers(). */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&ring->ready_waiters, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&ring->ready_seq, 1, memory_order_seq_cst);
		sf__futex_wake(&ring->ready_seq, INT32_MAX);
	}
}

int sf__arena_repair(struct sf_arena *a, uint32_t index)
{
	struct sf_participant *p;
	int32_t pid;
	int r;

	if (index >= participants_count(a))
		return SF_E_RANGE;
	p = &a->participants[index];
	if (atomic_load_explicit(&p->pid, memory_order_relaxed) == PID_FREE)
		return 0;
	/* Fence first: never take slots back from a process that may still run. The
	 * entry's lock is free only once its holder has exited; while this process holds
	 * it, nobody registers. Any failure to tell counts as alive. */
	r = sf__arena_fence(a, SF_LOCK_PARTICIPANT(index));
	if (r < 0)
		return atomic_load_explicit(&p->pid, memory_order_relaxed) < 0 ? 0 : SF_E_BUSY;
	/* Acquire: pairs with the release store of pid in registration. */
	pid = atomic_load_explicit(&p->pid, memory_order_acquire);
	r = 0;
	if (pid != PID_FREE) {
		r = (int)repair_slots(a, index);
		/* Release: the repaired slot words are visible before the entry is free. */
		atomic_store_explicit(&p->pid, PID_FREE, memory_order_release);
	}
	sf__arena_unfence(a, SF_LOCK_PARTICIPANT(index));
	return r;
}

/* The FREE slot with the lowest step, ties broken round the ranks from `start`. */
static int find_free(const struct sf_arena *a, uint32_t start, struct sf_fill *f)
{
	const uint32_t R = a->geo.ranks, K = a->geo.slots_per_rank;
	uint64_t best = UINT64_MAX;
	int found = 0;

	for (uint32_t n = 0; n < R; n++) {
		uint32_t r = (start + n) % R;
		struct sf_slot *ring = &a->slots[(size_t)r * K];

		for (uint32_t i = 0; i < K; i++) {
			/* Relaxed: only a hint; the claiming CAS re-validates the word. */
			uint64_t w = atomic_load_explicit(&ring[i].word, memory_order_relaxed);
			uint64_t step;

			if (sf__slot_state(w) != SF_SLOT_FREE)
				continue;
			step = sf__slot_lap(w) * K + i;
			if (step < best) {
				best = step;
				f->rank = r;
				f->index = i;
				f->step = step;
				f->lap = sf__slot_lap(w);
				f->slot = &ring[i];
				found = 1;
			}
		}
	}
	return found;
}

/* A paused job hands out no work: its producers claim nothing until it runs again (the
 * state change bumps free_seq, which wakes them). */
static int job_paused(const struct sf_arena *a)
{
	return atomic_load_explicit(&a->hdr->job_state, memory_order_acquire) == SF_JOB_PAUSED;
}

static int64_t remaining_ns(uint64_t deadline)
{
	uint64_t now;

	if (deadline == UINT64_MAX)
		return -1;
	now = sf__now_ns();
	return now >= deadline ? 0 : (int64_t)(deadline - now);
}

/* Longest single futex sleep: sleepers wake this often to look at the job state even if
 * a wake was somehow missed (for instance a publisher killed between store and wake). */
#define SLEEP_SLICE_NS (100 * 1000 * 1000)

/*
 * The sleeping half of the eventcount: set this waiter's bit in `waiters`, then look once
 * more with `can_go` and sleep on `seq` only if there is still nothing to do, at most
 * until the deadline or one slice. The full fence pairs with the one in wake_producers()
 * and wake_consumer(): either the publisher sees this waiter and bumps `seq` (so the
 * futex wait returns at once or is woken), or this final look sees what it published.
 * Returns 0 after a sleep or a look, SF_E_TIMEOUT when the deadline has passed.
 */
static int eventcount_sleep(_Atomic uint32_t *seq, _Atomic uint64_t *waiters, uint64_t bit,
			    uint64_t deadline, int (*can_go)(void *), void *arg)
{
	int64_t left = remaining_ns(deadline);
	uint32_t v;

	if (left == 0)
		return SF_E_TIMEOUT;
	atomic_fetch_or_explicit(waiters, bit, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	/* Acquire: the loads of `can_go` may not pass this one. Pairs with the publisher's
	 * seq_cst increment of `seq`, made after its store of the condition: a waiter that
	 * reads the bumped value sees the condition, and one that reads an older value has
	 * the futex return at once. Relaxed, a weakly ordered CPU (ARM, POWER) could read a
	 * stale condition and a fresh `seq`, and sleep through its wake. */
	v = atomic_load_explicit(seq, memory_order_acquire);
	if (!can_go(arg))
		sf__futex_wait(seq, v, left < 0 || left > SLEEP_SLICE_NS ? SLEEP_SLICE_NS : left);
	atomic_fetch_and_explicit(waiters, ~bit, memory_order_relaxed);
	return 0;
}

struct producer_check {
	const struct sf_arena *a;
	uint32_t start;
	struct sf_fill *f;
};

/* The node's rank base, when known (node_ranks.h); acquire: pairs with its release
 * store, after which the slots a re-base discarded are FREE. */
static int ranks_known(const struct sf_arena *a, uint32_t *ret_base)
{
	uint64_t w = atomic_load_explicit(&a->hdr->node_ranks, memory_order_acquire);

	return sf__node_ranks_decode(w, &a->geo, ret_base) > 0;
}

/* A producer may stop sleeping: there is free work (and the job is not paused, and the
 * node's ranks are known), or the job is stopping. */
static int producer_can_go(void *arg)
{
	struct producer_check *pc = arg;
	uint32_t base;

	return (!job_paused(pc->a) && ranks_known(pc->a, &base) &&
		find_free(pc->a, pc->start, pc->f)) ||
	       sf__arena_stopping(pc->a);
}

struct consumer_check {
	const struct sf_arena *a;
	struct sf_slot *slot;
	uint64_t ready;
};

/* A consumer may stop sleeping: its step is READY, or the job is stopping. */
static int consumer_can_go(void *arg)
{
	struct consumer_check *cc = arg;

	return atomic_load_explicit(&cc->slot->word, memory_order_relaxed) == cc->ready ||
	       sf__arena_stopping(cc->a);
}

int sf__producer_claim(struct sf_arena *a, uint32_t me, int64_t timeout_ns,
		       struct sf_fill *ret_fill)
{
	struct sf_arena_header *h = a->hdr;
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : sf__now_ns() + (uint64_t)timeout_ns;
	uint32_t start = me;
	struct sf_fill f;

	for (uint32_t polls = 0;;) {
		uint32_t base;

		while (!job_paused(a) && ranks_known(a, &base) && find_free(a, start++, &f)) {
			uint64_t expect = sf__slot_word(SF_SLOT_FREE, 0, f.lap);
			uint64_t filling = sf__slot_word(SF_SLOT_FILLING, me, f.lap);

			/* Acquire: pairs with the consumer's release store of FREE, so its
			 * reads of the old payload happen before this producer writes it.
			 * Release: this producer's registration (its pid in its entry) happens
			 * before anyone who reads FILLING here reads the entry, as a seek's
			 * repair_owner() does to tell a live filler from a dead one's
			 * successor; x86 orders it anyway, the C11 model only so (a review). */
			if (!atomic_compare_exchange_strong_explicit(&f.slot->word, &expect,
								     filling, memory_order_acq_rel,
								     memory_order_relaxed))
				continue;
			/* Full fence, then the base for this slot: pairs with the seq_cst
			 * store and fence of a re-base (node_ranks.c), which either sees this
			 * slot FILLING and waits for it, or is seen here; then the slot goes
			 * back, for the same step. */
			atomic_thread_fence(memory_order_seq_cst);
			if (!ranks_known(a, &base)) {
				atomic_compare_exchange_strong_explicit(
					&f.slot->word, &filling, expect, memory_order_release,
					memory_order_relaxed);
				continue;
			}
			f.global_rank = base + f.rank;
			f.payload = sf__arena_payload(a, f.rank, f.index);
			*ret_fill = f;
			SF_TEST_POINT(SF_TP_PRODUCER_CLAIMED);
			return 0;
		}
		if (sf__arena_stopping(a))
			return SF_E_STOPPED;
		if (polls < SF_SPIN_POLLS) {
			polls++;
			sf__cpu_relax();
			continue;
		}
		{
			struct producer_check pc = {a, start, &f};
			uint64_t bit;
			_Atomic uint64_t *waiters = producer_waiter_word(a, me, &bit);
			int r = eventcount_sleep(&h->free_seq, waiters, bit, deadline,
						 producer_can_go, &pc);

			if (r < 0)
				return r;
		}
	}
}

int sf__producer_publish(struct sf_arena *a, uint32_t me, const struct sf_fill *fill,
			 uint32_t length, uint64_t first_sample)
{
	struct sf_slot *s = fill->slot;
	uint64_t filling = sf__slot_word(SF_SLOT_FILLING, me, fill->lap);

	s->step = fill->step;
	s->length = length;
	s->first_sample = first_sample;
	s->producer = me;
	s->held_before = 0;
	/* The filler has just written these bytes, so they are in its cache (all of them
	 * for batches up to the cache's size): the digest costs it a pass over cached data,
	 * and each consumer none. */
	sf__payload_hashes(a, fill->payload, length, !!(a->geo.flags & SF_ARENA_F_CHECKSUM),
			   &s->digest, &s->checksum);
	s->fill_ns = sf__now_ns();
	SF_TEST_POINT(SF_TP_PRODUCER_FILLED);
	/* Release: publishes the payload and the fields above; pairs with the acquire
	 * load of READY in sf__consumer_claim(). A CAS from the word this producer's claim
	 * wrote: if the slot is no longer its FILLING one, its state is left as it stands
	 * (the fields above were written already: only a fence that failed could get here,
	 * and the caller stops with the error). */
	if (!atomic_compare_exchange_strong_explicit(&s->word, &filling,
						     sf__slot_word(SF_SLOT_READY, 0, fill->lap),
						     memory_order_release, memory_order_relaxed))
		return SF_E_STATE;
	SF_TEST_POINT(SF_TP_PRODUCER_PUBLISHED);
	wake_consumer(a, fill->rank);
	return 0;
}

/*
 * Check the claimed slot `s` of step `step` against its filler's hashes: with
 * SF_ARENA_F_CHECKSUM the steps verify_every takes, and any slot a consumer held before
 * (its digest, and its checksum where there is one). 0, or SF_E_CHECKSUM.
 */
static int verify(const struct sf_arena *a, const struct sf_slot *s, uint32_t rank, uint64_t step)
{
	const uint32_t K = a->geo.slots_per_rank;
	const int checksums = !!(a->geo.flags & SF_ARENA_F_CHECKSUM);
	const uint64_t tokens = (uint64_t)a->geo.batch * a->geo.seq_tokens * a->geo.token_bytes;
	uint64_t digest, checksum;

	if (!(checksums && step % a->verify_every == 0) && !s->held_before)
		return 0;
	/* Without checksums the digest covers the tokens only: a held slot with document
	 * starts or row sources after them cannot be verified, and is refilled. */
	if (s->held_before && !checksums && s->length > tokens)
		return SF_E_CHECKSUM;
	sf__payload_hashes(a, sf__arena_payload(a, rank, (uint32_t)(step % K)), s->length,
			   checksums, &digest, &checksum);
	return digest != s->digest || (checksums && checksum != s->checksum) ? SF_E_CHECKSUM : 0;
}

int sf__consumer_claim(struct sf_arena *a, uint32_t me, uint32_t rank, uint64_t step,
		       int64_t timeout_ns, struct sf_slot **ret_slot)
{
	const uint32_t K = a->geo.slots_per_rank;
	struct sf_slot *s = sf__arena_slot(a, rank, (uint32_t)(step % K));
	struct sf_ring *ring = &a->rings[rank];
	const uint64_t lap = step / K;
	const uint64_t ready = sf__slot_word(SF_SLOT_READY, 0, lap);
	uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : sf__now_ns() + (uint64_t)timeout_ns;

	for (uint32_t polls = 0;;) {
		/* Acquire: pairs with the release store of READY in sf__producer_publish(). */
		uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
		int r;

		if (w == ready) {
			if (!atomic_compare_exchange_strong_explicit(
				    &s->word, &w, sf__slot_word(SF_SLOT_CLAIMED, me, lap),
				    memory_order_acquire, memory_order_relaxed))
				continue;
			SF_TEST_POINT(SF_TP_CONSUMER_CLAIMED);
			*ret_slot = s;
			/* A length past the payload is no batch a producer wrote. */
			if (s->length > a->payload_bytes)
				return SF_E_CHECKSUM;
			r = verify(a, s, rank, step);
			if (r == 0 || !s->held_before)
				return r;
			/* Changed by a consumer that held it (written through its view before
			 * it died): refilled, its content being a function of the step. */
			w = sf__slot_word(SF_SLOT_CLAIMED, me, lap);
			if (atomic_compare_exchange_strong_explicit(
				    &s->word, &w, sf__slot_word(SF_SLOT_FREE, 0, lap),
				    memory_order_release, memory_order_relaxed))
				wake_producers(a);
			continue;
		}
		if (sf__slot_lap(w) > lap)
			return SF_E_STATE;
		if (sf__arena_stopping(a))
			return SF_E_STOPPED;
		if (timeout_ns == 0)
			return SF_E_AGAIN;
		if (polls < SF_SPIN_POLLS) {
			polls++;
			sf__cpu_relax();
			continue;
		}
		{
			struct consumer_check cc = {a, s, ready};

			r = eventcount_sleep(&ring->ready_seq, &ring->ready_waiters, 1, deadline,
					     consumer_can_go, &cc);
			if (r < 0)
				return r;
		}
	}
}

int sf__consumer_release_quiet(struct sf_arena *a, uint32_t rank, struct sf_slot *s)
{
	const uint32_t me = a->geo.max_producers + rank;
	uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);

	SF_TEST_POINT(SF_TP_CONSUMER_READ);
	if (sf__slot_state(w) != SF_SLOT_CLAIMED || sf__slot_owner(w) != me)
		return SF_E_STATE;
	/* Release: the consumer's reads of the payload happen before a producer's claim
	 * (acquire CAS in sf__producer_claim()) lets it overwrite them. A CAS from this
	 * consumer's own claim, so that a slot taken from it is never freed under its new
	 * owner. */
	if (!atomic_compare_exchange_strong_explicit(
		    &s->word, &w, sf__slot_word(SF_SLOT_FREE, 0, sf__slot_lap(w) + 1),
		    memory_order_release, memory_order_relaxed))
		return SF_E_STATE;
	SF_TEST_POINT(SF_TP_CONSUMER_RELEASED);
	return 0;
}

int sf__consumer_release(struct sf_arena *a, uint32_t rank, struct sf_slot *s)
{
	int r = sf__consumer_release_quiet(a, rank, s);

	wake_producers(a);
	return r;
}

int sf__consumer_unclaim(struct sf_arena *a, uint32_t rank, struct sf_slot *s, int refill)
{
	const uint32_t me = a->geo.max_producers + rank;
	uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);

	if (sf__slot_state(w) != SF_SLOT_CLAIMED || sf__slot_owner(w) != me)
		return SF_E_STATE;
	if (!refill)
		s->held_before = 1;
	/* Release, as sf__consumer_release_quiet(): a producer that refills the slot sees
	 * every access this consumer made to it (and a consumer that claims it again, the
	 * mark above). */
	if (!atomic_compare_exchange_strong_explicit(
		    &s->word, &w,
		    sf__slot_word(refill ? SF_SLOT_FREE : SF_SLOT_READY, 0, sf__slot_lap(w)),
		    memory_order_release, memory_order_relaxed))
		return SF_E_STATE;
	SF_TEST_POINT(SF_TP_CONSUMER_RELEASED);
	if (refill)
		wake_producers(a);
	return 0;
}

void sf__producers_wake(struct sf_arena *a)
{
	wake_producers(a);
}

uint64_t sf__ring_next_step(const struct sf_arena *a, uint32_t rank)
{
	const uint32_t K = a->geo.slots_per_rank;
	uint64_t next = UINT64_MAX;

	for (uint32_t i = 0; i < K; i++) {
		uint64_t w = atomic_load_explicit(&sf__arena_slot(a, rank, i)->word,
						  memory_order_acquire);
		uint64_t step = sf__slot_lap(w) * K + i;

		if (step < next)
			next = step;
	}
	return next;
}

/*
 * Repair the owner of slot `s`, whose word `w` is FILLING or CLAIMED by another
 * participant. 1: the seek takes the slot over, since its owner holds no entry (free, or
 * no entry of that index: a stray write left the word, and nothing would ever move it);
 * 0: look at the slot again (the repair moved it); SF_E_BUSY: the owner is alive and
 * holds it (a role-less hold, a seek's, counts as alive).
 */
static int repair_owner(struct sf_arena *a, const struct sf_slot *s, uint64_t w)
{
	uint32_t owner = sf__slot_owner(w);

	if (sf__arena_repair(a, owner) == SF_E_BUSY)
		return SF_E_BUSY;
	if (atomic_load_explicit(&s->word, memory_order_acquire) != w)
		return 0;
	if (owner >= participants_count(a) ||
	    atomic_load_explicit(&a->participants[owner].pid, memory_order_acquire) == PID_FREE)
		return 1;
	return SF_E_BUSY;
}

/*
 * One pass of a seek: each slot of the ring made to serve the first step >= `step` that
 * it serves. A slot being filled is waited for (`wait`), its dead filler repaired, or,
 * without `wait`, left for the next pass: 1 then says a pass is still needed. Passes are
 * idempotent: a slot already moved stays as it is.
 */
static int seek_pass(struct sf_arena *a, uint32_t me, uint32_t rank, uint64_t step, int wait)
{
	const uint32_t K = a->geo.slots_per_rank;
	int pending = 0, r;

	for (uint32_t i = 0; i < K; i++) {
		struct sf_slot *s = sf__arena_slot(a, rank, i);
		/* The first step >= `step` that slot i serves. */
		uint64_t target = step + (i + K - (uint32_t)(step % K)) % K;
		uint64_t lap = target / K;

		for (;;) {
			uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
			uint32_t st = sf__slot_state(w);
			bool mine = st == SF_SLOT_CLAIMED && sf__slot_owner(w) == me;

			/* Being filled for the wanted step: its publish (or, should its filler
			 * die, the repair to FREE at that lap) leaves it as wanted. */
			if (st == SF_SLOT_FILLING && sf__slot_lap(w) == lap)
				break;
			if (st == SF_SLOT_FILLING) {
				/* Wait for the filler, or repair it if it died meanwhile. */
				if (sf__arena_stopping(a))
					return SF_E_STOPPED;
				r = repair_owner(a, s, w);
				if (r == 0)
					continue;
				if (r == SF_E_BUSY) {
					if (!wait) {
						pending = 1;
						break;
					}
					usleep(100);
					continue;
				}
			} else if (st == SF_SLOT_CLAIMED && !mine) {
				r = repair_owner(a, s, w);
				if (r < 0)
					return r;
				if (r == 0)
					continue;
			}
			if (sf__slot_lap(w) == lap && st == SF_SLOT_READY)
				break; /* already holds the wanted step */
			if (w == sf__slot_word(SF_SLOT_FREE, 0, lap))
				break;
			/* A slot this consumer still holds for the wanted step keeps its
			 * content (marked as held, to be verified at its next claim); anything
			 * else (a slot taken over from no owner too: nothing says it was
			 * filled) serves the target step from scratch.
			 * Acq_rel: a producer that later claims the slot (acquire) sees every
			 * access this consumer made to it. */
			if (mine && sf__slot_lap(w) == lap)
				s->held_before = 1;
			if (atomic_compare_exchange_strong_explicit(
				    &s->word, &w,
				    mine && sf__slot_lap(w) == lap
					    ? sf__slot_word(SF_SLOT_READY, 0, lap)
					    : sf__slot_word(SF_SLOT_FREE, 0, lap),
				    memory_order_acq_rel, memory_order_relaxed)) {
				SF_TEST_POINT(SF_TP_SEEK_MOVED);
				break;
			}
		}
	}
	wake_producers(a);
	return pending;
}

/*
 * seek_pass() under the ring's mark of the step it moves to, kept until a pass leaves
 * nothing pending: one cut short (a kill) or failed (the job stopping) leaves it for the
 * rank's next consumer. Only the holder of the ring's consumer entry, which the caller
 * is, and its successor read it.
 */
static int marked_pass(struct sf_arena *a, uint32_t me, uint32_t rank, uint64_t step, int wait)
{
	_Atomic uint64_t *seek_to = &a->rings[rank].seek_to;
	int r;

	atomic_store_explicit(seek_to, step + 1, memory_order_release);
	r = seek_pass(a, me, rank, step, wait);
	if (r == 0)
		atomic_store_explicit(seek_to, 0, memory_order_release);
	return r;
}

int sf__ring_seek(struct sf_arena *a, uint32_t me, uint32_t rank, uint64_t step)
{
	return marked_pass(a, me, rank, step, 1);
}

int sf__ring_seek_unfinished(struct sf_arena *a, uint32_t me, uint32_t rank)
{
	const uint64_t to = atomic_load_explicit(&a->rings[rank].seek_to, memory_order_acquire);

	/* A word rewritten in shared memory is no step to move the ring to. */
	if (to && to - 1 >= sf__arena_step_limit(&a->geo))
		return SF_E_LAYOUT;
	return to ? sf__ring_seek(a, me, rank, to - 1) : 0;
}

int sf__ring_seek_hold(struct sf_arena *a, uint32_t rank, struct sf_err *e)
{
	int r;

	if (rank >= a->geo.ranks)
		return sf__err(e, SF_E_RANGE, "rank %u is not a local rank (0..%u)", rank,
			       a->geo.ranks - 1);
	/* Hold the rank's consumer entry for the whole seek: a consumer that attaches
	 * meanwhile waits, so it can never claim a step the seek then moves, and one that
	 * is attached refuses the hold. */
	r = sf__participant_register(a, a->geo.max_producers + rank, SF_ROLE_NONE, (int32_t)rank,
				     e);
	if (r == SF_E_BUSY)
		return sf__err(e, SF_E_BUSY,
			       "a consumer is attached to rank %u; seek it from the consumer "
			       "(sf_consumer_seek)",
			       rank);
	if (r < 0)
		return r;
	SF_TEST_POINT(SF_TP_SEEK_HELD);
	return 0;
}

int sf__ring_seek_try(struct sf_arena *a, uint32_t rank, uint64_t step)
{
	/* Its mark supersedes one a killed consumer left unfinished. */
	return marked_pass(a, a->geo.max_producers + rank, rank, step, 0);
}

void sf__ring_seek_release(struct sf_arena *a, uint32_t rank)
{
	sf__participant_unregister(a, a->geo.max_producers + rank);
}
