/*
 * Unit tests of the consumer C API against the test feed: content and digests, error
 * paths (no such job, rank out of range, another layout version, timeout, busy rank,
 * detach while a batch is held), resume and seek, end of data, stop, a dead consumer's
 * batch handed to its successor, checksum failures and allocation-free steady state.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/proc.h"
#include "common/slot.h"
#include "tests/unit/consumer/feed.h"

static char job[64];
static int job_seq;

static struct feed_options opts(uint32_t producers)
{
	snprintf(job, sizeof(job), "t-cons-%d-%d", (int)getpid(), job_seq++);
	sf__arena_unlink_job(job);
	return (struct feed_options){.job = job,
				     .ranks = 2,
				     .batch = 3,
				     .seq_len = 16,
				     .slots_per_rank = 3,
				     .producers = producers,
				     .token_bytes = 2,
				     .doc_starts_per_seq = 4,
				     .checksum = 1,
				     .seed = 7};
}

static struct feed *start(struct feed_options o)
{
	struct sf_err e = {0};
	struct feed *f = NULL;

	cr_assert_eq(feed_start(&o, &f, &e), 0, "%s", e.msg);
	return f;
}

static struct sf_consumer *attach(int rank)
{
	char msg[256];
	struct sf_consumer *c = NULL;
	int r = sf_consumer_attach(job, rank, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg));

	cr_assert_eq(r, 0, "attach: %s", msg);
	return c;
}

/* Check a batch against what the feed rule says global rank g gets at `step`. */
static void expect_batch(const struct feed *f, const struct sf_batch *b, uint32_t g, uint64_t step)
{
	static unsigned char want[1 << 16];
	uint64_t tb = feed_token_bytes(f);

	cr_assert_lt(f->arena->hdr->payload_bytes, sizeof(want));
	cr_assert_eq(b->step, step);
	cr_assert_eq(feed_fill(f, g, step, want), f->arena->hdr->payload_bytes);
	cr_assert_eq(memcmp(b->tokens, want, tb), 0, "tokens of rank %u step %llu", g,
		     (unsigned long long)step);
	if (b->doc_starts_per_seq) {
		uint64_t off = sf__doc_starts_offset(b->batch, b->seq_tokens,
						     b->dtype == SF_DTYPE_U16 ? 2 : 4);

		cr_assert_eq(((uintptr_t)b->doc_starts) % 4, 0, "document starts are aligned");
		cr_assert_eq(memcmp(b->doc_starts, want + off, f->arena->hdr->payload_bytes - off),
			     0);
	}
	cr_assert_eq(b->digest, XXH3_64bits(want, tb));
	cr_assert_eq(b->first_sample, step * 3 * 2 + g * 3);
	cr_assert_eq(b->batch, 3);
	cr_assert_eq(b->seq_tokens, 17);
	cr_assert_eq(b->dtype, SF_DTYPE_U16);
	cr_assert_eq(b->device_ptr, 0);
}

Test(consumer, batches_follow_the_feed_rule_on_every_rank)
{
	struct feed *f = start(opts(2));
	struct sf_consumer *c0 = attach(0), *c1 = attach(1);
	struct sf_consumer_info info;
	struct sf_batch b;

	cr_assert_eq(sf_consumer_info(c1, &info), 0);
	cr_expect_eq(info.global_rank, 1);
	cr_expect_eq(info.world_size, 2);
	cr_expect_eq(info.device, SF_DEVICE_NONE);
	cr_expect_eq(info.config_digest, f->geo.config_digest);
	for (uint64_t s = 0; s < 20; s++) {
		cr_assert_eq(sf_consumer_next(c0, 5000, &b), 0, "%s", sf_consumer_errmsg(c0));
		expect_batch(f, &b, 0, s);
		cr_assert_eq(b.buffer, s % 3);
		cr_assert_eq(sf_consumer_next(c1, 5000, &b), 0, "%s", sf_consumer_errmsg(c1));
		expect_batch(f, &b, 1, s);
		cr_assert_eq((uint64_t)(uintptr_t)b.tokens,
			     info.ring_base + (s % 3) * info.payload_stride);
	}
	sf_consumer_detach(c0);
	sf_consumer_detach(c1);
	feed_stop(f);
}

