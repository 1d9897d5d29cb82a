/*
 * The chunk index of raw text: each file cut into chunks of whole documents of about
 * SF_CHUNK_BYTES, and the token count of every chunk, built once by forked workers and
 * cached, one index per directory (producer/index_file.c). The global token stream is
 * then the chunks in order, each document followed by <|endoftext|>, and any offset in
 * it is found by a binary search over the chunk starts.
 *
 * Opening a text file only stats it. Its bytes are read when its chunks must be cut (no
 * valid cached index) and when a process tokenizes a chunk, each time through the
 * process's bounded file cache (ds->text_maps), so that a warm start reads no source
 * byte and no process maps more files than its limits allow.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/slot.h"
#include "producer/index_file.h"
#include "producer/tokenizer/unicode.h"
#include "producer/last_at_or_before.h"
#include "producer/source/file_cache.h"
#include "producer/sigbus.h"
#include "producer/text_index.h"
#include "producer/tokenizer/tokenizer.h"
#include "producer/workers.h"

int sf__text_add_chunk(struct sf_dataset *ds, uint32_t file, uint64_t off, uint64_t len,
		       uint64_t line)
{
	struct sf_chunk *c;

	if (ds->n_chunks == ds->chunks_cap) {
		uint64_t ncap = ds->chunks_cap ? ds->chunks_cap * 2 : 64;

		c = realloc(ds->chunks, ncap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		ds->chunks = c;
		ds->chunks_cap = ncap;
	}
	c = &ds->chunks[ds->n_chunks++];
	memset(c, 0, sizeof(*c));
	c->off = off;
	c->len = len;
	c->file = file;
	c->first_line = line;
	return 0;
}

static uint64_t count_lines(const char *p, const char *end)
{
	uint64_t n = 0;

	while ((p = memchr(p, '\n', (size_t)(end - p)))) {
		n++;
		p++;
	}
	return n;
}

/*
 * Whether a document may start in the middle of `f` for a part (sf__text_add_part()):
 * only when the byte before any document start says so, so that a part finds its first
 * document from its own offset without reading the file from its beginning. True of
 * JSONL (a document starts after each newline) and of text whose separator cannot
 * overlap itself (every occurrence is then a boundary, whichever one a scan from the
 * start met first). Text with a separator such as "\n\n", one document per file, and
 * compressed files (no random access) are parts of one piece.
 */
static int splittable(const struct sf_dataset *ds, const struct sf_text_file *f)
{
	const char *sep = ds->sources[f->source].separator;

	if (f->compressed)
		return 0;
	if (f->format == SF_FMT_JSONL)
		return 1;
	if (!f->sep_len)
		return 0;
	for (uint32_t k = 1; k < f->sep_len; k++)
		if (!memcmp(sep, sep + f->sep_len - k, k))
			return 0;
	return 1;
}

/* The first document start of `f` (its bytes at `data`, `len` of them) at or after byte
 * `pos` (len when none). */
static uint64_t doc_start_from(const struct sf_dataset *ds, const struct sf_text_file *f,
			       const char *data, uint64_t len, uint64_t pos)
{
	const char *q;

	if (pos == 0)
		return 0;
	if (pos >= len || !splittable(ds, f))
		return len;
	if (f->format == SF_FMT_JSONL) {
		q = memchr(data + pos - 1, '\n', len - (pos - 1));
		return q ? (uint64_t)(q + 1 - data) : len;
	}
	q = sf__find_sep(data + (pos > f->sep_len ? pos - f->sep_len : 0), data + len,
			 ds->sources[f->source].separator, f->sep_len);
	return q ? (uint64_t)(q + f->sep_len - data) : len;
}

/*
 * A file skipped whole (on_error: skip) is counted by the part that holds its first byte
 * (`lo` 0, as in a run of no parts): the other parts its bytes span drop it without a
 * count, where each counted it (a review: a file over 3 parts, 3 skips in the manifests
 * for the one-shot run's 1).
 */
static void skip_whole(struct sf_dataset *ds, uint32_t source, const char *path, uint64_t lo,
		       const struct sf_err *why)
{
	if (lo == 0)
		sf__dataset_note_skip(ds, source, path, why);
}

/*
 * Whether a failure to read a file is the file's own, which `on_error: skip` passes over:
 * not one of this process (memory, descriptors), which another moment would not meet,
 * so that skipping it would make the stream, and every batch, depend on the moment.
 */
static bool fault_of_the_file(int r)
{
	return r != -ENOMEM && r != -EMFILE && r != -ENFILE && r != -EAGAIN && r != -EINTR &&
	       r != -ENOBUFS;
}

int sf__text_add_file(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      struct sf_err *e)
{
	return sf__text_add_part(ds, path, format, source, 0, UINT64_MAX, e);
}

