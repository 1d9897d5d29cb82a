/*
 * `shmfeed inspect JOB [--json]`: print an arena's header, geometry, participants and
 * the state of every slot. It only reads; it registers as no participant.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/arena.h"
#include "common/log.h"
#include "common/node_ranks.h"
#include "common/slot.h"

static const char *const state_names[] = {"FREE", "FILLING", "READY", "CLAIMED"};
static const char *const job_state_names[] = {"init", "running", "paused", "stopping"};
static const char *const role_names[] = {"none", "producer", "consumer"};

static const char *job_state_name(uint32_t s)
{
	return s < 4 ? job_state_names[s] : "unknown";
}

/*
 * The geometry, stride and sizes printed, and those the loops over participants and slots
 * go by, are the attach's checked copies (struct sf_arena): the shared header's can be
 * rewritten while this runs, and a slot count read from it made the loops run past the
 * mapping (SIGBUS).
 */
static void print_text(struct sf_arena *a)
{
	const struct sf_arena_header *h = a->hdr;
	const struct sf_geometry *g = &a->geo;
	uint32_t nparts = g->max_producers + g->ranks;
	char ranks[64];

	sf__node_ranks_describe(a, ranks, sizeof(ranks));
	printf("job %s\n", h->job);
	printf("  layout version %u, %llu bytes, created by uid %u pid %d (%s)\n",
	       h->layout_version, (unsigned long long)h->total_size, h->creator_uid, h->creator_pid,
	       sf__arena_creator_alive(a) ? "alive" : "dead: stale");
	printf("  state %s, config digest %016llx\n",
	       job_state_name(atomic_load_explicit(&h->job_state, memory_order_acquire)),
	       (unsigned long long)g->config_digest);
	printf("  geometry: %u ranks x %u slots, B=%u T+1=%u, %u-byte tokens, world %u, node "
	       "ranks %s (generation %u), %llu samples an epoch\n",
	       g->ranks, g->slots_per_rank, g->batch, g->seq_tokens, g->token_bytes, g->world_size,
	       ranks,
	       sf__node_ranks_generation(
		       atomic_load_explicit(&h->node_ranks, memory_order_acquire)),
	       (unsigned long long)g->samples_per_epoch);
	printf("  payload %llu bytes, stride %llu, flags%s%s%s%s%s",
	       (unsigned long long)a->payload_bytes, (unsigned long long)a->payload_stride,
	       g->flags & SF_ARENA_F_HUGEPAGES ? " hugepages" : "",
	       g->flags & SF_ARENA_F_CHECKSUM ? " checksum" : "",
	       g->flags & SF_ARENA_F_DOC_STARTS ? " doc-starts" : "",
	       g->flags & SF_ARENA_F_SOURCES ? " sources" : "",
	       g->flags & SF_ARENA_F_RANK_AUTO ? " rank-base-auto" : "");
	if ((g->flags & SF_ARENA_F_CHECKSUM) && a->verify_every > 1)
		printf(" (verified every %u steps)", a->verify_every);
	printf("\n");
	printf("  repairs %llu (%llu slots), producer restarts %llu\n",
	       (unsigned long long)atomic_load_explicit(&h->repairs, memory_order_relaxed),
	       (unsigned long long)atomic_load_explicit(&h->slots_repaired, memory_order_relaxed),
	       (unsigned long long)atomic_load_explicit(&h->producer_restarts,
							memory_order_relaxed));
	printf("participants\n");
	for (uint32_t i = 0; i < nparts; i++) {
		const struct sf_participant *p = &a->participants[i];
		int32_t pid = atomic_load_explicit(&p->pid, memory_order_acquire);
		char who[40];

		if (pid == 0)
			continue;
		/* A producer's number is its index, not a rank: it fills every rank. */
		snprintf(who, sizeof(who), "%s%s %d", p->role < 3 ? role_names[p->role] : "?",
			 p->role == SF_ROLE_PRODUCER ? "" : " rank", p->rank);
		printf("  %3u %-17s pid %-7d %s incarnation %u batches %llu\n", i, who, pid,
		       pid > 0 && sf__participant_alive(a, i) ? "alive" : "dead ",
		       atomic_load_explicit(&p->incarnation, memory_order_relaxed),
		       (unsigned long long)atomic_load_explicit(&p->batches, memory_order_relaxed));
	}
	printf("slots\n");
	for (uint32_t r = 0; r < g->ranks; r++) {
		printf("  rank %u (next step %llu):", r,
		       (unsigned long long)sf__ring_next_step(a, r));
		for (uint32_t i = 0; i < g->slots_per_rank; i++) {
			uint64_t w = atomic_load_explicit(&sf__arena_slot(a, r, i)->word,
							  memory_order_acquire);

			printf(" %llu:%s",
			       (unsigned long long)(sf__slot_lap(w) * g->slots_per_rank + i),
			       state_names[sf__slot_state(w)]);
			if (sf__slot_state(w) == SF_SLOT_FILLING ||
			    sf__slot_state(w) == SF_SLOT_CLAIMED)
				printf("(%u)", sf__slot_owner(w));
		}
		printf("\n");
	}
}

