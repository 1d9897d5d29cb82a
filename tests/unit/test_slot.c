/*
 * Unit tests of the slot protocol: every state transition, the order producers take
 * work in, waiting and its timeouts, checksums, registration, repair after death and
 * seek.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/futex.h"
#include "common/proc.h"
#include "common/slot.h"

static char job[64];
static struct sf_arena *arena;

#define R	    2
#define K	    3
#define P	    2
#define CONSUMER(r) (P + (r))

static void setup(void)
{
	struct sf_geometry g = {.ranks = R,
				.slots_per_rank = K,
				.max_producers = P,
				.batch = 2,
				.seq_tokens = 9,
				.token_bytes = 4,
				.world_size = R,
				.flags = SF_ARENA_F_CHECKSUM};
	struct sf_err e = {0};

	snprintf(job, sizeof(job), "t-slot-%d", (int)getpid());
	sf__arena_unlink_job(job);
	cr_assert_eq(sf__arena_create(job, &g, NULL, &arena, NULL, 0, &e), 0, "%s", e.msg);
	sf__arena_set_job_state(arena, SF_JOB_RUNNING);
}

static void teardown(void)
{
	sf__arena_destroy(arena);
}

TestSuite(slot, .init = setup, .fini = teardown);

static uint64_t word(uint32_t rank, uint32_t i)
{
	return atomic_load(&sf__arena_slot(arena, rank, i)->word);
}

/* Fill a claimed slot with a pattern of its (rank, step) and publish it. */
static void fill_and_publish(uint32_t me, const struct sf_fill *f)
{
	uint32_t *t = (uint32_t *)f->payload;

	for (uint32_t j = 0; j < 18; j++)
		t[j] = f->rank * 1000000u + (uint32_t)f->step * 100u + j;
	sf__producer_publish(arena, me, f, 18 * 4, f->step * 10);
}

Test(slot, full_cycle_of_one_slot)
{
	struct sf_fill f;
	struct sf_slot *s;

	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	cr_expect_eq(f.rank, 0);
	cr_expect_eq(f.step, 0);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FILLING, 0, 0));
	fill_and_publish(0, &f);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_READY, 0, 0));
	cr_expect_eq(f.slot->length, 72);
	cr_expect_eq(f.slot->checksum, sf__payload_checksum(f.payload, 72));
	cr_expect_eq(f.slot->first_sample, 0);

	cr_assert_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, 0, &s), 0);
	cr_expect_eq(s, f.slot);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_CLAIMED, CONSUMER(0), 0));
	sf__consumer_release(arena, 0, s);
	/* Released slot 0 now serves step K (lap 1). */
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FREE, 0, 1));
	cr_expect_eq(sf__ring_next_step(arena, 0), 1);
	/* The step just released is gone. */
	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, 0, &s), SF_E_STATE);
}

Test(slot, producers_take_lowest_step_first_round_the_ranks)
{
	struct sf_fill f;
	uint64_t steps[R * K];
	uint32_t ranks[R * K];

	for (int n = 0; n < R * K; n++) {
		cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
		steps[n] = f.step;
		ranks[n] = f.rank;
	}
	/* Steps 0,0,1,1,2,2: every rank gets step s before any rank gets s+1. */
	for (int n = 0; n < R * K; n++)
		cr_expect_eq(steps[n], (uint64_t)(n / R), "claim %d got step %llu", n,
			     (unsigned long long)steps[n]);
	cr_expect_neq(ranks[0], ranks[1]);
	/* All slots taken: a claim with a short timeout times out. */
	cr_expect_eq(sf__producer_claim(arena, 0, 2000000, &f), SF_E_TIMEOUT);
}

Test(slot, consumer_timeouts_and_again)
{
	struct sf_slot *s;
	uint64_t t0 = sf__now_ns();

	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(1), 1, 0, 0, &s), SF_E_AGAIN);
	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(1), 1, 0, 20000000, &s), SF_E_TIMEOUT);
	cr_expect_geq(sf__now_ns() - t0, 20000000);
}

Test(slot, stopping_job_wakes_waiters)
{
	struct sf_fill f;
	struct sf_slot *s;

	sf__arena_set_job_state(arena, SF_JOB_STOPPING);
	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, -1, &s), SF_E_STOPPED);
	cr_expect_eq(sf__producer_claim(arena, 0, 0, &f), 0); /* free work is still handed out */
}

