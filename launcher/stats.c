/*
 * Job statistics sampled from the arena: slot occupancy per rank, batches and tokens
 * delivered (counted from each ring's position, so they need nothing from consumers),
 * producer utilization from their busy-time counters, consumer wait percentiles from
 * the telemetry histograms, restarts and repairs; their JSON form, which is what
 * control replies and the PUB stream carry; and the human forms of a rate and of a
 * duration that the supervisor's progress lines and `shmfeed status`/`top` print.
 * Sampling only reads the arena.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/control.h"
#include "common/proc.h"
#include "common/slot.h"
#include "launcher/launcher.h"

static uint64_t percentile(const uint64_t *hist, uint64_t total, unsigned pct)
{
	uint64_t want = (total * pct + 99) / 100, seen = 0;

	if (!total)
		return 0;
	for (unsigned b = 0; b < SF_WAIT_BUCKETS; b++) {
		seen += hist[b];
		if (seen >= want)
			return b + 1 < 64 ? UINT64_C(1) << (b + 1) : UINT64_MAX;
	}
	return UINT64_MAX;
}

uint64_t sf__stats_end_step(const struct sf_geometry *g, uint64_t epochs)
{
	return epochs ? epochs * g->samples_per_epoch / ((uint64_t)g->batch * g->world_size)
		      : UINT64_MAX;
}

void sf__stats_sample(const struct sf_arena *a, const struct sf_stats *prev,
		      uint64_t end_step, uint64_t started_ns,
		      struct sf_stats *s)
{
	const struct sf_arena_header *h = a->hdr;
	const struct sf_geometry *g = &a->geo;
	const uint32_t K = g->slots_per_rank;
	uint64_t hist[SF_WAIT_BUCKETS] = {0};
	double dt;

	memset(s, 0, sizeof(*s));
	s->t_ns = sf__now_ns();
	s->uptime_ns = s->t_ns - started_ns;
	s->state = atomic_load_explicit(&h->job_state, memory_order_acquire);
	s->ranks = g->ranks;
	s->producers = g->max_producers;
	s->ended = g->ranks > 0;
	for (uint32_t r = 0; r < g->ranks; r++) {
		const struct sf_participant *cp = &a->participants[g->max_producers + r];
		struct sf_stats_rank one = {0};
		uint64_t next = sf__ring_next_step(a, r);
		int32_t pid;

		for (uint32_t i = 0; i < K; i++) {
			/* Relaxed: a statistics snapshot; no payload is read. */
			uint64_t w = atomic_load_explicit(&sf__arena_slot(a, r, i)->word,
							  memory_order_relaxed);

			switch (sf__slot_state(w)) {
			case SF_SLOT_FREE:
				one.free++;
				break;
			case SF_SLOT_FILLING:
				one.filling++;
				break;
			case SF_SLOT_READY:
				one.ready++;
				break;
			default:
				one.claimed++;
				break;
			}
		}
		/* A consumer releases the end marker's slot too, but it is no batch. */
		s->ended &= next > end_step;
		if (next > end_step)
			next = end_step;
		one.next_step = next;
		/* A negative pid is a hold without a role (a control seek in progress), no
		 * consumer: 0. */
		pid = atomic_load_explicit(&cp->pid, memory_order_relaxed);
		one.consumer_pid = pid > 0 ? (uint64_t)pid : 0;
		/* What the rank's consumers took, whatever seeks moved its ring: counted in
		 * its entry, which every consumer of the rank adds to. */
		s->batches += atomic_load_explicit(&cp->batches, memory_order_relaxed);
		/* Relaxed: a statistics snapshot, as the slot words above. */
		one.asleep =
			atomic_load_explicit(&a->rings[r].ready_waiters, memory_order_relaxed) != 0;
		one.wait_ns = atomic_load_explicit(&a->participants[g->max_producers + r].wait_ns,
						   memory_order_relaxed);
		for (unsigned b = 0; b < SF_WAIT_BUCKETS; b++) {
			one.wait_hist[b] = atomic_load_explicit(
				&a->telemetry[g->max_producers + r].wait_hist[b],
				memory_order_relaxed);
			hist[b] += one.wait_hist[b];
			/* Bucket b holds waits in [2^b, 2^(b+1)). */
			if (UINT64_C(1) << b >= SF_CONSUMER_STALL_NS)
				one.stalls += one.wait_hist[b];
		}
		if (r < SF_STATS_MAX_RANKS)
			s->rank[r] = one;
		s->least_step = r == 0 || next < s->least_step ? next : s->least_step;
	}
	s->tokens = s->batches * g->batch * (uint64_t)(g->seq_tokens - 1);
	for (uint32_t p = 0; p < g->max_producers; p++) {
		const struct sf_participant *pp = &a->participants[p];
		uint64_t batches = atomic_load_explicit(&pp->batches, memory_order_relaxed);

		s->produced += batches;
		s->skipped += atomic_load_explicit(&a->telemetry[p].skipped, memory_order_relaxed);
		s->tokens_produced +=
			atomic_load_explicit(&a->telemetry[p].tokens, memory_order_relaxed);
		s->tokens_encoded +=
			atomic_load_explicit(&a->telemetry[p].encoded, memory_order_relaxed);
		if (p < SF_STATS_MAX_PRODUCERS) {
			struct sf_stats_producer *sp = &s->producer[p];

			sp->pid = atomic_load_explicit(&pp->pid, memory_order_relaxed);
			sp->incarnation =
				atomic_load_explicit(&pp->incarnation, memory_order_relaxed);
			sp->batches = batches;
			sp->busy_ns = atomic_load_explicit(&pp->busy_ns, memory_order_relaxed);
		}
	}
	for (unsigned b = 0; b < SF_WAIT_BUCKETS; b++)
		s->wait_samples += hist[b];
	s->wait_p50_ns = percentile(hist, s->wait_samples, 50);
	s->wait_p99_ns = percentile(hist, s->wait_samples, 99);
	s->restarts = atomic_load_explicit(&h->producer_restarts, memory_order_relaxed);
	s->repairs = atomic_load_explicit(&h->repairs, memory_order_relaxed);
	s->slots_repaired = atomic_load_explicit(&h->slots_repaired, memory_order_relaxed);
	if (!prev || s->t_ns <= prev->t_ns)
		return;
	dt = (double)(s->t_ns - prev->t_ns) / 1e9;
	s->batches_per_s = (double)(s->batches - prev->batches) / dt;
	s->tokens_per_s = (double)(s->tokens - prev->tokens) / dt;
	for (uint32_t r = 0; r < g->ranks && r < SF_STATS_MAX_RANKS; r++) {
		struct sf_stats_rank *q = &s->rank[r];
		const struct sf_stats_rank *was = &prev->rank[r];
		uint64_t delta[SF_WAIT_BUCKETS];

		/* A consumer's counters only grow while the job runs. */
		q->waiting = q->wait_ns >= was->wait_ns
				     ? (double)(q->wait_ns - was->wait_ns) / 1e9 / dt
				     : 0.0;
		if (q->waiting > 1.0)
			q->waiting = 1.0;
		for (unsigned b = 0; b < SF_WAIT_BUCKETS; b++) {
			delta[b] = q->wait_hist[b] >= was->wait_hist[b]
					   ? q->wait_hist[b] - was->wait_hist[b]
					   : 0;
			q->interval_batches += delta[b];
		}
		if (q->asleep && was->asleep && !q->interval_batches)
			q->waiting = 1.0;
		q->interval_wait_p50_ns = percentile(delta, q->interval_batches, 50);
		q->interval_wait_p99_ns = percentile(delta, q->interval_batches, 99);
	}
	for (uint32_t p = 0; p < g->max_producers && p < SF_STATS_MAX_PRODUCERS; p++) {
		struct sf_stats_producer *sp = &s->producer[p];
		/* The busy counter goes on across a restart (the entry's, as its batches):
		 * taken whole after one, it gave the new producer all its predecessors' time
		 * in one interval (a review). */
		uint64_t busy = sp->busy_ns >= prev->producer[p].busy_ns
					? sp->busy_ns - prev->producer[p].busy_ns
					: 0;

		sp->utilization = (double)busy / 1e9 / dt;
		if (sp->utilization > 1.0)
			sp->utilization = 1.0;
	}
}

