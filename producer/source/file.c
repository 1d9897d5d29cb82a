/*
 * Source file identity (producer/source/file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/source/file.h"

int sf__source_open(const char *path, struct stat *st, struct sf_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), err = errno;
	char target[256];
	ssize_t n;

	if (fd >= 0) {
		if (fstat(fd, st) == 0 && S_ISREG(st->st_mode))
			return fd;
		close(fd);
		return sf__err(e, SF_E_SOURCE, "%s: not a regular file", path);
	}
	n = (err == ENOENT || err == ELOOP) ? readlink(path, target, sizeof(target) - 1) : -1;
	if (n < 0)
		return sf__err(e, -err, "%s: cannot open: %s", path, strerror(err));
	target[n] = 0;
	return sf__err(e, -err, "%s: cannot open: a symbolic link to %s, which %s", path, target,
		       err == ENOENT ? "does not exist" : "leads to a loop of links");
}

void sf__file_id_of(const struct stat *st, struct sf_file_id *ret_id)
{
	ret_id->dev = (uint64_t)st->st_dev;
	ret_id->ino = (uint64_t)st->st_ino;
	ret_id->size = (uint64_t)st->st_size;
	ret_id->mtime_ns =
		(uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
	ret_id->ctime_ns =
		(uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
}

bool sf__file_id_same(const struct sf_file_id *a, const struct sf_file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns;
}

int sf__file_id_check(const char *path, const struct sf_file_id *id, struct sf_err *e)
{
	struct sf_file_id now;
	struct stat st;

	if (stat(path, &st) < 0)
		return sf__err(e, SF_E_SOURCE, "%s: changed under the running job: %s", path,
			       strerror(errno));
	sf__file_id_of(&st, &now);
	if (now.dev != id->dev || now.ino != id->ino)
		return sf__err(e, SF_E_SOURCE,
			       "%s: changed under the running job: another file now has its name",
			       path);
	if (now.size != id->size)
		return sf__err(e, SF_E_SOURCE,
			       "%s: changed under the running job: %llu bytes, %llu when opened",
			       path, (unsigned long long)now.size, (unsigned long long)id->size);
	if (now.mtime_ns != id->mtime_ns)
		return sf__err(e, SF_E_SOURCE,
			       "%s: changed under the running job: modified since it was opened",
			       path);
	return 0;
}
