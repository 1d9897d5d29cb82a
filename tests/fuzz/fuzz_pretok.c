/*
 * Fuzz target of pre-tokenized sources (producer/source/tokens.c): one or two nanoGPT
 * .bin files, llm.c shards or Megatron .bin/.idx pairs, written from the input, are
 * opened as a job's source and every batch of an epoch is built. Any refusal is fine; a
 * job that opens must deliver, for each row, the T + 1 tokens at its offset of the files'
 * concatenated stream, exactly, and the document starts the formats define there (each
 * file's start, the token after an end-of-text id in flat files, each document of a
 * Megatron index), ascending, padded with UINT32_MAX; the windows of the epoch must be
 * distinct multiples of T.
 *
 * Input: byte 0 picks the format (0 nanoGPT, 1 llm.c, 2 Megatron, 3 format auto on a
 * .bin without an index), byte 1 the sequence length T (2 + b % 30) and the document
 * starts per sequence (b / 32 % 4), byte 2 the files (1 + b % 2) and the end-of-text id
 * (b / 2). Then per file a little-endian uint16 length and that many bytes (the last file
 * takes the rest); for Megatron, the .idx that way and then the .bin.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the files and
 * directories given as arguments (the committed corpus tests/fuzz/corpus/pretok/ in CI).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "producer/producer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_STEPS 64

static char dir[64];

static void rm_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (dir[0] && system(cmd) != 0)
		fprintf(stderr, "fuzz_pretok: cannot remove %s\n", dir);
}

static void die(const char *why)
{
	fprintf(stderr, "fuzz_pretok: %s\n", why);
	rm_dir();
	abort();
}

static void put(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
		die("cannot write a source file");
}

/* The next field of the input: a uint16 length and its bytes, or the rest when `last`. */
static size_t take(const uint8_t **p, size_t *left, int last, const uint8_t **ret)
{
	size_t n = *left;

	if (!last && *left >= 2) {
		n = (size_t)((*p)[0] | (*p)[1] << 8);
		*p += 2;
		*left -= 2;
		if (n > *left)
			n = *left;
	} else if (!last) {
		n = 0;
	}
	*ret = *p;
	*p += n;
	*left -= n;
	return n;
}

static uint64_t u64_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/*
 * The stream the job must read, from the files as they were written (the job opened them,
 * so their headers hold): each token, and whether a document starts at it.
 */
struct stream {
	uint32_t *tok;
	uint8_t *start;
	uint64_t n;
};

