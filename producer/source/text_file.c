/*
 * Raw text files: read whole when a process needs them (through its file cache,
 * producer/source/file_cache.h), plain files mapped, .zst and .gz files decompressed into
 * anonymous memory (their bytes must be addressable at any chunk offset, and a
 * compressed stream cannot be entered in the middle); and the document walk, which asks
 * the file's format (struct sf_text_format) where each document ends and what its text
 * is.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "common/slot.h"
#include "producer/producer.h"
#include "producer/sigbus.h"
#include "producer/source/text_file.h"

static int has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* Grow an anonymous mapping that receives decompressed bytes. */
static int grow(char **buf, size_t *cap, size_t need)
{
	size_t ncap = *cap ? *cap : need;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	p = *buf ? mremap(*buf, *cap, ncap, MREMAP_MAYMOVE)
		 : mmap(NULL, ncap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	*buf = p;
	*cap = ncap;
	return 0;
}

static int decompress_zstd(const char *path, const unsigned char *in, size_t in_len, char **ret,
			   size_t *ret_len, size_t *ret_cap, struct sf_err *e)
{
	/* Fed a step at a time, so that an error names how far the decoder had got. */
	const size_t step = ZSTD_DStreamInSize();
	ZSTD_DStream *ds;
	ZSTD_inBuffer ib = {in, 0, 0};
	size_t want = in_len * 4 > (1u << 20) ? in_len * 4 : (1u << 20), cap = 0, len = 0;
	size_t last = 0;
	char *buf = NULL;
	int r = 0;

	if (!in_len)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 0: truncated zstd stream (the file is empty)", path);
	ds = ZSTD_createDStream();
	if (!ds)
		return sf__err(e, -ENOMEM, "out of memory");
	r = grow(&buf, &cap, want);
	if (r < 0) {
		ZSTD_freeDStream(ds);
		return sf__err(e, r, "%s: cannot allocate %zu bytes to decompress", path, want);
	}
	/* Until the input is consumed and the decoder holds nothing back (`last` is the
	 * number of bytes it still wants, 0 at the end of a frame). */
	while (ib.pos < in_len || last != 0) {
		ZSTD_outBuffer ob;
		size_t before = len;

		if (len == cap && (r = grow(&buf, &cap, cap * 2)) < 0) {
			r = sf__err(e, r, "%s: cannot allocate %zu bytes to decompress", path,
				    cap * 2);
			goto out;
		}
		/* A MiB at a time: a producer's heartbeat goes on through a large file. */
		ob = (ZSTD_outBuffer){buf + len, cap - len > (1u << 20) ? (1u << 20) : cap - len,
				      0};
		ib.size = in_len - ib.pos > step ? ib.pos + step : in_len;
		last = ZSTD_decompressStream(ds, &ob, &ib);
		if (ZSTD_isError(last)) {
			/* Not "byte N": the damage may lie in a block the decoder buffered
			 * before, or anywhere in the frame when its checksum finds it. */
			r = sf__err(e, SF_E_SOURCE,
				    "%s: invalid zstd stream, found by byte %zu of %zu: %s", path,
				    ib.size, in_len, ZSTD_getErrorName(last));
			goto out;
		}
		len += ob.pos;
		sf__producer_progress(ob.pos);
		if (ib.pos == in_len && len == before && last != 0) {
			r = sf__err(e, SF_E_SOURCE,
				    "%s: byte %zu: truncated zstd stream (the frame is incomplete)",
				    path, in_len);
			goto out;
		}
	}
out:
	ZSTD_freeDStream(ds);
	if (r < 0) {
		munmap(buf, cap);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	*ret_cap = cap;
	return 0;
}

static int decompress_gzip(const char *path, const unsigned char *in, size_t in_len, char **ret,
			   size_t *ret_len, size_t *ret_cap, struct sf_err *e)
{
	z_stream zs = {0};
	size_t want = in_len * 4 > (1u << 20) ? in_len * 4 : (1u << 20), cap = 0, len = 0;
	char *buf = NULL;
	int r = 0, z = Z_OK;

	/* 15 + 16: gzip framing only; multi-member files are handled by the reset below. */
	if (!in_len)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte 0: truncated gzip stream (the file is empty)", path);
	if (inflateInit2(&zs, 15 + 16) != Z_OK)
		return sf__err(e, -ENOMEM, "%s: cannot start zlib", path);
	r = grow(&buf, &cap, want);
	if (r < 0) {
		inflateEnd(&zs);
		return sf__err(e, r, "%s: cannot allocate %zu bytes to decompress", path, want);
	}
	zs.next_in = (unsigned char *)in;
	zs.avail_in = 0;
	for (size_t consumed = 0;;) {
		if (zs.avail_in == 0 && consumed < in_len) {
			size_t take =
				in_len - consumed > (1u << 30) ? (1u << 30) : in_len - consumed;

			zs.next_in = (unsigned char *)in + consumed;
			zs.avail_in = (uInt)take;
			consumed += take;
		}
		if (len == cap && (r = grow(&buf, &cap, cap * 2)) < 0) {
			r = sf__err(e, r, "%s: cannot allocate %zu bytes to decompress", path,
				    cap * 2);
			break;
		}
		{
			/* A MiB at a time: a producer's heartbeat goes on through a large file. */
			size_t room = cap - len > (1u << 20) ? (1u << 20) : cap - len;

			zs.next_out = (unsigned char *)buf + len;
			zs.avail_out = (uInt)room;
			z = inflate(&zs, Z_NO_FLUSH);
			len += room - zs.avail_out;
			sf__producer_progress(room - zs.avail_out);
		}
		if (z == Z_STREAM_END) {
			size_t at = (size_t)((const unsigned char *)zs.next_in - in);

			/* Zeros after a member are padding (a tape block's), passed over as
			 * Python's gzip does (gzip -d takes them at the end only). */
			while (at < in_len && in[at] == 0)
				at++;
			if (at == in_len)
				break;
			/* Another gzip member follows (as `cat a.gz b.gz` makes). */
			{
				size_t skip = at - (consumed - zs.avail_in);

				if (skip > zs.avail_in) { /* past what was fed: feed from there */
					consumed = at;
					zs.avail_in = 0;
				} else {
					zs.next_in += skip;
					zs.avail_in -= (uInt)skip;
				}
			}
			inflateReset(&zs);
			continue;
		}
		if (z == Z_DATA_ERROR || z == Z_NEED_DICT || z == Z_STREAM_ERROR ||
		    z == Z_MEM_ERROR) {
			r = sf__err(e, SF_E_SOURCE, "%s: byte %zu: invalid gzip stream: %s", path,
				    (size_t)((const unsigned char *)zs.next_in - in),
				    zs.msg ? zs.msg : "corrupt data");
			break;
		}
		if (z == Z_BUF_ERROR && zs.avail_in == 0 && consumed == in_len) {
			r = sf__err(e, SF_E_SOURCE,
				    "%s: byte %zu: truncated gzip stream (it ends inside a member)",
				    path, in_len);
			break;
		}
	}
	inflateEnd(&zs);
	if (r < 0) {
		munmap(buf, cap);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	*ret_cap = cap;
	return 0;
}

int sf__text_file_stat(struct sf_text_file *f, struct sf_err *e)
{
	struct stat st;
	int fd = sf__source_open(f->path, &st, e);

	if (fd < 0)
		return fd;
	close(fd);
	sf__file_id_of(&st, &f->id);
	f->compressed = sf__text_file_is_compressed(f->path);
	return 0;
}

int sf__text_file_is_compressed(const char *path)
{
	return has_suffix(path, ".zst") || has_suffix(path, ".gz");
}

/*
 * A compressed file is read whole, not mapped: it is decompressed whole at once anyway
 * (into a buffer of at least four times its size), and a file truncated meanwhile is then
 * a short read naming it. From a mapping, the lost pages faulted inside the decoder, in memory of
 * no source's: a producer said "SIGBUS ... outside every source" and was restarted as
 * crashed (a review), and the decoder's state leaked.
 */
static int decompress_file(const struct sf_text_file *f, int fd, size_t size, const char **ret_data,
			   size_t *ret_len, size_t *ret_cap, struct sf_err *e)
{
	unsigned char *in = malloc(size ? size : 1);
	char *buf = NULL;
	size_t len = 0, cap = 0;
	struct stat now;
	int r;

	if (!in)
		return sf__err(e, -ENOMEM, "%s: cannot allocate %zu bytes to read it", f->path,
			       size);
	SF_TEST_POINT(SF_TP_DECOMPRESS_READ);
	r = sf__pread_full(fd, in, size, 0);
	if (r < 0) {
		free(in);
		/* Ended first: where the file ends now is where the read stopped. */
		if (r == -EIO && fstat(fd, &now) == 0 && (uint64_t)now.st_size < size)
			return sf__sigbus_truncated(f->path, (unsigned long long)now.st_size, e);
		return sf__err(e, r, "%s: cannot read: %s", f->path, strerror(-r));
	}
	r = has_suffix(f->path, ".zst") ? decompress_zstd(f->path, in, size, &buf, &len, &cap, e)
					: decompress_gzip(f->path, in, size, &buf, &len, &cap, e);
	free(in);
	if (r < 0)
		return r;
	*ret_data = buf;
	*ret_len = len;
	*ret_cap = cap;
	return 0;
}

int sf__text_file_map(const struct sf_text_file *f, const char **ret_data, size_t *ret_len,
		      size_t *ret_cap, struct sf_err *e)
{
	struct sf_file_id id;
	struct stat st;
	void *m = NULL;
	int fd = sf__source_open(f->path, &st, e), r;

	if (fd < 0)
		return fd;
	/* The file must be the one opened (and indexed): never bytes of another. */
	sf__file_id_of(&st, &id);
	if (!sf__file_id_same(&id, &f->id)) {
		close(fd);
		return sf__file_id_check(f->path, &f->id, e) < 0
			       ? SF_E_SOURCE
			       : sf__err(e, SF_E_SOURCE, "%s: changed under the running job",
					 f->path);
	}
	if (f->compressed) {
		r = decompress_file(f, fd, (size_t)st.st_size, ret_data, ret_len, ret_cap, e);
		close(fd);
		return r;
	}
	if (st.st_size) {
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			r = -errno;
			close(fd);
			return sf__err(e, r, "%s: cannot map: %s", f->path, strerror(-r));
		}
	}
	close(fd);
	/* Chunks are read front to back, and a producer reads a few at a time. */
	if (m)
		madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
	*ret_data = m;
	*ret_len = (size_t)st.st_size;
	*ret_cap = (size_t)st.st_size;
	return 0;
}

void sf__text_file_free(struct sf_text_file *f)
{
	free(f->path);
	memset(f, 0, sizeof(*f));
}

/*
 * The first of the candidates in `mask` (bit j: the separator's first and last bytes
 * match at p + i + j) whose middle bytes match too, or NULL. Shared by the vector loops.
 */
static inline __attribute__((always_inline)) const char *
first_match(const char *p, size_t i, unsigned mask, const char *sep, size_t m)
{
	for (; mask; mask &= mask - 1) {
		size_t k = i + (size_t)__builtin_ctz(mask);

		if (m == 2 || !memcmp(p + k + 1, sep + 1, m - 2))
			return p + k;
	}
	return NULL;
}

/*
 * glibc's memmem walks a two-byte needle one byte at a time, which took a tenth of a
 * producer's time on "\n\n"-separated text; this compares the separator's first and
 * last bytes at 16 positions at once (SSE2, in every x86-64) and checks the rest of each
 * candidate.
 */
const char *sf__find_sep_base(const char *p, const char *end, const char *sep, size_t m)
{
	size_t n = (size_t)(end - p), i = 0;

	if (m == 1)
		return memchr(p, sep[0], n);
#ifdef __SSE2__
	{
		const __m128i first = _mm_set1_epi8(sep[0]), last = _mm_set1_epi8(sep[m - 1]);

		for (; n >= m - 1 + 16 && i <= n - (m - 1) - 16; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
			__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + i + m - 1));
			unsigned mask = (unsigned)_mm_movemask_epi8(
				_mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, last)));
			const char *q = first_match(p, i, mask, sep, m);

			if (q)
				return q;
		}
	}
