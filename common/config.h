/*
 * The resolved job configuration: what a YAML job file says, with every default filled
 * in. The launcher loads it (common/config.c), producers build batches from it, and its
 * digest (the fields that decide the token stream) is stored in the arena header and in
 * every resume state.
 *
 * Ownership: sf__config_load() allocates the strings and arrays inside; free them with
 * sf__config_free(). A loaded config is read-only afterwards and can be shared by forked
 * producers.
 */
#ifndef SF_COMMON_CONFIG_H
#define SF_COMMON_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "common/errors.h"

/*
 * The version of what jobs deliver: which tokens each step of a job gets, for every
 * config. Raise it with any change that moves a sample of some job (an order, a
 * tokenizer's ids, a packing rule, a default); tests/producer/test_stream.c pins the
 * batches of a set of jobs and fails on such a change. From version 2 on it is part of
 * every config digest, so that a state saved by a shmfeed of another version is refused
 * (as a changed config is) rather than resumed onto other samples.
 */
#define SF_STREAM_VERSION 3

/* Source formats. */
/* The longest path of a unix socket (sun_path holds 108 bytes with its NUL). */
#define SF_IPC_PATH_MAX 107

#define SF_FMT_AUTO	0 /* by file name: .bin/.idx, .jsonl[.zst|.gz], .txt[.zst|.gz] */
#define SF_FMT_NANOGPT	1 /* headerless uint16 tokens */
#define SF_FMT_LLMC	2 /* llm.c shard: 256 x int32 header, then tokens */
#define SF_FMT_MEGATRON 3 /* MMIDIDX .bin/.idx pair (path names the prefix or either file) */
#define SF_FMT_TEXT	4 /* raw text, one document per file or split by a separator */
#define SF_FMT_JSONL	5 /* one JSON object per line, text in a configured field */

/* Policy for a bad record in a source. */
#define SF_ON_ERROR_STOP 0
#define SF_ON_ERROR_SKIP 1

#define SF_INDEX_CACHE	0 /* the user's cache directory (default) */
#define SF_INDEX_BESIDE 1 /* a dot-file beside the text file, else the cache directory */

/* Sampling modes. */
#define SF_SAMPLE_WINDOWS 0 /* stride-T windows, permuted per epoch by a keyed bijection */
#define SF_SAMPLE_RANDOM  1 /* nanoGPT-style random offsets, counter-based generator */

/* Token dtype choice. */
#define SF_DTYPE_AUTO 0 /* uint16 when the vocabulary fits, else int32 */

/* tokenizer.eot_id left null: the end-of-text id comes from the encoding. */
#define SF_EOT_ID_UNSET UINT64_MAX

/* Device choice for consumers. */
#define SF_DEVICE_AUTO 0 /* CUDA when libcuda and a device are there, else CPU */
#define SF_DEVICE_CPU  1
#define SF_DEVICE_CUDA 2

/*
 * Mixture weights are decimals with up to 9 digits after the point, held as integers
 * scaled by SF_WEIGHT_SCALE so that they stay exact; SF_WEIGHT_UNSET: not given.
 */
#define SF_WEIGHT_SCALE UINT64_C(1000000000)
#define SF_WEIGHT_MAX	(UINT64_C(1000000000) * SF_WEIGHT_SCALE)
#define SF_WEIGHT_UNSET UINT64_MAX

/* A name and its weight: a group's, or one entry of a schedule phase. */
struct sf_weight_config {
	char *name;
	uint64_t weight;
};

struct sf_weights_config {
	struct sf_weight_config *v;
	uint32_t n;
	/* Where it was given ("job.yaml:12:5", "--set KEY"), for the messages of checks
	 * made on the weights later (producer/mixture_config.c); "" if not from a file. */
	char at[124];
};

/* One phase of mixture.schedule (docs/mixtures.md). */
struct sf_phase_config {
	uint64_t until_step;		  /* the phase ends before it; UINT64_MAX: never */
	struct sf_weights_config weights; /* source or group names; others weigh 0 */
	struct sf_weights_config ramp_to; /* n > 0: a linear ramp from weights to these */
	uint32_t stages;		  /* ramp: constant stages (0: one a step, <= 1024) */
	uint32_t pad;
};

