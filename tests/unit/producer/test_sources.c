/*
 * Bad inputs, one test each: a missing file, a glob matching nothing, truncated and
 * mis-tagged pre-tokenized files, a malformed Megatron index, an invalid JSON line, and
 * invalid or truncated zstd and gzip streams. Each must fail cleanly with a message that
 * names the file and the byte offset or line; with the skip policy the record (or file)
 * is skipped and counted instead.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "shmfeed/shmfeed.h"
#include "producer/producer.h"
#include "producer/text_cache.h"
#include "producer/text_index.h"
#include "producer/source/tokens.h"
#include "producer/token_copy.h"
#include "tests/unit/producer/source_fixture.h"

static void setup(void)
{
	source_fixture_setup("srctest", 2, 8);
}

TestSuite(sources, .init = setup, .fini = source_fixture_teardown);

static void put(const char *name, const void *data, size_t len)
{
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	cr_assert(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
}

/* Open the dataset and expect failure `code` with every `needle` in the message. */
static void expect_fail(int code, const char *n1, const char *n2)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	int r = sf__dataset_open(&cfg, &ds, &e);

	cr_assert_eq(r, code, "got %d (%s), message: %s", r, sf_strerror(r), e.msg);
	cr_expect(strstr(e.msg, n1), "message '%s' lacks '%s'", e.msg, n1);
	if (n2)
		cr_expect(strstr(e.msg, n2), "message '%s' lacks '%s'", e.msg, n2);
}

static void expect_skip(uint64_t skipped, const char *needle)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	src.on_error = SF_ON_ERROR_SKIP;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.skipped, skipped);
	cr_expect(strstr(sf__dataset_first_skip(ds), needle), "first skip '%s' lacks '%s'",
		  sf__dataset_first_skip(ds), needle);
	sf__dataset_close(ds);
}

Test(sources, missing_file)
{
	snprintf(path, sizeof(path), "%s/none.bin", dir);
	expect_fail(-ENOENT, path, "no such file");
	/* Under on_error: skip too, as a glob matching nothing is: a mistyped path beside
	 * good ones was skipped as a bad record, and the job ran without it. */
	src.on_error = SF_ON_ERROR_SKIP;
	expect_fail(-ENOENT, path, "no such file");
	/* A Megatron prefix names no file itself. */
	snprintf(path, sizeof(path), "%s/none", dir);
	expect_fail(-ENOENT, path, "no such file");
}

Test(sources, glob_matching_nothing)
{
	snprintf(path, sizeof(path), "%s/*.bin", dir);
	expect_fail(-ENOENT, path, "no file matches");
}

Test(sources, nanogpt_odd_size)
{
	uint16_t t[40] = {0};

	put("odd.bin", t, sizeof(t) - 1);
	expect_fail(SF_E_SOURCE, path, "byte 78: truncated");
}

/* A Megatron .bin of int32 tokens without its .idx is a headerless .bin, read as
 * nanoGPT's uint16: every second token 0. It was trained on. */
Test(sources, nanogpt_file_of_32_bit_tokens)
{
	uint32_t t[4096];
	uint16_t u[4096];

	for (uint32_t i = 0; i < 4096; i++)
		t[i] = 400 + i % 50;
	put("int32.bin", t, sizeof(t));
	expect_fail(SF_E_SOURCE, path, "every second uint16 token of the first 2048 is below 32");
	/* cl100k_base's ids above 65,535 (2 % of them in a Megatron file of its tokens) set
	 * the high half to 1: the file was read as uint16 all the same. */
	for (uint32_t i = 0; i < 4096; i += 50)
		t[i] = 70000 + i;
	put("int32_wide_ids.bin", t, sizeof(t));
	expect_fail(SF_E_SOURCE, path, "every second uint16 token of the first 2048 is below 32");
	/* o200k_base text: up to 12 % of a window's ids above 65,535. */
	for (uint32_t i = 0; i < 4096; i++)
		t[i] = i % 7 ? 400 + i % 50 : 100000 + i;
	put("int32_o200k.bin", t, sizeof(t));
	expect_fail(SF_E_SOURCE, path, "every second uint16 token of the first 2048 is below 32");
	/* Given as nanoGPT's (a char-level corpus of one letter a line looks the same). */
	src.format = SF_FMT_NANOGPT;
	{
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};

		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_close(ds);
	}
	src.format = SF_FMT_AUTO;
	/* uint16 tokens with zeros among them, and a file of zeros, are tokens as before. */
	for (uint32_t i = 0; i < 4096; i++)
		u[i] = i % 2 ? (uint16_t)(i % 3 ? 0 : 700) : (uint16_t)(400 + i % 50);
	put("zeros_among.bin", u, sizeof(u));
	{
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};

		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_close(ds);
		memset(u, 0, sizeof(u));
		put("zeros.bin", u, sizeof(u));
		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_close(ds);
	}
}

Test(sources, llmc_wrong_magic)
{
	int32_t h[256 + 20] = {12345, 1, 20};

	put("bad.llmc", h, sizeof(h));
	src.format = SF_FMT_LLMC;
	expect_fail(SF_E_SOURCE, path, "byte 0: wrong magic 12345");
}

/* llm.c's other .bin files (evaluation examples, model checkpoints, its tokenizer, debug
 * and training states) were read as nanoGPT tokens by auto, header and all (two
 * reviews): each is refused by name. */
Test(sources, llmc_files_of_no_tokens_are_refused_by_name)
{
	static const struct {
		int32_t magic;
		const char *what;
	} files[] = {{20240326, "model checkpoint"}, {20240327, "debug state"},
		     {20240328, "tokenizer"},	     {20240522, "evaluation file"},
		     {20240527, "training state"},   {20240803, "Llama 3 model"}};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		int32_t h[256 + 20] = {files[i].magic, 1, 20};

		put("llmc_other.bin", h, sizeof(h));
		src.format = SF_FMT_AUTO;
		expect_fail(SF_E_SOURCE, path, files[i].what);
		src.format = SF_FMT_LLMC;
		expect_fail(SF_E_SOURCE, path, files[i].what);
	}
	src.format = SF_FMT_AUTO;
}

/* What llm.c's write_datafile makes must open: gpt-2 (v1, uint16) and llama-3 (v7, uint32). */
static void expect_llmc_opens(const char *model_desc, uint32_t width)
{
	uint32_t tokens[300];
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	for (uint32_t i = 0; i < 300; i++)
		tokens[i] = i * 7;
	snprintf(path, sizeof(path), "%s/shard_000000.bin", dir);
	write_llmc_datafile(path, tokens, 300, model_desc);
	cfg.dtype = width == 4 ? SF_DTYPE_I32 : SF_DTYPE_U16;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s: %s", model_desc, e.msg);
	sf__dataset_close(ds);
}

Test(sources, llmc_gpt2_shard_as_llmc_writes_it)
{
	expect_llmc_opens("gpt-2", 2);
}

Test(sources, llmc_llama3_shard_as_llmc_writes_it)
{
	expect_llmc_opens("llama-3", 4);
}

Test(sources, llmc_version_not_of_its_magic)
{
	int32_t h[256 + 20] = {20240801, 1, 20};

	put("v1wide.bin", h, sizeof(h));
	expect_fail(SF_E_SOURCE, path, "byte 4: unsupported llm.c version 1 for magic 20240801");
}

Test(sources, llmc_truncated_tokens)
{
	int32_t h[256 + 10] = {20240520, 1, 100};

	put("short.bin", h, sizeof(h));
	expect_fail(SF_E_SOURCE, path, "byte 1064: truncated: the header announces 100 tokens");
}

/* Two shards joined by cat: llm.c's loader refuses the size; the second shard's tokens
 * were dropped without a word. */
Test(sources, llmc_bytes_after_the_tokens)
{
	int32_t h[2 * (256 + 10)] = {20240520, 1, 20, [266] = 20240520, 1, 20};

	put("joined.bin", h, sizeof(h));
	expect_fail(SF_E_SOURCE, path,
		    "byte 1064: the header announces 20 tokens, which end here, and 1064 bytes "
		    "follow them");
}

Test(sources, llmc_truncated_header)
{
	int32_t h[10] = {20240520, 1, 100};

	put("tiny.llmc", h, sizeof(h));
	src.format = SF_FMT_LLMC;
	expect_fail(SF_E_SOURCE, path, "byte 40: truncated");
}

