/*
 * Unit tests of the node's global ranks (common/node_ranks.h) through the consumer API
 * against the test feed: an automatic base set by the first rank (producers fill nothing
 * before), agreement and refusal naming both bases, contradictions in the launcher's
 * environment, a static base, and the re-base of a node whose ranks changed, with the
 * old ranks' batches discarded: every batch delivered is checked against the feed rule
 * for the global rank the consumer was told it is.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/node_ranks.h"
#include "common/proc.h"
#include "common/slot.h"
#include "tests/unit/consumer/feed.h"

#define W 4u /* world size: two nodes of R = 2 */

static char job[64];
static int job_seq;

static struct feed *start(uint32_t producers, int rank_auto, uint32_t rank_base)
{
	struct feed_options o = {.job = job,
				 .ranks = 2,
				 .world_size = W,
				 .rank_base = rank_base,
				 .rank_auto = (uint32_t)rank_auto,
				 .batch = 2,
				 .seq_len = 8,
				 .slots_per_rank = 3,
				 .producers = producers,
				 .token_bytes = 2,
				 .checksum = 1,
				 .seed = 5};
	struct sf_err e = {0};
	struct feed *f = NULL;

	snprintf(job, sizeof(job), "t-nr-%d-%d", (int)getpid(), job_seq++);
	sf__arena_unlink_job(job);
	cr_assert_eq(feed_start(&o, &f, &e), 0, "%s", e.msg);
	return f;
}

/* After each test, passed or failed: a failed assertion skips feed_stop(), and the
 * arena must not outlive the test (its producers die with the test process). */
static void unlink_arena(void)
{
	if (job[0])
		sf__arena_unlink_job(job);
}

TestSuite(node_ranks, .fini = unlink_arena);

/* torchrun's environment of global rank `rank`, local rank `lr`, on nodes of 2. */
static struct sf_rank_env torchrun_env(int64_t rank, int64_t lr)
{
	return (struct sf_rank_env){.rank = rank,
				    .local_rank = lr,
				    .world_size = W,
				    .local_world_size = 2,
				    .group_rank = (rank - lr) / 2};
}

static int attach_env(const struct sf_rank_env *env, struct sf_consumer **c, char *msg, size_t len)
{
	return sf_consumer_attach_ranks(job, env, SF_DEVICE_NONE, 0, c, msg, (uint32_t)len);
}

static struct sf_consumer *attach_as(int64_t rank, int64_t lr)
{
	struct sf_rank_env env = torchrun_env(rank, lr);
	struct sf_consumer *c = NULL;
	char msg[512];

	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), 0, "attach as %lld: %s",
		     (long long)rank, msg);
	return c;
}

/* Attach as attach_as() does and expect the refusal `code`, its message in msg[len]. */
static void attach_refused(int64_t rank, int64_t lr, int code, char *msg, size_t len)
{
	struct sf_rank_env env = torchrun_env(rank, lr);
	struct sf_consumer *c = NULL;

	cr_assert_eq(attach_env(&env, &c, msg, len), code, "attach as %lld: %s", (long long)rank,
		     msg);
	cr_assert_null(c);
}

/* The next batch of `c`, checked against the feed rule for global rank g at `step`. */
static void expect_next(const struct feed *f, struct sf_consumer *c, uint32_t g, uint64_t step)
{
	static unsigned char want[1 << 12];
	struct sf_batch b;

	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "next: %s", sf_consumer_errmsg(c));
	cr_assert_eq(b.step, step);
	cr_assert_lt(f->arena->hdr->payload_bytes, sizeof(want));
	feed_fill(f, g, step, want);
	cr_assert_eq(memcmp(b.tokens, want, feed_token_bytes(f)), 0,
		     "global rank %u step %llu: batch of another rank", g,
		     (unsigned long long)step);
	cr_assert_eq(b.first_sample, step * 2 * W + g * 2);
}

static uint64_t node_ranks_word(const struct feed *f)
{
	return atomic_load_explicit(&f->arena->hdr->node_ranks, memory_order_acquire);
}

/* Poll (up to 10 s) until every producer of `f` sleeps for work. */
static void wait_producers_asleep(const struct feed *f, uint32_t producers)
{
	uint64_t want = (UINT64_C(1) << producers) - 1, deadline = sf__now_ns() + 10000000000ull;

	while ((atomic_load_explicit(&f->arena->hdr->free_waiters[0], memory_order_relaxed) &
		want) != want) {
		cr_assert_lt(sf__now_ns(), deadline, "the producers never went to sleep");
		usleep(1000);
	}
}

