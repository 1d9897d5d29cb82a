/*
 * The parts of `shmfeed tokenize --shard I/N`: which documents part I of N holds,
 * decided from the corpus listing and the file sizes alone, so that each task of a job
 * array finds its own part without reading the others' files or talking to them.
 *
 * The rule: lay the files end to end in the dataset's order (sources in config order,
 * each source's files sorted) and cut that byte space into N ranges,
 * [floor(I*S/N), floor((I+1)*S/N)) with S the total size (the last range open-ended).
 * A document belongs to the part whose range holds its first byte, so documents are
 * never split and every document lands in exactly one part, in order: the parts laid
 * end to end are the whole corpus. A file that cannot be entered mid-way (compressed,
 * one document per file, a separator that overlaps itself: see sf__text_add_part())
 * belongs whole to the part holding its first byte. Balance is by bytes on disk
 * (compressed bytes for compressed files).
 */
#ifndef SF_PRODUCER_PART_PLAN_H
#define SF_PRODUCER_PART_PLAN_H

#include <stdint.h>

#include "common/config.h"
#include "common/errors.h"

/* Bytes of one file whose document starts the part takes: [lo, hi), hi UINT64_MAX for
 * "to its end". in_part 0: the part reads nothing of it. */
struct sf_part_file {
	uint64_t lo;
	uint64_t hi;
	uint32_t in_part;
};

struct sf_part_plan {
	uint32_t part;
	uint32_t n_parts;
	uint64_t total_bytes; /* S: all files' sizes */
	uint64_t lo, hi;      /* the part's range of the S bytes (hi UINT64_MAX for the last) */
	uint64_t n_files;     /* files of all sources, in the dataset's order */
	struct sf_part_file *files;
	/* XXH3-128 of the listing: each source's reading settings, each file's path, size
	 * and modification time. Parts of one corpus agree on it. */
	unsigned char listing_digest[16];
};

/*
 * sf__part_plan_make - the plan of part `part` of `n_parts` (part < n_parts) for the
 * sources of `cfg`. A file that cannot be stat()ed counts as empty here (opening it
 * reports it, or skips it under on_error: skip). Returns 0 with *ret_plan (free with
 * sf__part_plan_free()), or SF_E_CONFIG / -errno with detail in `e`.
 */
int sf__part_plan_make(const struct sf_config *cfg, uint32_t part, uint32_t n_parts,
		       struct sf_part_plan *ret_plan, struct sf_err *e);

/* sf__part_plan_free - free what sf__part_plan_make() allocated; accepts a zeroed plan. */
void sf__part_plan_free(struct sf_part_plan *plan);

#endif
