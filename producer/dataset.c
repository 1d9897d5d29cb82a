/*
 * The dataset composes the rooms of producer/: the sources of each format (source/),
 * resolved into one global token stream (the sources in their order, each source's
 * paths and globs sorted: pre-tokenized files concatenated, raw text the concatenation
 * of its chunks, text_index.c), the tokenizer, the sample space over the stream (one, or
 * one per source of a mixture: dataset_mixture.c), and the batch builder. Sample k is
 * found by producer/sampler.h (text_order.c for raw text windows; mixture.h for the
 * source of a mixture's sample) without any state, which makes a batch a pure function
 * of (rank, step).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/io.h"
#include "common/slot.h"
#include "producer/chunk_share.h"
#include "producer/dataset_impl.h"
#include "producer/part_plan.h"
#include "producer/sampler.h"
#include "producer/sigbus.h"
#include "producer/source/file_cache.h"
#include "producer/source/paths.h"
#include "producer/text_cache.h"
#include "producer/text_index.h"
#include "producer/text_order.h"
#include "producer/tokenizer/tokenizer.h"

struct sf_builder {
	const struct sf_dataset *ds;
	struct sf_text_cache *text; /* raw text only */
	uint32_t *deferred;	    /* raw text: rows left for the second pass, B of them */
	/* Raw text windows: the order of each source of a mixture (NULL for pre-tokenized
	 * sources), or of the one stream in orders[0]; NULL in random mode. */
	struct sf_text_order **orders;
	uint32_t n_orders;
	uint64_t tokens_out;
	uint64_t epoch_checked; /* the epoch whose start checked the files; UINT64_MAX: none */
};

/*
 * How long a row waits for another producer that is tokenizing its chunk before it
 * tokenizes the chunk itself: a few times what a 64 KiB chunk takes, so that a filler
 * that is merely descheduled is waited for, and one that is stuck costs little.
 */
#define SHARE_WAIT_NS (20 * 1000 * 1000)