#endif
	return memmem(p + i, n - i, sep, m);
}

#if defined(__x86_64__) && defined(__GNUC__)
/*
 * The same at 32 positions at once, where the CPU has AVX2: the search runs ahead of the
 * tokenizer over every byte a producer reads (3-4 % of a Llama 3 producer's samples on
 * tinyshakespeare with the loop above), and this halves its cost (bench_producer's
 * "separator search alone": 19.5 against 8.8 GB/s on the AMD EPYC VM).
 */
__attribute__((target("avx2"))) static const char *find_sep_avx2(const char *p, const char *end,
								 const char *sep, size_t m)
{
	const __m256i first = _mm256_set1_epi8(sep[0]), last = _mm256_set1_epi8(sep[m - 1]);
	size_t n = (size_t)(end - p), i = 0;

	for (; n >= m - 1 + 32 && i <= n - (m - 1) - 32; i += 32) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(p + i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(p + i + m - 1));
		unsigned mask = (unsigned)_mm256_movemask_epi8(
			_mm256_and_si256(_mm256_cmpeq_epi8(a, first), _mm256_cmpeq_epi8(b, last)));
		const char *q = first_match(p, i, mask, sep, m);

		if (q)
			return q;
	}
	return sf__find_sep_base(p + i, end, sep, m);
}
#endif

