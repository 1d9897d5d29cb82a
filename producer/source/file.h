/*
 * What every source file shares, whatever its format: its identity for the length of a
 * job (device, inode, size, modification time), taken at open and compared with stat()
 * of its path while the job runs, so that a file replaced, rewritten or truncated under
 * the job stops it rather than changing its data.
 */
#ifndef SF_PRODUCER_SOURCE_FILE_H
#define SF_PRODUCER_SOURCE_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/errors.h"

struct sf_file_id {
	uint64_t dev;
	uint64_t ino;
	uint64_t size;
	uint64_t mtime_ns;
	/* What a cached index is checked against too: an edit in place with the size and
	 * mtime put back changes it. Not checked while a job runs (a chmod or a new hard
	 * link change it without changing the bytes). */
	uint64_t ctime_ns;
};

/* sf__file_id_same - whether a file is still the one of `id`, as a running job checks it:
 * its device, inode, size and mtime (not its ctime). */
bool sf__file_id_same(const struct sf_file_id *a, const struct sf_file_id *b);

/*
 * sf__source_open - open a source file read-only and fstat it into *st; it must be a
 * regular file. O_NONBLOCK, so that a FIFO is refused rather than waited on. Returns the
 * descriptor, or an error naming the path (a symbolic link that leads nowhere says where
 * it points).
 */
int sf__source_open(const char *path, struct stat *st, struct sf_err *e);

/* sf__file_id_of - the identity recorded in `st`. */
void sf__file_id_of(const struct stat *st, struct sf_file_id *ret_id);

/*
 * sf__file_id_check - whether `path` is still the file `id` describes. Returns 0, or
 * SF_E_SOURCE naming what changed.
 */
int sf__file_id_check(const char *path, const struct sf_file_id *id, struct sf_err *e);

#endif
