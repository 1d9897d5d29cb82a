/*
 * feed_fixture: serve a job with the deterministic test feed (tests/unit/consumer/feed.h)
 * until SIGTERM, for the Python tests and benchmarks. It creates the arena, forks the
 * producers, prints "ready JOB DIGEST" on stdout once batches can be consumed, and on
 * SIGTERM (or after --lifetime seconds, so that a crashed test leaves nothing behind)
 * stops the producers and unlinks the arena.
 *
 * With --abi it prints instead the sizes and offsets of the public structs as JSON, for
 * the test that compares them with the ctypes mirror.
 */
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/log.h"
#include "tests/unit/consumer/feed.h"

#define FIELD(s, f)	 "\"" #s "." #f "\": [%zu, %zu]"
#define FIELD_ARGS(s, f) offsetof(struct s, f), sizeof(((struct s *)0)->f)

static void print_abi(void)
{
	printf("{\"sf_batch\": %zu, \"sf_resume\": %zu, \"sf_consumer_stats\": %zu, "
	       "\"sf_consumer_window\": %zu, \"sf_consumer_info\": %zu, \"sf_rank_env\": %zu,\n",
	       sizeof(struct sf_batch), sizeof(struct sf_resume), sizeof(struct sf_consumer_stats),
	       sizeof(struct sf_consumer_window), sizeof(struct sf_consumer_info),
	       sizeof(struct sf_rank_env));
#define P(s, f) printf(FIELD(s, f) ",\n", FIELD_ARGS(s, f))
	P(sf_batch, step);
	P(sf_batch, first_sample);
	P(sf_batch, batch);
	P(sf_batch, seq_tokens);
	P(sf_batch, dtype);
	P(sf_batch, doc_starts_per_seq);
	P(sf_batch, tokens);
	P(sf_batch, device_ptr);
	P(sf_batch, doc_starts);
	P(sf_batch, digest);
	P(sf_batch, wait_ns);
	P(sf_batch, buffer);
	P(sf_batch, output);
	P(sf_batch, provenance);
	P(sf_batch, epoch);
	P(sf_batch, sources);
	P(sf_rank_env, rank);
	P(sf_rank_env, local_rank);
	P(sf_rank_env, world_size);
	P(sf_rank_env, local_world_size);
	P(sf_rank_env, group_rank);
	P(sf_resume, samples);
	P(sf_resume, epoch);
	P(sf_resume, config_digest);
	P(sf_resume, provenance);
	P(sf_consumer_stats, batches);
	P(sf_consumer_stats, tokens);
	P(sf_consumer_stats, wait_ns_total);
	P(sf_consumer_stats, wait_ns_p50);
	P(sf_consumer_stats, wait_ns_p99);
	P(sf_consumer_stats, provenance);
	P(sf_consumer_stats, next_step);
	P(sf_consumer_stats, gpu);
	P(sf_consumer_stats, gpu_staged);
	P(sf_consumer_stats, staged_copies);
	P(sf_consumer_window, batches);
	P(sf_consumer_window, tokens);
	P(sf_consumer_window, wait_ns_total);
	P(sf_consumer_window, wait_ns_p50);
	P(sf_consumer_window, wait_ns_p99);
	P(sf_consumer_window, stalls);
	P(sf_consumer_info, local_rank);
	P(sf_consumer_info, global_rank);
	P(sf_consumer_info, world_size);
	P(sf_consumer_info, ranks);
	P(sf_consumer_info, rank_base);
	P(sf_consumer_info, slots_per_rank);
	P(sf_consumer_info, batch);
	P(sf_consumer_info, seq_tokens);
	P(sf_consumer_info, dtype);
	P(sf_consumer_info, doc_starts_per_seq);
	P(sf_consumer_info, device);
	P(sf_consumer_info, gpu_buffers);
	P(sf_consumer_info, payload_stride);
	P(sf_consumer_info, ring_base);
	P(sf_consumer_info, device_buffer);
	P(sf_consumer_info, doc_starts_buffer);
	P(sf_consumer_info, config_digest);
#undef P
	/* The constants _native.py copies by hand. */
#define C(name) printf("\"const." #name "\": %lld,\n", (long long)(name))
	C(SF_DTYPE_U16);
	C(SF_DTYPE_I32);
	C(SF_DTYPE_I64);
	C(SF_OUTPUT_TARGETS);
	C(SF_ATTACH_CPU);
	C(SF_ATTACH_EXPLICIT_RELEASE);
	C(SF_GPU_BUFFERS_MAX);
	C(SF_DEVICE_NONE);
#undef C
	printf(FIELD(sf_consumer_info, sources_offset) "}\n",
	       FIELD_ARGS(sf_consumer_info, sources_offset));
}

