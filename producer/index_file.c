/*
 * The cache of chunk token counts, one small file per raw text file: by default in the
 * user's cache directory (sf__index_dir()) as index/PATHHASH-KEY.sfidx, where PATHHASH
 * digests the file's absolute path and KEY (16 hex digits) the tokenizer and everything
 * that decides how the file is cut into documents; with the source's `index: beside`,
 * as the dot-file .NAME.KEY.sfidx beside the file, so that it travels with the corpus
 * (every node of a job reading a shared file system finds it), falling back to the cache
 * directory where the file's directory is not writable. The default keeps corpus
 * directories untouched: they are often read-only or shared. Its header repeats the key
 * and the file's identity (size, modification time, inode): a file that changed, or a
 * cache from another tokenizer, is simply rebuilt. A checksum over the whole cache catches a
 * torn write; every field is range-checked, only the user's own regular files are read,
 * and each count is verified when its chunk is tokenized. The cache is written to a temporary name
 * and renamed, so readers never see half a file. Failing to write it (no writable cache directory)
 * costs speed only, never correctness.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "producer/index_file.h"

#define INDEX_MAGIC   "SFCHIDX1"
#define INDEX_VERSION 1u
#define SKIP_MSG_LEN  512u

struct index_header {
	char magic[8];
	uint32_t version;
	uint32_t chunk_bytes;
	uint64_t key;
	uint64_t ident[3];
	uint64_t n_chunks;
	uint64_t skipped;
	char first_skip[SKIP_MSG_LEN];
};

struct index_entry {
	uint64_t off;
	uint64_t n_docs;
	uint64_t n_tokens;
};

uint64_t sf__index_key(const struct sf_dataset *ds, const struct sf_text_file *f)
{
	const struct sf_source_config *src = &ds->sources[f->source];
	XXH3_state_t st;
	uint32_t words[3] = {f->format, src->on_error, SF_CHUNK_BYTES};

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &ds->tok_digest, sizeof(ds->tok_digest));
	XXH3_64bits_update(&st, words, sizeof(words));
	if (f->format == SF_FMT_JSONL)
		XXH3_64bits_update(&st, src->text_field ? src->text_field : "text",
				   strlen(src->text_field ? src->text_field : "text") + 1);
	else if (src->separator)
		XXH3_64bits_update(&st, src->separator, strlen(src->separator) + 1);
	return XXH3_64bits_digest(&st);
}

int sf__index_dir(char *buf, size_t len)
{
	const char *env = getenv("SHMFEED_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	int n;

	if (env && env[0])
		n = snprintf(buf, len, "%s/index", env);
	else if (xdg && xdg[0])
		n = snprintf(buf, len, "%s/shmfeed/index", xdg);
	else if (home && home[0])
		n = snprintf(buf, len, "%s/.cache/shmfeed/index", home);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Create `dir` and its parents (mode 0700 for what is created). */
static int make_dirs(char *dir)
{
	for (char *p = dir + 1;; p++) {
		char c = *p;

		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			*p = c;
			return -errno;
		}
		*p = c;
		if (!c)
			return 0;
	}
}

/*
 * The index file of `f` for `key`: beside the file (`beside`: DIR/.NAME.KEY.sfidx, a
 * dot-file that globs such as DIR/\* pass over), else in the user's cache directory
 * (created with `create`). NULL: no cache directory, or out of memory.
 */
static char *index_path(const struct sf_text_file *f, uint64_t key, int beside, int create)
{
	char dir[PATH_MAX], *abs = realpath(f->path, NULL), *p = NULL;
	const char *name = abs ? abs : f->path;

	if (beside) {
		const char *slash = strrchr(name, '/');
		size_t n = strlen(name) + 64;

		p = malloc(n);
		if (p && slash)
			snprintf(p, n, "%.*s/.%s.%016llx.sfidx", (int)(slash - name), name,
				 slash + 1, (unsigned long long)key);
		else if (p)
			snprintf(p, n, ".%s.%016llx.sfidx", name, (unsigned long long)key);
	} else if (sf__index_dir(dir, sizeof(dir)) == 0 && (!create || make_dirs(dir) == 0)) {
		size_t n = strlen(dir) + 64;

		p = malloc(n);
		if (p)
			snprintf(p, n, "%s/%016llx-%016llx.sfidx", dir,
				 (unsigned long long)XXH3_64bits(name, strlen(name)),
				 (unsigned long long)key);
	}
	free(abs);
	return p;
}