int sf__text_add_part(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      uint64_t lo, uint64_t hi, struct sf_err *e)
{
	const struct sf_source_config *src = &ds->sources[source];
	struct sf_text_file f = {0}, *nf;
	struct sf_err why = {0};
	int r;

	f.path = strdup(path);
	if (!f.path)
		return sf__err(e, -ENOMEM, "out of memory");
	f.format = format;
	f.source = source;
	f.sep_len = src->separator ? (uint32_t)strlen(src->separator) : 0;
	f.compressed = sf__text_file_is_compressed(path);
	/* A file of one piece belongs to the part holding its first byte: not this one. */
	if (lo > 0 && !splittable(ds, &f)) {
		sf__text_file_free(&f);
		return 0;
	}
	r = sf__text_file_stat(&f, &why);
	if (r < 0) {
		sf__text_file_free(&f);
		if (src->on_error != SF_ON_ERROR_SKIP || !fault_of_the_file(r)) {
			*e = why;
			return r;
		}
		skip_whole(ds, source, path, lo, &why);
		return 0;
	}
	/* Whether the range is the whole file is known once the file is read (cut_file()). */
	f.part_lo = lo;
	f.part_hi = hi;
	f.partial = lo > 0 || hi < f.id.size;
	if (ds->n_text_files == ds->text_files_cap) {
		uint32_t ncap = ds->text_files_cap ? ds->text_files_cap * 2 : 16;

		nf = realloc(ds->text_files, ncap * sizeof(*nf));
		if (!nf) {
			sf__text_file_free(&f);
			return sf__err(e, -ENOMEM, "out of memory");
		}
		ds->text_files = nf;
		ds->text_files_cap = ncap;
	}
	ds->text_files[ds->n_text_files++] = f;
	return 0;
}

/* Bytes scanned between two releases of what is behind the scan. */
#define RELEASE_BYTES (64u << 20)

/*
 * Give back the pages of [data, data + done) that the scan has passed, every
 * RELEASE_BYTES: the launcher that cuts a 10 GB file then holds at most about that much of
 * it resident, not the file. The scan never goes back (the file's pages stay in the page
 * cache; decompressed bytes behind the scan are not read again).
 */
static void release_scanned(const char *data, size_t *released, size_t done)
{
	const size_t page = 4096;
	size_t upto = done / page * page;

	if (upto - *released < RELEASE_BYTES)
		return;
	madvise((void *)(data + *released), upto - *released, MADV_DONTNEED);
	*released = upto;
}

/* Print `s` into `out` with \r and \n written as escapes. */
static void escaped_sep(char *out, size_t len, const char *s)
{
	size_t o = 0;

	for (; *s && o + 3 < len; s++) {
		if (*s == '\n' || *s == '\r') {
			out[o++] = '\\';
			out[o++] = *s == '\n' ? 'n' : 'r';
		} else {
			out[o++] = *s;
		}
	}
	out[o] = 0;
}

/* The separator `sep` written with the other line ends into `other`; false when it has
 * no other spelling to offer. */
static bool other_spelling(const char *sep, char *other, size_t cap)
{
	bool crlf_sep = strstr(sep, "\r\n") != NULL;
	size_t n = 0;

	for (const char *c = sep; *c && n + 2 < cap; c++) {
		if (crlf_sep && c[0] == '\r' && c[1] == '\n')
			continue;
		if (!crlf_sep && *c == '\n')
			other[n++] = '\r';
		other[n++] = *c;
	}
	other[n] = 0;
	if (crlf_sep && strchr(other, '\r'))
		return false; /* a lone \r besides: no other spelling to offer */
	return crlf_sep || !strchr(sep, '\r');
}

/*
 * Line ends that the separator does not match, said once (ds->note), since nothing else
 * would show them: a separator of newlines (`"\n\n"`) over lines that end with CRLF
 * splits the file nowhere (one document) or keeps each line's \r in its documents (`"\n"`:
 * a blank line is then a document "\r"); one of CRLF line ends over LF lines splits the
 * file nowhere. Found for every file (kept in its index entry, so that a warm start of any
 * subset of the files says it), said for the first.
 */
struct line_ends {
	char other[64];	     /* the separator's other spelling; empty: nothing to look for */
	int other_seen;	     /* it occurs in the file */
	int crlf_seen;	     /* CRLF occurs in the file */
	const char *scanned; /* the bytes before it have been looked at */
};

static void line_ends_init(struct line_ends *le, const struct sf_text_file *f,
			   const struct sf_source_config *src, const char *data)
{
	const char *sep = src->separator;

	memset(le, 0, sizeof(*le));
	le->scanned = data;
	if (f->format != SF_FMT_TEXT || !sep || !strchr(sep, '\n') || strlen(sep) > 31 ||
	    !other_spelling(sep, le->other, sizeof(le->other)))
		le->other[0] = 0;
}

/* Look at the bytes up to `to` (and the few before, that a spelling may span), before
 * they are released: a decompressed file's would read as zeros after. */
static void line_ends_scan(struct line_ends *le, const char *data, const char *to)
{
	const size_t n = strlen(le->other);
	const char *from = le->scanned - data > 31 ? le->scanned - 31 : data;

	if (!n || to <= le->scanned)
		return;
	le->other_seen |= memmem(from, (size_t)(to - from), le->other, n) != NULL;
	le->crlf_seen |= memmem(from, (size_t)(to - from), "\r\n", 2) != NULL;
	le->scanned = to;
}

static void note_line_ends(struct sf_dataset *ds, struct sf_text_file *f,
			   const struct sf_source_config *src, const struct line_ends *le)
{
	const char *sep = src->separator;

	if (!le->other[0] || !f->part_bytes || !le->other_seen ||
	    (strstr(sep, "\r\n") && le->crlf_seen))
		return;
	if (f->max_doc == f->part_bytes)
		f->line_ends = SF_LINE_ENDS_ONE_DOC;
	else if (!strstr(sep, "\r\n"))
		f->line_ends = SF_LINE_ENDS_KEEP_CR;
	sf__text_say_line_ends(ds, f);
}

