/*
 * `shmfeed tokenize CONFIG -o PREFIX [--shard I/N] [--tokenizer FILE] [--set KEY=VALUE ...] [-q]`:
 * tokenize the raw text sources of a job with all its producer processes and write them as a
 * Megatron PREFIX.bin / PREFIX.idx pair, showing progress (bytes, documents, tokens/s,
 * ETA). With --shard, only part I of N (producer/part_plan.h), as
 * PREFIX_IIIII-of-NNNNN.{bin,idx,json}; `shmfeed tokenize --merge PART... -o PREFIX`
 * checks the parts and merges them into the pair one run over the whole corpus writes
 * (producer/megatron_parts.h).
 * --tokenizer FILE stands for --set tokenizer.file=FILE with the job's encoding set aside.
 */
#include <errno.h>
#include <glob.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/config.h"
#include "common/io.h"
#include "common/log.h"
#include "producer/megatron_parts.h"
#include "producer/part_plan.h"
#include "producer/producer.h"

#define USAGE                                                                                      \
	"usage: shmfeed tokenize CONFIG -o PREFIX [--shard I/N] [--tokenizer FILE] "               \
	"[--set KEY=VALUE ...] [-q]\n"                                                             \
	"       shmfeed tokenize --merge PART... -o PREFIX [-q]\n"

struct progress_state {
	int tty;
	int quiet;
	uint64_t last_line_ns;
};

static void show_progress(const struct sf_tokenize_progress *p, void *arg)
{
	struct progress_state *ps = arg;
	double secs = (double)p->elapsed_ns / 1e9;
	double rate = secs > 0 ? (double)p->tokens / secs : 0;
	double frac = p->total_bytes ? (double)p->bytes / (double)p->total_bytes : 1;
	double eta = frac > 0 ? secs / frac - secs : 0;

	if (ps->quiet)
		return;
	/* On a terminal the line is redrawn in place; in a log, one line every 5 s. */
	if (!ps->tty && !p->done && p->elapsed_ns - ps->last_line_ns < 5000000000ull)
		return;
	ps->last_line_ns = p->elapsed_ns;
	fprintf(stderr,
		"%sshmfeed: tokenize: %.1f of %.1f MB (%.0f%%), %llu docs, %llu tokens, "
		"%.2f M tokens/s, %s %d:%02d%s",
		ps->tty ? "\r" : "", (double)p->bytes / 1e6, (double)p->total_bytes / 1e6,
		frac * 100, (unsigned long long)p->docs, (unsigned long long)p->tokens, rate / 1e6,
		p->done ? "took" : "ETA", (int)((p->done ? secs : eta) / 60),
		(int)(p->done ? secs : eta) % 60, ps->tty && !p->done ? "" : "\n");
}

/* "I/N" with I < N <= SF_MAX_PARTS. */
static int parse_shard(const char *s, uint32_t *ret_part, uint32_t *ret_n)
{
	unsigned long part, n;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	part = strtoul(s, &end, 10);
	if (*end != '/' || end[1] < '0' || end[1] > '9')
		return -1;
	n = strtoul(end + 1, &end, 10);
	if (*end || n == 0 || n > SF_MAX_PARTS || part >= n)
		return -1;
	*ret_part = (uint32_t)part;
	*ret_n = (uint32_t)n;
	return 0;
}

/* Whether -o PREFIX ends in a name: "DIR/", "", "." and ".." would write hidden files
 * (DIR/.bin), which a directory source skips. */
static int names_files(const char *prefix)
{
	const char *slash = strrchr(prefix, '/'), *name = slash ? slash + 1 : prefix;

	return *name && strcmp(name, ".") && strcmp(name, "..");
}

/* The directory the -o PREFIX files go to, said missing before any work (the files are
 * made there at the start, and the message named PREFIX.bin.tmp). Returns 1 if missing. */