Test(consumer, provenance_chains_the_batch_digests)
{
	struct feed_options o = opts(1);
	struct feed *f;
	struct sf_consumer *c;
	struct sf_consumer_stats st;
	struct sf_resume rs;
	struct sf_batch b;
	uint64_t chain = 0;

	/* 7 samples an epoch: the state after 60 samples is in epoch 8. */
	o.samples_per_epoch = 7;
	f = start(o);
	c = attach(0);

	for (int i = 0; i < 10; i++) {
		unsigned char rec[16];

		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
		memcpy(rec, &b.step, 8); /* little-endian host */
		memcpy(rec + 8, &b.digest, 8);
		chain = sf_digest(rec, 16, chain);
	}
	cr_assert_eq(sf_consumer_stats(c, &st), 0);
	cr_expect_eq(st.provenance, chain);
	cr_expect_eq(st.batches, 10);
	cr_expect_eq(st.tokens, 10 * 3 * 16); /* B x T */
	cr_expect_eq(st.next_step, 10);
	cr_expect_eq(st.gpu, 0);
	cr_expect_leq(st.wait_ns_p50, st.wait_ns_p99);
	cr_assert_eq(sf_consumer_state(c, &rs), 0);
	cr_expect_eq(rs.provenance, chain);
	cr_expect_eq(rs.samples, 10 * 3 * 2);
	cr_expect_eq(rs.epoch, 60 / 7);
	cr_expect_eq(rs.config_digest, f->geo.config_digest);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* A batch carries the state that resumes a run at it: seeking there serves it again. */
Test(consumer, a_batch_carries_the_state_that_resumes_at_it)
{
	struct feed_options o = opts(1);
	struct sf_resume before, at;
	struct sf_consumer *c;
	struct sf_batch b, again;
	struct feed *f;

	o.samples_per_epoch = 7;
	f = start(o);
	c = attach(0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_assert_eq(sf_consumer_state(c, &before), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_expect_eq(b.provenance, before.provenance);
	cr_expect_eq(b.epoch, before.epoch);
	cr_expect_eq(b.epoch, 4 * 3 * 2 / 7);
	at = (struct sf_resume){.samples = b.step * 3 * 2,
				.epoch = b.epoch,
				.config_digest = f->geo.config_digest,
				.provenance = b.provenance};
	cr_assert_eq(sf_consumer_next(c, 5000, &again), 0);
	cr_assert_eq(sf_consumer_seek(c, &at), 0, "%s", sf_consumer_errmsg(c));
	cr_assert_eq(sf_consumer_next(c, 5000, &again), 0);
	cr_expect_eq(again.step, b.step);
	cr_expect_eq(again.digest, b.digest);
	cr_expect_eq(again.provenance, b.provenance);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* Every pair of types, every length to 40 and every start offset, with extreme ids. */
Test(consumer, tokens_widen_exactly)
{
	uint16_t u16[48];
	int32_t i32[48], o32[48];
	int64_t o64[48];

	for (int i = 0; i < 48; i++) {
		u16[i] = (uint16_t)(i % 3 == 0 ? 0xFFFF : i * 2654435761u);
		i32[i] = i % 3 == 0 ? INT32_MIN + i : (int32_t)(i * 2654435761u);
	}
	for (int off = 0; off < 8; off++) {
		for (uint64_t n = 0; n + off <= 40; n++) {
			memset(o64, 0x5a, sizeof(o64));
			cr_assert_eq(sf_tokens_widen(u16 + off, SF_DTYPE_U16, o64, SF_DTYPE_I64, n),
				     0);
			for (uint64_t i = 0; i < n; i++)
				cr_assert_eq(o64[i], (int64_t)u16[off + i]);
			cr_assert_eq(o64[n], 0x5a5a5a5a5a5a5a5a, "nothing written past n");
			memset(o32, 0x5a, sizeof(o32));
			cr_assert_eq(sf_tokens_widen(u16 + off, SF_DTYPE_U16, o32, SF_DTYPE_I32, n),
				     0);
			for (uint64_t i = 0; i < n; i++)
				cr_assert_eq(o32[i], (int32_t)u16[off + i]);
			cr_assert_eq(o32[n], 0x5a5a5a5a);
			cr_assert_eq(sf_tokens_widen(i32 + off, SF_DTYPE_I32, o64, SF_DTYPE_I64, n),
				     0);
			for (uint64_t i = 0; i < n; i++)
				cr_assert_eq(o64[i], (int64_t)i32[off + i]);
		}
	}
	cr_expect_eq(sf_tokens_widen(u16, SF_DTYPE_I64, o64, SF_DTYPE_I64, 1), SF_E_RANGE);
	cr_expect_eq(sf_tokens_widen(u16, SF_DTYPE_U16, o64, SF_DTYPE_U16, 1), SF_E_RANGE);
}

Test(consumer, output_buffers_get_each_batch_widened)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	static int64_t bufs[2][3 * 17];
	void *ptrs[2] = {bufs[0], bufs[1]};
	struct sf_batch b;

	cr_expect_eq(sf_consumer_set_output(c, SF_DTYPE_I64, ptrs, 65), SF_E_RANGE);
	cr_expect_eq(sf_consumer_set_output(c, SF_DTYPE_U16, ptrs, 2), SF_E_RANGE);
	cr_assert_eq(sf_consumer_set_output(c, SF_DTYPE_I64, ptrs, 2), 0);
	for (uint64_t s = 0; s < 7; s++) {
		const uint16_t *t;

		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
		expect_batch(f, &b, 0, s);
		t = b.tokens;
		for (int i = 0; i < 3 * 17; i++)
			cr_assert_eq(bufs[s % 2][i], t[i], "step %llu token %d",
				     (unsigned long long)s, i);
	}
	cr_assert_eq(sf_consumer_set_output(c, 0, NULL, 0), 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* A widened batch stays valid until `count` batches later, a seek between them or not:
 * the output buffer was buffers[step % count], so a seek to a step of the same parity
 * as the last one wrote its next batch over the batch the caller still held. */
Test(consumer, a_seek_never_writes_over_the_last_widened_batch)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	static int64_t bufs[2][3 * 17], held[3 * 17];
	void *ptrs[2] = {bufs[0], bufs[1]};
	struct sf_resume at;
	struct sf_batch b;

	cr_assert_eq(sf_consumer_set_output(c, SF_DTYPE_I64, ptrs, 2), 0);
	for (uint64_t s = 0; s < 2; s++) {
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
		cr_expect_eq(b.output, s);
	}
	memcpy(held, bufs[1], sizeof(held)); /* step 1, the batch the caller holds */
	cr_assert_eq(sf_consumer_state(c, &at), 0);
	at.samples = 3 * 3 * 2; /* step 3: buffer 1 by its parity */
	cr_assert_eq(sf_consumer_seek(c, &at), 0, "%s", sf_consumer_errmsg(c));
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_expect_eq(b.step, 3);
	cr_expect_eq(b.output, 0, "step 3 went to the buffer of the batch held");
	cr_expect_eq(memcmp(bufs[1], held, sizeof(held)), 0, "the batch held was overwritten");
	for (int i = 0; i < 3 * 17; i++)
		cr_assert_eq(bufs[b.output][i], ((const uint16_t *)b.tokens)[i]);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* With SF_OUTPUT_TARGETS the targets follow the tokens, each row's tokens 1..T back to
 * back: what a loss flattens as it is (PyTorch's targets.view(-1) refused the strided
 * view tokens[:, 1:], and nanoGPT's model.py stopped at its first step). */
Test(consumer, output_buffers_get_contiguous_targets)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	static int32_t bufs[2][3 * 17 + 3 * 16];
	void *ptrs[2] = {bufs[0], bufs[1]};
	struct sf_batch b;

	cr_assert_eq(sf_consumer_set_output(c, SF_DTYPE_I32 | SF_OUTPUT_TARGETS, ptrs, 2), 0);
	for (uint64_t s = 0; s < 5; s++) {
		const uint16_t *t;

		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
		expect_batch(f, &b, 0, s);
		t = b.tokens;
		for (int i = 0; i < 3 * 17; i++)
			cr_assert_eq(bufs[s % 2][i], t[i], "step %llu token %d",
				     (unsigned long long)s, i);
		for (int r = 0; r < 3; r++)
			for (int j = 0; j < 16; j++)
				cr_assert_eq(bufs[s % 2][3 * 17 + r * 16 + j], t[r * 17 + j + 1],
					     "step %llu row %d target %d", (unsigned long long)s, r,
					     j);
	}
	sf_consumer_detach(c);
	feed_stop(f);
}

/* A child of fork() that detaches (or uses) the handle it inherited leaves the parent's
 * batch and rank alone. */
Test(consumer, a_forked_child_leaves_the_parents_handle_alone)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	struct sf_batch b, child_b;
	unsigned char held[3 * 17 * 2];
	uint64_t w;
	pid_t pid;
	int status;

	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	memcpy(held, b.tokens, sizeof(held));
	w = atomic_load(&sf__arena_slot(f->arena, 0, 0)->word);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int ok = sf_consumer_next(c, 0, &child_b) == SF_E_STATE &&
			 strstr(sf_consumer_errmsg(c), "fork") != NULL;

		sf_consumer_detach(c);
		_exit(ok ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Still claimed by this process, its bytes unchanged after the producers ran on. */
	cr_expect_eq(atomic_load(&sf__arena_slot(f->arena, 0, 0)->word), w);
	usleep(50000);
	cr_expect_eq(memcmp(b.tokens, held, sizeof(held)), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
	expect_batch(f, &b, 0, 1);
	sf_consumer_detach(c);
	feed_stop(f);
}

struct waiter {
	struct sf_consumer *c;
	int timeout_ms;
	atomic_int started;
	int r;
	char msg[256]; /* sf_consumer_errmsg() in this thread, right after its call */
};

/* Wait timeout_ms in next() on a ring nobody fills; a call refused because the main
 * thread was inside one at that moment is made again. */
static void *wait_in_next(void *arg)
{
	struct waiter *w = arg;
	struct sf_batch b;

	atomic_store(&w->started, 1);
	do
		w->r = sf_consumer_next(w->c, w->timeout_ms, &b);
	while (w->r == SF_E_STATE);
	snprintf(w->msg, sizeof(w->msg), "%s", sf_consumer_errmsg(w->c));
	return NULL;
}

/* Start a thread waiting in next() of `c`, and return once a call of this thread has
 * been refused because of it (SF_E_AGAIN meanwhile: the waiter was not inside yet). */
static void start_waiter(pthread_t *t, struct waiter *w)
{
	struct sf_batch b;
	int r = SF_E_AGAIN;

	cr_assert_eq(pthread_create(t, NULL, wait_in_next, w), 0);
	while (!atomic_load(&w->started))
		usleep(1000);
	for (int ms = 0; ms < w->timeout_ms - 500 && r == SF_E_AGAIN; ms += 10) {
		r = sf_consumer_next(w->c, 0, &b);
		if (r == SF_E_AGAIN)
			usleep(10 * 1000);
	}
	cr_assert_eq(r, SF_E_STATE, "%d: %s", r, sf_consumer_errmsg(w->c));
}

/* A second thread's call while one thread is inside next() is refused, and changes
 * nothing: without the refusal both claimed steps and one overwrote the other's held
 * slot, which stayed claimed for good. */
Test(consumer, a_call_from_a_second_thread_meanwhile_is_refused)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(0);
	struct waiter w = {.c = c, .timeout_ms = 3000};
	struct sf_consumer_stats before, after;
	struct sf_resume st;
	struct sf_batch b;
	pthread_t t;

	cr_assert_eq(sf_consumer_stats(c, &before), 0);
	start_waiter(&t, &w);
	cr_expect(strstr(sf_consumer_errmsg(c), "two threads"), "%s", sf_consumer_errmsg(c));
	pthread_join(t, NULL);
	cr_expect_eq(w.r, SF_E_TIMEOUT, "%d", w.r);
	/* The waiter's own failure is what it reads, not this thread's refusal... */
	cr_expect(strstr(w.msg, "timed out") && !strstr(w.msg, "two threads"), "%s", w.msg);
	/* ...and this thread still reads its refusal, not the waiter's timeout. */
	cr_expect(strstr(sf_consumer_errmsg(c), "two threads"), "%s", sf_consumer_errmsg(c));
	/* The refused call changed nothing: no step taken, no batch counted. */
	cr_assert_eq(sf_consumer_state(c, &st), 0);
	cr_expect_eq(st.samples, 0);
	cr_assert_eq(sf_consumer_stats(c, &after), 0);
	cr_expect_eq(after.batches, before.batches);
	/* The handle is whole: the next call is served as before, and says why it failed. */
	cr_expect_eq(sf_consumer_next(c, 0, &b), SF_E_AGAIN);
	cr_expect_null(strstr(sf_consumer_errmsg(c), "two threads"), "%s", sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	feed_stop(f);
}

struct seeker {
	struct sf_consumer *c;
	struct sf_resume at;
	int r;
};

static void *seek_on_thread(void *arg)
{
	struct seeker *s = arg;

	s->r = sf_consumer_seek(s->c, &s->at);
	return NULL;
}

/*
 * A thread's failures on two handles: the second took the first's place, and errmsg()
 * of the first then gave what another thread's call had written into it meanwhile (a
 * review). Each handle keeps this thread's own last failure.
 */
Test(consumer, a_thread_reads_its_own_failure_on_each_of_its_handles)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *x = attach(0), *y = attach(1);
	struct seeker other = {.c = x};
	struct sf_resume st;
	struct sf_batch b;
	pthread_t t;

	cr_expect_eq(sf_consumer_next(x, 0, &b), SF_E_AGAIN);
	cr_assert_eq(sf_consumer_state(y, &st), 0);
	st.config_digest ^= 1;
	cr_expect_eq(sf_consumer_seek(y, &st), SF_E_DIGEST);
	cr_assert_eq(sf_consumer_state(x, &other.at), 0);
	other.at.samples = 1; /* not a multiple of the global batch */
	cr_assert_eq(pthread_create(&t, NULL, seek_on_thread, &other), 0);
	pthread_join(t, NULL);
	cr_expect_eq(other.r, SF_E_RANGE);
	cr_expect(strstr(sf_consumer_errmsg(x), "nothing ready") ||
			  strstr(sf_consumer_errmsg(x), "not ready"),
		  "%s", sf_consumer_errmsg(x));
	cr_expect(!strstr(sf_consumer_errmsg(x), "global batch"), "%s", sf_consumer_errmsg(x));
	cr_expect(strstr(sf_consumer_errmsg(y), "resume state of config"), "%s",
		  sf_consumer_errmsg(y));
	sf_consumer_detach(x);
	sf_consumer_detach(y);
	feed_stop(f);
}

/* fork() while another thread is inside next(): the child's copy of the handle is its
 * parent's, refused as such (not as "two threads"), by every call: state() and stats()
 * gave the parent's figures of the fork's instant as the child's own. */
Test(consumer, a_fork_during_another_threads_call_leaves_the_child_a_refused_copy)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(0);
	struct waiter w = {.c = c, .timeout_ms = 3000};
	pthread_t t;
	pid_t pid;
	int status;

	start_waiter(&t, &w);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_consumer_stats stats;
		struct sf_resume st;
		struct sf_batch b;
		uint64_t tok, ds;
		int ok = sf_consumer_next(c, 0, &b) == SF_E_STATE &&
			 strstr(sf_consumer_errmsg(c), "fork") != NULL;

		ok = ok && sf_consumer_state(c, &st) == SF_E_STATE &&
		     strstr(sf_consumer_errmsg(c), "fork") != NULL;
		ok = ok && sf_consumer_stats(c, &stats) == SF_E_STATE;
		ok = ok && sf_consumer_device_buffer(c, 0, &tok, &ds) == SF_E_STATE &&
		     strstr(sf_consumer_errmsg(c), "fork") != NULL;
		sf_consumer_detach(c);
		_exit(ok ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	pthread_join(t, NULL);
	cr_expect_eq(w.r, SF_E_TIMEOUT, "%d", w.r);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* A bad index to sf_consumer_device_buffer(), which takes a const handle, is reported to
 * the thread that made it, and leaves the message of a call in another thread alone. */
Test(consumer, a_device_buffer_error_is_the_callers_own)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(0);
	struct waiter w = {.c = c, .timeout_ms = 2000};
	uint64_t tok, ds;
	pthread_t t;

	start_waiter(&t, &w);
	cr_expect_eq(sf_consumer_device_buffer(c, 0, &tok, &ds), SF_E_RANGE);
	cr_expect(strstr(sf_consumer_errmsg(c), "CPU mode"), "%s", sf_consumer_errmsg(c));
	pthread_join(t, NULL);
	cr_expect(strstr(w.msg, "timed out"), "%s", w.msg);
	cr_expect(strstr(sf_consumer_errmsg(c), "CPU mode"), "%s", sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, no_such_job)
{
	char msg[256] = "";
	struct sf_consumer *c = (struct sf_consumer *)&msg;

	snprintf(job, sizeof(job), "t-cons-none-%d", (int)getpid());
	cr_assert_eq(sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)), -ENOENT);
	cr_expect(strstr(msg, job) != NULL, "message names the job: %s", msg);
	cr_expect_eq(c, (struct sf_consumer *)&msg, "out-parameter untouched on failure");
	cr_assert_eq(sf_consumer_attach("bad/name", 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)),
		     SF_E_CONFIG);
}

Test(consumer, rank_out_of_range)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = NULL;
	char msg[256];

	cr_assert_eq(sf_consumer_attach(job, 2, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)),
		     SF_E_RANGE);
	cr_expect(strstr(msg, "0..1") != NULL, "%s", msg);
	cr_assert_eq(sf_consumer_attach(job, -1, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)),
		     SF_E_RANGE);
	cr_assert_null(c);
	feed_stop(f);
}

