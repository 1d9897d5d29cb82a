/*
 * Pre-tokenized sources, mapped read-only: nanoGPT .bin files (headerless uint16),
 * llm.c shards (a 256 x int32 header then uint16 or uint32 tokens) and Megatron MMIDIDX
 * .bin/.idx pairs. Each becomes a flat token array; a Megatron index also gives the
 * document boundaries. Every structural check happens here, at open, so that building
 * batches later never meets a malformed file; each failure names the file and the byte
 * offset where it was found.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "common/slot.h"
#include "producer/dataset_impl.h"
#include "producer/last_at_or_before.h"
#include "producer/sigbus.h"
#include "producer/source/file_cache.h"
#include "producer/source/tokens.h"
#include "producer/token_copy.h"

/*
 * llm.c's dev/data/data_common.py (HEADERS_INFO, write_datafile) writes exactly two
 * kinds of shard: gpt-2 (magic 20240520, version 1, uint16 tokens) and llama-3 (magic
 * 20240801, version 7, uint32 tokens); its train_llama3.py asserts version 7.
 */
#define LLMC_HEADER_INTS   256
#define LLMC_MAGIC_U16	   20240520
#define LLMC_MAGIC_U32	   20240801
#define LLMC_VERSION_U16   1
#define LLMC_VERSION_U32   7
#define MEGATRON_MAGIC	   "MMIDIDX\x00\x00"
#define MEGATRON_MAGIC_LEN 9
#define MEGATRON_VERSION   1
/* Megatron's DType codes (megatron/core/datasets/indexed_dataset.py). */
#define MEGATRON_INT32	4
#define MEGATRON_UINT16 8

/*
 * Map `path` read-only. It must be a regular file (after symlinks): a device such as
 * /dev/zero or a FIFO is refused, and O_NONBLOCK keeps open() of a FIFO from waiting.
 */
static int map_file(const char *path, void **ret_map, size_t *ret_len, struct sf_file_id *ret_id,
		    struct sf_err *e)
{
	struct stat st;
	void *m;
	int fd = sf__source_open(path, &st, e);

	if (fd < 0)
		return fd;
	sf__file_id_of(&st, ret_id);
	if (st.st_size == 0) {
		close(fd);
		*ret_map = NULL;
		*ret_len = 0;
		return 0;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return sf__err(e, -errno, "%s: cannot map: %s", path, strerror(errno));
	*ret_map = m;
	*ret_len = (size_t)st.st_size;
	return 0;
}

static uint64_t load_u64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static int32_t load_i32(const unsigned char *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * The other files llm.c writes under a .bin name, each with its magic in the first int32
 * of a 1 KiB header: none holds tokens, and read as nanoGPT's (as auto did) their
 * weights, examples or state became batches.
 */
static const struct {
	int32_t magic;
	const char *what;
} llmc_not_tokens[] = {
	{20240326, "a GPT-2 model checkpoint (train_gpt2's weights)"},
	{20240327, "a GPT-2 debug state (train_gpt2's test inputs and outputs)"},
	{20240328, "a tokenizer (gpt2_tokenizer.bin)"},
	{20240522, "an evaluation file (write_evalfile's examples)"},
	{20240527, "a training state (train_gpt2.cu's state_*.bin)"},
	{20240803, "a Llama 3 model or debug state (train_llama3's)"},
};

/* What llm.c file of no tokens `magic` marks, or NULL. */
static const char *llmc_other(int32_t magic)
{
	for (size_t i = 0; i < sizeof(llmc_not_tokens) / sizeof(llmc_not_tokens[0]); i++)
		if (llmc_not_tokens[i].magic == magic)
			return llmc_not_tokens[i].what;
	return NULL;
}

int sf__token_format_detect(const char *path, uint32_t *ret_format)
{
	size_t n = strlen(path);
	unsigned char head[4];
	struct stat st;
	char *idx;
	int fd, r;

	if (n >= 4 && !strcmp(path + n - 4, ".idx")) {
		*ret_format = SF_FMT_MEGATRON;
		return 0;
	}
	idx = sf__megatron_file(path, ".idx");
	if (!idx)
		return -ENOMEM;
	r = access(idx, F_OK);
	free(idx);
	if (r == 0) {
		*ret_format = SF_FMT_MEGATRON;
		return 0;
	}
	/* An llm.c shard announces itself by its magic; any other .bin is nanoGPT's. */
	*ret_format = SF_FMT_NANOGPT;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0; /* the open that follows reports the error with its path */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    read(fd, head, sizeof(head)) == (ssize_t)sizeof(head)) {
		int32_t magic = load_i32(head);

		if (magic == LLMC_MAGIC_U16 || magic == LLMC_MAGIC_U32 || llmc_other(magic))
			*ret_format = SF_FMT_LLMC;
	}
	close(fd);
	return 0;
}

/*
 * 32-bit tokens read as uint16 (a Megatron .bin whose .idx is missing, an int32 file):
 * the high half of an id is 0 below 65,536 and small above (below 32 for vocabularies
 * of up to 2M ids), so every second token is below 32 and at least half are 0 (o200k_base
 * text has up to 12 % of its ids above 65,535 in a window). Over the first
 * 2,048 tokens text hardly does that (a char-level corpus of one letter a line, '\n'
 * being id 0, does: `format: nanogpt` reads any file as given); a file of zeros does,
 * and is left alone.
 */
static int looks_32_bit(const struct sf_token_file *f, struct sf_err *e)
{
	const uint32_t n = f->n_tokens < 2048 ? (uint32_t)f->n_tokens : 2048;
	uint32_t zeros = 0;
	uint16_t v;
	bool nonzero = false;

	if (n < 64)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(&v, f->tokens + 2 * (size_t)i, 2);
		if (i % 2 && v >= 32)
			return 0;
		zeros += i % 2 && !v;
		nonzero |= v != 0;
	}
	if (!nonzero || zeros < n / 4)
		return 0;
	return sf__err(e, SF_E_SOURCE,
		       "%s: every second uint16 token of the first %u is below 32 and at "
		       "least half are 0, as in 32-bit "
		       "tokens: a Megatron .bin whose .idx is missing, or a file of int32 ids "
		       "(format auto reads a .bin without an .idx beside it or an llm.c "
		       "header as nanoGPT's uint16; if these are uint16 tokens, give the "
		       "source `format: nanogpt`)",
		       f->path, n);
}

