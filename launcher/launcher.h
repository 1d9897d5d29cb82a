/*
 * The supervisor of a job (`shmfeed run`): it opens the dataset, creates the arena,
 * forks the producers, serves the control sockets, runs the user's command and
 * supervises until that command exits or the job is stopped, then tears everything
 * down. The producer side is reached through struct sf_producer_ops, so tests can run
 * the same supervisor over synthetic producers; `shmfeed run` passes the real ones.
 *
 * Also here: the per-user runtime directory that holds the control sockets and each
 * job's discovery file, the job statistics sampled from the arena (for the control
 * replies, the PUB stream, progress and the summary), and the control client that
 * `shmfeed status` and `shmfeed top` use.
 */
#ifndef SF_LAUNCHER_LAUNCHER_H
#define SF_LAUNCHER_LAUNCHER_H

#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/config.h"
#include "common/errors.h"

struct sf_stats;

/* How the supervisor reaches the producer side. `ds` is opaque to it. */
struct sf_producer_ops {
	/* Open the sources once, before fork: 0 and *ret_ds, or an error with detail. */
	int (*open)(const struct sf_config *cfg, void **ret_ds, struct sf_err *e);
	void (*close)(void *ds);
	/* The arena geometry for the job. */
	int (*geometry)(const void *ds, const struct sf_config *cfg, struct sf_geometry *ret_geo,
			struct sf_err *e);
	/* The body of producer `index`, in the forked child: 0 once the job stops. */
	int (*main)(void *ds, struct sf_arena *a, uint32_t index, struct sf_err *e);
	/* Optional. The step of the end marker (UINT64_MAX: none), when the dataset knows it
	 * better than the epochs do (a mixture's schedule). */
	uint64_t (*end_step)(const void *ds);
	/* Optional. A mixture's sources: each one's delivered and target samples among the
	 * first s->samples, into s->source[] and s->n_sources (names not filled). */
	void (*mixture)(const void *ds, struct sf_stats *s);
};

/*
 * Exit status of a producer that failed on its data (SF_E_SOURCE or SF_E_TOKENIZER: a
 * malformed, changed or truncated source, an id outside the vocabulary). Another
 * producer would fail the same way, so the supervisor stops the job at once with the
 * message; any other failure is taken for a crash and restarted.
 */
#define SF_PRODUCER_EXIT_DATA 3

/* The real producers of producer/ (launcher/producer_ops.c). */
extern const struct sf_producer_ops sf__real_producers;

/* What `shmfeed run` was asked to do. */
struct sf_launch {
	const struct sf_config *cfg;
	const struct sf_producer_ops *ops;
	char *const *command; /* argv of the command to run, or NULL to serve until stopped */
	int progress;	      /* print a progress line while running and a summary at the end */
	uint32_t grace_ms;    /* after SIGTERM to the command, wait this long before SIGKILL */
};

/*
 * sf__launcher_run - run a job to its end. Returns 0 with the process exit status the
 * launcher should use in *ret_status (the command's status, 128+signal when it was
 * killed, 0 when stopped without a command) and in *ret_signal a signal it should end by
 * instead, once it has cleaned up (SIGINT: stopped by it, the command killed by it too;
 * else 0); or an error (detail in `e`) when the job could not start or stopped for a
 * reason of its own (a producer that keeps dying).
 */
int sf__launcher_run(const struct sf_launch *l, int *ret_status, int *ret_signal, struct sf_err *e);

/*
 * sf__run_command - the `shmfeed run` command line (argv[0] is "run") over the producer
 * side `ops`. Returns the process exit status.
 */
int sf__run_command(int argc, char **argv, const struct sf_producer_ops *ops);

/*
 * sf__runtime_dir - the private runtime directory: $XDG_RUNTIME_DIR/shmfeed, else
 * /run/shmfeed for root, else /tmp/shmfeed-UID; $SHMFEED_RUNTIME_DIR overrides. With
 * `create`, it is created mode 0700; in every case it must be a directory owned by the
 * caller with no group or other access. Returns 0 and the path in buf.
 */