Test(consumer, arena_of_another_layout_version)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = NULL;
	char msg[256];

	f->arena->hdr->layout_version = SF_ARENA_LAYOUT_VERSION + 1;
	cr_assert_eq(sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)),
		     SF_E_LAYOUT);
	cr_expect(strstr(msg, "layout version") != NULL, "%s", msg);
	f->arena->hdr->layout_version = SF_ARENA_LAYOUT_VERSION;
	feed_stop(f);
}

/* A header that claims 1000 ranks in a file laid out for 2: attaching as local rank 999
 * is refused (before the fix it registered in, and read slots of, memory past the
 * mapping, and crashed). */
Test(consumer, lying_geometry_is_refused)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = NULL;
	char msg[256];

	f->arena->hdr->geo.ranks = 1000;
	f->arena->hdr->geo.world_size = 1000;
	cr_assert_eq(sf_consumer_attach(job, 999, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)),
		     SF_E_LAYOUT);
	cr_expect(strstr(msg, "header field") != NULL, "%s", msg);
	cr_assert_null(c);
	f->arena->hdr->geo.ranks = 2;
	f->arena->hdr->geo.world_size = 2;
	f->arena->hdr->geo.token_bytes = 0;
	cr_assert_eq(sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg)),
		     SF_E_LAYOUT);
	cr_expect(strstr(msg, "token bytes must be 2 or 4, got 0") != NULL, "%s", msg);
	f->arena->hdr->geo.token_bytes = 2;
	feed_stop(f);
}

