/*
 * A training rank for launcher tests, in C: attach to $SHMFEED_JOB as local rank
 * $LOCAL_RANK (CPU views; $RANK, $WORLD_SIZE, $LOCAL_WORLD_SIZE and $GROUP_RANK too, where
 * set), take `--steps N` batches (or until the data ends), and write
 * one line per batch, "GLOBAL_RANK STEP FIRST_SAMPLE DIGEST", to `--out FILE`. With
 * `--fake`, also check every token against the synthetic producers' formula. Options
 * `--sleep-us U` (per batch) and `--exit-after N` (die with status 3 after N batches)
 * shape the run; `--seek S` starts the rank at step S (sf_consumer_seek()), as a resume.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "tests/launcher/fake_producers.h"

/* Environment variable `name` as a number, -1 when unset. */
static int64_t env_int(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? strtoll(v, NULL, 10) : -1;
}

int main(int argc, char **argv)
{
	const char *job = getenv("SHMFEED_JOB"), *out_path = NULL;
	const char *lr = getenv("LOCAL_RANK");
	uint64_t steps = 16, exit_after = 0, seek = UINT64_MAX;
	unsigned sleep_us = 0;
	int check = 0, rank = lr ? atoi(lr) : 0, r;
	struct sf_consumer_info info;
	struct sf_consumer *c;
	char err[512];
	FILE *out = stdout;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out_path = argv[++i];
		else if (!strcmp(argv[i], "--fake"))
			check = 1;
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc)
			sleep_us = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--exit-after") && i + 1 < argc)
			exit_after = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seek") && i + 1 < argc)
			seek = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "consume: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (!job) {
		fprintf(stderr, "consume: SHMFEED_JOB is not set\n");
		return 2;
	}
	{
		/* torchrun's variables, where set: the node's global ranks of a job of
		 * `rank_base: auto` come from them. */
		struct sf_rank_env env = {
			.rank = env_int("RANK"),
			.local_rank = rank,
			.world_size = env_int("WORLD_SIZE"),
			.local_world_size = env_int("LOCAL_WORLD_SIZE"),
			.group_rank = env_int("GROUP_RANK"),
		};

		r = sf_consumer_attach_ranks(job, &env, -1, SF_ATTACH_CPU, &c, err, sizeof(err));
	}
	if (r < 0) {
		fprintf(stderr, "consume: rank %d: attach: %s\n", rank, err);
		return 1;
	}
	sf_consumer_info(c, &info);
	if (seek != UINT64_MAX) {
		struct sf_resume st;

		sf_consumer_state(c, &st);
		st.samples = seek * info.batch * info.world_size;
		if (sf_consumer_seek(c, &st) < 0) {
			fprintf(stderr, "consume: rank %d: seek: %s\n", rank, sf_consumer_errmsg(c));
			return 1;
		}
	}
	if (out_path && !(out = fopen(out_path, "w"))) {
		perror(out_path);
		return 1;
	}
	for (uint64_t s = 0; s < steps; s++) {
		struct sf_batch b;
		uint32_t gr;

		r = sf_consumer_next(c, 30000, &b);
		if (r == SF_E_END)
			break;
		if (r < 0) {
			fprintf(stderr, "consume: rank %d step %llu: %s\n", rank,
				(unsigned long long)s, sf_consumer_errmsg(c));
			return 1;
		}
		/* first_sample = step*B*W + global_rank*B (Megatron's rule). */
		gr = (uint32_t)(b.first_sample / b.batch - b.step * info.world_size);
		if (check) {
			const uint32_t *t = b.tokens;
			uint64_t n = (uint64_t)b.batch * b.seq_tokens;

			if (gr != info.rank_base + (uint32_t)rank) {
				fprintf(stderr, "consume: rank %d step %llu: global rank %u\n",
					rank, (unsigned long long)b.step, gr);
				return 1;
			}
			for (uint64_t j = 0; j < n; j++)
				if (t[j] != sf__fake_token(gr, b.step, (uint32_t)j)) {
					fprintf(stderr,
						"consume: rank %d step %llu token %llu wrong\n",
						rank, (unsigned long long)b.step,
						(unsigned long long)j);
					return 1;
				}
		}
		fprintf(out, "%u %llu %llu %016llx\n", gr, (unsigned long long)b.step,
			(unsigned long long)b.first_sample, (unsigned long long)b.digest);
		fflush(out);
		if (sleep_us)
			usleep(sleep_us);
		if (exit_after && s + 1 == exit_after)
			_exit(3);
	}
	sf_consumer_detach(c);
	if (out != stdout)
		fclose(out);
	return 0;
}