static int add_token_file(struct sf_dataset *ds, const char *path, uint32_t format,
			  const struct sf_source_config *src, struct sf_err *e)
{
	struct sf_token_file f, *nf;
	struct sf_err why = {0};
	int r = sf__token_file_open(&f, path, format, src->format == SF_FMT_AUTO, &why);

	if (r < 0) {
		if (src->on_error != SF_ON_ERROR_SKIP) {
			*e = why;
			return r;
		}
		sf__dataset_note_skip(ds, (uint32_t)(src - ds->sources), path, &why);
		return 0;
	}
	nf = realloc(ds->token_files, (ds->n_token_files + 1) * sizeof(*nf));
	if (!nf) {
		sf__token_file_close(&f);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	ds->token_files = nf;
	f.start = ds->n_tokens;
	ds->n_tokens += f.n_tokens;
	ds->stats.n_docs += f.format == SF_FMT_MEGATRON ? f.n_docs : 0;
	nf[ds->n_token_files++] = f;
	return 0;
}

/* A source's keys of another format would be ignored for this file: refused instead. The
 * text field's default, "text", is on every source and so means nothing here. */
static int keys_fit_format(const struct sf_source_config *src, const char *path, uint32_t format,
			   struct sf_err *e)
{
	if (src->separator && format != SF_FMT_TEXT)
		return sf__err(e, SF_E_CONFIG,
			       "%s: 'separator' splits raw text (format text) into documents; "
			       "this file is %s: drop the separator, or list the file in a "
			       "source of its own",
			       path,
			       format == SF_FMT_JSONL ? "JSONL, one document a line"
						      : "pre-tokenized");
	if (src->text_field && strcmp(src->text_field, "text") && format != SF_FMT_JSONL)
		return sf__err(e, SF_E_CONFIG,
			       "%s: 'text_field' names the field of a JSONL record that holds "
			       "the text; this file is %s: drop it, or list the file in a source "
			       "of its own",
			       path, format == SF_FMT_TEXT ? "raw text" : "pre-tokenized");
	if (src->index == SF_INDEX_BESIDE && format != SF_FMT_TEXT && format != SF_FMT_JSONL)
		return sf__err(e, SF_E_CONFIG,
			       "%s: 'index' says where the chunk index of raw text goes; this file "
			       "is pre-tokenized and needs none: drop it, or list the file in a "
			       "source of its own",
			       path);
	return 0;
}

/*
 * A name format auto does not know may be no file at all (a Megatron prefix whose .idx is
 * missing) or no regular file (a directory a glob matched): said so. -EINVAL where it is
 * a file of a name auto does not know.
 */
static int why_no_format(const char *path, struct sf_err *e)
{
	struct stat st;
	char *bin;
	int r;

	if (stat(path, &st) == 0)
		return S_ISREG(st.st_mode) ? -EINVAL
					   : sf__err(e, SF_E_SOURCE, "%s: not a regular file", path);
	if (lstat(path, &st) == 0) /* a symbolic link that leads nowhere: its open says so */
		return sf__source_open(path, &st, e);
	bin = sf__megatron_file(path, ".bin");
	if (!bin)
		return sf__err(e, -ENOMEM, "out of memory");
	r = sf__err(e, -ENOENT, "%s: no such file, and %s has no .idx beside it (a Megatron "
			"prefix names the pair)",
		    path, bin);
	free(bin);
	return r;
}

/*
 * A source that format auto reads as Megatron pairs (`pair`) and as nanoGPT tokens
 * (`lone`, a .bin without an .idx beside it): most likely a pair whose index was lost,
 * whose documents would be read as one headerless stream without a word.
 */
static int mixed_pairs(const char *pair, const char *lone, struct sf_err *e)
{
	return sf__err(e, SF_E_CONFIG,
		       "%s: format auto reads it as nanoGPT tokens, having no .idx beside it, "
		       "while %s is a Megatron pair of the same source: a Megatron .bin without "
		       "its index would lose its documents. Put its .idx back, or, if the source "
		       "holds both kinds, make them two sources, each with its format",
		       lone, pair);
}

static int open_sources(struct sf_dataset *ds, const struct sf_config *cfg,
			const struct sf_part_plan *plan, struct sf_err *e)
{
	uint64_t k = 0; /* files listed so far, the plan's index */

	for (uint32_t s = 0; s < cfg->n_sources; s++) {
		const struct sf_source_config *src = &cfg->sources[s];
		char **paths;
		size_t n;
		const uint32_t first_token_file = ds->n_token_files,
			       first_text_file = ds->n_text_files;
		/* Under auto, the first Megatron pair and the first nanoGPT .bin. */
		size_t pair = SIZE_MAX, lone = SIZE_MAX;
		int r = sf__source_expand(src, &paths, &n, e);

		if (r < 0)
			return r;
		for (size_t i = 0; i < n && r == 0; i++, k++) {
			uint32_t format = src->format;

			/*
			 * A file of another part is only checked for what every part refuses,
			 * a pre-tokenized file: else only the part it falls in failed, and
			 * the others wrote parts that no merge takes.
			 */
			if (plan && (k >= plan->n_files || !plan->files[k].in_part)) {
				if (format == SF_FMT_AUTO &&
				    sf__source_detect_format(paths[i], &format) < 0)
					continue;
				if (format != SF_FMT_TEXT && format != SF_FMT_JSONL)
					r = sf__err(e, SF_E_CONFIG,
						    "%s: tokenize parts are cut from raw text sources",
						    paths[i]);
				continue;
			}
			ds->stats.n_files++;
			if (format == SF_FMT_AUTO)
				r = sf__source_detect_format(paths[i], &format);
			if (r == -EINVAL) {
				struct sf_err why = {0};

				r = why_no_format(paths[i], &why);
				if (r == -EINVAL) {
					r = sf__err(
						e, SF_E_CONFIG,
						"%s: format auto goes by the name (.bin, .idx, a "
						"Megatron prefix, .jsonl and .txt, these two also "
						".gz or .zst) and knows no other: if the file is "
						"meant, give the source its format (format: text, "
						"jsonl, nanogpt, llmc or megatron), which reads "
						"every file of the source so; if not, leave it out "
						"(name the files to read, a glob such as "
						"DIR/*.bin, or move it away)",
						paths[i]);
					break;
				}
				/* No file to read, as a file that cannot be opened. */
				if (r != -ENOMEM && src->on_error == SF_ON_ERROR_SKIP) {
					sf__dataset_note_skip(ds, s, paths[i], &why);
					r = 0;
					continue;
				}
				*e = why;
				break;
			}
			if (r < 0) {
				sf__err(e, r, "%s: cannot detect its format", paths[i]);
				break;
			}
			if (src->format == SF_FMT_AUTO && format == SF_FMT_MEGATRON &&
			    pair == SIZE_MAX)
				pair = i;
			if (src->format == SF_FMT_AUTO && format == SF_FMT_NANOGPT &&
			    lone == SIZE_MAX)
				lone = i;
			if (pair != SIZE_MAX && lone != SIZE_MAX) {
				r = mixed_pairs(paths[pair], paths[lone], e);
				break;
			}
			r = keys_fit_format(src, paths[i], format, e);
			if (r < 0)
				break;
			if (plan && format != SF_FMT_TEXT && format != SF_FMT_JSONL)
				r = sf__err(e, SF_E_CONFIG,
					    "%s: tokenize parts are cut from raw text sources",
					    paths[i]);
			else if (plan)
				r = sf__text_add_part(ds, paths[i], format, s, plan->files[k].lo,
						      plan->files[k].hi, e);
			else if (format == SF_FMT_TEXT || format == SF_FMT_JSONL)
				r = sf__text_add_file(ds, paths[i], format, s, e);
			else
				r = add_token_file(ds, paths[i], format, src, e);
		}
		for (size_t i = 0; i < n; i++)
			free(paths[i]);
		free(paths);
		if (r < 0)
			return r;
		r = sf__dataset_mix_source_files(ds, cfg, s, first_token_file, first_text_file, e);
		if (r < 0)
			return r;
	}
	if (plan && k != plan->n_files)
		return sf__err(e, SF_E_SOURCE,
			       "the sources list %llu files now, %llu when the part was planned",
			       (unsigned long long)k, (unsigned long long)plan->n_files);
	/* One stream is one kind; a mixture's sources may each be either. */
	if (ds->n_token_files && ds->n_text_files && !ds->mix_sources)
		return sf__err(e, SF_E_CONFIG,
			       "%s: a job reads either pre-tokenized files or raw text, not both, "
			       "unless its sources are mixed (a `weight` per source: "
			       "docs/mixtures.md)",
			       cfg->path ? cfg->path : "config");
	if (ds->n_text_files && !ds->mix_sources)
		ds->n_text_spans = 1;
	return 0;
}

static int hash_file(XXH3_state_t *st, const char *path, struct sf_err *e)
{
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat sb;

	if (fd < 0)
		return sf__err(e, -errno, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return sf__err(e, SF_E_TOKENIZER, "%s: not a regular file", path);
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		XXH3_64bits_update(st, buf, (size_t)n);
	close(fd);
	return n < 0 ? sf__err(e, -EIO, "%s: cannot read", path) : 0;
}

/*
 * A digest of what decides the ids: the encoding name and the bytes of its vocabulary
 * (the file sf__tok_load() read, found the same way), or of the text a char tokenizer
 * was built from. It keys the chunk index cache.
 */
static int tokenizer_digest(const char *encoding, const char *vocab, uint64_t *ret,
			    struct sf_err *e)
{
	XXH3_state_t st;
	const char *dir = getenv(SF_TOK_VOCAB_DIR_ENV);
	int r = 0;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, encoding, strlen(encoding) + 1);
	if (vocab) {
		r = hash_file(&st, vocab, e);
	} else if (!strncmp(encoding, "char:", 5)) {
		r = hash_file(&st, encoding + 5, e);
	} else if (strcmp(encoding, "bytes") && dir) {
		const char *name = sf__tok_vocab_name(encoding);
		size_t n = strlen(dir) + strlen(name) + 16;
		char *path = malloc(n);

		if (!path)
			return sf__err(e, -ENOMEM, "out of memory");
		snprintf(path, n, "%s/%s.tiktoken", dir, name);
		r = hash_file(&st, path, e);
		free(path);
	}
	if (r < 0)
		return r;
	*ret = XXH3_64bits_digest(&st);
	return 0;
}

/*
 * A tokenizer file (tokenizer.file): the family's tokens around each document unless the
 * job names others. The chunk index cache is keyed by the file's bytes, its format and
 * pattern, and those tokens, which all change the counts.
 */
static int load_tokenizer_file(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	struct sf_tok_file_opts opts = {cfg->tok_file, (int)cfg->tok_format, cfg->tok_pattern};
	XXH3_state_t st;
	uint64_t words[3];
	int32_t bos, eos;
	int r;

	r = sf__tok_load_file(&opts, &ds->tok, e);
	/* A config built in code (not loaded) may leave the policies unset: "auto". */
	if (r >= 0)
		r = sf__tok_marker(ds->tok, cfg->bos ? cfg->bos : "auto", 1, &bos, e);
	if (r >= 0)
		r = sf__tok_marker(ds->tok, cfg->eos ? cfg->eos : "auto", 0, &eos, e);
	if (r < 0)
		return r;
	/* "auto" finds no end token in a file of no known family: raw text, whose documents
	 * end with it, and document starts need one named. */
	if (eos < 0 && (ds->n_text_files || cfg->doc_starts))
		return sf__err(e, SF_E_CONFIG,
			       "%s: no end-of-document token is known for this tokenizer file (eos "
			       "auto found none): name one of its special tokens with tokenizer.eos",
			       cfg->tok_file);
	ds->bos = bos >= 0 ? (uint32_t)bos : UINT32_MAX;
	ds->eot = eos >= 0 ? (uint32_t)eos : UINT32_MAX;
	ds->allowed = cfg->tok_specials ? SF_TOK_ALLOW_ALL : SF_TOK_ALLOW_NONE;
	words[0] = cfg->tok_format | (uint64_t)cfg->tok_specials << 32;
	words[1] = ds->bos;
	words[2] = ds->eot;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, "file", 5);
	XXH3_64bits_update(&st, words, sizeof(words));
	if (cfg->tok_pattern)
		XXH3_64bits_update(&st, cfg->tok_pattern, strlen(cfg->tok_pattern) + 1);
	r = hash_file(&st, cfg->tok_file, e);
	if (r < 0)
		return r;
	ds->tok_digest = XXH3_64bits_digest(&st);
	if (ds->n_token_files)
		ds->id_limit = sf__tok_n_vocab(ds->tok);
	return 0;
}

