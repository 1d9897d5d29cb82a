/*
 * The cached chunk index of raw text on disk (producer/index_file.c): one file per
 * directory of text files (and per key: tokenizer and cutting settings), holding for each
 * file its identity and everything a warm start needs (its length, its longest document,
 * its chunks' boundaries, lines and token counts), so that a start with a valid index
 * reads no source byte.
 */
#ifndef SF_PRODUCER_INDEX_FILE_H
#define SF_PRODUCER_INDEX_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "producer/dataset_impl.h"

struct sf_index_image;

/* sf__index_key - digest of the tokenizer and of what decides how `f` is cut. */
uint64_t sf__index_key(const struct sf_dataset *ds, const struct sf_text_file *f);

/*
 * sf__index_dir - where index caches live: $SHMFEED_CACHE_DIR/index, else
 * $XDG_CACHE_HOME/shmfeed/index, else $HOME/.cache/shmfeed/index. Returns 0, or -ENOENT
 * when none of these is set.
 */
int sf__index_dir(char *buf, size_t len);

/*
 * sf__index_load - the index of the directory of text file `file` for `key` (beside the
 * files when its source says so, else in the cache directory): 1 with *ret_img (free
 * with sf__index_image_free()) when one is there and valid, 0 when none is.
 */
int sf__index_load(const struct sf_dataset *ds, uint32_t file, uint64_t key,
		   struct sf_index_image **ret_img);

/*
 * sf__index_take - when `img` holds an entry for text file `file` whose identity is the
 * file's, append its chunks to ds->chunks and fill the file's length, longest document
 * and skip count from it: returns 1. Returns 0 when it holds none, -ENOMEM.
 */
int sf__index_take(struct sf_dataset *ds, const struct sf_index_image *img, uint32_t file);

/* sf__index_image_path - the file `img` was read from. */
const char *sf__index_image_path(const struct sf_index_image *img);

/* sf__index_image_bytes - its size. */
uint64_t sf__index_image_bytes(const struct sf_index_image *img);

/* sf__index_image_free - accepts NULL. */
void sf__index_image_free(struct sf_index_image *img);

/*
 * sf__index_save - write the index of text files files[0 .. n-1] (one directory, one
 * key) with their chunks, together with the entries of `old` (may be NULL) for other
 * files of the directory, in one file: written under a temporary name, synced once and
 * renamed. *ret_path (free it) is where. Returns 0 or -errno; failing costs speed only.
 */
int sf__index_save(const struct sf_dataset *ds, const uint32_t *files, uint32_t n, uint64_t key,
		   const struct sf_index_image *old, char **ret_path, uint64_t *ret_bytes);

#endif
