/*
 * Producers honour the PAUSED job state: started paused they claim nothing; paused with
 * a full ring they refill none of the slots a consumer frees, and sleep rather than spin
 * while they wait; resumed, they refill those slots with the batches the steps call for;
 * paused and then stopped, they exit cleanly.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/proc.h"
#include "common/slot.h"
#include "producer/producer.h"
#include "tests/producer/harness.h"

#define P 2u
#define K 4u
#define R 2u

static char job[64];
static pid_t parent;

/* A failed check exits: the arena must not outlive the test (the producers die with
 * it, by PR_SET_PDEATHSIG). */
static void unlink_job(void)
{
	if (getpid() == parent)
		sf__arena_unlink_job(job);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Wait up to 10 s until every slot of every ring is READY for lap `lap`. */
static int ring_ready(struct sf_arena *a, uint64_t lap)
{
	for (int t = 0; t < 1000; t++) {
		uint32_t n = 0;

		for (uint32_t r = 0; r < R; r++)
			for (uint32_t i = 0; i < K; i++)
				n += atomic_load(&sf__arena_slot(a, r, i)->word) ==
				     sf__slot_word(SF_SLOT_READY, 0, lap);
		if (n == R * K)
			return 1;
		sleep_ms(10);
	}
	return 0;
}

static uint64_t batches(struct sf_arena *a)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < P; i++)
		n += atomic_load(&a->participants[i].batches);
	return n;
}

/* CPU time of process `pid` in clock ticks (user + system), from /proc/PID/stat. */
static uint64_t cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	H_CHECK(f && fgets(buf, sizeof(buf), f), "read %s", path);
	fclose(f);
	p = strrchr(buf, ')');
	H_CHECK(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			    &st) == 2,
		"parse %s", path);
	return ut + st;
}

int main(void)
{
	char *dir = h_tmpdir(), path[4096];
	struct sf_config cfg;
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_geometry g;
	struct sf_arena *a;
	struct sf_err e = {0};
	uint16_t *tokens = malloc(100000 * sizeof(*tokens));
	unsigned char *want;
	pid_t prod[P];
	uint64_t before, ticks;
	int status;

	for (uint32_t i = 0; i < 100000; i++)
		tokens[i] = (uint16_t)(i * 7919u % 50000u);
	snprintf(path, sizeof(path), "%s/tokens.bin", dir);
	h_write_nanogpt(path, tokens, 100000);
	free(tokens);
	h_config(&cfg, path, 2, 16, R);
	cfg.slots_per_rank = K;
	cfg.producers = P;
	H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
	H_CHECK(sf__dataset_geometry(ds, &cfg, &g, &e) == 0, "%s", e.msg);
	parent = getpid();
	snprintf(job, sizeof(job), "test-pause-%d", (int)parent);
	H_CHECK(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) == 0, "%s", e.msg);
	atexit(unlink_job);

	/* Started paused: registered, but nothing claimed. */
	sf__arena_set_job_state(a, SF_JOB_PAUSED);
	for (uint32_t i = 0; i < P; i++) {
		prod[i] = fork();
		H_CHECK(prod[i] >= 0, "fork");
		if (prod[i] == 0) {
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
				_exit(9);
			_exit(sf__producer_main(ds, a, i, &e) < 0);
		}
	}
	for (int t = 0; t < 1000; t++) {
		if (atomic_load(&a->participants[0].pid) && atomic_load(&a->participants[1].pid))
			break;
		sleep_ms(10);
	}
	sleep_ms(300);
	for (uint32_t r = 0; r < R; r++)
		for (uint32_t i = 0; i < K; i++)
			H_CHECK(atomic_load(&sf__arena_slot(a, r, i)->word) ==
					sf__slot_word(SF_SLOT_FREE, 0, 0),
				"slot %u/%u was claimed while the job was paused", r, i);
	H_CHECK(batches(a) == 0, "%llu batches built while paused", (unsigned long long)batches(a));
	printf("ok: started paused, no slot claimed\n");

	/* Running: the rings fill. */
	sf__arena_set_job_state(a, SF_JOB_RUNNING);
	H_CHECK(ring_ready(a, 0), "the rings did not fill after resume");
	printf("ok: resumed, %u slots filled\n", R * K);

	/* Paused with full rings: the slots a consumer frees stay free, and the producers
	 * sleep. */
	sf__arena_set_job_state(a, SF_JOB_PAUSED);
	before = batches(a);
	for (uint32_t r = 0; r < R; r++) {
		H_CHECK(sf__participant_register(a, P + r, SF_ROLE_CONSUMER, (int32_t)r, &e) >= 0,
			"%s", e.msg);
		for (uint64_t s = 0; s < K; s++) {
			struct sf_slot *slot;

			H_CHECK(sf__consumer_claim(a, P + r, r, s, 5ll * 1000000000, &slot) == 0,
				"claim rank %u step %llu", r, (unsigned long long)s);
			sf__consumer_release(a, r, slot);
		}
	}
	ticks = cpu_ticks(prod[0]) + cpu_ticks(prod[1]);
	sleep_ms(500);
	ticks = cpu_ticks(prod[0]) + cpu_ticks(prod[1]) - ticks;
	for (uint32_t r = 0; r < R; r++)
		for (uint32_t i = 0; i < K; i++)
			H_CHECK(atomic_load(&sf__arena_slot(a, r, i)->word) ==
					sf__slot_word(SF_SLOT_FREE, 0, 1),
				"slot %u/%u was refilled while the job was paused", r, i);
	H_CHECK(batches(a) == before, "batches built while paused");
	/* 500 ms of spinning would be about 50 ticks per producer. */
	H_CHECK(ticks <= 10, "paused producers used %llu clock ticks in 500 ms",
		(unsigned long long)ticks);
	printf("ok: paused, %u freed slots stay free, producers used %llu ticks in 500 ms\n", R * K,
	       (unsigned long long)ticks);

	/* Resumed: the freed slots get steps K..2K-1, with the batches those steps hold. */
	sf__arena_set_job_state(a, SF_JOB_RUNNING);
	H_CHECK(ring_ready(a, 1), "the rings did not refill after resume");
	H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
	want = malloc(sf__dataset_payload_bytes(ds));
	for (uint32_t r = 0; r < R; r++)
		for (uint32_t i = 0; i < K; i++) {
			struct sf_slot *slot = sf__arena_slot(a, r, i);
			uint32_t len;
			uint64_t first;

			H_CHECK(sf__builder_fill(b, r, K + i, want, &len, &first, &e) == 0, "%s",
				e.msg);
			H_CHECK(slot->step == K + i && slot->length == len &&
					!memcmp(sf__arena_payload(a, r, i), want, len),
				"rank %u step %u differs after the pause", r, K + i);
		}
	free(want);
	sf__builder_free(b);
	printf("ok: resumed, steps %u..%u hold their batches\n", K, 2 * K - 1);

	/* Stopped while paused: the producers leave their sleep and exit with success. */
	sf__arena_set_job_state(a, SF_JOB_PAUSED);
	sleep_ms(50);
	sf__arena_set_job_state(a, SF_JOB_STOPPING);
	for (uint32_t i = 0; i < P; i++) {
		H_CHECK(waitpid(prod[i], &status, 0) == prod[i], "waitpid");
		H_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer %u failed", i);
	}
	printf("ok: stopped while paused, producers exited cleanly\n");
	sf__arena_destroy(a);
	sf__dataset_close(ds);
	h_rmtree(dir);
	free(dir);
	return 0;
}
