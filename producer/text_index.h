/*
 * The chunk index of raw text (producer/text_index.c): files cut into chunks of whole
 * documents, the token count of each chunk, and the chunk holding any offset of the
 * global token stream.
 */
#ifndef SF_PRODUCER_TEXT_INDEX_H
#define SF_PRODUCER_TEXT_INDEX_H

#include <stdint.h>

#include "producer/dataset_impl.h"

/*
 * sf__text_add_file - add a text file to the dataset: opened and its identity recorded,
 * none of its bytes read (sf__text_build_index() cuts it when no cached index holds it).
 * An unreadable file fails, or is skipped and counted when its source says so.
 */
int sf__text_add_file(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      struct sf_err *e);

/*
 * sf__text_add_part - sf__text_add_file() for the documents of the file that start in
 * bytes [lo, hi) (hi may exceed the file: to its end). A file that cannot be entered
 * mid-way (compressed, one document, a separator that overlaps itself) counts as
 * starting at byte 0: all of it when lo is 0, none otherwise. Its chunk counts are
 * neither loaded from nor saved to the index cache unless the range is the whole file.
 */
int sf__text_add_part(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      uint64_t lo, uint64_t hi, struct sf_err *e);

/* sf__text_build_index - load or build the token counts of every chunk, then lay the
 * chunks out in the global stream. */
int sf__text_build_index(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);

/* sf__text_close - free the text files and chunks of `ds`. */
void sf__text_close(struct sf_dataset *ds);

/*
 * sf__text_walk_init - a document walk over chunk `chunk` (producer/source/text_file.h),
 * its file mapped through the process's file cache: valid until the next walk is started
 * in this process. Returns 0, or an error (the file cannot be mapped, changed, or does
 * not hold the chunk; then w->index_lie tells the last).
 */
int sf__text_walk_init(struct sf_doc_walk *w, const struct sf_dataset *ds, uint64_t chunk,
		       char *scratch, struct sf_err *e);

/*
 * sf__text_say_line_ends - the dataset's note (said once) that text file `f` has line
 * ends its source's separator does not match (f->line_ends), unless a note is there.
 */
void sf__text_say_line_ends(struct sf_dataset *ds, const struct sf_text_file *f);

/*
 * sf__text_index_lied - chunk `chunk` does not hold what its index says (the error in
 * `e`): remove the cached index it came from, so that the next run rebuilds it, and say
 * so in `e`. Returns e->code.
 */
int sf__text_index_lied(const struct sf_dataset *ds, uint64_t chunk, struct sf_err *e);

/* sf__text_add_chunk - append a chunk of `file` to ds->chunks. Returns 0 or -ENOMEM. */
int sf__text_add_chunk(struct sf_dataset *ds, uint32_t file, uint64_t off, uint64_t len,
		       uint64_t line);

/* sf__text_find_chunk - the chunk holding global token offset `off`. */
uint64_t sf__text_find_chunk(const struct sf_dataset *ds, uint64_t off);

#endif
