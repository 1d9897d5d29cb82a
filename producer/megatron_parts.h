/*
 * The parts of a corpus tokenized by a job array (`shmfeed tokenize --shard I/N`) and
 * their merge (`shmfeed tokenize --merge`). Each part is a Megatron pair
 * PREFIX_IIIII-of-NNNNN.bin / .idx, written by sf__dataset_write_megatron() from a
 * dataset opened with sf__dataset_open_part(), and a manifest beside it,
 * PREFIX_IIIII-of-NNNNN.json, written last (its presence says the part is complete):
 *
 *   {"format": "shmfeed-tokenize-part", "version": 1,
 *    "config_digest": "<32 hex digits>", "part": I, "parts": N,
 *    "documents": D, "tokens": T, "dtype": "uint16" | "int32", "text_bytes": B,
 *    "bin_bytes": ..., "bin_sha256": "<64 hex>", "idx_bytes": ..., "idx_sha256": "<64 hex>",
 *    "skipped": S, "first_skip": "<message>"}
 *
 * config_digest is XXH3-128 of what decides the tokens: the listing (each source's
 * reading settings, each file's path, size and modification time; see part_plan.h), the
 * tokenizer (its encoding and vocabulary contents), the token width and <|endoftext|>.
 * Merging concatenates the parts' documents in part order, which is the corpus's
 * document order, so the merged pair is byte for byte what one `shmfeed tokenize` of the
 * whole corpus writes, given that every part read what a one-shot run reads: a part that
 * skipped records or files (on_error: skip) says so in its manifest, and the merge
 * repeats it as a warning.
 */
#ifndef SF_PRODUCER_MEGATRON_PARTS_H
#define SF_PRODUCER_MEGATRON_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "producer/part_plan.h"

struct sf_dataset;

/* Parts are numbered with five digits; at most this many. */
#define SF_MAX_PARTS 99999u

/* sf__part_prefix - PREFIX_IIIII-of-NNNNN into buf (len bytes). Returns 0, or -ENAMETOOLONG. */
int sf__part_prefix(const char *prefix, uint32_t part, uint32_t n_parts, char *buf, size_t len);

/*
 * sf__part_manifest_write - hash part_prefix.bin and .idx (written by
 * sf__dataset_write_megatron() from `ds`, opened with `plan`) and write
 * part_prefix.json through a temporary file and rename(). Returns 0, or an error with
 * detail in `e`.
 */
int sf__part_manifest_write(const char *part_prefix, const struct sf_part_plan *plan,
			    const struct sf_dataset *ds, struct sf_err *e);

/*
 * sf__parts_merge - check the parts named by `args` (each a part's prefix, or its .bin,
 * .idx or .json path; one part named twice counts once) and merge them into
 * PREFIX.bin / PREFIX.idx (temporary files renamed at the end). Refuses, with
 * SF_E_CONFIG and a message naming the files, parts without a manifest, manifests of
 * different config digests or part counts, a part given twice or missing, and parts whose
 * files' sizes or SHA-256 differ from their manifest or whose index is malformed.
 * Stores the merged documents and tokens in *ret_docs and *ret_tokens. Returns the
 * number of parts merged, or the error with detail in `e`.
 */
int sf__parts_merge(char *const *args, size_t n_args, const char *prefix, uint64_t *ret_docs,
		    uint64_t *ret_tokens, struct sf_err *e);

/*
 * sf__parts_sources - the files a source lists (`paths`, *n) that are tokenize parts
 * (named PREFIX_IIIII-of-NNNNN, as a prefix or its .bin, .idx or .json, with the
 * manifest beside): a part's manifest listed beside its pair (a directory or PREFIX_*
 * lists both) goes with the pair, removed from `paths` (freed; *n lowered), and one
 * listed alone names its pair, by its prefix (`paths` sorted again). With
 * `whole`, the parts are held to what the merge requires of a set, their SHA-256 aside:
 * one PREFIX and no other file, every part 0..N-1 once, one N, one config digest, and the
 * files their manifests describe (a job over a set with a part missing read another
 * corpus without a word); without, for the report of one path of a source, nothing is checked. Returns
 * 0, or SF_E_CONFIG naming what is wrong.
 */
int sf__parts_sources(char **paths, size_t *n, bool whole, struct sf_err *e);

#endif