/*
 * The tokenizer is needed to encode raw text and, for flat token files, to know which
 * id ends a document (for document starts and for the dtype choice).
 */
static int load_tokenizer(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	char *vocab = NULL;
	bool from_dir;
	int r;

	if (cfg->tok_file)
		return load_tokenizer_file(ds, cfg, e);
	if (!cfg->encoding) {
		if (ds->n_text_files)
			return sf__err(e, SF_E_CONFIG, "raw text sources need an encoding");
		return 0;
	}
	/* The byte and character encodings have no vocabulary file. */
	from_dir = !cfg->vocab && cfg->vocab_dir && strcmp(cfg->encoding, "bytes") &&
		   strncmp(cfg->encoding, "char:", 5);

	if (cfg->vocab) {
		vocab = strdup(cfg->vocab);
	} else if (from_dir) {
		/* tiktoken names the file after the encoding: gpt2's is r50k_base.tiktoken. */
		const char *name = sf__tok_vocab_name(cfg->encoding);
		size_t n = strlen(cfg->vocab_dir) + strlen(name) + 16;

		vocab = malloc(n);
		if (vocab)
			snprintf(vocab, n, "%s/%s.tiktoken", cfg->vocab_dir, name);
	}
	if ((cfg->vocab || from_dir) && !vocab)
		return sf__err(e, -ENOMEM, "out of memory");
	r = sf__tok_load(cfg->encoding, vocab, &ds->tok, e);
	if (r >= 0)
		r = tokenizer_digest(cfg->encoding, vocab, &ds->tok_digest, e);
	free(vocab);
	if (r < 0)
		return r;
	r = sf__tok_eot(ds->tok);
	ds->eot = r >= 0 ? (uint32_t)r : UINT32_MAX;
	/* `bytes`, the default, names how raw text is cut, not how token files were made:
	 * their ids are held to the vocabulary of any other encoding the job names, and
	 * its end-of-text id (256) is not theirs. In a mixture with raw text sources the
	 * encoding is the one the token files were made with too, `bytes` included. */
	if (ds->n_token_files && (strcmp(cfg->encoding, "bytes") || ds->n_text_files))
		ds->id_limit = sf__tok_n_vocab(ds->tok);
	else if (ds->n_token_files)
		ds->eot = UINT32_MAX;
	return 0;
}

/*
 * The end-of-text id that marks document starts in flat token files (nanoGPT, llm.c;
 * a Megatron index lists its documents): tokenizer.eot_id, else that of the encoding
 * the job names. Document starts asked for without either are a config error: guessing
 * would record starts after an ordinary token.
 */
static int choose_eot(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	const char *job = cfg->path ? cfg->path : "config";

	if (cfg->eot_id != SF_EOT_ID_UNSET) {
		if (ds->n_text_files)
			return sf__err(e, SF_E_CONFIG,
				       "%s: tokenizer.eot_id applies to pre-tokenized sources; raw "
				       "text ends its documents with the end-of-text id of its "
				       "encoding",
				       job);
		ds->eot = (uint32_t)cfg->eot_id;
		return 0;
	}
	if (!cfg->doc_starts || ds->eot != UINT32_MAX)
		return 0;
	for (uint32_t i = 0; i < ds->n_token_files; i++)
		if (ds->token_files[i].format != SF_FMT_MEGATRON)
			return sf__err(e, SF_E_CONFIG,
				       "%s: sampling.doc_starts needs the end-of-text id of the "
				       "pre-tokenized file %s: set tokenizer.encoding to the "
				       "encoding it was made with (gpt2 for GPT-2 tokens) or "
				       "tokenizer.eot_id (50256 for GPT-2)",
				       job, ds->token_files[i].path);
	return 0;
}

/*
 * The arena's token width. Pre-tokenized files decide it by their own width (dtype auto:
 * the widest file's; an explicit uint16 cannot take a 4-byte file), whatever the encoding;
 * raw text by the vocabulary of its encoding.
 */
static int choose_dtype(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	const struct sf_token_file *wide = NULL;

	for (uint32_t i = 0; i < ds->n_token_files && !wide; i++)
		if (ds->token_files[i].width > 2)
			wide = &ds->token_files[i];
	if (cfg->dtype == SF_DTYPE_U16) {
		if (wide)
			return sf__err(
				e, SF_E_CONFIG,
				"%s: batch.dtype uint16 cannot hold the 4-byte tokens of %s; "
				"use dtype auto or int32",
				cfg->path ? cfg->path : "config", wide->path);
		if (ds->n_text_files && ds->tok && sf__tok_n_vocab(ds->tok) > 65536)
			return sf__err(e, SF_E_CONFIG, "dtype uint16 cannot hold the %u ids of %s",
				       sf__tok_n_vocab(ds->tok), sf__tok_name(ds->tok));
		ds->token_bytes = 2;
	} else if (cfg->dtype == SF_DTYPE_I32) {
		ds->token_bytes = 4;
	} else if (ds->n_token_files) {
		/* A mixture's raw text sources need the width of their vocabulary too. */
		ds->token_bytes =
			wide || (ds->n_text_files && ds->tok && sf__tok_n_vocab(ds->tok) > 65536)
				? 4
				: 2;
	} else if (ds->tok) {
		ds->token_bytes = sf__tok_n_vocab(ds->tok) <= 65536 ? 2 : 4;
	} else {
		ds->token_bytes = 2;
	}
	/* Ranks read 4-byte tokens as int32: an id of 2^31 or more would be negative. */
	if (ds->n_token_files && ds->token_bytes == 4 && !ds->id_limit)
		ds->id_limit = SF_ID_LIMIT_INT32;
	return 0;
}

static void copy_config(struct sf_dataset *ds, const struct sf_config *cfg)
{
	ds->batch = cfg->batch_size;
	ds->seq_len = cfg->seq_len;
	ds->world_size = cfg->world_size;
	ds->rank_base = cfg->rank_base;
	ds->local_ranks = cfg->local_ranks;
	ds->slots_per_rank = cfg->slots_per_rank;
	ds->producers = cfg->producers;
	ds->mode = cfg->mode;
	ds->doc_starts = cfg->doc_starts;
	ds->checksum = cfg->checksum;
	ds->hugepages = cfg->hugepages;
	ds->seed = cfg->seed;
	ds->epochs = cfg->epochs;
	ds->sources = cfg->sources;
	ds->n_sources = cfg->n_sources;
	ds->eot = UINT32_MAX;
	ds->bos = UINT32_MAX;
}

