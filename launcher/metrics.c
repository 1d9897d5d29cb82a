/*
 * The job's statistics in the Prometheus text exposition format (version 0.0.4): written
 * every stats interval to control.metrics_file the way node_exporter's textfile collector
 * expects (a temporary file in the same directory, then rename(2), so a scrape never
 * reads half a file), and served over HTTP on a loopback address (control.metrics) by
 * libmicrohttpd's own thread, which only copies the latest text under a mutex.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SF_HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "common/log.h"
#include "launcher/launcher.h"

/* Wait histogram buckets exported: every other power of two from 2^10 ns (about 1 us) to
 * 2^34 ns (about 17 s), each the upper bound of an arena bucket, so counts stay exact. */
#define LE_FIRST_LOG2 10u
#define LE_LAST_LOG2  34u
#define LE_STEP_LOG2  2u

struct sf_metrics {
	char *file, *tmp_file; /* NULL: no file */
	int file_written;      /* once: later failures are logged, not fatal */
	int file_failed;       /* a failure to write was logged; logged again once it works */
	int file_taken;	       /* another file took its place: not written any more */
	dev_t file_dev;	       /* the file last renamed into place, the only one close() */
	ino_t file_ino;	       /* may remove */
	char *lock_file;       /* FILE.lock, held while the job runs, or NULL */
	int lock_fd;
#ifdef SF_HAVE_MICROHTTPD
	struct MHD_Daemon *http;
#endif
	int listen_fd;
	pthread_mutex_t lock; /* guards text and len, which the HTTP thread copies */
	char *text;
	size_t len;
};

static void counter(FILE *f, const char *name, const char *help, const char *job, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s{shmfeed_job=\"%s\"} %llu\n", name, help,
		name, name, job, (unsigned long long)v);
}

