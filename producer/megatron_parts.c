/*
 * Tokenize parts: the manifest each part writes beside its Megatron pair, and the merge
 * that checks the parts against their manifests and concatenates them (see
 * megatron_parts.h for the manifest's fields). The merge streams every file in pieces,
 * so it needs little memory however large the parts; it reads each .bin once (hashing
 * while copying) and each .idx twice (hash, then check and copy).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "common/json_escape.h"
#include "common/log.h"
#include "common/sha256.h"
#include "producer/dataset_impl.h"
#include "producer/json.h"
#include "producer/megatron_parts.h"
#include "producer/tokenizer/unicode.h"

#define MANIFEST_FORMAT	 "shmfeed-tokenize-part"
#define MANIFEST_VERSION 1
#define MANIFEST_MAX	 65536
#define IDX_HEADER	 34 /* magic 9, version 8, dtype 1, sequences 8, documents 8 */
#define COPY_BYTES	 (1u << 20)
#define IDX_BLOCK	 65536u /* index entries read at once */
#define MEGATRON_INT32	 4
#define MEGATRON_UINT16	 8

struct manifest {
	char *prefix;
	uint64_t dev, ino; /* the manifest file's identity: one part under two names */
	char digest[33];
	char bin_sha[65];
	char idx_sha[65];
	uint32_t part;
	uint32_t n_parts;
	uint32_t width; /* bytes per token */
	uint64_t docs;
	uint64_t tokens;
	uint64_t bin_bytes;
	uint64_t idx_bytes;
	uint64_t skipped;      /* records and files the part skipped (on_error: skip) */
	char first_skip[1024]; /* the first one's message */
};

int sf__part_prefix(const char *prefix, uint32_t part, uint32_t n_parts, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s_%05u-of-%05u", prefix, part, n_parts);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static void hex_of(const unsigned char *p, size_t n, char *ret_hex)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		ret_hex[2 * i] = hex[p[i] >> 4];
		ret_hex[2 * i + 1] = hex[p[i] & 15];
	}
	ret_hex[2 * n] = '\0';
}

static void config_digest(const struct sf_part_plan *plan, const struct sf_dataset *ds,
			  char ret_hex[33])
{
	uint32_t words[2] = {ds->token_bytes, ds->eot};
	XXH3_state_t st;
	XXH128_canonical_t c;

	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, plan->listing_digest, sizeof(plan->listing_digest));
	XXH3_128bits_update(&st, &ds->tok_digest, sizeof(ds->tok_digest));
	XXH3_128bits_update(&st, words, sizeof(words));
	/* From stream version 2 on (common/config.h): parts tokenized by shmfeeds that
	 * tokenize otherwise do not merge. The digests of version 1 stay what they were. */
	if (SF_STREAM_VERSION > 1) {
		const uint32_t stream = SF_STREAM_VERSION;

		XXH3_128bits_update(&st, &stream, sizeof(stream));
	}
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
	hex_of(c.digest, sizeof(c.digest), ret_hex);
}

/*
 * The SHA-256 and size of `path`; when out_fd >= 0, also copies the file to out_fd at
 * out_off as it reads it.
 */
