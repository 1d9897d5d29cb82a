/*
 * `shmfeed inspect`: create an arena with slots in every state and a registered
 * participant, then check what the command prints, in text and as JSON (which must
 * parse). Usage: test_inspect PATH-TO-shmfeed
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/slot.h"

static int failures;

static void expect(int cond, const char *what, const char *out)
{
	if (!cond) {
		fprintf(stderr, "FAIL: %s\n--- output ---\n%s\n", what, out);
		failures++;
	}
}

static void run(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	size_t n = 0;

	if (!p) {
		perror("popen");
		exit(1);
	}
	while (n < len - 1) {
		size_t r = fread(out + n, 1, len - 1 - n, p);

		if (r == 0)
			break;
		n += r;
	}
	out[n] = 0;
	if (pclose(p) != 0)
		failures++;
}

int main(int argc, char **argv)
{
	struct sf_geometry g = {.ranks = 2,
				.slots_per_rank = 2,
				.max_producers = 1,
				.batch = 4,
				.seq_tokens = 65,
				.token_bytes = 2,
				.world_size = 2,
				.flags = SF_ARENA_F_CHECKSUM,
				.config_digest = 0xabcdef,
				.samples_per_epoch = 1234};
	static char out[1 << 16];
	struct sf_arena *a;
	struct sf_err e = {0};
	struct sf_fill f;
	struct sf_slot *s;
	char job[64], cmd[512];

	if (argc != 2) {
		fprintf(stderr, "usage: test_inspect PATH-TO-shmfeed\n");
		return 2;
	}
	snprintf(job, sizeof(job), "t-inspect-%d", (int)getpid());
	if (sf__arena_create(job, &g, &(struct sf_arena_options){.verify_every = 8}, &a, NULL, 0,
			     &e) < 0) {
		fprintf(stderr, "create: %s\n", e.msg);
		return 1;
	}
	sf__arena_set_job_state(a, SF_JOB_RUNNING);
	sf__participant_register(a, 0, SF_ROLE_PRODUCER, 0, NULL);
	/* Rank 0: step 0 consumed, step 1 READY; rank 1: step 0 CLAIMED, step 1 FILLING. */
	for (int i = 0; i < 4; i++) {
		sf__producer_claim(a, 0, 0, &f);
		if (i < 3)
			sf__producer_publish(a, 0, &f, 8, f.step);
	}
	sf__consumer_claim(a, 1, 0, 0, 0, &s);
	sf__consumer_release(a, 0, s);
	sf__consumer_claim(a, 2, 1, 0, 0, &s);

	snprintf(cmd, sizeof(cmd), "%s inspect %s", argv[1], job);
	run(cmd, out, sizeof(out));
	expect(strstr(out, "job t-inspect-") != NULL, "text names the job", out);
	expect(strstr(out, "2 ranks x 2 slots, B=4 T+1=65") != NULL, "text geometry", out);
	expect(strstr(out, "1234 samples an epoch") != NULL, "text samples per epoch", out);
	expect(strstr(out, "state running") != NULL, "text job state", out);
	expect(strstr(out, "flags checksum (verified every 8 steps)") != NULL, "text verify_every",
	       out);
	expect(strstr(out, "rank 0 (next step 1): 2:FREE 1:READY") != NULL, "rank 0 slots", out);
	expect(strstr(out, "rank 1 (next step 0): 0:CLAIMED(2) 1:FILLING(0)") != NULL,
	       "rank 1 slots", out);
	expect(strstr(out, "  0 producer 0 ") != NULL, "participant listed", out);
	expect(strstr(out, "producer rank") == NULL, "a producer has no rank", out);

	snprintf(cmd, sizeof(cmd),
		 "%s inspect %s --json | python3 -c 'import json,sys; d=json.load(sys.stdin); "
		 "print(d[\"geometry\"][\"seq_tokens\"], d[\"geometry\"][\"samples_per_epoch\"], "
		 "d[\"rings\"][1][\"slots\"][1][\"state\"], "
		 "d[\"participants\"][0][\"role\"], d[\"config_digest\"])'",
		 argv[1], job);
	run(cmd, out, sizeof(out));
	expect(strcmp(out, "65 1234 FILLING producer 0000000000abcdef\n") == 0, "JSON fields", out);

	snprintf(cmd, sizeof(cmd), "%s inspect no-such-job-%d 2>&1", argv[1], (int)getpid());
	{
		FILE *p = popen(cmd, "r");
		size_t n = fread(out, 1, sizeof(out) - 1, p);

		out[n] = 0;
		expect(pclose(p) != 0, "a missing job fails", out);
		expect(strstr(out, "no shmfeed job") != NULL, "missing job message", out);
	}
	sf__arena_destroy(a);

	/* Headers that lie about the geometry or the offsets of a file of the right size:
	 * inspect refuses them with a message (before the fix it died of SIGBUS). */
	for (int lie = 0; lie < 4; lie++) {
		struct sf_arena_header *h;
		int status;

		if (sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) < 0) {
			fprintf(stderr, "create: %s\n", e.msg);
			return 1;
		}
		h = a->hdr;
		if (lie == 0) {
			h->geo.ranks = 1000;
			h->geo.world_size = 1000;
		} else if (lie == 1) {
			h->slots_off = UINT64_C(1) << 40;
		} else if (lie == 2) {
			h->geo.max_producers = 100000;
		} else {
			h->geo.slots_per_rank = 4000;
		}
		snprintf(cmd, sizeof(cmd), "%s inspect %s 2>&1", argv[1], job);
		{
			FILE *p = popen(cmd, "r");
			size_t n = fread(out, 1, sizeof(out) - 1, p);

			out[n] = 0;
			status = pclose(p);
		}
		expect(WIFEXITED(status) && WEXITSTATUS(status) == 1,
		       "a lying header makes inspect exit 1, not crash", out);
		expect(strstr(out, "shmfeed: inspect: job 't-inspect-") != NULL,
		       "a lying header is named", out);
		sf__arena_destroy(a);
	}
	/* A header rewritten while inspect runs (found by review): it checked the header at
	 * attach, then looped over the shared one's ranks and slots, past the mapping
	 * (SIGBUS in 31 of 100 runs). A child flips the rank count all along; each run must
	 * print or refuse, never die of a signal. */
	if (sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) < 0) {
		fprintf(stderr, "create: %s\n", e.msg);
		return 1;
	}
	{
		pid_t flipper = fork();
		int died = 0, status;

		if (flipper == 0) {
			volatile uint32_t *ranks = &a->hdr->geo.ranks;

			/* Never outlives the test, nor spins for ever if inspect hangs. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(120);

			for (;;)
				*ranks = *ranks == g.ranks ? 1000000 : g.ranks;
		}
		snprintf(cmd, sizeof(cmd), "%s inspect %s >/dev/null 2>&1", argv[1], job);
		for (int i = 0; i < 100; i++) {
			status = system(cmd);
			died += WIFSIGNALED(status) ||
				(WIFEXITED(status) && WEXITSTATUS(status) > 1);
		}
		kill(flipper, SIGKILL);
		waitpid(flipper, NULL, 0);
		snprintf(out, sizeof(out), "%d of 100 runs died", died);
		expect(died == 0, "inspect of a header rewritten as it runs does not crash", out);
	}
	sf__arena_destroy(a);
	printf("%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