/*
 * A nanoGPT or llm.c file of no tokens is refused: among shards it is most often one whose
 * writer died (Megatron pairs of no documents stay valid: `tokenize --shard` writes them
 * for parts that get no file).
 */
static int open_nanogpt(struct sf_token_file *f, struct sf_err *e)
{
	if (!f->map_len)
		return sf__err(e, SF_E_SOURCE,
			       "%s: the file is empty (no tokens): a write that did not finish? "
			       "Remove it from the source",
			       f->path);
	if (f->map_len % 2)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %zu: truncated: a nanoGPT file holds uint16 tokens but "
			       "its size is odd",
			       f->path, f->map_len - 1);
	f->tokens = f->map;
	f->width = 2;
	f->n_tokens = f->map_len / 2;
	return 0;
}

static int open_llmc(struct sf_token_file *f, struct sf_err *e)
{
	const unsigned char *h = f->map;
	const size_t hdr = LLMC_HEADER_INTS * sizeof(int32_t);
	int32_t magic, version, count;

	if (f->map_len < hdr)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %zu: truncated: an llm.c header is %zu bytes", f->path,
			       f->map_len, hdr);
	magic = load_i32(h);
	version = load_i32(h + 4);
	count = load_i32(h + 8);
	if (llmc_other(magic))
		return sf__err(e, SF_E_SOURCE,
			       "%s: llm.c's magic %d: %s, not a shard of tokens: leave it out of "
			       "the sources",
			       f->path, magic, llmc_other(magic));
	if (magic != LLMC_MAGIC_U16 && magic != LLMC_MAGIC_U32)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 0: wrong magic %d (llm.c shards have %d or %d)", f->path,
			       magic, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
	if (version != (magic == LLMC_MAGIC_U16 ? LLMC_VERSION_U16 : LLMC_VERSION_U32))
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 4: unsupported llm.c version %d for magic %d (llm.c "
			       "writes version %d for %d, uint16 gpt-2 tokens, and %d for %d, "
			       "uint32 llama-3 tokens)",
			       f->path, version, magic, LLMC_VERSION_U16, LLMC_MAGIC_U16,
			       LLMC_VERSION_U32, LLMC_MAGIC_U32);
	if (count < 0)
		return sf__err(e, SF_E_SOURCE, "%s: byte 8: negative token count %d", f->path,
			       count);
	if (count == 0)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 8: the header announces 0 tokens: a write that did not "
			       "finish? Remove it from the source",
			       f->path);
	f->width = magic == LLMC_MAGIC_U16 ? 2 : 4;
	if ((f->map_len - hdr) / f->width < (uint64_t)count)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %zu: truncated: the header announces %d tokens (%llu "
			       "bytes) but the file ends here",
			       f->path, f->map_len, count,
			       (unsigned long long)hdr + (unsigned long long)count * f->width);
	/* llm.c's loader refuses this too: shards joined by cat, or a count written short. */
	if (f->map_len - hdr > (uint64_t)count * f->width) {
		const unsigned long long end = hdr + (unsigned long long)count * f->width;

		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %llu: the header announces %d tokens, which end here, "
			       "and %llu bytes follow them: shards joined into one file, or a "
			       "wrong count",
			       f->path, end, count, (unsigned long long)f->map_len - end);
	}
	f->tokens = h + hdr;
	f->n_tokens = (uint64_t)count;
	return 0;
}

