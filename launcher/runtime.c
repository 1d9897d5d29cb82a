/*
 * The private runtime directory of shmfeed jobs and the discovery file of each job.
 * The directory is per user and mode 0700, so the ipc:// control sockets inside are
 * reachable by that user only; a directory with any other owner or mode is refused
 * rather than used. Each running job leaves JOB.ctl and JOB.pub (sockets) and JOB.json
 * (how to reach it) there, and removes them when it ends. Also here: the descriptor
 * count that the launcher and the control clients check before they start libzmq.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/control.h"
#include "launcher/launcher.h"

static int check_private_dir(const char *path, struct sf_err *e)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return sf__err(e, -errno, "runtime directory %s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return sf__err(e, -ENOTDIR, "runtime directory %s is not a directory", path);
	/* Another user's (on a /tmp fallback anyone can take the name first): never
	 * adopted; another directory of one's own is the way out. */
	if (st.st_uid != geteuid())
		return sf__err(e, SF_E_UID,
			       "runtime directory %s belongs to uid %u, not %u: set "
			       "SHMFEED_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a directory of your own",
			       path, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & 077)
		return sf__err(e, -EPERM,
			       "runtime directory %s has mode %03o; it must be 0700 (private)",
			       path, (unsigned)(st.st_mode & 0777));
	return 0;
}

