/*
 * The cache of the chunk index of raw text: one file per directory of text files and key,
 * by default in the user's cache directory (sf__index_dir()) as index/DIRHASH-KEY.sfidx,
 * where DIRHASH digests the directory's absolute path and KEY (16 hex digits) the
 * tokenizer and everything that decides how a file is cut into documents; with the
 * source's `index: beside`, as the dot-file .shmfeed.KEY.sfidx in the directory itself,
 * so that it travels with the corpus (every node of a job reading a shared file system
 * finds it), falling back to the cache directory where the directory is not writable. The
 * default keeps corpus directories untouched: they are often read-only or shared.
 *
 * For each file it holds a digest of its path, its identity (device, inode, size,
 * modification time), its uncompressed length and longest document, and its chunks
 * (offset, length, first line, documents, tokens): all a warm start needs, so that one
 * reads this file and stats the sources, and reads none of their bytes. A file that
 * changed is cut and counted again alone; the others keep their entries. A checksum over
 * the whole file catches a torn write; every field is range-checked, only the user's own
 * regular files are read, and each chunk is verified when a producer tokenizes it
 * (producer/source/text_file.h). The file is written once per start that changed it,
 * to a temporary name, synced and renamed, so readers never see half a file. Failing to
 * write it (no writable cache directory) costs speed only, never correctness.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/io.h"
#include "producer/index_file.h"
#include "producer/text_index.h"
#include "producer/tokenizer/tokenizer.h"

#define INDEX_MAGIC   "SFCHIDX2"
/* 4: text files holding compressed data are refused (an index of version 3 may have
 * taken one as text). 5: each file's encoding at its start (bytes not UTF-8, NULs). */
#define INDEX_VERSION 5u
#define SKIP_MSG_LEN  512u

struct index_header {
	char magic[8];
	uint32_t version;
	uint32_t chunk_bytes;
	uint64_t key;
	uint64_t n_files;
	uint64_t n_chunks;
	char first_skip[SKIP_MSG_LEN]; /* the first record skipped, for messages */
};

struct index_file_entry {
	uint64_t path_hash;
	uint64_t dev, ino, size, mtime_ns;
	uint64_t len;	  /* uncompressed bytes */
	uint64_t max_doc; /* longest document */
	uint64_t n_chunks;
	uint64_t skipped;
	uint32_t format;
	uint32_t line_ends; /* sf_text_file.line_ends (0 before) */
	uint64_t ctime_ns;  /* version 3 */
	uint64_t scanned, not_utf8, nuls, first_odd; /* version 5: sf_text_file's */
};

struct index_chunk_entry {
	uint64_t off;
	uint64_t len;
	uint64_t first_line;
	uint64_t n_docs;
	uint64_t n_tokens;
};

struct sf_index_image {
	char *path;
	uint64_t bytes;
	struct index_header h;
	struct index_file_entry *files;
	uint64_t *first_chunk; /* per file entry: its first chunk entry */
	uint64_t *by_hash;     /* file entries sorted by path hash */
	struct index_chunk_entry *chunks;
};

uint64_t sf__index_key(const struct sf_dataset *ds, const struct sf_text_file *f)
{
	const struct sf_source_config *src = &ds->sources[f->source];
	XXH3_state_t st;
	uint32_t words[3] = {INDEX_VERSION, src->on_error, SF_CHUNK_BYTES};

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &ds->tok_digest, sizeof(ds->tok_digest));
	XXH3_64bits_update(&st, words, sizeof(words));
	/* From stream version 2 on (common/config.h), so that the token counts a shmfeed that
	 * tokenized otherwise cached are not taken; the keys of version 1 stay what they
	 * were. */
	if (SF_STREAM_VERSION > 1) {
		const uint32_t stream = SF_STREAM_VERSION;

		XXH3_64bits_update(&st, &stream, sizeof(stream));
	}
	/* A directory may hold both formats: the key covers what cuts either. */
	XXH3_64bits_update(&st, src->text_field ? src->text_field : "text",
			   strlen(src->text_field ? src->text_field : "text") + 1);
	XXH3_64bits_update(&st, src->separator ? src->separator : "",
			   src->separator ? strlen(src->separator) + 1 : 0);
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

/* The directory of `path` ("." when it has none), as a new string. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

/*
 * The index file of the directory of `f` for `key`: in the directory itself (`beside`:
 * DIR/.shmfeed.KEY.sfidx, a dot-file that globs such as DIR/\* and directory sources pass
 * over), else in the user's cache directory (created with `create`). NULL, with why in
 * *ret_err where it is not NULL: no cache directory (-ENOENT: none named; -ENAMETOOLONG),
 * one that could not be made, or out of memory.
 */