static int open_megatron(struct sf_token_file *f, const char *idx_path, struct sf_err *e)
{
	const unsigned char *x = f->idx_map;
	/* The header is 9 + 8 + 1 + 8 + 8 = 34 bytes: nothing after it is aligned. */
	const size_t hdr = MEGATRON_MAGIC_LEN + 8 + 1 + 8 + 8;
	uint64_t version, n_seqs, doc_count, need, expect = 0, prev_doc = 0;
	const unsigned char *lens;
	uint8_t code;

	if (f->idx_map_len < hdr)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %zu: truncated: a Megatron index header is %zu bytes",
			       idx_path, f->idx_map_len, hdr);
	if (memcmp(x, MEGATRON_MAGIC, MEGATRON_MAGIC_LEN))
		return sf__err(e, SF_E_SOURCE, "%s: byte 0: wrong magic (expected MMIDIDX)",
			       idx_path);
	version = load_u64(x + 9);
	if (version != MEGATRON_VERSION)
		return sf__err(e, SF_E_SOURCE, "%s: byte 9: unsupported index version %llu",
			       idx_path, (unsigned long long)version);
	code = x[17];
	if (code != MEGATRON_UINT16 && code != MEGATRON_INT32)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 17: dtype code %u is not a token type (4 = int32, "
			       "8 = uint16)",
			       idx_path, code);
	f->width = code == MEGATRON_UINT16 ? 2 : 4;
	n_seqs = load_u64(x + 18);
	doc_count = load_u64(x + 26);
	if (doc_count == 0 || n_seqs > (f->idx_map_len - hdr) / 12 ||
	    doc_count > (f->idx_map_len - hdr) / 8)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 18: %llu sequences and %llu document indices do not fit "
			       "in %zu bytes",
			       idx_path, (unsigned long long)n_seqs, (unsigned long long)doc_count,
			       f->idx_map_len);
	need = hdr + n_seqs * 4 + n_seqs * 8 + doc_count * 8;
	if (f->idx_map_len < need)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %zu: truncated: the header announces %llu bytes", idx_path,
			       f->idx_map_len, (unsigned long long)need);
	/* Longer: the counts at byte 18 are not the file's (its arrays would be read at
	 * other offsets, and a sequence named for it), or Megatron's multimodal index,
	 * whose sequence modes follow (a review found both taken). */
	if (f->idx_map_len == need + n_seqs && n_seqs)
		return sf__err(e, SF_E_SOURCE,
			       "%s: a multimodal index (a mode for each sequence after the "
			       "document indices): not supported, its modes would be ignored",
			       idx_path);
	if (f->idx_map_len != need)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 18: %llu sequences and %llu document indices make an "
			       "index of %llu bytes, but the file holds %zu: counts that are not "
			       "the file's",
			       idx_path, (unsigned long long)n_seqs, (unsigned long long)doc_count,
			       (unsigned long long)need, f->idx_map_len);
	lens = x + hdr;
	f->seq_ptrs = lens + n_seqs * 4;
	f->doc_idx = f->seq_ptrs + n_seqs * 8;
	f->n_seqs = n_seqs;
	f->n_docs = doc_count - 1;
	/* Sequences must lie back to back: the stream is then the .bin file itself. */
	for (uint64_t i = 0; i < n_seqs; i++) {
		int32_t len = load_i32(lens + i * 4);
		uint64_t ptr = load_u64(f->seq_ptrs + i * 8); /* an int64 in the format */

		/* A sequence where the tokens before it have the other width: the dtype code
		 * is not the .bin's (a review: the message blamed a length). */
		if (ptr != expect && len >= 0 && ptr == expect / f->width * (6 - f->width))
			return sf__err(e, SF_E_SOURCE,
				       "%s: byte 17: dtype code %u (%s), but the sequences' "
				       "pointers advance %u bytes a token: the code is not the "
				       ".bin's",
				       idx_path, code, f->width == 2 ? "uint16" : "int32",
				       6 - f->width);
		if (len < 0 || ptr != expect)
			return sf__err(e, SF_E_SOURCE,
				       "%s: byte %llu: sequence %llu has length %d and starts at "
				       "byte %lld of the .bin (expected a non-negative length, "
				       "starting at byte %llu)",
				       idx_path, (unsigned long long)(hdr + i * 4),
				       (unsigned long long)i, len, (long long)ptr,
				       (unsigned long long)expect);
		expect += (uint64_t)len * f->width;
	}
	for (uint64_t d = 0; d < doc_count; d++) {
		const uint64_t s = load_u64(f->doc_idx + d * 8);
		const unsigned long long at = hdr + n_seqs * 12 + d * 8;

		if (d == 0 && s != 0)
			return sf__err(e, SF_E_SOURCE,
				       "%s: byte %llu: document index 0 is %llu: the first is 0",
				       idx_path, at, (unsigned long long)s);
		if (s > n_seqs || (d == doc_count - 1 && s != n_seqs))
			return sf__err(e, SF_E_SOURCE,
				       "%s: byte %llu: document index %llu is %llu: %s, %llu",
				       idx_path, at, (unsigned long long)d, (unsigned long long)s,
				       s > n_seqs ? "past the count of sequences"
						  : "the last is the count of sequences",
				       (unsigned long long)n_seqs);
		if (s < prev_doc)
			return sf__err(e, SF_E_SOURCE,
				       "%s: byte %llu: document index %llu is %llu: below the one "
				       "before it, %llu",
				       idx_path, at, (unsigned long long)d, (unsigned long long)s,
				       (unsigned long long)prev_doc);
		prev_doc = s;
	}
	if (f->map_len != expect)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %zu: the index describes %llu bytes of tokens but the "
			       "file holds %zu",
			       f->path, f->map_len < expect ? f->map_len : (size_t)expect,
			       (unsigned long long)expect, f->map_len);
	f->tokens = f->map;
	f->n_tokens = expect / f->width;
	return 0;
}

