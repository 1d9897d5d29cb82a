/*
 * `shmfeed status [JOB] [--json]` and `shmfeed top [JOB] [--count N]`: what a running
 * job is doing, from its supervisor. status asks once over the control socket (status
 * and stats requests); top subscribes to the stats the supervisor publishes every
 * interval and redraws in place like top(1), costing the job one message per interval
 * and nothing on its data path. JOB may be left out when only one job runs. A job served
 * with CURVE takes clients whose key pair (--key FILE, else $SHMFEED_CURVE_KEY) it allows.
 * `shmfeed stop|pause|resume [JOB]` send the job one control request each, `shmfeed
 * seek` one with a rank and a step.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/arena.h"
#include "common/control.h"
#include "common/log.h"
#include "launcher/launcher.h"

#define CALL_TIMEOUT_MS 3000

struct doc {
	const char *buf;
	struct sf_json_token tok[SF_JSON_MAX_TOKENS];
	int n;
};

static uint64_t u64_of(const struct doc *d, int obj, const char *key)
{
	uint64_t v = 0;

	sf__json_u64(d->buf, d->tok, sf__json_get(d->buf, d->tok, obj, key), &v);
	return v;
}

static double dbl_of(const struct doc *d, int obj, const char *key)
{
	return sf__json_double(d->buf, d->tok, sf__json_get(d->buf, d->tok, obj, key));
}

static void str_of(const struct doc *d, int obj, const char *key, char *out, size_t len)
{
	if (sf__json_string(d->buf, d->tok, sf__json_get(d->buf, d->tok, obj, key), out, len) < 0)
		snprintf(out, len, "?");
}

static int parse_reply(struct doc *d, const char *buf, struct sf_err *e)
{
	int ok;

	d->buf = buf;
	d->n = sf__json_parse(buf, strlen(buf), d->tok, SF_JSON_MAX_TOKENS, e);
	if (d->n < 0)
		return d->n;
	if (d->tok[0].type != SF_JSON_OBJECT)
		return sf__err(e, SF_E_PROTOCOL, "reply is not a JSON object");
	ok = sf__json_get(buf, d->tok, 0, "ok");
	if (ok < 0 || d->tok[ok].type != SF_JSON_TRUE) {
		char msg[400];

		str_of(d, 0, "error", msg, sizeof(msg));
		return sf__err(e, SF_E_PROTOCOL, "the job answered: %s", msg);
	}
	return 0;
}

#define WAIT_BAR_WIDTH 16

/*
 * A bar of the share of the last interval a rank spent waiting for its batches, so that
 * a starved rank stands out in a column of them: '#' per sixteenth, '.' for the rest.
 */
static void wait_bar(double share, char bar[WAIT_BAR_WIDTH + 1])
{
	int full = (int)(share * WAIT_BAR_WIDTH + 0.5);

	for (int i = 0; i < WAIT_BAR_WIDTH; i++)
		bar[i] = i < full ? '#' : '.';
	bar[WAIT_BAR_WIDTH] = 0;
}

/* The human form of a stats object (and, when given, the status object). */

/* Below a table of `what` (the JSON array at token `arr`), which of them it shows when the
 * stats carry fewer than the job has. */
static void left_out(FILE *f, const struct doc *sd, int arr, const char *what)
{
	char key[32];
	uint64_t total;

	snprintf(key, sizeof(key), "%s_total", what);
	total = u64_of(sd, 0, key);
	if (arr >= 0 && sd->tok[arr].size && total > (uint64_t)sd->tok[arr].size)
		fprintf(f, " (%s 0..%u of %llu shown: the stats carry the first %u)\n", what,
			sd->tok[arr].size - 1, (unsigned long long)total, sd->tok[arr].size);
}