static int out_dir_missing(const char *prefix)
{
	char dir[4096];
	int r = sf__parent_dir_check(prefix, dir, sizeof(dir));

	if (r == -ENOTDIR)
		sf__log_error("-o %s: %s is not a directory", prefix, dir);
	else if (r < 0)
		sf__log_error("-o %s: the directory %s does not exist; make it first (mkdir -p %s)",
			      prefix, dir, dir);
	return r < 0;
}

/*
 * Whether a name the run writes (PREFIX.bin, .idx, a part's .json) is a directory, which
 * the output would not replace: said before any tokenizing, where the run failed at its
 * end (a directory was moved aside then, a review).
 */
static int out_is_a_directory(const char *prefix, bool part)
{
	static const char *const ext[] = {".bin", ".idx", ".json"};
	char path[4200];
	struct stat st;

	for (size_t i = 0; i < (part ? 3u : 2u); i++) {
		snprintf(path, sizeof(path), "%s%s", prefix, ext[i]);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
			sf__log_error("-o %s: %s is a directory, which the output would replace; "
				      "choose another -o",
				      prefix, path);
			return 1;
		}
	}
	return 0;
}

/*
 * What a run stopped by a signal removes (Ctrl-C, SIGTERM from scancel, SIGHUP): its
 * temporary files and its lock; an earlier run's outputs stay. They were left behind, a
 * .bin.tmp of the whole corpus's size among them.
 */
static char doomed[4][4300];