Test(consumer, timeout_and_non_blocking)
{
	struct feed *f = start(opts(0)); /* no producers: nothing ever arrives */
	struct sf_consumer *c = attach(0);
	struct sf_batch b;
	uint64_t t0 = sf__now_ns(), dt;

	cr_assert_eq(sf_consumer_next(c, 0, &b), SF_E_AGAIN);
	cr_assert_eq(sf_consumer_next(c, 60, &b), SF_E_TIMEOUT);
	dt = sf__now_ns() - t0;
	cr_expect_geq(dt, 60 * 1000000ull);
	cr_expect_lt(dt, 2000 * 1000000ull);
	cr_expect(strstr(sf_consumer_errmsg(c), "timed out") != NULL, "%s", sf_consumer_errmsg(c));
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * A batch that took several calls to arrive (the Python Loader waits in slices of 0.1 s)
 * reports the whole wait as its wait_ns, not only the last call's: two calls time out
 * after 60 ms each, a third finds nothing at once, then this process fills step 0 as a
 * producer would.
 */
Test(consumer, a_wait_over_several_calls_counts_whole)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(0);
	struct sf_batch b;
	struct sf_fill fill;
	struct sf_consumer_stats st;

	cr_assert_eq(sf_consumer_next(c, 60, &b), SF_E_TIMEOUT);
	cr_assert_eq(sf_consumer_next(c, 60, &b), SF_E_TIMEOUT);
	/* A poll between (timeout 0: the Loader's first try of every next()) takes nothing
	 * away: it reset the sum, and the batch said 0 of the 120 ms (found by review). */
	cr_assert_eq(sf_consumer_next(c, 0, &b), SF_E_AGAIN);
	cr_assert_geq(sf__participant_register(f->arena, 0, SF_ROLE_PRODUCER, 0, NULL), 1);
	cr_assert_eq(sf__producer_claim(f->arena, 0, 1000 * 1000000ll, &fill), 0);
	cr_assert_eq(fill.step, 0);
	cr_assert_eq(sf__producer_publish(f->arena, 0, &fill,
					  feed_fill(f, fill.global_rank, 0, fill.payload),
					  (uint64_t)fill.global_rank * f->geo.batch),
		     0);
	cr_assert_eq(sf_consumer_next(c, 1000, &b), 0, "%s", sf_consumer_errmsg(c));
	cr_expect_geq(b.wait_ns, 120 * 1000000ull, "wait_ns %llu", (unsigned long long)b.wait_ns);
	sf_consumer_stats(c, &st);
	cr_expect_geq(st.wait_ns_total, 120 * 1000000ull);
	sf__participant_unregister(f->arena, 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, second_consumer_of_a_rank_is_refused)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(1), *d = NULL;
	char msg[256];

	cr_assert_eq(sf_consumer_attach(job, 1, SF_DEVICE_NONE, 0, &d, msg, sizeof(msg)),
		     SF_E_BUSY);
	cr_expect(strstr(msg, "local rank 1") != NULL, "%s", msg);
	/* The holder is this process (another handle), and the message says so. */
	cr_expect(strstr(msg, "this process") != NULL, "%s", msg);
	cr_expect(strstr(msg, "another process") == NULL, "%s", msg);
	sf_consumer_detach(c);
	/* Held by a child: the message names it. */
	{
		int go[2], held[2];
		char byte = 0, pid[32];
		pid_t child;

		cr_assert_eq(pipe(go), 0);
		cr_assert_eq(pipe(held), 0);
		child = fork();
		cr_assert_geq(child, 0);
		if (child == 0) {
			struct sf_consumer *cc = NULL;

			if (sf_consumer_attach(job, 1, SF_DEVICE_NONE, 0, &cc, NULL, 0) < 0 ||
			    write(held[1], "h", 1) != 1 || read(go[0], &byte, 1) != 1)
				_exit(1);
			sf_consumer_detach(cc);
			_exit(0);
		}
		cr_assert_eq(read(held[0], &byte, 1), 1);
		cr_expect_eq(sf_consumer_attach(job, 1, SF_DEVICE_NONE, 0, &d, msg, sizeof(msg)),
			     SF_E_BUSY);
		snprintf(pid, sizeof(pid), "pid %d", (int)child);
		cr_expect(strstr(msg, "another process") != NULL && strstr(msg, pid) != NULL,
			  "%s", msg);
		cr_assert_eq(write(go[1], "g", 1), 1);
		waitpid(child, NULL, 0);
		close(go[0]);
		close(go[1]);
		close(held[0]);
		close(held[1]);
	}
	c = attach(1);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, detach_while_a_batch_is_held_releases_it)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	struct sf_batch b;

	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_assert_eq(b.step, 1);
	cr_assert_eq(sf__slot_state(atomic_load(&sf__arena_slot(f->arena, 0, 1)->word)),
		     SF_SLOT_CLAIMED);
	sf_consumer_detach(c);
	/* Step 1 was released: its slot now serves step 1 + K. */
	cr_assert_geq(sf__slot_lap(atomic_load(&sf__arena_slot(f->arena, 0, 1)->word)), 1);
	c = attach(0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	expect_batch(f, &b, 0, 2);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, release_then_next_continues)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(1);
	struct sf_batch b;

	cr_assert_eq(sf_consumer_release(c), 0); /* nothing held: a no-op */
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_assert_eq(sf_consumer_release(c), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	expect_batch(f, &b, 1, 1);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* sf_consumer_release_batch() of another handle's batch released this handle's own,
 * which its caller still read (the step numbers matched). */
Test(consumer, release_batch_takes_only_this_handles_batch)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c0 = attach(0), *c1 = attach(1);
	struct sf_batch b0, b1, again;

	cr_assert_eq(sf_consumer_next(c0, 5000, &b0), 0);
	cr_assert_eq(sf_consumer_next(c1, 5000, &b1), 0);
	cr_assert_eq(b0.step, b1.step);
	cr_assert_eq(sf_consumer_release_batch(c1, &b0), SF_E_STATE);
	cr_expect(strstr(sf_consumer_errmsg(c1), "not this handle's"), "%s",
		  sf_consumer_errmsg(c1));
	/* c1 still holds its batch: nothing refilled it. */
	usleep(200 * 1000);
	expect_batch(f, &b1, 1, 0);
	cr_assert_eq(sf_consumer_release_batch(c1, &b1), 0);
	/* Its own batch released already: a no-op. */
	cr_assert_eq(sf_consumer_release_batch(c1, &b1), 0);
	cr_assert_eq(sf_consumer_next(c1, 5000, &again), 0);
	expect_batch(f, &again, 1, 1);
	sf_consumer_detach(c0);
	sf_consumer_detach(c1);
	feed_stop(f);
}

/* Explicit release is a GPU mode: in CPU mode it was taken and ignored, and a caller that
 * held batches as it allows read them refilled (the header tells a GPU caller that gets
 * -ENODEV to retry with SF_DEVICE_NONE). */
Test(consumer, explicit_release_is_refused_in_cpu_mode)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = NULL;
	char msg[256];
	int r = sf_consumer_attach(job, 0, SF_DEVICE_NONE,
				   SF_ATTACH_EXPLICIT_RELEASE | SF_ATTACH_GPU_BUFFERS(2), &c, msg,
				   sizeof(msg));

	cr_assert_eq(r, SF_E_STATE, "%d: %s", r, msg);
	cr_expect(strstr(msg, "SF_ATTACH_EXPLICIT_RELEASE") && strstr(msg, "GPU"), "%s", msg);
	cr_assert_null(c);
	c = attach(0); /* the rank is free */
	sf_consumer_detach(c);
	feed_stop(f);
}

/* Flags and devices attach cannot act on are refused in every mode, naming the value,
 * and the rank stays free. */