static int hash_file(const char *path, int out_fd, uint64_t out_off, char ret_hex[65],
		     uint64_t *ret_bytes, struct sf_err *e)
{
	unsigned char *buf = malloc(COPY_BYTES), digest[32];
	struct sf_sha256 sha;
	uint64_t total = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (!buf || fd < 0) {
		r = fd < 0 ? sf__err(e, -errno, "%s: cannot open: %s", path, strerror(errno))
			   : sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	sf__sha256_init(&sha);
	for (;;) {
		ssize_t n = read(fd, buf, COPY_BYTES);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = sf__err(e, -errno, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		sf__sha256_update(&sha, buf, (size_t)n);
		if (out_fd >= 0) {
			r = sf__pwrite_full(out_fd, buf, (size_t)n, out_off + total);
			if (r < 0) {
				r = sf__err(e, r, "cannot write the merged .bin: %s%s",
					    strerror(-r), sf__fsize_hint(r));
				goto out;
			}
		}
		total += (uint64_t)n;
	}
	sf__sha256_final(&sha, digest);
	sf__sha256_hex(digest, ret_hex);
	*ret_bytes = total;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return r;
}

static char *path_with(const char *prefix, const char *ext)
{
	size_t n = strlen(prefix) + strlen(ext) + 1;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s%s", prefix, ext);
	return p;
}

/* Whether a file the merge writes is a part's file, under any name ("./p" for "p"). */
static int output_is_part(const char *prefix, const struct manifest *ms, size_t n, struct sf_err *e)
{
	static const char *const out_ext[] = {".bin", ".idx", ".bin.tmp", ".idx.tmp"};
	static const char *const part_ext[] = {".bin", ".idx", ".json"};
	struct stat out, in;
	int r = 0;

	for (size_t i = 0; i < 4 && r == 0; i++) {
		char *o = path_with(prefix, out_ext[i]);

		if (!o)
			return sf__err(e, -ENOMEM, "out of memory");
		for (size_t j = 0; j < n && r == 0 && stat(o, &out) == 0; j++)
			for (size_t k = 0; k < 3 && r == 0; k++) {
				char *p = path_with(ms[j].prefix, part_ext[k]);

				if (!p)
					r = sf__err(e, -ENOMEM, "out of memory");
				else if (stat(p, &in) == 0 && in.st_dev == out.st_dev &&
					 in.st_ino == out.st_ino)
					r = sf__err(e, SF_E_CONFIG,
						    "%s: the output cannot be one of the parts (%s "
						    "is %s)",
						    prefix, o, p);
				free(p);
			}
		free(o);
	}
	return r;
}

/* `s` with each byte that starts no valid UTF-8 character as '?': JSON text is UTF-8. */
static void utf8_only(const char *s, char *out)
{
	size_t n = strlen(s), i = 0;

	while (i < n) {
		uint32_t cp;
		size_t len = sf__utf8_next((const uint8_t *)s + i, n - i, &cp);

		if (cp == SF_UC_INVALID)
			*out++ = '?';
		else
			memcpy(out, s + i, len), out += len;
		i += len;
	}
	*out = '\0';
}

int sf__part_manifest_write(const char *part_prefix, const struct sf_part_plan *plan,
			    const struct sf_dataset *ds, struct sf_err *e)
{
	char *bin = path_with(part_prefix, ".bin"), *idx = path_with(part_prefix, ".idx");
	char *json = path_with(part_prefix, ".json"), *tmp = path_with(part_prefix, ".json.tmp");
	char digest[33], bin_sha[65], idx_sha[65];
	/* Escaped, a character takes at most 6 bytes (\u00XX): room for all of it. */
	char skip[sizeof(ds->first_skip)], first_skip[6 * sizeof(ds->first_skip) + 3];
	size_t skip_len = 0;
	uint64_t bin_bytes, idx_bytes;
	FILE *f = NULL;
	int fd, r;

	if (!bin || !idx || !json || !tmp) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	config_digest(plan, ds, digest);
	r = hash_file(bin, -1, 0, bin_sha, &bin_bytes, e);
	if (r >= 0)
		r = hash_file(idx, -1, 0, idx_sha, &idx_bytes, e);
	if (r < 0)
		goto out;
	fd = sf__create_fresh(tmp);
	f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		r = fd < 0 ? fd : -errno;
		if (fd >= 0)
			close(fd);
		r = sf__err(e, r, "%s: cannot create: %s", tmp, strerror(-r));
		goto out;
	}
	utf8_only(ds->first_skip, skip);
	sf__json_escape(first_skip, sizeof(first_skip), &skip_len, skip);
	errno = 0;
	fprintf(f,
		"{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"config_digest\": \"%s\",\n"
		"  \"part\": %u,\n  \"parts\": %u,\n  \"documents\": %llu,\n  \"tokens\": %llu,\n"
		"  \"dtype\": \"%s\",\n  \"text_bytes\": %llu,\n  \"bin_bytes\": %llu,\n"
		"  \"bin_sha256\": \"%s\",\n  \"idx_bytes\": %llu,\n  \"idx_sha256\": \"%s\",\n"
		"  \"skipped\": %llu,\n  \"first_skip\": %s\n}\n",
		MANIFEST_FORMAT, MANIFEST_VERSION, digest, plan->part, plan->n_parts,
		(unsigned long long)ds->stats.n_docs, (unsigned long long)ds->n_tokens,
		ds->token_bytes == 2 ? "uint16" : "int32", (unsigned long long)ds->stats.text_bytes,
		(unsigned long long)bin_bytes, bin_sha, (unsigned long long)idx_bytes, idx_sha,
		(unsigned long long)ds->stats.skipped, first_skip);
	r = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0 ? -(errno ? errno : EIO) : 0;
	if (fclose(f) != 0 && r == 0)
		r = -(errno ? errno : EIO);
	if (r < 0) {
		r = sf__err(e, r, "%s: cannot write: %s%s", tmp, strerror(-r), sf__fsize_hint(r));
		unlink(tmp);
		goto out;
	}
	if (rename(tmp, json) < 0) {
		r = sf__err(e, -errno, "%s: cannot rename into place: %s", json, strerror(errno));
		unlink(tmp);
	}
out:
	free(bin);
	free(idx);
	free(json);
	free(tmp);
	return r;
}

/* ---- merge ---- */

/* The unsigned number after "key": in a manifest already validated as JSON. */
static int json_number(const char *text, const char *key, uint64_t *ret)
{
	char pat[64];
	const char *p;
	char *end;
	unsigned long long v;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(text, pat);
	if (!p)
		return -1;
	p += strlen(pat);
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p++ != ':')
		return -1;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p < '0' || *p > '9')
		return -1;
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno || (*end != ',' && *end != '}' && *end != ' ' && *end != '\n'))
		return -1;
	*ret = v;
	return 0;
}