static void append(struct stream *s, const uint8_t *p, uint64_t count, uint32_t width,
		   const uint8_t *idx, uint32_t eot, int flat_eot)
{
	uint64_t base = s->n;

	s->tok = realloc(s->tok, (s->n + count) * sizeof(*s->tok));
	s->start = realloc(s->start, s->n + count + 1);
	if ((count && !s->tok) || !s->start)
		die("out of memory");
	for (uint64_t i = 0; i < count; i++) {
		uint32_t v = 0;

		memcpy(&v, p + i * width, width);
		s->tok[base + i] = v;
		/* Flat files are one stream: a document starts after an end-of-text id (the
		 * one ending the file before, for a file's first token) or at the stream's
		 * first token; a Megatron file's come from its index below. */
		s->start[base + i] = flat_eot && (base + i == 0 || s->tok[base + i - 1] == eot);
	}
	if (idx) {
		/* Megatron: the first sequence of each document, at its byte offset. */
		uint64_t n_seqs = u64_at(idx + 18), n_docs = u64_at(idx + 26) - 1;
		const uint8_t *ptrs = idx + 34 + n_seqs * 4, *docs = ptrs + n_seqs * 8;

		for (uint64_t d = 0; d < n_docs; d++) {
			uint64_t seq = u64_at(docs + d * 8);

			if (seq < n_seqs && u64_at(ptrs + seq * 8) / width < count)
				s->start[base + u64_at(ptrs + seq * 8) / width] = 1;
		}
	}
	s->n += count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t fmts[] = {SF_FMT_NANOGPT, SF_FMT_LLMC, SF_FMT_MEGATRON, SF_FMT_AUTO};
	char path[2][160], *paths[2];
	struct sf_source_config src = {0};
	struct sf_config cfg;
	struct sf_dataset *ds = NULL;
	struct sf_builder *b = NULL;
	struct sf_dataset_stats st;
	struct stream s = {0};
	struct sf_err e = {0};
	const uint8_t *p, *idx[2] = {NULL, NULL};
	uint8_t *used = NULL;
	unsigned char *payload = NULL;
	uint32_t fmt, T, D, nfiles, eot;
	size_t left;

	if (size < 3)
		return 0;
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/sf-fuzzpretok-XXXXXX");
		if (!mkdtemp(dir))
			die("no temporary directory");
		atexit(rm_dir);
	}
	fmt = fmts[data[0] % 4];
	T = 2 + data[1] % 30;
	D = data[1] / 32 % 4;
	nfiles = 1 + data[2] % 2;
	eot = data[2] / 2;
	p = data + 3;
	left = size - 3;
	for (uint32_t i = 0; i < nfiles; i++) {
		const uint8_t *bytes;
		size_t n;

		snprintf(path[i], sizeof(path[i]), "%s/%c.bin", dir, 'a' + (int)i);
		if (fmt == SF_FMT_MEGATRON) {
			char ipath[160];

			snprintf(ipath, sizeof(ipath), "%s/%c.idx", dir, 'a' + (int)i);
			n = take(&p, &left, 0, &bytes);
			put(ipath, bytes, n);
			idx[i] = bytes;
		}
		n = take(&p, &left, i == nfiles - 1, &bytes);
		put(path[i], bytes, n);
		paths[i] = path[i];
	}
	sf__config_defaults(&cfg);
	src.paths = paths;
	src.n_paths = nfiles;
	src.format = fmt;
	cfg.sources = &src;
	cfg.n_sources = 1;
	cfg.encoding = "bytes";
	cfg.eot_id = eot;
	cfg.batch_size = 2;
	cfg.seq_len = T;
	cfg.doc_starts = D;
	cfg.world_size = 1;
	cfg.local_ranks = 1;
	cfg.producers = 1;
	cfg.epochs = 1;
	if (sf__dataset_open(&cfg, &ds, &e) < 0)
		goto out;
	sf__dataset_stats(ds, &st);
	/* The files opened, so their headers are as the formats say: read them plainly. */
	for (uint32_t i = 0; i < nfiles; i++) {
		FILE *f = fopen(path[i], "rb");
		uint8_t *bin;
		long len;

		if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
			die("cannot read back a source file");
		bin = calloc((size_t)len + 8, 1); /* a magic's 8-byte read stays inside */
		if (!bin || fread(bin, 1, (size_t)len, f) != (size_t)len)
			die("cannot read back a source file");
		fclose(f);
		if (idx[i]) {
			append(&s, bin, (uint64_t)len / (idx[i][17] == 8 ? 2 : 4),
			       idx[i][17] == 8 ? 2 : 4, idx[i], eot, 0);
		} else if (fmt == SF_FMT_LLMC || (fmt == SF_FMT_AUTO && len >= 4 &&
						  ((u64_at(bin) & 0xffffffffu) == 20240520u ||
						   (u64_at(bin) & 0xffffffffu) == 20240801u))) {
			append(&s, bin + 1024, (uint32_t)u64_at(bin + 8),
			       (u64_at(bin) & 0xffffffffu) == 20240801u ? 4 : 2, NULL, eot, 1);
		} else {
			append(&s, bin, (uint64_t)len / 2, 2, NULL, eot, 1);
		}
		free(bin);
	}
	if (s.n != st.n_tokens)
		die("the job counts other tokens than the files hold");
	payload = malloc(sf__dataset_payload_bytes(ds));
	used = calloc(st.n_windows, 1);
	if (!payload || !used || sf__builder_create(ds, &b, &e) < 0)
		die("out of memory");
	for (uint64_t step = 0; step < st.n_steps && step < MAX_STEPS; step++) {
		const uint32_t L = T + 1, tb = st.token_bytes;
		const uint32_t *starts =
			(const uint32_t *)(payload + sf__doc_starts_offset(2, L, tb));
		uint64_t first;
		uint32_t len;

		if (sf__builder_fill(b, 0, step, payload, &len, &first, &e) < 0)
			break; /* a data error (an id too wide for the arena, ...) is a refusal */
		if (len == 0)
			die("an empty batch within the epoch");
		for (uint32_t r = 0; r < 2; r++) {
			const uint64_t off = sf__builder_sample_offset(b, first + r);
			uint32_t n = 0;

			if (off % T || off / T >= st.n_windows || used[off / T]++)
				die("a window that is not a new multiple of T");
			for (uint32_t j = 0; j < L; j++) {
				uint32_t v = 0;

				memcpy(&v, payload + ((size_t)r * L + j) * tb, tb);
				if (v != s.tok[off + j])
					die("a token other than the file's");
				if (D && s.start[off + j] && n < D && starts[r * D + n++] != j)
					die("a document start missed or misplaced");
			}
			for (; D && n < D; n++)
				if (starts[r * D + n] != UINT32_MAX)
					die("a document start where none is");
		}
	}
out:
	sf__builder_free(b);
	free(payload);
	free(used);
	free(s.tok);
	free(s.start);
	sf__dataset_close(ds);
	return 0;
}