Test(consumer, attach_refuses_flags_and_devices_it_does_not_know)
{
	struct feed *f = start(opts(0));
	struct {
		int32_t device;
		uint32_t flags;
		const char *says;
	} bad[] = {
		{SF_DEVICE_NONE, SF_ATTACH_GPU_BUFFERS(17), "17 device buffers"},
		{SF_DEVICE_NONE, SF_ATTACH_GPU_BUFFERS(255), "255 device buffers"},
		{SF_DEVICE_NONE, 0xffff0000u, "0xffff0000"},
		{SF_DEVICE_NONE, 0x4u, "0x4"},
		{-2, 0, "device -2"},
		{INT32_MIN, SF_ATTACH_CPU, "device -2147483648"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct sf_consumer *c = NULL;
		char msg[256] = "";
		int r = sf_consumer_attach(job, 0, bad[i].device, bad[i].flags, &c, msg,
					   sizeof(msg));

		cr_expect_eq(r, SF_E_RANGE, "case %zu: %d: %s", i, r, msg);
		cr_expect(strstr(msg, bad[i].says) != NULL, "case %zu: %s", i, msg);
		cr_expect_null(c);
	}
	sf_consumer_detach(attach(0)); /* the rank is free */
	feed_stop(f);
}

/* A CPU handle has no device buffers: SF_E_RANGE, and the handle's message says so
 * (it kept the last failure's, about something else). */
Test(consumer, device_buffer_of_a_cpu_handle_says_why)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(0);
	uint64_t tokens = 7, docs = 9;

	cr_assert_eq(sf_consumer_set_stream(c, 0), SF_E_STATE);
	cr_expect_eq(sf_consumer_device_buffer(c, 0, &tokens, &docs), SF_E_RANGE);
	cr_expect(strstr(sf_consumer_errmsg(c), "CPU mode") != NULL, "%s", sf_consumer_errmsg(c));
	cr_expect(strstr(sf_consumer_errmsg(c), "device buffer 0") != NULL, "%s",
		  sf_consumer_errmsg(c));
	cr_expect_eq(tokens, 7);
	cr_expect_eq(docs, 9);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, seek_replays_byte_identical_batches)
{
	struct feed *f = start(opts(2));
	struct sf_consumer *c = attach(1);
	struct sf_resume at5, bad;
	struct sf_batch b;
	uint64_t digests[7], prov_after;
	struct sf_consumer_stats st;

	for (int i = 0; i < 5; i++)
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_assert_eq(sf_consumer_state(c, &at5), 0);
	cr_assert_eq(at5.samples, 5 * 3 * 2);
	for (int i = 0; i < 7; i++) {
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
		digests[i] = b.digest;
	}
	sf_consumer_stats(c, &st);
	prov_after = st.provenance;

	bad = at5;
	bad.config_digest ^= 1;
	cr_assert_eq(sf_consumer_seek(c, &bad), SF_E_DIGEST);
	bad = at5;
	bad.samples += 1;
	cr_assert_eq(sf_consumer_seek(c, &bad), SF_E_RANGE);

	cr_assert_eq(sf_consumer_seek(c, &at5), 0, "%s", sf_consumer_errmsg(c));
	for (int i = 0; i < 7; i++) {
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
		expect_batch(f, &b, 1, 5 + (uint64_t)i);
		cr_assert_eq(b.digest, digests[i]);
	}
	sf_consumer_stats(c, &st);
	cr_assert_eq(st.provenance, prov_after);

	/* Forward too: a fresh handle seeks past what was consumed. */
	sf_consumer_detach(c);
	c = attach(1);
	at5.samples = 40 * 6;
	cr_assert_eq(sf_consumer_seek(c, &at5), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	expect_batch(f, &b, 1, 40);
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * Resume states beyond the job's step limit are refused, never wrapped: before the fix a
 * seek to step 2^50 made the ring serve step 0's data labelled as step 2^50. The last
 * step below the limit is served under its own number.
 */
Test(consumer, seek_out_of_range_is_refused)
{
	struct feed *f = start(opts(0)); /* K = 3, B = 3, W = 2 */
	struct sf_consumer *c = attach(0);
	const uint64_t limit = 3 * ((UINT64_C(1) << 48) - 1);
	struct sf_resume st;
	struct sf_batch b;

	cr_assert_eq(sf__arena_step_limit(&f->arena->hdr->geo), limit);
	cr_assert_eq(sf_consumer_state(c, &st), 0);
	st.samples = (UINT64_C(1) << 50) * 6;
	cr_assert_eq(sf_consumer_seek(c, &st), SF_E_RANGE);
	cr_expect(strstr(sf_consumer_errmsg(c), "step 1125899906842624, out of range") != NULL,
		  "%s", sf_consumer_errmsg(c));
	cr_expect(strstr(sf_consumer_errmsg(c), "steps are 0..844424930131964") != NULL, "%s",
		  sf_consumer_errmsg(c));
	st.samples = limit * 6;
	cr_assert_eq(sf_consumer_seek(c, &st), SF_E_RANGE);
	/* Nothing moved: the ring still starts at step 0. */
	cr_expect_eq(sf__ring_next_step(f->arena, 0), 0);
	st.samples = (limit - 1) * 6;
	cr_assert_eq(sf_consumer_seek(c, &st), 0, "%s", sf_consumer_errmsg(c));
	cr_expect_eq(sf__ring_next_step(f->arena, 0), limit - 1);
	cr_expect_eq(sf_consumer_next(c, 0, &b), SF_E_AGAIN);
	cr_assert_eq(sf_consumer_state(c, &st), 0);
	cr_expect_eq(st.samples, (limit - 1) * 6);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, end_of_data)
{
	struct feed_options o = opts(1);
	struct feed *f;
	struct sf_consumer *c;
	struct sf_resume zero;
	struct sf_batch b;

	o.steps = 3;
	f = start(o);
	c = attach(0);
	for (uint64_t s = 0; s < 3; s++) {
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
		expect_batch(f, &b, 0, s);
	}
	cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_END);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_END);
	sf_consumer_state(c, &zero);
	cr_assert_eq(zero.samples, 3 * 6);
	zero.samples = 0;
	zero.provenance = 0;
	cr_assert_eq(sf_consumer_seek(c, &zero), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	expect_batch(f, &b, 0, 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * Each handle that met a finite job's end released a marker, which moved the rank's
 * position one step on: the next attach started there, its state past the end (and in
 * the next epoch), more so with each restart (a review: 20, then 24, 28, 32 ...). Every
 * later handle starts at the end, its state the end's (once the producers have put the
 * next marker in place; before, from its first next() on), next() SF_E_END, and a seek
 * from there still works. A seek past the end says so, and the state is the end's.
 */
Test(consumer, the_end_is_where_every_later_handle_starts)
{
	struct feed_options o = opts(1);
	struct feed *f;
	struct sf_consumer *c;
	struct sf_resume st;
	struct sf_batch b;

	o.steps = 3;
	f = start(o);
	c = attach(0);
	for (uint64_t s = 0; s < 3; s++)
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_END);
	sf_consumer_detach(c);
	/* The producers put the next marker in place (step 4's slot READY). */
	for (int ms = 0; ms < 5000; ms++) {
		const uint32_t K = f->arena->geo.slots_per_rank;
		uint64_t w = atomic_load(&sf__arena_slot(f->arena, 0, 4 % K)->word);

		if (sf__slot_state(w) == SF_SLOT_READY && sf__slot_lap(w) == 4 / K)
			break;
		usleep(1000);
	}
	for (int k = 0; k < 4; k++) {
		c = attach(0);
		cr_assert_eq(sf_consumer_state(c, &st), 0);
		cr_expect_eq(st.samples, 3 * 6, "attach %d: state at sample %llu", k,
			     (unsigned long long)st.samples);
		cr_expect_eq(sf_consumer_next(c, 5000, &b), SF_E_END, "%s", sf_consumer_errmsg(c));
		cr_expect(strstr(sf_consumer_errmsg(c), "the data ended at step 3"), "%s",
			  sf_consumer_errmsg(c));
		cr_assert_eq(sf_consumer_state(c, &st), 0);
		cr_expect_eq(st.samples, 3 * 6);
		sf_consumer_detach(c);
	}
	c = attach(0);
	cr_assert_eq(sf_consumer_state(c, &st), 0);
	st.samples = 6;
	st.provenance = 0;
	cr_assert_eq(sf_consumer_seek(c, &st), 0, "%s", sf_consumer_errmsg(c));
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
	expect_batch(f, &b, 0, 1);
	st.samples = 5 * 6;
	cr_assert_eq(sf_consumer_seek(c, &st), 0, "%s", sf_consumer_errmsg(c));
	cr_expect_eq(sf_consumer_next(c, 5000, &b), SF_E_END);
	cr_expect(strstr(sf_consumer_errmsg(c), "the data ended at step 3, before step 5"), "%s",
		  sf_consumer_errmsg(c));
	cr_assert_eq(sf_consumer_state(c, &st), 0);
	cr_expect_eq(st.samples, 3 * 6, "state at sample %llu", (unsigned long long)st.samples);
	sf_consumer_detach(c);
	c = attach(0);
	cr_assert_eq(sf_consumer_state(c, &st), 0);
	cr_expect_eq(st.samples, 3 * 6, "state at sample %llu", (unsigned long long)st.samples);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, job_stopping)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = attach(0);
	struct sf_batch b;

	sf__arena_set_job_state(f->arena, SF_JOB_STOPPING);
	cr_assert_eq(sf_consumer_next(c, -1, &b), SF_E_STOPPED);
	/* A seek too, as the header says (it returned 0). */
	{
		struct sf_resume st;

		cr_assert_eq(sf_consumer_state(c, &st), 0);
		cr_assert_eq(sf_consumer_seek(c, &st), SF_E_STOPPED);
	}
	sf_consumer_detach(c);
	feed_stop(f);
}

