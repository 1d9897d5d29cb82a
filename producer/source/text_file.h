/*
 * Raw text files and their formats. A raw text file (plain text or JSONL, optionally
 * .zst or .gz) is a sequence of documents; a format says where each document ends and
 * how its text is found in its bytes, behind one small interface, struct sf_text_format
 * (producer/source/text.c, producer/source/jsonl.c). A document walk goes over the
 * documents of a byte range with it; what the range is (a chunk) is the caller's.
 */
#ifndef SF_PRODUCER_SOURCE_TEXT_FILE_H
#define SF_PRODUCER_SOURCE_TEXT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/errors.h"
#include "producer/source/file.h"

/*
 * One raw text file: what the job knows of it without reading it. Its bytes are mapped
 * only while a process reads from it (sf__text_file_map(), through a file cache).
 */
struct sf_text_file {
	char *path;
	struct sf_file_id id; /* at open; every mapping checks it again */
	uint64_t len;	      /* uncompressed bytes */
	uint64_t max_doc;     /* bytes of its longest document or JSON line */
	uint64_t first_chunk; /* its chunks: [first_chunk, first_chunk + n_chunks) */
	uint64_t n_chunks;
	uint64_t skipped;    /* records skipped by policy */
	uint32_t format;     /* SF_FMT_TEXT or SF_FMT_JSONL */
	uint32_t source;     /* index into sf_dataset.sources */
	uint32_t sep_len;    /* bytes of the source's separator (0: one document per file) */
	uint32_t compressed; /* .zst or .gz */
	uint32_t dropped;    /* unreadable, skipped by the source's policy: no chunks */
	uint32_t index;	     /* its cached index: sf_dataset.index_paths[index] */
	/* A tokenize part reads the documents starting in [part_lo, part_hi) only (partial:
	 * not the whole file); such a file is cut at each open, never cached. */
	uint32_t partial;
	uint64_t part_lo, part_hi;
	uint64_t part_bytes; /* bytes of the documents read, when partial */
	/* Line ends its source's separator does not match (sf__text_say_line_ends()): 0
	 * none seen, SF_LINE_ENDS_ONE_DOC, SF_LINE_ENDS_KEEP_CR. Kept in its cached index, so
	 * that a warm start says it too. */
	uint32_t line_ends;
	/* Of a text (not JSONL) file's first SF_TEXT_SCAN_BYTES (uncompressed): bytes in no
	 * valid UTF-8 sequence, NUL bytes, and the offset of the first of the former. Kept
	 * in its cached index; said in the dataset's note (text_index.c). */
	uint64_t scanned, not_utf8, nuls, first_odd;
};

/* The bytes at a text file's start whose encoding is looked at (sf_text_file.scanned). */
#define SF_TEXT_SCAN_BYTES (64u * 1024u)

#define SF_LINE_ENDS_ONE_DOC 1u /* the separator is nowhere: the file is one document */
#define SF_LINE_ENDS_KEEP_CR 2u /* CRLF lines split at "\n": documents keep their \r */

/*
 * sf__text_file_stat - open f->path, check it is a regular file, record its identity and
 * close it; reads none of its bytes. Returns 0, or an error naming the file.
 */
int sf__text_file_stat(struct sf_text_file *f, struct sf_err *e);

/* sf__text_file_is_compressed - whether `path` names a .zst or .gz file. */
int sf__text_file_is_compressed(const char *path);

/*
 * sf__text_file_map - the uncompressed bytes of `f`: the file mapped, or decompressed
 * into anonymous memory; munmap(*ret_data, *ret_cap) releases them. Fails with
 * SF_E_SOURCE when the file is no longer the one sf__text_file_stat() recorded.
 */
int sf__text_file_map(const struct sf_text_file *f, const char **ret_data, size_t *ret_len,
		      size_t *ret_cap, struct sf_err *e);

/* sf__text_file_free - free what `f` holds, and zero it. */
void sf__text_file_free(struct sf_text_file *f);

/*
 * sf__find_sep - the first occurrence of the m-byte `sep` (m >= 1) in [p, end), or NULL:
 * 32 bytes at a time where the CPU has AVX2, else sf__find_sep_base() (16 at a time on
 * x86-64). Both are declared for the tests.
 */