/* The file cache's way to map file `i` of ds->token_maps. */
static int map_token_file(void *arg, uint32_t i, const char **ret_data, size_t *ret_len,
			  size_t *ret_cap, int *ret_private, struct sf_err *e)
{
	const struct sf_dataset *ds = arg;

	*ret_private = 0;
	return sf__token_file_map(&ds->token_files[i / 2], (int)(i % 2), ret_data, ret_len, ret_cap,
				  e);
}

/*
 * An end-of-text id given for flat token files must be one they can hold, and one of the
 * vocabulary when the job names it: otherwise no document would ever start.
 */
static int check_eot(const struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	const char *job = cfg->path ? cfg->path : "config";

	if (cfg->eot_id == SF_EOT_ID_UNSET)
		return 0;
	if (ds->id_limit && cfg->eot_id >= ds->id_limit)
		return sf__err(e, SF_E_CONFIG,
			       "%s: tokenizer.eot_id %llu is not an id of the job's vocabulary (%u "
			       "ids)",
			       job, (unsigned long long)cfg->eot_id, ds->id_limit);
	for (uint32_t i = 0; i < ds->n_token_files; i++)
		if (ds->token_files[i].format != SF_FMT_MEGATRON &&
		    ds->token_files[i].width == 2 && cfg->eot_id > UINT16_MAX)
			return sf__err(e, SF_E_CONFIG,
				       "%s: tokenizer.eot_id %llu cannot occur in the uint16 tokens "
				       "of %s",
				       job, (unsigned long long)cfg->eot_id,
				       ds->token_files[i].path);
	return 0;
}

/* What `run` does at start-up before it tokenizes anything: the sources opened, the
 * tokenizer loaded, the end-of-text id and the token width settled. */
static int open_start(struct sf_dataset *ds, const struct sf_config *cfg,
		      const struct sf_part_plan *plan, struct sf_err *e)
{
	int r;

	copy_config(ds, cfg);
	r = sf__dataset_mix_prepare(ds, cfg, e);
	if (r >= 0)
		r = open_sources(ds, cfg, plan, e);
	if (r >= 0 && ds->n_token_files)
		r = sf__file_cache_create(2 * ds->n_token_files, 0, map_token_file, ds,
					  &ds->token_maps, e);
	if (r >= 0)
		r = load_tokenizer(ds, cfg, e);
	if (r >= 0)
		r = choose_eot(ds, cfg, e);
	if (r >= 0)
		r = choose_dtype(ds, cfg, e);
	if (r >= 0)
		r = check_eot(ds, cfg, e);
	return r;
}

/*
 * The windows and, for a finite run, the steps: a run ends with the last full global
 * batch, so every rank stops at the same step. A finite run of no step is refused: it
 * would deliver nothing and look like a job that ended.
 */
static int plan_steps(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	const uint64_t G = (uint64_t)cfg->batch_size * cfg->world_size;

	if (ds->n_tokens < (uint64_t)cfg->seq_len + 1)
		return sf__err(e, SF_E_SOURCE, "the sources hold %llu tokens, fewer than one "
			       "sequence of %u%s%s", (unsigned long long)ds->n_tokens,
			       cfg->seq_len + 1, ds->first_skip[0] ? "; the first skipped: " : "",
			       ds->first_skip);
	ds->n_windows = (ds->n_tokens - 1) / cfg->seq_len;
	if (!cfg->epochs) {
		ds->n_steps = UINT64_MAX;
		return 0;
	}
	/* In 128 bits: epochs (up to 2^32 - 1) x windows can pass 2^64, which wrapped to a
	 * run of no step. A count past 2^64 - 2 is one no run reaches. */
	__extension__ unsigned __int128 steps = (unsigned __int128)cfg->epochs * ds->n_windows / G;

	if (!steps)
		return sf__err(e, SF_E_CONFIG,
			       "epochs: %llu epoch%s of %llu windows of %u tokens fill%s no global "
			       "batch of %llu samples (batch_size x world_size): the run would deliver "
			       "nothing; raise epochs, lower the batch, or give 0 for no end",
			       (unsigned long long)cfg->epochs, cfg->epochs == 1 ? "" : "s",
			       (unsigned long long)ds->n_windows, cfg->seq_len,
			       cfg->epochs == 1 ? "s" : "", (unsigned long long)G);
	ds->n_steps = steps >= UINT64_MAX ? UINT64_MAX - 1 : (uint64_t)steps;
	return 0;
}

/* " (N as an int32)" for a 4-byte id that is negative as one (Megatron's int32 files hold
 * signed ids: -100 is a label mask written as a token), else "". */
static const char *signed_as(uint32_t v, uint32_t width)
{
	static _Thread_local char buf[40];

	if (width != 4 || v <= INT32_MAX)
		return "";
	snprintf(buf, sizeof(buf), " (%d as an int32)", (int)(int32_t)v);
	return buf;
}

/* The error for token `v`, the `k`-th of file `f`, at or above the job's id limit. */
static int id_refused(const struct sf_dataset *ds, const struct sf_token_file *f, uint64_t k,
		      uint32_t v, struct sf_err *e)
{
	const unsigned long long byte = f->tokens_off + k * f->width;

	if (ds->id_limit == SF_ID_LIMIT_INT32)
		return sf__err(e, SF_E_SOURCE,
			       "%s: byte %llu: token %u does not fit the arena's int32 (it would "
			       "read as %d)",
			       f->path, byte, v, (int32_t)v);
	return sf__err(e, SF_E_SOURCE,
		       "%s: byte %llu: token %u%s is outside the vocabulary of %u ids (tokenizer "
		       "%s): set tokenizer.encoding (or file) to the tokenizer the file was made "
		       "with",
		       f->path, byte, v, signed_as(v, f->width), ds->id_limit,
		       sf__tok_name(ds->tok));
}

/* Tokens of each pre-tokenized file that `check` holds to the vocabulary (run holds all),
 * and of all of them together, so that a corpus of many files is checked in seconds. */
#define CHECK_HEAD_TOKENS 65536u
#define CHECK_ALL_TOKENS  (UINT64_C(1) << 24)

/*
 * The first CHECK_HEAD_TOKENS ids of each token file against the job's vocabulary, so that a
 * job naming another encoding than its files were made with fails in `check`, not in the
 * first batch of `run`.
 */
struct ids_head {
	const struct sf_dataset *ds;
	struct sf_err *e;
};

