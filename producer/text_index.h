/*
 * The chunk index of raw text (producer/text_index.c): files cut into chunks of whole
 * documents, the token count of each chunk, and the chunk holding any offset of the
 * global token stream.
 */
#ifndef SF_PRODUCER_TEXT_INDEX_H
#define SF_PRODUCER_TEXT_INDEX_H

#include <stdint.h>

#include "producer/dataset_impl.h"

/* sf__text_add_file - read (and decompress) a text file and cut it into chunks. */
int sf__text_add_file(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      struct sf_err *e);

/* sf__text_build_index - load or build the token counts of every chunk, then lay the
 * chunks out in the global stream. */
int sf__text_build_index(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e);

/* sf__text_close - free the text files and chunks of `ds`. */
void sf__text_close(struct sf_dataset *ds);

/* sf__text_walk_init - a document walk over chunk `chunk` (producer/source/text_file.h). */
void sf__text_walk_init(struct sf_doc_walk *w, const struct sf_dataset *ds, uint64_t chunk,
			char *scratch);

/* sf__text_find_chunk - the chunk holding global token offset `off`. */
uint64_t sf__text_find_chunk(const struct sf_dataset *ds, uint64_t off);

#endif