static int json_string(const char *text, size_t len, const char *key, char *out, size_t out_len,
		       char *scratch)
{
	size_t n, at;
	const char *what;

	if (sf__json_field(text, len, key, scratch, &n, &at, &what) != SF_JSON_OK ||
	    n + 1 > out_len)
		return -1;
	memcpy(out, scratch, n);
	out[n] = '\0';
	return 0;
}

static int is_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/*
 * The length of `prefix` less its _IIIII-of-NNNNN, the part and count there, or 0 for a
 * name tokenize did not make.
 */
static size_t part_name(const char *prefix, unsigned *ret_part, unsigned *ret_parts)
{
	const char *us = strrchr(prefix, '_');
	int end = 0;

	if (!us || sscanf(us, "_%5u-of-%5u%n", ret_part, ret_parts, &end) != 2 || us[end] != '\0' ||
	    strlen(us) != strlen("_00000-of-00000"))
		return 0;
	return (size_t)(us - prefix);
}

static size_t part_stem(const char *prefix)
{
	unsigned part, parts;

	return part_name(prefix, &part, &parts);
}

/*
 * A part named as tokenize names it (PREFIX_IIIII-of-NNNNN) whose manifest says another
 * part: the merge orders parts by their manifests, so two manifests edited (or swapped)
 * gave a merged dataset in another order, without a word. A part renamed otherwise is
 * taken by its manifest.
 */
static int name_agrees(const struct manifest *m, struct sf_err *e)
{
	unsigned part, parts;

	if (!part_name(m->prefix, &part, &parts) || (part == m->part && parts == m->n_parts))
		return 0;
	return sf__err(e, SF_E_CONFIG,
		       "%s: its manifest says part %u of %u, its name part %u of %u: a manifest "
		       "edited or moved to another part's name; tokenize that part again",
		       m->prefix, m->part, m->n_parts, part, parts);
}

static int read_manifest(struct manifest *m, struct sf_err *e)
{
	char *path = path_with(m->prefix, ".json"), *text = malloc(MANIFEST_MAX + 1),
	     *scratch = malloc(MANIFEST_MAX + 1), kind[64] = "", dtype[16] = "";
	uint64_t version = 0, part = 0, parts = 0;
	struct stat st;
	size_t len = 0;
	FILE *f = NULL;
	int r = 0;

	if (!path || !text || !scratch) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	f = fopen(path, "r");
	if (!f) {
		r = sf__err(e, SF_E_CONFIG,
			    "%s: no manifest (%s): the part did not finish, or "
			    "this is not a part",
			    path, strerror(errno));
		goto out;
	}
	if (fstat(fileno(f), &st) == 0) {
		m->dev = (uint64_t)st.st_dev;
		m->ino = (uint64_t)st.st_ino;
	}
	len = fread(text, 1, MANIFEST_MAX + 1, f);
	text[len > MANIFEST_MAX ? MANIFEST_MAX : len] = '\0';
	if (len > MANIFEST_MAX || json_string(text, len, "format", kind, sizeof(kind), scratch) ||
	    strcmp(kind, MANIFEST_FORMAT) || json_number(text, "version", &version) ||
	    json_number(text, "part", &part) || json_number(text, "parts", &parts) ||
	    json_number(text, "documents", &m->docs) || json_number(text, "tokens", &m->tokens) ||
	    json_number(text, "bin_bytes", &m->bin_bytes) ||
	    json_number(text, "idx_bytes", &m->idx_bytes) ||
	    json_string(text, len, "dtype", dtype, sizeof(dtype), scratch) ||
	    json_string(text, len, "config_digest", m->digest, sizeof(m->digest), scratch) ||
	    json_string(text, len, "bin_sha256", m->bin_sha, sizeof(m->bin_sha), scratch) ||
	    json_string(text, len, "idx_sha256", m->idx_sha, sizeof(m->idx_sha), scratch) ||
	    !is_hex(m->digest, 32) || !is_hex(m->bin_sha, 64) || !is_hex(m->idx_sha, 64)) {
		r = sf__err(e, SF_E_CONFIG, "%s: not a tokenize part manifest", path);
		goto out;
	}
	if (version != MANIFEST_VERSION) {
		r = sf__err(e, SF_E_CONFIG, "%s: manifest version %llu, this shmfeed reads %d",
			    path, (unsigned long long)version, MANIFEST_VERSION);
		goto out;
	}
	if (parts == 0 || parts > SF_MAX_PARTS || part >= parts ||
	    (strcmp(dtype, "uint16") && strcmp(dtype, "int32"))) {
		r = sf__err(e, SF_E_CONFIG, "%s: part %llu of %llu, dtype %s: out of range", path,
			    (unsigned long long)part, (unsigned long long)parts, dtype);
		goto out;
	}
	m->part = (uint32_t)part;
	m->n_parts = (uint32_t)parts;
	m->width = strcmp(dtype, "uint16") ? 4 : 2;
	/* Manifests before stop 46 have no skip count. */
	if (json_number(text, "skipped", &m->skipped))
		m->skipped = 0;
	if (json_string(text, len, "first_skip", m->first_skip, sizeof(m->first_skip), scratch))
		m->first_skip[0] = '\0';
	r = name_agrees(m, e);
out:
	if (f)
		fclose(f);
	free(path);
	free(text);
	free(scratch);
	return r;
}

