/*
 * The producer side of shmfeed: a dataset (the sources of a job, resolved, mapped and
 * indexed once in the launcher), the pure function that builds the batch of any
 * (global rank, step) from it, and the loop a forked producer process runs to fill arena
 * slots with those batches.
 *
 * Determinism: the bytes of a batch depend only on the config and on (rank, step), never
 * on which producer builds it, how many there are, or what they built before (D1). Rank
 * r at step s holds global samples s*B*W + r*B ... + B-1 (D2), each sample located
 * without state (producer/sampler.h), so a resume needs nothing but the step (D3).
 *
 * Payload of a slot: B rows of T+1 tokens (uint16 or int32, little-endian), row-major;
 * then, when the job records document starts, zero bytes up to the next 64-byte boundary
 * (sf__doc_starts_offset()) and B x doc_starts uint32 offsets of the tokens that begin a
 * document in each row, ascending, padded with UINT32_MAX. A step
 * past the end of a finite run is published with length 0 (end marker).
 *
 * Caveats: open the dataset before fork(); each process (launcher, producers, tools)
 * creates its own builder. A dataset is read-only after sf__dataset_open(); builders
 * hold per-process scratch and are used by one thread at a time.
 */
#ifndef SF_PRODUCER_PRODUCER_H
#define SF_PRODUCER_PRODUCER_H

#include <stdint.h>

#include "common/arena.h"
#include "common/config.h"
#include "common/errors.h"

struct sf_dataset;
struct sf_builder;

/* What a dataset holds and what building its index cost, for logs and stats. */
struct sf_dataset_stats {
	uint64_t n_files;	 /* files after glob expansion, skipped ones included */
	uint64_t n_tokens;	 /* tokens in the stream */
	uint64_t n_docs;	 /* documents, where the format says */
	uint64_t n_windows;	 /* samples per epoch */
	uint64_t n_steps;	 /* steps with data; UINT64_MAX when unlimited */
	uint64_t skipped;	 /* bad records or files skipped by the on_error policy */
	uint64_t text_bytes;	 /* raw text bytes (uncompressed) */
	uint64_t n_chunks;	 /* raw text chunks in the index */
	uint64_t index_bytes;	 /* size of the chunk index file */
	uint64_t index_build_ns; /* time spent tokenizing to build it (0: loaded) */
	uint32_t index_loaded;	 /* 1: the cached index was valid and reused */
	uint32_t token_bytes;	 /* 2 or 4 */
};

/*
 * sf__dataset_open - resolve the sources of `cfg` (globs expanded, sorted), map the
 * pre-tokenized files read-only, load the tokenizer, and build or load the per-chunk
 * token-count index of raw text (tokenizing with cfg->producers worker processes).
 * A bad input fails with SF_E_SOURCE (or -errno) and "PATH: byte N: ..." or
 * "PATH:LINE: ..." in `e`, unless its source's policy is skip. Keeps pointers into
 * `cfg`, which must outlive the dataset. Returns 0 and *ret_ds (free with
 * sf__dataset_close()).
 */
int sf__dataset_open(const struct sf_config *cfg, struct sf_dataset **ret_ds, struct sf_err *e);

/*
 * sf__dataset_open_part - sf__dataset_open() of the raw text documents of one tokenize
 * part (producer/part_plan.h), or of all of them when `plan` is NULL, for
 * sf__dataset_write_megatron(): only the files and byte ranges of `plan` are read, the
 * chunk counts of a file read only in part are not cached, and the dataset may hold
 * fewer tokens than a sequence (it is not for sampling: no batches are built from it).
 * Pre-tokenized sources fail with SF_E_CONFIG, so the writer meets only raw text. `plan`
 * must come from the same config; a source listing that changed since fails with
 * SF_E_SOURCE.
 */
struct sf_part_plan;
int sf__dataset_open_part(const struct sf_config *cfg, const struct sf_part_plan *plan,
			  struct sf_dataset **ret_ds, struct sf_err *e);

