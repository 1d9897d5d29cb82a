/*
 * Loading a .tiktoken vocabulary ("base64 SPACE rank" per line) into struct sf_tok_ranks:
 * the token bytes packed by rank for decoding, and the hash table from bytes to rank that
 * encoding probes for every piece and every candidate pair.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"

/* The value of a base64 digit, or -1. */
static int b64_value(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decode standard padded base64 s[0..len) into out; returns the byte count or -1. */
static long b64_decode(const uint8_t *s, size_t len, uint8_t *out)
{
	uint32_t acc = 0;
	size_t i, pad = 0;
	long o = 0;
	int bits = 0;

	if (len == 0 || len % 4)
		return -1;
	for (i = 0; i < len; i++) {
		int v;

		if (s[i] == '=') {
			pad++;
			continue;
		}
		v = b64_value(s[i]);
		if (v < 0 || pad)
			return -1;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	if (pad > 2)
		return -1;
	return o;
}

int sf__tok_open_regular(const char *path, uint64_t max_bytes, FILE **ret_f, struct sf_err *e)
{
	/* O_NONBLOCK: open() of a FIFO must not wait for a writer before it is refused. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	FILE *f;

	if (fd < 0)
		return sf__err(e, -errno, "cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sf__err(e, SF_E_TOKENIZER, "%s: not a regular file", path);
	}
	if (max_bytes && (uint64_t)st.st_size > max_bytes) {
		close(fd);
		return sf__err(e, SF_E_TOKENIZER,
			       "%s: %llu bytes, more than a vocabulary holds (at most %llu)", path,
			       (unsigned long long)st.st_size, (unsigned long long)max_bytes);
	}
	f = fdopen(fd, "rb");
	if (!f) {
		int r = -errno;

		close(fd);
		return sf__err(e, r, "cannot open %s: %s", path, strerror(-r));
	}
	*ret_f = f;
	return 0;
}

int sf__tok_read_file(const char *path, uint8_t **ret_buf, size_t *ret_len, struct sf_err *e)
{
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, got;
	FILE *f;
	int rc;

	rc = sf__tok_open_regular(path, SF_TOK_VOCAB_MAX_BYTES, &f, e);
	if (rc < 0)
		return rc;
	do {
		if (cap - len < 65536) {
			uint8_t *grown;

			cap = cap ? cap * 2 : 1 << 20;
			grown = realloc(buf, cap);
			if (!grown) {
				rc = sf__err(e, -ENOMEM, "%s: out of memory", path);
				goto fail;
			}
			buf = grown;
		}
		errno = 0;
		got = fread(buf + len, 1, cap - len, f);
		len += got;
	} while (got);
	if (ferror(f)) {
		const int code = errno ? errno : EIO;

		rc = sf__err(e, -code, "cannot read %s: %s", path, strerror(code));
		goto fail;
	}
	fclose(f);
	*ret_buf = buf;
	*ret_len = len;
	return 0;
fail:
	free(buf);
	fclose(f);
	return rc;
}

static uint64_t table_size(size_t count)
{
	uint64_t size = 1024;

	while (size < 2 * (uint64_t)count)
		size *= 2;
	return size;
}

/* The Bloom filter's size in 64-bit words: a power of two, at least 8 bits per token. */
static uint64_t bloom_words(size_t count)
{
	uint64_t words = 64;

	while (words * 64 < 8 * (uint64_t)count)
		words *= 2;
	return words;
}

/* Insert `rank`; returns the rank already holding the same bytes, or SF_RANK_NONE. */
static uint32_t insert(struct sf_tok_ranks *r, uint32_t rank)
{
	const uint8_t *s = r->bytes + r->off[rank];
	size_t len = r->off[rank + 1] - r->off[rank];
	uint64_t key = sf__tok_key(s, len);
	uint64_t h = sf__tok_mix(s, len, key), bits, i;

	*sf__tok_bloom_word(r, h, &bits) |= bits;
	for (i = h >> r->shift; r->slots[i].len_rank; i = (i + 1) & r->mask) {
		uint32_t other = sf__tok_slot_rank(&r->slots[i]);

		if (r->off[other + 1] - r->off[other] == len &&
		    !memcmp(r->bytes + r->off[other], s, len))
			return other;
	}
	r->slots[i] = (struct sf_tok_slot){
		.key = key,
		.tail = len > 8 ? sf__tok_load32(s + len - 4) : 0,
		.len_rank = rank << 8 | (uint32_t)(len < 255 ? len : 255),
	};
	return SF_RANK_NONE;
}

int sf__tok_ranks_load(struct sf_tok_ranks *r, const char *path, struct sf_err *e)
{
	uint8_t *text = NULL;
	size_t len = 0;
	int rc;

	memset(r, 0, sizeof(*r));
	rc = sf__tok_read_file(path, &text, &len, e);
	if (rc < 0)
		return rc;
	rc = sf__tok_ranks_parse(r, path, text, len, 0, e);
	free(text);
	return rc;
}

static int ranks_index(struct sf_tok_ranks *r, const char *what, uint32_t rank_offset,
		       struct sf_err *e);

int sf__tok_ranks_parse(struct sf_tok_ranks *r, const char *path, uint8_t *text, size_t len,
			uint32_t rank_offset, struct sf_err *e)
{
	struct line {
		uint32_t b64_off, b64_len, rank;
	} *lines = NULL;
	size_t pos, n_lines = 0, cap_lines = 0, lineno = 0, i;
	uint32_t max_rank = 0, total = 0;
	/* A file cut inside its last line ends in part of a rank, most likely one taken. */
	const bool unended = len && text[len - 1] != '\n';
	int rc;

	memset(r, 0, sizeof(*r));

	/* First pass: split lines and parse ranks, to size the arrays. */
	for (pos = 0; pos < len;) {
		size_t end = pos, sp;
		char *stop;
		unsigned long rank;

		while (end < len && text[end] != '\n')
			end++;
		lineno++;
		/* A blank line, of LF or CRLF files alike, as tiktoken's splitlines() skips it. */
		if (end == pos || (end == pos + 1 && text[pos] == '\r')) {
			pos = end + 1;
			continue;
		}
		for (sp = pos; sp < end && text[sp] != ' '; sp++)
			;
		if (sp == end || sp == pos || sp + 1 == end) {
			rc = sf__err(e, SF_E_TOKENIZER, "%s:%zu: expected 'base64 rank'", path,
				     lineno);
			goto fail;
		}
		text[end] = '\0';
		errno = 0;
		rank = strtoul((char *)text + sp + 1, &stop, 10);
		/* Decimal digits only, up to the line's end or its \r: strtoul also takes a
		 * sign (-1 read as a huge rank, -18446744073709551615 as 1) and leading
		 * spaces, and stops at a NUL ("IQ== 0\0junk" was rank 0); a line ending
		 * "Qg== \r" has no rank at all. */
		if (text[sp + 1] < '0' || text[sp + 1] > '9' || errno ||
		    (stop != (char *)text + end &&
		     (*stop != '\r' || stop + 1 != (char *)text + end))) {
			rc = sf__err(e, SF_E_TOKENIZER, "%s:%zu: bad rank", path, lineno);
			goto fail;
		}
		/* Refused before the tables by rank are sized from it. */
		if (rank_offset >= SF_TOK_MAX_RANKS || rank >= SF_TOK_MAX_RANKS - rank_offset) {
			rc = sf__err(e, SF_E_TOKENIZER, "%s:%zu: rank %lu, more than the %u supported",
				     path, lineno, rank, SF_TOK_MAX_RANKS);
			goto fail;
		}
		if (n_lines == cap_lines) {
			struct line *grown;

			cap_lines = cap_lines ? cap_lines * 2 : 65536;
			grown = realloc(lines, cap_lines * sizeof(*lines));
			if (!grown) {
				rc = sf__err(e, -ENOMEM, "%s: out of memory", path);
				goto fail;
			}
			lines = grown;
		}
		lines[n_lines].b64_off = (uint32_t)pos;
		lines[n_lines].b64_len = (uint32_t)(sp - pos);
		lines[n_lines].rank = (uint32_t)rank + rank_offset;
		n_lines++;
		if (rank + rank_offset > max_rank)
			max_rank = (uint32_t)rank + rank_offset;
		total += (uint32_t)(sp - pos);
		pos = end + 1;
	}
	if (!n_lines) {
		rc = sf__err(e, SF_E_TOKENIZER, "%s: no tokens", path);
		goto fail;
	}

	r->n_ranks = max_rank + 1;
	r->off = calloc((size_t)r->n_ranks + 1, sizeof(*r->off));
	r->bytes = malloc(total);
	if (!r->off || !r->bytes) {
		rc = sf__err(e, -ENOMEM, "%s: out of memory", path);
		goto fail;
	}

	/*
	 * Pack the tokens in rank order so that a rank's bytes are off[rank]..off[rank + 1].
	 * Ranks are sorted in every file tiktoken ships, but gaps and any order are allowed:
	 * each token is decoded in file order into the line's own base64 text (decoding
	 * shrinks it), its length counted per rank, and then copied to its place.
	 */
	for (i = 0; i < n_lines; i++) {
		uint8_t *at = text + lines[i].b64_off;
		long got = b64_decode(at, lines[i].b64_len, at);

		if (got <= 0) {
			rc = sf__err(e, SF_E_TOKENIZER, "%s: bad base64 for rank %u", path,
				     lines[i].rank - rank_offset);
			goto fail;
		}
		if (r->off[lines[i].rank + 1]) {
			rc = sf__err(e, SF_E_TOKENIZER, "%s: rank %u appears twice%s", path,
				     lines[i].rank - rank_offset,
				     unended && i == n_lines - 1
					     ? ", the second time on the last line, which has no "
					       "line end: the file looks cut short (a download "
					       "stopped?)"
					     : "");
			goto fail;
		}
		lines[i].b64_len = (uint32_t)got;
		r->off[lines[i].rank + 1] = (uint32_t)got;
	}
	for (i = 0; i < r->n_ranks; i++)
		r->off[i + 1] += r->off[i];
	for (i = 0; i < n_lines; i++)
		memcpy(r->bytes + r->off[lines[i].rank], text + lines[i].b64_off, lines[i].b64_len);
	rc = ranks_index(r, path, rank_offset, e);
fail:
	free(lines);
	if (rc < 0)
		sf__tok_ranks_free(r);
	return rc;
}

int sf__tok_ranks_index(struct sf_tok_ranks *r, const char *what, struct sf_err *e)
{
	return ranks_index(r, what, 0, e);
}

/* sf__tok_ranks_index() of ranks read plus `rank_offset`, which messages take off. */
static int ranks_index(struct sf_tok_ranks *r, const char *what, uint32_t rank_offset,
		       struct sf_err *e)
{
	uint32_t rank, other, count = 0;
	size_t i;

	if (r->n_ranks > SF_TOK_MAX_RANKS)
		return sf__err(e, SF_E_TOKENIZER, "%s: %u ranks, more than the %u supported", what,
			       r->n_ranks, SF_TOK_MAX_RANKS);
	for (rank = 0; rank < r->n_ranks; rank++)
		count += r->off[rank + 1] != r->off[rank];
	r->mask = table_size(count) - 1;
	r->shift = 64 - (unsigned)__builtin_popcountll(r->mask);
	r->slots = calloc(r->mask + 1, sizeof(*r->slots));
	r->pair_rank = malloc(65536 * sizeof(*r->pair_rank));
	r->bloom_shift = 64 - (unsigned)__builtin_popcountll(bloom_words(count) - 1);
	r->bloom = calloc(bloom_words(count), sizeof(*r->bloom));
	if (!r->slots || !r->pair_rank || !r->bloom)
		return sf__err(e, -ENOMEM, "%s: out of memory", what);
	for (i = 0; i < 256; i++)
		r->byte_rank[i] = SF_RANK_NONE;
	for (i = 0; i < 65536; i++)
		r->pair_rank[i] = SF_RANK_NONE;
	/* Every token goes through insert(), which also sets its bits in the Bloom filter. */
	for (rank = 0; rank < r->n_ranks; rank++) {
		const uint8_t *s = r->bytes + r->off[rank];
		uint32_t len = r->off[rank + 1] - r->off[rank];

		if (!len)
			continue;
		other = insert(r, rank);
		if (other != SF_RANK_NONE)
			return sf__err(e, SF_E_TOKENIZER,
				       "%s: %sranks %u and %u have the same bytes", what,
				       rank_offset ? "vocab " : "", other - rank_offset,
				       rank - rank_offset);
		if (len == 1)
			r->byte_rank[s[0]] = rank;
		if (len == 2)
			r->pair_rank[s[0] << 8 | s[1]] = rank;
	}
	return 0;
}

void sf__tok_ranks_free(struct sf_tok_ranks *r)
{
	free(r->off);
	free(r->bytes);
	free(r->slots);
	free(r->pair_rank);
	free(r->bloom);
	memset(r, 0, sizeof(*r));
}
