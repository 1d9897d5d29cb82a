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
#include "producer/tokenizer/tokenizer.h"

/* How long one claim waits before the loop looks at the job state and heartbeats. */
#define CLAIM_SLICE_NS (200 * 1000 * 1000)

/*
 * This process's heartbeat word once it is registered, and the input worked through
 * since the word was last renewed. The heartbeat proves progress, not mere existence: it
 * is renewed by the loop below (at least every CLAIM_SLICE_NS while idle, so waiting for
 * a free slot is never mistaken for a stall) and, while a batch is being built, by the
 * sources as they go through their input (sf__producer_progress()), so a long
 * tokenization keeps it fresh while a stopped or hung producer lets it age.
 */
static _Atomic uint64_t *heartbeat_word;
static uint64_t heartbeat_pending;

static void heartbeat_at(uint64_t now)
{
	heartbeat_pending = 0;
	/* Relaxed: a single-writer statistic the supervisor samples; nothing is ordered
	 * by it. */
	if (heartbeat_word)
		atomic_store_explicit(heartbeat_word, now, memory_order_relaxed);
}

void sf__producer_progress(uint64_t bytes)
{
	heartbeat_pending += bytes;
	if (!bytes || heartbeat_pending >= SF_HEARTBEAT_BYTES)
		heartbeat_at(sf__now_ns());
}

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
	heartbeat_word = &me->heartbeat_ns;
	/* One long document is one tokenizer call: it reports its progress too. */
	sf__tok_progress = sf__producer_progress;
	for (;;) {
		struct sf_fill f;
		uint64_t t0 = sf__now_ns(), t1, first, out, enc;
		uint32_t len;

		/* While the job is PAUSED the claim hands out nothing and sleeps; it times out
		 * every CLAIM_SLICE_NS so the heartbeat below goes on. */
		r = sf__producer_claim(a, index, CLAIM_SLICE_NS, &f);
		t1 = sf__now_ns();
		sf__counter_add(&me->wait_ns, t1 - t0);
		heartbeat_at(t1);
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
		sf__producer_publish(a, index, &f, len, first);
		sf__builder_counters(b, &out, &enc);
		sf__counter_add(&me->batches, 1);
		sf__counter_add(&me->busy_ns, sf__now_ns() - t1);
		sf__counter_add(&tm->tokens, out - out_before);
		sf__counter_add(&tm->bytes, len);
		sf__counter_add(&tm->encoded, enc - enc_before);
		out_before = out;
		enc_before = enc;
	}
	heartbeat_word = NULL;
	sf__tok_progress = NULL;
	if (r == 0)
		sf__participant_unregister(a, index);
	sf__builder_free(b);
	return r;
}