/*
 * sf__source_expand - the files of a source, as the dataset reads them: each path taken
 * literally when it has no glob character or names an existing file, else expanded as
 * a glob (one matching nothing fails with -ENOENT); sorted, without duplicates. Returns 0
 * with *ret_paths (free each, then the array) and *ret_n.
 */
int sf__source_expand(const struct sf_source_config *src, char ***ret_paths, size_t *ret_n,
		      struct sf_err *e);

/*
 * sf__source_expand_path - the files of src's path `j` alone, as sf__source_expand()
 * lists them, for a report of each path (`check`): a set of tokenize parts named one
 * part a path is not held whole here, which only the whole listing can be.
 */
int sf__source_expand_path(const struct sf_source_config *src, uint32_t j, char ***ret_paths,
			   size_t *ret_n, struct sf_err *e);

/*
 * sf__sources_shared_files - each file that two sources of `cfg` read, by any names (a
 * Megatron pair by its .bin, .idx or prefix), as pairs of sources: a file that k sources
 * read makes k - 1 pairs, each of them with the next. report(source a, source b, path,
 * effect) for the first SF_SHARED_FILES_SAID pairs, `effect` saying what it does. A
 * source reads each of its files once, but two sources each read theirs: in one stream
 * such a file's documents come twice per epoch, in a mixture both sources sample it.
 * Returns how many pairs there are, or -ENOMEM; sources that do not expand are left to
 * the dataset's own errors. SF_SHARED_MORE says how many were not reported.
 */
#define SF_SHARED_FILES_SAID 8
#define SF_SHARED_MORE	     "and %d more pairs of sources that read one file"
int sf__sources_shared_files(const struct sf_config *cfg,
			     void (*report)(uint32_t a, uint32_t b, const char *path,
					    const char *effect));
/* sf__sources_warn_shared - the same, logged as warnings: what `run` and `tokenize` say. */
void sf__sources_warn_shared(const struct sf_config *cfg);

/*
 * sf__dataset_check - what sf__dataset_open() does before it tokenizes raw text: expand
 * and open every source (headers and indexes checked, text files opened as regular
 * files, their bytes not read: a bad record or stream is found by the index build), load the
 * tokenizer, choose the end-of-text id and the token width; then free it all again. What
 * `shmfeed check` verifies, so that it fails where `shmfeed run` would. Returns 0 and the
 * arena's bytes per token in *ret_token_bytes, or the error with detail in `e`.
 */
int sf__dataset_check(const struct sf_config *cfg, uint32_t *ret_token_bytes, struct sf_err *e);

/*
 * Mixtures (docs/mixtures.md). sf__dataset_mix_sources - the sources of the dataset's
 * mixture, 0 when it has none.
 */
uint32_t sf__dataset_mix_sources(const struct sf_dataset *ds);

/*
 * sf__dataset_mix_expect - for each source of the mixture, its samples among the first
 * `k` global samples (ret_counts) and its samples per epoch (ret_windows); either may be
 * NULL. O(sources).
 */
void sf__dataset_mix_expect(const struct sf_dataset *ds, uint64_t k, uint64_t *ret_counts,
			    uint64_t *ret_windows);

/* sf__dataset_mix_target - each source's expected count among the first k samples. */
void sf__dataset_mix_target(const struct sf_dataset *ds, uint64_t k, double *ret_target);

/*
 * sf__dataset_mix_bound - the largest |count_i(n) - w_i n| any phase of the mixture
 * allows; *ret_exact is 1 when it was found exactly (over a whole period), 0 when it is
 * the bound proved from the tree; *ret_slack how far below 1 the bound of the phase
 * closest to 1 is (above 0: every bound is below 1, where a double may show 1).
 */
double sf__dataset_mix_bound(const struct sf_dataset *ds, uint32_t *ret_exact, double *ret_slack);

/* Room for what sf__dataset_mix_ranks() and sf__dataset_large_docs() say. */
#define SF_DATASET_ADVICE_MAX 768