void sf__text_say_line_ends(struct sf_dataset *ds, const struct sf_text_file *f)
{
	const char *sep = ds->sources[f->source].separator;
	char other[64], shown[2][160];

	if (ds->note[0] || !f->line_ends || !sep || strlen(sep) > 31 ||
	    !other_spelling(sep, other, sizeof(other)))
		return;
	escaped_sep(shown[0], sizeof(shown[0]), sep);
	escaped_sep(shown[1], sizeof(shown[1]), other);
	if (f->line_ends == SF_LINE_ENDS_ONE_DOC)
		snprintf(ds->note, sizeof(ds->note),
			 "%s: lines end with %s: the separator \"%s\" is nowhere in it, so it is "
			 "one document; separator \"%s\" would split it",
			 f->path, strstr(sep, "\r\n") ? "LF" : "CRLF", shown[0], shown[1]);
	else
		snprintf(ds->note, sizeof(ds->note),
			 "%s: lines end with CRLF: documents split at \"%s\" keep the \\r of "
			 "their line ends (a blank line is a document \"\\r\"); separator \"%s\" "
			 "would not",
			 f->path, shown[0], shown[1]);
}

/* The bytes of f's start that make it look like no UTF-8 text: those not UTF-8, and its
 * NULs where they are a tenth of it or more (UTF-16 or UTF-32 without a mark). */
static uint64_t odd_bytes(const struct sf_text_file *f)
{
	return f->not_utf8 + (f->nuls * 10 >= f->scanned ? f->nuls : 0);
}

/*
 * Text files whose start is not UTF-8 (sf_text_file.scanned): said once (ds->note, before
 * any other note), the file most off named. A review fed Latin-1 files (38.7 % of their
 * tokens lone invalid bytes), an ELF binary and UTF-16 without a byte order mark, all
 * tokenized without a word, where JSONL and the char encoding refuse such bytes.
 */
static void note_text_quality(struct sf_dataset *ds)
{
	const struct sf_text_file *worst = NULL;
	uint64_t files = 0;
	char note[sizeof(ds->note)];
	const char *wide;
	int n;

	for (uint32_t i = 0; i < ds->n_text_files; i++) {
		const struct sf_text_file *f = &ds->text_files[i];

		if (f->dropped || !odd_bytes(f))
			continue;
		files++;
		if (!worst || odd_bytes(f) * worst->scanned > odd_bytes(worst) * f->scanned)
			worst = f;
	}
	if (!worst)
		return;
	wide = worst->nuls * 10 >= worst->scanned * 6 ? "UTF-32" : "UTF-16";
	if (worst->nuls * 10 >= worst->scanned)
		n = snprintf(note, sizeof(note),
			     "%s: %.0f %% of its first %llu bytes are NUL (%llu file(s) start so "
			     "or not as UTF-8): %s without a byte order mark, or not text, read as "
			     "bytes; convert it (iconv -f %sLE, or %sBE, -t UTF-8) or leave it out",
			     worst->path, 100.0 * (double)worst->nuls / (double)worst->scanned,
			     (unsigned long long)worst->scanned, (unsigned long long)files, wide,
			     wide, wide);
	else
		n = snprintf(note, sizeof(note),
			     "%s: %llu of its first %llu bytes are not UTF-8, the first at offset "
			     "%llu (%llu file(s) start so): each is read as a token of its own, "
			     "which no UTF-8 text makes; Latin-1 or Windows-1252 text? (iconv -f "
			     "WINDOWS-1252 -t UTF-8)",
			     worst->path, (unsigned long long)worst->not_utf8,
			     (unsigned long long)worst->scanned,
			     (unsigned long long)worst->first_odd, (unsigned long long)files);
	/* Before any note already made (line ends), which follows where it fits. */
	if (ds->note[0] && n > 0 && (size_t)n + 3 < sizeof(note))
		snprintf(note + n, sizeof(note) - (size_t)n, "; %.*s",
			 (int)(sizeof(note) - (size_t)n - 3), ds->note);
	memcpy(ds->note, note, sizeof(note));
}

/*
 * A document that fills a chunk of the text index (which ends only at a document's end)
 * and is worth a word in windows mode: at least 1 MiB, and about a global batch of
 * windows (4 bytes a token), beside as much other text. The windows order takes a
 * chunk's windows together (text_order.c), so the batches drawn from it hold it alone (a
 * review: 99 % of the batches of 8 from one file over 20 files without a separator). A
 * corpus of that one document has nothing to mix it with.
 */
