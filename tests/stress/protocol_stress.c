/*
 * Multi-process (or, with --threads, multi-threaded) stress and kill test of the slot
 * protocol. P producers fill slots with a deterministic function of (rank, step); R
 * consumers each read their rank's steps 0..N-1 and verify content and checksum.
 *
 * With --kills N the parent plays the supervisor: it SIGKILLs producers and consumers at
 * random times and, through the test hook, at every protocol point in turn; it reaps the
 * dead, repairs their slots with sf__arena_repair() and starts a replacement with the
 * same participant index, until N kills have happened and every consumer has finished.
 *
 * What is checked at the end:
 *  - every delivered batch had the right content and checksum;
 *  - each consumer incarnation started exactly where its predecessor stopped: at the
 *    step after the last one it saw, or at that very step when it died holding it
 *    (a re-delivery, counted and bounded by the number of consumer kills);
 *  - every step of every rank was seen, in order, with no gap;
 *  - once quiet, no slot is FILLING or CLAIMED and every participant entry is free.
 *
 * Exit status 0 on success, 1 with a message on the first violated check.
 */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/proc.h"
#include "common/slot.h"

#define MAX_PROCS 16

/* Test bookkeeping shared by all processes (an anonymous shared mapping). */
struct shared {
	_Atomic uint64_t seen[MAX_PROCS];      /* per rank: steps seen (max+1) */
	_Atomic uint64_t last_seen[MAX_PROCS]; /* per rank: last step seen + 1, 0 none */
	_Atomic uint64_t redelivered;	       /* steps seen twice after a kill */
	_Atomic uint64_t errors;
	_Atomic uint32_t done[MAX_PROCS];  /* consumer of rank r finished */
	_Atomic uint64_t final[MAX_PROCS]; /* the step count rank r finished at */
	_Atomic uint32_t finish;	   /* the parent asks consumers to finish */
	_Atomic uint32_t kills_pending;	   /* consumers keep going past N meanwhile */
	char error[256];
};

static struct sf_arena *arena;
static struct shared *sh;
static uint32_t n_producers = 2, n_ranks = 2, slots = 4, payload_words = 64;
static uint64_t steps = 2000;
static int hook_point;		/* 0: no hook kill; else SF_TP_* to die at */
static unsigned hook_countdown; /* occurrences of hook_point before dying */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(&sh->errors, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(sh->error, sizeof(sh->error), fmt, ap);
		va_end(ap);
	}
}

/* splitmix64: the content generator, a pure function of its input. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void fill(uint64_t *p, uint32_t rank, uint64_t step)
{
	uint64_t seed = mix(((uint64_t)rank << 48) ^ step);

	for (uint32_t i = 0; i < payload_words; i++)
		p[i] = mix(seed + i);
}

static int verify(const uint64_t *p, uint32_t rank, uint64_t step)
{
	uint64_t seed = mix(((uint64_t)rank << 48) ^ step);

	for (uint32_t i = 0; i < payload_words; i++)
		if (p[i] != mix(seed + i))
			return 0;
	return 1;
}

static void hook(int point)
{
	if (point == hook_point && hook_countdown-- == 0)
		raise(SIGKILL);
}

static void producer_loop(uint32_t me)
{
	struct sf_fill f;

	while (sf__producer_claim(arena, me, -1, &f) == 0) {
		fill((uint64_t *)f.payload, f.rank, f.step);
		sf__producer_publish(arena, me, &f, payload_words * 8, f.step);
	}
}

static void consumer_loop(uint32_t rank)
{
	uint32_t me = n_producers + rank;
	uint64_t step = sf__ring_next_step(arena, rank);
	uint64_t last = atomic_load(&sh->last_seen[rank]);

	/* The ring says where to continue; it must agree with what was seen. */
	if (last && step != last && step != last - 1) {
		fail("rank %u restarted at step %llu after seeing up to %llu", rank,
		     (unsigned long long)step, (unsigned long long)last - 1);
		return;
	}
	if (last && step == last - 1)
		atomic_fetch_add(&sh->redelivered, 1);
	/* Without kills the run is exactly N steps; with kills it goes on until the parent
	 * has done them all and says finish, and past any step seen but not released by a
	 * killed predecessor, which is delivered again first. */
	for (;; step++) {
		struct sf_slot *s;
		int r;

		if ((atomic_load(&sh->finish) && step >= atomic_load(&sh->seen[rank])) ||
		    (!atomic_load(&sh->kills_pending) && step >= steps))
			break;
		r = sf__consumer_claim(arena, me, rank, step, -1, &s);

		if (r < 0) {
			fail("rank %u step %llu: claim failed: %s", rank, (unsigned long long)step,
			     sf_strerror(r));
			return;
		}
		if (s->step != step || s->length != payload_words * 8 ||
		    !verify((const uint64_t *)sf__arena_payload(arena, rank,
								(uint32_t)(step % slots)),
			    rank, step)) {
			fail("rank %u step %llu: wrong content (slot says step %llu)", rank,
			     (unsigned long long)step, (unsigned long long)s->step);
			return;
		}
		atomic_store(&sh->last_seen[rank], step + 1);
		if (step + 1 > atomic_load(&sh->seen[rank]))
			atomic_store(&sh->seen[rank], step + 1);
		sf__consumer_release(arena, rank, s);
	}
	atomic_store(&sh->final[rank], step);
	atomic_store(&sh->done[rank], 1);
}

