/*
 * The supervisor of `shmfeed run`. One thread, one loop: zmq_poll over the control
 * ROUTER socket and a signalfd that carries SIGCHLD, SIGINT, SIGTERM and SIGHUP, with a
 * timeout of at most SUPERVISE_TICK_MS. A producer's death therefore wakes the loop at
 * once (SIGCHLD); it is reaped, its slots are repaired (the process is known dead, so
 * the fence holds) and a replacement starts, unless that producer keeps dying, which
 * stops the job with the reason. Dead consumers (ranks are not our children) are found
 * by the tick and repaired the same way. Producers whose heartbeat stops are reported
 * stalled, then killed and handled as dead (check_producers()). Stats are sampled every
 * stats interval and published on the PUB socket.
 *
 * Shutdown, whatever starts it (the command exits, a stop request, a signal, a failing
 * producer): the job state becomes STOPPING, producers see it and return, stragglers are
 * killed after a grace period, the arena, the sockets and the discovery file are
 * removed, and the launcher exits with the command's status.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/node_ranks.h"
#include "common/control.h"
#include "common/cpus.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/slot.h"
#include "launcher/launcher.h"

#define SUPERVISE_TICK_MS    50	  /* longest sleep of the loop: consumer checks, deadlines */
#define PRODUCER_GRACE_MS    3000 /* producers get this long to return after STOPPING */
#define HEALTHY_RUN_NS	     (30ull * 1000000000ull) /* a producer alive this long is healthy */
#define STARTUP_STALL_FACTOR 4 /* stall timeouts a producer gets before its first heartbeat */
/* A restart that finds no file descriptor (EMFILE, ENFILE: a burst of tcp connections
 * before the cap shuts them) is tried again this often, for this long. */
#define RESPAWN_RETRY_NS   (200ull * 1000000ull)
#define RESPAWN_GIVE_UP_NS (30ull * 1000000000ull)
/* The command's leftovers listed at once (end_orphans()). */
#define ORPHANS_MAX 256

/*
 * Descriptors the supervisor holds beyond those open when it starts: the signalfd, the
 * lock of an ipc endpoint, libzmq's (an eventfd and an epoll descriptor each for its
 * reaper and I/O threads, one eventfd per socket with the ZAP handler's, a listener per
 * bound endpoint: 9), and the arena's and the discovery file's while they are made: 16
 * with room to spare. Each producer adds the read end of its error pipe (two while it is
 * made). The margin is for control clients connected at once and for what a producer
 * opens on its own.
 */
#define FDS_FIXED  16u
#define FDS_MARGIN 16u

struct producer {
	pid_t pid;	 /* 0: not running */
	int errfd;	 /* read end of the pipe its last error arrives on */
	uint32_t deaths; /* deaths since it last ran healthy */
	uint64_t started_ns;
	int finished; /* returned 0: it will not be restarted */
	/* Stall watch (check_producers()). */
	uint64_t fill_word;    /* word of the FILLING slot it was last seen holding; 0: none */
	uint32_t fill_slot;    /* that slot's index over all rings */
	uint64_t fill_seen_ns; /* when it was first seen holding that slot at that lap */
	uint64_t silent_ns;    /* how long its heartbeat had not moved at the last look */
	uint64_t last_beat_ns; /* its last sign of life at the last look */
	int stalled;	       /* reported stalled: killed once silent for the stall timeout */
	int stall_killed;      /* SIGKILLed for stalling; repaired once reaped */
	uint64_t stalls;       /* times it was killed for stalling */
	uint64_t respawn_ns;   /* a restart short of descriptors: tried again then (0: none) */
	uint64_t respawn_since_ns;
};

struct supervisor {
	const struct sf_launch *l;
	const struct sf_config *cfg;
	char config_path[PATH_MAX]; /* the job file, absolute: the command's SHMFEED_CONFIG */
	void *ds;
	struct sf_arena *a;
	struct sf_geometry geo;
	struct sf_job_paths paths;
	dev_t info_dev; /* the discovery file this job wrote (info_ino 0: none) */
	ino_t info_ino;
	char ctl_ep[400], pub_ep[400];
	struct sf_ipc_claim ipc; /* of an ipc:// endpoint; lock_fd -1 otherwise */
	struct sf_curve_server curve;
	void *zctx, *router, *pub;
	struct sf_conn_cap cap[2]; /* of the router and the PUB socket, with a tcp endpoint */
	int sfd;
	sigset_t mask; /* blocked for the signalfd: SIGCHLD and the stop signals not ignored */
	sigset_t old_mask;
	int hup_seen; /* SIGHUPs received */
	pid_t self;
	/* Children of this process before the launcher started (`sidecar & exec shmfeed
	 * run ...`): never the command's leftovers, forgotten once reaped. */
	pid_t before[256];
	size_t n_before;

	pid_t cmd_pid;
	int cmd_status;	 /* exit status to return */
	int cmd_termsig; /* the signal that killed the command, 0 if none */
	int cmd_done;
	int cmd_interrupted; /* the job's stop signal was a SIGINT that came while it ran */
	char cmd_how[96]; /* how it ended, for the summary: "exit status 1", "killed by ..." */
	/* What the command left behind when it ended, served until it exits: SIGTERMed at
	 * once, given until orphans_at (0: not yet looked for; a second stop signal sets it to
	 * its instant: no time given), then ended with the job. */
	uint64_t orphans_at;
	int orphans_done;
	/* Those leftovers SIGTERMed, each once as it appeared: a leftover's own children are
	 * the launcher's when it dies (ORPHANS_MAX remembered; the rest wait for SIGKILL). */
	pid_t termed[ORPHANS_MAX];
	size_t n_termed;
	int stop_signo;	     /* the signal that stopped the job, 0 if none did */
	int masked;	     /* the stop signals blocked (old_mask to restore) */
	uint64_t checked_ns; /* the last check_producers() */

	struct producer prod[SF_MAX_PRODUCERS];
	uint32_t n_prod;
	int pin_producers; /* producers.cpus given: each producer runs on producer_cpus */
	cpu_set_t producer_cpus;
	int paused;

	int stopping;
	int failed; /* the job stopped for a reason of its own */
	char reason[512];
	uint64_t cmd_kill_at, prod_kill_at;
	/* The producers left at the end got SIGKILL; prod_kill_at is then when the launcher
	 * stops waiting for them (ORPHAN_KILL_WAIT_MS later). */
	int prod_killed;
	uint32_t term_count;

	uint64_t started_ns;
	uint64_t resumed_ns; /* last resume: stopped producers do not heartbeat while paused */
	uint64_t stalls;     /* producers killed for stalling */
	uint64_t max_healthy_silence_ns; /* longest silence a producer ended itself */
	uint64_t end_step; /* the end marker's step of a finite run (sf__stats_end_step()) */
	/* A control seek waiting for a slot being filled: its reply goes to `peer` once
	 * the ring is repositioned, and the loop serves everything else meanwhile. */
	struct {
		int active;
		struct sf_ctl_request req;
		zmq_msg_t peer;
		int delim;
	} seek;
	uint64_t next_tick_ns, progress_ticks;
	/* The figures at the last progress line, whose rates cover the time since. */
	uint64_t progress_t_ns, progress_tokens;
	/* The last tick's figures (before the first tick, those the job started with: the
	 * first interval runs from the start), and the figures computed at it. */
	struct sf_stats prev, cur;
	int ticked;		    /* a tick has computed a whole interval's figures into cur */
	struct sf_metrics *metrics; /* control.metrics_file and control.metrics; NULL: none */
	int32_t consumer_seen[SF_MAX_RANKS];
};

static uint64_t ms_ns(uint64_t ms)
{
	return ms * 1000000ull;
}

static int status_of(int wstatus)
{
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	if (WIFSIGNALED(wstatus))
		return 128 + WTERMSIG(wstatus);
	return 1;
}

static void describe_status(int wstatus, char *buf, size_t len)
{
	if (WIFEXITED(wstatus))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(wstatus));
	else if (WIFSIGNALED(wstatus))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(wstatus),
			 sigdescr_np(WTERMSIG(wstatus)) ? sigdescr_np(WTERMSIG(wstatus)) : "?");
	else
		snprintf(buf, len, "status 0x%x", wstatus);
}

static const int stop_signals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};

/* In a forked child: die with the supervisor, and undo what the supervisor set up.
 * `producer` keeps the descriptor limit the launcher raised
 * (its file cache is sized by it; the soft limit a shell left gave it too few to lock
 * its entry, and restarts for a failure that would always come: a review); the command
 * gets the soft limit it was given back, for programs that select(). */
static void child_setup(struct supervisor *S, int deathsig, bool producer)
{
	prctl(PR_SET_PDEATHSIG, deathsig);
	/* The supervisor may have died between fork() and prctl(). */
	if (getppid() != S->self)
		_exit(127);
	close(S->sfd);
	/* The endpoint's lock is the supervisor's: a child that outlived it must not keep
	 * its job's endpoint looking in use. */
	if (S->ipc.lock_fd >= 0)
		close(S->ipc.lock_fd);
	sf__metrics_after_fork(S->metrics);
	sf__log_after_fork();
	if (!producer)
		sf__fds_restore();
	/* A producer's log line to a stderr whose reader has gone fails (EPIPE); dying of
	 * SIGPIPE would turn a data error, sent to the launcher after it, into a crash. */
	signal(SIGPIPE, producer ? SIG_IGN : SIG_DFL);
	if (producer) {
		/* The launcher stops producers through the job state (and SIGKILL): a stop
		 * signal sent to every process (systemd's control group, Slurm's scancel)
		 * would otherwise kill them mid-fill and count as crashes. */
		for (size_t k = 0; k < sizeof(stop_signals) / sizeof(stop_signals[0]); k++)
			signal(stop_signals[k], SIG_IGN);
		/* A process group of its own: the signals a terminal sends its foreground
		 * group (Ctrl-C, Ctrl-\, Ctrl-Z) reach the supervisor, which stops the
		 * producers through the job state, and not the producers mid-fill. */
		setpgid(0, 0);
		/* That group is a background one on the terminal: under `stty tostop` a log
		 * line would stop the producer (SIGTTOU), and a data error it was saying
		 * became a stall, a restart and the same again, the error never told and the
		 * job not stopped (a review). Ignored, the line is written. */
		signal(SIGTTOU, SIG_IGN);
	}
	/* Last: a stop signal pending since the fork (a Ctrl-C in the first milliseconds
	 * of a run) is then discarded for a producer, whose dispositions and group are set
	 * already; it killed one before, counted as a crash and restarted (a review). */
	sigprocmask(SIG_SETMASK, &S->old_mask, NULL);
}

/* The producers running. */
static uint32_t started_producers(const struct supervisor *S)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < S->n_prod; i++)
		n += S->prod[i].pid > 0;
	return n;
}

