/* Positioned reads and writes of a whole buffer (common/io.h). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "common/slot.h"

int sf__pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (size_t)r;
	}
	return 0;
}

int sf__pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

/* What a lock file holds, written by the process that created it: a file without it,
 * empty or not, is someone's own, which unlocking would remove. */
static const char lock_mark[] = "shmfeed lock: held by the process with an flock on it\n";

/* Whether `fd` is a regular file holding exactly lock_mark. */
static bool is_lock_file(int fd)
{
	char buf[sizeof(lock_mark)];
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       st.st_size == (off_t)sizeof(lock_mark) - 1 &&
	       sf__pread_full(fd, buf, sizeof(lock_mark) - 1, 0) == 0 &&
	       memcmp(buf, lock_mark, sizeof(lock_mark) - 1) == 0;
}

/* Whether `path` names the file open at `fd`. */
static bool names_fd(const char *path, int fd)
{
	struct stat held, named;

	return fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_dev == named.st_dev &&
	       held.st_ino == named.st_ino;
}

/*
 * A new lock, published whole: a file beside `path`, marked and flocked, then linked to
 * `path`, so that no process ever finds the lock empty or can take its flock before its
 * maker. Returns the descriptor, -EEXIST when `path` exists, or another error. A process
 * killed before the link leaves only its PATH.PID.tmp.
 */
static int publish_lock(const char *path)
{
	char tmp[4096];
	int fd, r;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	unlink(tmp); /* a leftover of a killed process of the same pid */
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = sf__pwrite_full(fd, lock_mark, sizeof(lock_mark) - 1, 0);
	if (r == 0 && (flock(fd, LOCK_EX | LOCK_NB) < 0 || link(tmp, path) < 0))
		r = -errno;
	unlink(tmp);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int sf__path_lock(const char *path)
{
	for (;;) {
		int fd = publish_lock(path);

		if (fd != -EEXIST)
			return fd;
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && errno == ENOENT)
			continue; /* removed between the two calls */
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int r = errno == EWOULDBLOCK ? -EBUSY : -errno;

			close(fd);
			return r;
		}
		if (names_fd(path, fd)) {
			/* Found there: taken over only if marked (a lock left by a process
			 * that was killed); anything else is someone's own file. */
			if (is_lock_file(fd))
				return fd;
			close(fd);
			return -ENOTEMPTY;
		}
		close(fd); /* its holder removed it as this process took it: again */
	}
}

int sf__path_lock_probe(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), r = 0;

	if (fd < 0)
		return 0;
	/* A shared lock conflicts with the exclusive one its holder has. */
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK)
		r = -EBUSY;
	else if (!is_lock_file(fd))
		r = -ENOTEMPTY;
	close(fd);
	return r;
}

void sf__path_unlock(const char *path, int fd)
{
	/* Only the file this lock is: never one a user put there since. */
	if (names_fd(path, fd))
		unlink(path);
	close(fd);
}

/* `path` as a hidden file of its directory, DIR/.NAME.replaced, which neither a
 * directory source nor a glob lists (malloc'd). */
static char *aside_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	const int dir = slash ? (int)(slash - path) + 1 : 0;
	char *p = malloc(strlen(path) + 16);

	if (p)
		sprintf(p, "%.*s.%s.replaced", dir, path, path + dir);
	return p;
}