const char *sf__find_sep(const char *p, const char *end, const char *sep, size_t m)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (m > 1 && __builtin_cpu_supports("avx2"))
		return find_sep_avx2(p, end, sep, m);
#endif
	return sf__find_sep_base(p, end, sep, m);
}

const struct sf_text_format *sf__text_format(uint32_t format)
{
	return format == SF_FMT_JSONL ? &sf__format_jsonl : &sf__format_text;
}

int sf__doc_walk_changed(const struct sf_doc_walk *w, struct sf_err *e)
{
	return w->file->compressed ? 0 : sf__file_id_check(w->file->path, &w->file->id, e);
}

/* The chunk does not hold what its index says, unless its file changed. */
static int lie(struct sf_doc_walk *w, struct sf_err *e, uint64_t at, const char *what)
{
	int r = sf__doc_walk_changed(w, e);

	if (r < 0)
		return r;
	w->index_lie = 1;
	return sf__err(e, SF_E_SOURCE, "%s: byte %llu: %s", w->file->path, (unsigned long long)at,
		       what);
}

int sf__doc_walk_init(struct sf_doc_walk *w, const struct sf_text_file *f,
		      const struct sf_source_config *src, const char *data, size_t data_len,
		      uint64_t off, uint64_t len, uint64_t cut_bytes, uint64_t line, char *scratch,
		      struct sf_err *e)
{
	memset(w, 0, sizeof(*w));
	w->fmt = sf__text_format(f->format);
	w->src = src;
	w->file = f;
	w->line = line;
	w->scratch = scratch;
	w->cut_bytes = cut_bytes;
	if (data_len != f->len || off > data_len || len > data_len - off)
		return lie(w, e, data_len, "the file does not hold the bytes its index describes");
	w->p = w->start = data + off;
	w->end = w->start + len;
	w->file_end = data + data_len;
	/* A chunk starts at the file's start or right after a separator (a newline for
	 * JSONL); a file without a separator is one document, hence one chunk. */
	if (off) {
		const char *sep = f->format == SF_FMT_JSONL ? "\n" : src->separator;
		uint32_t m = f->format == SF_FMT_JSONL ? 1 : f->sep_len;

		if (!m || off < m || memcmp(w->start - m, sep, m))
			return lie(w, e, off, "a chunk of its index starts inside a document");
	}
	return 0;
}