int sf__runtime_dir(char *buf, size_t len, int create, struct sf_err *e);

/* Endpoints and discovery file of a job in the runtime directory. */
struct sf_job_paths {
	char dir[256];
	char ctl_path[320];  /* JOB.ctl: the ipc socket of the ROUTER */
	char pub_path[320];  /* JOB.pub: the ipc socket of the PUB */
	char info_path[320]; /* JOB.json: endpoints, pid, CURVE public key */
};

int sf__job_paths(const char *job, int create, struct sf_job_paths *ret, struct sf_err *e);

/* sf__job_paths_check - what sf__job_paths(job, 1, ...) would refuse, making nothing (a
 * runtime directory not made yet is no refusal), and sf__job_info_path_free(). */
int sf__job_paths_check(const char *job, struct sf_err *e);

/*
 * sf__job_info_path_free - whether what is at `path` may be replaced by job `job`'s
 * discovery file: nothing, or one of this job left by a launcher that was killed (the
 * arena, made exclusively, shows that no launcher of the job runs). Anything else is
 * somebody's file (-EEXIST, said): a runtime directory only has to be private
 * (SHMFEED_RUNTIME_DIR=$HOME qualifies), and a job named `package` would have replaced,
 * then removed, package.json there.
 */
int sf__job_info_path_free(const char *path, const char *job, struct sf_err *e);

/*
 * The claim of a job on its ipc:// endpoint (launcher/endpoint.c): an flock on PATH.lock
 * held for the life of the job, and the device and inode of the sockets it bound.
 */
struct sf_ipc_claim {
	char path[2][400];	 /* the control socket, then the stats socket */
	char lock[416];		 /* PATH.lock beside the control socket */
	int lock_fd;		 /* -1: nothing held */
	int private_dir;	 /* the paths are in the private runtime directory */
	uint64_t dev[2], ino[2]; /* of the sockets bound; 0: none */
};

/*
 * sf__ipc_claim - claim the socket paths of an ipc:// endpoint before binding them: lock
 * CTL_PATH.lock (SF_E_BUSY, naming the holder's pid, while another job holds it), then
 * make way at both paths. A path that exists is refused (-EEXIST, with its name) unless
 * it is a stale socket of this user that a dead job recorded in the lock file, or any
 * socket of this user when `private_dir` (the private runtime directory). Returns 0 with
 * the lock held; on failure nothing is held and a lock file it made is gone.
 */
int sf__ipc_claim(struct sf_ipc_claim *c, const char *ctl_path, const char *pub_path,
		  int private_dir, struct sf_err *e);

/*
 * sf__ipc_endpoint_check - for an ipc:///DIR/NAME control endpoint, that DIR is a
 * directory; 0 for any other endpoint. `check` said such a job was valid, and `run` failed
 * only once its arena was made.
 */
int sf__ipc_endpoint_check(const char *endpoint, struct sf_err *e);

/* sf__ipc_claim_bound - record the socket just bound at claimed path i (0: control,
 * 1: stats), so that sf__ipc_release() removes it whatever fails after. */
int sf__ipc_claim_bound(struct sf_ipc_claim *c, int i, struct sf_err *e);

/*
 * sf__ipc_release - unlink the sockets the job bound (only while they are still the ones
 * recorded) and the lock file, and let go of the lock. Safe on a claim that holds nothing.
 */
void sf__ipc_release(struct sf_ipc_claim *c);

/*
 * sf__fds_needed - the file descriptors a process needs in all to open `more` beside
 * those open now (in *ret_open), and its soft RLIMIT_NOFILE (*ret_limit, UINT64_MAX when
 * unlimited). libzmq does not fail when it runs out: it asserts (epoll_create in its
 * threads), so every program here checks this before its first zmq context.
 */