Test(node_ranks, producers_wait_for_the_first_rank_which_sets_the_base)
{
	struct feed *f = start(2, 1, 0);
	struct sf_consumer *c1, *c0;
	struct sf_consumer_info info;

	cr_assert_eq(node_ranks_word(f), 0, "an automatic base is not known at creation");
	wait_producers_asleep(f, 2);
	for (uint32_t i = 0; i < 2 * 3; i++)
		cr_assert_eq(atomic_load_explicit(&f->arena->slots[i].word, memory_order_acquire),
			     sf__slot_word(SF_SLOT_FREE, 0, 0), "slot %u filled before the base",
			     i);
	/* Local rank 1 comes first: global rank 3 puts the node at 2..3. */
	c1 = attach_as(3, 1);
	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(1, 2, 1));
	sf_consumer_info(c1, &info);
	cr_assert_eq(info.rank_base, 2);
	cr_assert_eq(info.global_rank, 3);
	expect_next(f, c1, 3, 0);
	/* A plain attach (only the local rank) follows the node's base. */
	{
		char msg[256];

		cr_assert_eq(sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c0, msg, sizeof(msg)),
			     0, "%s", msg);
	}
	sf_consumer_info(c0, &info);
	cr_assert_eq(info.global_rank, 2);
	expect_next(f, c0, 2, 0);
	expect_next(f, c0, 2, 1);
	sf_consumer_detach(c0);
	sf_consumer_detach(c1);
	feed_stop(f);
}

Test(node_ranks, a_plain_attach_is_refused_while_the_base_is_unknown)
{
	struct feed *f = start(1, 1, 0);
	struct sf_consumer *c = NULL;
	char msg[512];
	int r = sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg));

	cr_assert_eq(r, SF_E_RANGE);
	cr_assert(strstr(msg, "does not know this node's global ranks yet"), "%s", msg);
	cr_assert_null(c);
	cr_assert_eq(node_ranks_word(f), 0);
	/* The refused rank let go of its entry: the rank attaches now. */
	c = attach_as(0, 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(node_ranks, a_rank_that_disagrees_is_refused_naming_both_bases)
{
	struct feed *f = start(1, 1, 0);
	struct sf_consumer *c0 = attach_as(2, 0);
	char msg[512];

	attach_refused(1, 1, SF_E_RANGE, msg, sizeof(msg));
	cr_assert(strstr(msg, "RANK=1 with LOCAL_RANK=1"), "%s", msg);
	cr_assert(strstr(msg, "0..1"), "the claimed ranks: %s", msg);
	cr_assert(strstr(msg, "2..3"), "the node's ranks: %s", msg);
	cr_assert(strstr(msg, "still runs"), "%s", msg);
	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(1, 2, 1), "the base stays");
	expect_next(f, c0, 2, 0);
	sf_consumer_detach(c0);
	feed_stop(f);
}

Test(node_ranks, contradictions_in_the_environment_are_refused)
{
	struct feed *f = start(1, 1, 0);
	struct sf_consumer *c = NULL;
	struct sf_rank_env env;
	char msg[512];

	env = torchrun_env(2, 0);
	env.world_size = 8;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_GEOMETRY);
	cr_assert(strstr(msg, "WORLD_SIZE=8") && strstr(msg, "world_size x batch.size"), "%s", msg);
	env = torchrun_env(2, 0);
	env.local_world_size = 3;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_GEOMETRY);
	cr_assert(strstr(msg, "LOCAL_WORLD_SIZE=3"), "%s", msg);
	env = torchrun_env(2, 0);
	env.group_rank = 0;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "GROUP_RANK=0"), "%s", msg);
	env = torchrun_env(3, 0);
	env.group_rank = -1;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "3..4") && strstr(msg, "outside world size 4"), "%s", msg);
	/* GROUP_RANK x LOCAL_WORLD_SIZE wrapped in int64 (2^62 + 1 times 4 is 4): the
	 * contradiction was taken. And a RANK of 2^63 - 1 printed a negative range. */
	env = torchrun_env(2, 0);
	env.group_rank = (INT64_C(1) << 62) + 1;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "contradict"), "%s", msg);
	env = torchrun_env(INT64_MAX, 0);
	env.group_rank = -1;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "9223372036854775807..9223372036854775808"), "%s", msg);
	attach_refused(0, 1, SF_E_RANGE, msg, sizeof(msg));
	cr_assert(strstr(msg, "LOCAL_RANK=1"), "%s", msg);
	/* More ranks started than the job serves: the rank past them said only that it was
	 * out of range, where rank 0 was told the world size (a review). */
	env = torchrun_env(4, 2);
	env.world_size = 6;
	env.local_world_size = 3;
	env.group_rank = 1;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "has local ranks 0..1") && strstr(msg, "3 ranks were started here"),
		  "%s", msg);
	/* Without LOCAL_WORLD_SIZE (srun, a script): "-1 ranks were started here" (a review). */
	env.local_world_size = -1;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "6 ranks were started in all") && !strstr(msg, "-1 ranks"), "%s", msg);
	/* -1 stands for not known; another negative was taken as -1. */
	for (int k = 0; k < 4; k++) {
		static const char *const name[] = {"RANK=-2", "WORLD_SIZE=-2",
						   "LOCAL_WORLD_SIZE=-2", "GROUP_RANK=-2"};

		env = torchrun_env(2, 0);
		*(k == 0   ? &env.rank
		  : k == 1 ? &env.world_size
		  : k == 2 ? &env.local_world_size
			   : &env.group_rank) = -2;
		cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE, "%s", name[k]);
		cr_assert(strstr(msg, name[k]) && strstr(msg, "not valid"), "%s", msg);
	}
	cr_assert_null(c);
	cr_assert_eq(node_ranks_word(f), 0, "no refused rank set the base");
	feed_stop(f);
}