Test(slot, checksum_mismatch_is_reported)
{
	struct sf_fill f;
	struct sf_slot *s;

	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	fill_and_publish(0, &f);
	f.payload[5] ^= 1; /* corrupt after publishing */
	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(f.rank), f.rank, 0, 0, &s), SF_E_CHECKSUM);
	/* The claim is kept so the caller can release it. */
	cr_expect_eq(sf__slot_state(word(f.rank, 0)), SF_SLOT_CLAIMED);
	sf__consumer_release(arena, f.rank, s);
}

Test(slot, consumer_sleeps_until_published)
{
	pid_t child = fork();
	struct sf_slot *s;
	int status;

	cr_assert_geq(child, 0);
	if (child == 0) {
		struct sf_fill f;

		usleep(50000);
		/* Step 0 of both ranks, whichever rank the tie-break starts with. */
		for (int n = 0; n < R; n++) {
			if (sf__producer_claim(arena, 1, -1, &f) < 0)
				_exit(1);
			fill_and_publish(1, &f);
		}
		_exit(0);
	}
	cr_assert_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, 5000000000, &s), 0);
	cr_expect_eq(((uint32_t *)sf__arena_payload(arena, 0, 0))[3], 3);
	waitpid(child, &status, 0);
	cr_expect_eq(WEXITSTATUS(status), 0);
	cr_expect_eq(s->producer, 1);
}

Test(slot, register_refuses_live_holder)
{
	struct sf_err e = {0};
	int inc = sf__participant_register(arena, 0, SF_ROLE_PRODUCER, 0, &e);

	cr_assert_geq(inc, 1);
	cr_expect_eq(sf__participant_register(arena, 0, SF_ROLE_PRODUCER, 0, &e), SF_E_BUSY);
	cr_expect_eq(sf__arena_repair(arena, 0), SF_E_BUSY);
	sf__participant_unregister(arena, 0);
	cr_expect_eq(sf__participant_register(arena, 0, SF_ROLE_PRODUCER, 0, &e), inc + 1);
	cr_expect_eq(sf__participant_register(arena, 99, SF_ROLE_PRODUCER, 0, &e), SF_E_RANGE);
	sf__participant_unregister(arena, 0);
}

/* A child registers as `index`, takes slots as `role`, and dies holding them. */
static void die_holding(uint32_t index, int consumer)
{
	pid_t child = fork();
	int status;

	cr_assert_geq(child, 0);
	if (child == 0) {
		struct sf_fill f;
		struct sf_slot *s;

		if (sf__participant_register(arena, index,
					     consumer ? SF_ROLE_CONSUMER : SF_ROLE_PRODUCER, 0,
					     NULL) < 1)
			_exit(1);
		if (consumer) {
			if (sf__consumer_claim(arena, index, 0, 0, 0, &s) < 0)
				_exit(2);
		} else {
			if (sf__producer_claim(arena, index, 0, &f) < 0 ||
			    sf__producer_claim(arena, index, 0, &f) < 0)
				_exit(2);
		}
		raise(SIGKILL);
	}
	waitpid(child, &status, 0);
	cr_assert(WIFSIGNALED(status), "child exited %d", WEXITSTATUS(status));
}

Test(slot, repair_returns_dead_producers_slots_to_free)
{
	struct sf_fill f;

	die_holding(1, 0);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FILLING, 1, 0));
	cr_expect_eq(word(1, 0), sf__slot_word(SF_SLOT_FILLING, 1, 0));
	cr_expect_eq(sf__arena_repair(arena, 1), 2);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FREE, 0, 0));
	cr_expect_eq(word(1, 0), sf__slot_word(SF_SLOT_FREE, 0, 0));
	cr_expect_eq(atomic_load(&arena->hdr->slots_repaired), 2);
	/* A second repair finds nothing; the same steps are handed out again. */
	cr_expect_eq(sf__arena_repair(arena, 1), 0);
	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	cr_expect_eq(f.step, 0);
}

Test(slot, repair_returns_dead_consumers_claim_to_ready)
{
	struct sf_fill f;
	struct sf_slot *s;

	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	cr_assert_eq(f.rank, 0);
	fill_and_publish(0, &f);
	die_holding(CONSUMER(0), 1);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_CLAIMED, CONSUMER(0), 0));
	/* A new consumer of the rank repairs its dead predecessor when registering. */
	cr_assert_geq(sf__participant_register(arena, CONSUMER(0), SF_ROLE_CONSUMER, 0, NULL), 2);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_READY, 0, 0));
	cr_expect_eq(sf__ring_next_step(arena, 0), 0);
	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, 0, &s), 0);
}