const char *sf__find_sep(const char *p, const char *end, const char *sep, size_t m);
const char *sf__find_sep_base(const char *p, const char *end, const char *sep, size_t m);

struct sf_doc_walk;

/* What a raw text format is: where a document ends, and how its text is read. */
struct sf_text_format {
	const char *name;
	/*
	 * The end of the document starting at p (before its separator) and, in *ret_next,
	 * where the next one starts. `sep` (sep_len bytes, 0: none) is the source's
	 * separator, for the formats that use one.
	 */
	const char *(*doc_end)(const char *sep, uint32_t sep_len, const char *p, const char *end,
			       const char **ret_next);
	/*
	 * The text of the document whose bytes are [p, p + n): 1 with *ret_doc, *ret_len
	 * (valid until the next call), 0 when the record holds none (a blank line, a bad
	 * record the source skips), or SF_E_SOURCE for a bad record the source stops at.
	 */
	int (*decode)(struct sf_doc_walk *w, const char *p, size_t n, const char **ret_doc,
		      size_t *ret_len, struct sf_err *e);
};

extern const struct sf_text_format sf__format_text;
extern const struct sf_text_format sf__format_jsonl;

/* sf__text_format - the format of SF_FMT_TEXT or SF_FMT_JSONL. */
const struct sf_text_format *sf__text_format(uint32_t format);

/*
 * A document walk over one chunk [off, off + len) of a file. sf__text_next_doc() returns
 * 1 and the document's bytes (valid until the next call), 0 at the end, or an error for
 * a bad record when the source's policy is stop; with skip, bad records are passed over
 * and counted in `skipped`, the first one's message kept in `why`.
 *
 * The chunk came from an index that may have been cached on disk, so the walk holds it to
 * what the index promises, at no cost beyond the walk itself: the chunk starts and ends
 * on document boundaries, no document ends at or past `cut_bytes` before the chunk's
 * last and the last does unless the file ends there (the rule chunks are cut by; a
 * tokenize part's file, cut anew at each open, may end early), and no document is longer than the file's
 * max_doc (which sized the buffers). A chunk that breaks one of these fails with
 * SF_E_SOURCE and sets `index_lie`.
 */
struct sf_doc_walk {
	const struct sf_text_format *fmt;
	const struct sf_source_config *src;
	const struct sf_text_file *file;
	const char *p, *start, *end;
	const char *file_end;
	uint64_t cut_bytes;
	uint64_t line; /* JSONL only: the line of the next record, for messages */
	uint64_t doc_at;   /* the last document returned: its first byte in the file */
	uint64_t doc_line; /* ... and, in JSONL, its line */
	char *scratch; /* f->max_doc bytes (at least), for unescaped JSON strings */
	uint64_t skipped;
	struct sf_err why;
	int index_lie;
};

/*
 * sf__doc_walk_init - a walk over [off, off + len) of `f`, whose bytes are [data, data +
 * data_len), the chunk's first byte on line `line`. Returns 0, or SF_E_SOURCE (and
 * index_lie set) when the chunk does not lie on document boundaries of these bytes.
 */
int sf__doc_walk_init(struct sf_doc_walk *w, const struct sf_text_file *f,
		      const struct sf_source_config *src, const char *data, size_t data_len,
		      uint64_t off, uint64_t len, uint64_t cut_bytes, uint64_t line, char *scratch,
		      struct sf_err *e);

int sf__text_next_doc(struct sf_doc_walk *w, const char **ret_doc, size_t *ret_len,
		      struct sf_err *e);

/*
 * sf__doc_walk_blame - failure `r` of the document sf__text_next_doc() returned last
 * (the tokenizer's, which knows no file): e's message after the file and the document's
 * line (JSONL) or first byte. Returns r.
 */
int sf__doc_walk_blame(const struct sf_doc_walk *w, int r, struct sf_err *e);

/*
 * sf__doc_walk_changed - whether the walk's file is still the one the job opened: 0, or
 * SF_E_SOURCE naming what changed. Past a truncation the rest of the last page reads as
 * zeros, not SIGBUS, so that a record or a chunk a walk finds wrong may be its file's
 * change, and is asked this before it is reported or skipped. A compressed file was
 * decompressed whole when it was mapped: 0.
 */
int sf__doc_walk_changed(const struct sf_doc_walk *w, struct sf_err *e);

#endif
