/*
 * Synthetic producers for launcher tests: the supervisor runs them exactly as it runs
 * the real ones, but a batch is a pure function of (global rank, step) computed without
 * any source, so tests of supervision, control and teardown do not depend on data.
 * Faults are injected through the environment:
 *   SHMFEED_TEST_CRASH_AT=N  producer 0, in its first incarnation, claims its Nth slot
 *                            and dies by SIGKILL while the slot is FILLING;
 *   SHMFEED_TEST_FAIL=1      every producer fails at once with a source error;
 *   SHMFEED_TEST_FAIL=io     every producer fails at once with a read error (-EIO);
 *   SHMFEED_TEST_SLOW_US=U   each batch takes U microseconds more to build;
 *   SHMFEED_TEST_CRASH_ONCE=PATH  producer 0, in its first incarnation, dies by SIGKILL
 *                            at its first claim after PATH exists (a test creates it).
 * With sampling.epochs = E, steps from 16*E on are end markers (length 0).
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/proc.h"
#include "common/slot.h"
#include "launcher/launcher.h"
#include "tests/launcher/fake_producers.h"

uint32_t sf__fake_token(uint32_t global_rank, uint64_t step, uint32_t j)
{
	uint64_t x = ((uint64_t)global_rank << 40) ^ (step << 12) ^ j;

	/* splitmix64: a cheap bijective mix, so neighbouring batches differ everywhere. */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)(x ^ (x >> 31)) & 0xffffu;
}

static int fake_open(const struct sf_config *cfg, void **ret_ds, struct sf_err *e)
{
	(void)e;
	*ret_ds = (void *)cfg;
	return 0;
}

static void fake_close(void *ds)
{
	(void)ds;
}

static int fake_geometry(const void *ds, const struct sf_config *cfg, struct sf_geometry *g,
			 struct sf_err *e)
{
	(void)ds;
	(void)e;
	memset(g, 0, sizeof(*g));
	g->ranks = cfg->local_ranks;
	g->slots_per_rank = cfg->slots_per_rank;
	g->max_producers = cfg->producers;
	g->batch = cfg->batch_size;
	g->seq_tokens = cfg->seq_len + 1;
	g->token_bytes = 4;
	g->world_size = cfg->world_size;
	g->rank_base = cfg->rank_base;
	/* 16 steps an epoch, as fake_main() ends the data. */
	g->samples_per_epoch = 16ull * cfg->batch_size * cfg->world_size;
	g->flags = cfg->checksum ? SF_ARENA_F_CHECKSUM : 0;
	g->config_digest = sf__config_digest(cfg);
	return 0;
}

static int fake_main(void *ds, struct sf_arena *a, uint32_t index, struct sf_err *e)
{
	const struct sf_config *cfg = ds;
	const struct sf_geometry *g = &a->hdr->geo;
	const char *crash = getenv("SHMFEED_TEST_CRASH_AT");
	const char *slow = getenv("SHMFEED_TEST_SLOW_US");
	const char *crash_once = getenv("SHMFEED_TEST_CRASH_ONCE");
	struct sf_participant *me = &a->participants[index];
	uint64_t crash_at = crash ? strtoull(crash, NULL, 10) : 0, claims = 0;
	unsigned slow_us = slow ? (unsigned)strtoul(slow, NULL, 10) : 0;
	int inc;

	if (getenv("SHMFEED_TEST_FAIL") && !strcmp(getenv("SHMFEED_TEST_FAIL"), "io"))
		return sf__err(e, -EIO, "bad.bin: cannot read (test fault)");
	if (getenv("SHMFEED_TEST_FAIL"))
		return sf__err(e, SF_E_SOURCE, "bad.bin: byte 0: not a token file (test fault)");
	inc = sf__participant_register(a, index, SF_ROLE_PRODUCER, (int32_t)index, e);
	if (inc < 0)
		return inc;
	for (;;) {
		uint64_t t0, n = (uint64_t)g->batch * g->seq_tokens;
		uint32_t gr, len;
		struct sf_fill f;
		/* Claims in slices and heartbeats after each, as the real producers do, so
		 * that the supervisor tells an idle producer from a stalled one. */
		int r = sf__producer_claim(a, index, 200 * 1000 * 1000, &f);

		atomic_store_explicit(&me->heartbeat_ns, sf__now_ns(), memory_order_relaxed);
		if (r == SF_E_TIMEOUT)
			continue;
		if (r == SF_E_STOPPED)
			break;
		if (r < 0)
			return sf__err(e, r, "claim: %s", sf_strerror(r));
		claims++;
		if (index == 0 && inc == 1 && crash_at && claims == crash_at)
			raise(SIGKILL);
		if (index == 0 && inc == 1 && crash_once && access(crash_once, F_OK) == 0)
			raise(SIGKILL);
		t0 = sf__now_ns();
		gr = f.global_rank;
		if (cfg->epochs && f.step >= 16 * cfg->epochs) {
			len = 0;
		} else {
			uint32_t *tok = (uint32_t *)f.payload;

			for (uint64_t j = 0; j < n; j++)
				tok[j] = sf__fake_token(gr, f.step, (uint32_t)j);
			len = (uint32_t)(n * 4);
		}
		if (slow_us)
			usleep(slow_us);
		/* An end marker carries the job's samples, as the real producers' do. */
		sf__producer_publish(a, index, &f, len,
				     len ? f.step * g->batch * g->world_size +
						     (uint64_t)gr * g->batch
					 : 16ull * cfg->epochs * g->batch * g->world_size);
		atomic_fetch_add_explicit(&me->batches, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&me->busy_ns, sf__now_ns() - t0, memory_order_relaxed);
		atomic_fetch_add_explicit(&a->telemetry[index].tokens, n, memory_order_relaxed);
	}
	sf__participant_unregister(a, index);
	return 0;
}

const struct sf_producer_ops sf__fake_producers = {
	.open = fake_open,
	.close = fake_close,
	.geometry = fake_geometry,
	.main = fake_main,
};