Test(slot, seek_repositions_the_ring)
{
	struct sf_fill f;
	struct sf_slot *s;

	/* Fill steps 0..2 of both ranks. */
	for (int n = 0; n < R * K; n++) {
		cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
		fill_and_publish(0, &f);
	}
	cr_assert_eq(sf__ring_seek(arena, CONSUMER(0), 0, 2), 0);
	cr_expect_eq(sf__ring_next_step(arena, 0), 2);
	/* Step 2 was READY and stays; slots 0 and 1 now serve steps 3 and 4. */
	cr_expect_eq(word(0, 2), sf__slot_word(SF_SLOT_READY, 0, 0));
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FREE, 0, 1));
	cr_expect_eq(word(0, 1), sf__slot_word(SF_SLOT_FREE, 0, 1));
	cr_expect_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 2, 0, &s), 0);
	sf__consumer_release(arena, 0, s);
	/* Seek backwards to step 1: slot 1 serves lap 0 again. */
	cr_assert_eq(sf__ring_seek(arena, CONSUMER(0), 0, 1), 0);
	cr_expect_eq(sf__ring_next_step(arena, 0), 1);
	cr_expect_eq(word(0, 1), sf__slot_word(SF_SLOT_FREE, 0, 0));
	/* Rank 1 is untouched. */
	cr_expect_eq(sf__ring_next_step(arena, 1), 0);
	/* Producers now fill rank 0's step 1 before anything of a later step. */
	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	cr_expect_eq(f.rank, 0);
	cr_expect_eq(f.step, 1);
}

Test(slot, seek_far_ahead)
{
	cr_assert_eq(sf__ring_seek(arena, CONSUMER(1), 1, 1000001), 0);
	cr_expect_eq(sf__ring_next_step(arena, 1), 1000001);
	for (uint32_t i = 0; i < K; i++) {
		uint64_t w = word(1, i);
		uint64_t step = sf__slot_lap(w) * K + i;

		cr_expect(step >= 1000001 && step < 1000001 + K);
	}
}

/*
 * A slot CLAIMED or FILLING in the name of a participant entry that is free, or of no
 * entry at all (a stray write): nothing will ever move it. The seek spun on it at full
 * CPU for ever (found by review; from Python, a load_state_dict() that never returned).
 * It takes such a slot over, as one repaired. Each case runs in a child, so that a hang
 * ends with the alarm instead of the test run.
 */
Test(slot, seek_takes_over_a_slot_whose_owner_holds_no_entry)
{
	const uint64_t words[] = {
		sf__slot_word(SF_SLOT_CLAIMED, CONSUMER(1), 0), /* a free consumer entry */
		sf__slot_word(SF_SLOT_FILLING, 1, 0),		/* a free producer entry */
		sf__slot_word(SF_SLOT_CLAIMED, 200, 0),		/* no entry of that index */
		sf__slot_word(SF_SLOT_FILLING, 200, 0),
	};

	for (size_t n = 0; n < sizeof(words) / sizeof(words[0]); n++) {
		pid_t pid;
		int status;

		atomic_store(&sf__arena_slot(arena, 0, 1)->word, words[n]);
		pid = fork();
		if (pid == 0) {
			alarm(5);
			_exit(sf__ring_seek(arena, CONSUMER(0), 0, 3) == 0 ? 0 : 1);
		}
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "case %zu: the seek %s", n,
			  WIFSIGNALED(status) ? "never returned" : "failed");
		/* The child's seek moved the shared slots: slot 1 serves step 4. */
		cr_expect_eq(word(0, 1), sf__slot_word(SF_SLOT_FREE, 0, 1), "case %zu", n);
	}
	/* A seek to the lap such a word names: the slot is to be filled, not handed out
	 * as READY with whatever it holds (a review of the change: the CAS meant for this
	 * consumer's own claims made it READY). */
	for (size_t n = 0; n < sizeof(words) / sizeof(words[0]); n += 2) {
		atomic_store(&sf__arena_slot(arena, 0, 1)->word, words[n]);
		cr_assert_eq(sf__ring_seek(arena, CONSUMER(0), 0, 1), 0);
		cr_expect_eq(word(0, 1), sf__slot_word(SF_SLOT_FREE, 0, 0), "case %zu", n);
	}
}