static void put_megatron(const char *magic, uint8_t dtype, uint64_t bin_tokens, size_t idx_cut)
{
	unsigned char idx[256];
	size_t n = 0;
	uint64_t v;
	int32_t len = 16;
	uint16_t tokens[64] = {0};

	memcpy(idx, magic, 9);
	n = 9;
	v = 1;
	memcpy(idx + n, &v, 8);
	n += 8;
	idx[n++] = dtype;
	v = 2; /* sequences */
	memcpy(idx + n, &v, 8);
	n += 8;
	v = 3; /* document indices */
	memcpy(idx + n, &v, 8);
	n += 8;
	memcpy(idx + n, &len, 4);
	memcpy(idx + n + 4, &len, 4);
	n += 8;
	v = 0;
	memcpy(idx + n, &v, 8);
	v = 32;
	memcpy(idx + n + 8, &v, 8);
	n += 16;
	for (uint64_t d = 0; d < 3; d++) {
		memcpy(idx + n, &d, 8);
		n += 8;
	}
	put("m.bin", tokens, bin_tokens * 2);
	put("m.idx", idx, idx_cut ? idx_cut : n);
}

/* The pair of put_megatron() with its document indices (0, 1, 2) set to `docs`. */
static void put_megatron_docs(uint64_t d0, uint64_t d1, uint64_t d2)
{
	const uint64_t docs[3] = {d0, d1, d2};
	FILE *f;

	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	f = fopen(path, "r+b");
	cr_assert(f && fseek(f, 34 + 8 + 16, SEEK_SET) == 0 && fwrite(docs, 8, 3, f) == 3);
	cr_assert_eq(fclose(f), 0);
}

/* Each rule of the document index has its own words ("out of order" said them all). */
Test(sources, megatron_document_index_rules)
{
	put_megatron_docs(1, 1, 2);
	expect_fail(SF_E_SOURCE, "m.idx", "byte 58: document index 0 is 1: the first is 0");
	put_megatron_docs(0, 1, 1);
	expect_fail(SF_E_SOURCE, "m.idx",
		    "byte 74: document index 2 is 1: the last is the count of sequences, 2");
	put_megatron_docs(0, 3, 2);
	expect_fail(SF_E_SOURCE, "m.idx",
		    "byte 66: document index 1 is 3: past the count of sequences, 2");
	put_megatron_docs(0, 2, 2);
	{
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};

		/* An empty document (two equal indices) is allowed, as Megatron writes it. */
		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_close(ds);
	}
}

Test(sources, megatron_wrong_magic)
{
	put_megatron("MMIDIDY\0\0", 8, 32, 0);
	expect_fail(SF_E_SOURCE, "m.idx", "byte 0: wrong magic");
}

Test(sources, megatron_truncated_index)
{
	put_megatron("MMIDIDX\0\0", 8, 32, 60);
	expect_fail(SF_E_SOURCE, "m.idx", "byte 60: truncated");
}

/* put_megatron()'s index with `len` bytes at `at` replaced by `bytes`. */
static void put_megatron_patched(long at, const void *bytes, size_t len)
{
	FILE *f;

	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	f = fopen(path, "r+b");
	cr_assert(f && fseek(f, at, SEEK_SET) == 0 && fwrite(bytes, len, 1, f) == 1);
	cr_assert_eq(fclose(f), 0);
}

Test(sources, megatron_negative_length_says_each_offset_once)
{
	int32_t bad = -5;

	put_megatron_patched(38, &bad, sizeof(bad));
	/* Byte 38 of the .idx holds the length; byte 32 of the .bin is where it starts. */
	expect_fail(SF_E_SOURCE,
		    "m.idx: byte 38: sequence 1 has length -5 and starts at byte 32 "
		    "of the .bin",
		    "(expected a non-negative length, starting at byte 32)");
}

/* Megatron's pointers are int64: a negative one is printed as such, not as 2^64 - 2. */
Test(sources, megatron_negative_pointer_reads_as_negative)
{
	int64_t bad = -2;

	put_megatron_patched(50, &bad, sizeof(bad));
	expect_fail(SF_E_SOURCE, "m.idx: byte 38: sequence 1 has length 16 and starts at byte -2 "
				 "of the .bin",
		    NULL);
}

Test(sources, megatron_bad_dtype)
{
	put_megatron("MMIDIDX\0\0", 6, 32, 0);
	expect_fail(SF_E_SOURCE, "m.idx", "byte 17: dtype code 6");
}

/* A uint16 pair whose code says int32: refused (Megatron's reader reads it as garbage),
 * but the message blamed sequence 1's length (a review). */
Test(sources, megatron_dtype_code_of_the_other_width)
{
	put_megatron("MMIDIDX\0\0", 4, 32, 0);
	expect_fail(SF_E_SOURCE,
		    "m.idx: byte 17: dtype code 4 (int32), but the sequences' "
		    "pointers advance 2 bytes a token",
		    NULL);
}

/* Counts at byte 18 that are not the file's were read as arrays at other offsets, and
 * named a sequence; bytes after the arrays (Megatron's multimodal modes) were ignored. */
Test(sources, megatron_counts_must_make_the_file)
{
	uint64_t docs = 2;
	const uint8_t modes[2] = {0, 0};
	FILE *f;

	put_megatron_patched(26, &docs, sizeof(docs));
	expect_fail(SF_E_SOURCE,
		    "m.idx: byte 18: 2 sequences and 2 document indices make an "
		    "index of 74 bytes, but the file holds 82",
		    NULL);
	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	f = fopen(path, "ab");
	cr_assert(f && fwrite(modes, sizeof(modes), 1, f) == 1);
	cr_assert_eq(fclose(f), 0);
	expect_fail(SF_E_SOURCE, "m.idx: a multimodal index", NULL);
}

/* A directory of pairs read as format megatron, with Megatron's cached index beside them:
 * the message named m_doc_idx.npy.idx, a file nobody gave (a review). */
Test(sources, megatron_format_names_a_file_of_no_pair)
{
	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	put("m_doc_idx.npy", "\x93NUMPY", 6);
	src.format = SF_FMT_MEGATRON;
	expect_fail(SF_E_SOURCE, "m_doc_idx.npy: not a Megatron .bin, .idx or prefix", NULL);
}

Test(sources, megatron_short_bin)
{
	put_megatron("MMIDIDX\0\0", 8, 30, 0);
	expect_fail(SF_E_SOURCE, "m.bin", "byte 60: the index describes 64 bytes");
}

Test(sources, megatron_good_pair_opens)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_tokens, 32);
	cr_expect_eq(st.n_docs, 2);
	sf__dataset_close(ds);
}

static const char jsonl[] = "{\"text\": \"first document, long enough to hold a window\"}\n"
			    "\n"
			    "{\"text\": \"second\"}\n"
			    "{\"text\": \"third\", }\n"
			    "{\"body\": \"fourth\"}\n"
			    "{\"text\": \"fifth document\"}\n";

Test(sources, jsonl_invalid_line)
{
	cfg.encoding = "bytes";
	put("docs.jsonl", jsonl, strlen(jsonl));
	expect_fail(SF_E_SOURCE, path, ":4: column 19: invalid JSON: expected a member name");
}

Test(sources, jsonl_skip_policy_counts)
{
	cfg.encoding = "bytes";
	put("docs.jsonl", jsonl, strlen(jsonl));
	expect_skip(2, ":4: column 19: invalid JSON");
}

Test(sources, jsonl_missing_field)
{
	static const char j[] = "{\"text\": \"a document with some words in it\"}\n{\"body\": 1}\n";

	cfg.encoding = "bytes";
	put("f.jsonl", j, strlen(j));
	expect_fail(SF_E_SOURCE, path, ":2: no field text");
}

/* A key of another format would be ignored: a separator given to tokens or to JSONL (one
 * document a line), a text field other than the default given to raw text or tokens. */
Test(sources, keys_of_another_format_are_refused)
{
	static const char j[] = "{\"text\": \"a document with some words in it\"}\n";
	uint16_t t[40] = {0};
	char sep[] = "\n\n", body[] = "body", text[] = "text";

	cfg.encoding = "bytes";
	put("t.bin", t, sizeof(t));
	src.separator = sep;
	expect_fail(SF_E_CONFIG, path, "'separator' splits raw text (format text)");
	put("d.jsonl", j, strlen(j));
	expect_fail(SF_E_CONFIG, path, "'separator' splits raw text (format text)");
	src.separator = NULL;
	src.text_field = body;
	put("t.bin", t, sizeof(t));
	expect_fail(SF_E_CONFIG, path, "'text_field' names the field of a JSONL record");
	put("d.txt", j, strlen(j));
	expect_fail(SF_E_CONFIG, path, "'text_field' names the field of a JSONL record");
	/* `index: beside` places the chunk index of raw text: tokens have none (a review). */
	src.text_field = NULL;
	src.index = SF_INDEX_BESIDE;
	put("t.bin", t, sizeof(t));
	expect_fail(SF_E_CONFIG, path, "'index' says where the chunk index of raw text goes");
	src.index = SF_INDEX_CACHE;
	put("d.txt", j, strlen(j));
	/* The default, which every source carries, and a separator for raw text are fine. */
	src.text_field = text;
	src.separator = sep;
	{
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};

		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_close(ds);
	}
}

