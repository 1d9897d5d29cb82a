/*
 * Fuzz target of arena headers: the input is the header page of a same-user arena file
 * (zero-padded to a page; the rest of the file is zero), as a hostile or corrupted
 * /dev/shm object would present it. The file is made as large as the header's
 * total_size says when that is small, else of some other small size, so that both a
 * truthful and a lying size are reached. Then:
 *   - sf__arena_attach() either refuses with a message, or
 *   - every participant, ring, slot header, telemetry block and payload byte the header
 *     implies is read (what `shmfeed inspect` and the supervisor read), the ring
 *     positions are computed, and a CPU consumer attaches as the last local rank, asks
 *     for a batch without waiting, reads its state and stats, seeks, and detaches.
 * A header that makes any of this touch memory outside the file crashes (SIGSEGV or
 * SIGBUS), which is what the target exists to rule out.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the files and
 * directories given as arguments (the committed corpus tests/fuzz/corpus/arena/ in CI).
 * The corpus holds headers written by sf__arena_create() (creator pid, start time and
 * creation time then zeroed) for three geometries, valid_*: 1 rank x 1 slot; 2 ranks x
 * 4 slots with checksums, 2 producers and a rank base; 3 x 3 with int32 tokens and
 * document starts. The lie_* files are the 2 x 4 header with one lie each: 1000 ranks,
 * slots_off 2^50, payloads_off near the end, 100000 producers, token_bytes 0, a
 * B x (T+1) x 4 that wraps 64 bits, total_size 2^62, the huge-page flag, an unterminated
 * job name, a verify_every of 0. (Layout version 4 kept these files' bytes but for the
 * version word and verify_every, where version 3 had padding.)
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/slot.h"

/* Files stay small: tmpfs allocates what the consumer's attach populates and what
 * read_everything() touches. */
#define FILE_CAP (UINT64_C(1) << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void read_everything(const struct sf_arena *a)
{
	const struct sf_arena_header *h = a->hdr;
	const uint32_t R = h->geo.ranks, K = h->geo.slots_per_rank;
	const uint32_t nparts = h->geo.max_producers + R;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < nparts; i++) {
		sum += (uint64_t)atomic_load_explicit(&a->participants[i].pid,
						      memory_order_relaxed);
		sum += atomic_load_explicit(&a->telemetry[i].tokens, memory_order_relaxed);
		sum += a->telemetry[i].pad[3];
	}
	for (uint32_t r = 0; r < R; r++) {
		sum += atomic_load_explicit(&a->rings[r].ready_seq, memory_order_relaxed);
		sum += sf__ring_next_step(a, r);
		for (uint32_t i = 0; i < K; i++) {
			const unsigned char *p = sf__arena_payload(a, r, i);

			sum += atomic_load_explicit(&sf__arena_slot(a, r, i)->word,
						    memory_order_relaxed);
			sum += p[0] + p[h->payload_bytes - 1] + p[h->payload_stride - 1];
		}
	}
	sink = sum;
}

static void consume(const char *job, const struct sf_arena *a)
{
	struct sf_consumer *c = NULL;
	struct sf_consumer_stats st;
	struct sf_resume state;
	struct sf_batch b;
	char msg[256] = "";
	int r;

	r = sf_consumer_attach(job, (int32_t)a->hdr->geo.ranks - 1, SF_DEVICE_NONE, SF_ATTACH_CPU,
			       &c, msg, sizeof(msg));
	if (r < 0) {
		if (!msg[0])
			abort();
		return;
	}
	r = sf_consumer_next(c, 0, &b);
	if (r == 0)
		sink = b.digest; /* the zeroed body holds no READY slot, but be general */
	sf_consumer_state(c, &state);
	sf_consumer_stats(c, &st);
	state.samples += (uint64_t)a->hdr->geo.batch * a->hdr->geo.world_size;
	sf_consumer_seek(c, &state);
	sf_consumer_detach(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char page[SF_PAGE_SIZE];
	struct sf_arena_header h;
	struct sf_arena *a = NULL;
	struct sf_err e = {0};
	char job[64], name[96];
	uint64_t file_size;
	int fd, r;

	memset(page, 0, sizeof(page));
	memcpy(page, data, size < sizeof(page) ? size : sizeof(page));
	memcpy(&h, page, sizeof(h));
	file_size = h.total_size <= FILE_CAP ? h.total_size : h.total_size % FILE_CAP;
	if (file_size < sizeof(page))
		file_size = sizeof(page);

	snprintf(job, sizeof(job), "fuzz-arena-%d", (int)getpid());
	snprintf(name, sizeof(name), "/shmfeed.%s", job);
	shm_unlink(name);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(name);
		abort();
	}
	if (ftruncate(fd, (off_t)file_size) < 0 ||
	    pwrite(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page)) {
		perror(name);
		shm_unlink(name);
		abort();
	}
	close(fd);

	r = sf__arena_attach(job, NULL, &a, &e);
	if (r < 0) {
		if (!e.msg[0] || a)
			abort();
	} else {
		read_everything(a);
		consume(job, a);
		sf__arena_detach(a);
	}
	shm_unlink(name);
	return 0;
}