uint64_t sf__fds_needed(uint64_t more, uint64_t *ret_open, uint64_t *ret_limit);

/*
 * sf__fds_raise - raise the soft RLIMIT_NOFILE to the hard one (once; nothing if that
 * fails). The launcher's control sockets accept connections in libzmq's I/O thread, and
 * its ipc listener aborts when accept() finds no descriptor: a burst of connections
 * larger than what is left under the limit, before the connection caps shut them, killed
 * the job. The soft limit (1,024 by default on Debian, with a hard one of 524,288) is
 * there for programs that select(); the launcher polls.
 *
 * sf__fds_restore - in a child forked after sf__fds_raise(): the soft limit as it was,
 * so that the training command runs under the limit it was given (producers keep the
 * raised one).
 */
void sf__fds_raise(void);
void sf__fds_restore(void);

/* What a client needs to reach a job, read from its discovery file. */
struct sf_job_info {
	char job[SF_JOB_NAME_MAX];
	char control[320];
	char stats[320];
	char curve_server_public[41]; /* empty without CURVE */
	int32_t pid;
	/* The client's CURVE key pair file (not from the discovery file: the caller's
	 * --key); empty: $SHMFEED_CURVE_KEY. */
	char client_key_file[512];
};

/*
 * sf__launcher_fds_check - refuse a job that would run out of file descriptors, before
 * anything of it exists: its producers, control sockets (with a tcp endpoint, the
 * connections their caps allow), the metrics server's connections and a margin, beside
 * the descriptors open now, against the soft RLIMIT_NOFILE, which it first raises to the
 * hard one (sf__fds_raise(): `check` and `run` count alike). libzmq does not fail cleanly
 * there: it asserts (epoll_create in its I/O thread) and the launcher would die by SIGABRT
 * with its arena left in /dev/shm.
 */
int sf__launcher_fds_check(uint32_t producers, const struct sf_config *cfg, struct sf_err *e);

/* sf__job_info_file_read - read the discovery file at `path`; SF_E_PROTOCOL: not one. */
int sf__job_info_file_read(const char *path, struct sf_job_info *ret, struct sf_err *e);

/*
 * sf__job_info_read - read the discovery file of `job` (or, when job is NULL, of the
 * only job running for this user). -ENOENT when there is none; SF_E_BUSY with the names
 * when job is NULL and several run.
 */
int sf__job_info_read(const char *job, struct sf_job_info *ret, struct sf_err *e);

/*
 * A cap on the connections of a tcp control or stats socket (launcher/conn_cap.c).
 * libzmq accepts every connection a ROUTER or PUB socket is offered, each a descriptor of
 * the launcher's until the peer leaves or its handshake times out: a client opening a
 * thousand of them took every descriptor and the next producer restart failed with
 * EMFILE, stopping the job. The socket's monitor reports each connection accepted and
 * gone, with its descriptor; over the cap, one is shut at once (libzmq then sees its end
 * and closes it): the oldest of those still inside SF_TCP_HANDSHAKE_MS (which may not
 * have authenticated yet), so that a flood of new ones does not lock clients out, else
 * the newest. One older than that has finished its handshake (with CURVE: an allowed
 * client) and is kept.
 */
#define SF_TCP_MAX_CONNECTIONS 64u  /* each; `status`, `top` and `stop` take one a run */
#define SF_TCP_HANDSHAKE_MS    3000 /* libzmq's ZMQ_HANDSHAKE_IVL for them (default 30 s) */

struct sf_conn {
	int fd;
	int shut;	   /* shut, not yet reported gone */
	uint64_t since_ns; /* accepted */
};

