/*
 * The allocation counter of tests/alloc_count.h: definitions of malloc, calloc, realloc
 * and mmap that count each call and forward it to the C library (glibc's __libc_*
 * entry points, and the mmap system call itself), and the counter's self-check. Linked
 * into a program, these definitions replace the C library's for the whole process,
 * including calls made inside shmfeed's static libraries. free and munmap are not
 * counted: releasing memory is not what the steady-state rule forbids.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/alloc_count.h"

/*
 * A plain counter: the counting tests allocate from one thread per process, and each
 * forked process counts its own calls in its own copy.
 */
static unsigned long allocations;

unsigned long alloc_count(void)
{
	return allocations;
}

void alloc_count_reset(void)
{
	allocations = 0;
}

#ifndef SANITIZED
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

void *malloc(size_t n)
{
	allocations++;
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	allocations++;
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	allocations++;
	return __libc_realloc(p, n);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	allocations++;
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

const char *alloc_count_self_check(void)
{
	/* Volatile, so that the compiler cannot drop a malloc whose block is only freed. */
	void *volatile p;
	unsigned long before;

	before = allocations;
	p = malloc(64);
	free(p);
	if (allocations != before + 1)
		return "malloc";
	before = allocations;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || allocations != before + 1)
		return "mmap";
	munmap(p, 4096);
	return NULL;
}

void alloc_count_require(void)
{
	const char *what = alloc_count_self_check();

	if (what) {
		fprintf(stderr, "FAIL: %s interposition is not effective\n", what);
		exit(1);
	}
}
#endif