int sf__runtime_dir(char *buf, size_t len, int create, struct sf_err *e)
{
	const char *over = getenv("SHMFEED_RUNTIME_DIR");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	/* Relative, it would name another directory to a process that changed its own. */
	if (over && over[0] && over[0] != '/')
		return sf__err(e, -EINVAL, "SHMFEED_RUNTIME_DIR=%s: give an absolute path", over);
	if (over && over[0])
		n = snprintf(buf, len, "%s", over);
	else if (xdg && xdg[0] == '/')
		n = snprintf(buf, len, "%s/shmfeed", xdg);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/run/shmfeed");
	else
		n = snprintf(buf, len, "/tmp/shmfeed-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return sf__err(e, -ENAMETOOLONG, "runtime directory path too long");
	/* mkdir with 0700 is race-free: an existing entry is checked, never chmod-ed,
	 * so another user's planted directory is refused, not adopted. */
	if (create && mkdir(buf, 0700) < 0 && errno != EEXIST)
		return sf__err(e, -errno, "cannot create runtime directory %s%s: %s", buf,
			       over && over[0]		  ? " (SHMFEED_RUNTIME_DIR)"
			       : xdg && xdg[0] == '/' ? " (from XDG_RUNTIME_DIR)"
						      : "",
			       strerror(errno));
	return check_private_dir(buf, e);
}

/* The job's paths in the runtime directory p->dir. */
static int paths_in(struct sf_job_paths *p, const char *job, struct sf_err *e)
{
	snprintf(p->ctl_path, sizeof(p->ctl_path), "%s/%s.ctl", p->dir, job);
	snprintf(p->pub_path, sizeof(p->pub_path), "%s/%s.pub", p->dir, job);
	snprintf(p->info_path, sizeof(p->info_path), "%s/%s.json", p->dir, job);
	/* A longer ipc:// path fails at bind with a vaguer message than this one. */
	if (strlen(p->ctl_path) > SF_IPC_PATH_MAX)
		return sf__err(e, -ENAMETOOLONG,
			       "control socket path %s is longer than %d bytes; set "
			       "SHMFEED_RUNTIME_DIR to a shorter directory",
			       p->ctl_path, SF_IPC_PATH_MAX);
	return 0;
}

int sf__job_paths(const char *job, int create, struct sf_job_paths *ret, struct sf_err *e)
{
	struct sf_job_paths p;
	int r;

	r = sf__runtime_dir(p.dir, sizeof(p.dir), create, e);
	if (r < 0)
		return r;
	r = paths_in(&p, job, e);
	if (r < 0)
		return r;
	*ret = p;
	return 0;
}

int sf__job_paths_check(const char *job, struct sf_err *e)
{
	struct sf_job_paths p;
	int r = sf__runtime_dir(p.dir, sizeof(p.dir), 0, e);

	/* A directory not made yet is made by run, in a directory that is there. */
	if (r == -ENOENT) {
		char *parent = strdup(p.dir);
		struct stat st;

		if (!parent)
			return sf__err(e, -ENOMEM, "out of memory");
		if (stat(dirname(parent), &st) == 0 && S_ISDIR(st.st_mode))
			r = 0;
		free(parent);
	}
	if (r < 0)
		return r;
	r = paths_in(&p, job, e);
	/* check said valid and run refused once the sources were open (a review). */
	return r < 0 ? r : sf__job_info_path_free(p.info_path, job, e);
}

int sf__job_info_path_free(const char *path, const char *job, struct sf_err *e)
{
	struct sf_job_info old;
	struct sf_err ignored = {0};
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : sf__err(e, -errno, "%s: %s", path, strerror(errno));
	if (S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    sf__job_info_file_read(path, &old, &ignored) == 0 && !strcmp(old.job, job))
		return 0;
	return sf__err(e, -EEXIST,
		       "%s is there and is not a discovery file of job %s, which the job would "
		       "replace: move it, or name the job otherwise",
		       path, job);
}

int sf__job_info_file_read(const char *path, struct sf_job_info *ret, struct sf_err *e)
{
	struct sf_json_token tok[32];
	struct sf_job_info info = {0};
	char buf[2048];
	uint64_t pid = 0;
	size_t n;
	FILE *f;
	int fd, r;

	/* Never through a link: one planted at a job's name made it another job's. */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP)
		return sf__err(e, SF_E_PROTOCOL, "%s: a link, not a shmfeed job file (remove it)",
			       path);
	if (fd < 0 || !(f = fdopen(fd, "r"))) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return sf__err(e, r, "%s: %s", path, strerror(-r));
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	r = sf__json_parse(buf, n, tok, 32, e);
	if (r < 0 || tok[0].type != SF_JSON_OBJECT)
		return sf__err(e, SF_E_PROTOCOL, "%s: not a shmfeed job file", path);
	if (sf__json_string(buf, tok, sf__json_get(buf, tok, 0, "job"), info.job,
			    sizeof(info.job)) < 0 ||
	    sf__json_string(buf, tok, sf__json_get(buf, tok, 0, "control"), info.control,
			    sizeof(info.control)) < 0 ||
	    sf__json_string(buf, tok, sf__json_get(buf, tok, 0, "stats"), info.stats,
			    sizeof(info.stats)) < 0 ||
	    sf__json_u64(buf, tok, sf__json_get(buf, tok, 0, "pid"), &pid) < 0)
		return sf__err(e, SF_E_PROTOCOL, "%s: incomplete shmfeed job file", path);
	sf__json_string(buf, tok, sf__json_get(buf, tok, 0, "curve_server_public"),
			info.curve_server_public, sizeof(info.curve_server_public));
	info.pid = (int32_t)pid;
	*ret = info;
	return 0;
}