static void print_json(struct sf_arena *a)
{
	const struct sf_arena_header *h = a->hdr;
	const struct sf_geometry *g = &a->geo;
	uint32_t nparts = g->max_producers + g->ranks;
	const char *sep = "";

	printf("{\"job\":\"%s\",\"layout_version\":%u,\"total_size\":%llu,", h->job,
	       h->layout_version, (unsigned long long)h->total_size);
	printf("\"creator\":{\"uid\":%u,\"pid\":%d,\"alive\":%s},", h->creator_uid, h->creator_pid,
	       sf__arena_creator_alive(a) ? "true" : "false");
	printf("\"state\":\"%s\",\"config_digest\":\"%016llx\",",
	       job_state_name(atomic_load_explicit(&h->job_state, memory_order_acquire)),
	       (unsigned long long)g->config_digest);
	printf("\"geometry\":{\"ranks\":%u,\"slots_per_rank\":%u,\"max_producers\":%u,"
	       "\"batch\":%u,\"seq_tokens\":%u,\"token_bytes\":%u,\"doc_starts_per_seq\":%u,"
	       "\"world_size\":%u,\"rank_base\":%u,\"flags\":%u,\"samples_per_epoch\":%llu},",
	       g->ranks, g->slots_per_rank, g->max_producers, g->batch, g->seq_tokens,
	       g->token_bytes, g->doc_starts_per_seq, g->world_size, g->rank_base, g->flags,
	       (unsigned long long)g->samples_per_epoch);
	{
		uint64_t w = atomic_load_explicit(&h->node_ranks, memory_order_acquire);
		uint32_t base = 0;
		int known = sf__node_ranks_decode(w, g, &base);

		/* The base while known, else null; the generation counts the bases set. */
		printf("\"node_ranks\":{\"auto\":%s,\"generation\":%u,\"base\":",
		       g->flags & SF_ARENA_F_RANK_AUTO ? "true" : "false",
		       sf__node_ranks_generation(w));
		if (known > 0)
			printf("%u},", base);
		else
			printf("null},");
	}
	printf("\"payload_bytes\":%llu,\"payload_stride\":%llu,\"repairs\":%llu,"
	       "\"slots_repaired\":%llu,",
	       (unsigned long long)a->payload_bytes, (unsigned long long)a->payload_stride,
	       (unsigned long long)atomic_load_explicit(&h->repairs, memory_order_relaxed),
	       (unsigned long long)atomic_load_explicit(&h->slots_repaired, memory_order_relaxed));
	printf("\"participants\":[");
	for (uint32_t i = 0; i < nparts; i++) {
		const struct sf_participant *p = &a->participants[i];
		int32_t pid = atomic_load_explicit(&p->pid, memory_order_acquire);

		if (pid == 0)
			continue;
		printf("%s{\"index\":%u,\"role\":\"%s\",\"rank\":%d,\"pid\":%d,\"alive\":%s,"
		       "\"incarnation\":%u,\"batches\":%llu}",
		       sep, i, p->role < 3 ? role_names[p->role] : "?", p->rank, pid,
		       pid > 0 && sf__participant_alive(a, i) ? "true" : "false",
		       atomic_load_explicit(&p->incarnation, memory_order_relaxed),
		       (unsigned long long)atomic_load_explicit(&p->batches, memory_order_relaxed));
		sep = ",";
	}
	printf("],\"rings\":[");
	for (uint32_t r = 0; r < g->ranks; r++) {
		printf("%s{\"rank\":%u,\"next_step\":%llu,\"slots\":[", r ? "," : "", r,
		       (unsigned long long)sf__ring_next_step(a, r));
		for (uint32_t i = 0; i < g->slots_per_rank; i++) {
			uint64_t w = atomic_load_explicit(&sf__arena_slot(a, r, i)->word,
							  memory_order_acquire);

			printf("%s{\"step\":%llu,\"state\":\"%s\",\"owner\":%u}", i ? "," : "",
			       (unsigned long long)(sf__slot_lap(w) * g->slots_per_rank + i),
			       state_names[sf__slot_state(w)], sf__slot_owner(w));
		}
		printf("]}");
	}
	printf("]}\n");
}

int sf__cmd_inspect(int argc, char **argv)
{
	const char *job;
	struct sf_err e = {0};
	struct sf_arena *a;
	int json, r;

	if (sf__cli_job_args(argc, argv, &job, &json) < 0 || !job) {
		fprintf(stderr, "usage: shmfeed inspect JOB [--json]\n");
		return 2;
	}
	r = sf__arena_attach(job, NULL, &a, &e);
	if (r < 0) {
		sf__log_error("inspect: %s", e.msg[0] ? e.msg : sf_strerror(r));
		return 1;
	}
	if (json)
		print_json(a);
	else
		print_text(a);
	sf__arena_detach(a);
	return 0;
}
