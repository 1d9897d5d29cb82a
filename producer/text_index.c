/*
 * The chunk index of raw text: each file cut into chunks of whole documents of about
 * SF_CHUNK_BYTES, and the token count of every chunk, built once by forked workers and
 * cached (producer/index_file.c). The global token stream is then the chunks in order,
 * each document followed by <|endoftext|>, and any offset in it is found by a binary
 * search over the chunk starts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmfeed/shmfeed.h"
#include "producer/index_file.h"
#include "producer/text_index.h"
#include "producer/tokenizer/tokenizer.h"
#include "producer/workers.h"

static int add_chunk(struct sf_dataset *ds, uint32_t file, uint64_t off, uint64_t len,
		     uint64_t line)
{
	struct sf_chunk *c;

	if (ds->n_chunks == ds->chunks_cap) {
		uint64_t ncap = ds->chunks_cap ? ds->chunks_cap * 2 : 64;

		c = realloc(ds->chunks, ncap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		ds->chunks = c;
		ds->chunks_cap = ncap;
	}
	c = &ds->chunks[ds->n_chunks++];
	memset(c, 0, sizeof(*c));
	c->off = off;
	c->len = len;
	c->file = file;
	c->first_line = line;
	return 0;
}

static uint64_t count_lines(const char *p, const char *end)
{
	uint64_t n = 0;

	while ((p = memchr(p, '\n', (size_t)(end - p)))) {
		n++;
		p++;
	}
	return n;
}

/* The end of the document starting at p in file `f` and where the next one starts. */
static const char *doc_end(const struct sf_dataset *ds, const struct sf_text_file *f, const char *p,
			   const char *end, const char **ret_next)
{
	return sf__text_format(f->format)->doc_end(ds->sources[f->source].separator, f->sep_len, p,
						   end, ret_next);
}

int sf__text_add_file(struct sf_dataset *ds, const char *path, uint32_t format, uint32_t source,
		      struct sf_err *e)
{
	const struct sf_source_config *src = &ds->sources[source];
	struct sf_text_file f = {0}, *nf;
	struct sf_err why = {0};
	uint64_t first_chunk = ds->n_chunks, line = 1;
	const char *p, *end, *start;
	int r;

	f.path = strdup(path);
	if (!f.path)
		return sf__err(e, -ENOMEM, "out of memory");
	f.format = format;
	f.source = source;
	f.sep_len = src->separator ? (uint32_t)strlen(src->separator) : 0;
	r = sf__text_file_read(&f, &why);
	if (r < 0) {
		sf__text_file_free(&f);
		if (src->on_error != SF_ON_ERROR_SKIP) {
			*e = why;
			return r;
		}
		sf__dataset_note_skip(ds, &why);
		return 0;
	}
	ds->stats.text_bytes += f.len;
	p = start = f.data;
	end = f.data + f.len;
	while (p < end) {
		const char *next, *de = doc_end(ds, &f, p, end, &next);

		if ((uint64_t)(de - p) > ds->max_doc_bytes)
			ds->max_doc_bytes = (uint64_t)(de - p);
		p = next;
		if (p - start >= (ptrdiff_t)SF_CHUNK_BYTES || p == end) {
			r = add_chunk(ds, ds->n_text_files, (uint64_t)(start - f.data),
				      (uint64_t)(p - start), line);
			if (r < 0) {
				sf__text_file_free(&f);
				ds->n_chunks = first_chunk;
				return sf__err(e, r, "out of memory");
			}
			line += count_lines(start, p);
			start = p;
		}
	}
	nf = realloc(ds->text_files, (ds->n_text_files + 1) * sizeof(*nf));
	if (!nf) {
		sf__text_file_free(&f);
		ds->n_chunks = first_chunk;
		return sf__err(e, -ENOMEM, "out of memory");
	}
	ds->text_files = nf;
	nf[ds->n_text_files++] = f;
	return 0;
}

void sf__text_close(struct sf_dataset *ds)
{
	for (uint32_t i = 0; i < ds->n_text_files; i++)
		sf__text_file_free(&ds->text_files[i]);
	free(ds->text_files);
	free(ds->chunks);
	ds->text_files = NULL;
	ds->chunks = NULL;
	ds->n_text_files = 0;
	ds->n_chunks = 0;
}

void sf__text_walk_init(struct sf_doc_walk *w, const struct sf_dataset *ds, uint64_t chunk,
			char *scratch)
{
	const struct sf_chunk *c = &ds->chunks[chunk];
	const struct sf_text_file *f = &ds->text_files[c->file];

	sf__doc_walk_init(w, f, &ds->sources[f->source], f->data + c->off,
			  f->data + c->off + c->len, c->first_line, scratch);
}

uint64_t sf__text_find_chunk(const struct sf_dataset *ds, uint64_t off)
{
	uint64_t lo = 0, hi = ds->n_chunks - 1;

	/* The last chunk starting at or before `off` that holds tokens. */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo + 1) / 2;

		if (ds->chunks[mid].start <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	while (lo > 0 && ds->chunks[lo].n_tokens == 0)
		lo--;
	return lo;
}

/* ---- index build ---- */

struct count_result {
	uint64_t n_tokens;
	uint64_t n_docs;
	uint64_t skipped;
};

struct count_job {
	const struct sf_dataset *ds;
	const uint64_t *items; /* chunks to count */
	struct count_result *results;
};

struct count_state {
	struct sf_tok_encoder *enc;
	char *scratch;
};

