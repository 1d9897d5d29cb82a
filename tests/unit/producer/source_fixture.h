/*
 * The fixture of the producer's source tests: a temporary directory (also the index
 * cache) and a one-source config whose single path the test fills in `path`.
 */
#ifndef SF_TESTS_SOURCE_FIXTURE_H
#define SF_TESTS_SOURCE_FIXTURE_H

#include <stdint.h>

#include "common/config.h"

extern char dir[64];
extern char path[4096];
extern struct sf_config cfg;
extern struct sf_source_config src;

/* Make /tmp/sf-TAG-XXXXXX and a config of batch B, sequence length T, one producer. */
void source_fixture_setup(const char *tag, uint32_t batch, uint32_t seq_len);

/* Remove the directory and all it holds. */
void source_fixture_teardown(void);

#endif
