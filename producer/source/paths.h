/*
 * Source paths and formats (producer/source/paths.c). sf__source_expand() itself is
 * declared in producer/producer.h, since `check` and tests call it.
 */
#ifndef SF_PRODUCER_SOURCE_PATHS_H
#define SF_PRODUCER_SOURCE_PATHS_H

#include <stdint.h>

/*
 * sf__source_detect_format - the format of `path` when its source says SF_FMT_AUTO: raw
 * text or JSONL by extension (.txt, .jsonl, each optionally .zst or .gz), a pre-tokenized
 * format for a .bin or .idx (sf__token_format_detect()) or a Megatron prefix. Returns 0,
 * -EINVAL for a name auto does not know, or -ENOMEM.
 */
int sf__source_detect_format(const char *path, uint32_t *ret_format);

#endif