/* Child body: register as participant `index`, run, exit. */
static void run_child(uint32_t index)
{
	struct sf_err e = {0};

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (hook_point)
		sf__test_hook = hook;
	if (sf__participant_register(arena, index,
				     index < n_producers ? SF_ROLE_PRODUCER : SF_ROLE_CONSUMER,
				     (int32_t)index, &e) < 1) {
		fail("register %u: %s", index, e.msg);
		_exit(1);
	}
	if (index < n_producers)
		producer_loop(index);
	else
		consumer_loop(index - n_producers);
	sf__participant_unregister(arena, index);
	_exit(0);
}

static pid_t start(uint32_t index, int point, unsigned countdown)
{
	pid_t pid;

	hook_point = point;
	hook_countdown = countdown;
	pid = fork();
	if (pid == 0)
		run_child(index);
	hook_point = 0;
	return pid;
}

static int all_done(void)
{
	for (uint32_t r = 0; r < n_ranks; r++)
		if (!atomic_load(&sh->done[r]))
			return 0;
	return 1;
}

static void *thread_main(void *arg)
{
	uint32_t index = (uint32_t)(uintptr_t)arg;
	struct sf_err e = {0};

	/* Threads share a pid; participant entries still give each its owner index. */
	if (index < n_producers)
		producer_loop(index);
	else
		consumer_loop(index - n_producers);
	(void)e;
	return NULL;
}

static int run_threads(void)
{
	pthread_t t[MAX_PROCS * 2];
	uint32_t n = n_producers + n_ranks;

	for (uint32_t i = 0; i < n; i++)
		pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)i);
	for (uint32_t i = n_producers; i < n; i++)
		pthread_join(t[i], NULL);
	sf__arena_set_job_state(arena, SF_JOB_STOPPING);
	for (uint32_t i = 0; i < n_producers; i++)
		pthread_join(t[i], NULL);
	return 0;
}