void sf__stats_interval_of(struct sf_stats *s, const struct sf_stats *last)
{
	s->batches_per_s = last->batches_per_s;
	s->tokens_per_s = last->tokens_per_s;
	for (uint32_t i = 0; i < SF_STATS_MAX_PRODUCERS; i++)
		s->producer[i].utilization = last->producer[i].utilization;
	for (uint32_t r = 0; r < SF_STATS_MAX_RANKS; r++) {
		s->rank[r].waiting = last->rank[r].waiting;
		s->rank[r].interval_batches = last->rank[r].interval_batches;
		s->rank[r].interval_wait_p50_ns = last->rank[r].interval_wait_p50_ns;
		s->rank[r].interval_wait_p99_ns = last->rank[r].interval_wait_p99_ns;
	}
}

static const char *state_name(uint32_t s)
{
	static const char *const names[] = {"init", "running", "paused", "stopping"};

	return s < 4 ? names[s] : "unknown";
}

int sf__stats_json(const struct sf_stats *s, const char *job, char *buf, size_t len)
{
	size_t n = 0;

#define OUT(...)                                                                                   \
	do {                                                                                       \
		int k_ = snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, __VA_ARGS__);  \
		if (k_ > 0)                                                                        \
			n += (size_t)k_;                                                           \
	} while (0)
	OUT("{\"v\":%u,\"ok\":true,\"job\":", SF_CTL_VERSION);
	sf__json_escape(buf, len, &n, job);
	OUT(",\"state\":\"%s\",\"uptime_s\":%.3f,\"batches\":%llu,\"tokens\":%llu,"
	    "\"produced\":%llu,\"batches_per_s\":%.3f,\"tokens_per_s\":%.1f,"
	    "\"wait_samples\":%llu,\"wait_p50_ns\":%llu,\"wait_p99_ns\":%llu,"
	    "\"restarts\":%llu,\"stalls\":%llu,\"repairs\":%llu,\"slots_repaired\":%llu,"
	    "\"skipped\":%llu,\"tokens_produced\":%llu,"
	    "\"tokens_encoded\":%llu,\"ranks\":[",
	    s->ended && s->state == SF_JOB_RUNNING ? "ended" : state_name(s->state),
	    (double)s->uptime_ns / 1e9, (unsigned long long)s->batches,
	    (unsigned long long)s->tokens, (unsigned long long)s->produced, s->batches_per_s,
	    s->tokens_per_s, (unsigned long long)s->wait_samples,
	    (unsigned long long)s->wait_p50_ns, (unsigned long long)s->wait_p99_ns,
	    (unsigned long long)s->restarts, (unsigned long long)s->stalls,
	    (unsigned long long)s->repairs, (unsigned long long)s->slots_repaired,
	    (unsigned long long)s->skipped,
	    (unsigned long long)s->tokens_produced, (unsigned long long)s->tokens_encoded);
	for (uint32_t r = 0; r < s->ranks && r < SF_STATS_MAX_RANKS; r++) {
		const struct sf_stats_rank *q = &s->rank[r];

		OUT("%s{\"rank\":%u,\"free\":%u,\"filling\":%u,\"ready\":%u,\"claimed\":%u,"
		    "\"next_step\":%llu,\"consumer_pid\":%lld,\"waiting\":%.3f,"
		    "\"interval_batches\":%llu,\"interval_wait_p50_ns\":%llu,"
		    "\"interval_wait_p99_ns\":%llu,\"stalls\":%llu}",
		    r ? "," : "", r, q->free, q->filling, q->ready, q->claimed,
		    (unsigned long long)q->next_step, (long long)(int64_t)q->consumer_pid,
		    q->waiting, (unsigned long long)q->interval_batches,
		    (unsigned long long)q->interval_wait_p50_ns,
		    (unsigned long long)q->interval_wait_p99_ns, (unsigned long long)q->stalls);
	}
	OUT("],\"producers\":[");
	for (uint32_t p = 0; p < s->producers && p < SF_STATS_MAX_PRODUCERS; p++) {
		const struct sf_stats_producer *q = &s->producer[p];

		OUT("%s{\"index\":%u,\"pid\":%d,\"incarnation\":%u,\"batches\":%llu,"
		    "\"utilization\":%.9f,\"state\":\"%s\",\"silent_ms\":%llu}",
		    p ? "," : "", p, q->pid, q->incarnation, (unsigned long long)q->batches,
		    q->utilization,
		    q->pid <= 0			     ? "down"
		    : s->state == SF_JOB_PAUSED ? "paused"
		    : q->stalled		     ? "stalled"
						     : "running",
		    (unsigned long long)(q->silent_ns / 1000000));
	}
	/* The arrays hold the first SF_STATS_MAX_RANKS and SF_STATS_MAX_PRODUCERS. */
	OUT("],\"ranks_total\":%u,\"producers_total\":%u", s->ranks, s->producers);
	if (s->n_sources) {
		OUT(",\"samples\":%llu,\"sources\":[", (unsigned long long)s->samples);
		for (uint32_t i = 0; i < s->n_sources && i < SF_STATS_MAX_SOURCES; i++) {
			OUT("%s{\"name\":", i ? "," : "");
			sf__json_escape(buf, len, &n, s->source[i].name);
			OUT(",\"delivered\":%llu,\"target\":%.3f}",
			    (unsigned long long)s->source[i].delivered, s->source[i].target);
		}
		OUT("],\"sources_total\":%u", s->sources_total);
	}
	OUT("}");
#undef OUT
	return n < len ? (int)n : -ENOSPC;
}

void sf__stats_human_rate(double v, char *buf, size_t len)
{
	if (v >= 1e9)
		snprintf(buf, len, "%.2f G", v / 1e9);
	else if (v >= 1e6)
		snprintf(buf, len, "%.2f M", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, len, "%.2f k", v / 1e3);
	else
		snprintf(buf, len, "%.1f ", v);
}

void sf__stats_human_below(uint64_t ns, char *buf, size_t len)
{
	char v[32];

	sf__stats_human_ns(ns, v, sizeof(v));
	snprintf(buf, len, "<%s", v);
}

void sf__stats_human_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns >= 1000000000ull)
		snprintf(buf, len, "%.2f s", (double)ns / 1e9);
	else if (ns >= 1000000ull)
		snprintf(buf, len, "%.2f ms", (double)ns / 1e6);
	else if (ns >= 1000ull)
		snprintf(buf, len, "%.1f us", (double)ns / 1e3);
	else
		snprintf(buf, len, "%llu ns", (unsigned long long)ns);
}