Test(slot, publisher_skips_the_wake_syscall_when_nobody_sleeps)
{
	uint64_t before = atomic_load(&sf__futex_wake_calls);
	struct sf_fill f;
	struct sf_slot *s;
	pid_t child;
	int status;

	for (int n = 0; n < 100; n++) {
		cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
		fill_and_publish(0, &f);
		cr_assert_eq(sf__consumer_claim(arena, CONSUMER(f.rank), f.rank, f.step, 0, &s), 0);
		sf__consumer_release(arena, f.rank, s);
	}
	cr_expect_eq(atomic_load(&sf__futex_wake_calls), before, "no sleeper, no wake syscall");

	/* With the consumer of rank 0 asleep, the publish of its step wakes it. */
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0)
		_exit(sf__consumer_claim(arena, CONSUMER(0), 0, sf__ring_next_step(arena, 0),
					 5000000000, &s) == 0
			      ? 0
			      : 1);
	while (atomic_load(&arena->rings[0].ready_waiters) == 0)
		usleep(1000);
	do {
		cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
		fill_and_publish(0, &f);
	} while (f.rank != 0);
	waitpid(child, &status, 0);
	cr_expect_eq(WEXITSTATUS(status), 0);
	cr_expect_gt(atomic_load(&sf__futex_wake_calls), before, "a sleeper is woken");
}

Test(slot, entry_left_mid_registration_by_a_dead_process_is_taken_over)
{
	pid_t child = fork();
	int status;

	cr_assert_geq(child, 0);
	if (child == 0)
		_exit(0);
	waitpid(child, &status, 0);
	/* What a registrant killed between its claim and its identity store leaves. */
	atomic_store(&arena->participants[1].pid, -(int32_t)child);
	cr_expect_geq(sf__participant_register(arena, 1, SF_ROLE_PRODUCER, 1, NULL), 1);
	cr_expect_eq(atomic_load(&arena->participants[1].pid), getpid());
	cr_expect_eq(sf__participant_unregister(arena, 1), 0);
}

/*
 * A child takes entry `index` (a role-less hold when `role` is SF_ROLE_NONE), claims
 * step 0 of rank 0 when `claim` is set, says so on `ready` and stays alive until
 * `go` is written or closed. With `thread_exit`, its main thread calls pthread_exit()
 * while a second thread keeps the process (and its claim) alive.
 */
struct holder {
	pid_t pid;
	int go;
};

static void *hold_until_go(void *arg)
{
	char c;

	if (read((int)(intptr_t)arg, &c, 1) < 0)
		_exit(3);
	_exit(0);
}

static struct holder hold_in_child(uint32_t index, uint32_t role, int claim, int thread_exit)
{
	int ready[2], go[2];
	struct holder h;
	char c = 0;

	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	h.pid = fork();
	cr_assert_geq(h.pid, 0);
	if (h.pid == 0) {
		struct sf_slot *s;
		pthread_t t;

		close(ready[0]);
		close(go[1]);
		if (sf__participant_register(arena, index, role, 0, NULL) < 1)
			_exit(1);
		if (claim && role == SF_ROLE_PRODUCER) {
			struct sf_fill f;

			if (sf__producer_claim(arena, index, 0, &f) < 0)
				_exit(2);
		} else if (claim && sf__consumer_claim(arena, index, 0, 0, 0, &s) < 0) {
			_exit(2);
		}
		if (write(ready[1], "r", 1) != 1)
			_exit(3);
		if (!thread_exit)
			hold_until_go((void *)(intptr_t)go[0]);
		if (pthread_create(&t, NULL, hold_until_go, (void *)(intptr_t)go[0]))
			_exit(4);
		pthread_exit(NULL);
	}
	close(ready[1]);
	close(go[0]);
	cr_assert_eq(read(ready[0], &c, 1), 1, "the holder child failed");
	close(ready[0]);
	h.go = go[1];
	return h;
}

