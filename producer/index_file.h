/*
 * The cached chunk index of raw text on disk (producer/index_file.c): where it lives, its
 * key, and loading and saving it.
 */
#ifndef SF_PRODUCER_INDEX_FILE_H
#define SF_PRODUCER_INDEX_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "producer/dataset_impl.h"

/* sf__index_key - digest of the tokenizer and of what decides how `f` is cut. */
uint64_t sf__index_key(const struct sf_dataset *ds, const struct sf_text_file *f);

/*
 * sf__index_dir - where index caches live: $SHMFEED_CACHE_DIR/index, else
 * $XDG_CACHE_HOME/shmfeed/index, else $HOME/.cache/shmfeed/index. Returns 0, or -ENOENT
 * when none of these is set.
 */
int sf__index_dir(char *buf, size_t len);

/* sf__index_load - the counts of file `file`'s chunks from its cache: 1 when loaded. */
int sf__index_load(struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t *ret_bytes);

/* sf__index_save - write the counts of file `file`'s chunks to its cache. */
int sf__index_save(const struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t skipped,
		   const char *first_skip, uint64_t *ret_bytes);

#endif