struct creator_kill {
	pid_t pid;
	uint64_t killed_ns;
};

static void *kill_creator_later(void *arg)
{
	struct creator_kill *k = arg;

	usleep(300 * 1000);
	k->killed_ns = sf__now_ns();
	kill(k->pid, SIGKILL);
	waitpid(k->pid, NULL, 0);
	return NULL;
}

/* A call after the launcher is known dead (or found dead at the call's first look)
 * returns SF_E_JOB_GONE without waiting, whatever its timeout. */
static void expect_gone_at_once(struct sf_consumer *c, int32_t timeout_ms)
{
	struct sf_batch b;
	uint64_t t0 = sf__now_ns();
	int r = sf_consumer_next(c, timeout_ms, &b);
	uint64_t took = sf__now_ns() - t0;

	cr_expect_eq(r, SF_E_JOB_GONE, "timeout %d: %d: %s", timeout_ms, r,
		     sf_consumer_errmsg(c));
	cr_expect_lt(took, 1000000000ull, "timeout %d: SF_E_JOB_GONE after %.3f s", timeout_ms,
		     (double)took / 1e9);
}

/* The launcher killed outright (no STOPPING): a consumer waiting with no timeout gets
 * SF_E_JOB_GONE within 5 s (its liveness check runs every 0.5 s; the rest is a loaded
 * machine's margin), not a wait forever. */
Test(consumer, job_gone_when_the_launcher_dies)
{
	struct feed_options o = opts(0);
	struct creator_kill k = {0};
	struct sf_consumer *c;
	struct sf_batch b;
	pthread_t killer;
	int ready[2];
	uint64_t gone_ns;
	char byte;
	int r;

	cr_assert_eq(pipe(ready), 0);
	k.pid = fork();
	cr_assert_geq(k.pid, 0);
	if (k.pid == 0) {
		struct sf_err e = {0};
		struct feed *f = NULL;

		/* The arena's creator, standing for the launcher; no producers, so the
		 * consumer waits. */
		if (feed_start(&o, &f, &e) < 0 || write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	cr_assert_eq(read(ready[0], &byte, 1), 1);
	c = attach(0);
	cr_assert_eq(pthread_create(&killer, NULL, kill_creator_later, &k), 0);
	r = sf_consumer_next(c, -1, &b);
	gone_ns = sf__now_ns();
	pthread_join(killer, NULL);
	cr_expect_eq(r, SF_E_JOB_GONE, "%d: %s", r, sf_consumer_errmsg(c));
	cr_expect_lt(gone_ns - k.killed_ns, 5000000000ull, "JobGone after %.3f s",
		     (double)(gone_ns - k.killed_ns) / 1e9);
	cr_log_info("SF_E_JOB_GONE %.3f s after the creator's SIGKILL",
		    (double)(gone_ns - k.killed_ns) / 1e9);
	cr_expect(strstr(sf_consumer_errmsg(c), "launcher") != NULL, "%s", sf_consumer_errmsg(c));
	/* A call with a timeout, and one that does not wait, say the same: at once, not
	 * after the next look at the launcher (a 100 ms call timed out before). */
	expect_gone_at_once(c, 100);
	expect_gone_at_once(c, 5000);
	expect_gone_at_once(c, -1);
	usleep(600 * 1000);
	expect_gone_at_once(c, 0);
	sf_consumer_detach(c);
	close(ready[0]);
	close(ready[1]);
	cr_assert_eq(sf__arena_unlink_job(job), 0);
}

/*
 * An arena a job killed outright left (its launcher dead, its ring full of READY
 * batches): attach took it, and next() handed out those K batches before it said the job
 * was gone (a review), so a rank started against a dead job, maybe of an older config
 * under the same name, trained on what was left. Attach refuses it.
 */
Test(consumer, a_dead_jobs_arena_is_refused_at_attach)
{
	struct feed_options o = opts(1);
	struct sf_consumer *c = NULL;
	char msg[256] = "", byte;
	int ready[2], r;
	pid_t pid;

	cr_assert_eq(pipe(ready), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_err e = {0};
		struct feed *f = NULL;

		/* The launcher, with a producer that fills the ring before it is killed. */
		if (feed_start(&o, &f, &e) < 0)
			_exit(1);
		while (atomic_load(&sf__arena_slot(f->arena, 0, 0)->word) !=
		       sf__slot_word(SF_SLOT_READY, 0, 0))
			usleep(100);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	cr_assert_eq(read(ready[0], &byte, 1), 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	r = sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &c, msg, sizeof(msg));
	cr_expect_eq(r, SF_E_JOB_GONE, "attach: %d: %s", r, msg);
	cr_expect(c == NULL);
	cr_expect(strstr(msg, "launcher") && strstr(msg, "shmfeed run"), "%s", msg);
	if (r == 0)
		sf_consumer_detach(c);
	close(ready[0]);
	close(ready[1]);
	cr_assert_eq(sf__arena_unlink_job(job), 0);
}

static void exit_mid_seek(int point)
{
	if (point == SF_TP_SEEK_MOVED)
		_exit(9);
}

/*
 * A rank killed in the middle of a seek (load_state_dict: one slot moved, the others not
 * yet) left a ring that was no window of K steps: its successor, which starts at the
 * ring's position, got step 1 of the old window, skipped the rest, and then failed with
 * "another handle moved the rank" (a review). The seek is finished at attach.
 */
Test(consumer, a_seek_cut_short_by_a_kill_is_finished_by_the_successor)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c;
	struct sf_batch b;
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_consumer *dying = NULL;
		const struct sf_resume at = {.samples = 10 * 3 * 2,
					     .epoch = 10 * 3 * 2 / 7,
					     .config_digest = f->geo.config_digest};

		if (sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &dying, NULL, 0) ||
		    sf_consumer_next(dying, 5000, &b))
			_exit(1);
		sf__test_hook = exit_mid_seek;
		sf_consumer_seek(dying, &at);
		_exit(2); /* the seek moved no slot */
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 9, "status %d", status);
	c = attach(0);
	for (uint64_t step = 10; step < 10 + 2 * 3; step++) {
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "step %llu: %s",
			     (unsigned long long)step, sf_consumer_errmsg(c));
		expect_batch(f, &b, 0, step);
	}
	sf_consumer_detach(c);
	/* A mark rewritten in shared memory past the job's steps is refused, not followed
	 * (the lap would wrap: a review). */
	atomic_store(&f->arena->rings[0].seek_to, sf__arena_step_limit(&f->geo) + 1);
	{
		struct sf_consumer *d = NULL;
		char msg[256];

		cr_assert_eq(sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &d, msg, sizeof(msg)),
			     SF_E_LAYOUT, "%s", msg);
	}
	atomic_store(&f->arena->rings[0].seek_to, 0);
	feed_stop(f);
}

