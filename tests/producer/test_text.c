/*
 * Raw text through the producers (needs ../shared/data; exits 77 without it):
 *  - tinyshakespeare.txt as one document gives exactly tiktoken's ids (tokref) followed
 *    by <|endoftext|>, at every window of an epoch;
 *  - the same paragraphs as a .txt with a separator, as .jsonl, .jsonl.zst and .jsonl.gz
 *    give the same windows (compared as the multiset of an epoch's rows);
 *  - document starts point just after each <|endoftext|>;
 *  - the chunk index is cached, reused, and rebuilt when the file changes;
 *  - 1, 2 and 4 producer processes deliver identical batches of a .jsonl source.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "producer/dataset_impl.h"
#include "producer/producer.h"
#include "producer/sampler.h"
#include "tests/producer/harness.h"

static void config_text(struct sf_config *cfg, const char *path, const char *vocab_dir, uint32_t T)
{
	h_config(cfg, path, 4, T, 2);
	cfg->encoding = "r50k_base";
	cfg->vocab_dir = (char *)vocab_dir;
}

/* Sorted hashes of every row of epoch 0 (samples 0 .. n_windows-1). */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t *epoch_rows(const struct sf_config *cfg, uint64_t *ret_n,
			    struct sf_dataset_stats *ret_stats)
{
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_err e = {0};
	struct sf_dataset_stats st;
	unsigned char *buf;
	uint64_t *rows, k = 0;
	const size_t row_bytes = (size_t)(cfg->seq_len + 1) * 2;

	H_CHECK(sf__dataset_open(cfg, &ds, &e) == 0, "%s", e.msg);
	H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	buf = malloc(sf__dataset_payload_bytes(ds));
	rows = malloc((st.n_windows + 64) * 8);
	for (uint64_t s = 0; k < st.n_windows; s++)
		for (uint32_t r = 0; r < cfg->world_size && k < st.n_windows; r++) {
			uint32_t len;
			uint64_t first;

			H_CHECK(sf__builder_fill(b, r, s, buf, &len, &first, &e) == 0, "%s", e.msg);
			for (uint32_t i = 0; i < cfg->batch_size && k < st.n_windows; i++)
				rows[k++] = XXH3_64bits(buf + i * row_bytes, row_bytes);
		}
	qsort(rows, k, 8, cmp_u64);
	free(buf);
	sf__builder_free(b);
	sf__dataset_close(ds);
	*ret_n = k;
	if (ret_stats)
		*ret_stats = st;
	return rows;
}