/*
 * sf__dataset_mix_ranks - whether some rank's own rows hold a source far from its share
 * of all rows (by half that share, and well beyond chance), over the first steps of each
 * phase (up to 64 phases spread over the schedule, at most 2^24 samples): the count
 * rule's pattern repeats, and rank r's rows of step s are samples s G + r B + i, so where
 * its period shares factors with G it falls on the ranks alike (0.7/0.2/0.1 with B = 1
 * and W = 8: the even ranks never get the third source). Returns 1 and says the rank,
 * source and phase most off in `buf`, else 0 (also for no mixture or one rank).
 */
int sf__dataset_mix_ranks(const struct sf_dataset *ds, char *buf, size_t len);

/*
 * sf__dataset_large_docs - whether, in windows mode, a raw text document (or JSONL
 * record) of 1 MiB or more, and of about a global batch of windows, sits among as much
 * other text: it fills a chunk of the text index, whose windows come together, so the
 * batches drawn from it hold it alone. Returns 1 and says the largest in `buf`, else 0.
 */
int sf__dataset_large_docs(const struct sf_dataset *ds, char *buf, size_t len);

/* sf__dataset_close - unmap and free; accepts NULL. */
void sf__dataset_close(struct sf_dataset *ds);

/* sf__dataset_stats - what the dataset holds. */
void sf__dataset_stats(const struct sf_dataset *ds, struct sf_dataset_stats *ret_stats);

/* sf__dataset_first_skip - message of the first record skipped by policy, or "". */
const char *sf__dataset_first_skip(const struct sf_dataset *ds);

/*
 * sf__dataset_note - a warning about the sources found while indexing them, or "": a text
 * file whose lines end with CRLF where a separator of newlines splits nothing.
 */
const char *sf__dataset_note(const struct sf_dataset *ds);

/*
 * sf__dataset_reads - 1 if the file of device `dev` and inode `ino` is one the dataset
 * reads: a text file, a token file, or a Megatron token file's .idx.
 */
int sf__dataset_reads(const struct sf_dataset *ds, uint64_t dev, uint64_t ino);

/*
 * sf__dataset_geometry - the arena geometry of the job: ranks = local ranks, K, max
 * producers, B, T+1, token bytes, document starts, world size, rank base, flags and
 * the config digest. Returns 0, or SF_E_CONFIG.
 */
int sf__dataset_geometry(const struct sf_dataset *ds, const struct sf_config *cfg,
			 struct sf_geometry *ret_geo, struct sf_err *e);

/* sf__dataset_payload_bytes - bytes of a full batch payload (tokens and document starts). */
uint64_t sf__dataset_payload_bytes(const struct sf_dataset *ds);

/*
 * sf__builder_create - per-process scratch for building batches (a tokenizer encoder and
 * a token cache for raw text). Allocates everything it will need, so building allocates
 * nothing. Returns 0 and *ret_b (free with sf__builder_free()).
 */
int sf__builder_create(const struct sf_dataset *ds, struct sf_builder **ret_b, struct sf_err *e);

/* sf__builder_free - free a builder; accepts NULL. */
void sf__builder_free(struct sf_builder *b);

/*
 * sf__builder_sample_offset - global token offset of the first of the T+1 tokens of
 * global sample `k` (any k: epochs repeat, each in its own order).
 */
uint64_t sf__builder_sample_offset(struct sf_builder *b, uint64_t k);

/*
 * sf__builder_fill - build the batch of global rank `rank` at `step` into `payload`
 * (sf__dataset_payload_bytes() bytes). Stores the payload length (0 past the end of a
 * finite run) in *ret_len and the global index of its first sample in
 * *ret_first_sample. Returns 0, or SF_E_SOURCE / SF_E_TOKENIZER with detail in `e`.
 */
int sf__builder_fill(struct sf_builder *b, uint32_t rank, uint64_t step, void *payload,
		     uint32_t *ret_len, uint64_t *ret_first_sample, struct sf_err *e);