/* The chunks of file `file` are consecutive in ds->chunks. */
static uint64_t first_chunk_of(const struct sf_dataset *ds, uint32_t file, uint64_t *ret_n)
{
	uint64_t first = UINT64_MAX, n = 0;

	for (uint64_t c = 0; c < ds->n_chunks; c++) {
		if (ds->chunks[c].file != file)
			continue;
		if (first == UINT64_MAX)
			first = c;
		n++;
	}
	*ret_n = n;
	return first;
}

/* Load the index of `file` from `path` (NULL: none). Returns 1 when it was valid. */
static int load_from(struct sf_dataset *ds, uint32_t file, uint64_t key, char *path,
		     uint64_t *ret_bytes)
{
	const struct sf_text_file *f = &ds->text_files[file];
	struct index_header h;
	struct index_entry *ents = NULL;
	uint64_t n, first, sum, stored;
	int fd, ok = 0;
	struct stat st;

	if (!path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		free(path);
		return 0;
	}
	first = first_chunk_of(ds, file, &n);
	/* Only a regular file of this user is trusted: with `index: beside`, whoever can
	 * write the corpus directory could otherwise decide another user's batches. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (uint64_t)st.st_size != sizeof(h) + n * sizeof(*ents) + sizeof(uint64_t) ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		goto out;
	if (memcmp(h.magic, INDEX_MAGIC, 8) || h.version != INDEX_VERSION ||
	    h.chunk_bytes != SF_CHUNK_BYTES || h.key != key ||
	    memcmp(h.ident, f->ident, sizeof(h.ident)) || h.n_chunks != n)
		goto out;
	ents = malloc(n * sizeof(*ents) + 1);
	if (!ents ||
	    pread(fd, ents, n * sizeof(*ents), sizeof(h)) != (ssize_t)(n * sizeof(*ents)) ||
	    pread(fd, &stored, sizeof(stored), (off_t)(sizeof(h) + n * sizeof(*ents))) !=
		    (ssize_t)sizeof(stored))
		goto out;
	{
		XXH3_state_t xs;

		XXH3_64bits_reset(&xs);
		XXH3_64bits_update(&xs, &h, sizeof(h));
		XXH3_64bits_update(&xs, ents, n * sizeof(*ents));
		sum = XXH3_64bits_digest(&xs);
	}
	if (sum != stored)
		goto out;
	/*
	 * A checksum proves no torn write, not honest numbers: every field is held to what
	 * the file can hold. A document is at least one byte (empty ones are dropped) and
	 * adds one <|endoftext|>; a token covers at least one byte; a skipped record is at
	 * least one byte. The counts are verified again when each chunk is tokenized.
	 */
	if (h.skipped > f->len)
		goto out;
	for (uint64_t i = 0; i < n; i++) {
		const struct sf_chunk *c = &ds->chunks[first + i];

		if (ents[i].off != c->off || ents[i].n_docs > UINT32_MAX ||
		    ents[i].n_docs > c->len || ents[i].n_tokens < ents[i].n_docs ||
		    ents[i].n_tokens > c->len + ents[i].n_docs)
			goto out;
	}
	for (uint64_t i = 0; i < n; i++) {
		ds->chunks[first + i].n_docs = (uint32_t)ents[i].n_docs;
		ds->chunks[first + i].n_tokens = ents[i].n_tokens;
	}
	if (h.skipped) {
		struct sf_err why = {.code = 0};

		h.first_skip[SKIP_MSG_LEN - 1] = 0;
		snprintf(why.msg, sizeof(why.msg), "%s", h.first_skip);
		sf__dataset_note_skips(ds, &why, h.skipped);
	}
	*ret_bytes = (uint64_t)st.st_size;
	ds->text_files[file].index_path = path;
	path = NULL;
	ok = 1;
out:
	free(path);
	free(ents);
	close(fd);
	return ok;
}