/* Unmap what sf__token_file_open() mapped to check the file. */
static void unmap_checked(struct sf_token_file *f)
{
	if (f->map)
		munmap(f->map, f->map_len);
	if (f->idx_map)
		munmap(f->idx_map, f->idx_map_len);
	f->map = f->idx_map = NULL;
	f->tokens = f->seq_ptrs = f->doc_idx = NULL;
}

/* The checks of sf__token_file_open() over the mapped files, under a SIGBUS guard. */
struct format_check {
	struct sf_token_file *f;
	const char *path;
	uint32_t format;
	bool detected;
	struct sf_err *e;
};

static int check_format(void *arg)
{
	struct format_check *c = arg;
	int r;

	switch (c->format) {
	case SF_FMT_NANOGPT:
		r = open_nanogpt(c->f, c->e);
		if (r == 0 && c->detected)
			r = looks_32_bit(c->f, c->e);
		return r;
	case SF_FMT_LLMC:
		return open_llmc(c->f, c->e);
	case SF_FMT_MEGATRON:
		return open_megatron(c->f, c->f->idx_path, c->e);
	default:
		return sf__err(c->e, SF_E_CONFIG, "%s: not a pre-tokenized format", c->path);
	}
}

/* A file truncated while it is checked: its lost pages fault. The launcher died of that
 * SIGBUS, with no word of which file (a review). */