int sf__dataset_large_docs(const struct sf_dataset *ds, char *buf, size_t len)
{
	const uint64_t batch_bytes = 4 * (uint64_t)(ds->seq_len + 1) * ds->batch * ds->world_size,
		       large = batch_bytes > (1u << 20) ? batch_bytes : (1u << 20);
	const struct sf_text_file *largest = NULL;
	uint64_t total = 0, files = 0;
	const char *what;

	if (ds->mode != SF_SAMPLE_WINDOWS)
		return 0;
	for (uint32_t i = 0; i < ds->n_text_files; i++) {
		const struct sf_text_file *f = &ds->text_files[i];

		if (f->dropped)
			continue;
		total += f->partial ? f->part_bytes : f->len;
		if (f->max_doc < large)
			continue;
		files++;
		if (!largest || f->max_doc > largest->max_doc)
			largest = f;
	}
	if (!largest || total < 2 * largest->max_doc)
		return 0;
	what = largest->format == SF_FMT_JSONL ? "record" : "document";
	snprintf(buf, len,
		 "%s: a %s of %.1f MB (the largest; %llu file(s) hold %ss of %.1f MB or more) "
		 "fills a chunk of the text index, whose windows windows mode takes together: "
		 "the batches drawn from it hold that %s alone. %s, or use sampling.mode: "
		 "random, or read it tokenized (shmfeed tokenize: its windows are shuffled one by "
		 "one)",
		 largest->path, what, (double)largest->max_doc / 1e6, (unsigned long long)files,
		 what, (double)large / 1e6, what,
		 largest->format == SF_FMT_JSONL ? "Split such records"
						 : "Split it with a separator");
	return 1;
}

/*
 * Whether a text file's bytes start as no text does: UTF-16 (its byte order mark) or a
 * compressed stream in a file not named for it (gzip, zstd, xz, bzip2, zip, lz4). Either
 * would be read as documents of raw bytes without a word; `why` says which.
 */
static bool not_text(const struct sf_text_file *f, const char *data, size_t len, struct sf_err *why)
{
	static const struct {
		const char *magic;
		size_t len;
		const char *what, *fix;
	} streams[] = {
		{"\x1f\x8b", 2, "gzip", "name it .gz, or decompress it"},
		{"\x28\xb5\x2f\xfd", 4, "zstd", "name it .zst, or decompress it"},
		{"\xfd\x37zXZ\0", 6, "xz", "decompress it (unxz)"},
		{"BZh", 3, "bzip2", "decompress it (bunzip2)"},
		{"PK\x03\x04", 4, "zip", "extract it (unzip)"},
		{"\x04\x22\x4d\x18", 4, "lz4", "decompress it (unlz4)"},
	};

	if (len >= 4 && !memcmp(data, "\xff\xfe\0\0", 4)) {
		sf__err(why, SF_E_SOURCE,
			"%s: a UTF-32 byte order mark (FF FE 00 00): the file is UTF-32; text is "
			"read as UTF-8 (iconv -f UTF-32 -t UTF-8)",
			f->path);
		return true;
	}
	if (len >= 2 && (!memcmp(data, "\xff\xfe", 2) || !memcmp(data, "\xfe\xff", 2))) {
		sf__err(why, SF_E_SOURCE,
			"%s: a UTF-16 byte order mark (%s): the file is UTF-16; text is read as "
			"UTF-8 (iconv -f UTF-16 -t UTF-8)",
			f->path, data[0] == '\xff' ? "FF FE" : "FE FF");
		return true;
	}
	for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
		/* bzip2's "BZh" is followed by its block size and a block's magic. */
		size_t need = streams[i].len + (streams[i].magic[0] == 'B' ? 7 : 0);

		if (len < need || memcmp(data, streams[i].magic, streams[i].len) ||
		    (need > streams[i].len &&
		     (data[3] < '1' || data[3] > '9' || memcmp(data + 4, "1AY&SY", 6))))
			continue;
		if (f->compressed)
			sf__err(why, SF_E_SOURCE,
				"%s: %s data inside the compressed file, not text (compressed "
				"twice?)",
				f->path, streams[i].what);
		else
			sf__err(why, SF_E_SOURCE,
				"%s: %s data in a file not named for it, not text: %s", f->path,
				streams[i].what, streams[i].fix);
		return true;
	}
	return false;
}

/*
 * The encoding of the file's start (sf_text_file.scanned): the bytes in no valid UTF-8
 * sequence and the NUL bytes of its first SF_TEXT_SCAN_BYTES (a character that crosses
 * that end is read whole). A text file in another encoding, or not text, is read as raw
 * bytes, each invalid one a token of its own: said by note_text_quality().
 */
static void scan_encoding(struct sf_text_file *f, const char *data, size_t len)
{
	const uint8_t *s = (const uint8_t *)data;
	const size_t n = len < SF_TEXT_SCAN_BYTES ? len : SF_TEXT_SCAN_BYTES;
	size_t i = 0, step;
	uint32_t cp;

	f->not_utf8 = f->nuls = f->first_odd = 0;
	/* JSONL refuses such bytes in its records itself (bad records). */
	if (f->format != SF_FMT_TEXT) {
		f->scanned = 0;
		return;
	}
	while (i < n) {
		if (s[i] && s[i] < 0x80) {
			i++;
			continue;
		}
		step = sf__utf8_next(s + i, len - i, &cp);
		if (cp == SF_UC_INVALID && !f->not_utf8)
			f->first_odd = i;
		f->not_utf8 += cp == SF_UC_INVALID;
		f->nuls += !s[i];
		i += step;
	}
	f->scanned = i;
}

/* A cut_file() under way: what its fault path frees. */
struct cut {
	struct sf_dataset *ds;
	uint32_t file;
	struct sf_err *e;
	const char *data; /* the file's bytes, once mapped */
	size_t len, cap;
};

