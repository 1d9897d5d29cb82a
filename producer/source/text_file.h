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

/* One raw text file, its uncompressed bytes in memory. */
struct sf_text_file {
	char *path;
	const char *data;
	size_t len;
	/* Bytes mapped at data: a file mapping, or anonymous memory after decompression. */
	size_t map_cap;
	uint32_t format;   /* SF_FMT_TEXT or SF_FMT_JSONL */
	uint32_t source;   /* index into sf_dataset.sources */
	uint32_t sep_len;  /* bytes of the source's separator (0: one document per file) */
	uint64_t ident[3]; /* identity for the index cache: size, mtime ns, inode */
	struct sf_file_id id;
	char *index_path; /* the cached index its chunk counts came from; NULL: built here */
};

/*
 * sf__text_file_read - map (or decompress) f->path into f->data, f->len, and record its
 * identity. Returns 0, or an error naming the file.
 */
int sf__text_file_read(struct sf_text_file *f, struct sf_err *e);

/* sf__text_file_free - unmap and free what `f` holds, and zero it. */
void sf__text_file_free(struct sf_text_file *f);

/* sf__find_sep - the first occurrence of the m-byte `sep` (m >= 1) in [p, end), or NULL. */
const char *sf__find_sep(const char *p, const char *end, const char *sep, size_t m);

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
 * A document walk over bytes [p, end) of one file. sf__text_next_doc() returns 1 and the
 * document's bytes (valid until the next call), 0 at the end, or an error for a bad
 * record when the source's policy is stop; with skip, bad records are passed over and
 * counted in `skipped`, the first one's message kept in `why`.
 */
struct sf_doc_walk {
	const struct sf_text_format *fmt;
	const struct sf_source_config *src;
	const struct sf_text_file *file;
	const char *p, *end;
	uint64_t line; /* JSONL only: the line of the next record, for messages */
	char *scratch; /* the longest document's bytes, for unescaped JSON strings */
	uint64_t skipped;
	struct sf_err why;
};

/* sf__doc_walk_init - a walk over [p, end) of `f`, whose first byte is on line `line`. */
void sf__doc_walk_init(struct sf_doc_walk *w, const struct sf_text_file *f,
		       const struct sf_source_config *src, const char *p, const char *end,
		       uint64_t line, char *scratch);

int sf__text_next_doc(struct sf_doc_walk *w, const char **ret_doc, size_t *ret_len,
		      struct sf_err *e);

#endif
