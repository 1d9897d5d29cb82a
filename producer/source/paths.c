/*
 * The files of a source as the dataset reads them: paths taken literally, globs expanded,
 * directories listed, all sorted and deduplicated; and the format of each file when its
 * source says auto.
 */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "common/log.h"
#include "producer/megatron_parts.h"
#include "producer/producer.h"
#include "producer/source/paths.h"
#include "producer/source/tokens.h"

static int has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* The format of `path` when its source says SF_FMT_AUTO. */
int sf__source_detect_format(const char *path, uint32_t *ret_format)
{
	static const char *const text_ext[] = {".txt", ".txt.zst", ".txt.gz"};
	static const char *const jsonl_ext[] = {".jsonl", ".jsonl.zst", ".jsonl.gz"};

	char *idx;
	int r;

	for (size_t i = 0; i < 3; i++) {
		if (has_suffix(path, text_ext[i])) {
			*ret_format = SF_FMT_TEXT;
			return 0;
		}
		if (has_suffix(path, jsonl_ext[i])) {
			*ret_format = SF_FMT_JSONL;
			return 0;
		}
	}
	if (has_suffix(path, ".bin") || has_suffix(path, ".idx"))
		return sf__token_format_detect(path, ret_format);
	/*
	 * Any other name is a Megatron prefix or nothing auto knows: a README, a .json.gz or
	 * a .parquet beside the shards must not be read as uint16 tokens. A prefix names no
	 * file: notes named `corpus` beside corpus.bin and corpus.idx are notes (read as the
	 * pair, a listing of the directory read it twice).
	 */
	if (access(path, F_OK) == 0)
		return -EINVAL;
	idx = sf__megatron_file(path, ".idx");
	if (!idx)
		return -ENOMEM;
	r = access(idx, F_OK);
	free(idx);
	if (r < 0)
		return -EINVAL;
	*ret_format = SF_FMT_MEGATRON;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append a copy of `p` (of `len` bytes) to the growing list. */
static int push_path(char ***paths, size_t *n, size_t *cap, const char *p, size_t len)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		char **np = realloc(*paths, ncap * sizeof(*np));

		if (!np)
			return -ENOMEM;
		*paths = np;
		*cap = ncap;
	}
	(*paths)[*n] = strndup(p, len);
	if (!(*paths)[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* Whether `path` is a regular file after symlinks. */
static int is_regular(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether `path` is a symbolic link that leads nowhere (no target, or a loop). */
static bool is_dangling(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) != 0;
}

/*
 * The files of a directory given as a source path: its regular files (after symlinks),
 * not those of its subdirectories, names starting with "." skipped (the `beside` index
 * caches among them), and a Megatron NAME.idx skipped where NAME.bin is there too (the
 * .bin names the pair). A symbolic link that leads nowhere is listed too, as a file
 * that cannot be read (a shard on a volume that is not mounted), whose open says so. A
 * directory that holds none is an error, as a glob matching nothing is.
 */
static int expand_directory(const char *dir, char ***paths, size_t *n, size_t *cap,
			    struct sf_err *e)
{
	size_t dlen = strlen(dir), before = *n;
	struct dirent *de;
	DIR *d;
	int r = 0;

	while (dlen > 1 && dir[dlen - 1] == '/')
		dlen--;
	d = opendir(dir);
	if (!d)
		return sf__err(e, -errno, "%s: cannot list the directory: %s", dir,
			       strerror(errno));
	while (r == 0 && (errno = 0, de = readdir(d))) {
		size_t nlen = strlen(de->d_name);
		char *full;

		if (de->d_name[0] == '.')
			continue;
		if (asprintf(&full, "%.*s/%s", (int)dlen, dir, de->d_name) < 0) {
			r = -ENOMEM;
			break;
		}
		if (is_regular(full) && nlen > 4 && !strcmp(de->d_name + nlen - 4, ".idx")) {
			char *bin = sf__megatron_file(full, ".bin");
			const bool paired = bin && is_regular(bin);

			free(bin);
			if (paired) {
				free(full);
				continue;
			}
		}
		if (is_regular(full) || is_dangling(full))
			r = push_path(paths, n, cap, full, strlen(full));
		free(full);
	}
	if (r == 0 && errno)
		r = sf__err(e, -errno, "%s: cannot list the directory: %s", dir, strerror(errno));
	else if (r == -ENOMEM)
		r = sf__err(e, r, "out of memory");
	closedir(d);
	if (r == 0 && *n == before)
		r = sf__err(e, -ENOENT, "%s: the directory holds no regular file", dir);
	return r;
}

/*
 * The file that path `p` of a source of `format` reads, by device and inode: a Megatron
 * pair's .bin where `p` stands for the pair (any name under format megatron; under auto
 * its .bin, its .idx, or its prefix, which names no file), else `p`'s own file. False when
 * there is none (the open that follows reports it).
 */
static bool file_identity(const char *p, uint32_t format, struct stat *st)
{
	const bool own = stat(p, st) == 0;
	bool pair = format == SF_FMT_MEGATRON, ok;
	struct stat pair_st;
	char *bin;

	if (format == SF_FMT_AUTO)
		pair = has_suffix(p, ".idx") || (!has_suffix(p, ".bin") && !own);
	if (!pair)
		return own;
	bin = sf__megatron_file(p, ".bin");
	if (!bin)
		return false;
	ok = stat(bin, &pair_st) == 0 && S_ISREG(pair_st.st_mode);
	free(bin);
	if (ok)
		*st = pair_st;
	return ok || own;
}

struct identity {
	dev_t dev;
	ino_t ino;
	size_t i; /* index in the sorted paths */
};

static int cmp_identity(const void *a, const void *b)
{
	const struct identity *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

/*
 * Keep each file once, the first of its names in sorted order: the same path twice, the
 * same file by two spellings or links, or two names of a Megatron pair (which each open
 * the pair, file_identity() by the source's `format`) would otherwise be read twice.
 * Returns 0 or -ENOMEM.
 */
static int drop_repeats(char **paths, size_t *n, uint32_t format)
{
	struct identity *id = malloc((*n ? *n : 1) * sizeof(*id));
	bool *drop = calloc(*n ? *n : 1, sizeof(*drop));
	size_t m = 0, k = 0;

	if (!id || !drop) {
		free(id);
		free(drop);
		return -ENOMEM;
	}
	for (size_t i = 0; i < *n; i++) {
		struct stat st;

		if (i && !strcmp(paths[i], paths[i - 1]))
			drop[i] = true;
		else if (file_identity(paths[i], format, &st))
			id[m++] = (struct identity){st.st_dev, st.st_ino, i};
	}
	qsort(id, m, sizeof(*id), cmp_identity);
	for (size_t j = 1; j < m; j++)
		if (id[j].dev == id[j - 1].dev && id[j].ino == id[j - 1].ino)
			drop[id[j].i] = true;
	for (size_t i = 0; i < *n; i++) {
		if (drop[i])
			free(paths[i]);
		else
			paths[k++] = paths[i];
	}
	*n = k;
	free(id);
	free(drop);
	return 0;
}

/*
 * The paths of a source: each entry taken literally when it holds no glob character or
 * when a file of exactly that name exists (so "data[1].bin" names itself), else expanded
 * as a glob; a directory stands for its files (expand_directory()); all of them sorted
 * and deduplicated. A glob that matches nothing is an error: a typo must not silently
 * shrink the dataset.
 */
/* Whether `paths` (n, sorted) holds the first `len` bytes of `path` followed by `suffix`. */
static int holds(char **paths, size_t n, const char *path, size_t len, const char *suffix,
		 char ***ret_hit)
{
	char *name = malloc(len + strlen(suffix) + 1);

	if (!name)
		return -ENOMEM;
	memcpy(name, path, len);
	strcpy(name + len, suffix);
	*ret_hit = bsearch(&name, paths, n, sizeof(*paths), cmp_str);
	free(name);
	return *ret_hit != NULL;
}

/*
 * A file beside its compressed copy (`gzip -k`, `zstd` keeping the input), or two
 * compressed copies of one file (x.gz and x.zst), would be read twice, every document
 * twice an epoch: refused. `paths` is sorted.
 */
static int refuse_copies(char **paths, size_t n, struct sf_err *e)
{
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(paths[i]), cut = 0;
		char **hit;
		int r;

		if (has_suffix(paths[i], ".gz"))
			cut = 3;
		else if (has_suffix(paths[i], ".zst"))
			cut = 4;

		if (!cut)
			continue;
		r = holds(paths, n, paths[i], len - cut, "", &hit);
		if (r == 0 && cut == 3)
			r = holds(paths, n, paths[i], len - cut, ".zst", &hit);
		if (r < 0)
			return sf__err(e, r, "out of memory");
		if (r && !has_suffix(*hit, ".zst"))
			return sf__err(e, SF_E_SOURCE,
				       "%s: %s beside it, its compressed copy? Both would be read, "
				       "every document twice an epoch: remove one, or name the "
				       "files to read",
				       *hit, paths[i]);
		if (r)
			return sf__err(
				e, SF_E_SOURCE,
				"%s: %s beside it, another compressed copy of one file? Both "
				"would be read, every document twice an epoch: remove one, or "
				"name the files to read",
				paths[i], *hit);
	}
	return 0;
}

/* The files of src's paths `first` to `end` (excluded); `whole`: all of them. */
static int expand(const struct sf_source_config *src, uint32_t first, uint32_t end, bool whole,
		  char ***ret_paths, size_t *ret_n, struct sf_err *e)
{
	char **paths = NULL;
	size_t n = 0, cap = 0;
	int r = 0;

	for (uint32_t i = first; i < end && r == 0; i++) {
		const char *p = src->paths[i];
		char *pattern = NULL;
		struct stat st;
		glob_t g = {0};
		/* A file of that name, or a Megatron pair of that prefix, is what it names. */
		const bool named = access(p, F_OK) == 0, pair = !named && sf__megatron_prefix(p);
		int pat = !named && !pair ? sf__glob_pattern(p, &pattern) : 0;

		if (pat < 0) {
			r = sf__err(e, pat, "out of memory");
		} else if (pat) {
			int gr = glob(pattern, GLOB_ERR, NULL, &g);

			free(pattern);

			if (gr == GLOB_NOMATCH) {
				r = sf__err(e, -ENOENT, "%s: no file matches", p);
				break;
			}
			if (gr) {
				r = sf__err(e, -EIO, "%s: cannot expand the pattern", p);
				globfree(&g);
				break;
			}
			/* A directory it matches stands for its files, as one named; one that
			 * holds none adds none, but the pattern must match some file. */
			size_t had = n;

			for (size_t j = 0; j < g.gl_pathc && r == 0; j++) {
				if (stat(g.gl_pathv[j], &st) == 0 && S_ISDIR(st.st_mode)) {
					size_t before = n;

					r = expand_directory(g.gl_pathv[j], &paths, &n, &cap, e);
					if (r == -ENOENT && n == before)
						r = 0;
					continue;
				}
				r = push_path(&paths, &n, &cap, g.gl_pathv[j],
					      strlen(g.gl_pathv[j]));
				if (r == -ENOMEM)
					r = sf__err(e, r, "out of memory");
			}
			globfree(&g);
			if (r == 0 && n == had)
				r = sf__err(e, -ENOENT, "%s: no file matches (only directories of none)",
					    p);
		} else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
			r = expand_directory(p, &paths, &n, &cap, e);
		} else if (lstat(p, &st) != 0 && errno == ENOENT && !pair) {
			/* Whatever on_error says: a mistyped path is no bad record. */
			r = sf__err(e, -ENOENT, "%s: no such file%s", p,
				    strpbrk(p, "*?[") ? " (its *?[ are in the name of a directory "
							"that exists, so it is no pattern)"
						      : "");
		} else {
			r = push_path(&paths, &n, &cap, p, strlen(p));
			if (r == -ENOMEM)
				r = sf__err(e, r, "out of memory");
		}
	}
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			free(paths[i]);
		free(paths);
		return r;
	}
	if (n)
		qsort(paths, n, sizeof(*paths), cmp_str);
	r = drop_repeats(paths, &n, src->format);
	if (r < 0)
		r = sf__err(e, r, "out of memory");
	else
		r = refuse_copies(paths, n, e);
	/* Tokenize parts read as sources: their manifests go with their pairs, and the
	 * whole listing's sets are held to what their merge requires. */
	if (r == 0 && (src->format == SF_FMT_AUTO || src->format == SF_FMT_MEGATRON))
		r = sf__parts_sources(paths, &n, whole, e);
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			free(paths[i]);
		free(paths);
		return r;
	}
	*ret_paths = paths;
	*ret_n = n;
	return 0;
}

