/*
 * feed_fixture: serve a job with the deterministic test feed (tests/unit/consumer/feed.h)
 * until SIGTERM, for the Python tests and benchmarks. It creates the arena, forks the
 * producers, prints "ready JOB DIGEST" on stdout once batches can be consumed, and on
 * SIGTERM (or after --lifetime seconds, so that a crashed test leaves nothing behind)
 * stops the producers and unlinks the arena.
 *
 * With --abi it prints instead the constants of the public header that the ctypes
 * binding copies, as JSON, for the test that compares them.
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

/* The constants _native.py copies by hand, as JSON. */
static void print_abi(void)
{
#define C(name) printf("\"" #name "\": %lld,\n", (long long)(name))
	printf("{");
	C(SF_DTYPE_U16);
	C(SF_DTYPE_I32);
	C(SF_DTYPE_I64);
	C(SF_OUTPUT_TARGETS);
	C(SF_ATTACH_CPU);
	C(SF_ATTACH_EXPLICIT_RELEASE);
	C(SF_GPU_BUFFERS_MAX);
#undef C
	printf("\"SF_DEVICE_NONE\": %lld}\n", (long long)SF_DEVICE_NONE);
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