static void gauge(FILE *f, const char *name, const char *help, const char *job, double v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s{shmfeed_job=\"%s\"} %.9g\n", name, help, name,
		name, job, v);
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric with one series per rank or per producer: its value for index i. */
struct labelled {
	const char *name, *type, *help;
	double (*value)(const struct sf_stats *s, uint32_t i);
};

static double rank_waiting(const struct sf_stats *s, uint32_t r)
{
	return s->rank[r].waiting;
}

static double rank_stalls(const struct sf_stats *s, uint32_t r)
{
	return (double)s->rank[r].stalls;
}

static double producer_batches(const struct sf_stats *s, uint32_t p)
{
	return (double)s->producer[p].batches;
}

static double producer_utilization(const struct sf_stats *s, uint32_t p)
{
	return s->producer[p].utilization;
}

static double producer_restarts(const struct sf_stats *s, uint32_t p)
{
	/* The first registration is incarnation 1. */
	return s->producer[p].incarnation ? s->producer[p].incarnation - 1.0 : 0.0;
}

static double producer_stalls(const struct sf_stats *s, uint32_t p)
{
	return (double)s->producer[p].stalls;
}

static double producer_stalled(const struct sf_stats *s, uint32_t p)
{
	return s->producer[p].stalled ? 1.0 : 0.0;
}

static const struct labelled rank_series[] = {
	{"shmfeed_rank_waiting_ratio", "gauge",
	 "Share of the last interval the rank spent waiting for data (1: starved).", rank_waiting},
	{"shmfeed_rank_stalls_total", "counter",
	 "Reads of a batch that waited 2^20 ns (1.05 ms) or more, per rank.", rank_stalls},
};

static const struct labelled producer_series[] = {
	{"shmfeed_producer_batches_total", "counter",
	 "Batches the producer has published, across its restarts.", producer_batches},
	{"shmfeed_producer_utilization_ratio", "gauge",
	 "Share of the last interval the producer spent filling slots.", producer_utilization},
	{"shmfeed_producer_restarts_total", "counter",
	 "Times the producer was started again after it died.", producer_restarts},
	{"shmfeed_producer_stalls_total", "counter",
	 "Times the producer was killed and replaced for stalling.", producer_stalls},
	{"shmfeed_producer_stalled", "gauge",
	 "1 while the producer's heartbeat has been silent past half the stall timeout.",
	 producer_stalled},
};

/* Each metric of `defs`, one series per index 0..n-1 labelled `label`. Fifteen digits print
 * the counters here (per rank or producer, far below 10^15) exactly, and ratios without
 * the noise of binary fractions. */
static void series(FILE *f, const struct sf_stats *s, const char *job, const char *label,
		   uint32_t n, const struct labelled *defs, size_t n_defs)
{
	for (size_t d = 0; d < n_defs; d++) {
		head(f, defs[d].name, defs[d].type, defs[d].help);
		for (uint32_t i = 0; i < n; i++)
			fprintf(f, "%s{shmfeed_job=\"%s\",%s=\"%u\"} %.15g\n", defs[d].name, job,
				label, i, defs[d].value(s, i));
	}
}

/* The text of one sample. Job names are [A-Za-z0-9_.-]: no label value needs escaping. */
/* `ns` in seconds, written exactly (trailing zeros dropped): the histogram's bounds are
 * powers of two in ns, which %g rounded (2^34 ns up, to 17.1798692). */
static void seconds_exact(char *buf, size_t len, uint64_t ns)
{
	int n = snprintf(buf, len, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
			 (unsigned long long)(ns % 1000000000u));

	while (n > 1 && buf[n - 1] == '0')
		buf[--n] = 0;
	if (buf[n - 1] == '.')
		buf[--n] = 0;
}

static void render(FILE *f, const struct sf_stats *s, const char *job)
{
	const uint32_t ranks = s->ranks < SF_STATS_MAX_RANKS ? s->ranks : SF_STATS_MAX_RANKS;
	const uint32_t prods =
		s->producers < SF_STATS_MAX_PRODUCERS ? s->producers : SF_STATS_MAX_PRODUCERS;

	gauge(f, "shmfeed_uptime_seconds", "Time since the job started.", job,
	      (double)s->uptime_ns / 1e9);
	gauge(f, "shmfeed_paused", "1 while the job is paused.", job, s->state == SF_JOB_PAUSED);
	counter(f, "shmfeed_batches_total", "Batches the ranks of this node have read.", job,
		s->batches);
	counter(f, "shmfeed_tokens_total", "Tokens of those batches (B x T each).", job, s->tokens);
	gauge(f, "shmfeed_batches_per_second", "Batches read per second over the last interval.",
	      job, s->batches_per_s);
	gauge(f, "shmfeed_tokens_per_second", "Tokens read per second over the last interval.", job,
	      s->tokens_per_s);
	counter(f, "shmfeed_batches_produced_total", "Batches the producers have published.", job,
		s->produced);
	counter(f, "shmfeed_tokens_produced_total", "Tokens the producers wrote into slots.", job,
		s->tokens_produced);
	counter(f, "shmfeed_tokens_encoded_total",
		"Tokens the producers' tokenizers produced from raw text.", job, s->tokens_encoded);
	counter(f, "shmfeed_skipped_records_total", "Records the producers skipped by policy.", job,
		s->skipped);
	counter(f, "shmfeed_repairs_total",
		"Repairs of dead participants (each producer or rank that died holding a role).",
		job, s->repairs);
	counter(f, "shmfeed_slots_repaired_total", "Slots those repairs took back.", job,
		s->slots_repaired);

	if (s->n_sources) {
		gauge(f, "shmfeed_mixture_sources",
		      "Sources of the job's mixture; the per-source series below cover the first "
		      "64.",
		      job, s->sources_total);
		/* Source names are [A-Za-z0-9_.-] (checked at load): no escaping. */
		/* A position in the stream, not a count of events: a seek back lowers it,
		 * so it is a gauge (a counter that fell would read as a restart). */
		head(f, "shmfeed_source_samples", "gauge",
		     "Samples of each mixture source in the global prefix every local rank read.");
		for (uint32_t i = 0; i < s->n_sources && i < SF_STATS_MAX_SOURCES; i++)
			fprintf(f,
				"shmfeed_source_samples{shmfeed_job=\"%s\",source=\"%s\"} "
				"%llu\n",
				job, s->source[i].name, (unsigned long long)s->source[i].delivered);
		head(f, "shmfeed_source_target_samples", "gauge",
		     "Weight x samples of each mixture source over the same prefix, phase by "
		     "phase.");
		for (uint32_t i = 0; i < s->n_sources && i < SF_STATS_MAX_SOURCES; i++)
			fprintf(f,
				"shmfeed_source_target_samples{shmfeed_job=\"%s\",source=\"%s\"} "
				"%.15g\n",
				job, s->source[i].name, s->source[i].target);
	}

	head(f, "shmfeed_consumer_wait_seconds", "histogram",
	     "How long each read of a batch waited for it, per rank.");
	for (uint32_t r = 0; r < ranks; r++) {
		const struct sf_stats_rank *q = &s->rank[r];
		uint64_t seen = 0;
		uint32_t b = 0;

		for (uint32_t e = LE_FIRST_LOG2; e <= LE_LAST_LOG2; e += LE_STEP_LOG2) {
			/* Arena bucket b holds waits in [2^b, 2^(b+1)): all below 2^e once b < e.
			 */
			for (; b < e && b < SF_WAIT_BUCKETS; b++)
				seen += q->wait_hist[b];
			char le[32];

			seconds_exact(le, sizeof(le), UINT64_C(1) << e);
			fprintf(f,
				"shmfeed_consumer_wait_seconds_bucket{shmfeed_job=\"%s\",rank=\"%"
				"u\","
				"le=\"%s\"} %llu\n",
				job, r, le, (unsigned long long)seen);
		}
		for (; b < SF_WAIT_BUCKETS; b++)
			seen += q->wait_hist[b];
		fprintf(f,
			"shmfeed_consumer_wait_seconds_bucket{shmfeed_job=\"%s\",rank=\"%u\","
			"le=\"+Inf\"} %llu\n"
			"shmfeed_consumer_wait_seconds_sum{shmfeed_job=\"%s\",rank=\"%u\"} %.9f\n"
			"shmfeed_consumer_wait_seconds_count{shmfeed_job=\"%s\",rank=\"%u\"} "
			"%llu\n",
			job, r, (unsigned long long)seen, job, r, (double)q->wait_ns / 1e9, job, r,
			(unsigned long long)seen);
	}
	series(f, s, job, "rank", ranks, rank_series, sizeof(rank_series) / sizeof(rank_series[0]));
	series(f, s, job, "producer", prods, producer_series,
	       sizeof(producer_series) / sizeof(producer_series[0]));
}

/*
 * Write the text to the temporary file beside the target, then rename it over the
 * target. The temporary file is created, never opened through a link: its name (FILE.PID
 * .tmp) is easy to guess, and a link planted there would have the text written into the
 * file it names. What is found at the name is removed first (the name only: a link's
 * target is left alone). The rename goes only over the file this job wrote last: one put
 * at FILE since is someone else's, and -EEXIST leaves it alone.
 */
static int write_file(struct sf_metrics *m)
{
	int fd = sf__create_fresh(m->tmp_file);
	size_t done = 0;
	struct stat st, now;
	int r = 0;

	if (fd < 0)
		return fd;
	while (done < m->len && r == 0) {
		ssize_t k = write(fd, m->text + done, m->len - done);

		if (k < 0 && errno != EINTR)
			r = -errno;
		else if (k > 0)
			done += (size_t)k;
	}
	if (r == 0 && fstat(fd, &st) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && m->file_written && lstat(m->file, &now) == 0 &&
	    (now.st_dev != m->file_dev || now.st_ino != m->file_ino))
		r = -EEXIST;
	if (r == 0 && rename(m->tmp_file, m->file) < 0)
		r = -errno;
	if (r < 0) {
		unlink(m->tmp_file);
		return r;
	}
	m->file_dev = st.st_dev;
	m->file_ino = st.st_ino;
	return 0;
}

int sf__metrics_update(struct sf_metrics *m, const struct sf_stats *s, const char *job)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int r = 0;

	if (!m)
		return 0;
	f = open_memstream(&text, &len);
	if (!f)
		return -errno;
	render(f, s, job);
	if (fclose(f) != 0) {
		free(text);
		return -ENOMEM;
	}
	pthread_mutex_lock(&m->lock);
	free(m->text);
	m->text = text;
	m->len = len;
	pthread_mutex_unlock(&m->lock);
	/* Only this thread writes m->text, so reading it here needs no lock. */
	if (m->file && !m->file_taken) {
		r = write_file(m);
		if (!m->file_written) {
			m->file_written = r == 0;
			return r;
		}
		if (r == -EEXIST) {
			m->file_taken = 1;
			sf__log_error("the metrics file %s is no longer the one this job wrote: "
				      "another file took its place, which the job leaves alone "
				      "(it writes no metrics file any more)",
				      m->file);
			return 0;
		}
		if (r < 0 && !m->file_failed)
			sf__log_error("cannot write the metrics file %s: %s", m->file,
				      strerror(-r));
		else if (r == 0 && m->file_failed)
			sf__log_info("the metrics file %s is written again", m->file);
		m->file_failed = r < 0;
	}
	return r;
}