/* A mixture's sources: samples delivered against the target, in the prefix read. */
static void print_sources(FILE *f, const struct doc *sd)
{
	int srcs = sf__json_get(sd->buf, sd->tok, 0, "sources");
	uint64_t n = u64_of(sd, 0, "samples");

	if (srcs < 0)
		return;
	fprintf(f,
		"\n source              delivered        target   share  (of the first %llu "
		"samples, which every rank has released)\n",
		(unsigned long long)n);
	for (uint32_t i = 0; i < sd->tok[srcs].size; i++) {
		int s = sf__json_at(sd->tok, srcs, i);
		char name[64];
		uint64_t got = u64_of(sd, s, "delivered");

		str_of(sd, s, "name", name, sizeof(name));
		fprintf(f, " %-16s %12llu %13.1f  %6.2f%%\n", name, (unsigned long long)got,
			dbl_of(sd, s, "target"), n ? 100.0 * (double)got / (double)n : 0.0);
	}
	if (u64_of(sd, 0, "sources_total") > sd->tok[srcs].size) {
		uint64_t more = u64_of(sd, 0, "sources_total") - sd->tok[srcs].size;

		fprintf(f, " (and %llu more source%s, not shown: the figures cover the first %u)\n",
			(unsigned long long)more, more == 1 ? "" : "s", sd->tok[srcs].size);
	}
}

