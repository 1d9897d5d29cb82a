/*
 * A C consumer of a running shmfeed job: attaches as one local rank, reads N batches as
 * CPU views and prints each step's digest and first tokens. Built against an installed
 * shmfeed:
 *
 *   cc examples/consumer.c $(pkg-config --cflags --libs shmfeed) -o consumer
 *   ./consumer JOB [LOCAL_RANK] [N]
 */
#include <stdio.h>
#include <stdlib.h>

#include <shmfeed/shmfeed.h>

int main(int argc, char **argv)
{
	char err[512];
	struct sf_consumer *c;
	struct sf_batch b;
	int rank = argc > 2 ? atoi(argv[2]) : 0, n = argc > 3 ? atoi(argv[3]) : 4, r;

	if (argc < 2) {
		fprintf(stderr, "usage: %s JOB [LOCAL_RANK] [N]\n", argv[0]);
		return 2;
	}
	r = sf_consumer_attach(argv[1], rank, SF_DEVICE_NONE, SF_ATTACH_CPU, &c, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "consumer: cannot attach to job %s: %s\n", argv[1], err);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		r = sf_consumer_next(c, 10000, &b);
		if (r < 0) {
			fprintf(stderr, "consumer: step %d: %s\n", i, sf_consumer_errmsg(c));
			break;
		}
		printf("step %llu digest %016llx first token %u\n", (unsigned long long)b.step,
		       (unsigned long long)b.digest,
		       b.dtype == SF_DTYPE_U16 ? ((const uint16_t *)b.tokens)[0]
					       : (unsigned)((const int32_t *)b.tokens)[0]);
	}
	sf_consumer_detach(c);
	return r < 0 ? 1 : 0;
}