static int cut_scan(void *arg)
{
	struct cut *c = arg;
	struct sf_dataset *ds = c->ds;
	const uint32_t file = c->file;
	struct sf_err *e = c->e;
	struct sf_text_file *f = &ds->text_files[file];
	const struct sf_source_config *src = &ds->sources[f->source];
	const struct sf_text_format *fmt = sf__text_format(f->format);
	const char *data, *p, *end, *start;
	uint64_t line = 1, first_chunk = ds->n_chunks;
	struct sf_err why = {0};
	struct line_ends le;
	size_t len, cap, released = 0;
	int r = sf__text_file_map(f, &data, &len, &cap, &why);

	if (r < 0) {
		if (src->on_error != SF_ON_ERROR_SKIP || !fault_of_the_file(r)) {
			*e = why;
			return r;
		}
		skip_whole(ds, f->source, f->path, f->part_lo, &why);
		f->dropped = 1;
		return 0;
	}
	c->data = data;
	c->len = len;
	c->cap = cap;
	SF_TEST_POINT(SF_TP_INDEX_MAPPED);
	if (f->format == SF_FMT_TEXT && not_text(f, data, len, &why)) {
		if (cap)
			munmap((void *)data, cap);
		c->data = NULL;
		if (src->on_error != SF_ON_ERROR_SKIP) {
			*e = why;
			return SF_E_SOURCE;
		}
		skip_whole(ds, f->source, f->path, f->part_lo, &why);
		f->dropped = 1;
		return 0;
	}
	f->len = len;
	f->max_doc = 0;
	scan_encoding(f, data, len);
	p = start = data + doc_start_from(ds, f, data, len, f->part_lo);
	end = data + doc_start_from(ds, f, data, len, f->part_hi);
	f->partial = p != data || end != data + len;
	if (f->partial)
		line += count_lines(data, p);
	f->part_bytes = (uint64_t)(end - p);
	line_ends_init(&le, f, src, data);
	while (p < end) {
		const char *next, *de = fmt->doc_end(src->separator, f->sep_len, p, end, &next);

		if ((uint64_t)(de - p) > f->max_doc)
			f->max_doc = (uint64_t)(de - p);
		p = next;
		if (p - start >= (ptrdiff_t)SF_CHUNK_BYTES || p == end) {
			r = sf__text_add_chunk(ds, file, (uint64_t)(start - data),
					       (uint64_t)(p - start), line);
			if (r < 0) {
				ds->n_chunks = first_chunk;
				r = sf__err(e, r, "out of memory");
				break;
			}
			line += count_lines(start, p);
			line_ends_scan(&le, data, p == end ? data + len : p);
			if (p == end)
				note_line_ends(ds, f, src, &le);
			start = p;
			release_scanned(data, &released, (size_t)(start - data));
		}
	}
	if (data && cap)
		munmap((void *)data, cap);
	c->data = NULL;
	return r < 0 ? r : 0;
}

/*
 * Cut text file `file` into chunks, appended to ds->chunks: its bytes mapped for the
 * time of the scan and released. A file that cannot be read is skipped (no chunks) when
 * its source says so; one truncated while it is scanned (its lost pages raise SIGBUS) is
 * an error naming it.
 */
static int cut_file(struct sf_dataset *ds, uint32_t file, struct sf_err *e)
{
	struct cut c = {.ds = ds, .file = file, .e = e};
	const uint64_t first_chunk = ds->n_chunks;
	char at[40] = "";
	void *fault;
	int r = sf__sigbus_call(cut_scan, &c, &fault, e);

	if (!fault)
		return r;
	ds->n_chunks = first_chunk;
	/* The offset where the fault lies in the file's bytes (not in a compressed one's). */
	if (c.data && (const char *)fault >= c.data && (const char *)fault < c.data + c.len)
		snprintf(at, sizeof(at),
			 " byte %llu:", (unsigned long long)((const char *)fault - c.data));
	if (c.data && c.cap)
		munmap((void *)c.data, c.cap);
	return sf__err(e, SF_E_SOURCE,
		       "%s:%s cannot read: the file is shorter than when the job opened it "
		       "(truncated while its index was built?)",
		       ds->text_files[file].path, at);
}

void sf__text_close(struct sf_dataset *ds)
{
	for (uint32_t i = 0; i < ds->n_text_files; i++)
		sf__text_file_free(&ds->text_files[i]);
	for (uint32_t i = 0; i < ds->n_index_paths; i++)
		free(ds->index_paths[i]);
	sf__file_cache_free(ds->text_maps);
	free(ds->index_paths);
	free(ds->text_files);
	free(ds->chunks);
	ds->text_maps = NULL;
	ds->index_paths = NULL;
	ds->n_index_paths = 0;
	ds->text_files = NULL;
	ds->chunks = NULL;
	ds->n_text_files = 0;
	ds->n_chunks = 0;
}

/* The file cache's way to map text file `i` of the dataset `arg`. */
static int map_text_file(void *arg, uint32_t i, const char **ret_data, size_t *ret_len,
			 size_t *ret_cap, int *ret_private, struct sf_err *e)
{
	const struct sf_dataset *ds = arg;

	*ret_private = (int)ds->text_files[i].compressed;
	return sf__text_file_map(&ds->text_files[i], ret_data, ret_len, ret_cap, e);
}

