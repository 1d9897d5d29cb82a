/*
 * Shared (not private) futex wait and wake on a 32-bit word in shared memory. Shared
 * futexes are keyed by the physical page, so processes mapping the arena at different
 * addresses wake each other.
 */
#ifndef SF_COMMON_FUTEX_H
#define SF_COMMON_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * sf__futex_wait - sleep while *word == expected, at most timeout_ns (< 0: no limit).
 * Returns 0 when woken, -EAGAIN when the word differed, -ETIMEDOUT, or -EINTR.
 */
int sf__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);

/* sf__futex_wake - wake up to `count` waiters on `word`. */
void sf__futex_wake(_Atomic uint32_t *word, int count);

/*
 * Wake system calls made by this process, so tests can check that a publisher skips the
 * syscall when nobody sleeps.
 */
extern _Atomic uint64_t sf__futex_wake_calls;

#endif
