/*
 * GPU test: attach a consumer to device 0, let it register the ring and copy batches to
 * the device with cuMemcpyHtoDAsync, copy each batch back with cuMemcpyDtoH and compare
 * it with the feed rule. Exits 77 (skip) where there is no CUDA driver or device.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "consumer/cuda.h"
#include "tests/unit/consumer/feed.h"

#define STEPS 64

static int fail(const char *what, const char *detail)
{
	fprintf(stderr, "test_gpu_dma: %s: %s\n", what, detail);
	return 1;
}

int main(void)
{
	char job[64], msg[256];
	struct feed_options o = {.ranks = 2,
				 .batch = 12,
				 .seq_len = 1024,
				 .slots_per_rank = 4,
				 .producers = 2,
				 .token_bytes = 2,
				 .doc_starts_per_seq = 8,
				 .checksum = 1,
				 .seed = 11};
	const struct sf_cuda *cu;
	struct sf_consumer *c = NULL;
	struct sf_consumer_info info;
	struct sf_err e = {0};
	struct feed *f;
	unsigned char *want, *back;
	uint64_t doc_off;
	sf_cucontext ctx, popped;
	sf_cudevice dev;
	int r, rc = 0;

	r = sf__cuda_load(&cu, &e);
	if (r == -ENODEV) {
		printf("SKIP: %s\n", e.msg);
		return 77;
	}
	if (r < 0)
		return fail("loading CUDA", e.msg);
	snprintf(job, sizeof(job), "t-gpu-%d", (int)getpid());
	o.job = job;
	sf__arena_unlink_job(job);
	if (feed_start(&o, &f, &e) < 0)
		return fail("feed", e.msg);
	r = sf_consumer_attach(job, 1, 0, 0, &c, msg, sizeof(msg));
	if (r < 0) {
		feed_stop(f);
		return fail("attach to device 0", msg);
	}
	sf_consumer_info(c, &info);
	if (info.gpu_buffers != 2 || !info.device_buffer[0] || !info.device_buffer[1])
		rc = fail("attach", "no device buffers in GPU mode");
	want = malloc(f->arena->hdr->payload_bytes);
	back = malloc(f->arena->hdr->payload_bytes);
	doc_off = sf__doc_starts_offset(f->geo.batch, f->geo.seq_tokens, f->geo.token_bytes);
	if (cu->cuDeviceGet(&dev, 0) || cu->cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cu->cuCtxPushCurrent(ctx))
		rc = fail("context", "cannot make the primary context current");
	for (uint64_t s = 0; s < STEPS && !rc; s++) {
		struct sf_batch b;
		sf_curesult cr;

		r = sf_consumer_next(c, 10000, &b);
		if (r < 0) {
			rc = fail("next", sf_consumer_errmsg(c));
			break;
		}
		feed_fill(f, 1 + o.rank_base, s, want);
		if (b.tokens || !b.device_ptr || b.device_ptr != info.device_buffer[b.buffer])
			rc = fail("batch", "GPU mode batch does not point at a device buffer");
		/* The copy is ordered on the legacy default stream (the handle's user stream),
		 * which this synchronous copy also uses. */
		cr = cu->cuMemcpyDtoH(back, b.device_ptr, feed_token_bytes(f));
		if (cr)
			rc = fail("cuMemcpyDtoH", sf__cuda_error_name(cu, cr));
		else if (memcmp(back, want, feed_token_bytes(f)))
			rc = fail("compare", "device copy differs from the feed rule");
		else if ((cr = cu->cuMemcpyDtoH(back, (uint64_t)(uintptr_t)b.doc_starts,
						f->arena->hdr->payload_bytes - doc_off)))
			rc = fail("cuMemcpyDtoH of the document starts",
				  sf__cuda_error_name(cu, cr));
		else if (memcmp(back, want + doc_off, f->arena->hdr->payload_bytes - doc_off))
			rc = fail("compare", "document starts on the device differ");
		else if (b.digest != sf_digest(want, feed_token_bytes(f), 0))
			rc = fail("digest", "batch digest differs");
	}
	if (!rc)
		printf("ok: %d batches of %llu bytes copied to device 0 and back\n", STEPS,
		       (unsigned long long)feed_token_bytes(f));
	cu->cuCtxPopCurrent(&popped);
	cu->cuDevicePrimaryCtxRelease(dev);
	sf_consumer_detach(c);
	feed_stop(f);
	free(want);
	free(back);
	return rc;
}