static void print_stats(FILE *f, const struct doc *st, const struct doc *sd)
{
	char job[80], state[16], tps[32], bps[32], p50[32], p99[32], node_ranks[64];
	int ranks, prods;

	str_of(sd, 0, "job", job, sizeof(job));
	str_of(sd, 0, "state", state, sizeof(state));
	fprintf(f, "job %s: %s, up %.1f s", job, state, dbl_of(sd, 0, "uptime_s"));
	if (st)
		str_of(st, 0, "node_ranks", node_ranks, sizeof(node_ranks));
	if (st)
		fprintf(f,
			"; pid %llu, %llu rank%s x %llu slots, B=%llu T=%llu, world %llu, node "
			"ranks %s, %llu/%llu producers alive",
			(unsigned long long)u64_of(st, 0, "pid"),
			(unsigned long long)u64_of(st, 0, "ranks"),
			u64_of(st, 0, "ranks") == 1 ? "" : "s",
			(unsigned long long)u64_of(st, 0, "slots_per_rank"),
			(unsigned long long)u64_of(st, 0, "batch"),
			(unsigned long long)u64_of(st, 0, "seq_len"),
			(unsigned long long)u64_of(st, 0, "world_size"), node_ranks,
			(unsigned long long)u64_of(st, 0, "producers_alive"),
			(unsigned long long)u64_of(st, 0, "producers"));
	if (st && u64_of(st, 0, "producers_stalled"))
		fprintf(f, " (%llu stalled)",
			(unsigned long long)u64_of(st, 0, "producers_stalled"));
	fprintf(f, "\n");
	sf__stats_human_rate(dbl_of(sd, 0, "tokens_per_s"), tps, sizeof(tps));
	sf__stats_human_rate(dbl_of(sd, 0, "batches_per_s"), bps, sizeof(bps));
	fprintf(f, "throughput   %stok/s, %sbatches/s; delivered %llu batches, %llu tokens\n", tps,
		bps, (unsigned long long)u64_of(sd, 0, "batches"),
		(unsigned long long)u64_of(sd, 0, "tokens"));
	if (u64_of(sd, 0, "wait_samples")) {
		sf__stats_human_below(u64_of(sd, 0, "wait_p50_ns"), p50, sizeof(p50));
		sf__stats_human_below(u64_of(sd, 0, "wait_p99_ns"), p99, sizeof(p99));
		fprintf(f, "consumer wait p50 %s, p99 %s (%llu batches)\n", p50, p99,
			(unsigned long long)u64_of(sd, 0, "wait_samples"));
	} else {
		fprintf(f, "consumer wait n/a (no consumer has reported a wait)\n");
	}
	fprintf(f, "restarts %llu, stalls %llu, repairs %llu, records skipped %llu\n",
		(unsigned long long)u64_of(sd, 0, "restarts"),
		(unsigned long long)u64_of(sd, 0, "stalls"),
		(unsigned long long)u64_of(sd, 0, "repairs"),
		(unsigned long long)u64_of(sd, 0, "skipped"));
	if (u64_of(sd, 0, "tokens_encoded") && u64_of(sd, 0, "tokens_produced"))
		fprintf(f,
			"tokens encoded per token produced %.3f (raw text tokenized per token "
			"written to a slot; 1.000: each token once, more: text tokenized again "
			"or ahead of the batches, less: tokens reused from the shared chunk "
			"cache or pre-tokenized)\n",
			(double)u64_of(sd, 0, "tokens_encoded") /
				(double)u64_of(sd, 0, "tokens_produced"));
	ranks = sf__json_get(sd->buf, sd->tok, 0, "ranks");
	fprintf(f, "\n rank  free filling ready claimed   next step  wait p50       p99  "
		   "waiting (last interval)   stalls  consumer\n");
	for (uint32_t i = 0; ranks >= 0 && i < sd->tok[ranks].size; i++) {
		int r = sf__json_at(sd->tok, ranks, i);
		long long pid = (long long)u64_of(sd, r, "consumer_pid");
		char bar[WAIT_BAR_WIDTH + 1];

		wait_bar(dbl_of(sd, r, "waiting"), bar);
		p50[0] = p99[0] = 0;
		if (u64_of(sd, r, "interval_batches")) {
			sf__stats_human_below(u64_of(sd, r, "interval_wait_p50_ns"), p50,
					      sizeof(p50));
			sf__stats_human_below(u64_of(sd, r, "interval_wait_p99_ns"), p99,
					      sizeof(p99));
		}
		fprintf(f, "%5llu %5llu %7llu %5llu %7llu %11llu  %8s  %8s  [%s] %3.0f%% %8llu  ",
			(unsigned long long)u64_of(sd, r, "rank"),
			(unsigned long long)u64_of(sd, r, "free"),
			(unsigned long long)u64_of(sd, r, "filling"),
			(unsigned long long)u64_of(sd, r, "ready"),
			(unsigned long long)u64_of(sd, r, "claimed"),
			(unsigned long long)u64_of(sd, r, "next_step"), p50[0] ? p50 : "-",
			p99[0] ? p99 : "-", bar, 100.0 * dbl_of(sd, r, "waiting"),
			(unsigned long long)u64_of(sd, r, "stalls"));
		if (pid > 0)
			fprintf(f, "pid %lld\n", pid);
		else
			fprintf(f, "-\n");
	}
	left_out(f, sd, ranks, "ranks");
	print_sources(f, sd);
	prods = sf__json_get(sd->buf, sd->tok, 0, "producers");
	fprintf(f, "\n producer      pid  incarnation     batches   util  state     silent\n");
	for (uint32_t i = 0; prods >= 0 && i < sd->tok[prods].size; i++) {
		int p = sf__json_at(sd->tok, prods, i);
		char pstate[16], silent[32], util[16];
		double pct = 100.0 * dbl_of(sd, p, "utilization");

		str_of(sd, p, "state", pstate, sizeof(pstate));
		sf__stats_human_ns(u64_of(sd, p, "silent_ms") * 1000000ull, silent, sizeof(silent));
		/* A producer feeding a trainer is mostly idle: 5 batches/s of a few us each
		 * is a few thousandths of a percent, which must not read as 0. */
		if (pct > 0 && pct < 0.01)
			snprintf(util, sizeof(util), "<0.01%%");
		else
			snprintf(util, sizeof(util), "%.*f%%", pct < 10 ? 2 : 1, pct);
		fprintf(f, "%9llu %8llu %12llu %11llu %6s  %-8s %s\n",
			(unsigned long long)u64_of(sd, p, "index"),
			(unsigned long long)u64_of(sd, p, "pid"),
			(unsigned long long)u64_of(sd, p, "incarnation"),
			(unsigned long long)u64_of(sd, p, "batches"), util, pstate, silent);
	}
	left_out(f, sd, prods, "producers");
}

static int call(const struct sf_job_info *info, const char *op, char *reply, size_t len,
		struct sf_err *e)
{
	char req[128];

	snprintf(req, sizeof(req), "{\"v\":%u,\"op\":\"%s\"}", SF_CTL_VERSION, op);
	return sf__ctl_call(info, req, CALL_TIMEOUT_MS, reply, len, e);
}

/*
 * Take "--key FILE" (the client's CURVE key pair) out of argv; the rest is left for the
 * command's own parsing. Returns the new argc, or -1 on a --key without FILE.
 */
static int take_key_arg(int argc, char **argv, const char **ret_key)
{
	int n = 0;

	*ret_key = NULL;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--key")) {
			if (i + 1 == argc)
				return -1;
			*ret_key = argv[++i];
		} else {
			argv[n++] = argv[i];
		}
	}
	return n;
}