/* A byte order mark, which editors on Windows write, was "invalid JSON: invalid number". */
Test(sources, jsonl_byte_order_mark_is_named)
{
	static const char j[] = "\xef\xbb\xbf{\"text\": \"a document with some words in it\"}\n";

	cfg.encoding = "bytes";
	put("bom.jsonl", j, strlen(j));
	expect_fail(SF_E_SOURCE, path, ":1: column 1: a UTF-8 byte order mark (EF BB BF)");
}

/* A UTF-16 file (Windows' "Unicode" save) was "invalid JSON: invalid number". */
Test(sources, jsonl_utf16_is_named)
{
	static const char le[] = "\xff\xfe{\0\"\0t\0e\0x\0t\0\"\0:\0 \0\"\0a\0\"\0}\0\n\0";
	static const char be[] = "\xfe\xff\0{\0\"\0t\0e\0x\0t\0\"\0:\0 \0\"\0a\0\"\0}\0\n";

	cfg.encoding = "bytes";
	put("le.jsonl", le, sizeof(le) - 1);
	expect_fail(SF_E_SOURCE, path, ":1: column 1: a UTF-16 byte order mark (FF FE)");
	put("be.jsonl", be, sizeof(be) - 1);
	expect_fail(SF_E_SOURCE, path, ":1: column 1: a UTF-16 byte order mark (FE FF)");
	/* UTF-32's mark starts as UTF-16's: it was named UTF-16, whose conversion gives text
	 * full of NULs (a review). */
	put("le32.jsonl", "\xff\xfe\0\0{\0\0\0", 8);
	expect_fail(SF_E_SOURCE, path, ":1: column 1: a UTF-32 byte order mark (FF FE 00 00)");
	src.format = SF_FMT_TEXT;
	put("le32.txt", "\xff\xfe\0\0h\0\0\0", 8);
	expect_fail(SF_E_SOURCE, path,
		    ": a UTF-32 byte order mark (FF FE 00 00): the file is "
		    "UTF-32");
}

/*
 * A dangling symbolic link in a directory source (a shard on a volume that did not mount)
 * is a file that cannot be read, named with where it points; it was left out without a
 * word, as the directory's other entries that are no regular file are.
 */
static void dangling_link_beside(const char *good_name, const void *good, size_t len,
				 const char *link_name)
{
	char link[600], want[700];

	cfg.encoding = "bytes";
	put(good_name, good, len);
	snprintf(link, sizeof(link), "%s/%s", dir, link_name);
	cr_assert_eq(symlink("/nonexistent/mount/shard", link), 0);
	snprintf(path, sizeof(path), "%s", dir);
	snprintf(want, sizeof(want),
		 "%s: cannot open: a symbolic link to /nonexistent/mount/shard, which does not "
		 "exist",
		 link);
	expect_fail(-ENOENT, want, NULL);
	expect_skip(1, want);
}

Test(sources, a_dangling_link_among_text_files_is_named)
{
	static const char good[] = "a plain text document that is long enough for windows";

	dangling_link_beside("a.txt", good, strlen(good), "gone.txt");
}

/* Under a name format auto does not know, too (it said the name had no .idx). */
Test(sources, a_dangling_link_of_no_known_name_is_named)
{
	static const char good[] = "a plain text document that is long enough for windows";

	dangling_link_beside("a.txt", good, strlen(good), "shard-07");
}

Test(sources, a_dangling_link_among_token_files_is_named)
{
	uint16_t t[64];

	for (uint16_t k = 0; k < 64; k++)
		t[k] = k;
	dangling_link_beside("a.bin", t, sizeof(t), "gone.bin");
}

static size_t zstd_bytes(void *out, size_t cap)
{
	static const char text[] = "{\"text\": \"a zstd compressed document of some length\"}\n";
	size_t n = ZSTD_compress(out, cap, text, strlen(text), 3);

	cr_assert(!ZSTD_isError(n));
	return n;
}

Test(sources, zstd_invalid_stream)
{
	unsigned char z[256];
	size_t n = zstd_bytes(z, sizeof(z));

	cfg.encoding = "bytes";
	memset(z + 4, 0xff, 3); /* break the frame header after the magic */
	put("bad.jsonl.zst", z, n);
	expect_fail(SF_E_SOURCE, path, "invalid zstd stream");
	cr_expect(strstr(path, "bad.jsonl.zst"));
}

Test(sources, zstd_truncated_stream)
{
	unsigned char z[256];
	size_t n = zstd_bytes(z, sizeof(z));
	char want[64];

	cfg.encoding = "bytes";
	put("cut.jsonl.zst", z, n - 5);
	snprintf(want, sizeof(want), "byte %zu: truncated zstd stream", n - 5);
	expect_fail(SF_E_SOURCE, path, want);
}

/* An empty .zst is no stream at all (zstd -d says so too): refused as .gz is, not read as
 * a file of no documents. */
Test(sources, empty_compressed_files_are_refused)
{
	static const char *names[] = {"empty.jsonl.zst", "empty.txt.gz"};

	cfg.encoding = "bytes";
	for (size_t i = 0; i < 2; i++) {
		put(names[i], "", 0);
		expect_fail(SF_E_SOURCE, path, "byte 0: truncated");
		expect_fail(SF_E_SOURCE, path, "(the file is empty)");
	}
}

/* Damage found by the frame's checksum has no byte of its own: the message says how far
 * the decoder had read (it said "byte 0"), not a "byte N" the damage would be at. */
Test(sources, zstd_damage_says_how_far_it_read)
{
	static char text[1 << 16];
	unsigned char z[1 << 16];
	size_t n;
	char want[96];

	for (size_t i = 0; i + 1 < sizeof(text); i++)
		text[i] = i % 61 == 60 ? '\n' : "abcdefghij klmnopq rstuvwxyz"[(i * 7 + i / 13) % 28];
	{
		ZSTD_CCtx *cc = ZSTD_createCCtx();

		cr_assert(cc);
		ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
		n = ZSTD_compress2(cc, z, sizeof(z), text, strlen(text));
		ZSTD_freeCCtx(cc);
	}
	cr_assert(!ZSTD_isError(n));
	z[n - 1] ^= 0x55; /* the checksum */
	cfg.encoding = "bytes";
	put("sum.txt.zst", z, n);
	snprintf(want, sizeof(want), "invalid zstd stream, found by byte %zu of %zu", n, n);
	expect_fail(SF_E_SOURCE, path, want);
	expect_fail(SF_E_SOURCE, path, "checksum");
}

/* `text` gzip-compressed into out[0..cap): the compressed length. */
static size_t gzip_text(const char *text, unsigned char *out, size_t cap)
{
	z_stream zs = {0};

	cr_assert_eq(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_in = (unsigned char *)text;
	zs.avail_in = (uInt)strlen(text);
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	cr_assert_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
	deflateEnd(&zs);
	return cap - zs.avail_out;
}

static size_t gzip_bytes(unsigned char *out, size_t cap)
{
	return gzip_text("{\"text\": \"a gzip compressed document of some length\"}\n", out, cap);
}

Test(sources, gzip_invalid_stream)
{
	unsigned char z[256];
	size_t n = gzip_bytes(z, sizeof(z));

	cfg.encoding = "bytes";
	z[2] = 9; /* an unknown compression method */
	put("bad.jsonl.gz", z, n);
	expect_fail(SF_E_SOURCE, path, "invalid gzip stream");
}

Test(sources, gzip_truncated_stream)
{
	unsigned char z[256];
	size_t n = gzip_bytes(z, sizeof(z));
	char want[64];

	cfg.encoding = "bytes";
	put("cut.txt.gz", z, n - 6);
	snprintf(want, sizeof(want), "byte %zu: truncated gzip stream", n - 6);
	expect_fail(SF_E_SOURCE, path, want);
}

/* Zero bytes after a member (a tape block's padding) are passed over, as Python's gzip
 * does: at the end, or before another member; anything else after them is refused. */
Test(sources, gzip_zero_padding)
{
	unsigned char z[1024] = {0};
	size_t n = gzip_bytes(z, sizeof(z));
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	cfg.encoding = "bytes";
	put("padded.jsonl.gz", z, n + 512);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_tokens, strlen("a gzip compressed document of some length") + 1);
	sf__dataset_close(ds);
	memset(z + n + 500, 1, 12);
	put("padded.jsonl.gz", z, n + 512);
	expect_fail(SF_E_SOURCE, path, "invalid gzip stream");
	memset(z + n + 500, 0, 12);
	cr_assert_eq(gzip_bytes(z + n + 512, sizeof(z) - n - 512), n);
	put("padded.jsonl.gz", z, 2 * n + 512);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_tokens, 2 * (strlen("a gzip compressed document of some length") + 1));
	sf__dataset_close(ds);
}

