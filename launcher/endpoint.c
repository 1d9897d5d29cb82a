/*
 * The ipc:// control endpoint of a job: claimed before the sockets are bound, released
 * when they are closed, so that a job never deletes a file it did not create and never
 * takes over the endpoint of another live job.
 *
 * libzmq unlinks whatever is at an ipc:// path before it binds there. The claim therefore
 * comes first: an exclusive flock on PATH.lock beside the control socket (held for the
 * life of the job; a second job given the same path finds it locked and is refused), then
 * a look at PATH and PATH.pub. A path that does not exist is fine; a socket that a dead
 * job of ours bound there (its device and inode are in the lock file) is stale and goes;
 * anything else is refused with its name. After the bind, the sockets' device and inode
 * are recorded, and at the end only a socket still carrying them is unlinked.
 *
 * The lock file is made under a temporary name, locked and filled, then linked into
 * place, so no one ever sees an empty or unlocked lock of a live job. A job unlinks its
 * lock file while it holds it; a job that locked a file just unlinked notices that the
 * path no longer names the file it holds, and tries again.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "launcher/launcher.h"

#define LOCK_MAGIC "shmfeed endpoint lock 1\n"

/* The lock file's record: our pid and the sockets bound so far (0 0: none). */
static int write_record(const struct sf_ipc_claim *c)
{
	char buf[256];
	int n;

	n = snprintf(buf, sizeof(buf),
		     LOCK_MAGIC "pid %d\nsockets %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		     (int)getpid(), c->dev[0], c->ino[0], c->dev[1], c->ino[1]);
	if (pwrite(c->lock_fd, buf, (size_t)n, 0) != n || ftruncate(c->lock_fd, n) < 0)
		return errno ? -errno : -EIO;
	return 0;
}

/* Read a lock file's record; -1 when it is not a shmfeed endpoint lock. */
static int read_record(int fd, int *ret_pid, uint64_t dev[2], uint64_t ino[2])
{
	char buf[256];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	const char *p;

	if (n < (ssize_t)strlen(LOCK_MAGIC))
		return -1;
	buf[n] = 0;
	if (strncmp(buf, LOCK_MAGIC, strlen(LOCK_MAGIC)))
		return -1;
	p = buf + strlen(LOCK_MAGIC);
	dev[0] = ino[0] = dev[1] = ino[1] = 0;
	if (sscanf(p, "pid %d\nsockets %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, ret_pid,
		   &dev[0], &ino[0], &dev[1], &ino[1]) < 1)
		return -1;
	return 0;
}

/* Whether the open file `fd` (its status in *st) is an endpoint lock this user's shmfeed
 * wrote: its record read into the rest. */
static bool own_lock(int fd, struct stat *st, int *ret_pid, uint64_t dev[2], uint64_t ino[2])
{
	return fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_uid == geteuid() &&
	       read_record(fd, ret_pid, dev, ino) == 0;
}

/* The refusal of a file at the lock's name that own_lock() does not take, with `code`. */
static int not_a_lock(const char *lock, int code, struct sf_err *e)
{
	return sf__err(e, code,
		       "%s exists and is not a shmfeed endpoint lock of this user; remove it or "
		       "choose another control.endpoint",
		       lock);
}

/* Make, lock and fill a fresh lock file, then link it into place (-EEXIST: one is there). */
static int create_lock(struct sf_ipc_claim *c, struct sf_err *e)
{
	char tmp[sizeof(c->lock) + 16];
	int fd, r = 0;

	snprintf(tmp, sizeof(tmp), "%s.%d", c->lock, (int)getpid());
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return sf__err(e, -errno, "cannot create %s: %s", tmp, strerror(errno));
	c->lock_fd = fd;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 || write_record(c) < 0)
		r = sf__err(e, -errno, "cannot write %s: %s", tmp, strerror(errno));
	else if (link(tmp, c->lock) < 0)
		r = errno == EEXIST
			    ? -EEXIST
			    : sf__err(e, -errno, "cannot create %s: %s", c->lock, strerror(errno));
	unlink(tmp);
	if (r < 0) {
		close(fd);
		c->lock_fd = -1;
	}
	return r;
}