/*
 * A rank writes into the batch it holds (a torch view of the slot cannot be made
 * read-only: `y[y == pad] = -100` on native targets) and dies: its claim came back READY
 * with the bytes it wrote, and its successor trained on them, unverified with checksums
 * off or on a step verify_every skips (a review). A batch a consumer held is verified
 * when it is claimed again, and refilled from its step's content if it changed.
 */
Test(consumer, a_batch_written_by_a_dead_holder_is_refilled_for_its_successor)
{
	/* Into the tokens, or into the document starts, which the digest does not cover
	 * (checksums off: a review of the first form of this fix). */
	for (int k = 0; k < 4; k++) {
		const int checksum = k % 2, starts = k / 2;
		struct feed_options o = opts(1);
		struct feed *f;
		struct sf_consumer *c;
		struct sf_batch b;
		int status;
		pid_t pid;

		o.checksum = (uint32_t)checksum;
		o.verify_every = 2; /* step 1, the one written, is not one verify_every takes */
		f = start(o);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			struct sf_consumer *dying = NULL;

			if (sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &dying, NULL, 0) ||
			    sf_consumer_next(dying, 5000, &b) || sf_consumer_next(dying, 5000, &b))
				_exit(1);
			if (starts)
				((uint32_t *)(uintptr_t)b.doc_starts)[1] ^= 0x5a;
			else
				((unsigned char *)(uintptr_t)b.tokens)[3] ^= 0x5a;
			_exit(b.step == 1 ? 0 : 1); /* dies holding step 1, written into */
		}
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		c = attach(0);
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "checksum %d, starts %d: %s",
			     checksum, starts, sf_consumer_errmsg(c));
		expect_batch(f, &b, 0, 1);
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
		expect_batch(f, &b, 0, 2);
		sf_consumer_detach(c);
		feed_stop(f);
	}
}

Test(consumer, a_dead_consumers_batch_goes_to_its_successor)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c;
	struct sf_batch b;
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sf_consumer *dying = NULL;

		if (sf_consumer_attach(job, 0, SF_DEVICE_NONE, 0, &dying, NULL, 0) ||
		    sf_consumer_next(dying, 5000, &b) || sf_consumer_next(dying, 5000, &b))
			_exit(1);
		_exit(b.step == 1 ? 0 : 1); /* dies holding step 1, without detaching */
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	c = attach(0);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	expect_batch(f, &b, 0, 1);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, checksum_mismatch_is_refilled)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	struct sf_slot *s0 = sf__arena_slot(f->arena, 0, 0);
	struct sf_batch b;

	while (atomic_load(&s0->word) != sf__slot_word(SF_SLOT_READY, 0, 0))
		usleep(100);
	sf__arena_payload(f->arena, 0, 0)[5] ^= 0x40;
	cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_CHECKSUM);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
	expect_batch(f, &b, 0, 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

/* The ring's first step as each release of a slot left it (SF_TP_CONSUMER_RELEASED). */
static struct sf_arena *released_arena;
static uint64_t released_next[4];
static int released_count;

static void note_release(int point)
{
	if (point == SF_TP_CONSUMER_RELEASED && released_count < 4)
		released_next[released_count++] = sf__ring_next_step(released_arena, 0);
}

/*
 * A failed step is handed back in one step: it was released (FREE for the step K later)
 * and then sought back, so a rank killed between the two (the seek waits for a producer
 * filling that slot) left a ring of steps s+1..s+K, and its successor skipped step s
 * without a word (a review). Each point where a kill can land must leave step s first.
 */
Test(consumer, a_checksum_failure_never_leaves_its_step_out_of_the_ring)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	struct sf_slot *s0 = sf__arena_slot(f->arena, 0, 0);
	struct sf_batch b;

	while (atomic_load(&s0->word) != sf__slot_word(SF_SLOT_READY, 0, 0))
		usleep(100);
	sf__arena_payload(f->arena, 0, 0)[5] ^= 0x40;
	released_arena = f->arena;
	released_count = 0;
	sf__test_hook = note_release;
	cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_CHECKSUM);
	sf__test_hook = NULL;
	cr_assert_gt(released_count, 0, "the failed step was never handed back");
	for (int i = 0; i < released_count; i++)
		cr_assert_eq(released_next[i], 0, "hand-back %d left the ring at step %llu", i,
			     (unsigned long long)released_next[i]);
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
	expect_batch(f, &b, 0, 0);
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * A shared header or slot rewritten after attach (a stray write, a buggy process of the
 * same user): a slot length past the payload was hashed past the mapping (SIGSEGV), a
 * verify_every of 0 read from the header divided by it (SIGFPE). The consumer keeps the
 * values it checked at attach and refuses the slot.
 */
Test(consumer, a_header_or_slot_rewritten_after_attach_is_an_error_not_a_crash)
{
	struct feed *f = start(opts(1));
	struct sf_consumer *c = attach(0);
	struct sf_slot *s0 = sf__arena_slot(f->arena, 0, 0);
	struct sf_batch b;
	uint32_t length;

	while (atomic_load(&s0->word) != sf__slot_word(SF_SLOT_READY, 0, 0))
		usleep(100);
	f->arena->hdr->verify_every = 0;
	length = s0->length;
	s0->length = 0x7fffffff;
	cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_CHECKSUM);
	s0->length = length;
	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
	expect_batch(f, &b, 0, 0);
	/* The batch's shape comes from the geometry checked at attach: a header that says
	 * 64 times the rows, 64 times the tokens and 4-byte tokens would have described a
	 * batch far past the slot, and past the mapping. */
	{
		struct sf_geometry geo = f->arena->hdr->geo;

		f->arena->hdr->geo.batch *= 64;
		f->arena->hdr->geo.seq_tokens *= 64;
		f->arena->hdr->geo.token_bytes = 4;
		f->arena->hdr->geo.doc_starts_per_seq = 1000;
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
		cr_assert(b.batch == geo.batch && b.seq_tokens == geo.seq_tokens &&
				  b.dtype == SF_DTYPE_U16 &&
				  b.doc_starts_per_seq == geo.doc_starts_per_seq,
			  "batch %u x %u, dtype %u, %u document starts", b.batch, b.seq_tokens,
			  b.dtype, b.doc_starts_per_seq);
		expect_batch(f, &b, 0, 1);
		f->arena->hdr->geo = geo;
	}
	/* sf_consumer_info() too (found by review): it gave the shared header's stride,
	 * from which the Python Loader builds every slot's view, so a rewritten one made a
	 * view of rows far past the mapping (a segfault in the caller's next read). */
	{
		uint64_t stride = f->arena->hdr->payload_stride;
		struct sf_consumer_info info;

		f->arena->hdr->payload_stride = stride * 1000000;
		f->arena->hdr->payload_bytes = stride * 1000000;
		cr_assert_eq(sf_consumer_info(c, &info), 0);
		cr_assert_eq(info.payload_stride, stride, "stride %llu, not %llu",
			     (unsigned long long)info.payload_stride, (unsigned long long)stride);
		f->arena->hdr->payload_stride = stride;
		f->arena->hdr->payload_bytes = f->arena->payload_bytes;
	}
	sf_consumer_detach(c);
	f->arena->hdr->verify_every = 1;
	feed_stop(f);
}

/* Wait until the feed has published step `step` of local rank `rank`. */
static void wait_ready(const struct feed *f, uint32_t rank, uint64_t step)
{
	const uint32_t K = f->geo.slots_per_rank;
	struct sf_slot *s = sf__arena_slot(f->arena, rank, (uint32_t)(step % K));

	while (atomic_load(&s->word) != sf__slot_word(SF_SLOT_READY, 0, step / K))
		usleep(100);
}