static char *index_path(const struct sf_text_file *f, uint64_t key, int beside, int create,
			int *ret_err)
{
	char cache[PATH_MAX], *dir = dir_of(f->path), *abs = NULL, *p = NULL;
	size_t n;
	int r = 0; /* the cache directory's error */

	if (dir && beside) {
		n = strlen(dir) + 64;
		p = malloc(n);
		if (p)
			snprintf(p, n, "%s/.shmfeed.%016llx.sfidx", dir, (unsigned long long)key);
	} else if (dir && (r = sf__index_dir(cache, sizeof(cache))) == 0 &&
		   (!create || (r = make_dirs(cache)) == 0)) {
		const char *name;

		abs = realpath(dir, NULL);
		name = abs ? abs : dir;
		n = strlen(cache) + 64;
		p = malloc(n);
		if (p)
			snprintf(p, n, "%s/%016llx-%016llx.sfidx", cache,
				 (unsigned long long)XXH3_64bits(name, strlen(name)),
				 (unsigned long long)key);
	}
	if (!p && ret_err)
		*ret_err = r < 0 ? r : -ENOMEM;
	free(abs);
	free(dir);
	return p;
}

static uint64_t path_hash(const char *path)
{
	return XXH3_64bits(path, strlen(path));
}

void sf__index_image_free(struct sf_index_image *img)
{
	if (!img)
		return;
	free(img->path);
	free(img->files);
	free(img->first_chunk);
	free(img->by_hash);
	free(img->chunks);
	free(img);
}

const char *sf__index_image_path(const struct sf_index_image *img)
{
	return img->path;
}

uint64_t sf__index_image_bytes(const struct sf_index_image *img)
{
	return img->bytes;
}

static const struct index_file_entry *sort_files;

static int cmp_hash(const void *a, const void *b)
{
	uint64_t x = sort_files[*(const uint64_t *)a].path_hash;
	uint64_t y = sort_files[*(const uint64_t *)b].path_hash;

	return x < y ? -1 : x > y;
}

/*
 * The most tokens a chunk of `len` bytes in `n_docs` documents can hold: each document's
 * ids (sf__tok_ids_bound() of its bytes: its sum over the documents is at most that of
 * len + n_docs - 1 bytes, as the bound is (len + 1) times a factor), and its bos and
 * end-of-document tokens. UINT64_MAX when the tokenizer knows no bound before encoding
 * (SentencePiece), or for a length no file has.
 */
static uint64_t chunk_tokens_bound(const struct sf_dataset *ds, uint64_t len, uint64_t n_docs)
{
	const uint64_t docs = n_docs ? n_docs : 1;
	size_t ids;

	if (len > (UINT64_C(1) << 48) || docs > (UINT64_C(1) << 48))
		return UINT64_MAX;
	ids = sf__tok_ids_bound(ds->tok, (size_t)(len + docs - 1));
	if (ids == SIZE_MAX)
		return UINT64_MAX;
	return (uint64_t)ids + (ds->bos != UINT32_MAX ? 2 : 1) * docs;
}

/*
 * A checksum proves no torn write, not honest numbers: every field is held to what the
 * file can hold. Chunks lie back to back from byte 0 to the file's length, each at least
 * a byte; a document is at least one byte (empty ones are dropped); a chunk holds at
 * least one token a document and at most chunk_tokens_bound(); a line holds at least a
 * byte. Each chunk is verified again when it is tokenized.
 */
static int image_valid(const struct sf_dataset *ds, struct sf_index_image *img)
{
	const uint64_t nf = img->h.n_files, nc = img->h.n_chunks;
	uint64_t c = 0;

	for (uint64_t i = 0; i < nf; i++) {
		const struct index_file_entry *f = &img->files[i];
		uint64_t at = 0, line = 1;

		if ((f->format != SF_FMT_TEXT && f->format != SF_FMT_JSONL) ||
		    f->line_ends > SF_LINE_ENDS_KEEP_CR || f->n_chunks > nc - c ||
		    f->max_doc > f->len || f->skipped > f->len || f->scanned > f->len ||
		    f->not_utf8 > f->scanned || f->nuls > f->scanned ||
		    (f->not_utf8 && f->first_odd >= f->scanned) ||
		    (f->n_chunks == 0) != (f->len == 0))
			return 0;
		img->first_chunk[i] = c;
		for (uint64_t k = 0; k < f->n_chunks; k++, c++) {
			const struct index_chunk_entry *ch = &img->chunks[c];

			if (ch->off != at || ch->len == 0 || ch->len > f->len - at ||
			    ch->first_line < line || ch->first_line - line > (k ? ch->off : 0) ||
			    ch->n_docs > ch->len || ch->n_docs > UINT32_MAX ||
			    ch->n_tokens < ch->n_docs ||
			    ch->n_tokens > chunk_tokens_bound(ds, ch->len, ch->n_docs))
				return 0;
			at += ch->len;
			line = ch->first_line;
		}
		if (at != f->len)
			return 0;
	}
	return c == nc;
}