/* rename(from, to) where `from` may not exist: 1 moved, 0 none there, or -errno. */
static int move_if_there(const char *from, const char *to)
{
	if (rename(from, to) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

static int sync_dir_of(const char *path)
{
	char *copy = strdup(path);
	int dir, r = 0;

	if (!copy)
		return -ENOMEM;
	dir = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (dir < 0)
		return -errno;
	if (fsync(dir) < 0)
		r = -errno;
	close(dir);
	return r;
}

int sf__rename_pair(const char *data_tmp, const char *data, const char *index_tmp,
		    const char *index, const char **ret_failed)
{
	char *data_aside = aside_of(data), *index_aside = aside_of(index);
	int had_data = 0, had_index = 0, r;
	sigset_t stops, old_mask;
	struct stat st;

	/*
	 * A stop signal in the middle, whose handler removes the temporaries (`tokenize`),
	 * left the old pair aside and no new one: the dataset gone from its name (a review).
	 * It waits for the end, a few system calls.
	 */
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stops, &old_mask);
	*ret_failed = NULL;
	r = -ENOMEM;
	if (!data_aside || !index_aside)
		goto out;
	/* Both written files still there, or the old pair stays as it is. */
	*ret_failed = data_tmp;
	r = lstat(data_tmp, &st) < 0 ? -errno : 0;
	if (r == 0) {
		*ret_failed = index_tmp;
		r = lstat(index_tmp, &st) < 0 ? -errno : 0;
	}
	/* A directory at either name is someone's, never moved aside: it was, hidden as
	 * .NAME.replaced, its removal failing unsaid (a source directory of the job among
	 * them; a review). */
	for (int i = 0; i < 2 && r == 0; i++) {
		*ret_failed = i ? index : data;
		if (lstat(*ret_failed, &st) == 0 && S_ISDIR(st.st_mode))
			r = -EISDIR;
	}
	if (r < 0)
		goto out;
	/* The old pair aside, data first: in between, an index without its data. */
	*ret_failed = data;
	had_data = r = move_if_there(data, data_aside);
	if (r < 0)
		goto out;
	*ret_failed = index;
	had_index = r = move_if_there(index, index_aside);
	if (r < 0)
		goto undo;
	SF_TEST_POINT(SF_TP_PAIR_ASIDE);
	/* The new pair in, index first: in between, again an index alone. */
	r = rename(index_tmp, index) < 0 ? -errno : 0;
	if (r < 0)
		goto undo;
	*ret_failed = data;
	if (rename(data_tmp, data) < 0) {
		r = -errno;
		/* The new index back to its temporary name, so that the old pair can
		 * return; else the new index stays alone. */
		if (rename(index, index_tmp) < 0)
			goto out;
		goto undo;
	}
	if (had_data)
		unlink(data_aside);
	if (had_index)
		unlink(index_aside);
	*ret_failed = NULL;
	r = sync_dir_of(index);
	if (r < 0)
		*ret_failed = "its directory, syncing it after the move";
	goto out;
undo:
	/* The old pair back, index first. */
	if (had_index > 0)
		rename(index_aside, index);
	if (had_data > 0)
		rename(data_aside, data);
out:
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	free(data_aside);
	free(index_aside);
	return r;
}

char *sf__megatron_file(const char *path, const char *ext)
{
	size_t n = strlen(path);
	char *p = malloc(n + strlen(ext) + 1);

	if (!p)
		return NULL;
	if (n >= 4 && (!strcmp(path + n - 4, ".bin") || !strcmp(path + n - 4, ".idx")))
		n -= 4;
	memcpy(p, path, n);
	strcpy(p + n, ext);
	return p;
}

bool sf__megatron_prefix(const char *path)
{
	char *bin = sf__megatron_file(path, ".bin");
	const bool there = bin && access(bin, F_OK) == 0;

	free(bin);
	return there;
}

int sf__parent_dir_check(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');
	struct stat st;

	if (!slash || slash == path)
		return 0;
	snprintf(dir, len, "%.*s", (int)(slash - path), path);
	if (stat(dir, &st) < 0)
		return -ENOENT;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

bool sf__xfsz_hold(sigset_t *ret_saved)
{
	sigset_t xfsz;

	sigemptyset(&xfsz);
	sigaddset(&xfsz, SIGXFSZ);
	return pthread_sigmask(SIG_BLOCK, &xfsz, ret_saved) == 0;
}

void sf__xfsz_release(bool held, const sigset_t *saved)
{
	sigset_t xfsz;

	if (!held)
		return;
	sigemptyset(&xfsz);
	sigaddset(&xfsz, SIGXFSZ);
	while (sigtimedwait(&xfsz, NULL, &(struct timespec){0}) == SIGXFSZ)
		;
	pthread_sigmask(SIG_SETMASK, saved, NULL);
}

int sf__glob_pattern(const char *path, char **ret_pattern)
{
	char *dirs, *out;
	size_t lit = 0, n = 0;
	struct stat st;

	if (!strpbrk(path, "*?["))
		return 0;
	dirs = strdup(path);
	if (!dirs)
		return -ENOMEM;
	/* The leading directories there under their names, up to the first one that is not. */
	for (char *slash = strchr(dirs + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		int there;

		*slash = '\0';
		there = stat(dirs, &st) == 0 && S_ISDIR(st.st_mode);
		*slash = '/';
		if (!there)
			break;
		lit = (size_t)(slash - dirs) + 1;
	}
	free(dirs);
	if (!strpbrk(path + lit, "*?["))
		return 0;
	out = malloc(2 * lit + strlen(path + lit) + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < lit; i++) {
		if (strchr("*?[\\", path[i]))
			out[n++] = '\\';
		out[n++] = path[i];
	}
	strcpy(out + n, path + lit);
	*ret_pattern = out;
	return 1;
}

int sf__create_fresh(const char *path)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = open(path, flags, 0666);

	if (fd < 0 && errno == EEXIST && unlink(path) == 0)
		fd = open(path, flags, 0666);
	return fd < 0 ? -errno : fd;
}

const char *sf__fsize_hint(int err)
{
	return err == EFBIG || err == -EFBIG ? " (the file size limit, ulimit -f)" : "";
}
