/*
 * Four threads calling one consumer handle at once, as a program that misuses it would:
 * next(), state(), stats() and a bad sf_consumer_device_buffer(). The handle must refuse
 * each call made while another thread is inside one, serve every step exactly once, in
 * order, to whichever thread got in, and give each thread its own failure's message.
 * A plain program (Criterion aborts under ThreadSanitizer), which scripts/test also runs
 * under ThreadSanitizer, where any race on the handle's fields fails it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "feed.h"

#define THREADS 4
#define TARGET	2000u	   /* batches served at least, and until a call was refused */
#define STEPS	(1u << 20) /* steps recorded */
#define LIMIT_S 30	   /* to meet both */

static struct sf_consumer *c;
static atomic_uchar seen[STEPS];
static atomic_uint got, refused, failures;
static atomic_int stop;

static void fail(const char *what, int r, const char *msg)
{
	fprintf(stderr, "test_consumer_threads: %s (%d): %s\n", what, r, msg);
	atomic_fetch_add(&failures, 1);
	atomic_store(&stop, 1);
}

/* A refusal must say so to the refused thread; any other failure must be its own. */
static int refusal(int r, const char *call)
{
	const char *msg = sf_consumer_errmsg(c);

	if (r == SF_E_STATE) {
		if (!strstr(msg, "two threads"))
			fail(call, r, msg);
		atomic_fetch_add(&refused, 1);
		return 1;
	}
	return 0;
}

static void *run(void *arg)
{
	(void)arg;
	for (unsigned i = 0; !atomic_load(&stop); i++) {
		struct sf_batch b;
		struct sf_resume st;
		struct sf_consumer_stats stats;
		uint64_t tok, ds;
		int r = sf_consumer_next(c, 1, &b);

		if (r == 0) {
			if (b.step >= STEPS || atomic_exchange(&seen[b.step], 1))
				fail("a step served twice, or out of order", (int)b.step, "");
			else if (atomic_fetch_add(&got, 1) + 1 >= TARGET && atomic_load(&refused))
				atomic_store(&stop, 1);
		} else if (!refusal(r, "next") && r != SF_E_TIMEOUT && r != SF_E_AGAIN) {
			fail("next", r, sf_consumer_errmsg(c));
		} else if ((r == SF_E_TIMEOUT || r == SF_E_AGAIN) &&
			   !strstr(sf_consumer_errmsg(c), "rank 0 step")) {
			fail("the message of this thread's wait", r, sf_consumer_errmsg(c));
		}
		if (i % 8 == 0) {
			r = sf_consumer_device_buffer(c, 0, &tok, &ds);
			if (r != SF_E_RANGE || !strstr(sf_consumer_errmsg(c), "CPU mode"))
				fail("device_buffer", r, sf_consumer_errmsg(c));
		}
		if (i % 16 == 0) {
			r = sf_consumer_state(c, &st);
			if (r != 0 && !refusal(r, "state"))
				fail("state", r, sf_consumer_errmsg(c));
		}
		if (i % 32 == 0) {
			r = sf_consumer_stats(c, &stats);
			if (r != 0 && !refusal(r, "stats"))
				fail("stats", r, sf_consumer_errmsg(c));
		}
	}
	return NULL;
}

int main(void)
{
	char job[64], msg[256];
	struct feed_options o = {.ranks = 1,
				 .batch = 3,
				 .seq_len = 16,
				 .slots_per_rank = 3,
				 .producers = 1,
				 .token_bytes = 2,
				 .checksum = 1,
				 .seed = 11};
	struct sf_err e = {0};
	struct sf_consumer_stats stats;
	struct sf_resume st;
	struct feed *f = NULL;
	pthread_t t[THREADS];
	unsigned n;
	int r;

	snprintf(job, sizeof(job), "t-cons-threads-%d", (int)getpid());
	sf__arena_unlink_job(job);
	o.job = job;
	if (feed_start(&o, &f, &e) < 0) {
		fprintf(stderr, "test_consumer_threads: feed: %s\n", e.msg);
		return 1;
	}
	r = sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg));
	if (r < 0) {
		fprintf(stderr, "test_consumer_threads: attach: %s\n", msg);
		feed_stop(f);
		return 1;
	}
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, run, NULL);
	/* Until the threads are done: a scheduler may run one thread alone for a while. */
	for (int ms = 0; ms < LIMIT_S * 1000 && !atomic_load(&stop); ms += 10)
		usleep(10 * 1000);
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	n = atomic_load(&got);
	/* Steps 0..n-1, each once: none lost, none skipped. */
	for (unsigned s = 0; s < STEPS; s++)
		if (atomic_load(&seen[s]) != (s < n))
			fail("the steps served are not 0..n-1", (int)s, "");
	if (sf_consumer_stats(c, &stats) != 0 || stats.batches != n || stats.next_step != n)
		fail("stats after the threads", (int)stats.batches, sf_consumer_errmsg(c));
	if (sf_consumer_state(c, &st) != 0 || st.samples != (uint64_t)n * 3)
		fail("state after the threads", (int)st.samples, sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	feed_stop(f);
	printf("test_consumer_threads: %u batches, %u calls refused, %u failures\n", n,
	       atomic_load(&refused), atomic_load(&failures));
	if (atomic_load(&refused) == 0)
		fprintf(stderr, "test_consumer_threads: no call was refused: the threads never "
				"met inside a call\n");
	return atomic_load(&failures) || n < TARGET || atomic_load(&refused) == 0;
}