int sf__index_load(struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t *ret_bytes)
{
	const struct sf_text_file *f = &ds->text_files[file];
	const int beside = ds->sources[f->source].index == SF_INDEX_BESIDE;

	/* An index beside the file wins; one in the cache directory serves too (written there
	 * when the file's directory was not writable, or before the source said `beside`). */
	return (beside && load_from(ds, file, key, index_path(f, key, 1, 0), ret_bytes)) ||
	       load_from(ds, file, key, index_path(f, key, 0, 0), ret_bytes);
}

/* Write the index of `file` to `path` (NULL: -ENOMEM), through a temporary file. */
static int save_to(const struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t skipped,
		   const char *first_skip, char *path, uint64_t *ret_bytes)
{
	const struct sf_text_file *f = &ds->text_files[file];
	char *tmp = NULL;
	struct index_header h;
	struct index_entry *ents = NULL;
	uint64_t n, first, sum;
	size_t body;
	int fd = -1, r = -ENOMEM;

	if (!path)
		return -ENOMEM;
	tmp = malloc(strlen(path) + 32);
	first = first_chunk_of(ds, file, &n);
	ents = malloc(n * sizeof(*ents) + 1);
	if (!tmp || !ents)
		goto out;
	snprintf(tmp, strlen(path) + 32, "%s.tmp.%d", path, (int)getpid());
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, INDEX_MAGIC, 8);
	h.version = INDEX_VERSION;
	h.chunk_bytes = SF_CHUNK_BYTES;
	h.key = key;
	memcpy(h.ident, f->ident, sizeof(h.ident));
	h.n_chunks = n;
	h.skipped = skipped;
	if (skipped)
		snprintf(h.first_skip, sizeof(h.first_skip), "%s", first_skip);
	for (uint64_t i = 0; i < n; i++) {
		ents[i].off = ds->chunks[first + i].off;
		ents[i].n_docs = ds->chunks[first + i].n_docs;
		ents[i].n_tokens = ds->chunks[first + i].n_tokens;
	}
	{
		XXH3_state_t xs;

		XXH3_64bits_reset(&xs);
		XXH3_64bits_update(&xs, &h, sizeof(h));
		XXH3_64bits_update(&xs, ents, n * sizeof(*ents));
		sum = XXH3_64bits_digest(&xs);
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	body = n * sizeof(*ents);
	if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h) ||
	    write(fd, ents, body) != (ssize_t)body ||
	    write(fd, &sum, sizeof(sum)) != (ssize_t)sizeof(sum) || fsync(fd) < 0) {
		r = -EIO;
		unlink(tmp);
		goto out;
	}
	if (rename(tmp, path) < 0) {
		r = -errno;
		unlink(tmp);
		goto out;
	}
	*ret_bytes = sizeof(h) + body + sizeof(sum);
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	free(ents);
	free(tmp);
	free(path);
	return r;
}

int sf__index_save(const struct sf_dataset *ds, uint32_t file, uint64_t key, uint64_t skipped,
		   const char *first_skip, uint64_t *ret_bytes)
{
	const struct sf_text_file *f = &ds->text_files[file];

	if (ds->sources[f->source].index == SF_INDEX_BESIDE &&
	    save_to(ds, file, key, skipped, first_skip, index_path(f, key, 1, 0), ret_bytes) == 0)
		return 0;
	return save_to(ds, file, key, skipped, first_skip, index_path(f, key, 0, 1), ret_bytes);
}
