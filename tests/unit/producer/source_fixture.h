/*
 * The fixture of the producer's source tests: a temporary directory (also the index
 * cache) and a one-source config whose single path the test fills in `path`.
 */
#ifndef SF_TESTS_SOURCE_FIXTURE_H
#define SF_TESTS_SOURCE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

extern char dir[64];
extern char path[4096];
extern struct sf_config cfg;
extern struct sf_source_config src;

/* Make /tmp/sf-TAG-XXXXXX and a config of batch B, sequence length T, one producer. */
void source_fixture_setup(const char *tag, uint32_t batch, uint32_t seq_len);

/*
 * Write `n` tokens to `file_path` as llm.c's write_datafile (dev/data/data_common.py)
 * does: a header of 256 int32 (magic, version, token count, zeros), then the tokens.
 * `model_desc` is "gpt-2" (magic 20240520, version 1, uint16) or "llama-3" (magic
 * 20240801, version 7, uint32); `tokens` holds n uint32 values either way.
 */
void write_llmc_datafile(const char *file_path, const uint32_t *tokens, size_t n,
			 const char *model_desc);

/* Remove the directory and all it holds. */
void source_fixture_teardown(void);

#endif