static int check_ids_head_of(void *arg)
{
	const struct sf_dataset *ds = ((struct ids_head *)arg)->ds;
	struct sf_err *e = ((struct ids_head *)arg)->e;
	uint64_t budget = CHECK_ALL_TOKENS;

	for (uint32_t i = 0; i < ds->n_token_files && budget; i++) {
		const struct sf_token_file *f = &ds->token_files[i];
		uint64_t n = f->n_tokens < CHECK_HEAD_TOKENS ? f->n_tokens : CHECK_HEAD_TOKENS;
		struct sf_token_view v;
		int r = sf__tokens_view(ds, i, 0, &v, e);

		if (r < 0)
			return r;
		SF_TEST_POINT(SF_TP_TOKENS_MAPPED);
		n = n < budget ? n : budget;
		budget -= n;
		for (uint64_t k = 0; k < n; k++) {
			uint32_t id = 0;

			memcpy(&id, v.tokens + k * f->width, f->width); /* little-endian */
			if (id >= ds->id_limit)
				return id_refused(ds, f, k, id, e);
		}
	}
	return 0;
}

/* A file truncated since it was opened faults here: named, where `check` died of it. */
static int check_ids_head(const struct sf_dataset *ds, struct sf_err *e)
{
	struct ids_head h = {ds, e};
	void *fault;
	int r = sf__sigbus_call(check_ids_head_of, &h, &fault, e);

	return fault ? sf__dataset_fault(ds, fault, e) : r;
}

int sf__dataset_check(const struct sf_config *cfg, uint32_t *ret_token_bytes, struct sf_err *e)
{
	struct sf_dataset *ds = calloc(1, sizeof(*ds));
	int r;

	if (!ds)
		return sf__err(e, -ENOMEM, "out of memory");
	r = open_start(ds, cfg, NULL, e);
	if (r >= 0 && ds->id_limit)
		r = check_ids_head(ds, e);
	/* Tokens are counted here where no text is to be tokenized first. */
	if (r >= 0 && !ds->n_text_files)
		r = plan_steps(ds, cfg, e);
	if (r >= 0)
		*ret_token_bytes = ds->token_bytes;
	sf__dataset_close(ds);
	return r < 0 ? r : 0;
}

static int open_dataset(const struct sf_config *cfg, const struct sf_part_plan *plan, int sample,
			struct sf_dataset **ret_ds, struct sf_err *e);

int sf__dataset_open(const struct sf_config *cfg, struct sf_dataset **ret_ds, struct sf_err *e)
{
	return open_dataset(cfg, NULL, 1, ret_ds, e);
}

int sf__dataset_open_part(const struct sf_config *cfg, const struct sf_part_plan *plan,
			  struct sf_dataset **ret_ds, struct sf_err *e)
{
	return open_dataset(cfg, plan, 0, ret_ds, e);
}

/*
 * The config digest of the files opened. It is computed from the config, which lists and
 * stats the files again: a file added, removed or rewritten while the job listed, opened
 * and indexed them (minutes for a large corpus) gave a digest of other files than those
 * read, and a resume state of that run was taken by a run of the files digested, onto
 * another stream (a review). So the digest taken `before` the sources were listed must
 * be the one taken after.
 */
static int settle_digest(struct sf_dataset *ds, const struct sf_config *cfg, uint64_t before,
			 struct sf_err *e)
{
	ds->config_digest = sf__config_digest(cfg);
	if (ds->config_digest != before)
		return sf__err(e, SF_E_SOURCE,
			       "the sources changed while the job opened them (a file added, "
			       "removed, renamed or rewritten, or one the job wrote itself: its "
			       "index cache in a directory the sources name?): the files read and "
			       "the config digest, which a resume state is checked against, would "
			       "not agree; start it again once they stay as they are");
	return 0;
}

static int open_dataset(const struct sf_config *cfg, const struct sf_part_plan *plan, int sample,
			struct sf_dataset **ret_ds, struct sf_err *e)
{
	struct sf_dataset *ds;
	uint64_t digest;
	int r;

	if (!cfg->batch_size || !cfg->seq_len || !cfg->world_size || !cfg->local_ranks ||
	    cfg->rank_base + cfg->local_ranks > cfg->world_size)
		return sf__err(e, SF_E_CONFIG,
			       "batch size, sequence length and ranks must be positive, with "
			       "rank_base + local_ranks <= world_size");
	/* Before the sources are listed: settle_digest() compares. */
	digest = sf__config_digest(cfg);
	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return sf__err(e, -ENOMEM, "out of memory");
	r = open_start(ds, cfg, plan, e);
	if (r >= 0 && !sample && ds->n_token_files)
		r = sf__err(e, SF_E_CONFIG,
			    "%s: tokenize reads raw text sources (.txt, .jsonl); this file is "
			    "pre-tokenized",
			    ds->token_files[0].path);
	if (r >= 0 && ds->n_text_files)
		r = sf__text_build_index(ds, cfg, e);
	if (r < 0)
		goto fail;
	/* The chunks' places, now that their token counts are known. */
	sf__dataset_mix_layout(ds);
	/* What is only tokenized, never sampled, may hold less than a sequence. */
	if (!sample) {
		r = settle_digest(ds, cfg, digest, e);
		if (r < 0)
			goto fail;
		ds->stats.n_tokens = ds->n_tokens;
		ds->stats.token_bytes = ds->token_bytes;
		*ret_ds = ds;
		return 0;
	}
	r = plan_steps(ds, cfg, e);
	if (r < 0)
		goto fail;
	r = sf__dataset_mix_open(ds, cfg, e);
	if (r < 0)
		goto fail;
	if (ds->n_text_files) {
		r = sf__text_share_create(ds, e);
		if (r < 0)
			goto fail;
	}
	r = settle_digest(ds, cfg, digest, e);
	if (r < 0)
		goto fail;
	ds->stats.n_tokens = ds->n_tokens;
	ds->stats.n_windows = ds->n_windows;
	ds->stats.n_steps = ds->n_steps;
	ds->stats.token_bytes = ds->token_bytes;
	*ret_ds = ds;
	return 0;
fail:
	sf__dataset_close(ds);
	return r;
}

void sf__dataset_close(struct sf_dataset *ds)
{
	if (!ds)
		return;
	sf__file_cache_free(ds->token_maps);
	for (uint32_t i = 0; i < ds->n_token_files; i++)
		sf__token_file_close(&ds->token_files[i]);
	free(ds->token_files);
	sf__text_close(ds);
	sf__share_free(ds->share);
	sf__share_free(ds->heads);
	sf__tok_free(ds->tok);
	sf__dataset_mix_close(ds);
	free(ds);
}

void sf__dataset_stats(const struct sf_dataset *ds, struct sf_dataset_stats *ret_stats)
{
	*ret_stats = ds->stats;
}

const char *sf__dataset_first_skip(const struct sf_dataset *ds)
{
	return ds->first_skip;
}

const char *sf__dataset_note(const struct sf_dataset *ds)
{
	return ds->note;
}