static int count_init(void *arg, void **ret_state, struct sf_err *e)
{
	struct count_job *j = arg;
	struct count_state *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return sf__err(e, -ENOMEM, "out of memory");
	s->scratch = malloc(j->ds->max_doc_bytes + 1);
	if (!s->scratch) {
		free(s);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	r = sf__tok_encoder_create(j->ds->tok, &s->enc, e);
	if (r < 0) {
		free(s->scratch);
		free(s);
		return r;
	}
	*ret_state = s;
	return 0;
}

static void count_fini(void *arg, void *state)
{
	struct count_state *s = state;

	(void)arg;
	sf__tok_encoder_free(s->enc);
	free(s->scratch);
	free(s);
}

static int count_item(void *arg, void *state, uint64_t i, struct sf_err *e)
{
	struct count_job *j = arg;
	struct count_state *s = state;
	struct count_result *res = &j->results[i];
	struct sf_doc_walk w;
	const char *doc;
	size_t len;
	int r;

	sf__text_walk_init(&w, j->ds, j->items[i], s->scratch);
	while ((r = sf__text_next_doc(&w, &doc, &len, e)) == 1) {
		const uint32_t *ids;
		size_t n;

		r = sf__tok_encode(s->enc, doc, len, SF_TOK_ALLOW_NONE, &ids, &n, e);
		if (r < 0)
			return r;
		res->n_tokens += n + 1;
		res->n_docs++;
	}
	res->skipped = w.skipped;
	return r;
}

int sf__text_build_index(struct sf_dataset *ds, const struct sf_config *cfg, struct sf_err *e)
{
	struct count_result *results = NULL;
	uint64_t *items = NULL, n_items = 0, *keys = NULL, pos = 0;
	uint32_t *loaded = NULL;
	size_t results_bytes = 0;
	struct timespec t0, t1;
	int r = 0;

	if (ds->eot == UINT32_MAX)
		return sf__err(e, SF_E_TOKENIZER, "%s has no <|endoftext|> to separate documents",
			       cfg->encoding);
	items = calloc(ds->n_chunks + 1, sizeof(*items));
	keys = calloc(ds->n_text_files + 1, sizeof(*keys));
	loaded = calloc(ds->n_text_files + 1, sizeof(*loaded));
	if (!items || !keys || !loaded) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	ds->stats.index_loaded = 1;
	for (uint32_t f = 0; f < ds->n_text_files; f++) {
		uint64_t bytes = 0;

		keys[f] = sf__index_key(ds, &ds->text_files[f]);
		loaded[f] = sf__index_load(ds, f, keys[f], &bytes) == 1;
		ds->stats.index_bytes += bytes;
		if (!loaded[f])
			ds->stats.index_loaded = 0;
	}
	for (uint64_t c = 0; c < ds->n_chunks; c++)
		if (!loaded[ds->chunks[c].file])
			items[n_items++] = c;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (n_items) {
		struct count_job job = {.ds = ds, .items = items};
		struct sf_work w = {.n_workers = cfg->producers,
				    .n_items = n_items,
				    .arg = &job,
				    .init = count_init,
				    .item = count_item,
				    .fini = count_fini};

		results_bytes = n_items * sizeof(*results);
		results = sf__shared_alloc(results_bytes);
		if (!results) {
			r = sf__err(e, -ENOMEM, "out of memory");
			goto out;
		}
		job.results = results;
		r = sf__work_run(&w, e);
		if (r < 0)
			goto out;
		for (uint64_t i = 0; i < n_items; i++) {
			struct sf_chunk *c = &ds->chunks[items[i]];

			c->n_tokens = results[i].n_tokens;
			c->n_docs = (uint32_t)results[i].n_docs;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (n_items)
		ds->stats.index_build_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
					   (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
	/* Skips in file order; the first one's message comes from walking its chunk again,
	 * which meets the same record first. */
	for (uint64_t i = 0, c = 0; c < ds->n_chunks; c++) {
		uint32_t f = ds->chunks[c].file;

		if (loaded[f] || i >= n_items || items[i] != c)
			continue;
		if (results[i].skipped) {
			struct sf_doc_walk walk;
			char *scratch = malloc(ds->max_doc_bytes + 1);
			const char *doc;
			size_t len;

			if (!scratch) {
				r = sf__err(e, -ENOMEM, "out of memory");
				goto out;
			}
			sf__text_walk_init(&walk, ds, c, scratch);
			while (sf__text_next_doc(&walk, &doc, &len, e) == 1)
				;
			free(scratch);
			for (uint64_t k = 0; k < walk.skipped; k++)
				sf__dataset_note_skip(ds, &walk.why);
		}
		i++;
	}
	for (uint64_t c = 0; c < ds->n_chunks; c++) {
		struct sf_chunk *ch = &ds->chunks[c];

		ch->start = pos;
		pos += ch->n_tokens;
		ds->stats.n_docs += ch->n_docs;
		if (ch->n_tokens > ds->max_chunk_tokens)
			ds->max_chunk_tokens = ch->n_tokens;
		if (ch->n_docs > ds->max_chunk_docs)
			ds->max_chunk_docs = ch->n_docs;
	}
	ds->n_tokens = pos;
	ds->stats.n_chunks = ds->n_chunks;
	for (uint32_t f = 0; f < ds->n_text_files; f++) {
		uint64_t skipped = 0, bytes = 0;

		if (loaded[f])
			continue;
		for (uint64_t i = 0; i < n_items; i++)
			if (ds->chunks[items[i]].file == f)
				skipped += results[i].skipped;
		if (sf__index_save(ds, f, keys[f], skipped, ds->first_skip, &bytes) == 0)
			ds->stats.index_bytes += bytes;
	}
out:
	sf__shared_free(results, results_bytes);
	free(items);
	free(keys);
	free(loaded);
	return r;
}