/* Load the index at `path` (NULL: none) for `key`. Returns 1 with *ret_img when valid. */
static int load_from(const struct sf_dataset *ds, uint64_t key, char *path,
		     struct sf_index_image **ret_img)
{
	struct sf_index_image *img = NULL;
	struct index_header h;
	uint64_t sum, stored, body_files, body_chunks;
	int fd, ok = 0;
	struct stat st;

	if (!path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		free(path);
		return 0;
	}
	/* Only a regular file of this user is trusted: with `index: beside`, whoever can
	 * write the corpus directory could otherwise decide another user's batches. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (uint64_t)st.st_size < sizeof(h) + sizeof(uint64_t) ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		goto out;
	if (memcmp(h.magic, INDEX_MAGIC, 8) || h.version != INDEX_VERSION ||
	    h.chunk_bytes != SF_CHUNK_BYTES || h.key != key ||
	    h.n_files > (uint64_t)st.st_size / sizeof(struct index_file_entry) ||
	    h.n_chunks > (uint64_t)st.st_size / sizeof(struct index_chunk_entry))
		goto out;
	body_files = h.n_files * sizeof(struct index_file_entry);
	body_chunks = h.n_chunks * sizeof(struct index_chunk_entry);
	if ((uint64_t)st.st_size != sizeof(h) + body_files + body_chunks + sizeof(uint64_t))
		goto out;
	img = calloc(1, sizeof(*img));
	if (!img)
		goto out;
	img->h = h;
	img->files = malloc(body_files + 1);
	img->first_chunk = malloc(h.n_files * sizeof(uint64_t) + 1);
	img->by_hash = malloc(h.n_files * sizeof(uint64_t) + 1);
	img->chunks = malloc(body_chunks + 1);
	if (!img->files || !img->first_chunk || !img->by_hash || !img->chunks ||
	    pread(fd, img->files, body_files, sizeof(h)) != (ssize_t)body_files ||
	    pread(fd, img->chunks, body_chunks, (off_t)(sizeof(h) + body_files)) !=
		    (ssize_t)body_chunks ||
	    pread(fd, &stored, sizeof(stored), (off_t)(sizeof(h) + body_files + body_chunks)) !=
		    (ssize_t)sizeof(stored))
		goto out;
	{
		XXH3_state_t xs;

		XXH3_64bits_reset(&xs);
		XXH3_64bits_update(&xs, &h, sizeof(h));
		XXH3_64bits_update(&xs, img->files, body_files);
		XXH3_64bits_update(&xs, img->chunks, body_chunks);
		sum = XXH3_64bits_digest(&xs);
	}
	if (sum != stored || !image_valid(ds, img))
		goto out;
	img->h.first_skip[SKIP_MSG_LEN - 1] = 0;
	for (uint64_t i = 0; i < h.n_files; i++)
		img->by_hash[i] = i;
	sort_files = img->files;
	qsort(img->by_hash, h.n_files, sizeof(uint64_t), cmp_hash);
	img->bytes = (uint64_t)st.st_size;
	img->path = path;
	path = NULL;
	*ret_img = img;
	img = NULL;
	ok = 1;
out:
	sf__index_image_free(img);
	free(path);
	close(fd);
	return ok;
}

int sf__index_load(const struct sf_dataset *ds, uint32_t file, uint64_t key,
		   struct sf_index_image **ret_img)
{
	const struct sf_text_file *f = &ds->text_files[file];
	const int beside = ds->sources[f->source].index == SF_INDEX_BESIDE;

	/* An index beside the files wins; one in the cache directory serves too (written there
	 * when the directory was not writable, or before the source said `beside`). */
	return (beside && load_from(ds, key, index_path(f, key, 1, 0, NULL), ret_img)) ||
	       load_from(ds, key, index_path(f, key, 0, 0, NULL), ret_img);
}