int sf__source_expand(const struct sf_source_config *src, char ***ret_paths, size_t *ret_n,
		      struct sf_err *e)
{
	return expand(src, 0, src->n_paths, true, ret_paths, ret_n, e);
}

int sf__source_expand_path(const struct sf_source_config *src, uint32_t j, char ***ret_paths,
			   size_t *ret_n, struct sf_err *e)
{
	return expand(src, j, j + 1, false, ret_paths, ret_n, e);
}

/* A file of a source; id.i is the source's index. */
struct shared_file {
	struct identity id;
	char *path;
};

static int cmp_shared_file(const void *a, const void *b)
{
	return cmp_identity(&((const struct shared_file *)a)->id,
			    &((const struct shared_file *)b)->id);
}

int sf__sources_shared_files(const struct sf_config *cfg,
			     void (*report)(uint32_t a, uint32_t b, const char *path,
					    const char *effect))
{
	const char *effect = cfg->mixture ? "each of them samples it"
					  : "its documents come twice in each epoch";
	struct shared_file *f = NULL;
	size_t n = 0, cap = 0;
	int found = 0;

	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		struct sf_err e = {0};
		char **paths = NULL;
		size_t np = 0;

		if (sf__source_expand(&cfg->sources[i], &paths, &np, &e) < 0)
			continue;
		for (size_t k = 0; k < np; k++) {
			struct stat st;

			if (!file_identity(paths[k], cfg->sources[i].format, &st)) {
				free(paths[k]);
				continue;
			}
			if (n == cap) {
				size_t grown = cap ? 2 * cap : 64;
				struct shared_file *g = realloc(f, grown * sizeof(*f));

				if (!g) {
					for (; k < np; k++)
						free(paths[k]);
					free(paths);
					found = -ENOMEM;
					goto out;
				}
				f = g;
				cap = grown;
			}
			f[n++] = (struct shared_file){{st.st_dev, st.st_ino, i}, paths[k]};
		}
		free(paths);
	}
	if (n)
		qsort(f, n, sizeof(*f), cmp_shared_file);
	for (size_t k = 1; k < n; k++) {
		if (f[k].id.dev != f[k - 1].id.dev || f[k].id.ino != f[k - 1].id.ino ||
		    f[k].id.i == f[k - 1].id.i)
			continue;
		if (found++ < SF_SHARED_FILES_SAID)
			report((uint32_t)f[k - 1].id.i, (uint32_t)f[k].id.i, f[k - 1].path,
			       effect);
	}
out:
	for (size_t k = 0; k < n; k++)
		free(f[k].path);
	free(f);
	return found;
}

static void log_shared(uint32_t a, uint32_t b, const char *path, const char *effect)
{
	sf__log_error("warning: sources %u and %u both read %s: %s", a, b, path, effect);
}

void sf__sources_warn_shared(const struct sf_config *cfg)
{
	int n = sf__sources_shared_files(cfg, log_shared);

	if (n > SF_SHARED_FILES_SAID)
		sf__log_error("warning: " SF_SHARED_MORE, n - SF_SHARED_FILES_SAID);
}