/* One open of the fixture's config: its note holds `want` and `also` (when not NULL), or
 * is empty where `want` is "". */
static void open_expect_note(const char *want, const char *also)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	const char *note;

	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	note = sf__dataset_note(ds);
	if (!want[0])
		cr_expect_str_empty(note);
	else
		cr_expect(strstr(note, want), "'%s' lacks '%s'", note, want);
	if (also)
		cr_expect(strstr(note, also), "'%s' lacks '%s'", note, also);
	sf__dataset_close(ds);
}

/* A text file whose lines end with CRLF holds none of a "\n\n" separator: it is one
 * document (the separator is the user's), which the dataset says once, naming the file and
 * the separator that would split it; it said nothing. */
Test(sources, crlf_text_under_a_newline_separator_is_named)
{
	static const char text[] = "first document\r\nof two lines\r\n\r\nsecond document\r\n";

	cfg.encoding = "bytes";
	src.separator = "\n\n";
	put("crlf.txt", text, strlen(text));
	open_expect_note("crlf.txt: lines end with CRLF", "\"\\r\\n\\r\\n\" would split it");
	/* With the separator it holds, nothing to say. */
	src.separator = "\r\n\r\n";
	open_expect_note("", NULL);
}

/*
 * Text that is not UTF-8 is read as raw bytes, each invalid one a token of its own: a
 * review fed Latin-1 files (38.7 % of their tokens lone bytes), an ELF binary and UTF-16
 * without a byte order mark, all without a word (JSONL refuses such bytes). Said from the
 * file's first 64 KiB, at the first open and from the cached index; clean UTF-8 (NULs
 * below a tenth of it too) says nothing.
 */
Test(sources, text_that_is_not_utf8_is_named)
{
	static const char latin[] = "Caf\xe9 r\xe9sum\xe9.\n\nna\xefve\n";
	static const char clean[] = "caf\xc3\xa9 and a NUL \0 in text\n\nsecond\n";
	char u16[200];
	char *d = dir;

	cfg.encoding = "bytes";
	src.separator = "\n\n";
	put("clean.txt", clean, sizeof(clean) - 1);
	open_expect_note("", NULL);
	put("latin.txt", latin, sizeof(latin) - 1);
	src.paths = &d;
	for (int warm = 0; warm < 2; warm++)
		open_expect_note("/latin.txt: 4 of its first 20 bytes are not UTF-8, the first at "
				 "offset 3 (1 file(s)",
				 NULL);
	/* UTF-16 without its mark: NULs, and this file the one named. */
	for (size_t i = 0; i < sizeof(u16) / 2; i++) {
		u16[2 * i] = "hello, world\n"[i % 13];
		u16[2 * i + 1] = 0;
	}
	put("wide.txt", u16, sizeof(u16));
	open_expect_note("/wide.txt: 50 % of its first 200 bytes are NUL (2 file(s) start so or "
			 "not as UTF-8): UTF-16 without a byte order mark",
			 NULL);
	unlink(path);
	/* The first byte said is the first one not UTF-8, not a NUL before it. */
	put("latin.txt",
	    "abc\0defghijklmnop\xe9"
	    "q\n",
	    20);
	open_expect_note("1 of its first 20 bytes are not UTF-8, the first at offset 17", NULL);
}

/* JSONL refuses bytes that are not UTF-8 as bad records, named and counted as such: no
 * encoding note, which said they were read as tokens (a review). */
Test(sources, jsonl_not_utf8_has_no_encoding_note)
{
	static const char j[] = "{\"text\": \"caf\xe9\"}\n{\"text\": \"good text here\"}\n";
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	cfg.encoding = "bytes";
	src.on_error = SF_ON_ERROR_SKIP;
	put("a.jsonl", j, sizeof(j) - 1);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_expect(!strstr(sf__dataset_note(ds), "not UTF-8"), "'%s'", sf__dataset_note(ds));
	sf__dataset_close(ds);
}

/*
 * Windows mode takes a chunk's windows together, and a chunk ends at a document's end: a
 * document of more than 1 MiB among other text fills a chunk of its own, and the batches
 * drawn from it hold it alone (a review: 99 % of the batches of 8 from one file over
 * 20 files without a separator). Said, at the first open and from the cached index; not
 * for a corpus of that one document, nor in random mode.
 */
Test(sources, a_large_document_among_others_is_named_in_windows_mode)
{
	const size_t big = (1u << 20) + 4096;
	char *text = malloc(big), *d = dir, msg[768] = "";
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	cr_assert_not_null(text);
	for (size_t i = 0; i < big; i++)
		text[i] = (char)('a' + i % 26);
	cfg.encoding = "bytes";
	put("book.txt", text, big);
	/* Alone: nothing to mix it with. */
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_expect_eq(sf__dataset_large_docs(ds, msg, sizeof(msg)), 0, "%s", msg);
	sf__dataset_close(ds);
	put("other.txt", text, big / 2);
	put("more.txt", text, big / 2 + 10);
	/* A Latin-1 file beside: its note does not hide this one (a review). */
	put("latin.txt", "caf\xe9\n", 5);
	src.paths = &d;
	for (int warm = 0; warm < 2; warm++) {
		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		cr_expect_eq(sf__dataset_large_docs(ds, msg, sizeof(msg)), 1);
		cr_expect(strstr(msg,
				 "/book.txt: a document of 1.1 MB (the largest; 1 file(s) hold "
				 "documents of 1.0 MB or more)"),
			  "'%s'", msg);
		cr_expect(strstr(msg, "or use sampling.mode: random"), "'%s'", msg);
		cr_expect(strstr(sf__dataset_note(ds), "latin.txt"), "'%s'", sf__dataset_note(ds));
		sf__dataset_close(ds);
	}
	/* Not a batch's worth: B x W x (T + 1) x 4 bytes above the document. */
	cfg.batch_size = 65536;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_expect_eq(sf__dataset_large_docs(ds, msg, sizeof(msg)), 0, "%s", msg);
	sf__dataset_close(ds);
	cfg.batch_size = 2;
	cfg.mode = SF_SAMPLE_RANDOM;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	cr_expect_eq(sf__dataset_large_docs(ds, msg, sizeof(msg)), 0, "%s", msg);
	sf__dataset_close(ds);
	free(text);
}

/*
 * Open file `name` holding `text` under `separator`: its note must hold both needles, at
 * the first open, which cuts the file, and at the next, which takes its cached index (a
 * new user's trial: `check` made the index and said it, and every run after was silent).
 */
static void expect_note(const char *name, const char *text, char *separator, const char *n1,
			const char *n2)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	cfg.encoding = "bytes";
	src.separator = separator;
	put(name, text, strlen(text));
	for (int warm = 0; warm < 2; warm++) {
		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		cr_expect_eq(st.index_loaded, warm);
		cr_expect(strstr(sf__dataset_note(ds), n1), "warm %d: '%s' lacks '%s'", warm,
			  sf__dataset_note(ds), n1);
		cr_expect(strstr(sf__dataset_note(ds), n2), "warm %d: '%s' lacks '%s'", warm,
			  sf__dataset_note(ds), n2);
		sf__dataset_close(ds);
	}
}

/*
 * The other mismatches of line ends were silent (a review): CRLF lines split at "\n" kept
 * each line's \r, and a blank line became a document "\r"; a file of LF lines under a
 * separator of CRLF ones was one document.
 */