int sf__dataset_reads(const struct sf_dataset *ds, uint64_t dev, uint64_t ino)
{
	for (uint32_t i = 0; i < ds->n_text_files; i++)
		if (ds->text_files[i].id.dev == dev && ds->text_files[i].id.ino == ino)
			return 1;
	for (uint32_t i = 0; i < ds->n_token_files; i++) {
		const struct sf_token_file *f = &ds->token_files[i];
		struct stat st;
		char *idx;
		int same;

		if (f->id.dev == dev && f->id.ino == ino)
			return 1;
		if (f->format != SF_FMT_MEGATRON)
			continue;
		idx = sf__megatron_file(f->path, ".idx");
		same = idx && stat(idx, &st) == 0 && (uint64_t)st.st_dev == dev &&
		       (uint64_t)st.st_ino == ino;
		free(idx);
		if (same)
			return 1;
	}
	return 0;
}

struct check_text {
	const struct sf_dataset *ds;
	struct sf_err *e;
};

static int check_text_file(void *arg, uint32_t i)
{
	struct check_text *t = arg;
	const struct sf_text_file *f = &t->ds->text_files[i];

	return sf__file_id_check(f->path, &f->id, t->e);
}

static int check_token_file(void *arg, uint32_t i)
{
	struct check_text *t = arg;
	const struct sf_token_file *f = &t->ds->token_files[i / 2];

	return i % 2 ? sf__file_id_check(f->idx_path, &f->idx_id, t->e)
		     : sf__file_id_check(f->path, &f->id, t->e);
}

/* Files checked per call beside the mapped ones (sf__dataset_check_files()). */
#define CHECK_ROUND 1024u

/*
 * The files this process has mapped are checked at each call, and CHECK_ROUND others in
 * turn, so that every file is checked in a round of calls while a corpus of a million
 * files costs no million stat() calls every few seconds; a file is also checked whenever
 * it is mapped (its identity against the one recorded at open), and a text file before
 * each of its chunks is tokenized.
 */
int sf__dataset_check_files(const struct sf_dataset *ds, struct sf_err *e)
{
	struct check_text t = {.ds = ds, .e = e};
	int r = sf__file_cache_each(ds->token_maps, check_token_file, &t);

	if (!r)
		r = sf__file_cache_each(ds->text_maps, check_text_file, &t);
	if (!r && ds->token_maps) {
		uint32_t n = 2 * ds->n_token_files < 2 * CHECK_ROUND ? 2 * ds->n_token_files
								     : 2 * CHECK_ROUND;
		uint32_t first = sf__file_cache_rotate(ds->token_maps, n);

		for (uint32_t k = 0; k < n && !r; k++) {
			uint32_t i = (uint32_t)(((uint64_t)first + k) % (2 * ds->n_token_files));

			if (i % 2 == 0 || ds->token_files[i / 2].idx_path)
				r = check_token_file(&t, i);
		}
	}
	if (!r && ds->text_maps) {
		uint32_t n = ds->n_text_files < CHECK_ROUND ? ds->n_text_files : CHECK_ROUND;
		uint32_t first = sf__file_cache_rotate(ds->text_maps, n);

		for (uint32_t k = 0; k < n && !r; k++)
			r = check_text_file(&t,
					    (uint32_t)(((uint64_t)first + k) % ds->n_text_files));
	}
	return r;
}

int sf__dataset_fault(const struct sf_dataset *ds, const void *addr, struct sf_err *e)
{
	const char *path = NULL;
	uint64_t off = 0;

	uint32_t k;

	if (sf__file_cache_find(ds->token_maps, addr, &k, &off))
		path = k % 2 ? ds->token_files[k / 2].idx_path : ds->token_files[k / 2].path;
	if (!path) {
		uint32_t i;

		if (sf__file_cache_find(ds->text_maps, addr, &i, &off))
			path = ds->text_files[i].path;
	}
	if (!path)
		return sf__err(e, -EFAULT, "SIGBUS at address %p, outside every source", addr);
	return sf__sigbus_truncated(path, (unsigned long long)off, e);
}

uint64_t sf__dataset_payload_bytes(const struct sf_dataset *ds)
{
	if (ds->mix)
		return sf__sources_offset(ds->batch, ds->seq_len + 1, ds->token_bytes,
					  ds->doc_starts) +
		       (uint64_t)ds->batch * sizeof(int32_t);
	if (!ds->doc_starts)
		return (uint64_t)ds->batch * (ds->seq_len + 1) * ds->token_bytes;
	return sf__doc_starts_offset(ds->batch, ds->seq_len + 1, ds->token_bytes) +
	       (uint64_t)ds->batch * ds->doc_starts * sizeof(uint32_t);
}

int sf__dataset_geometry(const struct sf_dataset *ds, const struct sf_config *cfg,
			 struct sf_geometry *ret_geo, struct sf_err *e)
{
	struct sf_geometry g = {0};

	if (sf__dataset_payload_bytes(ds) > UINT32_MAX)
		return sf__err(e, SF_E_CONFIG, "a batch of %llu bytes exceeds 4 GiB",
			       (unsigned long long)sf__dataset_payload_bytes(ds));
	g.ranks = cfg->local_ranks;
	g.slots_per_rank = cfg->slots_per_rank;
	g.max_producers = cfg->producers;
	g.batch = cfg->batch_size;
	g.seq_tokens = cfg->seq_len + 1;
	g.token_bytes = ds->token_bytes;
	g.doc_starts_per_seq = cfg->doc_starts;
	g.world_size = cfg->world_size;
	g.rank_base = cfg->rank_base;
	g.flags = (cfg->checksum ? SF_ARENA_F_CHECKSUM : 0) |
		  (cfg->doc_starts ? SF_ARENA_F_DOC_STARTS : 0) |
		  (cfg->hugepages ? SF_ARENA_F_HUGEPAGES : 0) | (ds->mix ? SF_ARENA_F_SOURCES : 0) |
		  (cfg->device == SF_DEVICE_CPU	   ? SF_ARENA_F_DEVICE_CPU
		   : cfg->device == SF_DEVICE_CUDA ? SF_ARENA_F_DEVICE_CUDA
						   : 0);
	g.config_digest = ds->config_digest;
	g.samples_per_epoch = ds->n_windows;
	*ret_geo = g;
	return 0;
}

/*
 * Global sample k: the global token offset of its first token; its source in
 * *ret_source (0 without a mixture); and for a raw text window the placement key of its
 * chunk in the shared cache in *ret_key (UINT64_MAX otherwise: placed by chunk index).
 */
static uint64_t locate(struct sf_builder *b, uint64_t k, uint32_t *ret_source, uint64_t *ret_key)
{
	const struct sf_dataset *ds = b->ds;
	struct sf_perm p;
	uint64_t key;

	*ret_source = 0;
	*ret_key = UINT64_MAX;
	if (ds->mix) {
		uint64_t j, off;
		uint32_t i = sf__dataset_mix_pick(ds, k, &j);

		*ret_source = i;
		if (!b->orders || !b->orders[i])
			return sf__dataset_mix_offset(ds, i, j);
		off = sf__text_order_offset(b->orders[i], j, &key);
		*ret_key = sf__dataset_share_key(ds, ds->mix_sources[i].text_slot, key);
		return off;
	}
	if (ds->mode == SF_SAMPLE_RANDOM)
		return sf__random_below(ds->seed, k, ds->n_tokens - ds->seq_len);
	if (b->orders)
		return sf__text_order_offset(b->orders[0], k, ret_key);
	sf__perm_init(&p, ds->n_windows, ds->seed, k / ds->n_windows, 0);
	return sf__perm_apply(&p, k % ds->n_windows) * ds->seq_len;
}