#ifdef SF_HAVE_MICROHTTPD
/* libmicrohttpd's thread: GET or HEAD /metrics gets a copy of the latest text. */
static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url,
			     const char *method, const char *version, const char *upload,
			     size_t *upload_len, void **con_cls)
{
	struct sf_metrics *m = cls;
	struct MHD_Response *resp;
	unsigned code = MHD_HTTP_OK;
	enum MHD_Result ret;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	} else if (strcmp(url, "/metrics")) {
		static char hint[] = "shmfeed serves /metrics\n";

		code = MHD_HTTP_NOT_FOUND;
		resp = MHD_create_response_from_buffer(sizeof(hint) - 1, hint,
						       MHD_RESPMEM_PERSISTENT);
	} else {
		pthread_mutex_lock(&m->lock);
		resp = MHD_create_response_from_buffer(m->len, m->text, MHD_RESPMEM_MUST_COPY);
		pthread_mutex_unlock(&m->lock);
		if (resp)
			MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
						"text/plain; version=0.0.4; charset=utf-8");
	}
	if (!resp)
		return MHD_NO;
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

static int start_http(struct sf_metrics *m, const char *addr, struct sf_err *e)
{
	struct sockaddr_storage ss = {0};
	int ipv6, fd;
	uint16_t port;
	const union MHD_DaemonInfo *info;

	if (sf__config_metrics_address(addr, &ipv6, &port) < 0)
		return sf__err(e, SF_E_CONFIG, "control.metrics: '%s' is not a loopback address",
			       addr);
	if (ipv6) {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;

		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		a6->sin6_addr = in6addr_loopback;
	} else {
		struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;

		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	/* A few scrapers at a time (their descriptors are in the launcher's budget), each
	 * closed after 10 s without traffic; polled with epoll, not select(), since the
	 * launcher's raised limit (sf__fds_raise()) allows descriptors above FD_SETSIZE. */
	m->http = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | (ipv6 ? MHD_USE_IPv6 : 0), port,
				   NULL, NULL, serve, m, MHD_OPTION_SOCK_ADDR, &ss,
				   MHD_OPTION_CONNECTION_LIMIT, SF_METRICS_HTTP_CONNECTIONS,
				   MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (!m->http)
		return sf__err(e, -EADDRINUSE,
			       "control.metrics: cannot serve HTTP on %s (the port is taken?)",
			       addr);
	info = MHD_get_daemon_info(m->http, MHD_DAEMON_INFO_LISTEN_FD);
	fd = info ? info->listen_fd : -1;
	m->listen_fd = fd;
	info = MHD_get_daemon_info(m->http, MHD_DAEMON_INFO_BIND_PORT);
	sf__log_info("metrics on http://%s:%u/metrics", ipv6 ? "[::1]" : "127.0.0.1",
		     info ? (unsigned)info->port : (unsigned)port);
	return 0;
}
#else
static int start_http(struct sf_metrics *m, const char *addr, struct sf_err *e)
{
	(void)m;
	return sf__err(e, SF_E_CONFIG,
		       "control.metrics: '%s' needs HTTP, and this shmfeed was built without "
		       "libmicrohttpd (install libmicrohttpd-dev and build again)",
		       addr);
}
#endif

static int lock_file(struct sf_metrics *m, const char *path, struct sf_err *e);
static int check_file(const char *path, struct sf_err *e);

void sf__metrics_close(struct sf_metrics *m)
{
	struct stat st;

	if (!m)
		return;
#ifdef SF_HAVE_MICROHTTPD
	if (m->http)
		MHD_stop_daemon(m->http);
#endif
	/* Metrics of a job that is gone would look like a job that stands still. Only the
	 * file this job wrote: not one that replaced it since. */
	if (m->file && m->file_written && stat(m->file, &st) == 0 && st.st_dev == m->file_dev &&
	    st.st_ino == m->file_ino)
		unlink(m->file);
	if (m->lock_fd >= 0)
		sf__path_unlock(m->lock_file, m->lock_fd);
	free(m->lock_file);
	pthread_mutex_destroy(&m->lock);
	free(m->file);
	free(m->tmp_file);
	free(m->text);
	free(m);
}

int sf__metrics_open(const struct sf_config *cfg, struct sf_metrics **ret_metrics, struct sf_err *e)
{
	struct sf_metrics *m;
	int r = 0;

	*ret_metrics = NULL;
	if (!cfg->metrics_file && !cfg->metrics)
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return sf__err(e, -ENOMEM, "out of memory");
	m->listen_fd = -1;
	m->lock_fd = -1;
	pthread_mutex_init(&m->lock, NULL);
	if (cfg->metrics_file) {
		r = lock_file(m, cfg->metrics_file, e);
		if (r == 0)
			r = check_file(cfg->metrics_file, e);
		if (r < 0) {
			sf__metrics_close(m);
			return r;
		}
		m->file = strdup(cfg->metrics_file);
		if (!m->file || asprintf(&m->tmp_file, "%s.%d.tmp", m->file, (int)getpid()) < 0) {
			m->tmp_file = NULL;
			r = sf__err(e, -ENOMEM, "out of memory");
		}
	}
	if (r == 0 && cfg->metrics)
		r = start_http(m, cfg->metrics, e);
	if (r < 0) {
		free(m->file);
		m->file = NULL; /* not ours to unlink */
		sf__metrics_close(m);
		return r;
	}
	*ret_metrics = m;
	return 0;
}

int sf__metrics_first(struct sf_metrics *m, const struct sf_stats *s, const char *job,
		      struct sf_err *e)
{
	int r = sf__metrics_update(m, s, job);

	if (r < 0) {
		sf__err(e, r, "cannot write the metrics file %s: %s", m->file ? m->file : "(none)",
			strerror(-r));
		/* Nothing was written: nothing to unlink. */
		free(m->file);
		m->file = NULL;
	}
	return r;
}

/* Whether the file begins as render() begins every metrics file. */
static int written_by_shmfeed(const char *path)
{
	static const char head[] = "# HELP shmfeed_";
	char buf[sizeof(head) - 1];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	ssize_t k;

	if (fd < 0)
		return 0;
	k = read(fd, buf, sizeof(buf));
	close(fd);
	return k == (ssize_t)sizeof(buf) && memcmp(buf, head, sizeof(buf)) == 0;
}

/*
 * Two jobs never write one metrics file: the job that writes FILE holds FILE.lock (a
 * flock, let go when the job ends, however it ends), and a file another job holds is
 * refused. A lock holds shmfeed's mark (one left by a killed job is taken over); any
 * other file there, empty or not, is someone's own, never taken or removed.
 */
static int busy(const char *path, const char *lock, struct sf_err *e)
{
	return sf__err(e, -EBUSY,
		       "the metrics file %s is written by a running job (it holds %s): name "
		       "another file",
		       path, lock);
}

static int not_a_lock(const char *lock, struct sf_err *e)
{
	return sf__err(e, SF_E_CONFIG,
		       "%s is there and is not a lock file of shmfeed's: remove it, or "
		       "name another metrics file",
		       lock);
}

static int lock_file(struct sf_metrics *m, const char *path, struct sf_err *e)
{
	int fd;

	if (asprintf(&m->lock_file, "%s.lock", path) < 0) {
		m->lock_file = NULL;
		return sf__err(e, -ENOMEM, "out of memory");
	}
	fd = sf__path_lock(m->lock_file);
	if (fd == -EBUSY)
		return busy(path, m->lock_file, e);
	if (fd == -ENOTEMPTY)
		return not_a_lock(m->lock_file, e);
	if (fd < 0)
		return sf__err(e, fd, "cannot write the metrics file %s: cannot create %s: %s",
			       path, m->lock_file, strerror(-fd));
	m->lock_fd = fd;
	return 0;
}

int sf__metrics_file_check(const char *path, struct sf_err *e)
{
	char *lock;
	int r;

	if (asprintf(&lock, "%s.lock", path) < 0)
		return sf__err(e, -ENOMEM, "out of memory");
	r = sf__path_lock_probe(lock);
	if (r == -EBUSY)
		r = busy(path, lock, e);
	else if (r == -ENOTEMPTY)
		r = not_a_lock(lock, e);
	free(lock);
	return r < 0 ? r : check_file(path, e);
}

static int check_file(const char *path, struct sf_err *e)
{
	char *dir = strdup(path), *slash;
	struct stat st;
	int r = 0;

	if (!dir)
		return sf__err(e, -ENOMEM, "out of memory");
	/* The file is written beside itself and renamed: its directory must take both. */
	slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	if (access(slash ? dir : ".", W_OK | X_OK) < 0)
		r = -errno;
	else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		r = -EISDIR;
	free(dir);
	if (r < 0)
		return sf__err(e, r, "cannot write the metrics file %s: %s", path, strerror(-r));
	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISREG(st.st_mode) || !written_by_shmfeed(path))
		return sf__err(
			e, SF_E_CONFIG,
			"the metrics file %s exists and is not a metrics file shmfeed wrote: "
			"the job would replace it, and remove it at the end (name a new "
			"file, or remove that one)",
			path);
	return 0;
}

void sf__metrics_after_fork(struct sf_metrics *m)
{
	if (m && m->listen_fd >= 0)
		close(m->listen_fd);
	/* The lock stays the launcher's: it goes when the job does, not with its children. */
	if (m && m->lock_fd >= 0)
		close(m->lock_fd);
}