static void release_holder(struct holder h)
{
	int status;

	close(h.go);
	waitpid(h.pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder status %d", status);
}

Test(slot, a_live_roleless_holder_is_not_overrun)
{
	struct holder h = hold_in_child(0, SF_ROLE_NONE, 0, 0);

	cr_expect_eq(atomic_load(&arena->participants[0].pid), -(int32_t)h.pid);
	cr_expect_eq(sf__participant_alive(arena, 0), 1);
	cr_expect_eq(sf__arena_repair(arena, 0), 0);
	cr_expect_eq(atomic_load(&arena->participants[0].pid), -(int32_t)h.pid);
	release_holder(h);
	/* Gone without unregistering: its entry is repaired and taken. */
	cr_expect_eq(sf__participant_alive(arena, 0), 0);
	cr_expect_geq(sf__participant_register(arena, 0, SF_ROLE_PRODUCER, 0, NULL), 2);
	cr_expect_eq(sf__participant_unregister(arena, 0), 0);
}

Test(slot, a_process_whose_main_thread_exited_is_alive)
{
	struct sf_fill f;
	struct holder h;

	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	fill_and_publish(0, &f);
	h = hold_in_child(CONSUMER(0), SF_ROLE_CONSUMER, 1, 1);
	/* Its main thread is a zombie now; a worker thread still holds step 0. */
	usleep(100000);
	cr_expect_eq(sf__participant_alive(arena, CONSUMER(0)), 1);
	cr_expect_eq(sf__arena_repair(arena, CONSUMER(0)), SF_E_BUSY);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_CLAIMED, CONSUMER(0), 0));
	release_holder(h);
	cr_expect_eq(sf__arena_repair(arena, CONSUMER(0)), 1);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_READY, 0, 0));
}

Test(slot, liveness_needs_no_process_identity)
{
	struct sf_fill f;
	struct holder h;

	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	fill_and_publish(0, &f);
	h = hold_in_child(CONSUMER(0), SF_ROLE_CONSUMER, 1, 0);
	/* A start time that could not be read, or a pid that names nothing in this
	 * namespace, do not make a live holder dead. */
	arena->participants[CONSUMER(0)].starttime = 0;
	atomic_store(&arena->participants[CONSUMER(0)].pid, 0x3ffffe);
	cr_expect_eq(sf__arena_repair(arena, CONSUMER(0)), SF_E_BUSY);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_CLAIMED, CONSUMER(0), 0));
	release_holder(h);
}

/* A child sleeps in `consumer` ? a claim of rank 0 step 0 : a producer claim of a full
 * arena, and is killed in its sleep. */
static void kill_sleeper(int consumer)
{
	pid_t child;
	int status;

	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		struct sf_slot *s;
		struct sf_fill f;

		if (consumer) {
			if (sf__participant_register(arena, CONSUMER(0), SF_ROLE_CONSUMER, 0,
						     NULL) < 1)
				_exit(1);
			sf__consumer_claim(arena, CONSUMER(0), 0, 0, -1, &s);
		} else {
			if (sf__participant_register(arena, 1, SF_ROLE_PRODUCER, 1, NULL) < 1)
				_exit(1);
			sf__producer_claim(arena, 1, -1, &f);
		}
		_exit(2);
	}
	while (consumer ? atomic_load(&arena->rings[0].ready_waiters) == 0
			: atomic_load(&arena->hdr->free_waiters[0]) == 0)
		usleep(1000);
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	cr_assert(WIFSIGNALED(status));
}

Test(slot, a_consumer_killed_in_its_sleep_leaves_no_waiter)
{
	uint64_t before;
	struct sf_fill f;

	kill_sleeper(1);
	cr_assert_geq(sf__arena_repair(arena, CONSUMER(0)), 0);
	cr_expect_eq(atomic_load(&arena->rings[0].ready_waiters), 0);
	before = atomic_load(&sf__futex_wake_calls);
	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	cr_assert_eq(f.rank, 0);
	fill_and_publish(0, &f);
	cr_expect_eq(atomic_load(&sf__futex_wake_calls), before, "nobody sleeps: no wake");
}

Test(slot, a_producer_killed_in_its_sleep_leaves_no_waiter)
{
	struct sf_fill f;
	struct sf_slot *s;
	uint64_t before;

	for (int n = 0; n < R * K; n++) {
		cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
		fill_and_publish(0, &f);
	}
	kill_sleeper(0);
	/* A new producer in the entry clears what the killed one left. */
	cr_assert_geq(sf__participant_register(arena, 1, SF_ROLE_PRODUCER, 1, NULL), 2);
	cr_expect_eq(atomic_load(&arena->hdr->free_waiters[0]), 0);
	before = atomic_load(&sf__futex_wake_calls);
	cr_assert_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, 0, &s), 0);
	cr_expect_eq(sf__consumer_release(arena, 0, s), 0);
	cr_expect_eq(atomic_load(&sf__futex_wake_calls), before, "nobody sleeps: no wake");
	cr_expect_eq(sf__participant_unregister(arena, 1), 0);
}