static int check_format_guarded(struct format_check *c)
{
	const struct sf_token_file *f = c->f;
	void *fault;
	int r = sf__sigbus_call(check_format, c, &fault, c->e);
	const char *a = fault;

	if (!fault)
		return r;
	if (f->map && a >= (const char *)f->map && a < (const char *)f->map + f->map_len)
		return sf__sigbus_truncated(f->path, (unsigned long long)(a - (const char *)f->map),
					    c->e);
	if (f->idx_map && a >= (const char *)f->idx_map &&
	    a < (const char *)f->idx_map + f->idx_map_len)
		return sf__sigbus_truncated(
			f->idx_path, (unsigned long long)(a - (const char *)f->idx_map), c->e);
	return sf__err(c->e, -EFAULT, "SIGBUS at address %p, outside %s", fault, f->path);
}

int sf__token_file_open(struct sf_token_file *f, const char *path, uint32_t format, bool detected,
			struct sf_err *e)
{
	struct format_check c = {f, path, format, detected, e};
	int r;

	memset(f, 0, sizeof(*f));
	f->format = format;
	f->path = format == SF_FMT_MEGATRON ? sf__megatron_file(path, ".bin") : strdup(path);
	if (!f->path)
		return sf__err(e, -ENOMEM, "out of memory");
	if (format == SF_FMT_MEGATRON) {
		const size_t n = strlen(path);
		struct stat sb;

		/* A file of another name in a directory of pairs (Megatron's cached *.npy) was
		 * named as NAME.npy.idx, a file nobody gave (a review). */
		if (!(n >= 4 && (!strcmp(path + n - 4, ".bin") || !strcmp(path + n - 4, ".idx"))) &&
		    stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && !sf__megatron_prefix(path)) {
			r = sf__err(e, SF_E_SOURCE,
				    "%s: not a Megatron .bin, .idx or prefix (the source's format "
				    "is megatron): name the pairs alone, or give format auto",
				    path);
			goto fail;
		}
		f->idx_path = sf__megatron_file(path, ".idx");
		if (!f->idx_path) {
			r = sf__err(e, -ENOMEM, "out of memory");
			goto fail;
		}
		r = map_file(f->idx_path, &f->idx_map, &f->idx_map_len, &f->idx_id, e);
		if (r < 0)
			goto fail;
	}
	r = map_file(f->path, &f->map, &f->map_len, &f->id, e);
	if (r < 0)
		goto fail;
	SF_TEST_POINT(SF_TP_TOKENS_MAPPED);
	r = check_format_guarded(&c);
	if (r < 0)
		goto fail;
	/* What the checks found, as offsets; the files are mapped again to be read. */
	f->tokens_off = (uint64_t)(f->tokens - (const unsigned char *)f->map);
	if (f->idx_map) {
		f->seq_ptrs_off = (uint64_t)(f->seq_ptrs - (const unsigned char *)f->idx_map);
		f->doc_idx_off = (uint64_t)(f->doc_idx - (const unsigned char *)f->idx_map);
	}
	unmap_checked(f);
	return 0;
fail:
	sf__token_file_close(f);
	return r;
}

void sf__token_file_close(struct sf_token_file *f)
{
	unmap_checked(f);
	free(f->path);
	free(f->idx_path);
	memset(f, 0, sizeof(*f));
}

int sf__token_file_map(const struct sf_token_file *f, int idx, const char **ret_data,
		       size_t *ret_len, size_t *ret_cap, struct sf_err *e)
{
	const char *path = idx ? f->idx_path : f->path;
	const struct sf_file_id *want = idx ? &f->idx_id : &f->id;
	struct sf_file_id id;
	void *m = NULL;
	size_t len = 0;
	int r = map_file(path, &m, &len, &id, e);

	if (r < 0)
		return r;
	if (!sf__file_id_same(&id, want)) {
		if (m)
			munmap(m, len);
		return sf__file_id_check(path, want, e) < 0
			       ? SF_E_SOURCE
			       : sf__err(e, SF_E_SOURCE, "%s: changed under the running job", path);
	}
	/* Batches read windows at random offsets: read-ahead of neighbours would be waste. */
	if (m && !idx)
		madvise(m, len, MADV_RANDOM);
	*ret_data = m;
	*ret_len = len;
	*ret_cap = len;
	return 0;
}

int sf__tokens_view(const struct sf_dataset *ds, uint32_t i, int with_idx,
		    struct sf_token_view *ret_v, struct sf_err *e)
{
	const struct sf_token_file *f = &ds->token_files[i];
	const char *bin, *idx = NULL;
	size_t len;
	int r = 0;