/* A part's prefix from an argument: its prefix, or its .bin, .idx or .json path. */
static char *prefix_of(const char *arg)
{
	static const char *const ext[] = {".json", ".bin", ".idx"};
	size_t n = strlen(arg);

	for (size_t i = 0; i < 3; i++) {
		size_t m = strlen(ext[i]);

		if (n > m && !strcmp(arg + n - m, ext[i])) {
			n -= m;
			break;
		}
	}
	return strndup(arg, n);
}

static int cmp_part(const void *a, const void *b)
{
	const struct manifest *x = a, *y = b;

	return (x->part > y->part) - (x->part < y->part);
}

/* Every check between the manifests: one corpus, one count, each part once. */
static int check_set(struct manifest *ms, size_t n, struct sf_err *e)
{
	qsort(ms, n, sizeof(*ms), cmp_part);
	for (size_t i = 0; i < n; i++) {
		if (ms[i].width != ms[0].width)
			return sf__err(e, SF_E_CONFIG,
				       "%s holds %s tokens and %s %s: not parts of one "
				       "tokenization",
				       ms[0].prefix, ms[0].width == 2 ? "uint16" : "int32",
				       ms[i].prefix, ms[i].width == 2 ? "uint16" : "int32");
		if (strcmp(ms[i].digest, ms[0].digest) || ms[i].n_parts != ms[0].n_parts)
			return sf__err(e, SF_E_CONFIG,
				       "%s (config %s, %u parts) and %s (config %s, %u parts) are "
				       "not parts of one tokenization: same config and corpus, "
				       "same part count needed",
				       ms[0].prefix, ms[0].digest, ms[0].n_parts, ms[i].prefix,
				       ms[i].digest, ms[i].n_parts);
		if (i && ms[i].part == ms[i - 1].part)
			return sf__err(e, SF_E_CONFIG, "%s and %s are both part %u of %u",
				       ms[i - 1].prefix, ms[i].prefix, ms[i].part, ms[i].n_parts);
	}
	for (uint32_t p = 0; p < ms[0].n_parts; p++)
		if (p >= n || ms[p].part != p)
			return sf__err(e, SF_E_CONFIG,
				       "part %u of %u is missing (%zu of %u parts given)", p,
				       ms[0].n_parts, n, ms[0].n_parts);
	return 0;
}

/*
 * Check part `m`'s index (whose size check_counts() held to its manifest) against its
 * manifest and its own structure (the form
 * sf__dataset_write_megatron() writes: one sequence per document, pointers packed,
 * document indices 0..n) and copy its lengths and shifted pointers into the merged
 * index `out` holding `total_docs` documents, at document `first_doc` and .bin byte
 * `first_byte`.
 */