/*
 * With integrity.verify_every N, the steps that are multiples of N are verified and a
 * corruption of their tokens or of their document starts is caught as with N = 1; the
 * others are handed out unread, carrying the digest their producer computed.
 */
Test(consumer, checksums_of_every_nth_step_are_verified)
{
	struct feed_options o = opts(1);
	struct feed *f;
	struct sf_consumer *c;
	struct sf_batch b;
	static unsigned char want[1 << 16];
	uint64_t doc_off;

	o.slots_per_rank = 16;
	o.verify_every = 4;
	f = start(o);
	c = attach(0);
	doc_off = sf__doc_starts_offset(o.batch, o.seq_len + 1, o.token_bytes);
	cr_assert_eq(f->arena->hdr->verify_every, 4);
	for (uint64_t s = 0; s <= 8; s++)
		wait_ready(f, 0, s);
	sf__arena_payload(f->arena, 0, 1)[5] ^= 0x40;	    /* step 1: not verified */
	sf__arena_payload(f->arena, 0, 4)[5] ^= 0x40;	    /* step 4: tokens */
	sf__arena_payload(f->arena, 0, 8)[doc_off] ^= 0x01; /* step 8: document starts */
	for (uint64_t s = 0; s <= 8; s++) {
		if (s == 4 || s == 8) {
			cr_assert_eq(sf_consumer_next(c, 5000, &b), SF_E_CHECKSUM, "step %llu",
				     (unsigned long long)s);
			cr_expect(strstr(sf_consumer_errmsg(c), "checksum mismatch"));
		}
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
		feed_fill(f, 0, s, want);
		/* The digest is the producer's, of the bytes it wrote. */
		cr_expect_eq(b.digest, XXH3_64bits(want, feed_token_bytes(f)));
		if (s == 1)
			cr_expect_neq(memcmp(b.tokens, want, feed_token_bytes(f)), 0,
				      "step 1 was corrupted and not verified");
		else
			expect_batch(f, &b, 0, s);
	}
	sf_consumer_detach(c);
	feed_stop(f);
}

/*
 * With checksums off (and on the steps verify_every skips), next() reads no payload
 * byte: the ring's payloads are made inaccessible in this process, and next() still
 * hands out every batch, with the digest of the bytes the producer delivered.
 */
Test(consumer, next_reads_no_payload_byte_without_verification)
{
	for (int checksum = 0; checksum <= 1; checksum++) {
		struct feed_options o = opts(1);
		struct sf_consumer_info info;
		static unsigned char want[1 << 16];
		uint64_t digests[12];
		struct sf_consumer *c;
		struct feed *f;
		struct sf_batch b;

		o.checksum = (uint32_t)checksum;
		o.verify_every = 1000; /* with checksums: only step 0 is verified */
		o.slots_per_rank = 16;
		f = start(o);
		c = attach(0);
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
		digests[0] = b.digest;
		sf_consumer_info(c, &info);
		for (uint64_t s = 1; s < 12; s++)
			wait_ready(f, 0, s);
		cr_assert_eq(mprotect((void *)(uintptr_t)info.ring_base,
				      (size_t)info.slots_per_rank * info.payload_stride, PROT_NONE),
			     0);
		for (uint64_t s = 1; s < 12; s++) {
			cr_assert_eq(sf_consumer_next(c, 5000, &b), 0, "%s", sf_consumer_errmsg(c));
			digests[s] = b.digest;
		}
		cr_assert_eq(mprotect((void *)(uintptr_t)info.ring_base,
				      (size_t)info.slots_per_rank * info.payload_stride,
				      PROT_READ | PROT_WRITE),
			     0);
		for (uint64_t s = 0; s < 12; s++) {
			feed_fill(f, 0, s, want);
			cr_expect_eq(digests[s], XXH3_64bits(want, feed_token_bytes(f)),
				     "checksum %d step %llu", checksum, (unsigned long long)s);
		}
		sf_consumer_detach(c);
		feed_stop(f);
	}
}

/* RssShmem of this process in bytes: shared-memory pages its page tables map. */
static uint64_t rss_shmem(void)
{
	char line[256];
	unsigned long long kib = 0;
	FILE *f = fopen("/proc/self/status", "re");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssShmem: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (uint64_t)kib * 1024;
}

/*
 * A consumer's attach makes resident the arena's tables and its own ring, not the rings
 * of the other ranks: at 8 ranks, the process grows by about one ring, not eight.
 */
Test(consumer, attach_populates_only_its_own_ring)
{
	struct feed_options o = opts(0);
	uint64_t before, grown, ring, tables;
	struct sf_consumer *c;
	struct feed *f;

	o.ranks = 8;
	o.batch = 4;
	o.seq_len = 32767; /* 256 KiB payloads */
	o.slots_per_rank = 4;
	o.doc_starts_per_seq = 0;
	f = start(o);
	ring = (uint64_t)o.slots_per_rank * f->arena->hdr->payload_stride;
	tables = f->arena->hdr->payloads_off;
	before = rss_shmem();
	c = attach(3);
	grown = rss_shmem() - before;
	cr_expect_geq(grown, ring, "grew by %llu bytes, the ring has %llu",
		      (unsigned long long)grown, (unsigned long long)ring);
	cr_expect_leq(grown, ring + tables,
		      "grew by %llu bytes: ring %llu, tables %llu, arena %llu",
		      (unsigned long long)grown, (unsigned long long)ring,
		      (unsigned long long)tables, (unsigned long long)f->arena->hdr->total_size);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, steady_state_allocates_nothing)
{
	struct feed *f = start(opts(2));
	struct sf_consumer *c = attach(0);
	struct sf_batch b;
	struct mallinfo2 before, after;

	cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	before = mallinfo2();
	for (int i = 0; i < 2000; i++)
		cr_assert_eq(sf_consumer_next(c, 5000, &b), 0);
	after = mallinfo2();
	cr_expect_eq(after.uordblks, before.uordblks);
	cr_expect_eq(after.hblkhd, before.hblkhd);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, gpu_request_without_a_gpu)
{
	struct feed *f = start(opts(0));
	struct sf_consumer *c = NULL;
	char msg[256];
	int r = sf_consumer_attach(job, 0, 0, 0, &c, msg, sizeof(msg));

	if (r == 0) {
		struct sf_consumer_info info;

		sf_consumer_info(c, &info);
		cr_expect_eq(info.gpu_buffers, 2);
		sf_consumer_detach(c);
	} else {
		cr_expect_eq(r, -ENODEV, "%d: %s", r, msg);
		cr_expect(strstr(msg, "CUDA") != NULL, "%s", msg);
	}
	/* A bad $SHMFEED_GPU_BUFFERS is an error where there is a GPU to use it; without
	 * one, the call still says -ENODEV, on which callers fall back to the CPU (the
	 * variable's error came first and hid it). */
	setenv("SHMFEED_GPU_BUFFERS", "abc", 1);
	c = NULL;
	cr_expect_eq(sf_consumer_attach(job, 0, 0, 0, &c, msg, sizeof(msg)),
		     r == 0 ? SF_E_RANGE : -ENODEV, "%s", msg);
	unsetenv("SHMFEED_GPU_BUFFERS");
	cr_assert_null(c);
	/* SF_ATTACH_CPU overrides the device. */
	cr_assert_eq(sf_consumer_attach(job, 0, 0, SF_ATTACH_CPU, &c, msg, sizeof(msg)), 0);
	cr_expect_eq(sf_consumer_set_stream(c, 0), SF_E_STATE);
	sf_consumer_detach(c);
	feed_stop(f);
}

Test(consumer, strerror_never_null)
{
	for (int e = SF_E_LAST - 2; e <= 1; e++)
		cr_assert_not_null(sf_strerror(e));
	cr_assert_not_null(sf_strerror(-100000));
	cr_assert_not_null(sf_consumer_errmsg(NULL));
	cr_expect_str_eq(sf_strerror(SF_E_END), "end of data");
	cr_expect_str_eq(sf_strerror(SF_E_JOB_GONE), "the job's launcher is gone");
	sf_consumer_detach(NULL);
}