/*
 * Lock an existing lock file. 1: locked, with the sockets of the dead job that held it
 * in stale_*; 0: it vanished meanwhile (try again); < 0: refused.
 */
static int take_lock(struct sf_ipc_claim *c, uint64_t stale_dev[2], uint64_t stale_ino[2],
		     struct sf_err *e)
{
	struct stat st, now;
	int fd, pid = 0;

	fd = open(c->lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return sf__err(e, -errno, "control endpoint lock %s: %s", c->lock,
			       errno == ELOOP ? "a symbolic link" : strerror(errno));
	}
	if (!own_lock(fd, &st, &pid, stale_dev, stale_ino)) {
		close(fd);
		return not_a_lock(c->lock, -EEXIST, e);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = errno;

		close(fd);
		if (r == EWOULDBLOCK)
			return sf__err(e, SF_E_BUSY,
				       "control endpoint ipc://%s is in use by another job "
				       "(launcher pid %d holds %s)",
				       c->path[0], pid, c->lock);
		return sf__err(e, -r, "cannot lock %s: %s", c->lock, strerror(r));
	}
	/* The job that held it may have unlinked it just before we locked it. */
	if (stat(c->lock, &now) < 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
		close(fd);
		return 0;
	}
	c->lock_fd = fd;
	return 1;
}

/* Whether a process listens on the unix socket `path` (a connection is accepted). */
static int listened_on(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd, r;

	if (strlen(path) >= sizeof(a.sun_path))
		return 0;
	strcpy(a.sun_path, path);
	/* Non-blocking: a listener whose backlog is full says EAGAIN, and is one. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return 0;
	r = connect(fd, (const struct sockaddr *)&a, sizeof(a)) == 0 || errno == EAGAIN;
	close(fd);
	return r;
}

/* Make way for a socket at `path`: nothing there, or a stale socket of ours. */
static int clear_path(const struct sf_ipc_claim *c, const char *path, uint64_t stale_dev,
		      uint64_t stale_ino, struct sf_err *e)
{
	struct stat st;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		return sf__err(e, -errno, "control endpoint %s: %s", path, strerror(errno));
	}
	/* In the private runtime directory shmfeed makes JOB.ctl and JOB.pub, and the arena
	 * (created O_EXCL) says no live job of that name runs; but a job configured with
	 * endpoint ipc://RUNTIME/JOB has its stats at JOB.pub too: one listened on stays. */
	if (S_ISSOCK(st.st_mode) && st.st_uid == geteuid() &&
	    ((c->private_dir && !listened_on(path)) ||
	     (stale_ino && (uint64_t)st.st_dev == stale_dev && (uint64_t)st.st_ino == stale_ino))) {
		if (unlink(path) < 0 && errno != ENOENT)
			return sf__err(e, -errno, "cannot remove stale socket %s: %s", path,
				       strerror(errno));
		return 0;
	}
	return sf__err(e, -EEXIST,
		       "control endpoint %s exists and is not a socket this job created; remove "
		       "it or choose another control.endpoint",
		       path);
}

int sf__ipc_claim(struct sf_ipc_claim *c, const char *ctl_path, const char *pub_path,
		  int private_dir, struct sf_err *e)
{
	uint64_t stale_dev[2] = {0, 0}, stale_ino[2] = {0, 0};
	int created = 0, r = 0;

	memset(c, 0, sizeof(*c));
	c->lock_fd = -1;
	c->private_dir = private_dir;
	if ((size_t)snprintf(c->path[0], sizeof(c->path[0]), "%s", ctl_path) >=
		    sizeof(c->path[0]) ||
	    (size_t)snprintf(c->path[1], sizeof(c->path[1]), "%s", pub_path) >=
		    sizeof(c->path[1]) ||
	    (size_t)snprintf(c->lock, sizeof(c->lock), "%s.lock", ctl_path) >= sizeof(c->lock))
		return sf__err(e, -ENAMETOOLONG, "control endpoint path %.64s... is too long",
			       ctl_path);
	for (int attempt = 0; attempt < 8 && c->lock_fd < 0; attempt++) {
		r = create_lock(c, e);
		if (r == 0) {
			created = 1;
			break;
		}
		if (r != -EEXIST)
			return r;
		r = take_lock(c, stale_dev, stale_ino, e);
		if (r < 0)
			return r;
	}
	if (c->lock_fd < 0)
		return sf__err(e, SF_E_BUSY, "control endpoint lock %s keeps changing", c->lock);
	for (int i = 0; i < 2; i++) {
		r = clear_path(c, c->path[i], stale_dev[i], stale_ino[i], e);
		if (r < 0)
			break;
	}
	if (r >= 0 && !created)
		r = write_record(c) < 0
			    ? sf__err(e, -errno, "cannot write %s: %s", c->lock, strerror(errno))
			    : 0;
	if (r < 0) {
		/* A lock file we made goes; one a dead job left stays as it was. */
		if (created)
			unlink(c->lock);
		close(c->lock_fd);
		c->lock_fd = -1;
		return r;
	}
	return 0;
}