static int spawn_producer(struct supervisor *S, uint32_t i)
{
	struct producer *p = &S->prod[i];
	int pfd[2];
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int r = -errno;

		close(pfd[0]);
		close(pfd[1]);
		return r;
	}
	if (pid == 0) {
		struct sf_err e = {0};
		char who[32];
		int r;

		close(pfd[0]);
		child_setup(S, SIGKILL, true);
		/*
		 * The launcher's other descriptors are not the producer's: libzmq's sockets
		 * and event descriptors, the metrics server's connections, the other
		 * producers' pipes. A producer restarted while a scrape was open held that
		 * connection for its life (a review). It keeps its end of this pipe; the
		 * arena's descriptors, closed at the fork, it opens again by name.
		 */
		if (pfd[1] > 3)
			close_range(3, (unsigned)pfd[1] - 1, 0);
		close_range((unsigned)pfd[1] + 1, ~0u, 0);
		snprintf(who, sizeof(who), "producer %u", i);
		sf__log_set_who(who);
		/* producers.cpus: set in the child, before it reads anything, so that its
		 * pages are first touched on the CPUs it will run on. */
		if (S->pin_producers &&
		    sched_setaffinity(0, sizeof(S->producer_cpus), &S->producer_cpus) < 0)
			r = sf__err(&e, -errno, "cannot run on CPUs %s (producers.cpus): %s",
				    S->cfg->producer_cpus, strerror(errno));
		else
			r = S->l->ops->main(S->ds, S->a, i, &e);
		if (r < 0) {
			const char *msg = e.msg[0] ? e.msg : sf_strerror(r);

			sf__log_error("%s", msg);
			/* The supervisor quotes it when it stops the job: at once for a data
			 * error, or once this producer keeps failing. */
			if (write(pfd[1], msg, strlen(msg)) < 0)
				_exit(1);
			_exit(r == SF_E_SOURCE || r == SF_E_TOKENIZER ? SF_PRODUCER_EXIT_DATA : 1);
		}
		_exit(0);
	}
	/* Its own group from the parent's side too, before anything can signal the
	 * terminal's group again (either call may come first; the loser's fails). */
	setpgid(pid, pid);
	close(pfd[1]);
	p->pid = pid;
	p->errfd = pfd[0];
	p->started_ns = sf__now_ns();
	p->fill_word = 0;
	p->silent_ns = 0;
	p->last_beat_ns = 0;
	p->stalled = 0;
	p->stall_killed = 0;
	/* Not stopped even while the job is paused: a stop could land before the child has
	 * run its fork handlers, leaving it holding the supervisor's locks if the supervisor
	 * then died; a paused job hands out no work, so the new producer idles in its claim. */
	return 0;
}

static void set_paused(struct supervisor *S, int paused)
{
	S->paused = paused;
	/* Stopped producers hold nothing a consumer needs beyond the slot they may be
	 * filling, which they finish once continued. */
	for (uint32_t i = 0; i < S->n_prod; i++)
		if (S->prod[i].pid > 0)
			kill(S->prod[i].pid, paused ? SIGSTOP : SIGCONT);
	/* Stopped producers do not heartbeat: their silence counts from the resume. */
	S->resumed_ns = sf__now_ns();
	sf__arena_set_job_state(S->a, paused ? SF_JOB_PAUSED : SF_JOB_RUNNING);
}

/* A stopping job that was paused resumes: its command may read its last batches as it
 * finishes (a trainer completing its step or saving a checkpoint on SIGTERM). */
static void resume_to_stop(struct supervisor *S)
{
	if (!S->paused)
		return;
	set_paused(S, 0);
	sf__log_info("resumed: the job is stopping");
}