struct sf_conn_cap {
	void *mon;	  /* PAIR reading the monitor's events; NULL: no cap */
	void *sock;	  /* the socket monitored */
	const char *what; /* "control" or "stats", for the log */
	int port;	  /* the socket's tcp port: a descriptor is checked against it */
	const char *path; /* or, NULL for tcp, its ipc path (@NAME: abstract) */
	struct sf_conn *conns; /* accepted and not yet reported gone */
	uint32_t n, cap;
	uint64_t shut; /* connections shut for the cap, not yet said in the log */
	uint64_t logged_ns;
};

/*
 * sf__conn_cap_open - monitor `sock`, to be bound to tcp port `port` or (path not NULL)
 * to ipc `path`, through inproc://NAME of `zctx`, and set its handshake interval: before
 * the bind, so that every connection is counted.
 */
int sf__conn_cap_open(struct sf_conn_cap *c, void *zctx, void *sock, const char *name,
		      const char *what, int port, const char *path, struct sf_err *e);
/* sf__conn_cap_serve - handle the events waiting on c->mon (polled for ZMQ_POLLIN). */
void sf__conn_cap_serve(struct sf_conn_cap *c);
/* sf__conn_cap_close - stop monitoring; before the monitored socket is closed. */
void sf__conn_cap_close(struct sf_conn_cap *c);

/*
 * CURVE for the control and stats sockets (launcher/curve.c). The server side holds its
 * key pair, the allow-list of client public keys (binary, 32 bytes each) and the ZAP
 * handler socket that applies it.
 */
struct sf_curve_server {
	int enabled;
	char public_key[41], secret_key[41]; /* Z85 */
	uint8_t (*allowed)[32];
	uint32_t n_allowed;
	void *zap;	  /* REP socket at inproc://zeromq.zap.01 */
	uint64_t refused; /* clients refused so far */
};

/*
 * sf__curve_read_key_pair - read a key pair file (ZeroMQ certificate format: a line
 * secret-key = "Z85", optionally public-key = "Z85", which must match). The file must be
 * a regular file of this user, mode 0600 or stricter. Returns 0 and both keys in Z85.
 */
int sf__curve_read_key_pair(const char *path, char ret_public[41], char ret_secret[41],
			    struct sf_err *e);

/*
 * sf__curve_read_allowed - read an allow-list: one Z85 public key a line, optionally
 * followed by a comment; blank lines and lines starting with # are skipped. Returns 0,
 * the keys (binary, freed by the caller with free()) and their count (at least 1).
 */
int sf__curve_read_allowed(const char *path, uint8_t (**ret_keys)[32], uint32_t *ret_count,
			   struct sf_err *e);

/* sf__curve_server_load - the server keys and allow-list of cfg (disabled without). */
int sf__curve_server_load(const struct sf_config *cfg, struct sf_curve_server *ret,
			  struct sf_err *e);
void sf__curve_server_free(struct sf_curve_server *c);

/*
 * sf__curve_server_setup - bind the ZAP handler in `zctx` and make each of `socks` a
 * CURVE server with the job's key. Call before binding the sockets.
 */
int sf__curve_server_setup(struct sf_curve_server *c, void *zctx, void *const *socks,
			   uint32_t n_socks, struct sf_err *e);

/* sf__curve_zap_serve - answer every ZAP request waiting on c->zap; never blocks. */
void sf__curve_zap_serve(struct sf_curve_server *c);

/*
 * sf__curve_client_setup - make `sock` a CURVE client of the job in `info` when its
 * discovery file names a server key, with the key pair of info->client_key_file or
 * $SHMFEED_CURVE_KEY; SF_E_CONFIG when neither is given. 0 (nothing done) without CURVE.
 */
int sf__curve_client_setup(void *sock, const struct sf_job_info *info, struct sf_err *e);

/*
 * sf__curve_keygen - write a new key pair to `path` (mode 0600) and its public key to
 * PATH.pub (one allow-list line); existing files are never replaced. Returns 0 and the
 * public key.
 */
int sf__curve_keygen(const char *path, char ret_public[41], struct sf_err *e);