/*
 * sf__builder_counters - the tokens built so far by this builder (for telemetry and the
 * benchmark) and the tokens the tokenizer produced, re-tokenization included.
 */
void sf__builder_counters(const struct sf_builder *b, uint64_t *ret_tokens_out,
			  uint64_t *ret_tokens_encoded);

/* Progress of sf__dataset_write_megatron(), sampled by the caller's callback. */
struct sf_tokenize_progress {
	uint64_t bytes;	      /* text bytes tokenized so far */
	uint64_t total_bytes; /* text bytes in all */
	uint64_t docs;
	uint64_t tokens;
	uint64_t elapsed_ns;
	uint32_t done; /* 1 on the final call */
};

/*
 * sf__dataset_write_megatron - write the raw text token stream of `ds` as a Megatron
 * MMIDIDX pair PREFIX.bin / PREFIX.idx: one sequence and one document per source
 * document, its ids followed by <|endoftext|> (as Megatron's --append-eod), dtype uint16
 * or int32 as the dataset's. Tokenizes with `workers` forked processes, each writing its
 * chunks at their offsets (known from the chunk index). Both files are written under
 * temporary names and renamed at the end. `progress` (may be NULL) is called about
 * every 200 ms in the calling process. Returns 0, or an error with detail in `e`.
 */
int sf__dataset_write_megatron(const struct sf_dataset *ds, const char *prefix, uint32_t workers,
			       void (*progress)(const struct sf_tokenize_progress *p, void *arg),
			       void *arg, struct sf_err *e);

/*
 * sf__producer_fill - sf__builder_fill() in a producer process: a SIGBUS raised while it
 * reads a mapped source (a file truncated under the running job) becomes SF_E_SOURCE
 * naming the file and the byte offset, instead of killing the process. A SIGBUS at any
 * other address stays fatal. Installs the process's SIGBUS handler on first use; one
 * thread per process may call it.
 */
int sf__producer_fill(const struct sf_dataset *ds, struct sf_builder *b, uint32_t rank,
		      uint64_t step, void *payload, uint32_t *ret_len, uint64_t *ret_first_sample,
		      struct sf_err *e);

/*
 * sf__dataset_check_files - whether every source file is still the one opened (device,
 * inode, size, modification time): every pre-tokenized file, and the raw text files the
 * calling process has mapped (the others are checked when they are mapped). Builders
 * call it at the first batch of each epoch, raw text before tokenizing a chunk (its file
 * only), producers every few seconds.
 * Returns 0, or SF_E_SOURCE naming the file that changed.
 */
int sf__dataset_check_files(const struct sf_dataset *ds, struct sf_err *e);

/*
 * sf__dataset_fault - the error for a SIGBUS at `addr`: SF_E_SOURCE naming the source
 * file mapped there and the byte offset, or -EFAULT when no source is mapped there.
 */
int sf__dataset_fault(const struct sf_dataset *ds, const void *addr, struct sf_err *e);

/*
 * sf__producer_main - the body of a forked producer process: register as participant
 * `index` (role producer), then claim, build and publish batches until the job is
 * STOPPING (returns 0) or a source fails (returns the error, detail in `e`). Global rank
 * of ring r is the node's rank base + r, as the claim reports it (common/node_ranks.h).
 */
int sf__producer_main(struct sf_dataset *ds, struct sf_arena *a, uint32_t index, struct sf_err *e);

/*
 * sf__producer_progress - in a registered producer process, note that `bytes` of input
 * were worked through: the producer's heartbeat (which the supervisor reads to tell a
 * stalled producer from a busy one) is renewed once per SF_HEARTBEAT_BYTES, and at once
 * when `bytes` is 0. Costs an addition, and a clock read now and then; a no-op in any
 * other process (index builds, `shmfeed tokenize`).
 */
#define SF_HEARTBEAT_BYTES (64u * 1024u)
void sf__producer_progress(uint64_t bytes);

#endif