static void begin_stop(struct supervisor *S, int failed, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void begin_stop(struct supervisor *S, int failed, const char *fmt, ...)
{
	va_list ap;

	/* A failure while the job stops already (its producers serving the command's last
	 * batches) makes the stop a failure, with its reason. */
	if (S->stopping && (!failed || S->failed))
		return;
	S->failed = failed;
	va_start(ap, fmt);
	vsnprintf(S->reason, sizeof(S->reason), fmt, ap);
	va_end(ap);
	if (S->stopping)
		return;
	S->stopping = 1;
	resume_to_stop(S);
	if (S->cmd_pid > 0 && !S->cmd_done) {
		/* Ask the command to finish first; producers keep serving it meanwhile. */
		kill(S->cmd_pid, SIGTERM);
		S->cmd_kill_at = sf__now_ns() + ms_ns(S->l->grace_ms);
		return;
	}
	S->cmd_kill_at = 0;
}

/*
 * Whether the producers serve: while the job runs, and, once it stops, while its command
 * finishes (a trainer may read its last batches as it completes its step or saves a
 * checkpoint), unless the stop is a failure. A producer that dies then is restarted and
 * one that stalls replaced, as before the stop.
 */
static bool serving(const struct supervisor *S)
{
	return !S->stopping || (S->cmd_pid > 0 && (!S->cmd_done || !S->orphans_done) && !S->failed);
}

/* Once the command is gone (or there is none), the producers stop. */
static void stop_producers(struct supervisor *S)
{
	if (S->prod_kill_at)
		return;
	sf__arena_set_job_state(S->a, SF_JOB_STOPPING);
	S->prod_kill_at = sf__now_ns() + ms_ns(PRODUCER_GRACE_MS);
}

static void producer_died(struct supervisor *S, uint32_t i, int wstatus)
{
	struct producer *p = &S->prod[i];
	char how[96], msg[512] = "";
	ssize_t n;
	int r, repaired, stall_killed = p->stall_killed;

	n = read(p->errfd, msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = 0;
	close(p->errfd);
	p->errfd = -1;
	p->pid = 0;
	repaired = sf__arena_repair(S->a, i);
	if (!serving(S) || (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
		p->finished = 1;
		return;
	}
	if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == SF_PRODUCER_EXIT_DATA) {
		begin_stop(S, 1, "producer %u: data error: %s; stopping the job", i,
			   msg[0] ? msg : "(no message)");
		sf__log_error("%s", S->reason);
		return;
	}
	describe_status(wstatus, how, sizeof(how));
	if (stall_killed)
		snprintf(how, sizeof(how), "killed after stalling");
	if (sf__now_ns() - p->started_ns > HEALTHY_RUN_NS)
		p->deaths = 0;
	p->deaths++;
	sf__log_error("producer %u died (%s)%s%s; %d slot%s repaired", i, how, msg[0] ? ": " : "",
		      msg, repaired > 0 ? repaired : 0, repaired == 1 ? "" : "s");
	if (p->deaths > S->cfg->max_restarts) {
		begin_stop(S, 1,
			   "producer %u died %u times in a row (last: %s%s%s); stopping the job", i,
			   p->deaths, how, msg[0] ? ": " : "", msg);
		sf__log_error("%s", S->reason);
		return;
	}
	atomic_fetch_add_explicit(&S->a->hdr->producer_restarts, 1, memory_order_relaxed);
	r = spawn_producer(S, i);
	if (r == -EMFILE || r == -ENFILE) {
		sf__log_error("producer %u: no file descriptor to restart it (%s); trying again", i,
			      strerror(-r));
		p->respawn_since_ns = sf__now_ns();
		p->respawn_ns = p->respawn_since_ns + RESPAWN_RETRY_NS;
		return;
	}
	if (r < 0) {
		begin_stop(S, 1, "cannot restart producer %u: %s", i, strerror(-r));
		sf__log_error("%s", S->reason);
		return;
	}
	sf__log_info("producer %u restarted (restart %u of at most %u)", i, p->deaths,
		     S->cfg->max_restarts);
}

/* Whether `pid` was a child before the launcher started; `reaped`: it is gone, and its
 * pid may come back as another process's. */
static bool started_before(struct supervisor *S, pid_t pid, bool reaped)
{
	for (size_t i = 0; i < S->n_before; i++) {
		if (S->before[i] != pid)
			continue;
		if (reaped)
			S->before[i] = S->before[--S->n_before];
		return true;
	}
	return false;
}

/* A child reaped: its pid may come back as another process's, which is neither a child
 * from before the launcher nor a leftover SIGTERMed already. */
static void forget_child(struct supervisor *S, pid_t pid)
{
	started_before(S, pid, true);
	for (size_t k = 0; k < S->n_termed; k++)
		if (S->termed[k] == pid) {
			S->termed[k] = S->termed[--S->n_termed];
			break;
		}
}

static void reap(struct supervisor *S)
{
	int wstatus;
	pid_t pid;

	while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
		if (pid == S->cmd_pid) {
			S->cmd_done = 1;
			S->cmd_status = status_of(wstatus);
			S->cmd_termsig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
			describe_status(wstatus, S->cmd_how, sizeof(S->cmd_how));
			if (!S->stopping)
				begin_stop(S, 0, "the command finished (%s)", S->cmd_how);
			continue;
		}
		for (uint32_t i = 0; i < S->n_prod; i++)
			if (S->prod[i].pid == pid)
				producer_died(S, i, wstatus);
		forget_child(S, pid);
	}
}

/* 1 when signal `sig` is ignored: SIGHUP as nohup(1) leaves it, SIGINT and SIGQUIT as a
 * non-interactive shell leaves them for a job it starts in the background (`cmd &`). */
static int ignored(int sig)
{
	struct sigaction sa;

	return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

static void handle_signals(struct supervisor *S)
{
	struct signalfd_siginfo si;

	while (read(S->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGCHLD)
			continue;
		if (!S->stopping && si.ssi_code == SI_KERNEL)
			sf__log_info("SIG%s from the terminal: stopping",
				     sigabbrev_np((int)si.ssi_signo));
		else if (!S->stopping)
			sf__log_info("SIG%s from pid %u: stopping", sigabbrev_np((int)si.ssi_signo),
				     si.ssi_pid);
		/* A hangup comes twice (the shell passes it on to its jobs, the kernel sends
		 * it as the session ends), and nobody is there to insist: only the first
		 * counts. */
		if (si.ssi_signo == SIGHUP && S->hup_seen++)
			continue;
		S->term_count++;
		if (!S->stop_signo)
			S->stop_signo = (int)si.ssi_signo;
		if (S->cmd_pid > 0 && !S->cmd_done) {
			/* Not reaped yet. A command that exited just before the signal came is
			 * taken as interrupted too: a terminal's Ctrl-C reaches the command and
			 * the launcher together, and torchrun may exit before the launcher
			 * reads it, which is the case this is for. */
			if (S->term_count == 1 && S->stop_signo == SIGINT)
				S->cmd_interrupted = 1;
			/*
			 * The command decides how to end; a second signal is not a request. A
			 * terminal's signal (Ctrl-C, Ctrl-\) reached the whole foreground group,
			 * the command with it, unless it made a group of its own: passing it on
			 * would be a second one. A hangup is the exception: the kernel sends it
			 * to the session's leader alone, and to the foreground group only when
			 * that leader has exited; where the launcher leads the session (`ssh -t
			 * host shmfeed run`, `tmux new 'exec shmfeed run'`), the command got
			 * none (a review: killed after the grace period, exit 137).
			 */
			if (S->term_count > 1) {
				sf__log_info("a second stop signal: killing the command (SIGKILL)");
				kill(S->cmd_pid, SIGKILL);
				/* "Now": what it leaves behind is not served either. */
				S->orphans_at = sf__now_ns();
			} else if (si.ssi_code != SI_KERNEL || getpgid(S->cmd_pid) != getpgrp() ||
				   (si.ssi_signo == SIGHUP && getsid(0) == getpid()))
				kill(S->cmd_pid, (int)si.ssi_signo);
			if (!S->stopping) {
				resume_to_stop(S);
				S->stopping = 1;
				snprintf(S->reason, sizeof(S->reason), "SIG%s received",
					 sigabbrev_np((int)si.ssi_signo));
				S->cmd_kill_at = sf__now_ns() + ms_ns(S->l->grace_ms);
			}
		} else {
			begin_stop(S, 0, "SIG%s received", sigabbrev_np((int)si.ssi_signo));
			/* While what the command left behind is served: end it now; while the
			 * producers end: SIGKILL now, or stop waiting for those it did not end. */
			if (S->orphans_at)
				S->orphans_at = sf__now_ns();
			if (S->prod_kill_at)
				S->prod_kill_at = sf__now_ns();
		}
	}
	reap(S);
}

/* Ranks are not our children: a dead one is found here, and its slots repaired. */
static void check_consumers(struct supervisor *S)
{
	for (uint32_t r = 0; r < S->geo.ranks; r++) {
		struct sf_participant *p = &S->a->participants[S->geo.max_producers + r];
		/* Acquire: pairs with the release store of pid at registration. */
		int32_t pid = atomic_load_explicit(&p->pid, memory_order_acquire);
		int repaired;

		/* The repair's fence tells a live consumer (left alone) from a dead one. */
		if (pid <= 0)
			continue;
		repaired = sf__arena_repair(S->a, S->geo.max_producers + r);
		/* Said once per death: the entry keeps the dead pid until a consumer takes it. */
		if (repaired < 0) {
			S->consumer_seen[r] = 0;
			continue;
		}
		if (S->consumer_seen[r] != pid)
			sf__log_info("rank %u: consumer pid %d is gone; %d claimed slot%s back to "
				     "READY",
				     r, pid, repaired, repaired == 1 ? "" : "s");
		S->consumer_seen[r] = pid;
	}
}

/*
 * The FILLING slot each producer holds now, by a scan of every slot word (R x K relaxed
 * loads). A producer first seen holding a slot at a lap starts that slot's clock.
 */
static void scan_filling(struct supervisor *S, uint64_t now)
{
	const uint32_t nslots = S->geo.ranks * S->geo.slots_per_rank;
	uint64_t held[SF_MAX_PRODUCERS] = {0};
	uint32_t where[SF_MAX_PRODUCERS] = {0};

	for (uint32_t i = 0; i < nslots; i++) {
		/* Relaxed: a snapshot for supervision; no payload is read. */
		uint64_t w = atomic_load_explicit(&S->a->slots[i].word, memory_order_relaxed);
		uint32_t owner = sf__slot_owner(w);

		if (sf__slot_state(w) == SF_SLOT_FILLING && owner < S->n_prod) {
			held[owner] = w;
			where[owner] = i;
		}
	}
	for (uint32_t i = 0; i < S->n_prod; i++) {
		struct producer *p = &S->prod[i];

		if (held[i] != p->fill_word || !held[i]) {
			p->fill_word = held[i];
			p->fill_slot = where[i];
			p->fill_seen_ns = now;
		}
	}
}

/* The mean time producers of this job took to fill a slot so far; 0 before any. */
static uint64_t mean_fill_ns(const struct supervisor *S)
{
	uint64_t busy = 0, batches = 0;

	for (uint32_t i = 0; i < S->n_prod; i++) {
		const struct sf_participant *pp = &S->a->participants[i];

		busy += atomic_load_explicit(&pp->busy_ns, memory_order_relaxed);
		batches += atomic_load_explicit(&pp->batches, memory_order_relaxed);
	}
	return batches ? busy / batches : 0;
}

/* "holding rank R step S for X s" or "holding no slot", for the stall messages. */
static void describe_fill(const struct supervisor *S, const struct producer *p, uint64_t now,
			  char *buf, size_t len)
{
	const uint32_t K = S->geo.slots_per_rank;
	uint64_t mean = mean_fill_ns(S);
	char mean_text[64] = "no fill of this job has ended yet";

	if (!p->fill_word) {
		snprintf(buf, len, "holding no slot");
		return;
	}
	if (mean)
		snprintf(mean_text, sizeof(mean_text), "this job's fills take %.2f ms on average",
			 (double)mean / 1e6);
	snprintf(buf, len, "holding rank %u step %llu for %.2f s (%s)", p->fill_slot / K,
		 (unsigned long long)(sf__slot_lap(p->fill_word) * K + p->fill_slot % K),
		 (double)(now - p->fill_seen_ns) / 1e9, mean_text);
}

/*
 * Stalled producers: a producer renews its heartbeat at least every 200 ms while idle
 * and every 64 KiB of input while it builds a batch (producer/producer.c, the copy of
 * pre-tokenized rows, and the BPE encoder inside one long document), so a silent
 * heartbeat means it does not run (SIGSTOP) or does not progress (a hung read). One
 * silent for half the stall timeout is reported stalled (log, status, top), with the
 * slot it holds and for how long against this job's mean fill time; one silent for the
 * whole stall timeout is killed with SIGKILL. Its slot is repaired only once waitpid()
 * has confirmed the death (reap()), as for any dead producer, and it is then restarted
 * like one. A slot held long by a producer whose heartbeat moves is a long fill, not a
 * stall: the first fills of a raw text job tokenize whole chunks and take hundreds of
 * times the mean. Before its first heartbeat (it opens its sources and allocates its
 * buffers) a producer gets STARTUP_STALL_FACTOR stall timeouts. Nothing is watched while
 * the job is paused (the producers are stopped then) or stopping.
 */
/* Try again the restarts that found no file descriptor; give up after
 * RESPAWN_GIVE_UP_NS, or at once for another error, stopping the job. */
static void respawn(struct supervisor *S)
{
	const uint64_t now = sf__now_ns();

	for (uint32_t i = 0; i < S->n_prod; i++) {
		struct producer *p = &S->prod[i];
		int r;

		if (!p->respawn_ns || now < p->respawn_ns)
			continue;
		p->respawn_ns = 0;
		if (!serving(S))
			continue;
		r = spawn_producer(S, i);
		if (r == 0) {
			sf__log_info("producer %u restarted after %.1f s short of file descriptors",
				     i, (double)(now - p->respawn_since_ns) / 1e9);
		} else if ((r == -EMFILE || r == -ENFILE) &&
			   now - p->respawn_since_ns < RESPAWN_GIVE_UP_NS) {
			p->respawn_ns = now + RESPAWN_RETRY_NS;
		} else {
			begin_stop(S, 1, "cannot restart producer %u: %s", i, strerror(-r));
			sf__log_error("%s", S->reason);
		}
	}
}

static void check_producers(struct supervisor *S)
{
	const uint64_t stall_timeout = ms_ns(S->cfg->stall_timeout_ms);
	const uint64_t now = sf__now_ns(), gap = S->checked_ns ? now - S->checked_ns : 0;

	S->checked_ns = now; /* called on every turn of the loop */
	if (!stall_timeout || S->paused || !serving(S))
		return;
	/* The launcher itself stood still for half the timeout (stopped with its producers,
	 * a frozen cgroup, a suspended job): their silence meanwhile is not theirs, and
	 * counts from now, as after a resume. */
	if (gap >= stall_timeout / 2) {
		sf__log_info("the launcher did not run for %.2f s (stopped or suspended?): the "
			     "producers' silence counts from now",
			     (double)gap / 1e9);
		S->resumed_ns = now;
	}
	scan_filling(S, now);
	for (uint32_t i = 0; i < S->n_prod; i++) {
		struct producer *p = &S->prod[i];
		const struct sf_participant *pp = &S->a->participants[i];
		uint64_t last = p->started_ns > S->resumed_ns ? p->started_ns : S->resumed_ns;
		uint64_t hb, timeout = stall_timeout;
		int registered;
		char fill[160];

		if (p->pid <= 0 || p->stall_killed)
			continue;
		/* Relaxed: a single-writer statistic; the pid check keeps a predecessor's
		 * heartbeat from counting for this process. */
		hb = atomic_load_explicit(&pp->heartbeat_ns, memory_order_relaxed);
		registered = atomic_load_explicit(&pp->pid, memory_order_relaxed) == p->pid;
		if (registered && hb > last)
			last = hb;
		if (!registered)
			timeout *= STARTUP_STALL_FACTOR;
		/* A silence the producer ended itself, by a heartbeat: the measure of how
		 * often healthy producers heartbeat, reported at the end of the job. */
		if (last != p->last_beat_ns && p->silent_ns > S->max_healthy_silence_ns)
			S->max_healthy_silence_ns = p->silent_ns;
		p->last_beat_ns = last;
		p->silent_ns = now > last ? now - last : 0;
		if (!p->stalled && p->silent_ns >= timeout / 2) {
			p->stalled = 1;
			describe_fill(S, p, now, fill, sizeof(fill));
			sf__log_error(
				"producer %u (pid %d) looks stalled: no heartbeat for %.2f s, "
				"%s; it is killed at %.1f s of silence",
				i, (int)p->pid, (double)p->silent_ns / 1e9, fill,
				(double)timeout / 1e9);
		} else if (p->stalled && p->silent_ns < timeout / 2) {
			p->stalled = 0;
			sf__log_info("producer %u (pid %d) is making progress again", i,
				     (int)p->pid);
		}
		if (p->silent_ns >= timeout) {
			describe_fill(S, p, now, fill, sizeof(fill));
			sf__log_error(
				"producer %u (pid %d) stalled: no heartbeat for %.2f s "
				"(producers.stall_timeout %.1f s%s), %s; killing it (SIGKILL), "
				"then repairing its slot and restarting it",
				i, (int)p->pid, (double)p->silent_ns / 1e9,
				(double)stall_timeout / 1e9,
				registered ? "" : ", x4 before a first heartbeat", fill);
			/* A stopped process dies of SIGKILL too. Its death reaches reap()
			 * through SIGCHLD like any other, and only then, the fence holding,
			 * is its slot repaired. */
			kill(p->pid, SIGKILL);
			p->stall_killed = 1;
			p->stalls++;
			S->stalls++;
		}
	}
}

/* A mixture's sources: their samples in the prefix every local rank has read. */
static void annotate_mixture(const struct supervisor *S, struct sf_stats *s)
{
	if (!S->l->ops->mixture || !S->geo.ranks)
		return;
	s->samples = s->least_step * S->geo.batch * (uint64_t)S->geo.world_size;
	S->l->ops->mixture(S->ds, s);
	for (uint32_t i = 0; i < s->n_sources && i < S->cfg->n_sources; i++)
		snprintf(s->source[i].name, sizeof(s->source[i].name), "%s",
			 S->cfg->sources[i].name ? S->cfg->sources[i].name : "");
}

/* Add to a sample of the arena what only the supervisor knows. */
static void annotate(const struct supervisor *S, struct sf_stats *s)
{
	/* The arena says stopping only once the command is gone and the producers are told;
	 * the job is stopping from the request (or signal) on, as `status` says. */
	if (S->stopping)
		s->state = SF_JOB_STOPPING;
	s->stalls = S->stalls;
	for (uint32_t i = 0; i < S->n_prod && i < SF_STATS_MAX_PRODUCERS; i++) {
		const struct producer *p = &S->prod[i];

		s->producer[i].stalled = p->pid > 0 && p->stalled;
		s->producer[i].silent_ns = p->pid > 0 ? p->silent_ns : 0;
		s->producer[i].stalls = p->stalls;
	}
	annotate_mixture(S, s);
}

static void sample(struct supervisor *S)
{
	sf__stats_sample(S->a, &S->prev, S->end_step, S->started_ns, &S->cur);
	annotate(S, &S->cur);
}

/* The figures the first interval is counted from, as the job starts (it counted from
 * the first tick: the first interval's rates, waiting and utilization were 0, for two
 * stats intervals; a review). */
static void baseline(struct supervisor *S)
{
	sf__stats_sample(S->a, NULL, S->end_step, S->started_ns, &S->cur);
	annotate(S, &S->cur);
	S->prev = S->cur;
}

static void tick(struct supervisor *S)
{
	char json[SF_CTL_MAX_REPLY];
	int n;

	sample(S);
	n = sf__stats_json(&S->cur, S->cfg->job, json, sizeof(json));
	if (n > 0)
		zmq_send(S->pub, json, (size_t)n, ZMQ_DONTWAIT);
	/* A failure is logged once by the metrics module; the job goes on without. */
	sf__metrics_update(S->metrics, &S->cur, S->cfg->job);
	if (S->l->progress && S->ticked) {
		/* On a terminal of its own the line is rewritten in place. When the output is
		 * shared with the command's (one runs, or stderr is a log), a whole line every
		 * ten intervals, so that the command's output never glues onto it. */
		int in_place = isatty(STDERR_FILENO) && !S->l->command;

		S->progress_ticks++;
		if (in_place || S->progress_ticks % 10 == 0) {
			uint64_t since = S->progress_t_ns ? S->progress_t_ns : S->started_ns;
			double dt = (double)(S->cur.t_ns - since) / 1e9;
			char line[256], rate[32], p50[32];
			int k;

			sf__stats_human_rate(
				dt > 0 ? (double)(S->cur.tokens - S->progress_tokens) / dt : 0,
				rate, sizeof(rate));
			sf__stats_human_below(S->cur.wait_p50_ns, p50, sizeof(p50));
			k = snprintf(line, sizeof(line),
				     "%sshmfeed: %s: %llu batches, %stok/s, wait p50 %s, "
				     "restarts %llu%s",
				     in_place ? "\r\033[K" : "", S->cfg->job,
				     (unsigned long long)S->cur.batches, rate,
				     S->cur.wait_samples ? p50 : "n/a",
				     (unsigned long long)S->cur.restarts, in_place ? "" : "\n");
			S->progress_t_ns = S->cur.t_ns;
			S->progress_tokens = S->cur.tokens;
			if (k > 0)
				sf__log_write(line, (size_t)k);
		}
	}
	S->prev = S->cur;
	S->ticked = 1;
}

static void summary(struct supervisor *S)
{
	double secs = (double)(sf__now_ns() - S->started_ns) / 1e9;
	char rate[32], p50[32], p99[32];

	sample(S);
	if (isatty(STDERR_FILENO) && !S->l->command && S->progress_ticks)
		sf__log_write("\r\033[K", 4);
	sf__stats_human_rate(secs > 0 ? (double)S->cur.tokens / secs : 0, rate, sizeof(rate));
	sf__stats_human_below(S->cur.wait_p50_ns, p50, sizeof(p50));
	sf__stats_human_below(S->cur.wait_p99_ns, p99, sizeof(p99));
	sf__log_info("job %s: %llu batches, %llu tokens delivered in %.2f s (%stok/s)", S->cfg->job,
		     (unsigned long long)S->cur.batches, (unsigned long long)S->cur.tokens, secs,
		     rate);
	if (S->cur.wait_samples)
		sf__log_info("job %s: consumer wait p50 %s, p99 %s over %llu batches", S->cfg->job,
			     p50, p99, (unsigned long long)S->cur.wait_samples);
	else
		sf__log_info("job %s: consumer wait: no samples (the consumers did not report)",
			     S->cfg->job);
	sf__log_info("job %s: producer restarts %llu, repairs %llu, records skipped %llu",
		     S->cfg->job, (unsigned long long)S->cur.restarts,
		     (unsigned long long)S->cur.repairs, (unsigned long long)S->cur.skipped);
	sf__log_info("job %s: producer stalls %llu; longest heartbeat silence a producer ended "
		     "itself %.1f ms (stall timeout %u ms)",
		     S->cfg->job, (unsigned long long)S->stalls,
		     (double)S->max_healthy_silence_ns / 1e6, S->cfg->stall_timeout_ms);
	/* Why it ended shows above; how the command did, here, beside what it read. */
	if (S->cmd_done)
		sf__log_info("job %s: the command ended: %s", S->cfg->job, S->cmd_how);
	else if (S->l->command && S->cmd_pid <= 0)
		/* A stop before it started: said, so that a log of a job stopped at its start
		 * (scancel) tells that training never ran (a review). */
		sf__log_info("job %s: the command was not started: %s", S->cfg->job, S->reason);
	if (S->cur.tokens_encoded && S->cur.tokens_produced)
		sf__log_info("job %s: %.3f tokens encoded per token produced (%llu encoded, "
			     "%llu written; above 1: text tokenized again or ahead of the "
			     "batches, below: tokens reused or pre-tokenized: docs/producers.md)",
			     S->cfg->job,
			     (double)S->cur.tokens_encoded / (double)S->cur.tokens_produced,
			     (unsigned long long)S->cur.tokens_encoded,
			     (unsigned long long)S->cur.tokens_produced);
}

/* Reply to `id` frame(s) with body; `delim` when the client sent an empty delimiter. */
static void reply(struct supervisor *S, zmq_msg_t *id, int delim, const char *body, size_t len)
{
	zmq_send(S->router, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE | ZMQ_DONTWAIT);
	if (delim)
		zmq_send(S->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(S->router, body, len, ZMQ_DONTWAIT);
}

static int reply_error(char *buf, size_t len, const struct sf_ctl_request *req, int code,
		       const char *msg)
{
	size_t n = 0;
	int k;

	k = snprintf(buf, len, "{\"v\":%u,", SF_CTL_VERSION);
	n = (size_t)k;
	if (req && req->has_id)
		n += (size_t)snprintf(buf + n, len - n, "\"id\":%llu,",
				      (unsigned long long)req->id);
	n += (size_t)snprintf(buf + n, len - n, "\"ok\":false,\"code\":%d,\"error\":", code);
	sf__json_escape(buf, len, &n, msg);
	n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, "}");
	return n < len ? (int)n : (int)len - 1;
}

static const char *job_state_name(uint32_t s)
{
	static const char *const names[] = {"init", "running", "paused", "stopping"};

	return s < 4 ? names[s] : "unknown";
}

/* 1 when every local rank has read the end marker of a finite run. */
static int data_ended(const struct supervisor *S)
{
	for (uint32_t r = 0; r < S->geo.ranks; r++)
		if (sf__ring_next_step(S->a, r) <= S->end_step)
			return 0;
	return S->geo.ranks > 0;
}

static int describe_job(struct supervisor *S, char *buf, size_t len)
{
	/* A stopping job says so at once, although the arena's state turns STOPPING only
	 * once its command is gone (stop_producers()). */
	uint32_t js = atomic_load_explicit(&S->a->hdr->job_state, memory_order_acquire);
	const char *state = S->stopping				    ? "stopping"
			    : js == SF_JOB_RUNNING && data_ended(S) ? "ended"
								    : job_state_name(js);
	size_t n = 0;
	uint32_t alive = 0, stalled = 0, base = 0;
	/* The node's global ranks: "2..3 (auto)", or "auto, not yet known" until the
	 * first rank of a `rank_base: auto` job attaches. */
	int known = sf__node_ranks_known(S->a, &base);
	char ranks[64];

	sf__node_ranks_describe(S->a, ranks, sizeof(ranks));

	for (uint32_t i = 0; i < S->n_prod; i++) {
		alive += S->prod[i].pid > 0;
		stalled += S->prod[i].pid > 0 && S->prod[i].stalled;
	}
	n += (size_t)snprintf(buf, len, "{\"v\":%u,\"ok\":true,\"job\":", SF_CTL_VERSION);
	sf__json_escape(buf, len, &n, S->cfg->job);
	n += (size_t)snprintf(buf + n, len - n,
			      ",\"version\":\"%s\",\"pid\":%d,\"state\":\"%s\",\"uptime_s\":%.3f,"
			      "\"command_pid\":%d,\"producers\":%u,\"producers_alive\":%u,"
			      "\"producers_stalled\":%u,\"stall_timeout_ms\":%u,"
			      "\"stats_interval_ms\":%u,\"ranks\":%u,"
			      "\"world_size\":%u,\"rank_base\":%u,\"batch\":%u,\"seq_len\":%u,"
			      "\"slots_per_rank\":%u,\"token_bytes\":%u,\"samples_per_epoch\":%llu,"
			      "\"config_digest\":\"%016llx\",\"node_ranks\":",
			      sf_version(), (int)S->self, state,
			      (double)(sf__now_ns() - S->started_ns) / 1e9, (int)S->cmd_pid,
			      S->n_prod, alive, stalled, S->cfg->stall_timeout_ms,
			      S->cfg->stats_interval_ms, S->geo.ranks,
			      S->geo.world_size, known ? base : 0, S->geo.batch,
			      S->geo.seq_tokens - 1, S->geo.slots_per_rank, S->geo.token_bytes,
			      (unsigned long long)S->geo.samples_per_epoch,
			      (unsigned long long)S->geo.config_digest);
	sf__json_escape(buf, len, &n, ranks);
	n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, ",\"stats\":");
	sf__json_escape(buf, len, &n, S->pub_ep);
	n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, "}");
	return n < len ? (int)n : -ENOSPC;
}