Test(sources, line_ends_that_the_separator_does_not_match_are_named)
{
	expect_note("crlf.txt", "first line\r\n\r\nsecond line\r\n", "\n",
		    "crlf.txt: lines end with CRLF: documents split at \"\\n\" keep the \\r",
		    "separator \"\\r\\n\" would not");
	expect_note("lf.txt", "first document\nof two lines\n\nsecond document\n", "\r\n\r\n",
		    "lf.txt: lines end with LF: the separator \"\\r\\n\\r\\n\" is nowhere in it",
		    "separator \"\\n\\n\" would split it");
}

/*
 * A compressed file's line ends were looked for after its first 64 MiB had been released
 * (they read as zeros then), so CRLF lines at its start went unsaid (a review, from the
 * code). 70 MiB of text whose CRLF lines come first.
 */
Test(sources, line_ends_at_the_start_of_a_large_compressed_file_are_named)
{
	static const char head[] = "first line\r\n\r\nsecond line\r\n";
	const size_t n = 70u << 20, cap = 1u << 20;
	char *text = malloc(n + 1);
	unsigned char *z = malloc(cap);
	size_t zn;

	cr_assert(text && z);
	memcpy(text, head, strlen(head));
	for (size_t i = strlen(head); i < n; i++)
		text[i] = i % 16 == 15 ? '\n' : 'a' + i % 16;
	text[n] = 0;
	zn = gzip_text(text, z, cap);
	free(text);
	cfg.encoding = "bytes";
	src.format = SF_FMT_TEXT;
	src.separator = "\n";
	put("big.txt.gz", z, zn);
	free(z);
	open_expect_note("big.txt.gz: lines end with CRLF", NULL);
}

/*
 * Every file's mismatch is kept in the index, not only the one said (a review: a warm
 * start of a job reading only the second of two such files said nothing).
 */
Test(sources, a_warm_start_of_any_file_says_its_line_ends)
{
	static const char text[] = "first line\r\n\r\nsecond line\r\n";
	char second[sizeof(path)];
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	cfg.encoding = "bytes";
	src.separator = "\n";
	put("a.txt", text, strlen(text));
	put("b.txt", text, strlen(text));
	snprintf(second, sizeof(second), "%s", path);
	snprintf(path, sizeof(path), "%s", dir);
	open_expect_note("a.txt: lines end with CRLF", NULL);
	snprintf(path, sizeof(path), "%s", second);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.index_loaded, 1);
	cr_expect(strstr(sf__dataset_note(ds), "b.txt: lines end with CRLF"), "'%s'",
		  sf__dataset_note(ds));
	sf__dataset_close(ds);
}

Test(sources, bad_file_skipped_among_good)
{
	static const char good[] = "a plain text document that is long enough for windows";
	uint16_t t[5] = {0};
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	cfg.encoding = "bytes";
	put("a.txt", good, strlen(good));
	put("b.txt.gz", t, sizeof(t)); /* not gzip at all */
	snprintf(path, sizeof(path), "%s/*.txt*", dir);
	src.on_error = SF_ON_ERROR_SKIP;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.skipped, 1);
	cr_expect_eq(st.n_files, 2);
	cr_expect_eq(st.n_tokens, strlen(good) + 1);
	cr_expect(strstr(sf__dataset_first_skip(ds), "b.txt.gz"), "%s", sf__dataset_first_skip(ds));
	sf__dataset_close(ds);
}

Test(sources, too_few_tokens)
{
	uint16_t t[5] = {1, 2, 3, 4, 5};

	put("five.bin", t, sizeof(t));
	expect_fail(SF_E_SOURCE, "5 tokens", "fewer than one sequence of 9");
}

/* A finite run whose windows fill no global batch delivered nothing, and said nothing:
 * 3 windows of T = 8 over 1 epoch, G = 2 x 2 = 4. Refused at open, and by the check
 * `shmfeed check` and `run` make before they start. */
Test(sources, finite_run_of_no_step_is_refused)
{
	uint16_t t[25] = {0};
	uint32_t token_bytes = 0;
	struct sf_err e = {0};

	put("three.bin", t, sizeof(t));
	cfg.epochs = 1;
	cfg.world_size = 2;
	expect_fail(SF_E_CONFIG, "1 epoch of 3 windows", "no global batch of 4");
	cr_expect_eq(sf__dataset_check(&cfg, &token_bytes, &e), SF_E_CONFIG, "%s", e.msg);
	cr_expect(strstr(e.msg, "1 epoch of 3 windows"), "%s", e.msg);
	cfg.epochs = 2;
	cr_expect_eq(sf__dataset_check(&cfg, &token_bytes, &e), 0, "%s", e.msg);
}

Test(sources, text_without_encoding)
{
	put("x.txt", "hello", 5);
	expect_fail(SF_E_CONFIG, "encoding", NULL);
}

/* The separator search agrees with memmem on random text over a small alphabet (so that
 * partial matches abound), for separators of 1 to 5 bytes, every length up to 160 bytes
 * (the 32- and 16-byte vector loops and the tail) and every start offset (alignment):
 * sf__find_sep() (AVX2 where the CPU has it) and sf__find_sep_base() both. */
Test(sources, find_sep_agrees_with_memmem)
{
	static const char *seps[] = {"\n", "\n\n", "ab", "aba", "\n\na\n", "aaaaa"};
	char buf[192];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned checked = 0;

	for (int round = 0; round < 200; round++) {
		for (size_t i = 0; i < sizeof(buf); i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = "ab\n"[x % 3];
		}
		for (size_t si = 0; si < sizeof(seps) / sizeof(seps[0]); si++) {
			size_t m = strlen(seps[si]);

			for (size_t off = 0; off < 32; off++)
				for (size_t n = 0; off + n <= 160; n++) {
					const char *p = buf + off;
					const char *want = memmem(p, n, seps[si], m);

					cr_assert_eq(sf__find_sep(p, p + n, seps[si], m), want,
						     "sep %zu, offset %zu, length %zu", si, off, n);
					cr_assert_eq(sf__find_sep_base(p, p + n, seps[si], m), want,
						     "base: sep %zu, offset %zu, length %zu", si,
						     off, n);
					checked += want != NULL;
				}
		}
	}
	cr_expect_gt(checked, 1000000, "found %u", checked);
}

/* Narrowing ids to uint16 gives each id at every length and alignment (the vector loop
 * and the tail), and an id above 65535 anywhere is reported at its index. */
Test(sources, copy_tokens_narrows_and_finds_the_first_wide_id)
{
	uint32_t ids[80];
	uint16_t dst[80];
	uint64_t x = 0x2545f4914f6cdd1dull;

	for (size_t i = 0; i < 80; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		ids[i] = i % 9 == 0 ? 65535u - (uint32_t)i : (uint32_t)(x % 65536);
	}
	for (size_t off = 0; off < 8; off++)
		for (size_t n = 0; off + n <= 80; n++) {
			size_t bad = SIZE_MAX;

			memset(dst, 0xa5, sizeof(dst));
			cr_assert_eq(sf__copy_tokens(dst, 2, ids + off, 4, n, &bad), 0);
			for (size_t i = 0; i < n; i++)
				cr_assert_eq(dst[i], ids[off + i], "offset %zu, length %zu, id %zu",
					     off, n, i);
			if (n < 80)
				cr_assert_eq(dst[n], 0xa5a5, "written past %zu ids", n);
		}
	for (size_t at = 0; at < 40; at++) {
		uint32_t keep = ids[at], keep2 = ids[at + 5];
		size_t bad = SIZE_MAX;

		ids[at] = 65536u + (uint32_t)at;
		ids[at + 5] = UINT32_MAX;
		cr_assert_eq(sf__copy_tokens(dst, 2, ids, 4, 40, &bad), SF_E_RANGE);
		cr_assert_eq(bad, at);
		ids[at] = keep;
		ids[at + 5] = keep2;
	}
}

/* dtype auto follows a pre-tokenized source's width, not the (default) byte tokenizer. */
Test(sources, dtype_auto_takes_the_width_of_the_source)
{
	uint32_t tokens[300];
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	for (uint32_t i = 0; i < 300; i++)
		tokens[i] = 65536 + i * 7;
	cfg.encoding = "bytes"; /* what a job file without a tokenizer section gets */
	snprintf(path, sizeof(path), "%s/llama.bin", dir);
	write_llmc_datafile(path, tokens, 300, "llama-3");
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.token_bytes, 4);
	sf__dataset_close(ds);
	write_llmc_datafile(path, tokens, 300, "gpt-2");
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.token_bytes, 2);
	sf__dataset_close(ds);
}