static int merge_index(const struct manifest *m, int out, uint64_t total_docs, uint64_t first_doc,
		       uint64_t first_byte, struct sf_err *e)
{
	char *path = path_with(m->prefix, ".idx");
	unsigned char head[IDX_HEADER];
	int32_t *lens = malloc(IDX_BLOCK * sizeof(int32_t));
	int64_t *ptrs = malloc(IDX_BLOCK * sizeof(int64_t));
	uint64_t n_seq, n_doc, version, ptr = 0;
	int fd = -1, r = 0;

	if (!path || !lens || !ptrs) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = sf__err(e, -errno, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	if (sf__pread_full(fd, head, sizeof(head), 0) < 0)
		goto bad;
	memcpy(&version, head + 9, 8);
	memcpy(&n_seq, head + 18, 8);
	memcpy(&n_doc, head + 26, 8);
	if (memcmp(head, "MMIDIDX\0\0", 9) || version != 1 ||
	    head[17] != (m->width == 2 ? MEGATRON_UINT16 : MEGATRON_INT32) || n_seq != m->docs ||
	    n_doc != n_seq + 1)
		goto bad;
	for (uint64_t i = 0; i < n_seq; i += IDX_BLOCK) {
		uint64_t k = n_seq - i < IDX_BLOCK ? n_seq - i : IDX_BLOCK;

		if (sf__pread_full(fd, lens, k * 4, IDX_HEADER + i * 4) < 0 ||
		    sf__pread_full(fd, ptrs, k * 8, IDX_HEADER + n_seq * 4 + i * 8) < 0)
			goto bad;
		for (uint64_t j = 0; j < k; j++) {
			if (lens[j] < 0 || (uint64_t)ptrs[j] != ptr)
				goto bad;
			ptrs[j] = (int64_t)(first_byte + ptr);
			ptr += (uint64_t)lens[j] * m->width;
		}
		r = sf__pwrite_full(out, lens, k * 4, IDX_HEADER + (first_doc + i) * 4);
		if (r >= 0)
			r = sf__pwrite_full(out, ptrs, k * 8,
					    IDX_HEADER + total_docs * 4 + (first_doc + i) * 8);
		if (r < 0) {
			r = sf__err(e, r, "cannot write the merged .idx: %s%s", strerror(-r),
				    sf__fsize_hint(r));
			goto out;
		}
	}
	for (uint64_t i = 0; i <= n_seq; i += IDX_BLOCK) {
		uint64_t k = n_seq + 1 - i < IDX_BLOCK ? n_seq + 1 - i : IDX_BLOCK;

		if (sf__pread_full(fd, ptrs, k * 8, IDX_HEADER + n_seq * 12 + i * 8) < 0)
			goto bad;
		for (uint64_t j = 0; j < k; j++)
			if ((uint64_t)ptrs[j] != i + j)
				goto bad;
	}
	if (ptr != m->bin_bytes)
		goto bad;
	goto out;
bad:
	r = sf__err(e, SF_E_CONFIG, "%s: not the index its manifest describes", path);
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(lens);
	free(ptrs);
	return r;
}

static int write_merged_header(int fd, uint32_t width, uint64_t total_docs, struct sf_err *e)
{
	unsigned char head[IDX_HEADER];
	uint64_t v = 1, n_doc = total_docs + 1;
	int64_t *doc_idx = malloc(IDX_BLOCK * sizeof(int64_t));
	int r;

	if (!doc_idx)
		return sf__err(e, -ENOMEM, "out of memory");
	memcpy(head, "MMIDIDX\0\0", 9);
	memcpy(head + 9, &v, 8);
	head[17] = width == 2 ? MEGATRON_UINT16 : MEGATRON_INT32;
	memcpy(head + 18, &total_docs, 8);
	memcpy(head + 26, &n_doc, 8);
	r = sf__pwrite_full(fd, head, sizeof(head), 0);
	for (uint64_t i = 0; i <= total_docs && r >= 0; i += IDX_BLOCK) {
		uint64_t k = total_docs + 1 - i < IDX_BLOCK ? total_docs + 1 - i : IDX_BLOCK;

		for (uint64_t j = 0; j < k; j++)
			doc_idx[j] = (int64_t)(i + j);
		r = sf__pwrite_full(fd, doc_idx, k * 8, IDX_HEADER + total_docs * 12 + i * 8);
	}
	free(doc_idx);
	return r < 0 ? sf__err(e, r, "cannot write the merged .idx: %s%s", strerror(-r),
			       sf__fsize_hint(r))
		     : 0;
}

/*
 * Whether part `m`'s manifest adds up, and its files are as long as it says: the merge
 * sizes its outputs from the manifests' counts before it reads a part, so that a count
 * of 10^10 documents would have it write 80 GB before any check failed.
 */
static int check_counts(const struct manifest *m, struct sf_err *e)
{
	char *bin = path_with(m->prefix, ".bin"), *idx = path_with(m->prefix, ".idx");
	struct stat sb, si;
	bool no_bin = false;
	int r = 0;

	if (!bin || !idx) {
		r = sf__err(e, -ENOMEM, "out of memory");
	} else if (m->docs > (UINT64_MAX - IDX_HEADER - 8) / 20 ||
		   m->tokens > UINT64_MAX / m->width ||
		   m->idx_bytes != IDX_HEADER + m->docs * 20 + 8 ||
		   m->bin_bytes != m->tokens * m->width) {
		r = sf__err(e, SF_E_CONFIG,
			    "%s.json: its manifest says %llu documents and %llu tokens of %u "
			    "bytes (an index of %llu bytes, a .bin of %llu), which do not add up",
			    m->prefix, (unsigned long long)m->docs, (unsigned long long)m->tokens,
			    m->width, (unsigned long long)m->idx_bytes,
			    (unsigned long long)m->bin_bytes);
	} else if ((no_bin = stat(bin, &sb) < 0) || stat(idx, &si) < 0) {
		/* errno is that of the stat() that failed (the second runs only after the first
		 * succeeded); it was evaluated beside a third stat(), in no set order. */
		r = sf__err(e, SF_E_CONFIG, "%s: missing (%s), which its manifest %s.json lists",
			    no_bin ? bin : idx, strerror(errno), m->prefix);
	} else if ((uint64_t)sb.st_size != m->bin_bytes || (uint64_t)si.st_size != m->idx_bytes) {
		const bool b = (uint64_t)sb.st_size != m->bin_bytes;

		r = sf__err(e, SF_E_CONFIG, "%s: %llu bytes, where its manifest %s.json says %llu",
			    b ? bin : idx, (unsigned long long)(b ? sb.st_size : si.st_size),
			    m->prefix, (unsigned long long)(b ? m->bin_bytes : m->idx_bytes));
	}
	free(bin);
	free(idx);
	return r;
}

static int cmp_stem(const void *a, const void *b)
{
	const struct manifest *x = a, *y = b;
	const size_t nx = part_stem(x->prefix), ny = part_stem(y->prefix);
	const int c = strncmp(x->prefix, y->prefix, nx < ny ? nx : ny);

	return c ? c : (nx > ny) - (nx < ny);
}

/* A listed path of a part that has its manifest: the part's prefix, the path's index. */
struct listed {
	char *prefix;
	size_t i;
	bool json; /* the path is the manifest */
};

static int cmp_listed(const void *a, const void *b)
{
	const struct listed *x = a, *y = b;
	const int c = strcmp(x->prefix, y->prefix);

	return c ? c : (x->json > y->json) - (x->json < y->json);
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What a part that did not finish leaves (its .bin.tmp, .idx.tmp, .json.tmp or
 * .lock.PID.tmp), or one still running or killed after its manifest holds (its .lock):
 * no part, though a glob PREFIX_* takes it. */
static bool part_leftover(const char *path)
{
	const size_t len = strlen(path);

	return (len > 4 && !strcmp(path + len - 4, ".tmp")) ||
	       (len > 5 && !strcmp(path + len - 5, ".lock"));
}

/* Whether `path` is a leftover of the part `prefix`: PREFIX.lock, PREFIX.bin.tmp, ... */
static bool left_by(const char *path, const char *prefix)
{
	const size_t n = strlen(prefix);

	return !strncmp(path, prefix, n) && path[n] == '.';
}

/*
 * A source that lists parts reads one set of them and nothing else, as a merge of the same
 * names takes them: a glob `PREFIX_*` that also caught an older pair or a set under a
 * longer name read those too, where the merge refused them (a review). `ms` (k of them)
 * sorted by stem; part[i]: paths[i] is a part's.
 */
static int one_set_only(char *const *paths, size_t n, const bool *part, const struct manifest *ms,
			size_t k, struct sf_err *e)
{
	const int stem = (int)part_stem(ms[0].prefix);

	if (cmp_stem(&ms[0], &ms[k - 1]))
		return sf__err(e, SF_E_CONFIG,
			       "the %u parts of %.*s and the %u parts of %.*s in one source: a "
			       "source reads one set of parts, as a merge takes one (make each "
			       "set a source of its own)",
			       ms[0].n_parts, stem, ms[0].prefix, ms[k - 1].n_parts,
			       (int)part_stem(ms[k - 1].prefix), ms[k - 1].prefix);
	for (size_t i = 0; i < n; i++)
		if (!part[i])
			return sf__err(e, SF_E_CONFIG,
				       "%s, which is no part, and the %u parts of %.*s in one "
				       "source: a source of parts reads them alone, as their merge "
				       "does (name them %.*s_*-of-%05u.bin, and the other files as "
				       "a source of their own)",
				       paths[i], ms[0].n_parts, stem, ms[0].prefix, stem,
				       ms[0].prefix, ms[0].n_parts);
	return 0;
}

int sf__parts_sources(char **paths, size_t *n, bool whole, struct sf_err *e)
{
	struct listed *ls = calloc(*n + 1, sizeof(*ls));
	struct manifest *ms = NULL;
	bool *drop = calloc(*n + 1, sizeof(*drop)), *part = calloc(*n + 1, sizeof(*part));
	size_t nl = 0, k = 0, kept = 0;
	bool renamed = false;
	int r = 0;

	if (!ls || !drop || !part) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < *n && r == 0; i++) {
		const size_t len = strlen(paths[i]);
		char *prefix = prefix_of(paths[i]), *json = NULL;

		if (!prefix || !(json = path_with(prefix, ".json"))) {
			r = sf__err(e, -ENOMEM, "out of memory");
		} else if (part_stem(prefix) && access(json, F_OK) == 0) {
			ls[nl++] = (struct listed){prefix, i,
						   len > 5 && !strcmp(paths[i] + len - 5, ".json")};
			part[i] = true;
			prefix = NULL;
		}
		free(prefix);
		free(json);
	}
	/* What a listed part left is skipped, as their merge skips it (a source refused it
	 * as no part: a review); another file of such a name is no part. */
	for (size_t i = 0; nl && i < *n; i++)
		for (size_t j = 0; !part[i] && part_leftover(paths[i]) && j < nl; j++)
			if (left_by(paths[i], ls[j].prefix))
				drop[i] = part[i] = true;
	/* Each part once, its pair before its manifest, which goes with the pair. */
	qsort(ls, nl, sizeof(*ls), cmp_listed);
	if (r == 0 && whole && !(ms = calloc(nl + 1, sizeof(*ms))))
		r = sf__err(e, -ENOMEM, "out of memory");
	for (size_t a = 0, b; r == 0 && a < nl; a = b) {
		for (b = a + 1; b < nl && !strcmp(ls[a].prefix, ls[b].prefix); b++)
			drop[ls[b].i] = ls[b].json && !ls[a].json;
		/* A part named by its manifest alone is read as its pair, by its prefix. */
		if (ls[a].json) {
			char *pair = strdup(ls[a].prefix);

			if (!pair) {
				r = sf__err(e, -ENOMEM, "out of memory");
				break;
			}
			free(paths[ls[a].i]);
			paths[ls[a].i] = pair;
			renamed = true;
		}
		if (whole) {
			ms[k].prefix = ls[a].prefix;
			ls[a].prefix = NULL;
			r = read_manifest(&ms[k++], e);
		}
	}
	/* Each name's set of parts, whole, once, of one tokenization, with its files. */
	if (r == 0 && whole && k)
		qsort(ms, k, sizeof(*ms), cmp_stem);
	for (size_t a = 0, b; r == 0 && whole && a < k; a = b) {
		for (b = a + 1; b < k && !cmp_stem(&ms[a], &ms[b]);)
			b++;
		r = check_set(ms + a, b - a, e);
		for (size_t i = a; r == 0 && i < b; i++)
			r = check_counts(&ms[i], e);
	}
	if (r == 0 && whole && k)
		r = one_set_only(paths, *n, part, ms, k, e);
	for (size_t i = 0; r == 0 && i < *n; i++) {
		if (drop[i])
			free(paths[i]);
		else
			paths[kept++] = paths[i];
	}
	if (r == 0)
		*n = kept;
	if (r == 0 && renamed)
		qsort(paths, *n, sizeof(*paths), cmp_path);
out:
	for (size_t i = 0; i < nl; i++)
		free(ls[i].prefix);
	for (size_t i = 0; i < k; i++)
		free(ms[i].prefix);
	free(ls);
	free(ms);
	free(drop);
	free(part);
	return r;
}

int sf__parts_merge(char *const *args, size_t n_args, const char *prefix, uint64_t *ret_docs,
		    uint64_t *ret_tokens, struct sf_err *e)
{
	struct manifest *ms = calloc(n_args + 1, sizeof(*ms));
	char *bin = path_with(prefix, ".bin"), *idx = path_with(prefix, ".idx");
	char *bin_tmp = path_with(prefix, ".bin.tmp"), *idx_tmp = path_with(prefix, ".idx.tmp");
	uint64_t total_docs = 0, total_tokens = 0, doc = 0, byte = 0;
	size_t n = 0;
	int bin_fd = -1, idx_fd = -1, r = 0;
	const char *failed;

	if (!ms || !bin || !idx || !bin_tmp || !idx_tmp) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n_args; i++) {
		char *p;
		size_t j;

		/* If that part is missing, the check below says so. */
		if (part_leftover(args[i]))
			continue;
		p = prefix_of(args[i]);
		if (!p) {
			r = sf__err(e, -ENOMEM, "out of memory");
			goto out;
		}
		for (j = 0; j < n && strcmp(ms[j].prefix, p); j++)
			;
		if (j < n) {
			free(p);
			continue;
		}
		ms[n].prefix = p;
		r = read_manifest(&ms[n++], e);
		if (r < 0)
			goto out;
		/* The same manifest reached by another path ("./a" and "a") counts once. */
		for (j = 0; j + 1 < n; j++)
			if (ms[j].dev == ms[n - 1].dev && ms[j].ino == ms[n - 1].ino)
				break;
		if (j + 1 < n)
			free(ms[--n].prefix);
	}
	if (n == 0) {
		r = sf__err(e, SF_E_CONFIG, "no parts to merge");
		goto out;
	}
	r = output_is_part(prefix, ms, n, e);
	if (r < 0)
		goto out;
	r = check_set(ms, n, e);
	if (r < 0)
		goto out;
	/* What a part skipped, one-shot tokenize skips too when the cause is in the data (a
	 * bad record); not when it was the part's machine (a file it could not read). */
	for (size_t i = 0; i < n; i++)
		if (ms[i].skipped)
			sf__log_error("warning: part %u of %u skipped %llu records or files "
				      "(on_error: skip); the first: %s",
				      ms[i].part, ms[i].n_parts, (unsigned long long)ms[i].skipped,
				      ms[i].first_skip[0] ? ms[i].first_skip : "(not said)");
	for (size_t i = 0; i < n; i++) {
		r = check_counts(&ms[i], e);
		if (r < 0)
			goto out;
		if (ms[i].docs > UINT64_MAX / 32 - total_docs ||
		    ms[i].tokens > UINT64_MAX / 8 - total_tokens) {
			r = sf__err(e, SF_E_CONFIG, "the parts' documents or tokens add up past 2^59");
			goto out;
		}
		total_docs += ms[i].docs;
		total_tokens += ms[i].tokens;
	}
	/* Parts may be empty; a whole corpus may not (as a one-shot tokenize refuses it). */
	if (!total_tokens) {
		r = sf__err(e, SF_E_SOURCE,
			    "the %zu part%s hold no token: the corpus had none to write", n,
			    n == 1 ? "" : "s");
		goto out;
	}
	bin_fd = sf__create_fresh(bin_tmp);
	idx_fd = bin_fd < 0 ? -1 : sf__create_fresh(idx_tmp);
	if (bin_fd < 0 || idx_fd < 0) {
		r = bin_fd < 0 ? bin_fd : idx_fd;
		r = sf__err(e, r, "%s: cannot create: %s", bin_fd < 0 ? bin_tmp : idx_tmp,
			    strerror(-r));
		goto out;
	}
	r = write_merged_header(idx_fd, ms[0].width, total_docs, e);
	for (size_t i = 0; i < n && r >= 0; i++) {
		char sha[65], *part_bin = path_with(ms[i].prefix, ".bin"),
			      *part_idx = path_with(ms[i].prefix, ".idx");
		uint64_t bytes;

		if (!part_bin || !part_idx) {
			r = sf__err(e, -ENOMEM, "out of memory");
		} else if ((r = hash_file(part_idx, -1, 0, sha, &bytes, e)) >= 0 &&
			   (bytes != ms[i].idx_bytes || strcmp(sha, ms[i].idx_sha))) {
			r = sf__err(e, SF_E_CONFIG,
				    "%s: %llu bytes, SHA-256 %s; its manifest says %llu bytes, %s",
				    part_idx, (unsigned long long)bytes, sha,
				    (unsigned long long)ms[i].idx_bytes, ms[i].idx_sha);
		} else if (r >= 0 && (r = hash_file(part_bin, bin_fd, byte, sha, &bytes, e)) >= 0 &&
			   (bytes != ms[i].bin_bytes || strcmp(sha, ms[i].bin_sha))) {
			r = sf__err(e, SF_E_CONFIG,
				    "%s: %llu bytes, SHA-256 %s; its manifest says %llu bytes, %s",
				    part_bin, (unsigned long long)bytes, sha,
				    (unsigned long long)ms[i].bin_bytes, ms[i].bin_sha);
		} else if (r >= 0) {
			r = merge_index(&ms[i], idx_fd, total_docs, doc, byte, e);
		}
		free(part_bin);
		free(part_idx);
		doc += ms[i].docs;
		byte += ms[i].bin_bytes;
	}
	if (r < 0)
		goto out;
	if (fsync(bin_fd) < 0 || fsync(idx_fd) < 0) {
		r = sf__err(e, -errno, "%s: cannot write: %s%s", prefix, strerror(errno),
			    sf__fsize_hint(errno));
		goto out;
	}
	r = sf__rename_pair(bin_tmp, bin, idx_tmp, idx, &failed);
	if (r < 0) {
		r = sf__err(e, r, "%s: cannot move the merged pair into place: %s: %s", prefix,
			    failed, strerror(-r));
		goto out;
	}
	*ret_docs = total_docs;
	*ret_tokens = total_tokens;
	r = (int)n;
out:
	/* Only what this merge made: a refusal before that leaves PREFIX.bin.tmp and
	 * .idx.tmp alone (another's files, a link to a part). */
	if (bin_fd >= 0) {
		close(bin_fd);
		if (r < 0)
			unlink(bin_tmp);
	}
	if (idx_fd >= 0) {
		close(idx_fd);
		if (r < 0)
			unlink(idx_tmp);
	}
	for (size_t i = 0; ms && i < n; i++)
		free(ms[i].prefix);
	free(ms);
	free(bin);
	free(idx);
	free(bin_tmp);
	free(idx_tmp);
	return r;
}