/* execute()'s answer when the reply comes later (continue_seek()). */
#define REPLY_LATER (-1)

/* The reply `body` (n bytes, or < 0: too large) to `req` in `buf`, with its id. */
static int reply_ok(const struct sf_ctl_request *req, const char *body, int n, char *buf,
		    size_t len)
{
	if (n < 0)
		return reply_error(buf, len, req, n, "reply too large");
	if (!req->has_id) {
		memcpy(buf, body, (size_t)n + 1 < len ? (size_t)n + 1 : len);
		return (size_t)n < len ? n : (int)len - 1;
	}
	/* Echo the id as the reply's first member: up to 27 bytes more, which a body that
	 * fit may not (snprintf's count of what did not fit would have been sent). */
	n = snprintf(buf, len, "{\"id\":%llu,%s", (unsigned long long)req->id, body + 1);
	return (size_t)n < len ? n : reply_error(buf, len, req, -ENOSPC, "reply too large");
}

/* Execute a validated request; the reply goes into buf. */
static int execute(struct supervisor *S, const struct sf_ctl_request *req, char *buf, size_t len)
{
	char tmp[SF_CTL_MAX_REPLY];
	int n;

	switch (req->op) {
	case SF_CTL_HELLO:
	case SF_CTL_STATUS:
		n = describe_job(S, tmp, sizeof(tmp));
		break;
	case SF_CTL_STATS: {
		struct sf_stats s;

		/* The figures of the last whole stats interval, as the PUB stream has them:
		 * the time since the last tick may be a few milliseconds (the per-rank ones
		 * were taken over it: a handful of batches, their p50 and p99; a review).
		 * Before the first tick: those since the start. */
		sf__stats_sample(S->a, S->ticked ? NULL : &S->prev, S->end_step, S->started_ns, &s);
		annotate(S, &s);
		if (S->ticked)
			sf__stats_interval_of(&s, &S->cur);
		n = sf__stats_json(&s, S->cfg->job, tmp, sizeof(tmp));
		break;
	}
	case SF_CTL_PAUSE:
	case SF_CTL_RESUME:
		if (S->stopping)
			return reply_error(buf, len, req, SF_E_STOPPED, "the job is stopping");
		/*
		 * Paused, the producer would keep the slot the seek waits for, and the
		 * watchdog that ends a stall sleeps: the seek and its rank would be held
		 * until a resume.
		 */
		if (req->op == SF_CTL_PAUSE && !S->paused && S->seek.active) {
			char why[160];

			snprintf(why, sizeof(why),
				 "a seek of rank %u waits for a producer to finish a slot; pause "
				 "when it has replied",
				 S->seek.req.rank);
			return reply_error(buf, len, req, SF_E_BUSY, why);
		}
		if (S->paused != (req->op == SF_CTL_PAUSE)) {
			set_paused(S, req->op == SF_CTL_PAUSE);
			sf__log_info("%s", req->op == SF_CTL_PAUSE ? "paused" : "resumed");
		}
		n = describe_job(S, tmp, sizeof(tmp));
		break;
	case SF_CTL_SEEK: {
		struct sf_err err = {0};
		uint64_t limit = sf__arena_step_limit(&S->geo);
		char why[160];
		int r;

		if (S->stopping)
			return reply_error(buf, len, req, SF_E_STOPPED, "the job is stopping");
		if (S->paused)
			return reply_error(buf, len, req, SF_E_STATE,
					   "resume the job first: a paused producer may hold a "
					   "slot the seek waits for");
		if (req->rank >= S->geo.ranks) {
			snprintf(why, sizeof(why),
				 "rank %u is not a local rank of this job (local ranks 0..%u)",
				 req->rank, S->geo.ranks - 1);
			return reply_error(buf, len, req, SF_E_RANGE, why);
		}
		/* Beyond the limit the 48-bit lap of the slot words would wrap, and the ring
		 * would serve another step than the one it reports. */
		if (req->step >= limit) {
			snprintf(why, sizeof(why),
				 "step %llu is out of range: this job's steps are 0..%llu",
				 (unsigned long long)req->step, (unsigned long long)(limit - 1));
			return reply_error(buf, len, req, SF_E_RANGE, why);
		}
		/* A finite run ends with its end marker's step: a position past it is none. */
		if (req->step > S->end_step) {
			snprintf(why, sizeof(why),
				 "step %llu is past this run's end: its last step is %llu, its end "
				 "marker step %llu",
				 (unsigned long long)req->step, (unsigned long long)(S->end_step - 1),
				 (unsigned long long)S->end_step);
			return reply_error(buf, len, req, SF_E_RANGE, why);
		}
		if (S->seek.active) {
			snprintf(why, sizeof(why),
				 "a seek of rank %u waits for a producer to finish a slot; send "
				 "this one when it has replied",
				 S->seek.req.rank);
			return reply_error(buf, len, req, SF_E_BUSY, why);
		}
		/* A live consumer tracks its own position; moving its ring under it
		 * would desynchronize it. Seek positions a rank before it attaches, and
		 * holds the rank's entry meanwhile so that none attaches mid-seek. */
		r = sf__ring_seek_hold(S->a, req->rank, &err);
		if (r < 0)
			return reply_error(buf, len, req, r, err.msg);
		S->seek.active = 1;
		S->seek.req = *req;
		return REPLY_LATER;
	}
	case SF_CTL_STOP:
		if (!S->stopping) {
			begin_stop(S, 0, "stop requested over the control socket");
			sf__log_info("%s", S->reason);
		} else if (S->orphans_at) {
			/* As a stop signal does then. */
			sf__log_info("stop requested over the control socket: ending what the "
				     "command left behind now");
			S->orphans_at = sf__now_ns();
		} else {
			sf__log_info("stop requested over the control socket: the job is "
				     "stopping already (%s)",
				     S->reason);
		}
		n = describe_job(S, tmp, sizeof(tmp));
		break;
	default:
		return reply_error(buf, len, req, SF_E_PROTOCOL, "unknown op");
	}
	return reply_ok(req, tmp, n, buf, len);
}