static void usage(void)
{
	fprintf(stderr,
		"usage: feed_fixture --job NAME [--ranks R] [--world-size W] [--rank-base N|auto]\n"
		"       [--batch B] [--seq-len T] [--slots K] [--producers P] [--dtype u16|i32]\n"
		"       [--doc-starts D] [--vocab V] [--seed S] [--steps N] [--tokens FILE]\n"
		"       [--samples-per-epoch N] [--no-checksum] [--verify-every N]\n"
		"       [--lifetime SECONDS]\n"
		"       feed_fixture --abi\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {{"job", required_argument, 0, 'j'},
						 {"ranks", required_argument, 0, 'r'},
						 {"world-size", required_argument, 0, 'w'},
						 {"rank-base", required_argument, 0, 'b'},
						 {"batch", required_argument, 0, 'B'},
						 {"seq-len", required_argument, 0, 'T'},
						 {"slots", required_argument, 0, 'K'},
						 {"producers", required_argument, 0, 'P'},
						 {"dtype", required_argument, 0, 'd'},
						 {"doc-starts", required_argument, 0, 'D'},
						 {"vocab", required_argument, 0, 'v'},
						 {"seed", required_argument, 0, 's'},
						 {"steps", required_argument, 0, 'n'},
						 {"tokens", required_argument, 0, 'f'},
						 {"samples-per-epoch", required_argument, 0, 'E'},
						 {"no-checksum", no_argument, 0, 'c'},
						 {"verify-every", required_argument, 0, 'V'},
						 {"lifetime", required_argument, 0, 'l'},
						 {"abi", no_argument, 0, 'a'},
						 {0, 0, 0, 0}};
	struct feed_options o = {.ranks = 1,
				 .batch = 4,
				 .seq_len = 64,
				 .slots_per_rank = 4,
				 .producers = 2,
				 .token_bytes = 2,
				 .checksum = 1,
				 .seed = 1337};
	unsigned lifetime = 300;
	struct sf_err e = {0};
	struct feed *f;
	sigset_t set;
	int opt, sig;

	sf__log_set_who("feed_fixture");
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			o.job = optarg;
			break;
		case 'r':
			o.ranks = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'w':
			o.world_size = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			o.rank_auto = !strcmp(optarg, "auto");
			o.rank_base = o.rank_auto ? 0 : (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'B':
			o.batch = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'T':
			o.seq_len = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'K':
			o.slots_per_rank = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'P':
			o.producers = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'd':
			o.token_bytes = strcmp(optarg, "i32") ? 2 : 4;
			break;
		case 'D':
			o.doc_starts_per_seq = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'v':
			o.vocab = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 's':
			o.seed = strtoull(optarg, NULL, 0);
			break;
		case 'n':
			o.steps = strtoull(optarg, NULL, 0);
			break;
		case 'f':
			o.token_file = optarg;
			break;
		case 'E':
			o.samples_per_epoch = strtoull(optarg, NULL, 0);
			break;
		case 'c':
			o.checksum = 0;
			break;
		case 'V':
			o.verify_every = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'l':
			lifetime = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'a':
			print_abi();
			return 0;
		default:
			usage();
			return 2;
		}
	}
	if (!o.job) {
		usage();
		return 2;
	}
	/* Block the signals before forking: the producers inherit the mask, and the parent
	 * takes them with sigwait(). */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGALRM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (feed_start(&o, &f, &e) < 0) {
		sf__log_error("cannot start job '%s': %s", o.job, e.msg);
		return 1;
	}
	printf("ready %s %016llx\n", o.job, (unsigned long long)f->geo.config_digest);
	fflush(stdout);
	alarm(lifetime);
	sigwait(&set, &sig);
	if (sig == SIGALRM)
		sf__log_error("job '%s': lifetime of %u s over, stopping", o.job, lifetime);
	feed_stop(f);
	return 0;
}