static void on_stop(int sig)
{
	for (size_t i = 0; i < sizeof(doomed) / sizeof(doomed[0]); i++)
		if (doomed[i][0])
			unlink(doomed[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * From now on a stop signal removes PREFIX's temporary files and `lock` (held). A signal
 * the run was started ignoring stays ignored: `nohup` (SIGHUP), a shell's `&` without job
 * control (SIGINT, SIGQUIT). Catching them made a terminal that closed, or a Ctrl-C meant
 * for the script in front, end such a run and remove its output.
 */
static void remove_on_stop(const char *prefix, const char *lock)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa = {.sa_handler = on_stop}, old;

	snprintf(doomed[0], sizeof(doomed[0]), "%s.bin.tmp", prefix);
	snprintf(doomed[1], sizeof(doomed[1]), "%s.idx.tmp", prefix);
	snprintf(doomed[2], sizeof(doomed[2]), "%s.json.tmp", prefix);
	snprintf(doomed[3], sizeof(doomed[3]), "%s", lock);
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&sa.sa_mask, sigs[i]);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
}

/*
 * Hold PREFIX.lock while PREFIX's files are written: a second run into the same prefix
 * (two jobs of an array given the same index) is refused before it writes. Without it,
 * the two truncated each other's temporary files, and one could exit 0 over a .bin of
 * zeros.
 * Returns the lock's descriptor, or -1 when refused (said).
 */
static int lock_output(const char *prefix, char *lock, size_t len)
{
	int fd;

	snprintf(lock, len, "%s.lock", prefix);
	fd = sf__path_lock(lock);
	if (fd == -EBUSY)
		sf__log_error("%s: another `shmfeed tokenize` is writing it (it holds %s)", prefix,
			      lock);
	else if (fd == -ENOTEMPTY)
		sf__log_error("%s: the file is there and is not a lock file of shmfeed's; "
			      "remove it or choose another -o",
			      lock);
	else if (fd < 0)
		sf__log_error("%s: cannot create: %s", lock, strerror(-fd));
	return fd < 0 ? -1 : fd;
}

/*
 * Whether file `out` is one that a source of `cfg` lists. A part's dataset holds only the
 * files of its own range: a part's output could replace a file of another part's.
 */
static bool listed(const struct sf_config *cfg, const struct stat *out)
{
	bool found = false;

	for (uint32_t s = 0; s < cfg->n_sources && !found; s++) {
		struct sf_err ignored = {0};
		char **paths;
		size_t n;
		struct stat st;

		if (sf__source_expand(&cfg->sources[s], &paths, &n, &ignored) < 0)
			continue;
		for (size_t i = 0; i < n; i++) {
			found |= stat(paths[i], &st) == 0 && st.st_dev == out->st_dev &&
				 st.st_ino == out->st_ino;
			free(paths[i]);
		}
		free(paths);
	}
	return found;
}

/*
 * Whether a file the run writes (PREFIX.bin, .idx, their .tmp, its lock, and a part's
 * .json) is already there as one of its inputs: the job file, or a file of its sources (a
 * killed run's lock or temporary files in a directory the job reads; for a part, of any
 * part's range). Said.
 */
static int output_is_input(const char *prefix, int part, const struct sf_config *c,
			   const struct sf_dataset *ds)
{
	static const char *const ext[] = {".lock",    ".bin",  ".idx",	   ".bin.tmp",
					  ".idx.tmp", ".json", ".json.tmp"};
	struct stat out, cfg;
	char path[4200];

	for (size_t i = 0; i < (part ? 7u : 5u); i++) {
		snprintf(path, sizeof(path), "%s%s", prefix, ext[i]);
		if (stat(path, &out) < 0)
			continue;
		if ((c->path && stat(c->path, &cfg) == 0 && cfg.st_dev == out.st_dev &&
		     cfg.st_ino == out.st_ino) ||
		    sf__dataset_reads(ds, (uint64_t)out.st_dev, (uint64_t)out.st_ino) ||
		    (part && listed(c, &out))) {
			sf__log_error("-o %s: %s is an input of this job, which the output would "
				      "replace; choose another -o",
				      prefix, path);
			return 1;
		}
	}
	return 0;
}

/*
 * "tokenizer.file=PATH" for the --set parser, PATH as a double-quoted YAML scalar, so that
 * the name is taken as given (`tok #1.tiktoken` lost its " #1" as a comment, `null` and
 * `[v2].tiktoken` were read as YAML; a review). NULL when out of memory.
 */
static char *file_override(const char *path)
{
	size_t n = strlen(path), k = 0;
	char *out = malloc(sizeof("tokenizer.file=\"\"") + 4 * n);

	if (!out)
		return NULL;
	k = (size_t)sprintf(out, "tokenizer.file=\"");
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if (*p == '"' || *p == '\\')
			k += (size_t)sprintf(out + k, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			k += (size_t)sprintf(out + k, "\\x%02x", *p);
		else
			out[k++] = (char)*p;
	}
	strcpy(out + k, "\"");
	return out;
}

/* Whether `arg` names a file, or is a part's prefix (PREFIX.json is there). */
static bool names_a_part(const char *arg)
{
	char json[4200];

	return access(arg, F_OK) == 0 ||
	       ((size_t)snprintf(json, sizeof(json), "%s.json", arg) < sizeof(json) &&
		access(json, F_OK) == 0);
}

/*
 * The parts named: each argument as given, or, where it names no file nor part and holds
 * a glob character, the files its pattern matches. A quoted `'out/corpus_*'` is expanded here:
 * the shell's expansion of 100,000 parts (300,000 paths) passes the kernel's limit on a
 * command line ("Argument list too long": a review). glob_t's lists are kept in `gs`.
 */
static int expand_parts(char **args, size_t n, glob_t *gs, char ***ret, size_t *ret_n)
{
	size_t total = 0, k = 0;
	char **out;

	for (size_t i = 0; i < n; i++) {
		if (!strpbrk(args[i], "*?[") || names_a_part(args[i])) {
			total++;
			continue;
		}
		if (glob(args[i], 0, NULL, &gs[i]) != 0) {
			sf__log_error("tokenize --merge: %s names no file and matches none",
				      args[i]);
			return -ENOENT;
		}
		total += gs[i].gl_pathc;
	}
	out = calloc(total + 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!gs[i].gl_pathc)
			out[k++] = args[i];
		for (size_t j = 0; j < gs[i].gl_pathc; j++)
			out[k++] = gs[i].gl_pathv[j];
	}
	*ret = out;
	*ret_n = k;
	return 0;
}