/* Append `s` as a JSON string, escaping quotes, backslashes and control characters. */
static size_t json_escape(char *out, const char *s, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else if (c < 0x20) {
			o += (size_t)sprintf(out + o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	return o;
}

/* Entries of `dir` whose names start with `prefix`; the first one's path. */
static int count_files(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *ent;
	int n = 0;

	if (!d)
		return -1;
	while ((ent = readdir(d)))
		if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..") &&
		    !strncmp(ent->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

static int first_match(const char *dir, const char *prefix, char *buf, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *ent;
	int r = -1;

	while (d && r && (ent = readdir(d)))
		if (!strncmp(ent->d_name, prefix, strlen(prefix))) {
			snprintf(buf, len, "%s/%s", dir, ent->d_name);
			r = 0;
		}
	if (d)
		closedir(d);
	return r;
}

int main(int argc, char **argv)
{
	char vocab_dir[4096], corpus[4096], tokref[4096], path[4096], cache_dir[4200];
	char *dir, *text, *ref_bytes;
	size_t text_len, ref_len;
	const uint32_t *ref;
	size_t n_ref;
	struct sf_config cfg;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: %s SHARED_DATA_DIR\n", argv[0]);
		return 2;
	}
	snprintf(vocab_dir, sizeof(vocab_dir), "%s/vocab", argv[1]);
	snprintf(corpus, sizeof(corpus), "%s/corpus/tinyshakespeare.txt", argv[1]);
	snprintf(tokref, sizeof(tokref), "%s/tokref/tinyshakespeare.r50k_base.u32", argv[1]);
	text = h_read_file(corpus, &text_len);
	ref_bytes = h_read_file(tokref, &ref_len);
	if (!text || !ref_bytes) {
		printf("skip: %s not found\n", argv[1]);
		return 77;
	}
	ref = (const uint32_t *)ref_bytes;
	n_ref = ref_len / 4;
	dir = h_tmpdir();
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache/index", dir);

	/* One document: the stream is tokref then <|endoftext|>; check every window. */
	{
		struct sf_dataset *ds;
		struct sf_builder *b;
		struct sf_err e = {0};
		struct sf_dataset_stats st;
		const uint32_t T = 128;
		uint16_t row[129];

		snprintf(path, sizeof(path), "%s/shakespeare.txt", dir);
		h_write_file(path, text, text_len);
		config_text(&cfg, path, vocab_dir, T);
		cfg.batch_size = 1;
		cfg.world_size = 1;
		cfg.local_ranks = 1;
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		H_CHECK(st.n_tokens == n_ref + 1, "%llu tokens, tokref has %zu + 1",
			(unsigned long long)st.n_tokens, n_ref);
		H_CHECK(st.token_bytes == 2 && st.index_loaded == 0 && st.index_bytes > 0,
			"dtype %u, index loaded %u, %llu bytes", st.token_bytes, st.index_loaded,
			(unsigned long long)st.index_bytes);
		H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
		for (uint64_t k = 0; k < st.n_windows; k++) {
			uint32_t len;
			uint64_t first, off = sf__builder_sample_offset(b, k);

			H_CHECK(sf__builder_fill(b, 0, k, row, &len, &first, &e) == 0, "%s", e.msg);
			H_CHECK(off % T == 0 && first == k, "sample %llu", (unsigned long long)k);
			for (uint32_t j = 0; j <= T; j++) {
				uint32_t want = off + j < n_ref ? ref[off + j] : 50256;

				H_CHECK(row[j] == want, "sample %llu token %u: %u, tokref %u",
					(unsigned long long)k, j, row[j], want);
			}
		}
		printf("ok: tinyshakespeare as one document: all %llu windows equal tiktoken's ids "
		       "(%llu tokens)\n",
		       (unsigned long long)st.n_windows, (unsigned long long)st.n_tokens);
		sf__builder_free(b);
		sf__dataset_close(ds);
		/* The second open finds the cached index. */
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		H_CHECK(st.index_loaded == 1 && st.n_tokens == n_ref + 1, "index not reused");
		sf__dataset_close(ds);
		/* A changed file (same size, new mtime) is indexed again. */
		{
			struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 0}};

			H_CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
		}
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		H_CHECK(st.index_loaded == 0, "index of a changed file reused");
		sf__dataset_close(ds);
		/* Only in the cache directory, nothing beside the corpus. */
		H_CHECK(count_files(dir, ".shmfeed.") == 0 && count_files(cache_dir, "") == 1,
			"index files: %d beside, %d cached", count_files(dir, ".shmfeed."),
			count_files(cache_dir, ""));
		printf("ok: the chunk index is cached, reused, and rebuilt after a change\n");
		/* `index: beside`: a dot-file next to the corpus, reused from there. */
		cfg.sources[0].index = SF_INDEX_BESIDE;
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		sf__dataset_close(ds);
		H_CHECK(st.index_loaded == 1, "the cached index was not used for beside");
		H_CHECK(utimensat(AT_FDCWD, path, NULL, 0) == 0, "utimensat");
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		sf__dataset_close(ds);
		H_CHECK(st.index_loaded == 0 && count_files(dir, ".shmfeed.") == 1,
			"not written beside the corpus (%d files)", count_files(dir, ".shmfeed."));
		H_CHECK(count_files(cache_dir, "") == 1, "written to the cache directory too");
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		sf__dataset_close(ds);
		H_CHECK(st.index_loaded == 1 && st.n_tokens == n_ref + 1, "beside not reused");
		/* Where the index cannot be written beside the file (here a directory holds
		 * its name), it goes to the cache directory. */
		{
			char beside[4096];

			H_CHECK(first_match(dir, ".shmfeed.", beside, sizeof(beside)) == 0,
				"no index beside");
			H_CHECK(unlink(beside) == 0 && mkdir(beside, 0700) == 0, "%s", beside);
			H_CHECK(utimensat(AT_FDCWD, path, NULL, 0) == 0, "utimensat");
			H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
			sf__dataset_close(ds);
			/* The cache directory's index was stale (an older modification time):
			 * found valid now, it was written there. */
			H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
			sf__dataset_stats(ds, &st);
			sf__dataset_close(ds);
			H_CHECK(st.index_loaded == 1, "no fallback to the cache directory");
			H_CHECK(rmdir(beside) == 0, "rmdir");
		}
		/* A glob over a corpus folder does not take the dot-file for text (h_config()
		 * shares one source between configurations: cfg is not used after this). */
		{
			char folder[4096], file[4200], pattern[4200];
			struct sf_config gcfg;

			snprintf(folder, sizeof(folder), "%s/corpus", dir);
			snprintf(file, sizeof(file), "%s/a.txt", folder);
			snprintf(pattern, sizeof(pattern), "%s/*", folder);
			H_CHECK(mkdir(folder, 0700) == 0, "mkdir");
			h_write_file(file, text, text_len);
			for (int i = 0; i < 2; i++) {
				config_text(&gcfg, i ? pattern : file, vocab_dir, T);
				gcfg.batch_size = 1;
				gcfg.world_size = 1;
				gcfg.local_ranks = 1;
				gcfg.sources[0].index = SF_INDEX_BESIDE;
				H_CHECK(sf__dataset_open(&gcfg, &ds, &e) == 0, "%s", e.msg);
				sf__dataset_stats(ds, &st);
				sf__dataset_close(ds);
				H_CHECK(st.n_tokens == n_ref + 1 && st.index_loaded == (uint32_t)i,
					"%s read %llu tokens", i ? "the glob" : "the file",
					(unsigned long long)st.n_tokens);
			}
			H_CHECK(count_files(folder, ".shmfeed.") == 1,
				"no index beside the corpus folder");
		}
		printf("ok: index: beside writes a dot-file next to the corpus, reuses it, is "
		       "passed over by globs, and falls back to the cache directory\n");
	}

	/* Paragraphs as separated .txt, .jsonl, .jsonl.zst, .jsonl.gz: the same windows. */
	{
		char *jsonl = malloc(text_len * 2 + 1024), txt_path[4096];
		size_t jl = 0, n_para = 0;
		const char *p = text, *end = text + text_len;
		uint64_t *base, *other, n_base, n_other;
		struct sf_dataset_stats st;
		static const char *const kinds[] = {"jsonl", "jsonl.zst", "jsonl.gz"};

		H_CHECK(jsonl, "out of memory");

		while (p < end) {
			const char *q = strstr(p, "\n\n");
			size_t n = q ? (size_t)(q - p) : (size_t)(end - p);

			if (n) {
				jl += (size_t)sprintf(jsonl + jl, "{\"id\": %zu, \"text\": \"",
						      n_para);
				jl += json_escape(jsonl + jl, p, n);
				jl += (size_t)sprintf(jsonl + jl,
						      "\", \"meta\": [1, 2.5e3, null]}\n");
				n_para++;
			}
			p = q ? q + 2 : end;
		}
		snprintf(txt_path, sizeof(txt_path), "%s/paras.txt", dir);
		h_write_file(txt_path, text, text_len);
		config_text(&cfg, txt_path, vocab_dir, 64);
		cfg.sources[0].separator = "\n\n";
		base = epoch_rows(&cfg, &n_base, &st);
		H_CHECK(st.n_docs == n_para && st.n_chunks > 1, "%llu documents (%zu paragraphs)",
			(unsigned long long)st.n_docs, n_para);
		for (size_t i = 0; i < 3; i++) {
			snprintf(path, sizeof(path), "%s/paras.%s", dir, kinds[i]);
			if (i == 0) {
				h_write_file(path, jsonl, jl);
			} else if (i == 1) {
				size_t cap = ZSTD_compressBound(jl);
				void *z = malloc(cap);
				size_t zn = ZSTD_compress(z, cap, jsonl, jl, 3);

				H_CHECK(!ZSTD_isError(zn), "zstd");
				h_write_file(path, z, zn);
				free(z);
			} else {
				gzFile g = gzopen(path, "wb");

				H_CHECK(g && gzwrite(g, jsonl, (unsigned)jl) == (int)jl &&
						gzclose(g) == Z_OK,
					"gzip");
			}
			config_text(&cfg, path, vocab_dir, 64);
			other = epoch_rows(&cfg, &n_other, NULL);
			H_CHECK(n_other == n_base && !memcmp(base, other, n_base * 8),
				"%s windows differ from the separated .txt", kinds[i]);
			free(other);
		}
		printf("ok: %zu paragraphs as .txt with a separator, .jsonl, .jsonl.zst, "
		       ".jsonl.gz: "
		       "the same %llu windows\n",
		       n_para, (unsigned long long)n_base);
		free(base);

		/* Document starts: right after each <|endoftext|>, and only there. */
		{
			struct sf_dataset *ds;
			struct sf_builder *b;
			struct sf_err e = {0};
			const uint32_t T = 64, D = 64, B = 4;
			unsigned char *buf;
			uint64_t checked = 0;

			snprintf(path, sizeof(path), "%s/paras.jsonl", dir);
			config_text(&cfg, path, vocab_dir, T);
			cfg.doc_starts = D;
			buf = h_builder(&cfg, &ds, &b);
			for (uint64_t s = 0; s < 200; s++) {
				uint32_t len;
				uint64_t first;
				const uint32_t *starts;

				H_CHECK(sf__builder_fill(b, s % 2, s, buf, &len, &first, &e) == 0,
					"%s", e.msg);
				starts = (const uint32_t *)(buf +
							    sf__doc_starts_offset(B, T + 1, 2));
				for (uint32_t i = 0; i < B; i++) {
					const uint16_t *row = (const uint16_t *)buf + i * (T + 1);
					const uint32_t *st_row = starts + i * D;
					/* Position 0 is listed when the row begins a document,
					 * which the row alone cannot tell; the rest must be
					 * exactly the positions after <|endoftext|>. */
					uint32_t n = st_row[0] == 0 ? 1 : 0;

					for (uint32_t j = 1; j <= T; j++) {
						if (row[j - 1] != 50256)
							continue;
						H_CHECK(n < D && st_row[n] == j,
							"start at %u missing (found %u)", j,
							n < D ? st_row[n] : 0);
						n++;
						checked++;
					}
					H_CHECK(n == D || st_row[n] == UINT32_MAX, "extra start %u",
						st_row[n]);
				}
			}
			H_CHECK(checked > 100, "only %llu document starts seen",
				(unsigned long long)checked);
			printf("ok: %llu document starts, each right after <|endoftext|>\n",
			       (unsigned long long)checked);
			free(buf);
			sf__builder_free(b);
			sf__dataset_close(ds);
		}

		/* Producers in processes: identical batches with 1, 2 and 4. */
		{
			struct h_run r1, rp;
			static const uint32_t counts[] = {2, 4};

			snprintf(path, sizeof(path), "%s/paras.jsonl.zst", dir);
			config_text(&cfg, path, vocab_dir, 128);
			cfg.doc_starts = 4;
			H_CHECK(h_pipeline(&cfg, 1, 0, 30, &r1) == 0, "1 producer");
			for (size_t i = 0; i < 2; i++) {
				H_CHECK(h_pipeline(&cfg, counts[i], 0, 30, &rp) == 0,
					"%u producers", counts[i]);
				H_CHECK(!memcmp(r1.hash, rp.hash, r1.ranks * 30 * 8),
					"%u producers differ from 1", counts[i]);
				h_run_free(&rp);
			}
			H_CHECK(h_pipeline(&cfg, 2, 11, 19, &rp) == 0, "resumed");
			for (uint32_t r = 0; r < r1.ranks; r++)
				H_CHECK(!memcmp(&r1.hash[r * 30 + 11], &rp.hash[r * 19], 19 * 8),
					"resumed rank %u differs", r);
			h_run_free(&rp);
			h_run_free(&r1);
			printf("ok: .jsonl.zst source: 1, 2, 4 producers and a resume at step 11 "
			       "agree\n");
		}
		free(jsonl);
	}
	/* The raw text window order over more chunks than the epoch tables keep one entry
	 * for (64): every sample of three epochs at the offset a direct computation gives
	 * (the epoch's chunk order in full, then the windows of the chunk in their order). */
	{
		struct sf_dataset *ds;
		struct sf_builder *b;
		struct sf_err e = {0};
		const int copies = 6;
		char *big = malloc(text_len * copies);
		uint64_t checked = 0, *expect, x = 0x9e3779b97f4a7c15ull;

		for (int i = 0; i < copies; i++)
			memcpy(big + text_len * (size_t)i, text, text_len);
		snprintf(path, sizeof(path), "%s/six.txt", dir);
		h_write_file(path, big, text_len * copies);
		free(big);
		config_text(&cfg, path, vocab_dir, 64);
		cfg.sources[0].separator = "\n\n";
		H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s", e.msg);
		H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
		H_CHECK(ds->n_chunks > 64, "only %llu chunks", (unsigned long long)ds->n_chunks);
		expect = malloc(3 * ds->n_windows * sizeof(*expect));
		for (uint64_t epoch = 0; epoch < 3; epoch++) {
			struct sf_perm chunks;
			uint64_t k = epoch * ds->n_windows;

			sf__perm_init(&chunks, ds->n_chunks, ds->seed, epoch, 1);
			for (uint64_t i = 0; i < ds->n_chunks; i++) {
				const struct sf_chunk *ch = &ds->chunks[sf__perm_apply(&chunks, i)];
				uint64_t first = (ch->start + 63) / 64;
				uint64_t end = (ch->start + ch->n_tokens + 63) / 64;
				struct sf_perm w;

				end = end < ds->n_windows ? end : ds->n_windows;
				if (end <= first)
					continue;
				sf__perm_init(&w, end - first, ds->seed, epoch,
					      2 + (uint64_t)(ch - ds->chunks));
				for (uint64_t j = 0; j < end - first; j++, k++, checked++) {
					expect[k] = (first + sf__perm_apply(&w, j)) * 64;
					H_CHECK(sf__builder_sample_offset(b, k) == expect[k],
						"sample %llu", (unsigned long long)k);
				}
			}
			H_CHECK(k == (epoch + 1) * ds->n_windows, "epoch %llu has %llu samples",
				(unsigned long long)epoch,
				(unsigned long long)(k - epoch * ds->n_windows));
		}
		/* The same samples out of order: jumps back, far ahead, and short skips, so
		 * that a lookup starts from the last position found, mid-stride, or from a
		 * table entry. */
		for (uint64_t i = 0, k = 0; i < 20000; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			k = x % 4 ? (k + 1 + x % 97) % (3 * ds->n_windows)
				  : x % (3 * ds->n_windows);
			H_CHECK(sf__builder_sample_offset(b, k) == expect[k], "sample %llu (jump)",
				(unsigned long long)k);
		}
		printf("ok: raw text window order over %llu chunks: %llu samples of 3 epochs as "
		       "computed directly, in order and 20000 out of order\n",
		       (unsigned long long)ds->n_chunks, (unsigned long long)checked);
		free(expect);
		sf__builder_free(b);
		sf__dataset_close(ds);
	}
	h_rmtree(dir);
	free(dir);
	free(text);
	free(ref_bytes);
	return 0;
}