uint64_t sf__builder_sample_offset(struct sf_builder *b, uint64_t k)
{
	uint32_t source;
	uint64_t key;

	return locate(b, k, &source, &key);
}

/* Whether source `source` (0 without a mixture) of the dataset is raw text. */
static int is_text(const struct sf_dataset *ds, uint32_t source)
{
	return ds->mix_sources ? ds->mix_sources[source].text_slot != UINT32_MAX
			       : ds->n_text_files > 0;
}

/*
 * The largest of `n` ids of `width` bytes at `p`, SSE2 where it is: neither unsigned
 * max exists there, so ids are biased by the sign bit into signed ones (16-bit: signed
 * max; 32-bit: signed compare and select) and the bias is undone at the end. A batch of
 * 16 x 1025 uint16 ids is about 2,000 vector steps over memory just written.
 */
static uint32_t max_id(const unsigned char *p, size_t n, uint32_t width)
{
	uint32_t m = 0;
	size_t i = 0;

#ifdef __SSE2__
	if (width == 2) {
		const __m128i bias = _mm_set1_epi16((short)0x8000);
		__m128i acc = bias; /* 0 biased */
		uint16_t lanes[8];

		for (; i + 8 <= n; i += 8)
			acc = _mm_max_epi16(
				acc,
				_mm_xor_si128(
					_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i)),
					bias));
		_mm_storeu_si128((__m128i *)(void *)lanes, _mm_xor_si128(acc, bias));
		for (int k = 0; k < 8; k++)
			m = lanes[k] > m ? lanes[k] : m;
	} else {
		const __m128i bias = _mm_set1_epi32((int)0x80000000u);
		__m128i acc = bias;
		uint32_t lanes[4];

		for (; i + 4 <= n; i += 4) {
			__m128i v = _mm_xor_si128(
				_mm_loadu_si128((const __m128i *)(const void *)(p + 4 * i)), bias);
			__m128i gt = _mm_cmpgt_epi32(v, acc);

			acc = _mm_or_si128(_mm_and_si128(gt, v), _mm_andnot_si128(gt, acc));
		}
		_mm_storeu_si128((__m128i *)(void *)lanes, _mm_xor_si128(acc, bias));
		for (int k = 0; k < 4; k++)
			m = lanes[k] > m ? lanes[k] : m;
	}
#endif
	for (; i < n; i++) {
		uint32_t v = 0;

		memcpy(&v, p + (size_t)width * i, width); /* little-endian */
		m = v > m ? v : m;
	}
	return m;
}

/*
 * An id of the `n` rows at `p` (samples first..) is outside the vocabulary: find the
 * first, and name the file and byte it came from.
 */
static int id_out_of_range(struct sf_builder *b, uint64_t first, const unsigned char *p, uint64_t n,
			   struct sf_err *e)
{
	const struct sf_dataset *ds = b->ds;
	const uint32_t L = ds->seq_len + 1, tb = ds->token_bytes;

	for (uint64_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < L; j++) {
			uint32_t v = 0;
			uint64_t off;
			const struct sf_token_file *f;

			memcpy(&v, p + (i * L + j) * tb, tb);
			if (v < ds->id_limit)
				continue;
			off = sf__builder_sample_offset(b, first + i) + j;
			f = &ds->token_files[sf__tokens_find_file(ds, off)];
			return id_refused(ds, f, off - f->start, v, e);
		}
	return sf__err(e, SF_E_SOURCE, "a token outside the vocabulary of %u ids", ds->id_limit);
}

/*
 * Map the token files ahead, as many as the process's file cache holds (a mapping reads
 * nothing until a row is copied): a job whose files all fit then maps nothing while it
 * builds batches. A file that cannot be mapped now fails later, when a row reads it.
 */
static void premap_token_files(const struct sf_dataset *ds)
{
	uint32_t cap, used = 0;
	struct sf_err ignored;

	if (!ds->token_maps)
		return;
	sf__file_cache_open_count(ds->token_maps, &cap);
	for (uint32_t i = 0; i < ds->n_token_files; i++) {
		const int with_idx = ds->doc_starts && ds->token_files[i].idx_path;
		struct sf_token_view v;

		used += with_idx ? 2 : 1;
		if (used > cap)
			break;
		sf__tokens_view(ds, i, with_idx, &v, &ignored);
	}
}

/* The windows order of each raw text span: every raw text source of a mixture, or the
 * whole stream. */
static int create_orders(struct sf_builder *b, struct sf_err *e)
{
	const struct sf_dataset *ds = b->ds;
	const uint32_t n = ds->mix ? ds->n_sources : 1;

	b->orders = calloc(n, sizeof(*b->orders));
	if (!b->orders)
		return sf__err(e, -ENOMEM, "out of memory");
	b->n_orders = n;
	for (uint32_t i = 0; i < n; i++) {
		struct sf_text_span span = {0, ds->n_chunks, 0, ds->n_windows, ds->seed};
		int r;

		if (ds->mix) {
			const struct sf_mix_source *m = &ds->mix_sources[i];

			if (m->text_slot == UINT32_MAX)
				continue;
			span = (struct sf_text_span){m->first_chunk, m->n_chunks, m->start,
						     m->n_windows, m->seed};
		}
		r = sf__text_order_create(ds, &span, &b->orders[i], e);
		if (r < 0)
			return r;
	}
	return 0;
}

int sf__builder_create(const struct sf_dataset *ds, struct sf_builder **ret_b, struct sf_err *e)
{
	struct sf_builder *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return sf__err(e, -ENOMEM, "out of memory");
	b->ds = ds;
	b->epoch_checked = UINT64_MAX;
	if (ds->n_text_files) {
		b->deferred = malloc(ds->batch * sizeof(*b->deferred));
		if (!b->deferred) {
			free(b);
			return sf__err(e, -ENOMEM, "out of memory");
		}
		r = sf__text_cache_create(ds, &b->text, e);
		if (r >= 0 && ds->mode == SF_SAMPLE_WINDOWS)
			r = create_orders(b, e);
		if (r < 0) {
			sf__builder_free(b);
			return r;
		}
	}
	premap_token_files(ds);
	*ret_b = b;
	return 0;
}

void sf__builder_free(struct sf_builder *b)
{
	if (!b)
		return;
	for (uint32_t i = 0; i < b->n_orders; i++)
		sf__text_order_free(b->orders[i]);
	free(b->orders);
	sf__text_cache_free(b->text);
	free(b->deferred);
	free(b);
}

