/*
 * The test feed (tests/unit/consumer/feed.h) as the C consumer benchmarks drive it: the
 * command-line options of its geometry that they all take, and its start under a job
 * named for the process. Header-only, included by each benchmark program that uses both.
 */
#ifndef SF_BENCH_FEED_H
#define SF_BENCH_FEED_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/consumer/feed.h"

/*
 * bench_feed_arg - when argv[*i] is one of --tokens FILE, --producers P, --batch B,
 * --seq-len T or --slots K and its value follows, store the value in `o`, move *i onto
 * it and return 1; otherwise return 0 and leave both alone.
 */
static int bench_feed_arg(struct feed_options *o, int argc, char **argv, int *i)
{
	const char *name = argv[*i];
	uint32_t *field;

	if (*i + 1 >= argc)
		return 0;
	if (!strcmp(name, "--tokens")) {
		o->token_file = argv[++*i];
		return 1;
	}
	if (!strcmp(name, "--producers"))
		field = &o->producers;
	else if (!strcmp(name, "--batch"))
		field = &o->batch;
	else if (!strcmp(name, "--seq-len"))
		field = &o->seq_len;
	else if (!strcmp(name, "--slots"))
		field = &o->slots_per_rank;
	else
		return 0;
	*field = (uint32_t)strtoul(argv[++*i], NULL, 0);
	return 1;
}

/*
 * bench_feed_start - name the job PREFIX-PID in job[job_size], point o->job at it and
 * start the feed. Returns 0 and the feed in *ret; or -1 after printing the error after
 * "PROG: ".
 */
static int bench_feed_start(struct feed_options *o, const char *prog, const char *prefix, char *job,
			    size_t job_size, struct feed **ret)
{
	struct sf_err e = {0};

	snprintf(job, job_size, "%s-%d", prefix, (int)getpid());
	o->job = job;
	if (feed_start(o, ret, &e) < 0) {
		fprintf(stderr, "%s: %s\n", prog, e.msg);
		return -1;
	}
	return 0;
}

#endif