	/* The index first: the bin is then the most recent, and both stay mapped (the cache
	 * keeps its two most recently returned files). */
	if (with_idx && f->idx_path)
		r = sf__file_cache_get(ds->token_maps, 2 * i + 1, &idx, &len, e);
	if (r >= 0)
		r = sf__file_cache_get(ds->token_maps, 2 * i, &bin, &len, e);
	if (r < 0)
		return r;
	ret_v->tokens = (const unsigned char *)bin + f->tokens_off;
	ret_v->seq_ptrs = idx ? (const unsigned char *)idx + f->seq_ptrs_off : NULL;
	ret_v->doc_idx = idx ? (const unsigned char *)idx + f->doc_idx_off : NULL;
	return 0;
}

/* ---- rows of the token stream ---- */

/* The token file holding global offset `off` (< n_tokens). */
uint32_t sf__tokens_find_file(const struct sf_dataset *ds, uint64_t off)
{
	return (uint32_t)sf__last_at_or_before(ds->token_files, ds->n_token_files,
					       sizeof(ds->token_files[0]),
					       offsetof(struct sf_token_file, start), off);
}

/* Megatron: the first document of `f` that starts at or after file offset `at`. */
static uint64_t megatron_first_doc(const struct sf_token_file *f, const struct sf_token_view *v,
				   uint64_t at)
{
	uint64_t lo = 0, hi = f->n_docs;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2, seq, ptr;

		memcpy(&seq, v->doc_idx + mid * 8, 8);
		if (seq >= f->n_seqs) {
			hi = mid;
			continue;
		}
		memcpy(&ptr, v->seq_ptrs + seq * 8, 8);
		if (ptr / f->width < at)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Record a document start at row position `pos`, keeping them ascending and unique. */
static void add_start(uint32_t *starts, uint32_t *n, uint32_t max, uint32_t pos)
{
	if (*n && starts[*n - 1] >= pos)
		return;
	if (*n < max)
		starts[(*n)++] = pos;
}

/* Id i of the `width`-byte ids at p (a file's tokens, or a row as copied). */
static uint32_t id_at(const unsigned char *p, uint32_t width, uint64_t i)
{
	uint32_t id;

	if (width == 2) {
		uint16_t narrow;

		memcpy(&narrow, p + i * 2, 2);
		return narrow;
	}
	memcpy(&id, p + i * 4, 4);
	return id;
}

/*
 * Whether the first token of flat file `fi` starts a document: it is its stream's first
 * token, or the last token before it (of the files before, the empty ones passed over) is
 * the end-of-text id. Shards of nanoGPT and llm.c cut documents where a file fills up,
 * so a file's start alone is no document's. A job without a mixture reads its token files
 * as one stream; each source of a mixture is a stream of its own, which no file of
 * another source continues.
 */
static int file_starts_document(const struct sf_dataset *ds, uint32_t fi, bool *ret,
				struct sf_err *e)
{
	struct sf_token_view v;
	uint32_t first = 0; /* the first file of fi's stream */
	int r;

	for (uint32_t s = 0; ds->mix_sources && s < ds->n_sources; s++) {
		const struct sf_mix_source *m = &ds->mix_sources[s];

		if (fi >= m->first_token_file && fi - m->first_token_file < m->n_token_files)
			first = m->first_token_file;
	}
	while (fi > first && !ds->token_files[fi - 1].n_tokens)
		fi--;
	*ret = fi == first;
	if (fi == first)
		return 0;
	r = sf__tokens_view(ds, fi - 1, 0, &v, e);
	if (r < 0)
		return r;
	*ret = id_at(v.tokens, ds->token_files[fi - 1].width,
		     ds->token_files[fi - 1].n_tokens - 1) == ds->eot;
	return 0;
}

/*
 * Document starts of the row at global offset `off` whose tokens come from file `fi` at
 * positions [from, to) of the row: in flat files the tokens after <|endoftext|> (a file's
 * first token only after one, or as the stream's first) and, with a tokenizer file whose
 * family begins documents with a bos of its own (Llama's <|begin_of_text|>, which llm.c's
 * Llama 3 shards put before each document), each bos; the documents of a Megatron index.
 */
static int file_doc_starts(const struct sf_dataset *ds, uint32_t fi, const struct sf_token_view *v,
			   const unsigned char *row, uint64_t off, uint32_t from, uint32_t to,
			   uint32_t *starts, uint32_t *n_starts, struct sf_err *e)
{
	const struct sf_token_file *f = &ds->token_files[fi];
	uint64_t lo = off + from - f->start; /* file offsets of the row's span */
	uint64_t hi = off + to - f->start;
	/* A bos that is the end-of-text id too (GPT-2's <|endoftext|> around each document)
	 * starts nothing of its own: the document starts after it. */
	const uint32_t bos = ds->bos != ds->eot ? ds->bos : UINT32_MAX;

	if (f->format == SF_FMT_MEGATRON) {
		for (uint64_t d = megatron_first_doc(f, v, lo); d < f->n_docs; d++) {
			uint64_t seq, ptr;

			memcpy(&seq, v->doc_idx + d * 8, 8);
			if (seq >= f->n_seqs)
				break;
			memcpy(&ptr, v->seq_ptrs + seq * 8, 8);
			if (ptr / f->width >= hi || *n_starts == ds->doc_starts)
				break;
			add_start(starts, n_starts, ds->doc_starts,
				  (uint32_t)(ptr / f->width - lo) + from);
		}
		return 0;
	}
	if (ds->eot == UINT32_MAX && bos == UINT32_MAX)
		return 0;
	if (lo == 0) {
		bool first = id_at(v->tokens, f->width, 0) == bos;
		const bool after_eot = !first && ds->eot != UINT32_MAX;
		int r = 0;

		/* Else the token before tells: in the row already, or in a file before. */
		if (after_eot && from)
			first = id_at(row, ds->token_bytes, from - 1) == ds->eot;
		else if (after_eot)
			r = file_starts_document(ds, fi, &first, e);
		if (r < 0)
			return r;
		if (first)
			add_start(starts, n_starts, ds->doc_starts, from);
	}
	for (uint64_t i = lo ? lo : 1; i < hi && *n_starts < ds->doc_starts; i++)
		if (id_at(v->tokens, f->width, i - 1) == ds->eot ||
		    id_at(v->tokens, f->width, i) == bos)
			add_start(starts, n_starts, ds->doc_starts, (uint32_t)(i - lo) + from);
	return 0;
}

/* Copy the T+1 tokens at global offset `off` of the pre-tokenized stream into `row`. */
/* Tokens copied between two heartbeats (sf__producer_progress()). */
#define ROW_SLICE_TOKENS (SF_HEARTBEAT_BYTES / 2)

int sf__tokens_read_row(const struct sf_dataset *ds, uint64_t off, unsigned char *row,
			uint32_t *starts, struct sf_err *e)
{
	const uint32_t L = ds->seq_len + 1, tb = ds->token_bytes;
	uint32_t done = 0, n_starts = 0;
	uint32_t fi = sf__tokens_find_file(ds, off);

	while (done < L) {
		const struct sf_token_file *f = &ds->token_files[fi];
		uint64_t in = off + done - f->start;
		uint64_t avail = f->n_tokens - in;
		uint32_t take = avail < L - done ? (uint32_t)avail : L - done;
		struct sf_token_view v;
		size_t bad;
		int r;

		if (take == 0) {
			fi++;
			continue;
		}
		r = sf__tokens_view(ds, fi, starts != NULL, &v, e);
		if (r < 0)
			return r;
		/* In slices, each a heartbeat's worth: a row of gigabytes from cold storage
		 * took longer than the stall timeout, and its producer was killed as stalled
		 * again and again (a review). */
		for (uint32_t at = 0, n; at < take; at += n) {
			n = take - at < ROW_SLICE_TOKENS ? take - at : ROW_SLICE_TOKENS;
			if (sf__copy_tokens(row + (size_t)(done + at) * tb, tb,
					    v.tokens + (in + at) * f->width, f->width, n,
					    &bad) < 0) {
				uint32_t id;

				bad += at;
				memcpy(&id, v.tokens + (in + bad) * 4, 4);
				return sf__err(
					e, SF_E_SOURCE,
					"%s: byte %llu: token %u does not fit the uint16 dtype",
					f->path,
					(unsigned long long)(f->tokens_off + (in + bad) * 4), id);
			}
			sf__producer_progress((uint64_t)n * f->width);
		}
		if (starts) {
			r = file_doc_starts(ds, fi, &v, row, off, done, done + take, starts,
					    &n_starts, e);
			if (r < 0)
				return r;
		}
		done += take;
		fi++;
	}
	if (starts)
		for (uint32_t i = n_starts; i < ds->doc_starts; i++)
			starts[i] = UINT32_MAX;
	return 0;
}