/*
 * Go on with a pending control seek: one pass over the rank's ring, which waits for no
 * producer; the reply once it is repositioned, or fails. A stalled producer holding a
 * slot is ended by the stall watchdog, and its slot repaired, in the same loop.
 */
static void continue_seek(struct supervisor *S)
{
	const struct sf_ctl_request *req = &S->seek.req;
	char out[SF_CTL_MAX_REPLY], tmp[SF_CTL_MAX_REPLY];
	int r = S->stopping ? SF_E_STOPPED : sf__ring_seek_try(S->a, req->rank, req->step);
	int n;

	if (r == 1)
		return;
	sf__ring_seek_release(S->a, req->rank);
	if (r < 0) {
		n = reply_error(out, sizeof(out), req, r, sf_strerror(r));
	} else {
		sf__log_info("rank %u repositioned to step %llu", req->rank,
			     (unsigned long long)req->step);
		n = reply_ok(req, tmp, describe_job(S, tmp, sizeof(tmp)), out, sizeof(out));
	}
	reply(S, &S->seek.peer, S->seek.delim, out, (size_t)n);
	zmq_msg_close(&S->seek.peer);
	S->seek.active = 0;
}

/*
 * The requests one pass of the supervisor's loop serves at most: a client that kept them
 * coming held the loop inside serve() (signals, the stall watchdog, restarts and stats
 * waited for 20 s under eight pipelining clients, a review); the rest wait for the next
 * pass, a poll away.
 */
#define SERVE_PER_PASS 32

/* Serve the requests waiting on the ROUTER socket, SERVE_PER_PASS at most. */
static void serve(struct supervisor *S)
{
	for (unsigned served = 0; served < SERVE_PER_PASS; served++) {
		char out[SF_CTL_MAX_REPLY];
		zmq_msg_t id, part;
		int delim = 0, frames = 1, n, more;
		struct sf_ctl_request req;
		struct sf_err e = {0};
		const char *body = NULL;
		size_t body_len = 0;

		zmq_msg_init(&id);
		if (zmq_msg_recv(&id, S->router, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&id);
			return;
		}
		/* Frames after the identity: an optional empty delimiter (REQ clients),
		 * then exactly one body. Anything else is malformed, and drained. */
		zmq_msg_init(&part);
		more = zmq_msg_more(&id);
		while (more) {
			zmq_msg_close(&part);
			zmq_msg_init(&part);
			if (zmq_msg_recv(&part, S->router, 0) < 0)
				break;
			frames++;
			more = zmq_msg_more(&part);
			if (frames == 2 && more && zmq_msg_size(&part) == 0)
				delim = 1;
		}
		if (frames == 2 + delim) {
			body = zmq_msg_data(&part);
			body_len = zmq_msg_size(&part);
			n = sf__ctl_parse_request(body, body_len, &req, &e);
			if (n < 0)
				n = reply_error(out, sizeof(out), &req, SF_E_PROTOCOL, e.msg);
			else
				n = execute(S, &req, out, sizeof(out));
		} else {
			n = reply_error(out, sizeof(out), NULL, SF_E_PROTOCOL,
					"a request is one frame of JSON");
		}
		if (n == REPLY_LATER) {
			zmq_msg_init(&S->seek.peer);
			zmq_msg_move(&S->seek.peer, &id);
			S->seek.delim = delim;
			continue_seek(S);
		} else {
			reply(S, &id, delim, out, (size_t)n);
		}
		zmq_msg_close(&part);
		zmq_msg_close(&id);
	}
}

/*
 * Remove the temporaries "JOB.json.tmp.PID" that launchers of the job killed between
 * writing and renaming them left (PID gone, or this process's own, reused): digits only
 * after the prefix, so that a job named "JOB.json.tmp.x" keeps its files.
 */
static void info_dead_temporaries(const char *info_path)
{
	char dir[sizeof(((struct sf_job_paths *)0)->info_path)], prefix[300], path[600];
	const char *slash = strrchr(info_path, '/');
	struct dirent *de;
	size_t plen;
	DIR *d;

	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - info_path), info_path);
	plen = (size_t)snprintf(prefix, sizeof(prefix), "%s.tmp.", slash + 1);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		const char *digits = de->d_name + plen;
		pid_t pid;

		if (strncmp(de->d_name, prefix, plen) || !*digits ||
		    strspn(digits, "0123456789") != strlen(digits))
			continue;
		pid = (pid_t)atoi(digits);
		/* EPERM: alive, another user's. */
		if (pid > 0 && pid != getpid() && (kill(pid, 0) == 0 || errno == EPERM))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
}

static int write_info(struct supervisor *S, struct sf_err *e)
{
	char tmp[400], buf[2048];
	size_t n = 0;
	struct stat st;
	FILE *f;
	int fd, r;

	n += (size_t)snprintf(buf, sizeof(buf), "{\"v\":%u,\"job\":", SF_CTL_VERSION);
	sf__json_escape(buf, sizeof(buf), &n, S->cfg->job);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",\"pid\":%d,\"control\":", (int)S->self);
	sf__json_escape(buf, sizeof(buf), &n, S->ctl_ep);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",\"stats\":");
	sf__json_escape(buf, sizeof(buf), &n, S->pub_ep);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",\"curve_server_public\":");
	if (S->curve.enabled)
		sf__json_escape(buf, sizeof(buf), &n, S->curve.public_key);
	else
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "null");
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, "}\n");
	r = sf__job_info_path_free(S->paths.info_path, S->cfg->job, e);
	if (r < 0)
		return r;
	/*
	 * A name of its own, after its writer: JOB.json.tmp may be somebody's file too, and
	 * a writer killed before the rename leaves it to the next run of the job to remove.
	 */
	info_dead_temporaries(S->paths.info_path);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", S->paths.info_path, (int)S->self);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return sf__err(e, -errno, "cannot write %s: %s", S->paths.info_path,
			       strerror(errno));
	f = fstat(fd, &st) == 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		r = -errno;
		close(fd);
		unlink(tmp);
		return sf__err(e, r, "cannot write %s: %s", S->paths.info_path, strerror(-r));
	}
	fwrite(buf, 1, n, f);
	if (fclose(f) != 0 || rename(tmp, S->paths.info_path) < 0) {
		r = -errno;
		unlink(tmp);
		return sf__err(e, r, "cannot write %s: %s", S->paths.info_path, strerror(-r));
	}
	S->info_dev = st.st_dev;
	S->info_ino = st.st_ino;
	return 0;
}

