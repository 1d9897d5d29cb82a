/*
 * The names consumer/cuda.c looks up with dlsym() against the real cuda.h: each must be
 * the symbol cuda.h maps the function to (cuMemAlloc is cuMemAlloc_v2, cuStreamWaitEvent
 * is itself). A wrong one builds and passes every test against the fake driver, which
 * exports exactly the table's names, and fails on a real driver as "driver too old".
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "consumer/cuda.h"

#define NAME_(fn) #fn
#define NAME(fn)  NAME_(fn) /* after cuda.h's versioning macros */

int main(void)
{
	static const struct {
		const char *header, *table;
	} names[] = {
#define ENTRY(fn, name) {NAME(fn), name},
		CUDA_SYMBOLS(ENTRY)
#undef ENTRY
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(names[i].header, names[i].table)) {
			printf("FAIL: the table looks up %s, cuda.h %d names %s\n", names[i].table,
			       CUDA_VERSION, names[i].header);
			bad = 1;
		}
	printf("%s: %zu symbol names against cuda.h %d\n", bad ? "FAIL" : "ok",
	       sizeof(names) / sizeof(names[0]), CUDA_VERSION);
	return bad;
}
