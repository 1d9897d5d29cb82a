/*
 * The producer process: claim the lowest free (rank, step), build its batch straight
 * into the slot's payload, publish, repeat. All memory it needs is allocated before the
 * first claim (sf__builder_create()), so the loop itself allocates nothing. The process
 * keeps no state between batches that the batches depend on: whichever producer claims a
 * slot, a crashed one's included, writes the same bytes. While the job is PAUSED (the
 * launcher's `pause` request) a producer finishes the batch it holds and claims nothing
 * more: sf__producer_claim() sleeps until the job runs again or stops.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/proc.h"
#include "common/slot.h"
#include "producer/dataset_impl.h"
#include "producer/producer.h"
#include "producer/sigbus.h"
#include "producer/tokenizer/tokenizer.h"

/* How long one claim waits before the loop looks at the job state and heartbeats. */
#define CLAIM_SLICE_NS (200 * 1000 * 1000)

/* How often a producer checks that no source file changed (sf__dataset_check_files()). */
#define FILE_CHECK_NS (2ull * 1000 * 1000 * 1000)

struct fill_call {
	struct sf_builder *b;
	uint32_t rank;
	uint64_t step;
	void *payload;
	uint32_t *ret_len;
	uint64_t *ret_first_sample;
	struct sf_err *e;
};

static int fill(void *arg)
{
	struct fill_call *f = arg;

	return sf__builder_fill(f->b, f->rank, f->step, f->payload, f->ret_len, f->ret_first_sample,
				f->e);
}

/*
 * Sources are mapped, so a file truncated under the job makes the next read of its lost
 * pages raise SIGBUS: the batch's build returns, and the file and offset are reported; a
 * data error stops the job instead of a crash being retried. The jump leaves the
 * builder's scratch and any shared entry it was filling as they were: the producer exits
 * right after, and an entry whose filler died is taken over by the others
 * (producer/chunk_share.h).
 */
int sf__producer_fill(const struct sf_dataset *ds, struct sf_builder *b, uint32_t rank,
		      uint64_t step, void *payload, uint32_t *ret_len, uint64_t *ret_first_sample,
		      struct sf_err *e)
{
	struct fill_call f = {b, rank, step, payload, ret_len, ret_first_sample, e};
	void *fault;
	int r = sf__sigbus_call(fill, &f, &fault, e);

	return fault ? sf__dataset_fault(ds, fault, e) : r;
}

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
	uint64_t out_before = 0, enc_before = 0, batch_bytes = sf__dataset_payload_bytes(ds);
	int r;

	/* A batch writes batch_bytes into its slot: never past the slot. */
	if (batch_bytes > a->hdr->payload_bytes)
		return sf__err(e, SF_E_LAYOUT,
			       "producer %u: a batch of %llu bytes does not fit the arena's slots "
			       "of %llu payload bytes",
			       index, (unsigned long long)batch_bytes,
			       (unsigned long long)a->hdr->payload_bytes);
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
	/* Records skipped by policy are the dataset's, counted once when its index was built
	 * or loaded; producer 0 reports them, so the sum over producers counts each once.
	 * Relaxed: a statistic, as the counters below. */
	if (index == 0)
		atomic_store_explicit(&tm->skipped, ds->stats.skipped, memory_order_relaxed);
	heartbeat_word = &me->heartbeat_ns;
	/* One long document is one tokenizer call: it reports its progress too. */
	sf__tok_progress = sf__producer_progress;
	for (uint64_t checked = 0;;) {
		struct sf_fill f;
		uint64_t t0 = sf__now_ns(), t1, first, out, enc;
		uint32_t len;

		/* Before a claim, so that a change stops this producer holding no slot. */
		if (t0 - checked >= FILE_CHECK_NS) {
			r = sf__dataset_check_files(ds, e);
			if (r < 0)
				break;
			checked = t0;
		}

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
		r = sf__producer_fill(ds, b, f.global_rank, f.step, f.payload, &len, &first, e);
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
				index, f.global_rank, (unsigned long long)f.step);
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
	heartbeat_word = NULL;
	sf__tok_progress = NULL;
	if (r == 0 && sf__participant_unregister(a, index) < 0)
		r = sf__err(e, SF_E_STATE, "producer %u: its participant entry was taken from it",
			    index);
	sf__builder_free(b);
	return r;
}