/* The job's discovery file, with the client key of --key. */
static int job_info(const char *job, const char *key, struct sf_job_info *info, struct sf_err *e)
{
	int r = sf__job_info_read(job, info, e);

	if (r < 0)
		return r;
	if (key && (size_t)snprintf(info->client_key_file, sizeof(info->client_key_file), "%s",
				    key) >= sizeof(info->client_key_file))
		return sf__err(e, -ENAMETOOLONG, "--key %.64s...: path too long", key);
	return 0;
}

int sf__cmd_status(int argc, char **argv)
{
	static char status_buf[SF_CTL_MAX_REPLY], stats_buf[SF_CTL_MAX_REPLY];
	static struct doc st, sd;
	const char *job, *key;
	struct sf_job_info info;
	struct sf_err e = {0};
	int json;

	argc = take_key_arg(argc, argv, &key);
	if (argc < 0 || sf__cli_job_args(argc, argv, &job, &json) < 0) {
		fprintf(stderr, "usage: shmfeed status [JOB] [--json] [--key FILE]\n");
		return 2;
	}
	if (job_info(job, key, &info, &e) < 0 ||
	    call(&info, "status", status_buf, sizeof(status_buf), &e) < 0 ||
	    call(&info, "stats", stats_buf, sizeof(stats_buf), &e) < 0 ||
	    parse_reply(&st, status_buf, &e) < 0 || parse_reply(&sd, stats_buf, &e) < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	if (json)
		printf("{\"status\":%s,\"stats\":%s}\n", status_buf, stats_buf);
	else
		print_stats(stdout, &st, &sd);
	return 0;
}

/*
 * `shmfeed stop|pause|resume [JOB] [--key FILE]`: one control request, then the job's
 * state as the supervisor reports it in its reply ("stopping" for stop: the job ends once
 * its command and producers have).
 */
int sf__cmd_control(int argc, char **argv)
{
	static char reply_buf[SF_CTL_MAX_REPLY];
	static struct doc d;
	const char *job, *key;
	struct sf_job_info info;
	struct sf_err e = {0};
	char name[80], state[16];
	int json;

	argc = take_key_arg(argc, argv, &key);
	if (argc < 0 || sf__cli_job_args(argc, argv, &job, &json) < 0 || json) {
		fprintf(stderr, "usage: shmfeed %s [JOB] [--key FILE]\n", argv[0]);
		return 2;
	}
	if (job_info(job, key, &info, &e) < 0 ||
	    call(&info, argv[0], reply_buf, sizeof(reply_buf), &e) < 0 ||
	    parse_reply(&d, reply_buf, &e) < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	str_of(&d, 0, "job", name, sizeof(name));
	str_of(&d, 0, "state", state, sizeof(state));
	printf("job %s: %s\n", name, state);
	return 0;
}

/* A decimal number of digits only, at most `max`. Returns 0, or 1 when it is not. */
static int parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return 1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return 1;
	*ret = v;
	return 0;
}

/* How long seek waits for its reply by default (--timeout): the reply waits for a slot a
 * producer is filling, which the stall watchdog ends after producers.stall_timeout (5 s
 * by default). */
#define SEEK_TIMEOUT_S	   60
#define SEEK_TIMEOUT_S_MAX 86400

/*
 * `shmfeed seek [JOB] --rank R --step S [--timeout SEC] [--key FILE]`: the control
 * request seek, which positions a rank that has no consumer attached; then the job's
 * state.
 */
int sf__cmd_seek(int argc, char **argv)
{
	static char reply_buf[SF_CTL_MAX_REPLY];
	static struct doc d;
	const char *job = NULL, *key;
	const char *rank_arg = NULL, *step_arg = NULL, *timeout_arg = NULL;
	struct sf_job_info info;
	struct sf_err e = {0};
	char name[80], state[16], req[160];
	uint64_t rank, step, timeout_s = SEEK_TIMEOUT_S;

	argc = take_key_arg(argc, argv, &key);
	for (int i = 1; argc > 0 && i < argc; i++) {
		if (!strcmp(argv[i], "--rank") && i + 1 < argc && !rank_arg) {
			rank_arg = argv[++i];
		} else if (!strcmp(argv[i], "--step") && i + 1 < argc && !step_arg) {
			step_arg = argv[++i];
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc && !timeout_arg) {
			timeout_arg = argv[++i];
		} else if (argv[i][0] != '-' && !job) {
			job = argv[i];
		} else {
			argc = -1;
		}
	}
	if (argc < 0 || !rank_arg || !step_arg) {
		fprintf(stderr, "usage: shmfeed seek [JOB] --rank R --step S [--timeout SEC] "
				"[--key FILE]\n");
		return 2;
	}
	/* The protocol's bounds; the job then checks its own ranks and step limit. */
	if (parse_u64(rank_arg, SF_MAX_RANKS - 1, &rank)) {
		fprintf(stderr,
			"shmfeed: seek: --rank takes a local rank, 0..%u in digits, not '%s'\n",
			SF_MAX_RANKS - 1, rank_arg);
		return 2;
	}
	if (parse_u64(step_arg, SF_STEP_MAX - 1, &step)) {
		fprintf(stderr, "shmfeed: seek: --step takes 0..%llu in digits, not '%s'\n",
			(unsigned long long)(SF_STEP_MAX - 1), step_arg);
		return 2;
	}
	if (timeout_arg &&
	    (parse_u64(timeout_arg, SEEK_TIMEOUT_S_MAX, &timeout_s) || timeout_s == 0)) {
		fprintf(stderr,
			"shmfeed: seek: --timeout takes 1..%u seconds in digits, not '%s'\n",
			SEEK_TIMEOUT_S_MAX, timeout_arg);
		return 2;
	}
	snprintf(req, sizeof(req), "{\"v\":%u,\"op\":\"seek\",\"rank\":%llu,\"step\":%llu}",
		 SF_CTL_VERSION, (unsigned long long)rank, (unsigned long long)step);
	/* hello first, at the usual timeout: a job that is gone, or refuses this client's
	 * CURVE key, says so at once; the long wait is for the seek alone. */
	if (job_info(job, key, &info, &e) < 0 ||
	    call(&info, "hello", reply_buf, sizeof(reply_buf), &e) < 0 ||
	    parse_reply(&d, reply_buf, &e) < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	if (sf__ctl_call(&info, req, (int)timeout_s * 1000, reply_buf, sizeof(reply_buf), &e) < 0) {
		if (e.code == SF_E_TIMEOUT)
			sf__log_error(
				"job '%s' has not repositioned rank %llu within %llu s: a "
				"producer still fills a slot of it (a stalled one is ended "
				"after producers.stall_timeout). The seek stays pending in the "
				"job and takes effect once the slot is done; `shmfeed status` "
				"shows the rank's next step",
				info.job, (unsigned long long)rank, (unsigned long long)timeout_s);
		else
			sf__log_error("%s", e.msg);
		return 1;
	}
	if (parse_reply(&d, reply_buf, &e) < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	str_of(&d, 0, "job", name, sizeof(name));
	str_of(&d, 0, "state", state, sizeof(state));
	printf("job %s: rank %llu reads step %llu next; %s\n", name, (unsigned long long)rank,
	       (unsigned long long)step, state);
	return 0;
}

static volatile sig_atomic_t top_interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	top_interrupted = 1;
}

/*
 * One frame of top: over the last on a terminal, else after it. -1 when it could not be
 * written: `top | head -1` went on writing into the closed pipe until the job ended,
 * where SIGPIPE is ignored (a review). top then ends, and main()'s stdout_written() says
 * why and exits 1.
 */
static int show_frame(int tty, uint64_t shown, const struct doc *st, const struct doc *sd)
{
	if (tty)
		fputs("\033[H\033[2J", stdout);
	else if (shown)
		fputs("\n", stdout);
	print_stats(stdout, st, sd);
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : -1;
}

int sf__cmd_top(int argc, char **argv)
{
	static char status_buf[SF_CTL_MAX_REPLY], fresh[SF_CTL_MAX_REPLY], msg[SF_CTL_MAX_REPLY];
	static struct doc st, sd, nd;
	const char *job = NULL, *key;
	struct sf_job_info info;
	struct sf_err e = {0};
	uint64_t count = UINT64_MAX, shown = 0;
	int tty = isatty(STDOUT_FILENO), one = 1, timeout = 500, r = 0, bad = 0;
	void *ctx, *sub;
	uint32_t silent_ms = 0, interval_ms, silent_limit_ms;

	argc = take_key_arg(argc, argv, &key);
	for (int i = 1; i < argc && !bad; i++) {
		if (!strcmp(argv[i], "--count") && i + 1 < argc)
			bad = parse_u64(argv[++i], 1000000000, &count) || count == 0;
		else if (argv[i][0] != '-' && !job)
			job = argv[i];
		else
			bad = 1;
	}
	if (argc < 0 || bad) {
		fprintf(stderr, "usage: shmfeed top [JOB] [--count N] [--key FILE]\n"
				"--count N: stop after N updates, 1 to 1000000000\n");
		return 2;
	}
	if (job_info(job, key, &info, &e) < 0 ||
	    call(&info, "status", status_buf, sizeof(status_buf), &e) < 0 ||
	    parse_reply(&st, status_buf, &e) < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	/* A frame at once, from the stats the job has now; then one each stats interval.
	 * Silence is judged against the job's own interval (10 s at least). */
	interval_ms = (uint32_t)u64_of(&st, 0, "stats_interval_ms");
	silent_limit_ms = interval_ms > 4000 ? 2 * interval_ms + 2000 : 10000;
	if (call(&info, "stats", msg, sizeof(msg), &e) >= 0 && parse_reply(&sd, msg, &e) >= 0 &&
	    show_frame(tty, shown++, &st, &sd) < 0)
		return 0;
	ctx = zmq_ctx_new();
	sub = zmq_socket(ctx, ZMQ_SUB);
	/* Only the latest stats matter to a display. */
	zmq_setsockopt(sub, ZMQ_CONFLATE, &one, sizeof(one));
	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_setsockopt(sub, ZMQ_LINGER, &(int){0}, sizeof(int));
	zmq_setsockopt(sub, ZMQ_IPV6, &one, sizeof(one)); /* tcp://[IPv6]:PORT */
	if (sf__curve_client_setup(sub, &info, &e) < 0) {
		sf__log_error("%s", e.msg);
		r = 1;
		goto out;
	}
	if (zmq_connect(sub, info.stats) < 0) {
		sf__log_error("cannot connect to %s: %s", info.stats, zmq_strerror(errno));
		r = 1;
		goto out;
	}
	signal(SIGINT, on_interrupt);
	signal(SIGTERM, on_interrupt);
	while (!top_interrupted && shown < count) {
		int n = zmq_recv(sub, msg, sizeof(msg) - 1, 0);

		if (n < 0) {
			silent_ms += (uint32_t)timeout;
			/* The job ended if its supervisor is gone, and left nothing: one that
			 * died left its discovery file or arena ("ended" and 0 for a launcher
			 * killed under `top`: a review). */
			if (kill(info.pid, 0) < 0 && errno == ESRCH) {
				struct sf_job_info left;

				if (sf__job_info_read(info.job, &left, &e) == SF_E_JOB_GONE) {
					sf__log_error("%s", e.msg);
					r = 1;
				} else {
					fprintf(stderr, "shmfeed: job %s ended\n", info.job);
				}
				break;
			}
			if (silent_ms >= silent_limit_ms) {
				sf__log_error("job %s published no stats for %u ms", info.job,
					      silent_ms);
				r = 1;
				break;
			}
			continue;
		}
		silent_ms = 0;
		msg[n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1] = 0;
		if (parse_reply(&sd, msg, &e) < 0)
			continue;
		/* The header's producers alive and stalled change as the job runs: read with
		 * each frame, the last answer kept if the job does not give one. */
		if (call(&info, "status", fresh, sizeof(fresh), &e) >= 0 &&
		    parse_reply(&nd, fresh, &e) >= 0) {
			memcpy(status_buf, fresh, sizeof(status_buf));
			parse_reply(&st, status_buf, &e);
		}
		if (show_frame(tty, shown++, &st, &sd) < 0)
			break;
	}
out:
	zmq_close(sub);
	zmq_ctx_term(ctx);
	return r;
}