/* The PUB endpoint beside a configured control endpoint: the next port, or PATH.pub. */
static void pub_endpoint_for(const char *ctl, char *buf, size_t len)
{
	if (!strncmp(ctl, "tcp://", 6)) {
		const char *colon = strrchr(ctl, ':');

		snprintf(buf, len, "%.*s:%ld", (int)(colon - ctl), ctl,
			 strtol(colon + 1, NULL, 10) + 1);
	} else {
		snprintf(buf, len, "%s.pub", ctl);
	}
}

/*
 * The sockets polled beside the control socket and the first `n` items: the ZAP handler
 * of CURVE and the monitors of the connection caps, from items[n] on (room for three).
 * Returns the count of items.
 */
static int poll_items(const struct supervisor *S, zmq_pollitem_t *items, int n)
{
	void *more[3] = {S->curve.zap, S->cap[0].mon, S->cap[1].mon};

	for (int k = 0; k < 3; k++)
		if (more[k])
			items[n++] = (zmq_pollitem_t){more[k], 0, ZMQ_POLLIN, 0};
	return n;
}

/* Serve what poll_items() added after the first `n` items, a CURVE handshake's ZAP
 * request first (the handshake waits for its reply). */
static void serve_sockets(struct supervisor *S, const zmq_pollitem_t *items, int n)
{
	if (S->curve.zap && (items[n++].revents & ZMQ_POLLIN))
		sf__curve_zap_serve(&S->curve);
	for (int k = 0; k < 2; k++)
		if (S->cap[k].mon && (items[n++].revents & ZMQ_POLLIN))
			sf__conn_cap_serve(&S->cap[k]);
}

/*
 * Bind the control and stats sockets. An ipc:// socket is made with umask 077, so that
 * only this user can connect wherever its path is (the private runtime directory is
 * 0700 in any case); libzmq binds in the calling thread, and no other thread of ours
 * makes files meanwhile.
 */
static int bind_both(struct supervisor *S, int ipc, struct sf_err *e)
{
	mode_t old_umask = ipc ? umask(077) : 0;
	int r = 0;

	/* Each socket is recorded as soon as it is bound, so a failure after it removes it. */
	if (zmq_bind(S->router, S->ctl_ep) < 0) {
		r = sf__err(e, -errno, "cannot bind control socket %s: %s", S->ctl_ep,
			    zmq_strerror(errno));
		goto out;
	}
	if (S->ipc.lock_fd >= 0 && (r = sf__ipc_claim_bound(&S->ipc, 0, e)) < 0)
		goto out;
	if (zmq_bind(S->pub, S->pub_ep) < 0) {
		r = sf__err(e, -errno, "cannot bind stats socket %s: %s", S->pub_ep,
			    zmq_strerror(errno));
		goto out;
	}
	if (S->ipc.lock_fd >= 0)
		r = sf__ipc_claim_bound(&S->ipc, 1, e);
out:
	if (ipc)
		umask(old_umask);
	return r;
}

