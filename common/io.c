/* Positioned reads and writes of a whole buffer (common/io.h). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"

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

int sf__rename_pair(const char *data_tmp, const char *data, const char *index_tmp,
		    const char *index)
{
	char *copy;
	int dir;

	if (unlink(index) < 0 && errno != ENOENT)
		return -errno;
	if (rename(data_tmp, data) < 0 || rename(index_tmp, index) < 0)
		return -errno;
	copy = strdup(index);
	if (!copy)
		return -ENOMEM;
	dir = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (dir < 0)
		return -errno;
	if (fsync(dir) < 0) {
		int r = -errno;

		close(dir);
		return r;
	}
	close(dir);
	return 0;
}