Test(slot, transitions_refuse_a_slot_that_changed_hands)
{
	struct sf_fill f;
	struct sf_slot *s;
	uint64_t w;

	/* A producer whose FILLING slot was taken from it publishes nothing over it. */
	cr_assert_eq(sf__producer_claim(arena, 0, 0, &f), 0);
	atomic_store(&f.slot->word, sf__slot_word(SF_SLOT_FILLING, 1, 0));
	cr_expect_eq(sf__producer_publish(arena, 0, &f, 72, 0), SF_E_STATE);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FILLING, 1, 0));
	cr_expect_eq(sf__producer_publish(arena, 1, &f, 72, 0), 0);
	/* A consumer whose claim was taken does not free the slot under its new state. */
	cr_assert_eq(sf__consumer_claim(arena, CONSUMER(0), 0, 0, 0, &s), 0);
	w = sf__slot_word(SF_SLOT_READY, 0, 0);
	atomic_store(&s->word, w);
	cr_expect_eq(sf__consumer_release(arena, 0, s), SF_E_STATE);
	cr_expect_eq(word(0, 0), w);
	/* An entry taken from its holder: unregistering says so. */
	cr_assert_geq(sf__participant_register(arena, 0, SF_ROLE_PRODUCER, 0, NULL), 1);
	atomic_store(&arena->participants[0].pid, 1);
	cr_expect_eq(sf__participant_unregister(arena, 0), SF_E_STATE);
}

static pid_t seek_racer;

/* At the moment the seek holds the rank's entry, a consumer tries to attach. */
static void attach_during_seek(int point)
{
	int status;

	if (point != SF_TP_SEEK_HELD)
		return;
	cr_expect_eq(atomic_load(&arena->participants[CONSUMER(0)].pid), -(int32_t)getpid());
	seek_racer = fork();
	if (seek_racer == 0)
		_exit(sf__participant_register(arena, CONSUMER(0), SF_ROLE_CONSUMER, 0, NULL) ==
				      SF_E_BUSY
			      ? 0
			      : 1);
	waitpid(seek_racer, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a consumer attached in the middle of a seek");
}

Test(slot, seek_of_an_unattached_rank_holds_its_entry)
{
	struct sf_err e = {0};
	struct holder h;

	sf__test_hook = attach_during_seek;
	cr_expect_eq(sf__ring_seek_hold(arena, 0, &e), 0, "%s", e.msg);
	sf__test_hook = NULL;
	cr_expect_eq(sf__ring_seek_try(arena, 0, 4), 0);
	sf__ring_seek_release(arena, 0);
	cr_expect_eq(sf__ring_next_step(arena, 0), 4);
	cr_expect_eq(atomic_load(&arena->participants[CONSUMER(0)].pid), 0);
	/* An attached consumer refuses it, and its ring is untouched. */
	h = hold_in_child(CONSUMER(1), SF_ROLE_CONSUMER, 0, 0);
	cr_expect_eq(sf__ring_seek_hold(arena, 1, &e), SF_E_BUSY);
	cr_expect(strstr(e.msg, "attached") != NULL, "%s", e.msg);
	cr_expect_eq(sf__ring_next_step(arena, 1), 0);
	release_holder(h);
	cr_expect_eq(sf__ring_seek_hold(arena, 2, &e), SF_E_RANGE);
}

/*
 * The launcher's seek waited for a slot being filled, inside its only loop: a stalled
 * producer froze the control socket, signals and the stall watchdog that would end it.
 * A pass now returns at once, and the next one after the filler is gone completes.
 */
Test(slot, a_control_seek_waits_for_no_producer)
{
	struct sf_err e = {0};
	struct holder h = hold_in_child(0, SF_ROLE_PRODUCER, 1, 0);

	cr_assert_eq(word(0, 0), sf__slot_word(SF_SLOT_FILLING, 0, 0));
	cr_assert_eq(sf__ring_seek_hold(arena, 0, &e), 0, "%s", e.msg);
	cr_expect_eq(sf__ring_seek_try(arena, 0, 3), 1);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FILLING, 0, 0));
	release_holder(h); /* dies holding the slot: the next pass repairs it */
	cr_expect_eq(sf__ring_seek_try(arena, 0, 3), 0);
	sf__ring_seek_release(arena, 0);
	cr_expect_eq(sf__ring_next_step(arena, 0), 3);
	cr_expect_eq(word(0, 0), sf__slot_word(SF_SLOT_FREE, 0, 1));
}