/* The entry of `img` for the file of path hash `hash`, or UINT64_MAX. */
static uint64_t find_entry(const struct sf_index_image *img, uint64_t hash)
{
	uint64_t lo = 0, hi = img->h.n_files;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (img->files[img->by_hash[mid]].path_hash < hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < img->h.n_files && img->files[img->by_hash[lo]].path_hash == hash
		       ? img->by_hash[lo]
		       : UINT64_MAX;
}

int sf__index_take(struct sf_dataset *ds, const struct sf_index_image *img, uint32_t file)
{
	struct sf_text_file *f = &ds->text_files[file];
	const struct index_file_entry *en;
	uint64_t i = find_entry(img, path_hash(f->path));

	if (i == UINT64_MAX)
		return 0;
	en = &img->files[i];
	if (en->dev != f->id.dev || en->ino != f->id.ino || en->size != f->id.size ||
	    en->mtime_ns != f->id.mtime_ns || en->ctime_ns != f->id.ctime_ns ||
	    en->format != f->format ||
	    (!f->compressed && en->len != f->id.size))
		return 0;
	for (uint64_t k = 0; k < en->n_chunks; k++) {
		const struct index_chunk_entry *ce = &img->chunks[img->first_chunk[i] + k];
		int r = sf__text_add_chunk(ds, file, ce->off, ce->len, ce->first_line);

		if (r < 0)
			return r;
		ds->chunks[ds->n_chunks - 1].n_docs = (uint32_t)ce->n_docs;
		ds->chunks[ds->n_chunks - 1].n_tokens = ce->n_tokens;
	}
	f->len = en->len;
	f->max_doc = en->max_doc;
	f->skipped = en->skipped;
	f->line_ends = en->line_ends;
	f->scanned = en->scanned;
	f->not_utf8 = en->not_utf8;
	f->nuls = en->nuls;
	f->first_odd = en->first_odd;
	sf__text_say_line_ends(ds, f);
	if (en->skipped) {
		struct sf_err why = {.code = 0};
		size_t n = strlen(f->path);

		/* The index keeps one message, the first skip of the run that wrote it: this
		 * file's, or another's, which a job that does not read it must not show. */
		if (!strncmp(img->h.first_skip, f->path, n) && img->h.first_skip[n] == ':')
			snprintf(why.msg, sizeof(why.msg), "%s", img->h.first_skip);
		else
			snprintf(why.msg, sizeof(why.msg),
				 "%s: %llu bad records skipped (found when its index was built)",
				 f->path, (unsigned long long)en->skipped);
		sf__dataset_note_skips(ds, f->source, f->path, &why, en->skipped);
	}
	return 1;
}

/* By every field of the identity an entry is checked against: a file that took a deleted
 * one's inode keeps no entry of it. */
static int cmp_id(const void *a, const void *b)
{
	const struct sf_file_id *p = a, *q = b;
	const uint64_t xs[] = {p->dev, p->ino, p->size, p->mtime_ns, p->ctime_ns},
		       ys[] = {q->dev, q->ino, q->size, q->mtime_ns, q->ctime_ns};

	for (int i = 0; i < 5; i++)
		if (xs[i] != ys[i])
			return xs[i] < ys[i] ? -1 : 1;
	return 0;
}

/* The identities of the files in directory `dir` (after symlinks), sorted; NULL where it
 * cannot be listed (or out of memory). */
static struct sf_file_id *dir_ids(const char *dir, size_t *ret_n)
{
	DIR *d = opendir(dir);
	struct sf_file_id *ids = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;

	if (!d)
		return NULL;
	while ((de = readdir(d))) {
		struct stat st;

		if (fstatat(dirfd(d), de->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			struct sf_file_id *more =
				realloc(ids, (cap = cap ? 2 * cap : 64) * sizeof(*ids));

			if (!more) {
				free(ids);
				closedir(d);
				return NULL;
			}
			ids = more;
		}
		sf__file_id_of(&st, &ids[n++]);
	}
	closedir(d);
	qsort(ids, n, sizeof(*ids), cmp_id);
	*ret_n = n;
	return ids ? ids : malloc(1);
}

/*
 * The process's umask, which the index's mode honours as open() would have: read from
 * /proc (umask() itself sets it, which another thread could see); 022 where it is not
 * there.
 */
static mode_t process_umask(void)
{
	unsigned int mask = 022;
	char line[128];
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Umask: %o", &mask) == 1)
			break;
	if (f)
		fclose(f);
	return (mode_t)mask;
}

/* Temporary files of index `path` that writers killed over an hour ago left behind. */
static void remove_stale_temporaries(const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t dir_len = slash ? (size_t)(slash - path) : 0;
	char *dir = slash ? strndup(path, dir_len ? dir_len : 1) : strdup(".");
	const char *base = slash ? slash + 1 : path;
	size_t base_len = strlen(base);
	time_t now = time(NULL);
	struct dirent *de;
	DIR *d = dir ? opendir(dir) : NULL;

	while (d && (de = readdir(d))) {
		struct stat st;

		if (strncmp(de->d_name, base, base_len) ||
		    strncmp(de->d_name + base_len, ".tmp.", 5))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && st.st_mtime + 3600 < now)
			unlinkat(dirfd(d), de->d_name, 0);
	}
	if (d)
		closedir(d);
	free(dir);
}

/* Write the index to `path` (freed), through a temporary file. */
static int save_to(const struct sf_dataset *ds, const uint32_t *files, uint32_t n, uint64_t key,
		   const struct sf_index_image *old, char *path, char **ret_path,
		   uint64_t *ret_bytes)
{
	struct index_header h;
	struct index_file_entry *fe = NULL;
	struct index_chunk_entry *ce = NULL;
	struct sf_index_image *now = NULL;
	uint64_t nf = n, nc = 0, sum, *mine = NULL;
	char *tmp = NULL, *copy, *dir;
	int fd = -1, dir_fd = -1, r = -ENOMEM;
	FILE *out = NULL;
	sigset_t saved;
	bool held = false;

	/*
	 * What the index holds now, not what it held when this job started: another job over
	 * the directory may have saved since (its entries were lost to this save). Saves are
	 * serialized by a lock on the directory, where its file system has one; a lock held
	 * for more than a few seconds (not by a save) is not waited for.
	 */
	dir = dir_of(path);
	if (dir) {
		dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		for (int tries = 0; dir_fd >= 0 && tries < 500; tries++) {
			if (flock(dir_fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
				break;
			nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
		}
		free(dir);
	}
	copy = strdup(path);
	if (copy && load_from(ds, key, copy, &now))
		old = now;
	for (uint32_t i = 0; i < n; i++)
		nc += ds->text_files[files[i]].n_chunks;
	/* Entries of `old` for files this job does not read (another source over the same
	 * directory) are kept, so that two jobs over one directory do not undo each other;
	 * but not those of files gone from the directory (shards that rotate), which would
	 * otherwise be read and written by every start. mine[k]: 1 this job's, 2 gone. */
	if (old) {
		struct sf_file_id *present = NULL;
		size_t n_present = 0;

		mine = calloc(old->h.n_files + 1, sizeof(*mine));
		if (!mine)
			goto out;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t k = find_entry(old, path_hash(ds->text_files[files[i]].path));

			if (k != UINT64_MAX)
				mine[k] = 1;
		}
		for (uint64_t k = 0; k < old->h.n_files; k++) {
			const struct index_file_entry *f = &old->files[k];
			struct sf_file_id id = {f->dev, f->ino, f->size, f->mtime_ns, f->ctime_ns};

			if (mine[k])
				continue;
			if (!present) {
				char *d = dir_of(ds->text_files[files[0]].path);

				present = d ? dir_ids(d, &n_present) : NULL;
				free(d);
				if (!present)
					break; /* not listed: every entry stays */
			}
			if (!bsearch(&id, present, n_present, sizeof(*present), cmp_id))
				mine[k] = 2;
		}
		free(present);
		for (uint64_t k = 0; k < old->h.n_files; k++)
			if (!mine[k]) {
				nf++;
				nc += old->files[k].n_chunks;
			}
	}
	fe = calloc(nf + 1, sizeof(*fe));
	ce = calloc(nc + 1, sizeof(*ce));
	tmp = malloc(strlen(path) + 32);
	if (!fe || !ce || !tmp)
		goto out;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, INDEX_MAGIC, 8);
	h.version = INDEX_VERSION;
	h.chunk_bytes = SF_CHUNK_BYTES;
	h.key = key;
	h.n_files = nf;
	h.n_chunks = nc;
	if (ds->stats.skipped)
		snprintf(h.first_skip, sizeof(h.first_skip), "%s", ds->first_skip);
	else if (old)
		memcpy(h.first_skip, old->h.first_skip, sizeof(h.first_skip));
	nf = nc = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct sf_text_file *f = &ds->text_files[files[i]];
		struct index_file_entry *e = &fe[nf++];

		*e = (struct index_file_entry){.path_hash = path_hash(f->path),
					       .dev = f->id.dev,
					       .ino = f->id.ino,
					       .size = f->id.size,
					       .mtime_ns = f->id.mtime_ns,
					       .ctime_ns = f->id.ctime_ns,
					       .len = f->len,
					       .max_doc = f->max_doc,
					       .n_chunks = f->n_chunks,
					       .skipped = f->skipped,
					       .format = f->format,
					       .line_ends = f->line_ends,
					       .scanned = f->scanned,
					       .not_utf8 = f->not_utf8,
					       .nuls = f->nuls,
					       .first_odd = f->first_odd};
		for (uint64_t k = 0; k < f->n_chunks; k++) {
			const struct sf_chunk *c = &ds->chunks[f->first_chunk + k];

			ce[nc++] = (struct index_chunk_entry){.off = c->off,
							      .len = c->len,
							      .first_line = c->first_line,
							      .n_docs = c->n_docs,
							      .n_tokens = c->n_tokens};
		}
	}
	for (uint64_t k = 0; old && k < old->h.n_files; k++) {
		if (mine[k])
			continue;
		fe[nf++] = old->files[k];
		memcpy(&ce[nc], &old->chunks[old->first_chunk[k]],
		       old->files[k].n_chunks * sizeof(*ce));
		nc += old->files[k].n_chunks;
	}
	{
		XXH3_state_t xs;

		XXH3_64bits_reset(&xs);
		XXH3_64bits_update(&xs, &h, sizeof(h));
		XXH3_64bits_update(&xs, fe, nf * sizeof(*fe));
		XXH3_64bits_update(&xs, ce, nc * sizeof(*ce));
		sum = XXH3_64bits_digest(&xs);
	}
	/* A name of its own (a name by pid, left by a writer killed in a container whose
	 * launcher is always pid 1, made every later save fail on it); what killed writers
	 * left there over an hour ago goes. */
	remove_stale_temporaries(path);
	snprintf(tmp, strlen(path) + 32, "%s.tmp.XXXXXX", path);
	/* A write past RLIMIT_FSIZE raises SIGXFSZ, which kills: held, the write fails with
	 * EFBIG instead, and the index is only not cached. */
	held = sf__xfsz_hold(&saved);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0644 & ~process_umask()) < 0) {
		r = -errno;
		if (fd >= 0)
			unlink(tmp);
		goto out;
	}
	out = fdopen(fd, "w");
	if (!out) {
		r = -errno;
		unlink(tmp);
		goto out;
	}
	fd = -1;
	errno = 0;
	if (fwrite(&h, sizeof(h), 1, out) != 1 || fwrite(fe, sizeof(*fe), nf, out) != nf ||
	    fwrite(ce, sizeof(*ce), nc, out) != nc || fwrite(&sum, sizeof(sum), 1, out) != 1 ||
	    fflush(out) != 0 || fsync(fileno(out)) < 0) {
		/* ENOSPC of a full disk, not "Input/output error" for all (a review). */
		r = errno ? -errno : -EIO;
		unlink(tmp);
		goto out;
	}
	if (rename(tmp, path) < 0) {
		r = -errno;
		unlink(tmp);
		goto out;
	}
	*ret_bytes = sizeof(h) + nf * sizeof(*fe) + nc * sizeof(*ce) + sizeof(sum);
	*ret_path = path;
	path = NULL;
	r = 0;
out:
	if (out)
		fclose(out);
	if (fd >= 0)
		close(fd);
	if (dir_fd >= 0)
		close(dir_fd);
	sf__index_image_free(now);
	sf__xfsz_release(held, &saved);
	free(fe);
	free(ce);
	free(mine);
	free(tmp);
	free(path);
	return r;
}

int sf__index_save(const struct sf_dataset *ds, const uint32_t *files, uint32_t n, uint64_t key,
		   const struct sf_index_image *old, char **ret_path, uint64_t *ret_bytes)
{
	const struct sf_text_file *f = &ds->text_files[files[0]];
	char *path;
	int r;

	if (ds->sources[f->source].index == SF_INDEX_BESIDE &&
	    (path = index_path(f, key, 1, 0, NULL)) &&
	    save_to(ds, files, n, key, old, path, ret_path, ret_bytes) == 0)
		return 0;
	path = index_path(f, key, 0, 1, &r);
	return path ? save_to(ds, files, n, key, old, path, ret_path, ret_bytes) : r;
}