/*
 * torchrun takes another --nproc_per_node on each node and numbers their ranks one after
 * another: this node of 2 ranks after nodes of 1 and 1 (W = 4) is node 2 at base 2. Where
 * W was a multiple of LOCAL_WORLD_SIZE the base had to be GROUP_RANK x LOCAL_WORLD_SIZE
 * (every node the same size), so such a node's ranks were all refused (a review: 4 + 2
 * ranks in W = 6). What holds for nodes of any sizes is checked: node 0 starts at rank
 * 0, and each node before this one holds a rank at least.
 */
Test(node_ranks, nodes_of_different_sizes_are_taken)
{
	struct feed *f = start(1, 1, 0);
	struct sf_consumer *c = NULL;
	struct sf_rank_env env = torchrun_env(2, 0);
	char msg[512];

	env.group_rank = 2;
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), 0, "%s", msg);
	sf_consumer_detach(c);
	c = NULL;
	env = torchrun_env(2, 0);
	env.group_rank = 3; /* three nodes before, of two ranks in all */
	cr_assert_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE);
	cr_assert(strstr(msg, "GROUP_RANK=3") && strstr(msg, "at least one rank"), "%s", msg);
	cr_assert_null(c);
	feed_stop(f);
}

/* An environment that contradicts itself or the job is refused as such even while the
 * rank is taken: it was refused with SF_E_BUSY, which sends a user after the holder. */
Test(node_ranks, a_bad_environment_is_refused_before_a_taken_rank)
{
	struct feed *f = start(1, 1, 0);
	struct sf_consumer *held = attach_as(2, 0), *c = NULL;
	struct sf_rank_env env;
	char msg[512];

	env = torchrun_env(2, 0);
	env.world_size = -2;
	cr_expect_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE, "%s", msg);
	cr_expect(strstr(msg, "WORLD_SIZE=-2"), "%s", msg);
	env = torchrun_env(2, 0);
	env.world_size = 8;
	cr_expect_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_GEOMETRY, "%s", msg);
	env = torchrun_env(3, 0);
	env.group_rank = -1;
	cr_expect_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_RANGE, "%s", msg);
	cr_expect(strstr(msg, "outside world size 4"), "%s", msg);
	/* A good one is still told the rank is taken. */
	env = torchrun_env(2, 0);
	cr_expect_eq(attach_env(&env, &c, msg, sizeof(msg)), SF_E_BUSY, "%s", msg);
	cr_assert_null(c);
	sf_consumer_detach(held);
	feed_stop(f);
}