static int run_processes(unsigned kills, unsigned seed)
{
	uint32_t n = n_producers + n_ranks;
	pid_t pids[MAX_PROCS * 2];
	int sent[MAX_PROCS * 2] = {0};
	unsigned done_kills = 0, consumer_kills = 0, hook_kills = 0, hook_starts = 0;
	uint64_t next_kill;

	srand(seed);
	atomic_store(&sh->kills_pending, kills > 0);
	for (uint32_t i = 0; i < n; i++)
		pids[i] = start(i, 0, 0);
	next_kill = sf__now_ns() + (uint64_t)(rand() % 2000) * 1000;

	while (!all_done()) {
		int status;
		pid_t dead = waitpid(-1, &status, WNOHANG);

		if (atomic_load(&sh->errors))
			break;
		if (done_kills >= kills) {
			int enough = 1;

			for (uint32_t r = 0; r < n_ranks; r++)
				enough &= atomic_load(&sh->seen[r]) >= steps;
			if (enough)
				atomic_store(&sh->finish, 1);
		}
		if (dead > 0) {
			uint32_t i;

			for (i = 0; i < n && pids[i] != dead; i++)
				;
			if (i == n)
				continue;
			pids[i] = 0;
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
				continue; /* a consumer that finished */
			if (WIFEXITED(status)) {
				fail("participant %u exited with %d", i, WEXITSTATUS(status));
				break;
			}
			if (!sent[i]) {
				/* It died at the protocol point its hook named. */
				hook_kills++;
				done_kills++;
				if (i >= n_producers)
					consumer_kills++;
			}
			sent[i] = 0;
			/* Known dead: the fence is passed, so repair and replace it. */
			if (sf__arena_repair(arena, i) < 0) {
				fail("repair of %u refused", i);
				break;
			}
			if (i >= n_producers && atomic_load(&sh->done[i - n_producers]))
				continue;
			/* Every other replacement dies at a protocol point, cycling over all
			 * three points of its role, after a random number of passes. */
			if (done_kills < kills && (hook_starts++ & 1)) {
				int point = 1 + (int)(hook_starts / 2 % 3);

				if (i >= n_producers)
					point += 3;
				pids[i] = start(i, point, (unsigned)(rand() % 20));
			} else {
				pids[i] = start(i, 0, 0);
			}
			continue;
		}
		if (done_kills < kills && sf__now_ns() >= next_kill) {
			uint32_t victim = (uint32_t)rand() % n;

			if (pids[victim] > 0 && !sent[victim]) {
				kill(pids[victim], SIGKILL);
				sent[victim] = 1;
				done_kills++;
				if (victim >= n_producers)
					consumer_kills++;
			}
			next_kill = sf__now_ns() + (uint64_t)(rand() % 3000) * 1000;
		}
		usleep(100);
	}
	sf__arena_set_job_state(arena, SF_JOB_STOPPING);
	for (uint32_t i = 0; i < n; i++) {
		int status;

		/* A hook may still fire while stopping: repair whoever did not exit cleanly. */
		if (pids[i] > 0 && waitpid(pids[i], &status, 0) > 0 &&
		    !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			sf__arena_repair(arena, i);
	}
	if (atomic_load(&sh->redelivered) > consumer_kills)
		fail("%llu re-deliveries but only %u consumer kills",
		     (unsigned long long)atomic_load(&sh->redelivered), consumer_kills);
	printf("kills: %u (%u at protocol points, %u of consumers), re-deliveries: %llu\n",
	       done_kills, hook_kills, consumer_kills,
	       (unsigned long long)atomic_load(&sh->redelivered));
	if (done_kills < kills)
		fail("only %u of %u kills happened", done_kills, kills);
	return 0;
}

static int check_quiet(void)
{
	uint32_t nparts = n_producers + n_ranks;

	for (uint32_t r = 0; r < n_ranks; r++) {
		uint64_t final = atomic_load(&sh->final[r]);

		if (final < steps || atomic_load(&sh->seen[r]) != final)
			fail("rank %u saw %llu steps and finished at %llu (at least %llu wanted)",
			     r, (unsigned long long)atomic_load(&sh->seen[r]),
			     (unsigned long long) final, (unsigned long long)steps);
		if (sf__ring_next_step(arena, r) != final)
			fail("rank %u ring is at step %llu, not %llu", r,
			     (unsigned long long)sf__ring_next_step(arena, r),
			     (unsigned long long) final);
		for (uint32_t i = 0; i < slots; i++) {
			uint32_t st =
				sf__slot_state(atomic_load(&sf__arena_slot(arena, r, i)->word));

			if (st == SF_SLOT_FILLING || st == SF_SLOT_CLAIMED)
				fail("rank %u slot %u leaked in state %u", r, i, st);
		}
	}
	for (uint32_t i = 0; i < nparts; i++)
		if (atomic_load(&arena->participants[i].pid) != 0)
			fail("participant %u still registered", i);
	return atomic_load(&sh->errors) ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"producers", required_argument, 0, 'P'}, {"ranks", required_argument, 0, 'R'},
		{"slots", required_argument, 0, 'K'},	  {"steps", required_argument, 0, 'n'},
		{"kills", required_argument, 0, 'k'},	  {"seed", required_argument, 0, 's'},
		{"threads", no_argument, 0, 't'},	  {0, 0, 0, 0},
	};
	unsigned kills = 0, seed = (unsigned)time(NULL);
	int threads = 0, c, rc;
	struct sf_err e = {0};
	struct sf_geometry g = {0};
	char job[64];

	while ((c = getopt_long(argc, argv, "P:R:K:n:k:s:t", opts, NULL)) != -1) {
		switch (c) {
		case 'P':
			n_producers = (uint32_t)atoi(optarg);
			break;
		case 'R':
			n_ranks = (uint32_t)atoi(optarg);
			break;
		case 'K':
			slots = (uint32_t)atoi(optarg);
			break;
		case 'n':
			steps = strtoull(optarg, NULL, 10);
			break;
		case 'k':
			kills = (unsigned)atoi(optarg);
			break;
		case 's':
			seed = (unsigned)atoi(optarg);
			break;
		case 't':
			threads = 1;
			break;
		default:
			fprintf(stderr,
				"usage: %s [-P producers] [-R ranks] [-K slots] [-n steps] "
				"[-k kills] [-s seed] [--threads]\n",
				argv[0]);
			return 2;
		}
	}
	if (n_producers < 1 || n_producers > MAX_PROCS || n_ranks < 1 || n_ranks > MAX_PROCS ||
	    (threads && kills)) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	g = (struct sf_geometry){.ranks = n_ranks,
				 .slots_per_rank = slots,
				 .max_producers = n_producers,
				 .batch = 1,
				 .seq_tokens = payload_words * 2,
				 .token_bytes = 4,
				 .world_size = n_ranks,
				 .flags = SF_ARENA_F_CHECKSUM};
	snprintf(job, sizeof(job), "stress-%d", (int)getpid());
	if (sf__arena_create(job, &g, NULL, &arena, NULL, 0, &e) < 0) {
		fprintf(stderr, "create: %s\n", e.msg);
		return 1;
	}
	sf__arena_set_job_state(arena, SF_JOB_RUNNING);
	printf("%s: P=%u R=%u K=%u steps=%llu kills=%u seed=%u\n",
	       threads ? "threads" : "processes", n_producers, n_ranks, slots,
	       (unsigned long long)steps, kills, seed);
	if (threads)
		run_threads();
	else
		run_processes(kills, seed);
	rc = check_quiet();
	if (rc)
		fprintf(stderr, "FAIL: %s\n", sh->error);
	else
		printf("ok: %u ranks x >= %llu steps delivered in order with verified content\n",
		       n_ranks, (unsigned long long)steps);
	sf__arena_destroy(arena);
	return rc;
}