static int pid_alive(int32_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/*
 * Whether job `job` has an arena whose creator (the holder of its creator lock byte) is
 * dead: what a launcher killed outright leaves behind. 1: stale; 0: live; -1: none, or
 * not one this user can attach.
 */
static int arena_stale(const char *job, int32_t *ret_creator, uint32_t *ret_state)
{
	struct sf_arena *a = NULL;
	int stale;

	if (sf__arena_attach(job, NULL, &a, NULL) < 0)
		return -1;
	stale = !sf__arena_creator_alive(a);
	*ret_creator = a->hdr->creator_pid;
	*ret_state = atomic_load_explicit(&a->hdr->job_state, memory_order_acquire);
	sf__arena_detach(a);
	return stale;
}

/*
 * What a dead job's control endpoint left on disk, said after its discovery file: ipc://
 * sockets and their lock, beside the file or in the directory the job's endpoint named;
 * nothing for tcp://.
 */
static void describe_sockets(const struct sf_job_info *j, const char *info_path, char *out,
			     size_t len)
{
	const char *path = j->control + 6, *slash = strrchr(path, '/'),
		   *info_slash = strrchr(info_path, '/');
	size_t dir_len = slash ? (size_t)(slash - path) : 0;

	if (strncmp(j->control, "ipc://", 6))
		return;
	if (slash && info_slash && (size_t)(info_slash - info_path) == dir_len &&
	    !strncmp(path, info_path, dir_len))
		snprintf(out, len, " with its control sockets");
	else
		snprintf(out, len, " and its control sockets in %.*s",
			 dir_len ? (int)dir_len : 1, !slash ? "." : dir_len ? path : "/");
}

/* The message of no running job and dead ones, before their names. */
#define DEAD_JOBS                                                                                  \
	"no running shmfeed job in %s; dead (their launcher crashed or was killed; the next "      \
	"`shmfeed run` of each reclaims what it left): "

/* Job names for a message, "a, b (its arena), ...": those that fit in `limit` bytes
 * (room for "and N more" left), and how many did not. */
struct name_list {
	char text[512];
	size_t limit;
	unsigned more;
};

/* The longest ", and N more" name_text() adds. */
#define NAMES_MORE 24

static void name_add(struct name_list *l, const char *job, const char *note)
{
	const size_t used = strlen(l->text);
	const int n = snprintf(l->text + used, l->limit > used ? l->limit - used : 0, "%s%s%s",
			       used ? ", " : "", job, note);

	if (n < 0 || used + (size_t)n >= l->limit) {
		l->text[used] = '\0';
		l->more++;
	}
}

/* The list, with how many more where some did not fit. */
static const char *name_text(struct name_list *l)
{
	const size_t used = strlen(l->text);

	if (l->more)
		snprintf(l->text + used, sizeof(l->text) - used, "%sand %u more", used ? ", " : "",
			 l->more);
	return l->text;
}

/* Whether `dir` holds a discovery file of `job` (the listing took it). */
static bool has_job_file(const char *dir, const char *job)
{
	char path[SF_JOB_NAME_MAX + 300];
	struct sf_job_info info;

	snprintf(path, sizeof(path), "%s/%s.json", dir, job);
	return sf__job_info_file_read(path, &info, NULL) == 0 && !strcmp(info.job, job);
}

/*
 * Add to `dead` the jobs of this user's in /dev/shm that have no discovery file in
 * `dir` (those with one were listed from it): an arena whose launcher is dead (killed
 * between the two), or a dead temporary of one, shmfeed.JOB.new.PID (killed while it
 * made the arena), each job once. Listed by their discovery files only, they were
 * invisible to `status` without a name (a review).
 */
static void dead_arenas(const char *dir, struct name_list *dead)
{
	DIR *d = opendir("/dev/shm");
	char(*seen)[SF_JOB_NAME_MAX + 1] = NULL;
	size_t n_seen = 0, cap = 0;
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		const char *name = de->d_name + 8, *infix = NULL;
		char job[SF_JOB_NAME_MAX + 1], tmp[8];
		bool again = false;
		uint32_t state;
		int32_t creator;
		struct stat st;
		size_t n;

		if (strncmp(de->d_name, "shmfeed.", 8) ||
		    fstatat(dirfd(d), de->d_name, &st, 0) < 0 || st.st_uid != geteuid())
			continue;
		/* The last ".new." with a pid after it: a job's name may end in ".new". */
		for (const char *at = strstr(name, ".new."); at; at = strstr(at + 1, ".new."))
			if (at[5] && strspn(at + 5, "0123456789") == strlen(at + 5))
				infix = at;
		n = infix ? (size_t)(infix - name) : strlen(name);
		if (!n || n > SF_JOB_NAME_MAX)
			continue;
		memcpy(job, name, n);
		job[n] = '\0';
		for (size_t k = 0; k < n_seen && !again; k++)
			again = !strcmp(seen[k], job);
		if (again || has_job_file(dir, job) ||
		    (infix ? !sf__arena_dead_temporaries(job, tmp, sizeof(tmp))
			   : arena_stale(job, &creator, &state) != 1))
			continue;
		if (n_seen == cap) {
			void *more = realloc(seen, (cap = cap ? 2 * cap : 16) * sizeof(*seen));

			if (!more)
				break;
			seen = more;
		}
		memcpy(seen[n_seen++], job, n + 1);
		name_add(dead, job, infix ? " (the temporary of its arena)" : " (its arena)");
	}
	free(seen);
	closedir(d);
}