Test(node_ranks, a_static_base_refuses_other_ranks)
{
	struct feed *f = start(1, 0, 2);
	struct sf_consumer *c;
	char msg[512];

	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(1, 2, 1), "known from creation");
	attach_refused(0, 0, SF_E_RANGE, msg, sizeof(msg));
	cr_assert(strstr(msg, "consumers.rank_base: 2") && strstr(msg, "global rank 2"), "%s", msg);
	c = attach_as(2, 0);
	expect_next(f, c, 2, 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * A child process attaches local rank `lr` as global rank `rank`, claims `steps` batches
 * (the last one stays CLAIMED) and dies without detaching, as a rank SIGKILLed by
 * torchrun would.
 */
static void rank_dies_holding_a_batch(int64_t rank, int64_t lr, int steps)
{
	pid_t pid = fork();
	int status;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_rank_env env = torchrun_env(rank, lr);
		struct sf_consumer *c = NULL;
		struct sf_batch b;
		char msg[256];

		if (attach_env(&env, &c, msg, sizeof(msg)) < 0)
			_exit(2);
		for (int i = 0; i < steps; i++)
			if (sf_consumer_next(c, 5000, &b) < 0 || b.step != (uint64_t)i)
				_exit(3);
		raise(SIGKILL);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status 0x%x", status);
}

/* Poll (up to 10 s) until every slot of local rank r's ring is READY (or CLAIMED). */
static void wait_ring_full(const struct feed *f, uint32_t r)
{
	uint64_t deadline = sf__now_ns() + 10000000000ull;

	for (uint32_t i = 0; i < 3;) {
		uint64_t w = atomic_load_explicit(&sf__arena_slot(f->arena, r, i)->word,
						  memory_order_acquire);

		if (sf__slot_state(w) >= SF_SLOT_READY) {
			i++;
			continue;
		}
		cr_assert_lt(sf__now_ns(), deadline, "ring %u never filled", r);
		usleep(1000);
	}
}

Test(node_ranks, a_rebase_discards_the_old_ranks_batches)
{
	struct feed *f = start(2, 1, 0);
	struct sf_consumer *c0, *c1;

	/* Generation 1: the node is 2..3; both ranks die, rank 0 holding a batch, and the
	 * producers fill both rings for global ranks 2 and 3. */
	rank_dies_holding_a_batch(2, 0, 2);
	rank_dies_holding_a_batch(3, 1, 1);
	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(1, 2, 1));
	wait_ring_full(f, 1);
	/* The restart made this node 0..1: local rank 1 attaches first and re-bases. Its
	 * ring resumes at the step its predecessor reached (0: its claim is repaired), now
	 * for global rank 1. Local rank 0 agrees, and its dead predecessor's claim (step 1,
	 * content of global rank 2) is not delivered either. */
	c1 = attach_as(1, 1);
	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(2, 0, 1));
	for (uint64_t s = 0; s < 5; s++)
		expect_next(f, c1, 1, s);
	c0 = attach_as(0, 0);
	for (uint64_t s = 1; s < 6; s++)
		expect_next(f, c0, 0, s);
	cr_assert_geq(atomic_load_explicit(&f->arena->hdr->repairs, memory_order_relaxed), 2);
	sf_consumer_detach(c0);
	sf_consumer_detach(c1);
	feed_stop(f);
}

Test(node_ranks, a_rebase_waits_until_no_rank_of_the_old_base_lives)
{
	struct feed *f = start(1, 1, 0);
	struct sf_consumer *old0 = attach_as(2, 0), *c1;
	char msg[512];

	expect_next(f, old0, 2, 0);
	/* A new rank whose attach races the old group's exit is refused... */
	attach_refused(1, 1, SF_E_RANGE, msg, sizeof(msg));
	cr_assert(strstr(msg, "local rank 0") && strstr(msg, "still runs"), "%s", msg);
	/* ...and accepted once the old rank is gone: the node re-bases. */
	sf_consumer_detach(old0);
	c1 = attach_as(1, 1);
	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(2, 0, 1));
	expect_next(f, c1, 1, 0);
	sf_consumer_detach(c1);
	feed_stop(f);
}

Test(node_ranks, a_rebase_that_died_half_way_is_finished_by_the_next_rank)
{
	struct feed *f = start(2, 1, 0);
	struct sf_consumer *c0 = attach_as(2, 0);

	sf_consumer_detach(c0);
	wait_ring_full(f, 0);
	/* A re-base killed after its first step left the word "not known" at generation 2,
	 * with the rings full of batches of global ranks 2 and 3. */
	atomic_store_explicit(&f->arena->hdr->node_ranks, sf__node_ranks_word(2, 0, 0),
			      memory_order_seq_cst);
	c0 = attach_as(0, 0);
	cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(3, 0, 1));
	for (uint64_t s = 0; s < 4; s++)
		expect_next(f, c0, 0, s);
	sf_consumer_detach(c0);
	feed_stop(f);
}

/*
 * Re-bases while two producers fill: the node alternates between 0..1 and 2..3, each
 * time both ranks read a few batches (so the producers refill while the next re-base
 * stops them) and detach. Every batch must be the new ranks'.
 */
Test(node_ranks, rebases_under_busy_producers_deliver_only_the_new_ranks_batches)
{
	struct feed *f = start(2, 1, 0);
	uint64_t next[2] = {0, 0};

	for (uint32_t round = 0; round < 30; round++) {
		uint32_t base = round % 2 ? 0 : 2;
		struct sf_consumer *c[2];

		for (uint32_t r = 0; r < 2; r++)
			c[r] = attach_as(base + r, r);
		cr_assert_eq(node_ranks_word(f), sf__node_ranks_word(round + 1, base, 1));
		for (uint32_t i = 0; i < 4; i++)
			for (uint32_t r = 0; r < 2; r++)
				expect_next(f, c[r], base + r, next[r]++);
		for (uint32_t r = 0; r < 2; r++)
			sf_consumer_detach(c[r]);
	}
	feed_stop(f);
}
