/*
 * Synthetic producers for launcher tests (fake_producers.c) and the token they put at
 * position j of the batch of (global rank, step), which test consumers check.
 */
#ifndef SF_TESTS_LAUNCHER_FAKE_PRODUCERS_H
#define SF_TESTS_LAUNCHER_FAKE_PRODUCERS_H

#include <stdint.h>

#include "launcher/launcher.h"

extern const struct sf_producer_ops sf__fake_producers;

uint32_t sf__fake_token(uint32_t global_rank, uint64_t step, uint32_t j);

#endif