static int merge(char **args, size_t n_args, const char *prefix, int quiet)
{
	glob_t *gs = calloc(n_args, sizeof(*gs));
	struct sf_err e = {0};
	uint64_t docs, tokens;
	char **parts = NULL;
	size_t n_parts = 0;
	int r = gs ? expand_parts(args, n_args, gs, &parts, &n_parts) : -ENOMEM;

	if (r == 0)
		r = sf__parts_merge(parts, n_parts, prefix, &docs, &tokens, &e);
	else if (r == -ENOMEM)
		r = sf__err(&e, r, "out of memory");
	for (size_t i = 0; gs && i < n_args; i++)
		globfree(&gs[i]); /* a NULL list (not expanded) included */
	free(gs);
	free(parts);
	if (r < 0) {
		if (e.msg[0]) /* else said already */
			sf__log_error("merge into %s: %s", prefix, e.msg);
	} else if (!quiet) {
		sf__log_info("merged %d parts into %s.bin and %s.idx: %llu documents, "
			     "%llu tokens",
			     r, prefix, prefix, (unsigned long long)docs,
			     (unsigned long long)tokens);
	}
	return r < 0 ? 1 : 0;
}

int sf__cmd_tokenize(int argc, char **argv)
{
	const char *path = NULL, *prefix = NULL, *shard = NULL;
	/* --tokenizer's two words make four overrides: room for two per word. */
	const char **sets = calloc(2 * (size_t)argc, sizeof(*sets));
	char **positional = calloc((size_t)argc, sizeof(*positional));
	char part_prefix[4096], manifest[4200], lock[4200];
	int lock_fd;
	char *file_set = NULL;
	struct progress_state ps = {.tty = isatty(2)};
	struct sf_part_plan plan = {0};
	struct sf_dataset_stats st;
	struct sf_dataset *ds = NULL;
	struct sf_config cfg;
	struct sf_err e = {0};
	uint32_t n_sets = 0, part = 0, n_parts = 0;
	size_t n_positional = 0;
	char why[160];
	int r, merging = 0, bad = 0;

	/* A write past RLIMIT_FSIZE fails with EFBIG, said with its file, instead of the
	 * signal killing the run and its workers (nothing is exec'd from here). */
	signal(SIGXFSZ, SIG_IGN);

	if (!sets || !positional) {
		free(sets);
		free(positional);
		return 1;
	}
	sf__log_set_who("tokenize");
	for (int i = 1; i < argc && !bad; i++) {
		static const char *const valued[] = {"-o", "--set", "--shard", "--tokenizer"};

		for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++)
			if (!strcmp(argv[i], valued[k]) && i + 1 == argc)
				bad = snprintf(why, sizeof(why), "%s needs a value", argv[i]);
		if ((!strcmp(argv[i], "-o") && prefix) || (!strcmp(argv[i], "--shard") && shard) ||
		    (!strcmp(argv[i], "--tokenizer") && file_set))
			bad = snprintf(why, sizeof(why), "%s given twice", argv[i]);
		if (bad)
			break;
		/* An option given twice is refused (its first value would go unused). */
		if (!strcmp(argv[i], "-o") && i + 1 < argc && !prefix)
			prefix = argv[++i];
		else if (!strcmp(argv[i], "--set") && i + 1 < argc)
			sets[n_sets++] = argv[++i];
		else if (!strncmp(argv[i], "--set=", 6))
			sets[n_sets++] = argv[i] + 6;
		else if (!strcmp(argv[i], "--shard") && i + 1 < argc && !shard)
			shard = argv[++i];
		else if (!strcmp(argv[i], "--merge"))
			merging = 1;
		else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc && !file_set) {
			file_set = file_override(argv[++i]);
			if (!file_set) {
				free(sets);
				free(positional);
				return 1;
			}
			/* The job's encoding is set aside whole, with its vocabulary. */
			sets[n_sets++] = "tokenizer.encoding=null";
			sets[n_sets++] = "tokenizer.vocab=null";
			sets[n_sets++] = "tokenizer.vocab_dir=null";
			sets[n_sets++] = file_set;
		} else if (!strcmp(argv[i], "-q"))
			ps.quiet = 1;
		else if (argv[i][0] == '-')
			bad = snprintf(why, sizeof(why), "unknown option '%s'", argv[i]);
		else
			positional[n_positional++] = argv[i];
	}
	if (!bad && merging && (shard || n_sets))
		bad = snprintf(why, sizeof(why),
			       "--merge takes no %s: the parts are tokenized already",
			       shard ? "--shard" : "--set or --tokenizer");
	if (!bad && !prefix)
		bad = snprintf(why, sizeof(why), "-o PREFIX is missing");
	if (!bad && merging && !n_positional)
		bad = snprintf(why, sizeof(why), "--merge names no parts");
	if (!bad && !merging && !n_positional)
		bad = snprintf(why, sizeof(why), "CONFIG is missing");
	if (!bad && !merging && n_positional > 1)
		bad = snprintf(why, sizeof(why), "one CONFIG, not %zu (parts go with --merge)",
			       n_positional);
	if (bad)
		fprintf(stderr, "shmfeed: tokenize: %s\n", why);
	if (prefix && !bad && !names_files(prefix)) {
		fprintf(stderr,
			"shmfeed: tokenize: -o PREFIX: '%s' ends in no file name (PREFIX.bin and "
			"PREFIX.idx are written: -o DIR/NAME)\n",
			prefix);
		free(sets);
		free(file_set);
		free(positional);
		return 2;
	}
	/* `-o out/corpus.bin` wrote out/corpus.bin.bin and out/corpus.bin.idx. */
	if (prefix && !bad && strlen(prefix) > 4 &&
	    (!strcmp(prefix + strlen(prefix) - 4, ".bin") ||
	     !strcmp(prefix + strlen(prefix) - 4, ".idx"))) {
		fprintf(stderr,
			"shmfeed: tokenize: -o PREFIX: '%s' is a file name; PREFIX.bin and "
			"PREFIX.idx are written: -o %.*s\n",
			prefix, (int)strlen(prefix) - 4, prefix);
		free(sets);
		free(file_set);
		free(positional);
		return 2;
	}
	if (prefix && !bad && out_dir_missing(prefix)) {
		free(sets);
		free(file_set);
		free(positional);
		return 1;
	}
	if (merging) {
		free(sets);
		free(file_set);
		if (bad || !prefix || !n_positional || shard || n_sets) {
			fprintf(stderr, USAGE);
			free(positional);
			return 2;
		}
		lock_fd = out_is_a_directory(prefix, false)
				  ? -1
				  : lock_output(prefix, lock, sizeof(lock));
		if (lock_fd >= 0)
			remove_on_stop(prefix, lock);
		r = lock_fd < 0 ? 1 : merge(positional, n_positional, prefix, ps.quiet);
		if (lock_fd >= 0)
			sf__path_unlock(lock, lock_fd);
		free(positional);
		return r;
	}
	path = n_positional == 1 ? positional[0] : NULL;
	free(positional);
	if (bad || !path || !prefix) {
		fprintf(stderr, USAGE);
		free(sets);
		free(file_set);
		return 2;
	}
	if (shard && parse_shard(shard, &part, &n_parts) < 0) {
		fprintf(stderr,
			"shmfeed: tokenize: --shard %s: expected I/N with 0 <= I < N <= %u\n",
			shard, SF_MAX_PARTS);
		free(sets);
		free(file_set);
		return 2;
	}
	r = sf__config_load_overrides(path, sets, n_sets, &cfg, &e);
	free(sets);
	free(file_set);
	if (r < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	if (shard) {
		if (sf__part_prefix(prefix, part, n_parts, part_prefix, sizeof(part_prefix)) < 0) {
			sf__log_error("%s: the output prefix is too long", prefix);
			sf__config_free(&cfg);
			return 1;
		}
		prefix = part_prefix;
	}
	if (out_is_a_directory(prefix, shard)) {
		sf__config_free(&cfg);
		return 1;
	}
	/* The sources are listed before PREFIX.lock is made: a source that reads the
	 * output's directory listed the lock, and read it as a document. */
	if (shard) {
		r = sf__part_plan_make(&cfg, part, n_parts, &plan, &e);
		if (r >= 0)
			r = sf__dataset_open_part(&cfg, &plan, &ds, &e);
	} else {
		/* Tokenized, never sampled: a corpus of less than a sequence is written too. */
		r = sf__dataset_open_part(&cfg, NULL, &ds, &e);
	}
	/* Said once, by the first part of an array. */
	if (r >= 0 && part == 0) {
		sf__sources_warn_shared(&cfg);
		if (cfg.mixture)
			sf__log_error("warning: a mixture's weights and schedule are a job's way "
				      "of sampling: tokenize writes every document of every source "
				      "once, in the order of the sources. To keep the mixture, "
				      "tokenize each source to a prefix of its own and name those "
				      "as the job's sources, with their weights");
	}
	if (r < 0 || output_is_input(prefix, !!shard, &cfg, ds)) {
		if (r < 0)
			sf__log_error("%s", e.msg);
		sf__dataset_close(ds);
		sf__part_plan_free(&plan);
		sf__config_free(&cfg);
		return 1;
	}
	lock_fd = lock_output(prefix, lock, sizeof(lock));
	if (lock_fd < 0) {
		sf__dataset_close(ds);
		sf__part_plan_free(&plan);
		sf__config_free(&cfg);
		return 1;
	}
	remove_on_stop(prefix, lock);
	if (shard) {
		/* A manifest says its part is complete: an old one goes before the files it
		 * described are replaced. */
		snprintf(manifest, sizeof(manifest), "%s.json", part_prefix);
		unlink(manifest);
	}
	sf__dataset_stats(ds, &st);
	if (!ps.quiet && shard)
		sf__log_info("part %u of %u: bytes %llu to %llu of %llu in %llu files", part,
			     n_parts, (unsigned long long)plan.lo,
			     (unsigned long long)(plan.hi < plan.total_bytes ? plan.hi
									     : plan.total_bytes),
			     (unsigned long long)plan.total_bytes,
			     (unsigned long long)plan.n_files);
	if (!ps.quiet)
		sf__log_info("%llu file%s, %.1f MB of text, %llu chunk%s; chunk index %s (%llu "
			     "bytes, %.2f s)",
			     (unsigned long long)st.n_files, st.n_files == 1 ? "" : "s",
			     (double)st.text_bytes / 1e6, (unsigned long long)st.n_chunks,
			     st.n_chunks == 1 ? "" : "s",
			     st.index_loaded ? "loaded from cache" : "built",
			     (unsigned long long)st.index_bytes, (double)st.index_build_ns / 1e9);
	if (st.skipped)
		sf__log_info("%llu bad records skipped; the first: %s",
			     (unsigned long long)st.skipped, sf__dataset_first_skip(ds));
	if (sf__dataset_note(ds)[0])
		sf__log_error("warning: %s", sf__dataset_note(ds));
	/* A part may be empty (more parts than documents); a whole corpus may not. */
	if (!shard && !st.n_tokens)
		r = sf__err(&e, SF_E_SOURCE, "%s: the sources hold no token, nothing to write%s%s",
			    cfg.path ? cfg.path : "config",
			    st.skipped ? "; the first record skipped: " : "",
			    st.skipped ? sf__dataset_first_skip(ds) : "");
	else
		r = sf__dataset_write_megatron(ds, prefix, cfg.producers, show_progress, &ps, &e);
	if (r >= 0 && shard)
		r = sf__part_manifest_write(prefix, &plan, ds, &e);
	if (r < 0)
		sf__log_error("%s", e.msg);
	else if (!ps.quiet)
		sf__log_info("wrote %s.bin and %s.idx%s: %llu documents, %llu tokens (%s)", prefix,
			     prefix, shard ? " and .json" : "", (unsigned long long)st.n_docs,
			     (unsigned long long)st.n_tokens,
			     st.token_bytes == 2 ? "uint16" : "int32");
	sf__dataset_close(ds);
	sf__path_unlock(lock, lock_fd);
	sf__part_plan_free(&plan);
	sf__config_free(&cfg);
	return r < 0 ? 1 : 0;
}