int sf__text_walk_init(struct sf_doc_walk *w, const struct sf_dataset *ds, uint64_t chunk,
		       char *scratch, struct sf_err *e)
{
	const struct sf_chunk *c = &ds->chunks[chunk];
	const struct sf_text_file *f = &ds->text_files[c->file];
	const char *data;
	size_t len;
	int r = sf__file_cache_get(ds->text_maps, c->file, &data, &len, e);

	if (r < 0)
		return r;
	SF_TEST_POINT(SF_TP_WALK_MAPPED);
	return sf__doc_walk_init(w, f, &ds->sources[f->source], data, len, c->off, c->len,
				 SF_CHUNK_BYTES, c->first_line, scratch, e);
}

int sf__text_index_lied(const struct sf_dataset *ds, uint64_t chunk, struct sf_err *e)
{
	const struct sf_text_file *f = &ds->text_files[ds->chunks[chunk].file];
	const char *path = f->index < ds->n_index_paths ? ds->index_paths[f->index] : NULL;
	size_t n = strlen(e->msg);
	struct sf_file_id now;
	struct stat st;
	bool changed = false;

	if (path)
		unlink(path);
	/* An edit in place that put the size and modification time back passes the checks
	 * of a running job, not the status change time: then the file changed, not the
	 * index (which the next run rebuilds, its ctime being part of its key). */
	if (stat(f->path, &st) == 0) {
		sf__file_id_of(&st, &now);
		changed = now.ctime_ns != f->id.ctime_ns;
	}
	if (changed)
		snprintf(e->msg + n, sizeof(e->msg) - n,
			 ": the file changed under the running job (its status change time moved "
			 "since it was opened: an edit in place that put its size and modification "
			 "time back?)");
	else if (path)
		snprintf(e->msg + n, sizeof(e->msg) - n,
			 " (its cached index %s is removed; the next run rebuilds it)", path);
	return e->code;
}

uint64_t sf__text_find_chunk(const struct sf_dataset *ds, uint64_t off)
{
	/* The last chunk starting at or before `off` that holds tokens. */
	uint64_t lo = sf__last_at_or_before(ds->chunks, ds->n_chunks, sizeof(ds->chunks[0]),
					    offsetof(struct sf_chunk, start), off);

	while (lo > 0 && ds->chunks[lo].n_tokens == 0)
		lo--;
	return lo;
}

/* ---- index build ---- */

struct count_result {
	uint64_t n_tokens;
	uint64_t n_docs;
	uint64_t skipped;
};

struct count_job {
	const struct sf_dataset *ds;
	const uint64_t *items; /* chunks to count */
	struct count_result *results;
};

struct count_state {
	struct sf_tok_encoder *enc;
	char *scratch;
};

