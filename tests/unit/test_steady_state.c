/*
 * Steady-state costs of the slot protocol, measured in separate producer and consumer
 * processes:
 *  - allocations: malloc, calloc, realloc and mmap are interposed and counted; after a
 *    warm-up, 20,000 steps must make none (invariant A1);
 *  - idle waiting: a consumer waiting for a batch that does not come, and a producer
 *    waiting for a free slot, must each use under 1% of a core.
 * A plain program (exit 0 pass, 1 fail, 77 skip): the sanitizers interpose the
 * allocator themselves, so under them the allocation count is skipped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/proc.h"
#include "common/slot.h"
#include "tests/alloc_count.h"

#define STEPS  20000
#define WARMUP 100

struct results {
	unsigned long producer_allocs, consumer_allocs;
	double consumer_idle_cpu, producer_idle_cpu; /* fraction of one core */
	int producer_ok, consumer_ok;
};

static struct sf_arena *arena;
static struct results *res;

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void producer(void)
{
	struct sf_fill f;
	uint64_t n = 0;

	sf__participant_register(arena, 0, SF_ROLE_PRODUCER, 0, NULL);
	while (sf__producer_claim(arena, 0, -1, &f) == 0) {
		if (++n == WARMUP)
			alloc_count_reset();
		memset(f.payload, (int)f.step, 256);
		sf__producer_publish(arena, 0, &f, 256, f.step);
		if (n == STEPS) {
			res->producer_allocs = alloc_count();
			res->producer_ok = 1;
		}
	}
	_exit(0);
}

static void consumer(void)
{
	struct sf_slot *s;

	sf__participant_register(arena, 1, SF_ROLE_CONSUMER, 0, NULL);
	for (uint64_t step = 0; step < STEPS; step++) {
		if (step == WARMUP)
			alloc_count_reset();
		if (sf__consumer_claim(arena, 1, 0, step, -1, &s) < 0)
			_exit(1);
		sf__consumer_release(arena, 0, s);
	}
	res->consumer_allocs = alloc_count();
	res->consumer_ok = 1;
	_exit(0);
}

/* Wait 2 s for something that never comes; report the CPU used as a fraction. */
static void idle_consumer(void)
{
	uint64_t step = sf__ring_next_step(arena, 0);
	double c0 = cpu_seconds();
	uint64_t t0 = sf__now_ns();
	struct sf_slot *s;
	int r;

	/* The step K ahead of the ring cannot be ready: it waits the whole timeout. */
	r = sf__consumer_claim(arena, 1, 0, step + 4, 2000000000, &s);
	res->consumer_idle_cpu = (cpu_seconds() - c0) / ((double)(sf__now_ns() - t0) / 1e9);
	_exit(r == SF_E_TIMEOUT ? 0 : 1);
}

static void idle_producer(void)
{
	double c0 = cpu_seconds();
	uint64_t t0 = sf__now_ns();
	struct sf_fill f;
	int r;

	/* Every slot is full (READY) and nobody consumes: it waits the whole timeout. */
	r = sf__producer_claim(arena, 0, 2000000000, &f);
	res->producer_idle_cpu = (cpu_seconds() - c0) / ((double)(sf__now_ns() - t0) / 1e9);
	_exit(r == SF_E_TIMEOUT ? 0 : 1);
}

static pid_t spawn(void (*fn)(void))
{
	pid_t pid = fork();

	if (pid == 0)
		fn();
	return pid;
}

static int wait_ok(pid_t pid)
{
	int status;

	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void)
{
	struct sf_geometry g = {.ranks = 1,
				.slots_per_rank = 4,
				.max_producers = 1,
				.batch = 1,
				.seq_tokens = 128,
				.token_bytes = 2,
				.world_size = 1,
				.flags = SF_ARENA_F_CHECKSUM};
	struct sf_err e = {0};
	char job[64];
	pid_t p, c;
	int fail = 0;

#ifndef SANITIZED
	/* The counter must see what it is meant to count, or a zero proves nothing. */
	alloc_count_require();
#endif
	res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	snprintf(job, sizeof(job), "t-steady-%d", (int)getpid());
	if (sf__arena_create(job, &g, NULL, &arena, NULL, 0, &e) < 0) {
		fprintf(stderr, "create: %s\n", e.msg);
		return 1;
	}
	sf__arena_set_job_state(arena, SF_JOB_RUNNING);

	p = spawn(producer);
	c = spawn(consumer);
	if (!wait_ok(c))
		fail = 1;
	/* The ring is now full again: measure an idle producer, then an idle consumer. */
	usleep(100000);
	sf__arena_set_job_state(arena, SF_JOB_STOPPING);
	wait_ok(p);
	sf__arena_set_job_state(arena, SF_JOB_RUNNING);
	if (!wait_ok(spawn(idle_producer)))
		fail = 1;
	if (!wait_ok(spawn(idle_consumer)))
		fail = 1;
	sf__arena_destroy(arena);

#ifdef SANITIZED
	printf("allocation count: skipped under a sanitizer\n");
#else
	printf("allocations after warm-up: producer %lu, consumer %lu (over %d steps)\n",
	       res->producer_allocs, res->consumer_allocs, STEPS - WARMUP);
	if (!res->producer_ok || !res->consumer_ok || res->producer_allocs || res->consumer_allocs)
		fail = 1;
#endif
	printf("idle CPU: consumer %.3f%%, producer %.3f%% of a core\n",
	       100 * res->consumer_idle_cpu, 100 * res->producer_idle_cpu);
	if (res->consumer_idle_cpu >= 0.01 || res->producer_idle_cpu >= 0.01)
		fail = 1;
	printf("%s\n", fail ? "FAIL" : "ok");
	return fail;
}
