/*
 * The source files a process has mapped, as a bounded resource: at most `capacity`
 * files are mapped at once, the least recently used one unmapped to make room. The
 * capacity comes from the limits the process has (vm.max_map_count, RLIMIT_NOFILE), so
 * a corpus of a million files opens and runs where mapping each one would fail. A
 * mapping holds no descriptor: each file is opened, mapped (or decompressed) and closed.
 * Decompressed files are memory of the process's own, which the kernel cannot reclaim
 * as it does a mapped file's pages: past SF_FILE_CACHE_PRIVATE_BYTES of them, the least
 * recently used go too, but never the two most recently returned files.
 *
 * The cache belongs to a dataset, but its table is per process: it is allocated before
 * the producers fork, and each then fills its own copy. The most recently returned
 * mapping stays valid until the next sf__file_cache_get() in that process; the cache is
 * used by one thread at a time (as a dataset's builders are).
 */
#ifndef SF_PRODUCER_SOURCE_FILE_CACHE_H
#define SF_PRODUCER_SOURCE_FILE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"

struct sf_file_cache;

/*
 * Map file `i` for the cache: the bytes at *ret_data (*ret_len of them), which
 * munmap(*ret_data, *ret_cap) releases; *ret_private 1 when they are memory of the
 * process's own (decompressed), 0 for a mapping of the file. Returns 0 or an error
 * naming the file.
 */
typedef int (*sf_file_map_fn)(void *arg, uint32_t i, const char **ret_data, size_t *ret_len,
			      size_t *ret_cap, int *ret_private, struct sf_err *e);

/* The decompressed bytes a process keeps mapped beyond its two most recent files. */
#define SF_FILE_CACHE_PRIVATE_BYTES (UINT64_C(1) << 30)

/*
 * sf__file_cache_capacity - how many files a process may keep mapped: a quarter of
 * vm.max_map_count (the rest is the process's own: libraries, heap, arena, shared
 * caches) and half its RLIMIT_NOFILE soft limit, at least 2 and at most 4096.
 */
uint32_t sf__file_cache_capacity(void);

/*
 * sf__file_cache_create - a cache for files 0 .. n_files-1, mapped by `map(arg, i)`,
 * holding at most `capacity` of them (0: sf__file_cache_capacity()) and of their
 * decompressed bytes SF_FILE_CACHE_PRIVATE_BYTES, or as many as their two most recently
 * returned hold. Returns 0 and *ret_c (free with sf__file_cache_free()).
 */
int sf__file_cache_create(uint32_t n_files, uint32_t capacity, sf_file_map_fn map, void *arg,
			  struct sf_file_cache **ret_c, struct sf_err *e);

/* sf__file_cache_free - unmap everything and free; accepts NULL. */
void sf__file_cache_free(struct sf_file_cache *c);

/*
 * sf__file_cache_get - the bytes of file `i`, mapped now or before. Valid until the next
 * call. Returns 0, or the error of mapping it.
 */
int sf__file_cache_get(struct sf_file_cache *c, uint32_t i, const char **ret_data, size_t *ret_len,
		       struct sf_err *e);

/* sf__file_cache_drop - unmap every file (the launcher, after its index build). */
void sf__file_cache_drop(struct sf_file_cache *c);

/*
 * sf__file_cache_find - the file whose mapping holds `addr` and the byte offset in it:
 * 1 when found, else 0. Reads the table without locking (a SIGBUS handler calls it).
 */
int sf__file_cache_find(const struct sf_file_cache *c, const void *addr, uint32_t *ret_i,
			uint64_t *ret_off);

/*
 * sf__file_cache_each - call fn(arg, i) for each file i mapped now, until one returns
 * non-zero; returns that, or 0.
 */
int sf__file_cache_each(const struct sf_file_cache *c, int (*fn)(void *arg, uint32_t i), void *arg);

/*
 * sf__file_cache_rotate - the first of the next `n` files (mod the file count) in a
 * round over all files that this process makes `n` at a time, for work spread over
 * calls (checking every file's identity a few thousand files at a time).
 */
uint32_t sf__file_cache_rotate(struct sf_file_cache *c, uint32_t n);

/* sf__file_cache_open_count - files mapped now; *ret_capacity the bound. */
uint32_t sf__file_cache_open_count(const struct sf_file_cache *c, uint32_t *ret_capacity);

/* sf__file_cache_private_bytes - the decompressed bytes mapped now. */
uint64_t sf__file_cache_private_bytes(const struct sf_file_cache *c);

#endif
