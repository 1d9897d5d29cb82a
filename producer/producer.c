/*
 * The producer process: claim the lowest free (rank, step), build its batch straight
 * into the slot's payload, publish, repeat. All memory it needs is allocated before the
 * first claim (sf__builder_create()), so the loop itself allocates nothing. The process
 * keeps no state between batches that the batches depend on: whichever producer claims a
 * slot, a crashed one's included, writes the same bytes. While the job is PAUSED (the
 * launcher's `pause` request) a producer finishes the batch it holds and claims nothing
 * more: sf__producer_claim() sleeps until the job runs again or stops.
 */
#include <stdatomic.h>

#include "shmfeed/shmfeed.h"
#include "common/proc.h"
#include "common/slot.h"
#include "producer/producer.h"

/* How long one claim waits before the loop looks at the job state and heartbeats. */
#define CLAIM_SLICE_NS (200 * 1000 * 1000)

int sf__producer_main(struct sf_dataset *ds, struct sf_arena *a, uint32_t index, struct sf_err *e)
{
	struct sf_participant *me;
	struct sf_telemetry *tm;
	struct sf_builder *b = NULL;
	uint64_t out_before = 0, enc_before = 0;
	uint32_t rank_base = a->hdr->geo.rank_base;
	int r;

	r = sf__builder_create(ds, &b, e);
	if (r < 0)
		return r;
	r = sf__participant_register(a, index, SF_ROLE_PRODUCER, (int32_t)index, e);
	if (r < 0) {
		sf__builder_free(b);
		return r;
	}
	me = &a->participants[index];
	tm = &a->telemetry[index];
	for (;;) {
		struct sf_fill f;
		uint64_t t0 = sf__now_ns(), t1, first, out, enc;
		uint32_t len;

		/* While the job is PAUSED the claim hands out nothing and sleeps; it times out
		 * every CLAIM_SLICE_NS so the heartbeat below goes on. */
		r = sf__producer_claim(a, index, CLAIM_SLICE_NS, &f);
		t1 = sf__now_ns();
		/* Relaxed: counters and heartbeat are single-writer statistics that readers
		 * sample; nothing is ordered by them. */
		sf__counter_add(&me->wait_ns, t1 - t0);
		atomic_store_explicit(&me->heartbeat_ns, t1, memory_order_relaxed);
		if (r == SF_E_TIMEOUT)
			continue;
		if (r == SF_E_STOPPED) {
			r = 0;
			break;
		}
		if (r < 0) {
			sf__err(e, r, "producer %u: claim failed: %s", index, sf_strerror(r));
			break;
		}
		r = sf__builder_fill(b, rank_base + f.rank, f.step, f.payload, &len, &first, e);
		if (r < 0) {
			/* The slot stays FILLING under this participant; the supervisor repairs
			 * it once this process has exited, and another producer rebuilds it. */
			break;
		}
		r = sf__producer_publish(a, index, &f, len, first);
		if (r < 0) {
			sf__err(e, r,
				"producer %u: rank %u step %llu was taken from this producer "
				"while it filled it; nothing was published",
				index, rank_base + f.rank, (unsigned long long)f.step);
			break;
		}
		sf__builder_counters(b, &out, &enc);
		sf__counter_add(&me->batches, 1);
		sf__counter_add(&me->busy_ns, sf__now_ns() - t1);
		sf__counter_add(&tm->tokens, out - out_before);
		sf__counter_add(&tm->bytes, len);
		sf__counter_add(&tm->encoded, enc - enc_before);
		out_before = out;
		enc_before = enc;
	}
	if (r == 0 && sf__participant_unregister(a, index) < 0)
		r = sf__err(e, SF_E_STATE, "producer %u: its participant entry was taken from it",
			    index);
	sf__builder_free(b);
	return r;
}