/* Statistics of a job, sampled from its arena. */
#define SF_STATS_MAX_RANKS     64u /* per-rank detail beyond this is summed */
#define SF_STATS_MAX_PRODUCERS 64u

struct sf_stats_rank {
	uint32_t free, filling, ready, claimed;
	uint64_t next_step;
	uint64_t consumer_pid;
	uint64_t wait_ns;		     /* time its consumers spent waiting, since the start */
	uint64_t wait_hist[SF_WAIT_BUCKETS]; /* their waits by floor(log2(ns)), since the start */
	uint32_t asleep;		     /* its consumer sleeps on the ring for a batch now */
	uint64_t stalls; /* reads that waited SF_CONSUMER_STALL_NS or more, since the start */
	/* Over the last interval: the share of it spent waiting (the rank starves as it nears
	 * 1), the batches read and their wait percentiles (bucket upper bounds, 0: none).
	 * A wait counts once its batch arrives, except that a consumer asleep at both ends
	 * of an interval with no batch read in it waited the whole interval. */
	double waiting;
	uint64_t interval_batches;
	uint64_t interval_wait_p50_ns, interval_wait_p99_ns;
};

struct sf_stats_producer {
	int32_t pid;
	uint32_t incarnation;
	uint64_t batches;
	uint64_t busy_ns;
	double utilization; /* busy fraction over the last interval */
	uint32_t stalled;   /* the supervisor deems it stalled (see producers.stall_timeout) */
	uint64_t stalls;    /* times the supervisor killed and replaced it for stalling */
	uint64_t silent_ns; /* how long its heartbeat had not moved */
};

/* A mixture's source: its samples in the global prefix the ranks have read. */
#define SF_STATS_MAX_SOURCES 64
struct sf_stats_source {
	char name[64];
	uint64_t delivered; /* samples from it among the first `samples` */
	double target;	    /* weight x samples, phase by phase */
};

struct sf_stats {
	uint64_t t_ns; /* CLOCK_MONOTONIC of the sample */
	uint64_t uptime_ns;
	uint32_t state; /* SF_JOB_* */
	uint32_t ended; /* every local rank has read the end marker of a finite run */
	uint32_t ranks, producers;
	uint64_t batches;     /* batches consumers read since the start (not end markers) */
	uint64_t tokens;      /* B x T tokens of those batches */
	uint64_t produced;    /* batches published by producers */
	double batches_per_s; /* over the last interval */
	double tokens_per_s;
	uint64_t wait_samples;
	uint64_t wait_p50_ns; /* consumer waits (upper bound of the log2 bucket) */
	uint64_t wait_p99_ns;
	uint64_t restarts;
	uint64_t stalls; /* producers killed and replaced for stalling */
	uint64_t repairs;	 /* dead participants repaired */
	uint64_t slots_repaired; /* the slots those repairs took back */
	uint64_t skipped;
	uint64_t tokens_produced; /* tokens the producers wrote into slots */
	uint64_t tokens_encoded;  /* tokens their tokenizers produced (raw text) */
	struct sf_stats_rank rank[SF_STATS_MAX_RANKS];
	uint64_t least_step; /* the least next step of all local ranks, those past rank[] too */
	struct sf_stats_producer producer[SF_STATS_MAX_PRODUCERS];
	/* Mixtures: the global samples every local rank has read (the least next step of
	 * the ranks, times B x W) and each source's share of them. */
	uint64_t samples;
	uint32_t n_sources;	/* in source[]: the first SF_STATS_MAX_SOURCES; 0: not a mixture */
	uint32_t sources_total; /* the mixture's sources, also those past source[] */
	struct sf_stats_source source[SF_STATS_MAX_SOURCES];
};

/*
 * sf__stats_sample - sample the arena into *s; `prev` (may be NULL) is the previous
 * sample, for rates and utilization; batches are those the consumers took; `end_step`
 * is the step of a finite run's end marker (sf__stats_end_step()), which a consumer
 * releases but which is no batch.
 */