/* The most sources a job lists. */
#define SF_CONFIG_SOURCES_MAX 4096u

struct sf_source_config {
	char **paths; /* paths and globs, as written; expanded sorted at load */
	uint32_t n_paths;
	uint32_t format;   /* SF_FMT_* */
	char *text_field;  /* jsonl: field holding the text (default "text") */
	char *separator;   /* text: document separator; NULL: one document per file */
	uint32_t on_error; /* SF_ON_ERROR_* (default stop) */
	uint32_t index;	   /* SF_INDEX_*: where raw text token-count indexes are cached */
	uint32_t pad;
	/* Mixtures (docs/mixtures.md). */
	char *name;	 /* names the source in schedules, stats and its seed (default sourceN) */
	char *group;	 /* NULL: none; else its weight is relative within the group */
	uint64_t weight; /* SF_WEIGHT_UNSET: not given */
};

/*
 * Default producers.stall_timeout. Producers renew their heartbeat at least every 200 ms
 * when idle and every 64 KiB of input while building a batch; docs/config.md gives the
 * longest silence measured and why this default leaves a wide margin over it.
 */
#define SF_STALL_TIMEOUT_DEFAULT_MS 5000u

struct sf_config {
	char *path; /* the file it was loaded from (for messages) */
	char *job;  /* job name (default: file name without .yaml) */

	struct sf_source_config *sources;
	uint32_t n_sources;

	/* tokenizer */
	char *encoding;	       /* "bytes", "char", "r50k_base", "cl100k_base", "o200k_base" */
	char *vocab;	       /* vocabulary file, or NULL to look in vocab_dir */
	char *vocab_dir;       /* directory with ENCODING.tiktoken (default $SHMFEED_VOCAB_DIR) */
	uint64_t eot_id;       /* end-of-text id of pre-tokenized sources, or SF_EOT_ID_UNSET */
	char *tok_file;	       /* a tokenizer file (instead of `encoding`), or NULL */
	uint32_t tok_format;   /* its format: SF_TOK_FORMAT_* of the tokenizer (0: detected) */
	char *tok_pattern;     /* a pre-tokenization regex replacing the family's, or NULL */
	char *bos;	       /* before each document: "auto" (the family's), "none" or a token */
	char *eos;	       /* after each document: "auto" or a special token */
	uint32_t tok_specials; /* 1: special-token text in documents becomes their ids */

	/* batch geometry */
	uint32_t batch_size; /* B, per rank (default 8) */
	uint32_t seq_len;    /* T: each sequence holds T+1 tokens (default 256) */
	uint32_t dtype;	     /* SF_DTYPE_AUTO, SF_DTYPE_U16, SF_DTYPE_I32 */

	/* sampling */
	uint32_t mode;	     /* SF_SAMPLE_* (default windows) */
	uint64_t seed;	     /* default 1337 */
	uint64_t epochs;     /* 0: unlimited */
	uint32_t doc_starts; /* max document starts recorded per sequence; 0: off */

	/* arena */
	uint32_t slots_per_rank; /* K (default 4) */
	uint32_t hugepages;	 /* 1: try 2 MiB pages (default 0) */

	/* producers */
	uint32_t producers;	   /* P (default 2) */
	uint32_t max_restarts;	   /* restarts of one producer before the job stops (default 5) */
	uint32_t stall_timeout_ms; /* a producer silent this long is killed and replaced (0: off) */
	char *producer_cpus;	   /* CPU list producers are pinned to ("0-1,4"); NULL: not */

	/* consumers */
	uint32_t world_size;  /* W: global ranks (default 1) */
	uint32_t local_ranks; /* ranks on this node (default: world_size) */
	uint32_t rank_base;   /* global rank of this node's local rank 0 (default 0) */
	uint32_t device;      /* SF_DEVICE_* */