Test(sources, dtype_uint16_refuses_a_source_of_wider_tokens)
{
	uint32_t tokens[300] = {0};

	snprintf(path, sizeof(path), "%s/llama.bin", dir);
	write_llmc_datafile(path, tokens, 300, "llama-3");
	cfg.dtype = SF_DTYPE_U16;
	expect_fail(SF_E_CONFIG, path, "batch.dtype uint16 cannot hold the 4-byte tokens");
}

/* A directory stands for its regular files: sorted, not recursive, no dot-files, and a
 * Megatron pair once (by its .bin). */
Test(sources, directory_means_its_regular_files)
{
	static const char *const names[] = {"b.bin", "a.bin", ".cache.sfidx",
					    "m.bin", "m.idx", "only.idx"};
	char sub[4200], *p = path;

	char **paths = NULL;
	size_t n = 0;
	struct sf_err e = {0};
	uint16_t t[4] = {0};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		put(names[i], t, sizeof(t));
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	put("sub/c.bin", t, sizeof(t));
	snprintf(path, sizeof(path), "%s//", dir);
	src.paths = &p;
	cr_assert_eq(sf__source_expand(&src, &paths, &n, &e), 0, "%s", e.msg);
	cr_assert_eq(n, 4);
	for (size_t i = 0; i < n; i++) {
		static const char *const want[] = {"a.bin", "b.bin", "m.bin", "only.idx"};
		char expect[4200];

		snprintf(expect, sizeof(expect), "%s/%s", dir, want[i]);
		cr_expect_str_eq(paths[i], expect);
		free(paths[i]);
	}
	free(paths);
	/* A directory of none (its subdirectory aside) is refused as an empty glob is. */
	snprintf(path, sizeof(path), "%s/sub/c.bin", dir);
	cr_assert_eq(remove(path), 0);
	cr_assert_eq(mkdir(strcat(sub, "/deeper"), 0700), 0);
	snprintf(path, sizeof(path), "%s/sub", dir);
	expect_fail(-ENOENT, path, "the directory holds no regular file");
}

/* A glob that matches a directory takes the directory's files, as a path naming it does
 * (docs/config.md); the whole source failed ("not a regular file"). */
Test(sources, a_glob_matching_a_directory_takes_its_files)
{
	char sub[4200], *p = path, expect[4200];
	char **paths = NULL;
	size_t n = 0;
	struct sf_err e = {0};
	uint16_t t[4] = {0};

	put("a.bin", t, sizeof(t));
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	put("sub/c.bin", t, sizeof(t));
	snprintf(sub, sizeof(sub), "%s/none", dir); /* a directory of none adds none */
	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(path, sizeof(path), "%s/*", dir);
	src.paths = &p;
	cr_assert_eq(sf__source_expand(&src, &paths, &n, &e), 0, "%s", e.msg);
	cr_assert_eq(n, 2);
	snprintf(expect, sizeof(expect), "%s/a.bin", dir);
	cr_expect_str_eq(paths[0], expect);
	snprintf(expect, sizeof(expect), "%s/sub/c.bin", dir);
	cr_expect_str_eq(paths[1], expect);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

/* The files the source lists: exactly `expect` (n of them), in order. */
static void expect_listed(const char *const *expect, size_t n_expect)
{
	char **paths = NULL;
	size_t n = 0;
	struct sf_err e = {0};

	cr_assert_eq(sf__source_expand(&src, &paths, &n, &e), 0, "%s: %s", path, e.msg);
	cr_assert_eq(n, n_expect, "%s: %zu files", path, n);
	for (size_t i = 0; i < n; i++) {
		cr_expect_str_eq(paths[i], expect[i]);
		free(paths[i]);
	}
	free(paths);
}

/*
 * A job file in a directory whose name holds a glob character (`runs[1]/`), with a
 * relative source `*.bin`: the pattern was the whole absolute path, so it read runs1's
 * files, and the digest followed them (a review); a Megatron prefix there was "no file
 * matches". A leading directory that exists under its literal name is taken literally, as
 * a file of that exact name already was; one that does not is still a pattern.
 */
Test(sources, a_directory_named_with_glob_characters_is_taken_literally)
{
	char mine[4096], other[4096], prefix[4096], *p = path;
	const char *want[1];
	uint16_t t[4] = {0}, more[8] = {0};
	uint64_t digest;

	snprintf(path, sizeof(path), "%s/g[1]", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/g1", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	put("g[1]/mine.bin", t, sizeof(t));
	put("g1/other.bin", t, sizeof(t));
	snprintf(mine, sizeof(mine), "%s/g[1]/mine.bin", dir);
	snprintf(other, sizeof(other), "%s/g1/other.bin", dir);
	src.paths = &p;

	snprintf(path, sizeof(path), "%s/g[1]/*.bin", dir);
	want[0] = mine;
	expect_listed(want, 1);
	digest = sf__config_digest(&cfg);
	put("g1/other.bin", more, sizeof(more));
	snprintf(path, sizeof(path), "%s/g[1]/*.bin", dir);
	cr_expect_eq(sf__config_digest(&cfg), digest, "the digest read g1's file");
	put("g[1]/mine.bin", more, sizeof(more));
	snprintf(path, sizeof(path), "%s/g[1]/*.bin", dir);
	cr_expect_neq(sf__config_digest(&cfg), digest, "the digest missed g[1]'s file");

	/* A directory that is not there under its name is a pattern, as before. */
	snprintf(path, sizeof(path), "%s/g[12]/*.bin", dir);
	want[0] = other;
	expect_listed(want, 1);

	/* A Megatron prefix, which names no file, in such a directory, and one whose own
	 * name holds them (tokenize -o 'corp[1]'; found by a review of this test's fix). */
	put("g[1]/corp.bin", t, sizeof(t));
	put("g[1]/corp.idx", t, sizeof(t));
	snprintf(prefix, sizeof(prefix), "%s/g[1]/corp", dir);
	snprintf(path, sizeof(path), "%s", prefix);
	want[0] = prefix;
	expect_listed(want, 1);
	put("corp[1].bin", t, sizeof(t));
	put("corp[1].idx", t, sizeof(t));
	snprintf(prefix, sizeof(prefix), "%s/corp[1]", dir);
	snprintf(path, sizeof(path), "%s", prefix);
	expect_listed(want, 1);
	digest = sf__config_digest(&cfg);
	put("corp[1].bin", more, sizeof(more));
	snprintf(path, sizeof(path), "%s", prefix);
	cr_expect_neq(sf__config_digest(&cfg), digest, "the digest missed corp[1]'s pair");

	/* Taken literally, a path whose *?[ are a directory's says so when it names nothing. */
	{
		char **paths = NULL;
		size_t n = 0;
		struct sf_err e = {0};

		snprintf(path, sizeof(path), "%s/g[1]/none.bin", dir);
		cr_assert_eq(sf__source_expand(&src, &paths, &n, &e), -ENOENT);
		cr_expect(strstr(e.msg, "no such file") && strstr(e.msg, "no pattern"), "%s",
			  e.msg);
	}
}

/*
 * Each file is read once however a source names it: a Megatron pair by a glob that takes
 * both its files, by its .bin and its .idx, or by its prefix and a file; a file by two
 * spellings. Each of these was read twice (every window twice, silently).
 */
Test(sources, each_file_once_however_named)
{
	static const char *const lists[][2] = {{"*", NULL},
						{"m.bin", "m.idx"},
						{"m", "m.idx"},
						{"m.idx", "./m.bin"}};
	char full[2][4200], *p[2] = {full[0], full[1]};
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++) {
		src.n_paths = 0;
		for (int j = 0; j < 2 && lists[k][j]; j++) {
			if (lists[k][j][0] == '.')
				snprintf(full[j], sizeof(full[j]), "%s/../%s/%s", dir,
					 strrchr(dir, '/') + 1, lists[k][j] + 2);
			else
				snprintf(full[j], sizeof(full[j]), "%s/%s", dir, lists[k][j]);
			src.n_paths++;
		}
		src.paths = p;
		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		cr_expect_eq(st.n_tokens, 32, "list %zu: %llu tokens", k,
			     (unsigned long long)st.n_tokens);
		sf__dataset_close(ds);
	}
}

/* The tokens a dataset of the source's paths `a` and `b` (NULL: none) holds. */
static uint64_t tokens_of(const char *a, const char *b)
{
	char full[2][4200], *p[2] = {full[0], full[1]};
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	src.n_paths = 0;
	for (const char *name = a; name && src.n_paths < 2; name = src.n_paths == 1 ? b : NULL)
		snprintf(full[src.n_paths++], sizeof(full[0]), "%s/%s", dir, name);
	src.paths = p;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	sf__dataset_close(ds);
	return st.n_tokens;
}

/*
 * A file named as a Megatron pair's prefix beside the pair (notes `m` beside m.bin and
 * m.idx): format auto read `m` as the pair and kept it as a file of its own beside
 * m.bin, so a listing of the directory read the pair twice. Under auto `m` is a file of
 * no known name (refused, as a README is); under format megatron every name of the pair
 * reads it once.
 */
Test(sources, a_file_named_as_a_pairs_prefix_reads_the_pair_once)
{
	const char notes[] = "what this corpus is\n";
	char pattern[4200], *p = pattern;

	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	put("m", notes, sizeof(notes) - 1);
	snprintf(pattern, sizeof(pattern), "%s/*", dir);
	src.paths = &p;
	src.n_paths = 1;
	expect_fail(SF_E_CONFIG, "/m:", "format auto goes by the name");
	cr_expect_eq(tokens_of("m.bin", NULL), 32);
	src.format = SF_FMT_MEGATRON;
	cr_expect_eq(tokens_of("m", "m.bin"), 32);
	src.paths = &p;
	src.n_paths = 1;
	{
		struct sf_dataset *ds = NULL;
		struct sf_dataset_stats st;
		struct sf_err e = {0};

		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_stats(ds, &st);
		cr_expect_eq(st.n_tokens, 32, "the pair listed with its prefix: %llu tokens",
			     (unsigned long long)st.n_tokens);
		sf__dataset_close(ds);
	}
}

/* format auto knows .bin, .idx, a Megatron prefix, .jsonl and .txt: a README or a
 * .json.gz among the shards was read as uint16 tokens. */
Test(sources, auto_refuses_a_name_it_does_not_know)
{
	static const char *const names[] = {"README.md", "shard0.json.gz", "x.parquet"};
	const char text[] = "# shard notes\n\nsee!\n";

	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		put(names[k], text, sizeof(text) - 1);
		expect_fail(SF_E_CONFIG, names[k], "format auto goes by the name");
		/* What to do: not "give the source a format" alone, which read a README
		 * among nanoGPT shards as tokens (a review); that for a file meant, with what
		 * it does to the rest of the source. */
		expect_fail(SF_E_CONFIG, names[k],
			    "if not, leave it out (name the files to read, a glob such as "
			    "DIR/*.bin");
		expect_fail(SF_E_CONFIG, names[k],
			    "if the file is meant, give the source its format");
	}
}