static int count_init(void *arg, void **ret_state, struct sf_err *e)
{
	struct count_job *j = arg;
	struct count_state *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return sf__err(e, -ENOMEM, "out of memory");
	s->scratch = malloc(j->ds->max_doc_bytes + 1);
	if (!s->scratch) {
		free(s);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	r = sf__tok_encoder_create(j->ds->tok, &s->enc, e);
	if (r < 0) {
		free(s->scratch);
		free(s);
		return r;
	}
	*ret_state = s;
	return 0;
}

static void count_fini(void *arg, void *state)
{
	struct count_state *s = state;

	(void)arg;
	sf__tok_encoder_free(s->enc);
	free(s->scratch);
	free(s);
}

static int count_item(void *arg, void *state, uint64_t i, struct sf_err *e)
{
	struct count_job *j = arg;
	struct count_state *s = state;
	struct count_result *res = &j->results[i];
	struct sf_doc_walk w;
	const char *doc;
	size_t len;
	int r;

	r = sf__text_walk_init(&w, j->ds, j->items[i], s->scratch, e);
	if (r < 0)
		return r;
	while ((r = sf__text_next_doc(&w, &doc, &len, e)) == 1) {
		const uint32_t *ids;
		size_t n;

		r = sf__tok_encode(s->enc, doc, len, j->ds->allowed, &ids, &n, e);
		if (r < 0)
			return sf__doc_walk_blame(&w, r, e);
		res->n_tokens += n + 1 + (j->ds->bos != UINT32_MAX);
		res->n_docs++;
	}
	res->skipped = w.skipped;
	return r;
}

/* Text files grouped by directory and key: the files of one index. */
struct file_group_key {
	const char *path;
	size_t dir_len;
	uint64_t key;
	uint32_t file;
};

static int cmp_group(const void *a, const void *b)
{
	const struct file_group_key *x = a, *y = b;
	size_t n = x->dir_len < y->dir_len ? x->dir_len : y->dir_len;
	int c = memcmp(x->path, y->path, n);

	if (c)
		return c;
	if (x->dir_len != y->dir_len)
		return x->dir_len < y->dir_len ? -1 : 1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->file < y->file ? -1 : x->file > y->file;
}

static int same_group(const struct file_group_key *x, const struct file_group_key *y)
{
	return x->dir_len == y->dir_len && x->key == y->key &&
	       !memcmp(x->path, y->path, x->dir_len);
}

/*
 * The files of each group, from its cached index where that holds a valid entry for the
 * file, else cut now (their chunks to be counted). Files keep their order in ds->chunks,
 * whatever the order of the groups: a group's files are taken in file order, and each
 * file's chunks are moved to their place once every file is known (place_chunks()).
 */
struct group {
	uint32_t first, n; /* in the sorted keys */
	struct sf_index_image *img;
	uint32_t dirty;
};

/* Lay the chunks out in file order: a file's chunks were appended group by group. */
static int place_chunks(struct sf_dataset *ds)
{
	struct sf_chunk *sorted = malloc((ds->n_chunks + 1) * sizeof(*sorted));
	uint64_t at = 0;

	if (!sorted)
		return -ENOMEM;
	for (uint32_t i = 0; i < ds->n_text_files; i++) {
		struct sf_text_file *f = &ds->text_files[i];

		if (f->n_chunks) /* a file of a part may hold none (and chunks may be NULL) */
			memcpy(&sorted[at], &ds->chunks[f->first_chunk],
			       f->n_chunks * sizeof(*sorted));
		f->first_chunk = at;
		at += f->n_chunks;
	}
	free(ds->chunks);
	ds->chunks = sorted;
	ds->chunks_cap = ds->n_chunks + 1;
	return 0;
}

/* Read the cached index of each group, and take from it, or cut, each file. */
static int load_or_cut(struct sf_dataset *ds, struct file_group_key *keys, struct group *groups,
		       uint32_t n_groups, uint8_t *cut, struct sf_err *e)
{
	for (uint32_t g = 0; g < n_groups; g++) {
		struct group *gr = &groups[g];
		const struct file_group_key *k0 = &keys[gr->first];

		if (sf__index_load(ds, k0->file, k0->key, &gr->img) != 1)
			gr->dirty = 1;
		for (uint32_t i = gr->first; i < gr->first + gr->n; i++) {
			uint32_t file = keys[i].file;
			struct sf_text_file *f = &ds->text_files[file];
			uint64_t first = ds->n_chunks;
			/* A cache holds the counts of a whole file, never of a part's range. */
			int r = gr->img && !f->partial ? sf__index_take(ds, gr->img, file) : 0;

			f->index = g;
			if (r == 0) {
				r = cut_file(ds, file, e);
				cut[file] = 1;
				gr->dirty |= !f->partial;
			}
			if (r < 0)
				return r;
			f->first_chunk = first;
			f->n_chunks = ds->n_chunks - first;
		}
	}
	return 0;
}

/* A walk over a chunk that had skips, for the first one's message. */
struct skip_walk {
	const struct sf_dataset *ds;
	uint64_t chunk;
	char *scratch;
	struct sf_err *e;
	struct sf_doc_walk walk;
};

static int walk_skips(void *arg)
{
	struct skip_walk *sw = arg;
	const char *doc;
	size_t len;
	int r = sf__text_walk_init(&sw->walk, sw->ds, sw->chunk, sw->scratch, sw->e);

	while (r == 0 && (r = sf__text_next_doc(&sw->walk, &doc, &len, sw->e)) == 1)
		r = 0;
	return r;
}

/* Count the chunks of the files that were cut, with cfg->producers workers. */
static int count_cut(struct sf_dataset *ds, const struct sf_config *cfg, const uint8_t *cut,
		     struct sf_err *e)
{
	struct count_result *results = NULL;
	uint64_t *items = NULL, n_items = 0;
	size_t results_bytes = 0;
	struct timespec t0, t1;
	int r = 0;

	items = calloc(ds->n_chunks + 1, sizeof(*items));
	if (!items)
		return sf__err(e, -ENOMEM, "out of memory");
	for (uint64_t c = 0; c < ds->n_chunks; c++)
		if (cut[ds->chunks[c].file])
			items[n_items++] = c;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (n_items) {
		struct count_job job = {.ds = ds, .items = items};
		struct sf_work w = {.n_workers = cfg->producers,
				    .n_items = n_items,
				    .arg = &job,
				    .init = count_init,
				    .item = count_item,
				    .fini = count_fini,
				    .ds = ds};

		results_bytes = n_items * sizeof(*results);
		results = sf__shared_alloc(results_bytes);
		if (!results) {
			r = sf__err(e, -ENOMEM, "out of memory");
			goto out;
		}
		job.results = results;
		r = sf__work_run(&w, e);
		if (r < 0)
			goto out;
		for (uint64_t i = 0; i < n_items; i++) {
			struct sf_chunk *c = &ds->chunks[items[i]];

			c->n_tokens = results[i].n_tokens;
			c->n_docs = (uint32_t)results[i].n_docs;
			ds->text_files[c->file].skipped += results[i].skipped;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (n_items)
		ds->stats.index_build_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
					   (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
	/* Skips in file order; the first one's message comes from walking its chunk again,
	 * which meets the same record first. */
	SF_TEST_POINT(SF_TP_INDEX_COUNTED);
	for (uint64_t i = 0; i < n_items; i++) {
		struct skip_walk sw = {.ds = ds, .chunk = items[i], .e = e};
		void *fault;

		if (!results[i].skipped)
			continue;
		sw.scratch = malloc(ds->max_doc_bytes + 1);
		if (!sw.scratch) {
			r = sf__err(e, -ENOMEM, "out of memory");
			goto out;
		}
		/* The file may have been truncated since it was counted. */
		r = sf__sigbus_call(walk_skips, &sw, &fault, e);
		if (fault)
			r = sf__dataset_fault(ds, fault, e);
		free(sw.scratch);
		if (r < 0)
			goto out;
		sf__dataset_note_skips(ds, sw.walk.file->source, sw.walk.file->path, &sw.walk.why,
				       sw.walk.skipped);
	}
out:
	sf__shared_free(results, results_bytes);
	free(items);
	return r;
}

int sf__text_build_index(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	struct file_group_key *keys = NULL;
	struct group *groups = NULL;
	uint32_t n_groups = 0;
	uint8_t *cut = NULL;
	uint64_t pos = 0;
	bool cache_said = false; /* the cache could not be written: said once */
	int r = 0;

	if (ds->eot == UINT32_MAX)
		return sf__err(e, SF_E_TOKENIZER, "%s has no <|endoftext|> to separate documents",
			       sf__tok_name(ds->tok));
	keys = calloc(ds->n_text_files + 1, sizeof(*keys));
	groups = calloc(ds->n_text_files + 1, sizeof(*groups));
	cut = calloc(ds->n_text_files + 1, 1);
	if (!keys || !groups || !cut) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	r = sf__file_cache_create(ds->n_text_files, 0, map_text_file, ds, &ds->text_maps, e);
	if (r < 0)
		goto out;
	for (uint32_t i = 0; i < ds->n_text_files; i++) {
		const char *path = ds->text_files[i].path, *slash = strrchr(path, '/');

		keys[i] = (struct file_group_key){.path = path,
						  .dir_len = slash ? (size_t)(slash - path) : 0,
						  .key = sf__index_key(ds, &ds->text_files[i]),
						  .file = i};
	}
	qsort(keys, ds->n_text_files, sizeof(*keys), cmp_group);
	for (uint32_t i = 0; i < ds->n_text_files; i++) {
		if (i == 0 || !same_group(&keys[i - 1], &keys[i]))
			groups[n_groups++].first = i;
		groups[n_groups - 1].n++;
	}
	ds->index_paths = calloc(n_groups + 1, sizeof(*ds->index_paths));
	if (!ds->index_paths) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	ds->n_index_paths = n_groups;
	r = load_or_cut(ds, keys, groups, n_groups, cut, e);
	if (r >= 0 && (r = place_chunks(ds)) < 0)
		sf__err(e, r, "out of memory");
	for (uint32_t i = 0; r >= 0 && i < ds->n_text_files; i++)
		if (ds->text_files[i].max_doc > ds->max_doc_bytes)
			ds->max_doc_bytes = ds->text_files[i].max_doc;
	if (r >= 0)
		note_text_quality(ds);
	if (r >= 0)
		r = count_cut(ds, cfg, cut, e);
	/* The launcher keeps no source mapped: producers map what they read. */
	sf__file_cache_drop(ds->text_maps);
	if (r < 0)
		goto out;
	for (uint64_t c = 0; c < ds->n_chunks; c++) {
		struct sf_chunk *ch = &ds->chunks[c];

		ch->start = pos;
		pos += ch->n_tokens;
		ds->stats.n_docs += ch->n_docs;
		if (ch->n_tokens > ds->max_chunk_tokens)
			ds->max_chunk_tokens = ch->n_tokens;
		if (ch->n_docs > ds->max_chunk_docs)
			ds->max_chunk_docs = ch->n_docs;
	}
	for (uint32_t i = 0; i < ds->n_text_files; i++)
		ds->stats.text_bytes += ds->text_files[i].partial ? ds->text_files[i].part_bytes
								  : ds->text_files[i].len;
	ds->n_tokens = pos;
	ds->stats.n_chunks = ds->n_chunks;
	ds->stats.index_loaded = 1;
	for (uint32_t g = 0; g < n_groups; g++) {
		struct group *gr = &groups[g];
		uint32_t *files = NULL;
		uint64_t bytes = 0;

		if (!gr->dirty) {
			ds->stats.index_bytes += sf__index_image_bytes(gr->img);
			ds->index_paths[g] = strdup(sf__index_image_path(gr->img));
			continue;
		}
		ds->stats.index_loaded = 0;
		files = malloc(gr->n * sizeof(*files));
		if (!files)
			continue;
		/* Dropped files (unreadable, skipped) have no entry: they are tried again. */
		{
			uint32_t n = 0;
			int saved = 0;

			for (uint32_t i = 0; i < gr->n; i++)
				if (!ds->text_files[keys[gr->first + i].file].dropped &&
				    !ds->text_files[keys[gr->first + i].file].partial)
					files[n++] = keys[gr->first + i].file;
			if (n)
				saved = sf__index_save(ds, files, n, keys[gr->first].key, gr->img,
						       &ds->index_paths[g], &bytes);
			if (saved == 0)
				ds->stats.index_bytes += bytes;
			/* Failing costs speed only, but each start then builds it again: said
			 * once, after any note made before (an encoding note hid it; a review). */
			else if (!cache_said) {
				const size_t at = strlen(ds->note);
				char dir[PATH_MAX] = " ";

				cache_said = true;
				if (sf__index_dir(dir + 1, sizeof(dir) - 1) < 0)
					dir[0] = '\0';
				snprintf(ds->note + at, sizeof(ds->note) - at,
					 "%sthe chunk index could not be written to the cache%s "
					 "(%s): each start of the job builds it again "
					 "(SHMFEED_CACHE_DIR names the cache; docs/producers.md)",
					 at ? "; " : "", dir, strerror(-saved));
			}
		}
		free(files);
	}
out:
	for (uint32_t g = 0; groups && g < n_groups; g++)
		sf__index_image_free(groups[g].img);
	free(groups);
	free(keys);
	free(cut);
	return r;
}