	/* control */
	char *endpoint;		     /* NULL: ipc:// in the private runtime directory */
	uint32_t stats_interval_ms;  /* PUB interval (default 1000) */
	char *curve_secret_key_file; /* the server's CURVE key pair (shmfeed keygen) */
	char *curve_allowed_clients; /* Z85 public keys of the clients let in */
	uint32_t insecure_tcp;	     /* 1: plain tcp:// allowed, and warned about */
	char *metrics_file;	     /* Prometheus text rewritten every interval; NULL: none */
	char *metrics;		     /* 127.0.0.1:PORT or [::1]:PORT serving it; NULL: none */

	/* integrity */
	uint32_t checksum;     /* 1: xxh3-64 per payload, verified by consumers (default 1) */
	uint32_t verify_every; /* consumers verify the checksum of every n-th step (default 1) */
	/* 1: consumers.rank_base is `auto` (rank_base is then 0): the node's global ranks
	 * come from the first rank that attaches (common/node_ranks.h). The default when
	 * local_ranks is less than world_size. */
	uint32_t rank_base_auto;

	/* mixture: set when a source has a weight or group, or a schedule is given */
	uint32_t mixture;
	uint32_t n_phases;
	struct sf_weights_config groups;  /* group weights (without a schedule) */
	struct sf_phase_config *schedule; /* n_phases of them; none: the weights as given */
};

/*
 * sf__config_metrics_address - parse control.metrics: "127.0.0.1:PORT" (*ret_ipv6 = 0) or
 * "[::1]:PORT" (1), PORT in 0..65535 (0: any free port). Returns 0, or SF_E_CONFIG for
 * anything else: metrics are served on loopback only.
 */
int sf__config_metrics_address(const char *addr, int *ret_ipv6, uint16_t *ret_port);

/* sf__config_defaults - a config holding every default (no sources). */
void sf__config_defaults(struct sf_config *cfg);

/*
 * sf__config_load - read and validate a YAML job file. Unknown keys, wrong types and
 * out-of-range values fail with SF_E_CONFIG and "FILE:LINE:COLUMN: what was expected"
 * in `e`. Returns 0 and fills *ret_cfg (free with sf__config_free()).
 */
int sf__config_load(const char *path, struct sf_config *ret_cfg, struct sf_err *e);

/*
 * sf__config_load_overrides - sf__config_load() followed by command-line overrides, each
 * "KEY=VALUE" with KEY a dotted field name ("batch.size", "job", "consumers.rank_base")
 * and VALUE a YAML value ("4", "[a.txt, b.txt]" for sources). Overrides are validated
 * like the file and named as "--set KEY" in messages; relative paths in them are taken
 * from the current directory, those in the file from the file's directory. `path` may
 * be NULL to start from the defaults (then sources must come from an override).
 */
int sf__config_load_overrides(const char *path, const char *const *overrides, uint32_t n_overrides,
			      struct sf_config *ret_cfg, struct sf_err *e);

/*
 * sf__config_load_string - like sf__config_load() from `len` bytes of YAML held in
 * memory; `name` stands for the file in messages and relative paths are taken from the
 * current directory. Used by the fuzz target and tests.
 */
int sf__config_load_string(const char *name, const char *yaml, size_t len,
			   struct sf_config *ret_cfg, struct sf_err *e);

/*
 * sf__config_write - write the resolved config as YAML (every field, defaults filled in)
 * to `out`, in the form sf__config_load() reads back. Returns 0 or -errno.
 */
int sf__config_write(const struct sf_config *cfg, FILE *out);

/*
 * sf__config_write_text - `s` as written when it holds no control character, line break
 * or '"', else as a YAML double-quoted scalar: for a value inside a comment line.
 */
void sf__config_write_text(FILE *out, const char *s);

/* sf__config_free - free what sf__config_load() allocated; accepts a zeroed config. */
void sf__config_free(struct sf_config *cfg);

/* sf__config_format_name - a source format's name in a job file: "nanogpt", "megatron", ... */
const char *sf__config_format_name(uint32_t format);

/*
 * sf__config_digest - digest of the fields that decide the global token stream: sources
 * (paths, sizes and modification times), tokenizer, seq_len, mode, seed, epochs,
 * doc_starts, and the global batch B*W. Changing W with B*W fixed keeps the digest, so a
 * resume state stays valid across an elastic restart.
 */
uint64_t sf__config_digest(const struct sf_config *cfg);

#endif