/*
 * A directory of Megatron pairs one of whose .idx was lost: format auto read that .bin as
 * nanoGPT tokens beside the pairs (its documents one headerless stream), saying only
 * "nanogpt 1, megatron 1" in check's summary. Refused, naming both files; each kind in a
 * source of its own, with its format, is read.
 */
Test(sources, auto_refuses_a_lone_bin_among_megatron_pairs)
{
	uint16_t tokens[64] = {0};
	char lone[4200], pair[4200], *d = dir, *p1 = lone, *p2 = pair;
	struct sf_source_config two[2];
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	put_megatron("MMIDIDX\0\0", 8, 32, 0);
	put("lost.bin", tokens, sizeof(tokens));
	src.paths = &d;
	src.n_paths = 1;
	expect_fail(SF_E_CONFIG, "/lost.bin: format auto reads it as nanoGPT tokens",
		    "/m.bin is a Megatron pair of the same source");
	/* The same with the files named. */
	snprintf(lone, sizeof(lone), "%s/lost.bin", dir);
	snprintf(pair, sizeof(pair), "%s/m.bin", dir);
	{
		char *both[2] = {pair, lone};

		src.paths = both;
		src.n_paths = 2;
		expect_fail(SF_E_CONFIG, "/lost.bin: format auto", "no .idx beside it");
	}
	/* Two sources, each with its format: 32 + 64 tokens. */
	two[0] = src;
	two[0].paths = &p2;
	two[0].n_paths = 1;
	two[0].format = SF_FMT_MEGATRON;
	two[1] = two[0];
	two[1].paths = &p1;
	two[1].format = SF_FMT_NANOGPT;
	cfg.sources = two;
	cfg.n_sources = 2;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_tokens, 96, "%llu tokens", (unsigned long long)st.n_tokens);
	sf__dataset_close(ds);
	cfg.sources = &src;
	cfg.n_sources = 1;
}

/*
 * A finite run's step count is epochs x windows / G, which passes 2^64 with 2^31 epochs
 * of 2^33 windows (a sparse nanoGPT file of 2^33 + 1 tokens, T = 1, G = 1): it wrapped to
 * 0 steps, a run that delivered nothing.
 */
Test(sources, a_huge_finite_run_does_not_wrap_to_no_step)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};

	put("huge.bin", "", 0);
	cr_assert_eq(truncate(path, ((off_t)1 << 34) + 2), 0); /* sparse: nothing written */
	cfg.seq_len = 1;
	cfg.batch_size = 1;
	cfg.world_size = 1;
	cfg.epochs = 1u << 31;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	cr_expect_eq(st.n_windows, (uint64_t)1 << 33);
	cr_expect_eq(st.n_steps, UINT64_MAX - 1, "%llu steps", (unsigned long long)st.n_steps);
	sf__dataset_close(ds);
	unlink(path);
}

/* The document starts of the row at global offset `off` of the open dataset. */
static void row_starts(const struct sf_dataset *ds, uint64_t off, uint32_t *starts)
{
	uint16_t row[16];
	struct sf_err e = {0};

	cr_assert_eq(sf__tokens_read_row(ds, off, (unsigned char *)row, starts, &e), 0, "%s",
		     e.msg);
}

/*
 * nanoGPT and llm.c shards split documents across files: a file's first token starts a
 * document only where the file before it ends with the end-of-text id (or it is the
 * stream's first token). Every file start was marked (a review: a mask reset inside a
 * document at each shard boundary).
 */
Test(sources, file_boundaries_start_documents_only_after_end_of_text)
{
	uint16_t a[10], b[10];
	uint32_t starts[4];
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	for (int i = 0; i < 10; i++) {
		a[i] = (uint16_t)(1 + i);
		b[i] = (uint16_t)(11 + i);
	}
	put("a.bin", a, sizeof(a));
	put("b.bin", b, sizeof(b));
	snprintf(path, sizeof(path), "%s/*.bin", dir);
	src.format = SF_FMT_NANOGPT;
	cfg.eot_id = 50256;
	cfg.doc_starts = 4;
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	row_starts(ds, 0, starts); /* the stream's first token */
	cr_expect(starts[0] == 0 && starts[1] == UINT32_MAX, "row at 0: %u %u", starts[0],
		  starts[1]);
	row_starts(ds, 8, starts); /* 9 10 | 11 ...: one document across the files */
	cr_expect_eq(starts[0], UINT32_MAX, "row at 8: a start at %u", starts[0]);
	row_starts(ds, 10, starts); /* the row starts at b.bin's first token */
	cr_expect_eq(starts[0], UINT32_MAX, "row at 10: a start at %u", starts[0]);
	sf__dataset_close(ds);

	a[9] = 50256; /* now the first file ends its document */
	cr_assert_eq(mkdir(strcat(strcpy(path, dir), "/eot"), 0755), 0);
	put("eot/a.bin", a, sizeof(a));
	put("eot/b.bin", b, sizeof(b));
	snprintf(path, sizeof(path), "%s/eot/*.bin", dir);
	cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
	row_starts(ds, 8, starts);
	cr_expect(starts[0] == 2 && starts[1] == UINT32_MAX, "row at 8: %u %u", starts[0],
		  starts[1]);
	row_starts(ds, 10, starts);
	cr_expect(starts[0] == 0 && starts[1] == UINT32_MAX, "row at 10: %u %u", starts[0],
		  starts[1]);
	sf__dataset_close(ds);
}

/*
 * In a mixture every source is a stream of its own: its first token starts a document
 * whatever the source listed before it ends with. It looked at the last token of the
 * token file listed before, another source's (a review: the first window of B lost its
 * start when A, before it, did not end with end-of-text; B's raw text neighbour was not
 * even looked at).
 */