void sf__builder_counters(const struct sf_builder *b, uint64_t *ret_tokens_out,
			  uint64_t *ret_tokens_encoded)
{
	*ret_tokens_out = b->tokens_out;
	*ret_tokens_encoded = b->text ? sf__text_cache_encoded(b->text) : 0;
}

/*
 * Before waiting for a chunk that another producer is tokenizing, tokenize the first
 * free chunk of the batches after this one, up to P of them (the ones that the producers
 * claim next): work those batches need anyway, done while the other producer finishes,
 * rather than a sleep and a wake-up. One chunk at most, so that this batch is not held
 * back; chunks already cached or being tokenized are passed over. The shared cache holds
 * the chunks of the batches in flight and of these (sf__text_share_create()).
 */
static void work_ahead(struct sf_builder *b, uint64_t first)
{
	const struct sf_dataset *ds = b->ds;
	const uint64_t B = ds->batch, G = B * ds->world_size;
	const uint64_t end = ds->n_steps == UINT64_MAX ? UINT64_MAX : ds->n_steps * G;
	uint64_t last = UINT64_MAX;

	for (uint64_t k = first + B; k < first + (ds->producers + 1) * B && k < end; k++) {
		uint32_t source;
		uint64_t key, off = locate(b, k, &source, &key), chunk;

		if (!is_text(ds, source))
			continue;
		chunk = sf__text_find_chunk(ds, off);
		if (chunk == last)
			continue;
		last = chunk;
		if (sf__text_work_ahead(b->text, chunk, key))
			return;
	}
}

/*
 * The rows of a batch with raw text, in two passes. The first takes every row whose chunk
 * is cached or free to tokenize, and leaves the rows whose chunk another producer is
 * tokenizing right now; the second comes back to them after working ahead (above), by
 * when that producer has usually finished, and waits if it must. Two producers on
 * neighbouring batches thus split their boundary chunk instead of tokenizing it twice.
 * Rows land at their own positions, so the order of work never shows in the payload.
 * The rows of a mixture's pre-tokenized sources are copied in the first pass, their ids
 * checked against the vocabulary row by row; `sources` (a mixture's) gets every row's.
 */
static int fill_text_rows(struct sf_builder *b, uint64_t first, unsigned char *p, uint32_t *starts,
			  int32_t *sources, struct sf_err *e)
{
	const struct sf_dataset *ds = b->ds;
	const uint32_t L = ds->seq_len + 1;
	const size_t row_bytes = (size_t)L * ds->token_bytes;
	uint32_t n_deferred = 0;

	for (int pass = 0; pass < 2; pass++) {
		uint32_t n = pass ? n_deferred : ds->batch;

		if (pass && n_deferred && ds->mode == SF_SAMPLE_WINDOWS)
			work_ahead(b, first);

		for (uint32_t j = 0; j < n; j++) {
			uint32_t i = pass ? b->deferred[j] : j, source;
			uint32_t *row_starts = starts ? starts + (size_t)i * ds->doc_starts : NULL;
			unsigned char *row = p + i * row_bytes;
			uint64_t key, off = locate(b, first + i, &source, &key);
			int r;

			if (sources)
				sources[i] = (int32_t)source;
			if (!is_text(ds, source)) {
				r = sf__tokens_read_row(ds, off, row, row_starts, e);
				if (r < 0)
					return r;
				/* Never an id the model has no embedding for. */
				if (ds->id_limit && max_id(row, L, ds->token_bytes) >= ds->id_limit)
					return id_out_of_range(b, first + i, row, 1, e);
				continue;
			}
			r = sf__text_read_row(b->text, off, key, pass ? SHARE_WAIT_NS : 0, row,
					      row_starts, e);
			if (r < 0)
				return r;
			sf__producer_progress(row_bytes);
			if (r == SF_TEXT_DEFERRED)
				b->deferred[n_deferred++] = i;
		}
	}
	return 0;
}

int sf__builder_fill(struct sf_builder *b, uint32_t rank, uint64_t step, void *payload,
		     uint32_t *ret_len, uint64_t *ret_first_sample, struct sf_err *e)
{
	const struct sf_dataset *ds = b->ds;
	const uint64_t B = ds->batch, G = B * ds->world_size;
	const size_t row_bytes = (size_t)(ds->seq_len + 1) * ds->token_bytes;
	const uint64_t doc_off = sf__doc_starts_offset(B, ds->seq_len + 1, ds->token_bytes);
	unsigned char *p = payload;
	uint32_t *starts = ds->doc_starts ? (uint32_t *)(p + doc_off) : NULL;
	const uint64_t src_off =
		sf__sources_offset(B, ds->seq_len + 1, ds->token_bytes, ds->doc_starts);
	int32_t *sources = ds->mix ? (int32_t *)(p + src_off) : NULL;
	uint64_t first = step * G + rank * B;

	if (rank >= ds->world_size)
		return sf__err(e, SF_E_RANGE, "rank %u out of range (world size %u)", rank,
			       ds->world_size);
	if (step >= ds->n_steps) {
		/* An end marker: it carries the job's samples, so that a rank that sought
		 * past the end can say where the end is. */
		*ret_len = 0;
		*ret_first_sample = ds->n_steps * G;
		return 0;
	}
	/* Every file again at the first batch of each epoch this builder reaches. */
	if (first / ds->n_windows != b->epoch_checked) {
		int r = sf__dataset_check_files(ds, e);

		if (r < 0)
			return r;
		b->epoch_checked = first / ds->n_windows;
	}
	if (ds->n_text_files) {
		int r = fill_text_rows(b, first, p, starts, sources, e);

		if (r < 0)
			return r;
	} else {
		for (uint64_t i = 0; i < B; i++) {
			uint32_t source;
			uint64_t key, off = locate(b, first + i, &source, &key);
			uint32_t *row_starts = starts ? starts + i * ds->doc_starts : NULL;
			int r = sf__tokens_read_row(ds, off, p + i * row_bytes, row_starts, e);

			if (r < 0)
				return r;
			if (sources)
				sources[i] = (int32_t)source;
		}
		/* Never an id the model has no embedding for. */
		if (ds->id_limit &&
		    max_id(p, B * (ds->seq_len + 1), ds->token_bytes) >= ds->id_limit)
			return id_out_of_range(b, first, p, B, e);
	}
	/* The gap that aligns the document starts is part of the payload and its checksum:
	 * zero it, so the bytes of a batch depend on nothing but (rank, step). */
	if (starts)
		memset(p + B * row_bytes, 0, doc_off - B * row_bytes);
	if (sources) {
		uint64_t end =
			starts ? doc_off + B * ds->doc_starts * sizeof(uint32_t) : B * row_bytes;

		memset(p + end, 0, src_off - end);
	}
	b->tokens_out += B * (ds->seq_len + 1);
	*ret_len = (uint32_t)sf__dataset_payload_bytes(ds);
	*ret_first_sample = first;
	return 0;
}