int sf__text_next_doc(struct sf_doc_walk *w, const char **ret_doc, size_t *ret_len,
		      struct sf_err *e)
{
	while (w->p < w->end) {
		const char *next, *p = w->p;
		const char *de =
			w->fmt->doc_end(w->src->separator, w->file->sep_len, p, w->end, &next);
		int r;

		if ((uint64_t)(de - p) > w->file->max_doc)
			return lie(w, e, (uint64_t)(p - (w->file_end - w->file->len)),
				   "a document is longer than its index's longest");
		/* No separator before the chunk's end: the chunk must end with the file. */
		if (de == w->end && w->end != w->file_end)
			return lie(w, e, (uint64_t)(w->end - (w->file_end - w->file->len)),
				   "a chunk of its index ends inside a document");
		if (w->cut_bytes && next < w->end && (uint64_t)(next - w->start) >= w->cut_bytes)
			return lie(w, e, (uint64_t)(next - (w->file_end - w->file->len)),
				   "a chunk of its index goes on past a document end where chunks "
				   "are cut");
		/* Its last document ends where it is cut, or with the file (a tokenize part,
		 * which ends where its byte range does, is cut at each open, never cached). */
		if (w->cut_bytes && next == w->end && w->end != w->file_end && !w->file->partial &&
		    (uint64_t)(next - w->start) < w->cut_bytes)
			return lie(w, e, (uint64_t)(next - (w->file_end - w->file->len)),
				   "a chunk of its index ends before the size where chunks are cut");
		w->p = next;
		w->doc_at = (uint64_t)(p - (w->file_end - w->file->len));
		w->doc_line = w->line;
		r = w->fmt->decode(w, p, (size_t)(de - p), ret_doc, ret_len, e);
		if (r)
			return r;
	}
	return 0;
}

int sf__doc_walk_blame(const struct sf_doc_walk *w, int r, struct sf_err *e)
{
	char msg[sizeof(e->msg)];

	memcpy(msg, e->msg, sizeof(msg));
	if (w->fmt == &sf__format_jsonl)
		return sf__err(e, r, "%s:%llu: %s", w->file->path, (unsigned long long)w->doc_line,
			       msg);
	return sf__err(e, r, "%s: the document at byte %llu%s: %s", w->file->path,
		       (unsigned long long)w->doc_at,
		       w->file->compressed ? " of its uncompressed text" : "", msg);
}
