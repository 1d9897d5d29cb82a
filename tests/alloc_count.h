/*
 * Allocation counting for the steady-state tests (invariant A1: no allocation in the
 * steady state): alloc_count.c interposes malloc, calloc, realloc and mmap in the program
 * it is linked into and counts every call. It must be compiled into the test executable
 * itself (not a shared library), so that its definitions take the place of the C
 * library's for the whole process.
 *
 * The sanitizers interpose the allocator themselves; under them SANITIZED is defined,
 * nothing is interposed and the count stays 0, so a test must skip its count then.
 */
#ifndef SF_TESTS_ALLOC_COUNT_H
#define SF_TESTS_ALLOC_COUNT_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

/* Calls to malloc, calloc, realloc and mmap by this process since the last reset. */
unsigned long alloc_count(void);
void alloc_count_reset(void);

#ifndef SANITIZED
/*
 * The counter must see what it is meant to count, or a zero proves nothing: makes one
 * malloc and one mmap and returns NULL when each was counted once, or the name of the
 * call that was not ("malloc" or "mmap"). It does not reset the count.
 */
const char *alloc_count_self_check(void);

/*
 * alloc_count_require - the self-check, or exit(1) with "FAIL: X interposition is not
 * effective" on stderr when it fails.
 */
void alloc_count_require(void);
#endif

#endif