void sf__stats_sample(const struct sf_arena *a, const struct sf_stats *prev,
		      uint64_t end_step, uint64_t started_ns, struct sf_stats *s);

/*
 * sf__stats_interval_of - give *s the figures of an interval that `last` computed
 * (rates, utilization, each rank's waiting share, batches and wait percentiles), over
 * those *s has of the time since `last`'s start.
 */
void sf__stats_interval_of(struct sf_stats *s, const struct sf_stats *last);

/*
 * sf__stats_end_step - the first step past the data of a run of `epochs` epochs (0:
 * unlimited, UINT64_MAX): the step whose slot carries the end marker, as the producers
 * compute it.
 */
uint64_t sf__stats_end_step(const struct sf_geometry *g, uint64_t epochs);

/*
 * The job's metrics in the Prometheus text format (launcher/metrics.c), for
 * control.metrics_file and control.metrics. sf__metrics_open() sets *ret_metrics to NULL
 * when neither is configured, and the other calls accept NULL. sf__metrics_first() writes
 * the first sample and fails when the file cannot be written; later failures of
 * sf__metrics_update() are logged once and retried every interval. sf__metrics_close()
 * stops the HTTP server and removes the file if it is still the one the job wrote.
 * sf__metrics_after_fork(), in a child, closes its copy of the listening socket. All
 * return 0 or a negative error.
 */
/* Scrapers served at once, and the descriptors the HTTP server holds at most: theirs,
 * its listening socket, and its internal thread's pipe or eventfd with room to spare. */
#define SF_METRICS_HTTP_CONNECTIONS 16u
#define SF_METRICS_HTTP_FDS	    (SF_METRICS_HTTP_CONNECTIONS + 4u)

struct sf_metrics;
int sf__metrics_open(const struct sf_config *cfg, struct sf_metrics **ret_metrics,
		     struct sf_err *e);
int sf__metrics_first(struct sf_metrics *m, const struct sf_stats *s, const char *job,
		      struct sf_err *e);
int sf__metrics_update(struct sf_metrics *m, const struct sf_stats *s, const char *job);
void sf__metrics_close(struct sf_metrics *m);
void sf__metrics_after_fork(struct sf_metrics *m);

/*
 * sf__metrics_file_check - what `check` can tell of control.metrics_file before a run
 * writes it: its directory exists and is writable, and the file is not there or is a
 * metrics file shmfeed wrote (one that begins as they do), so that a job never replaces
 * or removes anyone else's file; sf__metrics_open() checks the same. Returns 0 or a
 * negative error with run's message.
 */
int sf__metrics_file_check(const char *path, struct sf_err *e);

/* sf__stats_json - the stats as the JSON object of replies and the PUB stream. */
int sf__stats_json(const struct sf_stats *s, const char *job, char *buf, size_t len);

/*
 * The human forms of a rate and of a duration, for the supervisor's progress lines and
 * `shmfeed status`/`top`: "12.34 M" (the caller appends the unit), "1.50 ms".
 */
void sf__stats_human_rate(double v, char *buf, size_t len);
void sf__stats_human_ns(uint64_t ns, char *buf, size_t len);
/*
 * sf__stats_human_below - a wait percentile of the telemetry (the top of its power-of-two
 * bucket, so no wait counted there reached it) as "<4.1 us": printed as a value it read
 * up to twice the waits it stands for.
 */
void sf__stats_human_below(uint64_t ns, char *buf, size_t len);

/*
 * The control client: one request, one reply (a DEALER socket with a timeout).
 * `request` is the JSON text; the reply is written NUL-terminated into `reply`.
 */
int sf__ctl_call(const struct sf_job_info *info, const char *request, int timeout_ms, char *reply,
		 size_t reply_len, struct sf_err *e);

#endif