Test(sources, a_mixture_sources_first_token_starts_a_document)
{
	uint16_t a[10], b[10];
	uint32_t starts[4];
	char *pa[1], *pb[1], pa_buf[4096], pb_buf[4096];
	struct sf_source_config two[2] = {
		{.paths = pa,
		 .n_paths = 1,
		 .name = "a",
		 .format = SF_FMT_NANOGPT,
		 .weight = 1000000000},
		{.paths = pb,
		 .n_paths = 1,
		 .name = "b",
		 .format = SF_FMT_NANOGPT,
		 .weight = 1000000000},
	};
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};

	for (int i = 0; i < 10; i++) {
		a[i] = (uint16_t)(1 + i); /* no end-of-text at its end */
		b[i] = (uint16_t)(11 + i);
	}
	put("a.bin", a, sizeof(a));
	snprintf(pa_buf, sizeof(pa_buf), "%s", path);
	put("b.bin", b, sizeof(b));
	snprintf(pb_buf, sizeof(pb_buf), "%s", path);
	pa[0] = pa_buf;
	pb[0] = pb_buf;
	cfg.sources = two;
	cfg.n_sources = 2;
	cfg.mixture = 1;
	cfg.eot_id = 50256;
	cfg.doc_starts = 4;
	for (int order = 0; order < 2; order++) {
		cr_assert_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		row_starts(ds, 0, starts);
		cr_expect(starts[0] == 0 && starts[1] == UINT32_MAX, "order %d, row at 0: %u %u",
			  order, starts[0], starts[1]);
		row_starts(ds, 10, starts); /* the second source's first token */
		cr_expect(starts[0] == 0 && starts[1] == UINT32_MAX, "order %d, row at 10: %u %u",
			  order, starts[0], starts[1]);
		sf__dataset_close(ds);
		two[0].paths = pb; /* the other way round */
		two[1].paths = pa;
	}
}

/*
 * A UTF-16 text file (Windows' "Unicode" save) became documents of its raw bytes, NULs
 * between the letters, with no word (a review; JSONL refuses it). Refused, naming the
 * file; skipped and counted under on_error: skip.
 */
Test(sources, text_utf16_is_named)
{
	static const char le[] = "\xff\xfeh\0e\0l\0l\0o\0\n\0\n\0w\0o\0r\0l\0d\0\n\0";

	static const char good[] = "a document of plain UTF-8 text, long enough for a window\n";
	char bad[4200];

	cfg.encoding = "bytes";
	src.format = SF_FMT_TEXT;
	put("le.txt", le, sizeof(le) - 1);
	snprintf(bad, sizeof(bad), "%s", path);
	put("good.txt", good, strlen(good));
	snprintf(path, sizeof(path), "%s", dir);
	expect_fail(SF_E_SOURCE, bad, ": a UTF-16 byte order mark (FF FE)");
	expect_skip(1, "iconv -f UTF-16 -t UTF-8");
}

/*
 * A compressed file not named for it (a.txt holding gzip data) was tokenized as text: its
 * compressed bytes became documents without a word (a review). Each stream's magic is
 * refused, naming the file and the format; skipped and counted under on_error: skip. A
 * text that starts like one but is none is read, and a .gz holding gzip data says so.
 */
Test(sources, compressed_data_in_a_text_file_is_named)
{
	static const struct {
		const char *bytes;
		size_t len;
		const char *want;
	} cases[] = {
		{"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10,
		 "gzip data in a file not named for it, not text: name it .gz"},
		{"\x28\xb5\x2f\xfd\x24\x00\x01\x00", 8,
		 "zstd data in a file not named for it, not text: name it .zst"},
		{"\xfd"
		 "7zXZ\0\0\x04",
		 8, "xz data"},
		{"BZh91AY&SY\x01\x02", 12, "bzip2 data"},
		{"PK\x03\x04\x14\x00", 6, "zip data"},
		{"\x04\x22\x4d\x18\x64\x40", 6, "lz4 data"},
	};
	static const char good[] = "a document of plain UTF-8 text, long enough for a window\n";
	static const char bzh[] =
		"BZh is how a bzip2 stream starts, and this is text of a window or more\n";
	unsigned char z[256];
	char bad[4200];

	cfg.encoding = "bytes";
	src.format = SF_FMT_TEXT;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[32];

		src.on_error = SF_ON_ERROR_STOP;
		snprintf(name, sizeof(name), "c%zu.txt", i);
		put(name, cases[i].bytes, cases[i].len);
		expect_fail(SF_E_SOURCE, name, cases[i].want);
		snprintf(bad, sizeof(bad), "%s", path);
		put("good.txt", good, strlen(good));
		snprintf(path, sizeof(path), "%s", dir);
		expect_skip(1, cases[i].want);
		unlink(bad);
	}
	src.on_error = SF_ON_ERROR_STOP;
	put("bzh.txt", bzh, strlen(bzh));
	{
		struct sf_dataset *ds = NULL;
		struct sf_err e = {0};

		cr_expect_eq(sf__dataset_open(&cfg, &ds, &e), 0, "%s", e.msg);
		sf__dataset_close(ds);
	}
	put("twice.txt.gz", z, gzip_text("\x1f\x8b and then text", z, sizeof(z)));
	expect_fail(SF_E_SOURCE, "twice.txt.gz", "gzip data inside the compressed file, not text");
}

/*
 * The first skip named is the first in the files' order, whenever it is met: a file that
 * cannot be opened (z.jsonl, a dangling link) is met when the sources are opened, before
 * the records of the files before it are counted, and was named as the first (a review).
 */
Test(sources, the_first_skip_named_is_the_first_in_the_files_order)
{
	static const char a[] =
		"{\"text\": \"a document of file a, long enough\"}\n{\"text\": 1}\n";
	char link[600];

	cfg.encoding = "bytes";
	src.format = SF_FMT_JSONL;
	put("a.jsonl", a, strlen(a));
	snprintf(link, sizeof(link), "%s/z.jsonl", dir);
	cr_assert_eq(symlink("/nonexistent/mount/shard", link), 0);
	snprintf(path, sizeof(path), "%s", dir);
	expect_skip(2, "a.jsonl:2: not a string");
}

/*
 * The first skipped record's message is kept once per directory's index: a job that read
 * only B.jsonl after one that read A.jsonl and B.jsonl said its first skip was in A.jsonl,
 * a file it does not read (a review). A file's own skips name the file.
 */
Test(sources, a_skip_from_the_index_names_a_file_the_job_reads)
{
	static const char a[] =
		"{\"text\": \"a document of file A, long enough\"}\n{\"text\": 1}\n";
	static const char b[] = "{\"text\": \"a document of file B, long enough\"}\n"
				"{\"text\": \"b\"}\n{\"text\": 2}\n";
	char b_path[sizeof(path)];

	cfg.encoding = "bytes";
	src.format = SF_FMT_JSONL;
	put("A.jsonl", a, strlen(a));
	put("B.jsonl", b, strlen(b));
	snprintf(b_path, sizeof(b_path), "%s", path);
	snprintf(path, sizeof(path), "%s", dir);
	expect_skip(2, "A.jsonl:2");
	snprintf(path, sizeof(path), "%s", b_path);
	expect_skip(1, "B.jsonl");
}

/*
 * A shard beside its compressed copy (`gzip -k`) in one directory: both were read, every
 * document twice an epoch, with no word (a review). Refused, naming both.
 */
Test(sources, a_file_beside_its_compressed_copy_is_refused)
{
	static const char j[] = "{\"text\": \"a document of the shard, long enough\"}\n";
	unsigned char gz[256];
	size_t gz_len = gzip_text(j, gz, sizeof(gz));

	cfg.encoding = "bytes";
	put("shard.jsonl", j, strlen(j));
	put("shard.jsonl.gz", gz, gz_len);
	snprintf(path, sizeof(path), "%s", dir);
	expect_fail(SF_E_SOURCE, "shard.jsonl.gz beside it", "every document twice");
}

/* Two compressed copies of one file (gzip -k and zstd of shard.jsonl, the original
 * removed) were both read too (a review). */
Test(sources, two_compressed_copies_of_a_file_are_refused)
{
	static const char j[] = "{\"text\": \"a document of the shard, long enough\"}\n";
	unsigned char gz[256], z[256];
	size_t gz_len = gzip_text(j, gz, sizeof(gz));

	cfg.encoding = "bytes";
	put("shard.jsonl.gz", gz, gz_len);
	put("shard.jsonl.zst", z, zstd_bytes(z, sizeof(z)));
	snprintf(path, sizeof(path), "%s", dir);
	expect_fail(SF_E_SOURCE, "shard.jsonl.zst beside it", "every document twice");
}
