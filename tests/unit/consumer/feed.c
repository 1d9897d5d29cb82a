/*
 * The test feed: deterministic synthetic producers (see feed.h for the content rule),
 * forked from the process that creates the arena, as the launcher will fork the real
 * ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "common/slot.h"
#include "tests/unit/consumer/feed.h"

uint64_t feed_mix(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xBF58476D1CE4E5B9ull;
	z ^= z >> 27;
	z *= 0x94D049BB133111EBull;
	z ^= z >> 31;
	return z;
}

uint64_t feed_token_bytes(const struct feed *f)
{
	return (uint64_t)f->geo.batch * f->geo.seq_tokens * f->geo.token_bytes;
}

static uint32_t token_of(const struct feed *f, const uint64_t base, uint64_t k, uint32_t j)
{
	if (f->file_tokens)
		return f->file_tokens[base + j];
	return (uint32_t)(feed_mix(f->opt.seed + k * FEED_GOLDEN + j * FEED_ODD) % f->opt.vocab);
}

uint32_t feed_fill(const struct feed *f, uint32_t global_rank, uint64_t step, void *payload)
{
	const uint32_t B = f->geo.batch, S = f->geo.seq_tokens, D = f->geo.doc_starts_per_seq;
	uint32_t *docs = (uint32_t *)((unsigned char *)payload +
				      sf__doc_starts_offset(f->geo.batch, f->geo.seq_tokens,
							    f->geo.token_bytes));

	if (f->opt.steps && step >= f->opt.steps)
		return 0;
	for (uint32_t b = 0; b < B; b++) {
		uint64_t k = step * B * f->geo.world_size + (uint64_t)global_rank * B + b;
		uint64_t base = 0;
		uint32_t nd = 0;

		if (f->file_tokens)
			base = feed_mix(f->opt.seed + k * FEED_GOLDEN) % (f->file_ntokens - S);
		for (uint32_t j = 0; j < S; j++) {
			uint32_t t = token_of(f, base, k, j);

			if (f->geo.token_bytes == 2)
				((uint16_t *)payload)[(size_t)b * S + j] = (uint16_t)t;
			else
				((uint32_t *)payload)[(size_t)b * S + j] = t;
			if (D && nd < D && t % FEED_DOC_MOD == 0)
				docs[(size_t)b * D + nd++] = j;
		}
		while (nd < D)
			docs[(size_t)b * D + nd++] = UINT32_MAX;
	}
	return (uint32_t)f->arena->hdr->payload_bytes;
}

static void producer_run(struct feed *f, uint32_t index)
{
	struct sf_arena *a = f->arena;
	struct sf_fill fill;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (sf__participant_register(a, index, SF_ROLE_PRODUCER, (int32_t)index, NULL) < 0)
		_exit(2);
	while (sf__producer_claim(a, index, -1, &fill) == 0) {
		uint32_t g = fill.global_rank;
		uint32_t len = feed_fill(f, g, fill.step, fill.payload);

		/* An end marker carries the job's samples, as the real producers' do. */
		sf__producer_publish(a, index, &fill, len,
				     (len ? fill.step : f->opt.steps) * f->geo.batch *
						     f->geo.world_size +
					     (len ? (uint64_t)g * f->geo.batch : 0));
	}
	sf__participant_unregister(a, index);
	_exit(0);
}

static int map_token_file(struct feed *f, struct sf_err *e)
{
	struct stat st;
	void *p;
	int fd = open(f->opt.token_file, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return sf__err(e, -errno, "cannot open %s: %s", f->opt.token_file, strerror(errno));
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size / 2 <= f->geo.seq_tokens) {
		close(fd);
		return sf__err(e, SF_E_SOURCE, "%s is too short", f->opt.token_file);
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return sf__err(e, -errno, "cannot map %s", f->opt.token_file);
	f->file_tokens = p;
	f->file_ntokens = (uint64_t)st.st_size / 2;
	f->file_map_size = (size_t)st.st_size;
	return 0;
}

static uint64_t stream_digest(const struct feed *f)
{
	uint64_t fields[8] = {f->opt.seed,	  f->opt.vocab,
			      f->geo.seq_tokens,  (uint64_t)f->geo.batch * f->geo.world_size,
			      f->geo.token_bytes, f->geo.doc_starts_per_seq,
			      f->opt.steps,	  0};

	if (f->opt.token_file)
		fields[7] = XXH3_64bits(f->opt.token_file, strlen(f->opt.token_file));
	return XXH3_64bits(fields, sizeof(fields));
}

int feed_start(const struct feed_options *o, struct feed **ret, struct sf_err *e)
{
	struct sf_arena_options ao = {.verify_every = o->verify_every};
	struct feed *f;
	int r;

	if (o->producers > sizeof(f->pids) / sizeof(f->pids[0]))
		return sf__err(e, SF_E_CONFIG, "at most 64 producers");
	f = calloc(1, sizeof(*f));
	if (!f)
		return sf__err(e, -ENOMEM, "out of memory");
	f->opt = *o;
	if (!f->opt.vocab)
		f->opt.vocab = 50257;
	f->geo = (struct sf_geometry){
		.ranks = o->ranks,
		.slots_per_rank = o->slots_per_rank,
		.max_producers = o->producers ? o->producers : 1, /* a test may be one itself */
		.batch = o->batch,
		.seq_tokens = o->seq_len + 1,
		.token_bytes = o->token_bytes,
		.doc_starts_per_seq = o->doc_starts_per_seq,
		.world_size = o->world_size ? o->world_size : o->ranks,
		.rank_base = o->rank_auto ? 0 : o->rank_base,
		.samples_per_epoch = o->samples_per_epoch,
		.flags = (o->checksum ? SF_ARENA_F_CHECKSUM : 0) |
			 (o->doc_starts_per_seq ? SF_ARENA_F_DOC_STARTS : 0) |
			 (o->rank_auto ? SF_ARENA_F_RANK_AUTO : 0),
	};
	if (o->token_file) {
		r = map_token_file(f, e);
		if (r < 0)
			goto fail;
	}
	f->geo.config_digest = stream_digest(f);
	r = sf__arena_create(o->job, &f->geo, &ao, &f->arena, NULL, 0, e);
	if (r < 0)
		goto fail;
	sf__arena_set_job_state(f->arena, SF_JOB_RUNNING);
	for (uint32_t p = 0; p < o->producers; p++) {
		pid_t pid = fork();

		if (pid < 0) {
			r = sf__err(e, -errno, "fork: %s", strerror(errno));
			feed_stop(f);
			return r;
		}
		if (pid == 0)
			producer_run(f, p);
		f->pids[p] = pid;
	}
	*ret = f;
	return 0;
fail:
	if (f->file_tokens)
		munmap((void *)f->file_tokens, f->file_map_size);
	free(f);
	return r;
}

void feed_stop(struct feed *f)
{
	if (!f)
		return;
	sf__arena_set_job_state(f->arena, SF_JOB_STOPPING);
	for (uint32_t p = 0; p < f->opt.producers; p++)
		if (f->pids[p] > 0)
			waitpid(f->pids[p], NULL, 0);
	sf__arena_destroy(f->arena);
	if (f->file_tokens)
		munmap((void *)f->file_tokens, f->file_map_size);
	free(f);
}
