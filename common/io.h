/*
 * Positioned reads and writes of a whole buffer: pread(2) and pwrite(2) may move fewer
 * bytes than asked, or be interrupted by a signal, and each caller would otherwise loop.
 */
#ifndef SF_COMMON_IO_H
#define SF_COMMON_IO_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * sf__pread_full - read the `n` bytes at `off` of `fd` into `buf`, again after EINTR or a
 * short read. Returns 0, -errno, or -EIO when the file ends first.
 */
int sf__pread_full(int fd, void *buf, size_t n, uint64_t off);

/*
 * sf__pwrite_full - write the `n` bytes of `buf` at `off` of `fd`, again after EINTR or a
 * short write. Returns 0, -errno, or -EIO when a write moves nothing.
 */
int sf__pwrite_full(int fd, const void *buf, size_t n, uint64_t off);

/*
 * sf__path_lock - an exclusive flock on the file `path` (created if missing), without
 * waiting: its descriptor, -EBUSY when another process holds it, -ENOTEMPTY when `path`
 * is there and is not a lock file (one that holds the mark its maker wrote, also one left
 * by a process that was killed; anything else, empty or not, is someone's own file, let
 * go and never removed), or -errno. The
 * lock is on the file `path` names when it returns: one unlinked by its holder meanwhile
 * is let go and `path` taken again, so two processes never both hold `path`. A new lock
 * is written and flocked as PATH.PID.tmp and linked to `path`, so no process finds it
 * unmarked; a process killed before the link leaves only that temporary name.
 * sf__path_lock_probe - what sf__path_lock() would find, taking nothing and creating
 * nothing: 0 (absent or free), -EBUSY or -ENOTEMPTY.
 * sf__path_unlock - remove `path` if it is still the locked file, and let the lock go.
 */
int sf__path_lock(const char *path);
int sf__path_lock_probe(const char *path);
void sf__path_unlock(const char *path, int fd);

/*
 * sf__rename_pair - move a written data file and its index (a Megatron .bin and .idx)
 * from their temporary names into place, replacing an older pair. Nothing is touched
 * unless both temporaries are still there. The old pair moves aside (as hidden files
 * DIR/.NAME.replaced), data first; the new index and then the new data take their names;
 * the old pair is removed and the directory synced. A failure on the way puts the old
 * pair back (a review lost it to an index that could not be replaced); a crash on the way
 * leaves an index without its data, which every reader refuses ("cannot open"), never
 * data without its index (format auto reads a lone .bin of uint16 tokens as a nanoGPT
 * file: a review lost a pair's index to a temporary that vanished) nor new data beside
 * the old index. Returns 0, or -errno with what failed in *ret_failed.
 */
int sf__rename_pair(const char *data_tmp, const char *data, const char *index_tmp,
		    const char *index, const char **ret_failed);

/*
 * sf__megatron_file - the file `ext` (".bin" or ".idx") of the Megatron pair that `path`
 * names by its prefix or by either file: PATH.bin and PATH.idx for a prefix, the other
 * suffix for a file. The one place of that rule. Malloc'ed; NULL when out of memory.
 */
char *sf__megatron_file(const char *path, const char *ext);

/* sf__megatron_prefix - whether `path`, naming no file, names a Megatron pair by its
 * prefix (its .bin is there). */
bool sf__megatron_prefix(const char *path);

/*
 * sf__parent_dir_check - whether the directory `path` goes in (the part before its last
 * '/', copied into `dir`, `len` bytes) is one: 0, also for a path with no such part;
 * -ENOENT when it does not exist, -ENOTDIR when it is something else.
 */
int sf__parent_dir_check(const char *path, char *dir, size_t len);

/*
 * sf__xfsz_hold - block SIGXFSZ in this thread, so that a write past RLIMIT_FSIZE fails
 * with EFBIG instead of killing the process; the old mask goes to *ret_saved. Returns
 * whether it did. sf__xfsz_release - take the signal such writes left pending, and put
 * the mask back (when `held`).
 */
bool sf__xfsz_hold(sigset_t *ret_saved);
void sf__xfsz_release(bool held, const sigset_t *saved);

/*
 * sf__glob_pattern - `path` as a glob(3) pattern whose leading directories that exist
 * under their literal names are taken literally (their *?[ and backslashes escaped): a
 * job file in "runs[1]/" with a source "*.txt" names the files of runs[1], not of runs1,
 * as a file of exactly a path's name is taken literally before any pattern. Returns 1
 * with the pattern in *ret_pattern (free it), 0 when no glob character is left past
 * those directories (the path is literal), or -ENOMEM.
 */
int sf__glob_pattern(const char *path, char **ret_pattern);

/*
 * sf__create_fresh - create the file `path` for writing (mode 0666 less the umask),
 * new: what is at the name (a file a killed run left, a link) is removed first, the name
 * only, and the file is never opened through a link, so that a link planted at a
 * temporary's guessable name cannot have the output written into the file it names.
 * Returns the descriptor (O_CLOEXEC) or -errno.
 */
int sf__create_fresh(const char *path);

/*
 * sf__fsize_hint - what a write's error `err` (an errno value, either sign) says beyond
 * strerror(): for EFBIG, " (the file size limit, ulimit -f)"; else "".
 */
const char *sf__fsize_hint(int err);

#endif
