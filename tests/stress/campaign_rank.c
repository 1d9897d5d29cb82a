/*
 * campaign_rank: one training rank of the kill campaign (kill_campaign.py). It attaches
 * to $SHMFEED_JOB as local rank $LOCAL_RANK (CPU views) and takes steps until `--steps
 * N`, appending one line per batch to `--out FILE` with write(2), before it asks for the
 * next batch (which releases this one):
 *
 *     STEP DIGEST SAMPLES PROVENANCE
 *
 * where SAMPLES and PROVENANCE are the resume state after the batch (sf_consumer_state,
 * what a Python rank's state_dict() holds). A rank killed at any point therefore leaves a
 * record of every batch it released, plus possibly the one it held (handed to its
 * successor again: a re-delivery, which the campaign counts).
 *
 * At start it reads its record. When the ring is behind it (the launcher was killed and
 * restarted, so the arena is new and starts at step 0) it resumes from the last line's
 * state with sf_consumer_seek(); otherwise the ring, which survives a consumer's death,
 * says where to go on.
 *
 * Exit status: 0 after N steps; 75 when the job's launcher is gone (SF_E_JOB_GONE) or the
 * job stopped, so the campaign restarts the rank once a launcher runs again; 1 on any
 * other failure, with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"

#define EXIT_AGAIN 75

struct last_line {
	int found;
	uint64_t step, samples, provenance;
};

/* The last complete line of the record (a kill can leave no partial one: each line is
 * one write(2) of a few dozen bytes to a regular file). */
static int read_last(int fd, struct last_line *ret)
{
	static char buf[1 << 16];
	char line[128];
	size_t used = 0;
	ssize_t n;

	memset(ret, 0, sizeof(*ret));
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (used + 1 < sizeof(line))
					line[used++] = buf[i];
				continue;
			}
			line[used] = 0;
			used = 0;
			{
				uint64_t step, digest, samples, prov;

				if (sscanf(line, "%" SCNu64 " %" SCNx64 " %" SCNu64 " %" SCNx64,
					   &step, &digest, &samples, &prov) == 4) {
					ret->found = 1;
					ret->step = step;
					ret->samples = samples;
					ret->provenance = prov;
				}
			}
		}
	}
	return n < 0 ? -errno : 0;
}

int main(int argc, char **argv)
{
	const char *job = getenv("SHMFEED_JOB"), *lr = getenv("LOCAL_RANK"), *out_path = NULL;
	uint64_t steps = 0;
	unsigned sleep_us = 0;
	int rank = lr ? atoi(lr) : 0, fd, r;
	struct sf_consumer *c = NULL;
	struct sf_consumer_stats st;
	struct sf_consumer_info info;
	struct last_line last;
	char err[512];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out_path = argv[++i];
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc)
			sleep_us = (unsigned)strtoul(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "campaign_rank: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (!job || !out_path || !steps) {
		fprintf(stderr, "usage: SHMFEED_JOB=J LOCAL_RANK=R campaign_rank --steps N --out "
				"FILE [--sleep-us U]\n");
		return 2;
	}
	fd = open(out_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0 || read_last(fd, &last) < 0) {
		perror(out_path);
		return 1;
	}
	if (last.found && last.step + 1 >= steps)
		return 0;
	r = sf_consumer_attach(job, rank, SF_DEVICE_NONE, SF_ATTACH_CPU, &c, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "campaign_rank %d: attach: %s\n", rank, err);
		/* No arena yet, or a stale one: the campaign tries again later. */
		return r == -ENOENT || r == SF_E_BUSY ? EXIT_AGAIN : 1;
	}
	sf_consumer_info(c, &info);
	sf_consumer_stats(c, &st);
	if (last.found && st.next_step < last.step) {
		struct sf_resume state = {.samples = last.samples,
					  .config_digest = info.config_digest,
					  .provenance = last.provenance};

		r = sf_consumer_seek(c, &state);
		if (r < 0) {
			fprintf(stderr, "campaign_rank %d: seek to step %" PRIu64 ": %s\n", rank,
				last.step + 1, sf_consumer_errmsg(c));
			sf_consumer_detach(c);
			return r == SF_E_JOB_GONE || r == SF_E_STOPPED ? EXIT_AGAIN : 1;
		}
	}
	for (;;) {
		struct sf_resume state;
		struct sf_batch b;
		char line[128];
		int n;

		sf_consumer_stats(c, &st);
		if (st.next_step >= steps)
			break;
		r = sf_consumer_next(c, 30000, &b);
		if (r < 0) {
			int again = r == SF_E_JOB_GONE || r == SF_E_STOPPED;

			if (!again)
				fprintf(stderr, "campaign_rank %d: step %" PRIu64 ": %s\n", rank,
					st.next_step, sf_consumer_errmsg(c));
			sf_consumer_detach(c);
			return again ? EXIT_AGAIN : 1;
		}
		sf_consumer_state(c, &state);
		n = snprintf(line, sizeof(line),
			     "%" PRIu64 " %016" PRIx64 " %" PRIu64 " %016" PRIx64 "\n", b.step,
			     b.digest, state.samples, state.provenance);
		if (write(fd, line, (size_t)n) != n) {
			perror(out_path);
			return 1;
		}
		if (sleep_us)
			usleep(sleep_us);
	}
	sf_consumer_detach(c);
	close(fd);
	return 0;
}