int sf__ipc_endpoint_check(const char *endpoint, struct sf_err *e)
{
	char dir[400], pub[400], lock[400];
	uint64_t dev[2], ino[2];
	struct stat st;
	int fd, pid;
	int r = endpoint && !strncmp(endpoint, "ipc:///", 7)
			? sf__parent_dir_check(endpoint + 6, dir, sizeof(dir))
			: 0;

	if (r < 0)
		return sf__err(e, SF_E_CONFIG, "control.endpoint %s: %s %s", endpoint, dir,
			       r == -ENOTDIR ? "is not a directory" : "does not exist");
	if (!endpoint || strncmp(endpoint, "ipc:///", 7))
		return 0;
	/* What run's claim refuses whatever its lock says: a path there that is no socket
	 * (a socket may be a stale one of a killed job, which run takes over). */
	snprintf(pub, sizeof(pub), "%s.pub", endpoint + 6);
	for (int i = 0; i < 2; i++) {
		const char *path = i ? pub : endpoint + 6;

		if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
			return sf__err(e, SF_E_CONFIG,
				       "control endpoint %s exists and is not a socket this job "
				       "created; remove it or choose another control.endpoint",
				       path);
	}
	/* And a lock file there that is someone's (it passed check and failed run once
	 * the sources were open; a review). */
	snprintf(lock, sizeof(lock), "%s.lock", endpoint + 6);
	fd = open(lock, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? sf__err(e, SF_E_CONFIG,
						"control endpoint lock %s: a symbolic link", lock)
				      : 0;
	r = own_lock(fd, &st, &pid, dev, ino) ? 0 : not_a_lock(lock, SF_E_CONFIG, e);
	close(fd);
	return r;
}

int sf__ipc_claim_bound(struct sf_ipc_claim *c, int i, struct sf_err *e)
{
	struct stat st;

	if (lstat(c->path[i], &st) < 0 || !S_ISSOCK(st.st_mode))
		return sf__err(e, -EEXIST, "control endpoint %s is not the socket just bound",
			       c->path[i]);
	c->dev[i] = (uint64_t)st.st_dev;
	c->ino[i] = (uint64_t)st.st_ino;
	if (write_record(c) < 0)
		return sf__err(e, -errno, "cannot write %s: %s", c->lock, strerror(errno));
	return 0;
}

void sf__ipc_release(struct sf_ipc_claim *c)
{
	struct stat st, held;

	for (int i = 0; i < 2; i++)
		if (c->ino[i] && lstat(c->path[i], &st) == 0 && S_ISSOCK(st.st_mode) &&
		    (uint64_t)st.st_dev == c->dev[i] && (uint64_t)st.st_ino == c->ino[i])
			unlink(c->path[i]);
	c->ino[0] = c->ino[1] = 0;
	if (c->lock_fd < 0)
		return;
	/* Unlinked while still held, so a job waiting to lock it sees it go (take_lock). */
	if (fstat(c->lock_fd, &held) == 0 && stat(c->lock, &st) == 0 && st.st_dev == held.st_dev &&
	    st.st_ino == held.st_ino)
		unlink(c->lock);
	close(c->lock_fd);
	c->lock_fd = -1;
}