static int open_sockets(struct supervisor *S, struct sf_err *e)
{
	const struct sf_config *cfg = S->cfg;
	int linger = 0, sndhwm = 4, ipc, tcp, r;

	if (cfg->endpoint) {
		snprintf(S->ctl_ep, sizeof(S->ctl_ep), "%s", cfg->endpoint);
		pub_endpoint_for(cfg->endpoint, S->pub_ep, sizeof(S->pub_ep));
	} else {
		snprintf(S->ctl_ep, sizeof(S->ctl_ep), "ipc://%s", S->paths.ctl_path);
		snprintf(S->pub_ep, sizeof(S->pub_ep), "ipc://%s", S->paths.pub_path);
	}
	ipc = !strncmp(S->ctl_ep, "ipc://", 6);
	S->pub = zmq_socket(S->zctx, ZMQ_PUB); /* the router is start_zmq()'s */
	if (!S->pub)
		return sf__err(e, -errno, "zmq_socket: %s", zmq_strerror(errno));
	zmq_setsockopt(S->router, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(S->pub, ZMQ_LINGER, &linger, sizeof(linger));
	/* tcp://[IPv6]:PORT binds only with IPv6 on; an IPv4 address keeps it off, so that
	 * its peers are named as such in the log (not ::ffff:a.b.c.d). */
	if (!strncmp(S->ctl_ep, "tcp://[", 7)) {
		zmq_setsockopt(S->router, ZMQ_IPV6, &(int){1}, sizeof(int));
		zmq_setsockopt(S->pub, ZMQ_IPV6, &(int){1}, sizeof(int));
	}
	/* A request over the limit still gets an error reply, but a peer sending far more
	 * is disconnected by libzmq before the message is ever assembled. */
	zmq_setsockopt(S->router, ZMQ_MAXMSGSIZE, &(int64_t){SF_CTL_MAX_REPLY}, sizeof(int64_t));
	/* What a subscriber sends the stats socket are its subscriptions, which libzmq keeps
	 * a byte per node in the supervisor's thread: 200 of 1 MB took 6.3 GB and 42 s (a
	 * review). A message longer than a CURVE handshake's commands (which the limit also
	 * bounds) disconnects its subscriber; `top` subscribes to "". */
	zmq_setsockopt(S->pub, ZMQ_MAXMSGSIZE, &(int64_t){SF_STATS_MAX_MESSAGE}, sizeof(int64_t));
	zmq_setsockopt(S->pub, ZMQ_SNDHWM, &sndhwm, sizeof(sndhwm));
	if (S->curve.enabled) {
		void *socks[2] = {S->router, S->pub};

		r = sf__curve_server_setup(&S->curve, S->zctx, socks, 2, e);
		if (r < 0)
			return r;
	}
	/* The caps for ipc too: a client of the job's user that leaked a connection per
	 * request ran the launcher out of descriptors, and libzmq's ipc listener aborts
	 * there (a review: SIGABRT, the arena left behind). A tcp connection is told by its
	 * port, an ipc one by its path. */
	tcp = !strncmp(S->ctl_ep, "tcp://", 6);
	if (tcp || ipc) {
		r = sf__conn_cap_open(&S->cap[0], S->zctx, S->router, "shmfeed-cap-control",
				      "control", tcp ? atoi(strrchr(S->ctl_ep, ':') + 1) : 0,
				      tcp ? NULL : S->ctl_ep + 6, e);
		if (r == 0)
			r = sf__conn_cap_open(&S->cap[1], S->zctx, S->pub, "shmfeed-cap-stats",
					      "stats", tcp ? atoi(strrchr(S->pub_ep, ':') + 1) : 0,
					      tcp ? NULL : S->pub_ep + 6, e);
		if (r < 0)
			return r;
	}
	/* libzmq unlinks whatever is at an ipc:// path before binding it: claim the paths
	 * first (launcher/endpoint.c). Abstract sockets (ipc://@NAME) have no file. */
	if (ipc && S->ctl_ep[6] != '@') {
		r = sf__ipc_claim(&S->ipc, S->ctl_ep + 6, S->pub_ep + 6, !cfg->endpoint, e);
		if (r < 0)
			return r;
	}
	r = bind_both(S, ipc, e);
	if (r < 0)
		return r;
	return write_info(S, e);
}

static void *wait_for_eof(void *arg)
{
	char byte;

	while (read(*(int *)arg, &byte, 1) < 0 && errno == EINTR)
		;
	return NULL;
}

/*
 * libzmq starts its threads (an I/O thread and a reaper) with the context's first socket
 * and aborts when it cannot: a limit on processes or on memory (`ulimit -u`, `-v`, `-d`:
 * thread stacks count) killed the launcher by SIGABRT with the arena made. Two threads
 * are tried together first, for an error that says why; then the context is started,
 * before the arena exists (with the stop signals blocked, which its threads inherit).
 */
static int start_zmq(struct supervisor *S, struct sf_err *e)
{
	pthread_t t[2];
	int fds[2], n = 0, r = 0;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return sf__err(e, -errno, "pipe: %s", strerror(errno));
	while (n < 2 && (r = pthread_create(&t[n], NULL, wait_for_eof, &fds[0])) == 0)
		n++;
	close(fds[1]);
	while (n > 0)
		pthread_join(t[--n], NULL);
	close(fds[0]);
	if (r)
		return sf__err(
			e, -r,
			"cannot start the control plane's threads: %s (a limit on processes, "
			"ulimit -u, or on memory, ulimit -v or -d?)",
			strerror(r));
	S->zctx = zmq_ctx_new();
	if (!S->zctx)
		return sf__err(e, -errno, "zmq_ctx_new: %s", zmq_strerror(errno));
	/* The control socket, kept (one closed at once would hold its descriptor until the
	 * reaper came to it). */
	S->router = zmq_socket(S->zctx, ZMQ_ROUTER);
	if (!S->router)
		return sf__err(e, -errno, "zmq_socket: %s", zmq_strerror(errno));
	return 0;
}

static void close_sockets(struct supervisor *S)
{
	struct stat st;

	sf__conn_cap_close(&S->cap[0]);
	sf__conn_cap_close(&S->cap[1]);
	if (S->router)
		zmq_close(S->router);
	if (S->pub)
		zmq_close(S->pub);
	if (S->curve.zap)
		zmq_close(S->curve.zap);
	S->curve.zap = NULL;
	if (S->zctx)
		zmq_ctx_term(S->zctx);
	S->router = S->pub = S->zctx = NULL;
	sf__ipc_release(&S->ipc);
	/* Only the file this job wrote, still there. */
	if (S->info_ino && lstat(S->paths.info_path, &st) == 0 && st.st_dev == S->info_dev &&
	    st.st_ino == S->info_ino)
		unlink(S->paths.info_path);
}

static int spawn_command(struct supervisor *S, struct sf_err *e)
{
	pid_t pid = fork();

	if (pid < 0)
		return sf__err(e, -errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* The command ends with its supervisor: nothing would feed it after. */
		child_setup(S, SIGTERM, false);
		setenv("SHMFEED_JOB", S->cfg->job, 1);
		setenv("SHMFEED_CONTROL", S->ctl_ep, 1);
		setenv("SHMFEED_STATS", S->pub_ep, 1);
		if (S->config_path[0])
			setenv("SHMFEED_CONFIG", S->config_path, 1);
		execvp(S->l->command[0], S->l->command);
		sf__log_error("cannot run %s: %s", S->l->command[0], strerror(errno));
		_exit(127);
	}
	S->cmd_pid = pid;
	return 0;
}

/* How long SIGKILLed orphans are waited for: one in uninterruptible sleep may never go. */
#define ORPHAN_KILL_WAIT_MS 5000u

/* The launcher's children that are the command's leftovers (end_orphans()): neither a
 * producer nor a process that was its child before it started. */
static size_t leftovers(struct supervisor *S, pid_t *kids)
{
	size_t n = sf__proc_children(S->self, kids, ORPHANS_MAX), kept = 0;

	for (size_t i = 0; i < n; i++) {
		bool producer = false;

		for (uint32_t p = 0; p < S->n_prod && !producer; p++)
			producer = S->prod[p].pid == kids[i];
		if (!producer && !started_before(S, kids[i], false))
			kids[kept++] = kids[i];
	}
	return kept;
}

/* SIGTERM those of the `n` leftovers `kids` that have had none; how many got it. */
static size_t term_new(struct supervisor *S, const pid_t *kids, size_t n)
{
	size_t fresh = 0;

	/* The listed are unreaped children: their pids cannot be reused meanwhile. */
	for (size_t i = 0; i < n && S->n_termed < ORPHANS_MAX; i++) {
		bool seen = false;

		for (size_t k = 0; k < S->n_termed && !seen; k++)
			seen = S->termed[k] == kids[i];
		if (seen)
			continue;
		kill(kids[i], SIGTERM);
		S->termed[S->n_termed++] = kids[i];
		fresh++;
	}
	return fresh;
}

/*
 * Whether what the command left behind is still served: the real trainer under a wrapper
 * that died (`bash train.sh` killed by the SIGTERM passed on to it) is the launcher's
 * child now, and may still be reading. It gets SIGTERM once and batches until it exits,
 * or for the grace period, after which end_orphans() ends it with the job. A leftover's
 * child that is the launcher's once its parent died of that SIGTERM (`bash launch.sh`
 * running `bash train.sh`) gets its own as it appears, in the same grace period (it got
 * none, and SIGKILL at the period's end: a review).
 */
static bool serving_leftovers(struct supervisor *S, uint64_t now)
{
	pid_t kids[ORPHANS_MAX];
	size_t n, fresh;

	if (S->orphans_done || S->cmd_pid <= 0 || S->failed)
		return false;
	n = leftovers(S, kids);
	if (!n || (S->orphans_at && now >= S->orphans_at)) {
		S->orphans_done = 1;
		return false;
	}
	fresh = term_new(S, kids, n);
	if (!S->orphans_at) {
		sf__log_info("%zu process%s the command left behind: SIGTERM; served until %s "
			     "(at most %u ms)",
			     n, n == 1 ? "" : "es", n == 1 ? "it exits" : "they exit",
			     S->l->grace_ms);
		S->orphans_at = now + ms_ns(S->l->grace_ms);
	} else if (fresh) {
		sf__log_info("%zu more process%s the command left behind (a leftover's "
			     "children): SIGTERM",
			     fresh, fresh == 1 ? "" : "es");
	}
	return true;
}

/* Wait for the end: the command and every producer gone, stragglers killed on time. */
static int finished(struct supervisor *S)
{
	uint64_t now = sf__now_ns();
	int producers_left = 0;

	if (!S->stopping)
		return 0;
	if (S->cmd_pid > 0 && !S->cmd_done) {
		if (S->cmd_kill_at && now >= S->cmd_kill_at) {
			sf__log_error("the command did not exit within %u ms; killing it",
				      S->l->grace_ms);
			kill(S->cmd_pid, SIGKILL);
			S->cmd_kill_at = 0;
		}
		return 0;
	}
	if (serving_leftovers(S, now))
		return 0;
	stop_producers(S);
	for (uint32_t i = 0; i < S->n_prod; i++)
		producers_left += S->prod[i].pid > 0;
	if (!producers_left || now < S->prod_kill_at)
		return !producers_left;
	if (!S->prod_killed) {
		for (uint32_t i = 0; i < S->n_prod; i++)
			if (S->prod[i].pid > 0)
				kill(S->prod[i].pid, SIGKILL);
		S->prod_killed = 1;
		S->prod_kill_at = now + ms_ns(ORPHAN_KILL_WAIT_MS);
		return 0;
	}
	/*
	 * SIGKILL takes effect when a process leaves the kernel: a read that hangs (a FUSE
	 * mount whose daemon is stuck, a dead NFS server) holds it in uninterruptible sleep
	 * for as long as it hangs. The job ended for everything else; waiting for it kept
	 * the launcher, its arena and its control files there with no way to stop it but
	 * SIGKILL (a review). end_producers() names it and leaves it; its mapping of the
	 * arena stays valid until it dies.
	 */
	return 1;
}

/*
 * Anything still running as the job ends is killed and reaped before the arena goes, so no
 * process outlives its job's shared memory, but one that SIGKILL does not end within
 * ORPHAN_KILL_WAIT_MS (finished() waited that long already where it gave up) is named and
 * left behind, as end_orphans() does for the command's. Its pid stays in prod[], so that
 * end_orphans() does not take it for one of the command's.
 */
static void end_producers(struct supervisor *S)
{
	uint64_t now = sf__now_ns();
	const bool waited = S->prod_killed && now >= S->prod_kill_at;
	const uint64_t give_up = waited ? now : now + ms_ns(ORPHAN_KILL_WAIT_MS);
	uint32_t left;

	for (uint32_t i = 0; i < S->n_prod; i++)
		if (S->prod[i].pid > 0)
			kill(S->prod[i].pid, SIGKILL);
	for (;;) {
		left = 0;
		for (uint32_t i = 0; i < S->n_prod; i++) {
			struct producer *p = &S->prod[i];

			if (p->pid <= 0)
				continue;
			if (waitpid(p->pid, NULL, WNOHANG) == 0) {
				left++;
				continue;
			}
			close(p->errfd);
			p->errfd = -1;
			p->pid = 0;
		}
		if (!left || sf__now_ns() >= give_up)
			break;
		usleep(10000);
	}
	for (uint32_t i = 0; i < S->n_prod; i++) {
		struct producer *p = &S->prod[i];

		if (p->pid <= 0)
			continue;
		sf__log_error("producer %u (pid %d) did not end %u ms after SIGKILL (in "
			      "uninterruptible sleep?): not waiting for it",
			      i, (int)p->pid, ORPHAN_KILL_WAIT_MS);
		close(p->errfd);
		p->errfd = -1;
	}
}

/* Whether a stop signal came (the signalfd read empty): while the job ends, one means
 * "now". */
static bool stop_signalled(struct supervisor *S)
{
	struct signalfd_siginfo si;
	bool stop = false;

	while (S->sfd >= 0 && read(S->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		stop |= si.ssi_signo != SIGCHLD && (si.ssi_signo != SIGHUP || !S->hup_seen++);
	return stop;
}

/*
 * The processes the command left behind: the launcher is their subreaper, so a child of
 * the command that outlived it (a `sh -c` wrapper's, a killed torchrun's workers) is the
 * launcher's child now. SIGTERM them, give them the grace period (unless they had it
 * while they were served: serving_leftovers()), then SIGKILL what is left, and reap them
 * all, before the job's arena goes. Each round lists the children
 * again: the children of an orphan that died are the launcher's next, and get the same
 * signals (SIGTERM once each in the grace period, SIGKILL after it). What SIGKILL does not
 * end within ORPHAN_KILL_WAIT_MS is named and left behind.
 */
static void end_orphans(struct supervisor *S)
{
	uint64_t deadline = sf__now_ns() + (S->orphans_at ? 0 : ms_ns(S->l->grace_ms));
	uint64_t give_up = 0;
	pid_t kids[ORPHANS_MAX];
	size_t n;

	for (;;) {
		uint64_t now;
		size_t fresh;
		pid_t gone;

		while ((gone = waitpid(-1, NULL, WNOHANG)) > 0)
			forget_child(S, gone);
		n = leftovers(S, kids);
		if (!n)
			return;
		now = sf__now_ns();
		if (stop_signalled(S))
			deadline = now;
		if (now >= deadline && !give_up) {
			sf__log_info("%zu process%s the command left behind: SIGKILL", n,
				     n == 1 ? "" : "es");
			give_up = now + ms_ns(ORPHAN_KILL_WAIT_MS);
		} else if (give_up && now >= give_up) {
			sf__log_error("%zu process%s the command left behind did not end %u ms "
				      "after SIGKILL (pid %d%s; in uninterruptible sleep?): not "
				      "waiting for them",
				      n, n == 1 ? "" : "es", ORPHAN_KILL_WAIT_MS, (int)kids[0],
				      n > 1 ? " and others" : "");
			return;
		}
		if (give_up) {
			for (size_t i = 0; i < n; i++)
				kill(kids[i], SIGKILL);
			fresh = 0;
		} else {
			fresh = term_new(S, kids, n);
		}
		if (fresh)
			sf__log_info("%zu process%s the command left behind: SIGTERM", fresh,
				     fresh == 1 ? "" : "es");
		if (S->router) {
			/* Control requests are answered meanwhile (a CURVE handshake's ZAP
			 * request first, and the connection caps kept). */
			zmq_pollitem_t items[4] = {{S->router, 0, ZMQ_POLLIN, 0}};
			int n_items = poll_items(S, items, 1);

			if (zmq_poll(items, n_items, 10) > 0) {
				serve_sockets(S, items, 1);
				if (items[0].revents & ZMQ_POLLIN)
					serve(S);
			}
		} else {
			usleep(10000);
		}
	}
}

static int supervise(struct supervisor *S)
{
	uint64_t interval = ms_ns(S->cfg->stats_interval_ms);

	S->next_tick_ns = sf__now_ns() + interval;
	while (!finished(S)) {
		zmq_pollitem_t items[5] = {{S->router, 0, ZMQ_POLLIN, 0},
					   {NULL, S->sfd, ZMQ_POLLIN, 0}};
		int n = poll_items(S, items, 2);
		uint64_t now = sf__now_ns();
		long timeout = SUPERVISE_TICK_MS;

		if (S->next_tick_ns > now && (S->next_tick_ns - now) / 1000000 < (uint64_t)timeout)
			timeout = (long)((S->next_tick_ns - now) / 1000000);
		if (S->next_tick_ns <= now)
			timeout = 0;
		if (zmq_poll(items, n, timeout) < 0 && errno != EINTR)
			return -errno;
		serve_sockets(S, items, 2);
		if (items[1].revents & ZMQ_POLLIN)
			handle_signals(S);
		if (items[0].revents & ZMQ_POLLIN)
			serve(S);
		if (S->seek.active)
			continue_seek(S);
		check_consumers(S);
		respawn(S);
		check_producers(S);
		now = sf__now_ns();
		if (now >= S->next_tick_ns) {
			tick(S);
			S->next_tick_ns = now + interval;
		}
	}
	return 0;
}

int sf__launcher_fds_check(uint32_t producers, const struct sf_config *cfg, struct sf_err *e)
{
	const int metrics_http = cfg->metrics != NULL;
	const int tcp = cfg->endpoint && !strncmp(cfg->endpoint, "tcp://", 6);
	uint64_t open_now, limit, need;

	sf__fds_raise();
	/* tcp or ipc, the connections the caps allow (and the monitors' pairs). */
	need = sf__fds_needed(FDS_FIXED + 2ull * producers + FDS_MARGIN +
				      (metrics_http ? SF_METRICS_HTTP_FDS : 0) +
				      2 * (SF_TCP_MAX_CONNECTIONS + 1),
			      &open_now, &limit);
	if (need <= limit)
		return 0;
	return sf__err(e, -EMFILE,
		       "the job needs at least %llu file descriptors (%llu open now, %u "
		       "producer%s, control sockets and their %sconnections%s and a margin) "
		       "but the limit is %llu (RLIMIT_NOFILE's hard limit, which the launcher "
		       "raises its soft one to); raise it with `ulimit -n %llu` or more",
		       (unsigned long long)need, (unsigned long long)open_now, producers,
		       producers == 1 ? "" : "s", tcp ? "tcp " : "",
		       metrics_http ? ", the metrics server's connections" : "",
		       (unsigned long long)limit, (unsigned long long)need);
}

/*
 * The job file's path for SHMFEED_CONFIG: absolute, so that a command that changes
 * directory finds it, with its directory resolved but not the file itself. A job file
 * that is a link reads its relative paths against the link's directory, and
 * realpath() of the file named the link's target, whose directory may hold other files
 * of those names: another job (a review). As given where the directory cannot be
 * resolved.
 */
static void absolute_config_path(const char *path, char *out, size_t len)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX], *abs;

	snprintf(out, len, "%s", path);
	if (slash && slash == path)
		return; /* a file of / */
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	abs = realpath(dir, NULL);
	if (abs && (size_t)snprintf(out, len, "%s/%s", abs, slash ? slash + 1 : path) >= len)
		snprintf(out, len, "%s", path);
	free(abs);
}

int sf__launcher_run(const struct sf_launch *l, int *ret_status, int *ret_signal, struct sf_err *e)
{
	struct supervisor *S = calloc(1, sizeof(*S));
	const struct sf_config *cfg = l->cfg;
	struct sf_arena_options opt = {.hugepages = (int)cfg->hugepages,
				       .verify_every = cfg->verify_every};
	char note[256] = "";
	int r, status = 0;

	*ret_signal = 0;
	if (!S)
		return sf__err(e, -ENOMEM, "out of memory");
	if (cfg->insecure_tcp)
		sf__log_error("warning: control endpoint %s has no authentication "
			      "(control.insecure_tcp): anyone who can reach the port, any local "
			      "user included, can stop, pause or seek job %s",
			      cfg->endpoint, cfg->job);
	S->l = l;
	S->cfg = cfg;
	if (cfg->path)
		absolute_config_path(cfg->path, S->config_path, sizeof(S->config_path));
	S->sfd = -1;
	S->ipc.lock_fd = -1;
	S->self = getpid();
	S->n_before =
		sf__proc_children(S->self, S->before, sizeof(S->before) / sizeof(S->before[0]));
	/* What the command leaves behind when it ends becomes ours (end_orphans()). */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	for (uint32_t i = 0; i < SF_MAX_PRODUCERS; i++)
		S->prod[i].errfd = -1;
	r = sf__job_paths(cfg->job, 1, &S->paths, e);
	if (r >= 0)
		r = sf__job_info_path_free(S->paths.info_path, cfg->job, e);
	if (r >= 0)
		r = sf__ipc_endpoint_check(cfg->endpoint, e);
	if (r < 0)
		goto out_free;
	if (cfg->producer_cpus) {
		char msg[400];

		r = sf__cpu_list_allowed(cfg->producer_cpus, &S->producer_cpus, msg, sizeof(msg));
		if (r < 0) {
			r = sf__err(e, r, "%s: producers.cpus: %s",
				    cfg->path ? cfg->path : cfg->job, msg);
			goto out_free;
		}
		S->pin_producers = 1;
	}
	/* Before the sources are opened: the file cache the producers inherit is sized by
	 * the soft limit (sf__fds_raise() in sf__launcher_fds_check() came after it, and the
	 * producers kept a cache of half the shell's limit: a review). */
	sf__fds_raise();
	r = l->ops->open(cfg, &S->ds, e);
	if (r < 0)
		goto out_free;
	r = l->ops->geometry(S->ds, cfg, &S->geo, e);
	if (r < 0)
		goto out_close_ds;
	/* `rank_base: auto`: the arena learns the node's ranks from its first rank
	 * (common/node_ranks.h). */
	if (cfg->rank_base_auto) {
		S->geo.flags |= SF_ARENA_F_RANK_AUTO;
		S->geo.rank_base = 0;
	}
	r = sf__launcher_fds_check(S->geo.max_producers, cfg, e);
	if (r < 0)
		goto out_close_ds;
	r = sf__curve_server_load(cfg, &S->curve, e);
	if (r < 0)
		goto out_close_ds;
	/* The stop signals are taken from before the arena exists: creating a large one takes
	 * seconds, and one that came meanwhile killed the launcher, leaving a half-made
	 * arena in /dev/shm. */
	sigemptyset(&S->mask);
	sigaddset(&S->mask, SIGCHLD);
	/* SIGQUIT (Ctrl-\) is a stop, as SIGTERM, not a core dump. A signal the launcher
	 * was started ignoring stays ignored (a hangup under nohup, Ctrl-C for a job a
	 * script runs in the background): a blocked signal is queued even when ignored, so
	 * it stays out of the mask rather than reach the signalfd. */
	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++)
		if (!ignored(stop_signals[i]))
			sigaddset(&S->mask, stop_signals[i]);
	sigprocmask(SIG_BLOCK, &S->mask, &S->old_mask);
	S->masked = 1;
	/* Before the first log line: a stderr whose reader has gone (`run ... 2>&1 | head`)
	 * must not kill the launcher by SIGPIPE with the arena made. */
	signal(SIGPIPE, SIG_IGN);
	r = start_zmq(S, e);
	if (r < 0)
		goto out_close_ds;
	r = sf__arena_create(cfg->job, &S->geo, &opt, &S->a, note, sizeof(note), e);
	if (r < 0)
		goto out_close_ds;
	S->started_ns = sf__now_ns();
	sf__log_info("job %s: arena /dev/shm%s, %llu bytes: %u rank%s x %u slots of %u x %u "
		     "tokens; %s",
		     cfg->job, S->a->shm_name, (unsigned long long)S->a->hdr->total_size,
		     S->geo.ranks, S->geo.ranks == 1 ? "" : "s", S->geo.slots_per_rank,
		     S->geo.batch, S->geo.seq_tokens, note);
	S->sfd = signalfd(-1, &S->mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (S->sfd < 0) {
		r = sf__err(e, -errno, "signalfd: %s", strerror(errno));
		goto out_arena;
	}
	/* Sockets before fork: a child inherits the context's descriptors but never uses
	 * them, and the command sees a working endpoint from its first instruction. */
	r = open_sockets(S, e);
	if (r < 0)
		goto out_sockets;
	/* After the signal mask: the HTTP server's thread inherits it, so the signals stay
	 * with the signalfd. */
	r = sf__metrics_open(cfg, &S->metrics, e);
	baseline(S);
	if (r == 0 && S->metrics)
		r = sf__metrics_first(S->metrics, &S->cur, cfg->job, e);
	if (r < 0)
		goto out_sockets;
	sf__arena_set_job_state(S->a, SF_JOB_RUNNING);
	S->n_prod = S->geo.max_producers;
	for (uint32_t i = 0; i < S->n_prod; i++) {
		r = spawn_producer(S, i);
		if (r < 0) {
			sf__err(e, r, "cannot start producer %u: %s", i, strerror(-r));
			begin_stop(S, 1, "%s", e->msg);
			break;
		}
	}
	S->end_step = sf__stats_end_step(&S->geo, cfg->epochs);
	if (l->ops->end_step)
		S->end_step = l->ops->end_step(S->ds);
	/* The producers that run: "2 producers started" where the second could not be
	 * (RLIMIT_NPROC) misled (a review). */
	if (S->stopping)
		sf__log_info("job %s: %u of %u producers started; stopping", cfg->job,
			     started_producers(S), S->n_prod);
	else
		sf__log_info("job %s: %u producer%s started; control %s", cfg->job, S->n_prod,
			     S->n_prod == 1 ? "" : "s", S->ctl_ep);
	/* A stop signal that came while the job was made: no command to start. */
	handle_signals(S);
	if (!S->stopping && l->command) {
		r = spawn_command(S, e);
		if (r < 0)
			begin_stop(S, 1, "%s", e->msg);
	}
	r = supervise(S);
	if (r < 0)
		sf__err(e, r, "supervisor loop: %s", strerror(-r));
	/* The summary's lines wait for stderr up to a second each, afresh: the job's
	 * figures are not dropped because a line was while it ran. */
	sf__log_set_bounded(1000);
	if (l->progress)
		summary(S);
	if (S->failed && r == 0)
		r = sf__err(e, SF_E_SOURCE, "%s", S->reason);
	status = S->cmd_pid > 0 ? S->cmd_status : 0;
	/* A stop signal before the command started: it never ran, which is no success (a
	 * scancel at start-up read as a finished training run). */
	if (l->command && S->cmd_pid <= 0 && S->stop_signo)
		status = 128 + S->stop_signo;
	/* Stopped by Ctrl-C, and the command died of it too, or there was none, or the
	 * Ctrl-C came while it ran and it then died of a signal (a second Ctrl-C kills it)
	 * or exited 1 or 130 (torchrun catches SIGINT and exits 1): the launcher ends by
	 * SIGINT in turn, so that a script running it stops as well (a shell goes on after
	 * a child that exits normally on SIGINT, taking it as handled). Any other status,
	 * 0 or one a trainer chose on the signal ("requeue me"), is returned. */
	if (S->stop_signo == SIGINT &&
	    (S->cmd_pid <= 0 || S->cmd_termsig == SIGINT ||
	     (S->cmd_interrupted &&
	      (S->cmd_termsig || S->cmd_status == 1 || S->cmd_status == 130))))
		*ret_signal = SIGINT;
out_sockets:
	end_producers(S);
	/* With the control socket still open: `status` and `stop` get the job's answer
	 * while it ends what the command left behind (they said its control files were
	 * missing, and `run` of the name said to ask them). */
	end_orphans(S);
	sf__metrics_close(S->metrics);
	close_sockets(S);
out_arena:
	sf__arena_destroy(S->a);
	if (S->sfd >= 0)
		close(S->sfd);
out_close_ds:
	/* Started before the arena: an error came after it. */
	if (S->router)
		zmq_close(S->router);
	if (S->zctx)
		zmq_ctx_term(S->zctx);
	if (S->masked) {
		/* A stop signal that came during the ending was for the job, which has ended:
		 * taken when the mask is restored, its default action would kill the launcher
		 * before it returns the command's status. */
		const struct timespec now = {0, 0};

		while (sigtimedwait(&S->mask, NULL, &now) > 0)
			;
		sigprocmask(SIG_SETMASK, &S->old_mask, NULL);
	}
	l->ops->close(S->ds);
	sf__curve_server_free(&S->curve);
out_free:
	free(S);
	if (r < 0)
		return r;
	*ret_status = status;
	return 0;
}