int sf__job_info_read(const char *job, struct sf_job_info *ret, struct sf_err *e)
{
	char dir[256], path[600];
	struct name_list names = {0}, dead = {0};
	struct sf_job_info found = {0};
	struct dirent *de;
	int count = 0, r;
	DIR *d;

	if (job) {
		struct sf_job_paths p;
		int32_t creator = 0;
		uint32_t state = SF_JOB_INIT;
		int arena, stale;

		if (!sf__job_name_valid(job))
			return sf__err(e, SF_E_CONFIG, "invalid job name '%s'", job);
		r = sf__job_paths(job, 0, &p, e);
		/* No runtime directory yet: no job of this user's runs from it. */
		if (r == -ENOENT)
			p.info_path[0] = '\0';
		else if (r < 0)
			return r;
		r = p.info_path[0] ? sf__job_info_file_read(p.info_path, &found, e) : -ENOENT;
		if (r < 0 && r != -ENOENT)
			return r;
		/* A file of another job's copied to this name sent this job's commands there,
		 * and said they were done (a review). */
		if (r == 0 && strcmp(found.job, job))
			return sf__err(
				e, SF_E_PROTOCOL,
				"%s names the job '%s', not '%s': a file copied from another "
				"job's; remove it",
				p.info_path, found.job, job);
		arena = arena_stale(job, &creator, &state);
		/* The arena is there before the control socket and the discovery file, and
		 * stays after them: a launcher starting up or ending. */
		if (r == -ENOENT && arena == 0 && state == SF_JOB_INIT)
			return sf__err(e, -ENOENT,
				       "job '%s' (launcher pid %d) is starting: its control socket "
				       "is not up yet; try again in a moment",
				       job, (int)creator);
		if (r == -ENOENT && arena == 0 && state == SF_JOB_STOPPING)
			return sf__err(e, -ENOENT,
				       "job '%s' (launcher pid %d) is stopping: its control socket "
				       "is not there any more; try again if it does not end",
				       job, (int)creator);
		if (r == -ENOENT && arena == 0) {
			struct sf_err ignored = {0};

			/* The path is written even where the directory is missing. */
			sf__runtime_dir(dir, sizeof(dir), 0, &ignored);
			return sf__err(e, -ENOENT,
				       "job '%s' runs (launcher pid %d) but its control files are "
				       "not in %s: it was started with another SHMFEED_RUNTIME_DIR "
				       "or XDG_RUNTIME_DIR; set the same here",
				       job, (int)creator, dir);
		}
		/* A launcher killed outright leaves its discovery file and its arena: the
		 * job is dead, not absent, and the next run of it cleans up. */
		stale = arena == 1;
		if ((r == 0 && !pid_alive(found.pid)) || stale) {
			char left[700], socks[400] = "";

			if (r == 0)
				describe_sockets(&found, p.info_path, socks, sizeof(socks));
			if (stale)
				snprintf(left, sizeof(left), "its arena /dev/shm/shmfeed.%s%s%s%s",
					 job, r == 0 ? " and " : "", r == 0 ? p.info_path : "",
					 socks);
			else
				snprintf(left, sizeof(left), "%s%s", p.info_path, socks);
			return sf__err(
				e, SF_E_JOB_GONE,
				"job '%s' is dead: its launcher (pid %d) is gone (it crashed "
				"or was killed) and left %s behind; the next `shmfeed run` of "
				"this job reclaims %s",
				job, r == 0 ? (int)found.pid : (int)creator, left,
				stale && r == 0 ? "them" : "it");
		}
		if (r == -ENOENT) {
			char tmp[512];

			/* A launcher killed while it made the arena: its file, of the arena's
			 * full size, stays until the next run of the job. */
			if (sf__arena_dead_temporaries(job, tmp, sizeof(tmp)))
				return sf__err(e, -ENOENT,
					       "no running shmfeed job '%s'; a launcher of it was "
					       "killed while it made the arena and left %s: the "
					       "next `shmfeed run` of this job removes it (or rm "
					       "it)",
					       job, tmp);
			return sf__err(e, -ENOENT, "no running shmfeed job '%s'", job);
		}
		*ret = found;
		return 0;
	}
	r = sf__runtime_dir(dir, sizeof(dir), 0, e);
	if (r < 0)
		return r == -ENOENT ? sf__err(e, -ENOENT, "no running shmfeed job") : r;
	/* The lists take what the message leaves them (a long runtime directory cut the
	 * count off). */
	names.limit = dead.limit =
		sizeof(e->msg) - NAMES_MORE - (size_t)snprintf(NULL, 0, DEAD_JOBS "%s", dir, "");
	d = opendir(dir);
	if (!d)
		return sf__err(e, -errno, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		struct sf_job_info info;
		size_t n = strlen(de->d_name);

		if (n < 6 || strcmp(de->d_name + n - 5, ".json"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		/* A file of another job's under this name is no job of its own (it listed the
		 * other job twice). */
		if (sf__job_info_file_read(path, &info, NULL) < 0 || strlen(info.job) != n - 5 ||
		    strncmp(info.job, de->d_name, n - 5))
			continue;
		if (!pid_alive(info.pid)) {
			name_add(&dead, info.job, "");
			continue;
		}
		if (count++ == 0)
			found = info;
		name_add(&names, info.job, "");
	}
	closedir(d);
	if (count == 0)
		dead_arenas(dir, &dead);
	if (count == 0 && (dead.text[0] || dead.more))
		return sf__err(e, SF_E_JOB_GONE, DEAD_JOBS "%s", dir, name_text(&dead));
	if (count == 0)
		return sf__err(e, -ENOENT, "no running shmfeed job in %s", dir);
	if (count > 1)
		return sf__err(e, SF_E_BUSY, "%d jobs are running (%s): name one", count,
			       name_text(&names));
	*ret = found;
	return 0;
}

/* The soft RLIMIT_NOFILE before sf__fds_raise() raised it; raised: whether it did. */
static struct {
	rlim_t soft;
	int raised;
} nofile;

void sf__fds_raise(void)
{
	struct rlimit rl;
	rlim_t soft;

	if (nofile.raised || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	soft = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
		nofile.soft = soft;
		nofile.raised = 1;
	}
}

void sf__fds_restore(void)
{
	struct rlimit rl;

	if (!nofile.raised || getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	rl.rlim_cur = nofile.soft;
	setrlimit(RLIMIT_NOFILE, &rl);
}

/* Descriptors open now below `limit` (the ones that take room under RLIMIT_NOFILE). */
static uint64_t fds_open(uint64_t limit)
{
	uint64_t n = 0;
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");

	if (!d) {
		for (uint64_t fd = 0; fd < limit && fd < 65536; fd++)
			n += fcntl((int)fd, F_GETFD) >= 0;
		return n;
	}
	while ((de = readdir(d))) {
		uint64_t fd = strtoull(de->d_name, NULL, 10);

		/* The directory's own descriptor is closed again below. */
		if (de->d_name[0] != '.' && fd < limit && fd != (uint64_t)dirfd(d))
			n++;
	}
	closedir(d);
	return n;
}

uint64_t sf__fds_needed(uint64_t more, uint64_t *ret_open, uint64_t *ret_limit)
{
	struct rlimit rl;
	uint64_t open_now;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY) {
		*ret_open = 0;
		*ret_limit = UINT64_MAX;
		return more;
	}
	open_now = fds_open(rl.rlim_cur);
	*ret_open = open_now;
	*ret_limit = rl.rlim_cur;
	return open_now + more;
}
