/*
 * Unit tests of the job file loader: one test per rule of docs/config.md (defaults,
 * unknown keys, types, ranges, names, cross-field checks, endpoints and CURVE key files,
 * overrides, path resolution), each checking the FILE:LINE:COLUMN of the message; and
 * the resolved-config writer and the digest.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/config.h"

static struct sf_config cfg;
static struct sf_err err;

static int load(const char *yaml)
{
	memset(&err, 0, sizeof(err));
	sf__config_free(&cfg);
	return sf__config_load_string("job.yaml", yaml, strlen(yaml), &cfg, &err);
}

/* The load fails with SF_E_CONFIG and a message starting with `where` and holding `what`. */
static void rejects(const char *yaml, const char *where, const char *what)
{
	int r = load(yaml);

	cr_assert_eq(r, SF_E_CONFIG, "accepted:\n%s", yaml);
	cr_expect(!strncmp(err.msg, where, strlen(where)), "message '%s' does not start with '%s'",
		  err.msg, where);
	cr_expect(strstr(err.msg, what), "message '%s' lacks '%s'", err.msg, what);
}

static void fini(void)
{
	sf__config_free(&cfg);
}

TestSuite(config, .fini = fini);

Test(config, defaults_fill_every_field)
{
	cr_assert_eq(load("sources: [a.txt]\n"), 0, "%s", err.msg);
	cr_expect_str_eq(cfg.job, "job");
	cr_expect_eq(cfg.n_sources, 1);
	cr_expect_str_eq(cfg.sources[0].paths[0], "a.txt");
	cr_expect_eq(cfg.sources[0].format, SF_FMT_AUTO);
	cr_expect_str_eq(cfg.sources[0].text_field, "text");
	cr_expect_null(cfg.sources[0].separator);
	cr_expect_eq(cfg.sources[0].on_error, SF_ON_ERROR_STOP);
	cr_expect_eq(cfg.sources[0].index, SF_INDEX_CACHE);
	cr_expect_str_eq(cfg.encoding, "bytes");
	cr_expect_eq(cfg.batch_size, 8);
	cr_expect_eq(cfg.seq_len, 256);
	cr_expect_eq(cfg.dtype, SF_DTYPE_AUTO);
	cr_expect_eq(cfg.mode, SF_SAMPLE_WINDOWS);
	cr_expect_eq(cfg.seed, 1337);
	cr_expect_eq(cfg.epochs, 0);
	cr_expect_eq(cfg.slots_per_rank, 4);
	cr_expect_eq(cfg.hugepages, 0);
	cr_expect_eq(cfg.producers, 2);
	cr_expect_eq(cfg.max_restarts, 5);
	cr_expect_eq(cfg.stall_timeout_ms, 5000);
	cr_expect_eq(cfg.world_size, 1);
	cr_expect_eq(cfg.local_ranks, 1);
	cr_expect_eq(cfg.rank_base, 0);
	cr_expect_eq(cfg.device, SF_DEVICE_AUTO);
	cr_expect_null(cfg.endpoint);
	cr_expect_eq(cfg.stats_interval_ms, 1000);
	cr_expect_eq(cfg.checksum, 1);
	cr_expect_eq(cfg.verify_every, 1);
	cr_expect_null(cfg.producer_cpus);
}

Test(config, every_section_is_read)
{
	cr_assert_eq(
		load("job: j1\n"
		     "sources:\n"
		     "  - paths: [a.jsonl, 'b*.jsonl']\n"
		     "    format: jsonl\n"
		     "    text_field: body\n"
		     "    on_error: skip\n"
		     "  - paths: c.txt\n"
		     "    separator: \"<|endoftext|>\"\n"
		     "    index: beside\n"
		     "tokenizer: {encoding: cl100k_base, vocab: /v/cl100k_base.tiktoken}\n"
		     "batch: {size: 4, seq_len: 1024, dtype: int32}\n"
		     "sampling: {mode: random, seed: 7, epochs: 3, doc_starts: 16}\n"
		     "arena: {slots_per_rank: 8, hugepages: yes}\n"
		     "producers: {count: 3, max_restarts: 0}\n"
		     "consumers: {world_size: 16, local_ranks: 8, rank_base: 8, device: cuda}\n"
		     "control: {endpoint: 'tcp://127.0.0.1:5555', stats_interval_ms: 250,\n"
		     "          insecure_tcp: true}\n"
		     "integrity: {checksum: false}\n"),
		0, "%s", err.msg);
	cr_expect_str_eq(cfg.job, "j1");
	cr_expect_eq(cfg.n_sources, 2);
	cr_expect_eq(cfg.sources[0].n_paths, 2);
	cr_expect_str_eq(cfg.sources[0].paths[1], "b*.jsonl");
	cr_expect_eq(cfg.sources[0].format, SF_FMT_JSONL);
	cr_expect_str_eq(cfg.sources[0].text_field, "body");
	cr_expect_eq(cfg.sources[0].on_error, SF_ON_ERROR_SKIP);
	cr_expect_str_eq(cfg.sources[1].separator, "<|endoftext|>");
	cr_expect_eq(cfg.sources[0].index, SF_INDEX_CACHE);
	cr_expect_eq(cfg.sources[1].index, SF_INDEX_BESIDE);
	cr_expect_str_eq(cfg.encoding, "cl100k_base");
	cr_expect_str_eq(cfg.vocab, "/v/cl100k_base.tiktoken");
	cr_expect_eq(cfg.batch_size, 4);
	cr_expect_eq(cfg.seq_len, 1024);
	cr_expect_eq(cfg.dtype, SF_DTYPE_I32);
	cr_expect_eq(cfg.mode, SF_SAMPLE_RANDOM);
	cr_expect_eq(cfg.seed, 7);
	cr_expect_eq(cfg.epochs, 3);
	cr_expect_eq(cfg.doc_starts, 16);
	cr_expect_eq(cfg.slots_per_rank, 8);
	cr_expect_eq(cfg.hugepages, 1);
	cr_expect_eq(cfg.producers, 3);
	cr_expect_eq(cfg.max_restarts, 0);
	cr_expect_eq(cfg.world_size, 16);
	cr_expect_eq(cfg.local_ranks, 8);
	cr_expect_eq(cfg.rank_base, 8);
	cr_expect_eq(cfg.device, SF_DEVICE_CUDA);
	cr_expect_str_eq(cfg.endpoint, "tcp://127.0.0.1:5555");
	cr_expect_eq(cfg.stats_interval_ms, 250);
	cr_expect_eq(cfg.insecure_tcp, 1);
	cr_expect_eq(cfg.checksum, 0);
}

Test(config, unknown_keys_are_rejected_where_they_are)
{
	rejects("sources: [a]\nbatch:\n  size: 4\n  seqlen: 9\n", "job.yaml:4:3:",
		"unknown key 'seqlen' in section 'batch'; expected one of: size, seq_len, dtype");
	rejects("sources: [a]\nbatches: {size: 4}\n", "job.yaml:2:1:", "unknown key 'batches'");
	rejects("sources:\n  - paths: a\n    fromat: text\n",
		"job.yaml:3:5:", "unknown key 'fromat' in a source");
}

/* libyaml's reader gives a byte it refuses no position: all were at 1:1 (a review). */
Test(config, a_byte_that_is_not_text_is_found_where_it_is)
{
	rejects("sources: [a]\nsampling:\n  mode: \"wind\xffows\"\n", "job.yaml:3:14:",
		"invalid YAML: invalid leading UTF-8 octet");
	rejects("sources: [a]\njob: \"\xc3\xa9t\x01\"\n", "job.yaml:2:9:",
		"invalid YAML: control characters are not allowed");
}

Test(config, wrong_types_are_rejected)
{
	rejects("sources: [a]\nbatch: {size: \"4\"}\n", "job.yaml:2:15:",
		"'size' must be an unsigned integer in [1, 65536], not a quoted string");
	rejects("sources: [a]\nbatch: {size: four}\n", "job.yaml:2:15:", "got 'four'");
	rejects("sources: [a]\nbatch: {size: [4]}\n", "job.yaml:2:15:", "not a list");
	rejects("sources: [a]\nbatch: 4\n", "job.yaml:2:8:", "section 'batch' must be a mapping");
	rejects("sources: a.txt\n", "job.yaml:1:10:", "'sources' must be a list of sources");
	rejects("sources: [a]\narena: {hugepages: maybe}\n",
		"job.yaml:2:20:", "'hugepages' must be true or false; got 'maybe'");
	rejects("sources: [a]\njob: [x]\n", "job.yaml:2:6:", "'job' must be");
	rejects("sources: [a]\nsampling: {seed: -1}\n", "job.yaml:2:18:", "unsigned integer");
	rejects("sources: [[a]]\n", "job.yaml:1:11:", "a source must be a path or a mapping");
	/* '_' groups digits: between two of them only (1_ and 1__0 were read as 1 and 10). */
	rejects("sources: [a]\nbatch: {size: 1_}\n", "job.yaml:2:15:", "got '1_'");
	rejects("sources: [a]\nbatch: {size: 1__6}\n", "job.yaml:2:15:", "got '1__6'");
	rejects("sources: [a]\nbatch: {size: _16}\n", "job.yaml:2:15:", "got '_16'");
	cr_assert_eq(load("sources: [a]\nbatch: {size: 1_024}\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.batch_size, 1024);
}

/*
 * An empty path was the config file's directory (or, under --set, the current one): a
 * `paths: "${DATA}"` templated with DATA unset trained on every file beside the job file,
 * the job file included (a review). Refused, naming the field.
 */
Test(config, empty_paths_are_rejected)
{
	rejects("sources: [\"\"]\n", "job.yaml:1:11:", "'paths' must be");
	rejects("sources:\n  - {paths: \"\", format: text}\n", "job.yaml:2:13:",
		"'paths' must be");
	rejects("sources:\n  - paths: [a, \"\"]\n", "job.yaml:2:16:", "this entry is empty");
	rejects("sources: [a]\ntokenizer: {vocab: \"\"}\n", "job.yaml:2:20:",
		"'vocab' must be");
	rejects("sources: [a]\ntokenizer: {file: \"\"}\n", "job.yaml:2:19:", "'file' must be");
	rejects("sources: [a]\ntokenizer: {encoding: \"char:\"}\n", "job.yaml:2:23:",
		"'encoding' must be");
}

Test(config, values_out_of_range_are_rejected)
{
	rejects("sources: [a]\nbatch: {size: 0}\n",
		"job.yaml:2:15:", "'size' is out of range: 0 is not in [1, 65536]");
	rejects("sources: [a]\nbatch: {seq_len: 4294967295}\n", "job.yaml:2:18:", "out of range");
	rejects("sources: [a]\narena: {slots_per_rank: 5000}\n", "job.yaml:2:25:", "out of range");
	rejects("sources: [a]\nproducers: {count: 0}\n", "job.yaml:2:20:", "out of range");
	rejects("sources: [a]\ncontrol: {stats_interval_ms: 1}\n",
		"job.yaml:2:30:", "out of range");
	rejects("sources: [a]\nsampling: {seed: 99999999999999999999999}\n",
		"job.yaml:2:18:", "out of range");
}

Test(config, stall_timeout_is_a_duration)
{
	static const struct {
		const char *text;
		uint32_t ms;
	} ok[] = {{"5s", 5000}, {"2.5s", 2500}, {"500ms", 500}, {"0", 0}, {"0.5s", 500}};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char yaml[128];

		snprintf(yaml, sizeof(yaml), "sources: [a]\nproducers: {stall_timeout: %s}\n",
			 ok[i].text);
		cr_assert_eq(load(yaml), 0, "%s: %s", ok[i].text, err.msg);
		cr_expect_eq(cfg.stall_timeout_ms, ok[i].ms, "%s", ok[i].text);
	}
	rejects("sources: [a]\nproducers: {stall_timeout: 5}\n",
		"job.yaml:2:", "must be a duration with a unit");
	rejects("sources: [a]\nproducers: {stall_timeout: 5min}\n", "job.yaml:2:", "such as 5s");
	rejects("sources: [a]\nproducers: {stall_timeout: -1s}\n", "job.yaml:2:", "duration");
	/* A quoted value was refused as if its text were wrong (a review). */
	rejects("sources: [a]\nproducers: {stall_timeout: '5s'}\n", "job.yaml:2:",
		"got '5s', quoted: write it without the quotes");
	rejects("sources: [a]\nproducers: {stall_timeout: 7200s}\n", "job.yaml:2:", "out of range");
	/* An idle producer's heartbeat moves every 200 ms: a timeout of 250 ms killed idle
	 * producers (found writing a test of a large compressed shard). */
	rejects("sources: [a]\nproducers: {stall_timeout: 250ms}\n",
		"job.yaml:2:", "is not 0 (off) or in [500ms, 3600000ms]");
}

Test(config, names_must_be_known)
{
	rejects("sources: [a]\ntokenizer: {encoding: gpt5}\n", "job.yaml:2:23:",
		"'encoding' must be one of bytes, char, char:CORPUS, gpt2, r50k_base, cl100k_base, "
		"o200k_base; got 'gpt5'");
	rejects("sources: [a]\nsampling: {mode: shuffled}\n",
		"job.yaml:2:18:", "one of windows, random");
	rejects("sources: [{paths: a, format: parquet}]\n",
		"job.yaml:1:30:", "one of auto, nanogpt, llmc, megatron, text, jsonl");
	rejects("sources: [a]\nconsumers: {device: tpu}\n", "job.yaml:2:21:", "auto, cpu, cuda");
	rejects("sources: [a]\nbatch: {dtype: float}\n", "job.yaml:2:16:", "auto, uint16, int32");
}

Test(config, char_encoding_takes_its_corpus)
{
	cr_assert_eq(load("sources: [input.txt]\ntokenizer: {encoding: char}\n"), 0, "%s", err.msg);
	cr_expect_str_eq(cfg.encoding, "char:input.txt");
	cr_assert_eq(load("sources: [a, b]\ntokenizer: {encoding: 'char:alphabet.txt'}\n"), 0, "%s",
		     err.msg);
	cr_expect_str_eq(cfg.encoding, "char:alphabet.txt");
	rejects("sources: [a, b]\ntokenizer: {encoding: char}\n",
		"job.yaml:2:23:", "with several, write char:CORPUS");
	/* Its alphabet is the file's bytes as UTF-8: a compressed file's, or JSON syntax, were
	 * taken (refused later with "not valid UTF-8" or "not in the vocabulary"; a review). */
	rejects("sources: [input.txt.gz]\ntokenizer: {encoding: char}\n", "job.yaml:2:23:",
		"input.txt.gz is compressed: its characters are read from plain UTF-8 text");
	rejects("sources: [d.jsonl]\ntokenizer: {encoding: char}\n", "job.yaml:2:23:",
		"d.jsonl is JSONL: its characters are read from plain UTF-8 text");
	rejects("sources: [a]\ntokenizer: {encoding: 'char:a.txt.zst'}\n",
		"job.yaml:2:23:", "a.txt.zst is compressed");
	/* A pattern may match several, but an existing file whose name has [ is one file. */
	{
		char dir[] = "/tmp/sf-test-char-XXXXXX", path[128], yaml[256];
		FILE *f;

		cr_assert_not_null(mkdtemp(dir));
		snprintf(path, sizeof(path), "%s/d[1].txt", dir);
		cr_assert((f = fopen(path, "w")) && fputs("abc\n", f) >= 0 && fclose(f) == 0);
		snprintf(yaml, sizeof(yaml), "sources: ['%s']\ntokenizer: {encoding: char}\n", path);
		cr_assert_eq(load(yaml), 0, "%s", err.msg);
		snprintf(yaml, sizeof(yaml), "char:%s", path);
		cr_expect_str_eq(cfg.encoding, yaml);
		snprintf(yaml, sizeof(yaml), "sources: ['%s/d*.txt']\ntokenizer: {encoding: char}\n",
			 dir);
		rejects(yaml, "job.yaml:2:23:", "with several, write char:CORPUS");
		unlink(path);
		rmdir(dir);
	}
}

Test(config, duplicate_keys_are_rejected)
{
	rejects("sources: [a]\nbatch: {size: 4, size: 8}\n",
		"job.yaml:2:18:", "duplicate key 'size' in section 'batch'");
}

Test(config, yaml_syntax_errors_have_positions)
{
	rejects("sources: [a\n", "job.yaml:2:1:", "invalid YAML");
	rejects("sources:\n  - a\n - b\n", "job.yaml:3:2:", "invalid YAML");
	rejects("", "job.yaml:1:1:", "the file is empty");
}

Test(config, sources_are_required_and_need_paths)
{
	rejects("batch: {size: 4}\n", "job.yaml:1:1:", "'sources' is required");
	rejects("sources: []\n", "job.yaml:1:10:", "at least one source");
	rejects("sources: [{format: text}]\n", "job.yaml:1:11:", "a source needs 'paths'");
	rejects("sources: [{paths: []}]\n", "job.yaml:1:19:", "not an empty list");
	rejects("sources: [~]\n", "job.yaml:1:11:", "not null");
}

Test(config, job_names_are_checked)
{
	rejects("job: ../etc\nsources: [a]\n", "job.yaml:1:6:", "'job' must be 1-63 characters");
	rejects("job: .hidden\nsources: [a]\n", "job.yaml:1:6:", "not starting with '.'");
	/* Refused for the arena's temporary names: the message says so (it did not). */
	rejects("job: x.new.y\nsources: [a]\n", "job.yaml:1:6:", "nor holding '.new.'");
	/* A name taken from the file's: the message pointed at a `job:` never written. */
	memset(&err, 0, sizeof(err));
	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load_string("a b.yaml", "sources: [a]\n", 13, &cfg, &err),
		     SF_E_CONFIG);
	cr_expect(strstr(err.msg, "a b.yaml: the job's name, taken from the file's, is 'a b'; a "
				  "name must be 1-63 characters"),
		  "%s", err.msg);
	cr_expect(strstr(err.msg, "write `job: NAME`"), "%s", err.msg);
}

Test(config, ranks_must_fit_the_world)
{
	rejects("sources: [a]\nconsumers: {world_size: 4, rank_base: 4}\n",
		"job.yaml:2:39:", "'rank_base' 4 must be below world_size 4");
	rejects("sources: [a]\nconsumers: {world_size: 4, rank_base: 2, local_ranks: 3}\n",
		"job.yaml:2:55:", "goes past world_size 4");
	/* No base to name where it is auto or not given (a review: "from rank_base 0"). */
	rejects("sources: [a]\nconsumers: {world_size: 4, rank_base: auto, local_ranks: 5}\n",
		"job.yaml:2:58:", "'local_ranks' 5 is more than world_size 4");
	rejects("sources: [a]\nconsumers: {world_size: 4, local_ranks: 5}\n",
		"job.yaml:2:41:", "'local_ranks' 5 is more than world_size 4");
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4, rank_base: 2}\n"), 0);
	cr_expect_eq(cfg.local_ranks, 2, "auto local ranks: the rest of the world");
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4, local_ranks: auto}\n"), 0);
	cr_expect_eq(cfg.local_ranks, 4);
	/* auto never caps at the 1024 ranks a job serves: the ranks past it would hang. */
	rejects("sources: [a]\nconsumers: {world_size: 4096}\n", "job.yaml",
		"'local_ranks: auto' means world_size - rank_base = 4096 ranks on this node, "
		"more than the 1024");
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4096, rank_base: 3072}\n"), 0);
	cr_expect_eq(cfg.local_ranks, 1024);
}

Test(config, rank_base_auto_is_the_default_for_a_node_of_a_larger_world)
{
	char *text = NULL;
	size_t len = 0;
	struct sf_config again = {0};
	FILE *f;

	/* A node of 2 ranks in a world of 4, no base given: auto. */
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4, local_ranks: 2}\n"), 0, "%s",
		     err.msg);
	cr_expect_eq(cfg.rank_base_auto, 1);
	cr_expect_eq(cfg.rank_base, 0);
	/* Written as auto, and read back as auto. */
	f = open_memstream(&text, &len);
	cr_assert_eq(sf__config_write(&cfg, f), 0);
	fclose(f);
	cr_expect(strstr(text, "rank_base: auto\n"), "%s", text);
	cr_assert_eq(sf__config_load_string("w.yaml", text, len, &again, &err), 0, "%s", err.msg);
	cr_expect_eq(again.rank_base_auto, 1);
	sf__config_free(&again);
	free(text);
	/* An explicit base, 0 included, stays static (static rendezvous). */
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4, local_ranks: 2, rank_base: "
			  "0}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.rank_base_auto, 0);
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4, local_ranks: 2, rank_base: "
			  "2}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.rank_base_auto, 0);
	cr_expect_eq(cfg.rank_base, 2);
	/* One node holding the whole world: base 0, as before. */
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4}\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.rank_base_auto, 0);
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 4, local_ranks: 4}\n"), 0, "%s",
		     err.msg);
	cr_expect_eq(cfg.rank_base_auto, 0);
	/* Explicit auto. */
	cr_assert_eq(load("sources: [a]\nconsumers: {world_size: 8, local_ranks: 4, rank_base: "
			  "auto}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.rank_base_auto, 1);
	rejects("sources: [a]\nconsumers: {world_size: 4, rank_base: auto}\n", "job.yaml",
		"'rank_base: auto' needs local_ranks");
	rejects("sources: [a]\nconsumers: {world_size: 4, local_ranks: 8, rank_base: auto}\n",
		"job.yaml", "'local_ranks' 8 is more than world_size 4");
	rejects("sources: [a]\nconsumers: {world_size: 4, rank_base: automatic}\n",
		"job.yaml:2:39:", "or auto");
}

Test(config, document_starts_fit_a_sequence)
{
	static const char yaml[] = "sources: [a]\nbatch: {seq_len: 8}\nsampling: {doc_starts: 10}\n";
	char name[300];

	rejects(yaml, "job.yaml:3:24:", "'doc_starts' 10 exceeds the 9 tokens");
	/* A cross-field message names the file whole (a copy cut it at 127 characters). */
	memset(name, 'd', 250);
	strcpy(name + 250, "/job.yaml");
	sf__config_free(&cfg);
	memset(&err, 0, sizeof(err));
	cr_assert_eq(sf__config_load_string(name, yaml, strlen(yaml), &cfg, &err), SF_E_CONFIG);
	cr_expect(!strncmp(err.msg, name, strlen(name)) && strstr(err.msg, "job.yaml:3:24:"),
		  "%s", err.msg);
}

Test(config, a_batch_must_fit_a_slot)
{
	rejects("sources: [a]\nbatch: {size: 65536, seq_len: 65536}\n", "job.yaml:2:15:",
		"needs 8590065664 bytes per slot; a slot holds at most 4294967295");
	/* At the job's token width: the same int32 batch is twice as large. */
	cr_assert_eq(load("sources: [a]\nbatch: {size: 1023, seq_len: 2097151, dtype: uint16}\n"),
		     0, "%s", err.msg);
	rejects("sources: [a]\nbatch: {size: 1023, seq_len: 2097151, dtype: int32}\n",
		"job.yaml:2:15:", "1023 x 2097152 int32 tokens needs 8581545984 bytes per slot");
}

/* Long-context sequences are limited by the slot and the machine, not by a constant. */
Test(config, long_sequences_are_accepted)
{
	cr_assert_eq(load("sources: [a]\nbatch: {size: 1, seq_len: 2097152, dtype: uint16}\n"), 0,
		     "%s", err.msg);
	cr_expect_eq(cfg.seq_len, 2097152);
	cr_assert_eq(load("sources: [a]\nbatch: {size: 1, seq_len: 4194304, dtype: int32}\n"), 0,
		     "%s", err.msg);
	cr_expect_eq(cfg.seq_len, 4194304);
	rejects("sources: [a]\nbatch: {seq_len: 4294967295}\n", "job.yaml:2:18:", "seq_len");
}

Test(config, verify_every_is_a_positive_count)
{
	cr_assert_eq(load("sources: [a]\nintegrity: {verify_every: 16}\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.verify_every, 16);
	rejects("sources: [a]\nintegrity: {verify_every: 0}\n", "job.yaml:2:27:", "verify_every");
}

Test(config, producer_cpus_are_a_cpu_list_of_allowed_cpus)
{
	cr_assert_eq(load("sources: [a]\nproducers: {cpus: '0'}\n"), 0, "%s", err.msg);
	cr_expect_str_eq(cfg.producer_cpus, "0");
	rejects("sources: [a]\nproducers: {cpus: '0-'}\n",
		"job.yaml:2:19:", "'0-' is not a CPU list");
	rejects("sources: [a]\nproducers: {cpus: '1,x'}\n",
		"job.yaml:2:19:", "'1,x' is not a CPU list");
	rejects("sources: [a]\nproducers: {cpus: '3-1'}\n",
		"job.yaml:2:19:", "'3-1' is not a CPU list");
	rejects("sources: [a]\nproducers: {cpus: '0,1023'}\n",
		"job.yaml:2:19:", "names CPU 1023, which this process may not run on (allowed: ");
}

Test(config, tcp_endpoints_need_curve_keys_or_an_explicit_insecure_opt_in)
{
	rejects("sources: [a]\ncontrol: {endpoint: 'tcp://127.0.0.1'}\n",
		"job.yaml:2:21:", "tcp://HOST:PORT");
	rejects("sources: [a]\ncontrol: {endpoint: 'http://x'}\n",
		"job.yaml:2:21:", "must be null (private ipc://), ipc://PATH or tcp://HOST:PORT");
	cr_expect_eq(load("sources: [a]\ncontrol: {endpoint: 'ipc:///tmp/x.ctl'}\n"), 0);
	/* Any local user reaches a loopback port: no tcp without keys, loopback included. */
	rejects("sources: [a]\ncontrol: {endpoint: 'tcp://127.0.0.1:5555'}\n", "job.yaml:2:21:",
		"is tcp without CURVE: set control.curve_secret_key_file and "
		"control.curve_allowed_clients");
	rejects("sources: [a]\ncontrol: {endpoint: 'tcp://10.1.2.3:5555'}\n",
		"job.yaml:2:21:", "control.insecure_tcp: true");
	cr_expect_eq(load("sources: [a]\ncontrol: {endpoint: 'tcp://127.0.0.1:5555', "
			  "insecure_tcp: true}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.insecure_tcp, 1);
	cr_expect_eq(load("sources: [a]\ncontrol:\n  endpoint: 'tcp://10.1.2.3:5555'\n"
			  "  curve_secret_key_file: /k/server\n"
			  "  curve_allowed_clients: clients\n"),
		     0, "%s", err.msg);
	cr_expect_str_eq(cfg.curve_secret_key_file, "/k/server");
	cr_expect_str_eq(cfg.curve_allowed_clients, "clients");
	rejects("sources: [a]\ncontrol:\n  endpoint: 'tcp://10.1.2.3:5555'\n"
		"  curve_secret_key_file: /k/server\n",
		"job.yaml:4:26:",
		"CURVE needs both curve_secret_key_file and curve_allowed_clients");
	rejects("sources: [a]\ncontrol: {endpoint: 'tcp://127.0.0.1:5555', insecure_tcp: true,\n"
		"  curve_secret_key_file: s, curve_allowed_clients: c}\n",
		"job.yaml:2:59:", "exclude each other");
	rejects("sources: [a]\ncontrol: {insecure_tcp: true}\n",
		"job.yaml:2:25:", "'insecure_tcp' applies to a tcp:// endpoint only");
}

Test(config, metrics_are_a_file_and_a_loopback_address)
{
	int ipv6 = -1;
	uint16_t port = 1;

	cr_expect_eq(load("sources: [a]\ncontrol: {metrics_file: m/shmfeed.prom, "
			  "metrics: '[::1]:9464'}\n"),
		     0, "%s", err.msg);
	cr_expect_str_eq(cfg.metrics, "[::1]:9464");
	cr_expect(strstr(cfg.metrics_file, "m/shmfeed.prom"));
	cr_expect_eq(sf__config_metrics_address(cfg.metrics, &ipv6, &port), 0);
	cr_expect(ipv6 == 1 && port == 9464);
	cr_expect_eq(sf__config_metrics_address("127.0.0.1:0", &ipv6, &port), 0);
	cr_expect(ipv6 == 0 && port == 0);
	cr_expect_eq(load("sources: [a]\n"), 0);
	cr_expect(!cfg.metrics && !cfg.metrics_file);
	rejects("sources: [a]\ncontrol: {metrics: '0.0.0.0:9464'}\n",
		"job.yaml:2:20:", "loopback only");
	rejects("sources: [a]\ncontrol: {metrics: '127.0.0.1:99999'}\n",
		"job.yaml:2:20:", "127.0.0.1:PORT or [::1]:PORT");
	rejects("sources: [a]\ncontrol: {metrics: '127.0.0.1'}\n",
		"job.yaml:2:20:", "loopback only");
	/* "9_100" was taken as port 9100 and printed as written. */
	rejects("sources: [a]\ncontrol: {metrics: '127.0.0.1:9_100'}\n", "job.yaml:2:20:",
		"loopback only");
}

Test(config, relative_paths_are_taken_from_the_file)
{
	char dir[] = "/tmp/sf-cfg-XXXXXX", path[64], vocab[96];
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/j.yaml", dir);
	f = fopen(path, "w");
	fputs("sources: [data/a.txt, /abs/b.txt]\ntokenizer: {encoding: gpt2, vocab: v.tiktoken}\n", f);
	fclose(f);
	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load(path, &cfg, &err), 0, "%s", err.msg);
	snprintf(vocab, sizeof(vocab), "%s/data/a.txt", dir);
	cr_expect_str_eq(cfg.sources[0].paths[0], vocab);
	cr_expect_str_eq(cfg.sources[1].paths[0], "/abs/b.txt");
	snprintf(vocab, sizeof(vocab), "%s/v.tiktoken", dir);
	cr_expect_str_eq(cfg.vocab, vocab);
	cr_expect_str_eq(cfg.job, "j");
	unlink(path);
	rmdir(dir);
}

/*
 * A job file read from a pipe (`shmfeed check <(...)`, /dev/stdin) has no directory of its
 * own: its relative paths were joined to /proc/PID/fd or /dev (a review). They are taken
 * from the current directory, as the shell that wrote them means.
 */
Test(config, relative_paths_of_a_piped_file_are_taken_from_the_current_directory)
{
	static const char yaml[] = "job: piped\nsources: [data/a.txt]\n";
	char path[64], want[4200], cwd[4096];
	int fd[2];

	cr_assert_eq(pipe(fd), 0);
	cr_assert_eq(write(fd[1], yaml, sizeof(yaml) - 1), (ssize_t)sizeof(yaml) - 1);
	close(fd[1]);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd[0]);
	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load(path, &cfg, &err), 0, "%s", err.msg);
	close(fd[0]);
	cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
	snprintf(want, sizeof(want), "%s/data/a.txt", cwd);
	cr_expect_str_eq(cfg.sources[0].paths[0], want);
	/* /dev/stdin redirected from a file (`run /dev/stdin < x.yaml`): stat sees the regular
	 * file, and its paths were joined to /dev (a review). */
	{
		char tmp[] = "/tmp/sf-cfg-stdin-XXXXXX";
		int tfd = mkstemp(tmp);

		cr_assert_geq(tfd, 0);
		cr_assert_eq(write(tfd, yaml, sizeof(yaml) - 1), (ssize_t)sizeof(yaml) - 1);
		cr_assert_eq(lseek(tfd, 0, SEEK_SET), 0);
		cr_assert_eq(dup2(tfd, 0), 0);
		close(tfd);
		unlink(tmp);
		sf__config_free(&cfg);
		cr_assert_eq(sf__config_load("/dev/stdin", &cfg, &err), 0, "%s", err.msg);
		cr_expect_str_eq(cfg.sources[0].paths[0], want);
	}
}

/*
 * $SHMFEED_VOCAB_DIR filled vocab_dir as written: a relative value meant another
 * directory to a process elsewhere, and a tokenizer-file job printed a vocab_dir that its
 * own printed config then refused ("'vocab_dir' belongs to 'encoding'").
 */
Test(config, the_vocab_dir_from_the_environment_is_absolute_and_only_for_encodings)
{
	char cwd[4096], want[4200];
	char *text = NULL;
	size_t len = 0;
	FILE *out;

	cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
	snprintf(want, sizeof(want), "%s/rel/vocab", cwd);
	cr_assert_eq(setenv("SHMFEED_VOCAB_DIR", "rel/./vocab/", 1), 0);
	cr_assert_eq(load("sources: [a.txt]\ntokenizer: {encoding: cl100k_base}\n"), 0, "%s",
		     err.msg);
	cr_expect_str_eq(cfg.vocab_dir, want);
	cr_assert_eq(load("sources: [a.txt]\ntokenizer: {file: /x/tokenizer.json}\n"), 0, "%s",
		     err.msg);
	cr_expect_null(cfg.vocab_dir);
	out = open_memstream(&text, &len);
	cr_assert_not_null(out);
	cr_assert_eq(sf__config_write(&cfg, out), 0);
	fclose(out);
	sf__config_free(&cfg);
	cr_expect_eq(sf__config_load_string("printed.yaml", text, len, &cfg, &err), 0, "%s",
		     err.msg);
	free(text);
	unsetenv("SHMFEED_VOCAB_DIR");
}

/* libyaml loads deep nesting in time quadratic in its depth (33 s at 100,000 levels):
 * refused at once past 64 levels, at the line that passes them. */
Test(config, deep_nesting_is_refused_at_once, .timeout = 10)
{
	const size_t n = 200000;
	char *yaml = malloc(2 * n + 32);

	cr_assert_not_null(yaml);
	strcpy(yaml, "sources: ");
	memset(yaml + 9, '[', n);
	yaml[9 + n] = 'a';
	memset(yaml + 10 + n, ']', n);
	strcpy(yaml + 10 + 2 * n, "\n");
	rejects(yaml, "job.yaml:1:", "nested deeper than 64 levels");
	free(yaml);
	/* Tags were ignored: `!include` read as a path, `!!str` as an integer. */
	rejects("sources: !include more.yaml\n", "job.yaml:1:10:", "a YAML tag (!include)");
	rejects("sources: [a.txt]\nbatch: {size: !!str 8}\n", "job.yaml:2:15:",
		"a YAML tag (tag:yaml.org,2002:str)");
	rejects("sources: !!seq [a.txt]\n", "job.yaml:1:10:", "a YAML tag");
	/* A schedule nests 5 deep: fine. */
	cr_expect_eq(load("sources: [a.txt]\nx: [[[[[[[[1]]]]]]]]\n"), SF_E_CONFIG);
	cr_expect(strstr(err.msg, "unknown key 'x'"), "%s", err.msg);
}

Test(config, a_missing_file_is_named)
{
	cr_expect_eq(sf__config_load("/nonexistent/job.yaml", &cfg, &err), -ENOENT);
	cr_expect(strstr(err.msg, "/nonexistent/job.yaml"), "%s", err.msg);
}

/* A directory named as the job file: "cannot read job file /tmp", with no reason (a
 * review). */
Test(config, a_directory_as_the_job_file_says_so)
{
	cr_expect_eq(sf__config_load("/tmp", &cfg, &err), -EISDIR);
	cr_expect(strstr(err.msg, "/tmp") && strstr(err.msg, strerror(EISDIR)), "%s", err.msg);
}

/* A FIFO nobody writes to blocked `check` for good at open; a pipe that is written to (a
 * shell's <(...), /dev/fd/N) is read as any file. */
Test(config, a_fifo_without_writer_does_not_block, .timeout = 20)
{
	const char yaml[] = "sources: [a.txt]\ntokenizer: {encoding: bytes}\n";
	char dir[] = "/tmp/sf-cfg-XXXXXX", path[64];
	int p[2];

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/j.yaml", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	sf__config_free(&cfg);
	cr_expect_eq(sf__config_load(path, &cfg, &err), SF_E_CONFIG);
	cr_expect(strstr(err.msg, "empty"), "%s", err.msg);
	unlink(path);
	rmdir(dir);
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(write(p[1], yaml, sizeof(yaml) - 1), (ssize_t)sizeof(yaml) - 1);
	close(p[1]);
	snprintf(path, sizeof(path), "/dev/fd/%d", p[0]);
	cr_expect_eq(sf__config_load(path, &cfg, &err), 0, "%s", err.msg);
	close(p[0]);
}

/* --set reached sections only: one source of a mixture (its weight, paths) could not be
 * changed without rewriting every source. */
/* An error about one source pointed at the last source that wrote the same key: the
 * weight of source 2 for source 1 that has none, the name of source 2 for the twice-given
 * name of source 1. */
Test(config, an_error_about_a_source_points_at_that_source)
{
	rejects("sources:\n  - {paths: a.txt, weight: \"0.5\"}\n  - {paths: b.txt, weight: 0.5}\n",
		"job.yaml:2:28:", "got '0.5', quoted: write it without the quotes");
	rejects("sources:\n  - {paths: a.txt, weight: 0.5}\n  - {paths: b.txt}\n"
		"  - {paths: c.txt, weight: 0.5}\n",
		"job.yaml:3:5:", "source 'source1' needs a 'weight'");
	rejects("sources:\n  - {paths: a.txt, weight: 0.5, name: same}\n"
		"  - {paths: b.txt, weight: 0.5, name: same}\n"
		"  - {paths: c.txt, weight: 0.5, name: other}\n",
		"job.yaml:3:39:", "the name 'same' is given twice");
	rejects("sources:\n  - {paths: a.txt, weight: 0.5, name: ok}\n"
		"  - {paths: b.txt, weight: 0.5, name: -bad}\n"
		"  - {paths: c.txt, weight: 0.5, name: fine}\n",
		"job.yaml:3:39:", "source and group names must be");
	/* Errors about fields left at their defaults pointed at the top of the file. */
	rejects("sources: [a.txt]\nconsumers:\n  world_size: 8\n  rank_base: auto\n",
		"job.yaml:4:14:", "'rank_base: auto' needs local_ranks");
	rejects("sources: [a.txt]\nconsumers: {world_size: 2000}\n", "job.yaml:2:25:",
		"'local_ranks: auto' means");
	rejects("sources:\n  - {paths: a.txt, weight: 1}\n  - {paths: b.txt, group: hq}\n",
		"job.yaml:3:27:", "group 'hq' needs a weight in mixture.groups");
	/* The name given twice is the group's, "web", not the source's. */
	rejects("sources:\n  - {paths: a.txt, name: web, weight: 3}\n"
		"  - {paths: b.txt, name: arxiv, group: web}\n",
		"job.yaml:3:40:", "the name 'web' is given twice");
	/* A name is checked without a mixture too (it became an error only once a weight was
	 * added; a review). */
	rejects("sources:\n  - {paths: a.txt, name: \"bad name\"}\n", "job.yaml:2:",
		"source and group names must be");
	/* A source named like its own group was taken. */
	rejects("sources:\n  - {paths: a.txt, name: web, group: web}\n"
		"  - {paths: b.txt, name: arxiv, weight: 1}\nmixture: {groups: {web: 1}}\n",
		"job.yaml:2:", "the name 'web' is given twice");
}

Test(config, overrides_reach_one_source)
{
	const char *ok[] = {"sources.1.weight=0.25", "sources.0.format=text",
			    "sources.1.paths=[c.txt, d.txt]"};
	const char *bad[][2] = {{"sources.2.weight=1", "the job has 2 sources (0..1)"},
				{"sources.0.bogus=1", "--set sources.0.bogus: no such field"},
				{"sources.x.weight=1", "--set sources.x.weight: no such field"},
				{"sources.0.separator=''", "'separator' is empty"},
				{"sources.0.paths=[]", "not an empty list"},
				/* Said to be no KEY=VALUE at all (a review). */
				{"sources.0.an_option_name_much_longer_than_any_field_has_ever_been=1",
				 "--set sources.0.an_option_name_much_longer_than_any_fi...: no such field"}};
	const char *yaml = "sources:\n  - {paths: a.txt, weight: 0.5}\n"
			   "  - {paths: b.txt, weight: 0.5}\n";
	const char *one[1];

	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load_string("job.yaml", yaml, strlen(yaml), &cfg, &err), 0, "%s",
		     err.msg);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char dir[] = "/tmp/sf-cfg-XXXXXX", path[64];
		FILE *f;

		cr_assert_not_null(mkdtemp(dir));
		snprintf(path, sizeof(path), "%s/j.yaml", dir);
		f = fopen(path, "w");
		fputs(yaml, f);
		fclose(f);
		if (i == 0) {
			sf__config_free(&cfg);
			cr_assert_eq(sf__config_load_overrides(path, ok, 3, &cfg, &err), 0, "%s",
				     err.msg);
			cr_expect_eq(cfg.sources[1].weight, SF_WEIGHT_SCALE / 4);
			cr_expect_eq(cfg.sources[0].weight, SF_WEIGHT_SCALE / 2);
			cr_expect_eq(cfg.sources[0].format, SF_FMT_TEXT);
			cr_expect_eq(cfg.sources[1].n_paths, 2);
			cr_expect_str_eq(cfg.sources[1].paths[1], "d.txt");
		}
		one[0] = bad[i][0];
		sf__config_free(&cfg);
		cr_expect_eq(sf__config_load_overrides(path, one, 1, &cfg, &err), SF_E_CONFIG,
			     "%s accepted", bad[i][0]);
		cr_expect(strstr(err.msg, bad[i][1]), "%s: %s", bad[i][0], err.msg);
		unlink(path);
		rmdir(dir);
	}
}

Test(config, overrides_apply_and_are_validated)
{
	const char *ok[] = {"batch.size=16", "job=other", "sources=[x.txt, y.txt]",
			    "control.endpoint=", "integrity.checksum=off"};
	const char *bad_key[] = {"batch.sise=16"};
	const char *bad_value[] = {"batch.size=0"};
	const char *no_eq[] = {"batch.size"};
	char dir[] = "/tmp/sf-cfg-XXXXXX", path[64];
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/j.yaml", dir);
	f = fopen(path, "w");
	fputs("sources: [a]\ncontrol: {endpoint: 'ipc:///tmp/q'}\n", f);
	fclose(f);
	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load_overrides(path, ok, 5, &cfg, &err), 0, "%s", err.msg);
	cr_expect_eq(cfg.batch_size, 16);
	cr_expect_str_eq(cfg.job, "other");
	cr_expect_eq(cfg.n_sources, 2);
	cr_expect_str_eq(cfg.sources[1].paths[0], "y.txt", "override paths are from the cwd");
	cr_expect_null(cfg.endpoint);
	cr_expect_eq(cfg.checksum, 0);
	sf__config_free(&cfg);
	cr_expect_eq(sf__config_load_overrides(path, bad_key, 1, &cfg, &err), SF_E_CONFIG);
	cr_expect(strstr(err.msg, "--set batch.sise: no such field"), "%s", err.msg);
	/* The keys it could be, as a typo in the file lists them (it said "see docs"). */
	cr_expect(strstr(err.msg, "in section 'batch'; expected one of: size, seq_len, dtype"),
		  "%s", err.msg);
	{
		const char *root_typo[] = {"jbo=x"};

		cr_expect_eq(sf__config_load_overrides(path, root_typo, 1, &cfg, &err),
			     SF_E_CONFIG);
		cr_expect(
			strstr(err.msg, "--set jbo: no such field; expected one of: job, sources"),
			"%s", err.msg);
		root_typo[0] = "batch=3";
		cr_expect_eq(sf__config_load_overrides(path, root_typo, 1, &cfg, &err),
			     SF_E_CONFIG);
		cr_expect(strstr(err.msg, "'batch' is a section: set one of its keys as batch.KEY "
					  "(size, seq_len, dtype)"),
			  "%s", err.msg);
		/* Into a list: it said mixture had no such field (a review). */
		root_typo[0] = "mixture.schedule.0.until_step=4";
		cr_expect_eq(sf__config_load_overrides(path, root_typo, 1, &cfg, &err),
			     SF_E_CONFIG);
		cr_expect(strstr(err.msg, "'mixture.schedule' is set whole, not in parts: --set "
					  "'mixture.schedule=VALUE'"),
			  "%s", err.msg);
	}
	cr_expect_eq(sf__config_load_overrides(path, bad_value, 1, &cfg, &err), SF_E_CONFIG);
	cr_expect(strstr(err.msg, "--set batch.size: 'size' is out of range"), "%s", err.msg);
	cr_expect_eq(sf__config_load_overrides(path, no_eq, 1, &cfg, &err), SF_E_CONFIG);
	cr_expect(strstr(err.msg, "expected KEY=VALUE"), "%s", err.msg);
	unlink(path);
	rmdir(dir);
}

/* `cfg` written and loaded back into *again, with the same digest. */
static void load_back(struct sf_config *again)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_eq(sf__config_write(&cfg, f), 0);
	fclose(f);
	cr_assert_eq(sf__config_load_string("w.yaml", text, len, again, &err), 0, "%s\n%s",
		     err.msg, text);
	cr_expect_eq(sf__config_digest(again), sf__config_digest(&cfg));
	free(text);
}

Test(config, the_written_config_loads_back_identically)
{
	struct sf_config again = {0};

	cr_assert_eq(load("job: w\nsources:\n  - paths: [a, 'b \"q\"']\n    separator: \"\\n\\n\"\n"
			  "sampling: {seed: 18446744073709551615}\n"
			  "consumers: {world_size: 2}\n"),
		     0, "%s", err.msg);
	load_back(&again);
	cr_expect_str_eq(again.sources[0].paths[1], "b \"q\"");
	cr_expect_str_eq(again.sources[0].separator, "\n\n");
	cr_expect_eq(again.seed, UINT64_MAX);
	cr_expect_eq(again.local_ranks, 2);
	sf__config_free(&again);
}

/* A mixture of per-source weights (no groups, no schedule) was written with an empty
 * `mixture:` section, which does not load. */
Test(config, a_written_mixture_of_source_weights_loads_back)
{
	struct sf_config again = {0};

	cr_assert_eq(load("sources:\n  - {name: a, paths: [a], weight: 3}\n"
			  "  - {name: b, paths: [b], weight: 1}\n"),
		     0, "%s", err.msg);
	load_back(&again);
	cr_expect(again.mixture);
	sf__config_free(&again);
}

/*
 * A grouped source without a weight has its default, 1, in the config: check printed it as
 * `weight: null` (a review), and a config written with an explicit 1 had another digest
 * for the same stream.
 */
Test(config, a_grouped_source_without_a_weight_weighs_1)
{
	struct sf_config again = {0};
	uint64_t implicit;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	cr_assert_eq(load("sources:\n  - {name: a, paths: [a], group: g}\n"
			  "  - {name: b, paths: [b], weight: 1}\nmixture: {groups: {g: 2}}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.sources[0].weight, SF_WEIGHT_SCALE);
	f = open_memstream(&text, &len);
	cr_assert_eq(sf__config_write(&cfg, f), 0);
	fclose(f);
	{
		/* The line after source a's group. */
		const char *g = strstr(text, "group: \"g\"\n"), *w = g ? strchr(g, '\n') + 1 : NULL;

		cr_expect(w && !strncmp(w + strspn(w, " "), "weight: 1.0\n", 12), "%s", text);
	}
	free(text);
	load_back(&again);
	sf__config_free(&again);
	implicit = sf__config_digest(&cfg);
	cr_assert_eq(load("sources:\n  - {name: a, paths: [a], group: g, weight: 1}\n"
			  "  - {name: b, paths: [b], weight: 1}\nmixture: {groups: {g: 2}}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(sf__config_digest(&cfg), implicit);
}

Test(config, the_digest_follows_the_token_stream_only)
{
	uint64_t base, d;

	cr_assert_eq(load("sources: [a]\nbatch: {size: 8}\nconsumers: {world_size: 2}\n"), 0);
	base = sf__config_digest(&cfg);
	cr_assert_eq(load("sources: [a]\nbatch: {size: 4}\nconsumers: {world_size: 4}\n"), 0);
	cr_expect_eq(sf__config_digest(&cfg), base, "same global batch B*W");
	cr_assert_eq(load("sources: [a]\nbatch: {size: 8}\nconsumers: {world_size: 2}\n"
			  "producers: {count: 7}\narena: {slots_per_rank: 9}\n"),
		     0);
	cr_expect_eq(sf__config_digest(&cfg), base, "producers and slots do not matter");
	cr_assert_eq(load("sources: [a]\nbatch: {size: 8}\nconsumers: {world_size: 2}\n"
			  "sampling: {seed: 1}\n"),
		     0);
	d = sf__config_digest(&cfg);
	cr_expect_neq(d, base, "the seed matters");
	cr_assert_eq(load("sources: [b]\nbatch: {size: 8}\nconsumers: {world_size: 2}\n"), 0);
	cr_expect_neq(sf__config_digest(&cfg), base, "the sources matter");
}

/* Append a byte to `path` (creating it), so that its size changes. */
static void grow(const char *path)
{
	FILE *f = fopen(path, "ab");

	cr_assert_not_null(f, "%s", path);
	fputc('x', f);
	fclose(f);
}

/*
 * The digest covers every file the job reads, however it is named, so that a resume on
 * changed data is refused: a directory source's files, both files of a Megatron pair
 * named by its prefix or by one file (under format megatron also by a prefix that is a
 * file of its own), a path with '[' that exists as written (not what the pattern
 * matches), a char: corpus and a vocabulary found in vocab_dir. Each of these changed
 * without changing the digest.
 */
Test(config, the_digest_follows_every_file_read)
{
	static const char *const files[] = {
		"d/a.txt", "m.bin", "m.idx", "x[1].txt", "x1.txt", "c.txt", "v/r50k_base.tiktoken",
		"n",	   "n.bin", "n.idx", "p.json"};
	static const struct {
		const char *before_dir, *after_dir, *changed;
	} cases[] = {
		{"sources: [\"", "/d\"]\n", "d/a.txt"},
		{"sources: [\"", "/d*\"]\n", "d/a.txt"}, /* a glob matching a directory */
		{"sources: [\"", "/m\"]\n", "m.bin"},
		{"sources: [\"", "/m.bin\"]\n", "m.idx"},
		{"sources: [\"", "/x[1].txt\"]\n", "x[1].txt"},
		{"sources: [a.bin]\ntokenizer: {encoding: \"char:", "/c.txt\"}\n", "c.txt"},
		{"sources: [a.bin]\ntokenizer: {encoding: gpt2, vocab_dir: \"", "/v\"}\n",
		 "v/r50k_base.tiktoken"},
		/* Format megatron reads a prefix that is a file too (notes `n` beside the
		 * pair) as the pair: only the notes counted (a review). */
		{"sources: [{format: megatron, paths: \"", "/n\"}]\n", "n.bin"},
		{"sources: [{format: megatron, paths: \"", "/n\"}]\n", "n.idx"},
	};
	char dir[] = "/tmp/sf-test-digest-XXXXXX", path[512], yaml[1024];

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/d", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/v", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		grow(path);
	}
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		uint64_t before;

		snprintf(yaml, sizeof(yaml), "%s%s%s", cases[k].before_dir, dir, cases[k].after_dir);
		cr_assert_eq(load(yaml), 0, "%s", err.msg);
		before = sf__config_digest(&cfg);
		cr_expect_eq(sf__config_digest(&cfg), before, "the digest is stable");
		snprintf(path, sizeof(path), "%s/%s", dir, cases[k].changed);
		grow(path);
		cr_expect_neq(sf__config_digest(&cfg), before, "%s: %s changed, the digest did not",
			      yaml, cases[k].changed);
	}
	/* vocab_dir: null still loads from $SHMFEED_VOCAB_DIR: that file counts. */
	snprintf(path, sizeof(path), "%s/v", dir);
	setenv("SHMFEED_VOCAB_DIR", path, 1);
	{
		uint64_t before;

		cr_assert_eq(load("sources: [a.bin]\ntokenizer: {encoding: gpt2, vocab_dir: null}\n"), 0,
			     "%s", err.msg);
		cr_assert_null(cfg.vocab_dir);
		before = sf__config_digest(&cfg);
		snprintf(path, sizeof(path), "%s/v/r50k_base.tiktoken", dir);
		grow(path);
		cr_expect_neq(sf__config_digest(&cfg), before,
			      "the vocabulary of $SHMFEED_VOCAB_DIR changed, the digest did not");
	}
	unsetenv("SHMFEED_VOCAB_DIR");
	/* A name without a pair beside it is itself alone under format megatron too: a
	 * part's manifest counted the .bin and .idx its name would have, which no job reads,
	 * changing the digest of parts named by a glob (a review of the change above). */
	{
		uint64_t before;

		snprintf(yaml, sizeof(yaml),
			 "sources: [{format: megatron, paths: \"%s/p.json\"}]\n", dir);
		cr_assert_eq(load(yaml), 0, "%s", err.msg);
		before = sf__config_digest(&cfg);
		snprintf(path, sizeof(path), "%s/p.json.bin", dir);
		grow(path);
		cr_expect_eq(sf__config_digest(&cfg), before,
			     "p.json.bin, which no job reads, changed the digest");
		unlink(path);
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/d", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/v", dir);
	rmdir(path);
	rmdir(dir);
}

/*
 * A file under two names (a hard link) is read once; a copy that breaks the link and keeps
 * size and time (`cp -p b a.tmp; mv a.tmp b`) makes the source read two files, twice the
 * data, under the same digest (a review). The digest says which names repeat a file.
 */
Test(config, the_digest_follows_a_link_broken)
{
	char dir[] = "/tmp/sf-test-digest-link-XXXXXX", a[512], b[512], tmp[512], yaml[600];
	struct stat sb;
	uint64_t linked;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(a, sizeof(a), "%s/a.txt", dir);
	snprintf(b, sizeof(b), "%s/b.txt", dir);
	snprintf(tmp, sizeof(tmp), "%s/b.tmp", dir);
	grow(a);
	cr_assert_eq(link(a, b), 0);
	snprintf(yaml, sizeof(yaml), "sources: [\"%s\"]\n", dir);
	cr_assert_eq(load(yaml), 0, "%s", err.msg);
	linked = sf__config_digest(&cfg);
	/* A copy of the same size and modification time, renamed over the link. */
	cr_assert_eq(stat(a, &sb), 0);
	{
		FILE *f = fopen(tmp, "w");
		char buf[4096];
		size_t n;
		FILE *in = fopen(a, "r");

		cr_assert(f && in);
		while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
			cr_assert_eq(fwrite(buf, 1, n, f), n);
		fclose(in);
		fclose(f);
	}
	cr_assert_eq(utimensat(AT_FDCWD, tmp, (struct timespec[2]){sb.st_atim, sb.st_mtim}, 0), 0);
	cr_assert_eq(rename(tmp, b), 0);
	cr_expect_neq(
		sf__config_digest(&cfg), linked,
		"b.txt is a file of its own now, read beside a.txt: the digest did not change");
	unlink(a);
	unlink(b);
	rmdir(dir);
}

Test(config, eot_id_is_an_id_or_null)
{
	uint64_t base;
	char *text = NULL;
	size_t len = 0;
	struct sf_config again = {0};
	FILE *f;

	cr_assert_eq(load("sources: [a.bin]\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.eot_id, SF_EOT_ID_UNSET);
	base = sf__config_digest(&cfg);
	cr_assert_eq(load("sources: [a.bin]\ntokenizer: {eot_id: null}\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.eot_id, SF_EOT_ID_UNSET);
	cr_expect_eq(sf__config_digest(&cfg), base, "null is the default");
	cr_assert_eq(load("sources: [a.bin]\ntokenizer: {eot_id: 50256}\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.eot_id, 50256);
	cr_expect_neq(sf__config_digest(&cfg), base, "the end-of-text id decides doc starts");
	f = open_memstream(&text, &len);
	cr_assert_eq(sf__config_write(&cfg, f), 0);
	fclose(f);
	cr_expect(strstr(text, "eot_id: 50256\n"), "%s", text);
	cr_assert_eq(sf__config_load_string("w.yaml", text, len, &again, &err), 0, "%s", err.msg);
	cr_expect_eq(again.eot_id, 50256);
	sf__config_free(&again);
	free(text);
	rejects("sources: [a.bin]\ntokenizer: {eot_id: 4294967295}\n",
		"job.yaml:2:21:", "'eot_id' is out of range");
	rejects("sources: [a.bin]\ntokenizer: {eot_id: '7'}\n",
		"job.yaml:2:21:", "an unsigned integer in [0, 4294967294] or null");
}

Test(config, paths_are_normalised)
{
	const char *set[] = {"sources=[./data//a.bin, 'shards/', ../up/./b.bin, ./, //abs//c/]"};
	char dir[] = "/tmp/sf-cfg-XXXXXX", path[64], want[96];
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/j.yaml", dir);
	f = fopen(path, "w");
	fputs("sources: [./data//x.bin, 'shards/', /abs/./y//z.bin, .]\n", f);
	fclose(f);
	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load(path, &cfg, &err), 0, "%s", err.msg);
	snprintf(want, sizeof(want), "%s/data/x.bin", dir);
	cr_expect_str_eq(cfg.sources[0].paths[0], want);
	snprintf(want, sizeof(want), "%s/shards", dir);
	cr_expect_str_eq(cfg.sources[1].paths[0], want);
	cr_expect_str_eq(cfg.sources[2].paths[0], "/abs/y/z.bin");
	cr_expect_str_eq(cfg.sources[3].paths[0], dir);
	sf__config_free(&cfg);
	cr_assert_eq(sf__config_load_overrides(path, set, 1, &cfg, &err), 0, "%s", err.msg);
	cr_expect_str_eq(cfg.sources[0].paths[0], "data/a.bin");
	cr_expect_str_eq(cfg.sources[1].paths[0], "shards");
	cr_expect_str_eq(cfg.sources[2].paths[0], "../up/b.bin");
	cr_expect_str_eq(cfg.sources[3].paths[0], ".");
	cr_expect_str_eq(cfg.sources[4].paths[0], "/abs/c");
	unlink(path);
	rmdir(dir);
}

Test(config, mixture_weights_groups_and_schedules_are_read)
{
	cr_assert_eq(load("sources: [a.bin]\n"), 0, "%s", err.msg);
	cr_expect_eq(cfg.mixture, 0);
	cr_expect_eq(cfg.sources[0].weight, SF_WEIGHT_UNSET);
	cr_assert_eq(load("sources:\n  - {paths: a.bin, weight: 0.999}\n"
			  "  - {paths: b.bin, name: tiny, weight: 0.001}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.mixture, 1);
	cr_expect_str_eq(cfg.sources[0].name, "source0");
	cr_expect_str_eq(cfg.sources[1].name, "tiny");
	cr_expect_eq(cfg.sources[0].weight, 999000000);
	cr_expect_eq(cfg.sources[1].weight, 1000000);
	cr_assert_eq(load("sources:\n  - {paths: a.bin, name: web, weight: 3}\n"
			  "  - {paths: b.bin, name: c, group: hq}\n"
			  "  - {paths: d.bin, name: m, group: hq, weight: 2}\n"
			  "mixture: {groups: {hq: 1.5}}\n"),
		     0, "%s", err.msg);
	cr_expect_eq(cfg.groups.n, 1);
	cr_expect_str_eq(cfg.groups.v[0].name, "hq");
	cr_expect_eq(cfg.groups.v[0].weight, 1500000000);
	cr_assert_eq(
		load("sources:\n  - {paths: a.bin, name: web}\n  - {paths: b.bin, name: code}\n"
		     "mixture:\n  schedule:\n"
		     "    - {until_step: 100, weights: {web: 1}}\n"
		     "    - {until_step: 200, weights: {web: 1}, ramp_to: {code: 1}, stages: 4}\n"
		     "    - {weights: {web: 0.5, code: 0.5}}\n"),
		0, "%s", err.msg);
	cr_expect_eq(cfg.n_phases, 3);
	cr_expect_eq(cfg.schedule[0].until_step, 100);
	cr_expect_eq(cfg.schedule[1].ramp_to.n, 1);
	cr_expect_eq(cfg.schedule[1].stages, 4);
	cr_expect_eq(cfg.schedule[2].until_step, UINT64_MAX);
	cr_expect_eq(cfg.schedule[2].weights.v[1].weight, 500000000);
}

Test(config, mixture_mistakes_are_named)
{
	rejects("sources:\n  - {paths: a.bin, weight: 0.5}\n  - {paths: b.bin}\n",
		"job.yaml:", "source 'source1' needs a 'weight'");
	rejects("sources:\n  - {paths: a.bin, weight: -1}\n", "job.yaml:2:", "decimal weight");
	/* A separator that C strings cannot hold, or one that separates nothing: both read
	 * as "one document per file" before. */
	rejects("sources:\n  - {paths: a.txt, format: text, separator: \"\\0\"}\n", "job.yaml:2:",
		"holds a NUL character");
	rejects("sources:\n  - {paths: a.txt, format: text, separator: \"a\\x00b\"}\n",
		"job.yaml:2:", "holds a NUL character");
	/* Nor in a key, a choice or a path, which were cut at it; nor a second document,
	 * which was ignored; nor aliases that multiply a small file without bound. */
	rejects("sources: [a.bin]\nbatch: {\"size\\0x\": 3}\n", "job.yaml:2:",
		"holds a NUL character");
	rejects("sources:\n  - {paths: \"a.txt\\0junk\", format: text}\n", "job.yaml:2:",
		"holds a NUL character");
	rejects("sources: [a.bin]\nbatch: {size: 2}\n---\nbatch: {size: 99}\n", "job.yaml:3:",
		"a second YAML document");
	/* At the line of its start (it was the line where the parser stopped: past the file's
	 * end at times), and what follows a document that is no document is a syntax error
	 * (both were called a second document; a review). */
	rejects("sources: [a.bin]\nbatch: {size: 2}\n---\n\nbatch: {size: 99}\nepochs: 1\n",
		"job.yaml:3:", "a second YAML document");
	rejects("{sources: [a.bin]} trailing\n", "job.yaml:1:20: invalid YAML",
		"did not find expected <document start>");
	rejects("sources: [a.bin]\n}\n", "job.yaml:2:1: invalid YAML", "expected key");
	/* A port zmq would read as 5 (it stops at '_'); a stall timeout that rounded to 0,
	 * which turned the check off. */
	rejects("sources: [a.bin]\ncontrol: {endpoint: \"tcp://127.0.0.1:5_0123\", "
		"insecure_tcp: true}\n",
		"job.yaml:", "PORT in [1, 65534]");
	rejects("sources: [a.bin]\nproducers: {stall_timeout: 0.5ms}\n", "job.yaml:2:",
		"less than 1ms but not 0");
	cr_assert_eq(load("sources: [a.bin]\nproducers: {stall_timeout: 0ms}\n"), 0, "%s", err.msg);
	cr_assert_eq(load("sources: [a.bin]\nproducers: {stall_timeout: 0.0s}\n"), 0, "%s",
		     err.msg);
	{
		/* Seven levels of ten aliases each: 10^7 values from a file of 500 bytes. */
		char bomb[1024];
		size_t o = (size_t)snprintf(bomb, sizeof(bomb), "a0: &a0 [1,1,1,1,1,1,1,1,1,1]\n");

		for (int level = 1; level < 8; level++) {
			o += (size_t)snprintf(bomb + o, sizeof(bomb) - o, "a%d: &a%d [", level, level);
			for (int k = 0; k < 10; k++)
				o += (size_t)snprintf(bomb + o, sizeof(bomb) - o, "%s*a%d", k ? "," : "",
						      level - 1);
			o += (size_t)snprintf(bomb + o, sizeof(bomb) - o, "]\n");
		}
		cr_assert_lt(o, sizeof(bomb));
		rejects(bomb, "job.yaml:", "through its anchors and aliases");
	}
	/* An alias inside the value it names: "expands to more than 1000000 values", for a
	 * file of one line (a review). */
	rejects("batch: &a {size: 2, seq_len: *a}\n", "job.yaml:1:8:", "holds an alias of itself");
	rejects("sources: &s [a.bin, [*s]]\n", "job.yaml:1:10:", "holds an alias of itself");
	rejects("sources:\n  - {paths: a.txt, format: text, separator: \"\"}\n", "job.yaml:2:",
		"'separator' is empty");
	rejects("sources:\n  - {paths: a.bin, weight: 0.1234567891}\n",
		"job.yaml:2:", "out of range");
	rejects("sources:\n  - {paths: a.bin, weight: 1, name: x}\n"
		"  - {paths: b.bin, weight: 1, name: x}\n",
		"job.yaml:", "given twice");
	rejects("sources:\n  - {paths: a.bin, group: g}\n",
		"job.yaml:", "group 'g' needs a weight");
	/* A clash with a default name said the user wrote the name twice. */
	rejects("sources:\n  - {paths: a.bin, weight: 1}\n  - {paths: b.bin, weight: 1, name: "
		"source0}\n",
		"job.yaml:", "the name 'source0' is source 0's default (it has no `name`)");
	/* Source 1's default clashing with source 0's group was said to be source 0's default
	 * (a review). */
	rejects("sources:\n  - {paths: a.bin, weight: 1, group: source1}\n  - {paths: b.bin, "
		"weight: 1}\nmixture: {groups: {source1: 1}}\n",
		"job.yaml:", "source 1 has no `name`, and its default 'source1' is another");
	rejects("sources:\n  - {paths: a.bin, weight: 1}\nsampling: {epochs: 2}\n",
		"job.yaml:3:", "'epochs' does not apply to a mixture");
	/* Without a schedule it spoke of the schedule's last until_step (a review). */
	rejects("sources:\n  - {paths: a.bin, weight: 1}\nsampling: {epochs: 2}\n",
		"job.yaml:3:", "the run ends where the training stops");
	rejects("sources: [a.bin]\nmixture:\n  schedule:\n    - {weights: {source0: 1}}\n"
		"    - {until_step: 5, weights: {source0: 1}}\n",
		"job.yaml:4:", "only the last schedule phase");
	/* A name that is no source or group is shown in its phase's weights (or ramp_to),
	 * not at the `mixture` key. */
	rejects("sources: [a.bin]\nmixture:\n  schedule:\n    - {until_step: 9, weights: {x: 1}}\n",
		"job.yaml:4:32:", "schedule phase 1: 'x' is neither an ungrouped source nor a group");
	rejects("sources: [a.bin]\nmixture:\n  schedule:\n    - {until_step: 9, weights: "
		"{source0: 1}}\n    - until_step: 20\n      weights: {source0: 1}\n      ramp_to:\n"
		"        y: 2\n",
		"job.yaml:8:9:", "schedule phase 2: 'y' is neither");
	rejects("sources: [a.bin]\nmixture:\n  schedule:\n    - {until_step: 9, weights: {}, "
		"stages: 3}\n",
		"job.yaml:4:", "'stages' applies to a ramp");
	rejects("sources: [a.bin]\nmixture:\n  schedule:\n    - {weights: {source0: 1}, ramp_to: "
		"{source0: 2}}\n",
		"job.yaml:4:", "a ramp needs 'until_step'");
}

Test(config, a_written_mixture_loads_back_with_the_same_digest)
{
	char *text = NULL;
	size_t len = 0;
	struct sf_config again = {0};
	uint64_t plain;
	FILE *f;

	cr_assert_eq(load("sources: [a.bin, b.bin]\n"), 0, "%s", err.msg);
	plain = sf__config_digest(&cfg);
	cr_assert_eq(load("sources:\n  - {paths: a.bin, name: web}\n  - {paths: b.bin, group: g}\n"
			  "mixture:\n  schedule:\n"
			  "    - {until_step: 10, weights: {web: 0.25, g: 0.75}, ramp_to: {g: 1}}\n"
			  "    - {weights: {g: 1}}\n"),
		     0, "%s", err.msg);
	cr_expect_neq(sf__config_digest(&cfg), plain);
	f = open_memstream(&text, &len);
	cr_assert_eq(sf__config_write(&cfg, f), 0);
	fclose(f);
	cr_assert_eq(sf__config_load_string("w.yaml", text, len, &again, &err), 0, "%s\n%s",
		     err.msg, text);
	cr_expect_eq(again.n_phases, 2);
	cr_expect_eq(again.schedule[0].weights.v[0].weight, 250000000);
	cr_expect_eq(sf__config_digest(&again), sf__config_digest(&cfg));
	sf__config_free(&again);
	free(text);
}

Test(config, a_tokenizer_file_replaces_the_encoding)
{
	cr_assert_eq(
		load("sources: [a.txt]\ntokenizer: {file: /m/tokenizer.model, format: tiktoken,"
		     " pattern: '\\p{L}+', bos: none, eos: '<|end_of_text|>', specials: true}\n"),
		0, "%s", err.msg);
	cr_expect_null(cfg.encoding);
	cr_expect_str_eq(cfg.tok_file, "/m/tokenizer.model");
	cr_expect_eq(cfg.tok_format, 1);
	cr_expect_str_eq(cfg.tok_pattern, "\\p{L}+");
	cr_expect_str_eq(cfg.bos, "none");
	cr_expect_str_eq(cfg.eos, "<|end_of_text|>");
	cr_expect_eq(cfg.tok_specials, 1);
	sf__config_free(&cfg);
	cr_assert_eq(load("sources: [a.txt]\n"), 0, "%s", err.msg);
	cr_expect_null(cfg.tok_file);
	cr_expect_str_eq(cfg.bos, "auto");
	cr_expect_str_eq(cfg.eos, "auto");
	/* The resolved config says `encoding: null` beside the file, and reads back. */
	sf__config_free(&cfg);
	cr_assert_eq(load("sources: [a.txt]\ntokenizer: {encoding: null, file: /m/t.model}\n"), 0,
		     "%s", err.msg);
}

Test(config, tokenizer_file_options_are_checked)
{
	rejects("sources: [a.txt]\ntokenizer: {encoding: gpt2, file: t.model}\n",
		"job.yaml:2:", "name the tokenizer twice");
	rejects("sources: [a.txt]\ntokenizer: {vocab: v.tiktoken, file: t.model}\n",
		"job.yaml:2:", "belong to 'encoding'");
	rejects("sources: [a.txt]\ntokenizer: {bos: '<s>'}\n",
		"job.yaml:2:", "'bos' applies to a tokenizer 'file' only");
	rejects("sources: [a.txt]\ntokenizer: {pattern: x}\n", "job.yaml:2:", "'pattern' applies");
	rejects("sources: [a.txt]\ntokenizer: {specials: true}\n",
		"job.yaml:2:", "'specials' applies");
	rejects("sources: [a.txt]\ntokenizer: {encoding: null}\n",
		"job.yaml:2:", "no tokenizer 'file'");
	rejects("sources: [a.txt]\ntokenizer: {file: t.model, format: spm}\n",
		"job.yaml:2:", "format");
	/* A vocabulary that bytes and char would not read was taken, and ignored. */
	rejects("sources: [a.txt]\ntokenizer: {vocab: v.tiktoken}\n", "job.yaml:2:",
		"encodings bytes and char do not read");
	rejects("sources: [a.txt]\ntokenizer: {encoding: char, vocab: v.tiktoken}\n",
		"job.yaml:2:", "encodings bytes and char do not read");
}

/*
 * A ramp's stages of many sources: every stage builds a tree of every source, in time
 * that grows with their square: 64 stages of 4,096 sources took 3 s and 50 MB in each
 * process that opened the job, and 1,024 would take about 45 s (a review; the default
 * was capped, a given `stages` was not). At most 2^28 / sources^2 stages, named at the phase's
 * `stages`: 1,024 up to 512 sources, 16 at 4,096.
 */
Test(config, a_ramp_of_many_sources_takes_few_stages)
{
	static char yaml[65536];
	size_t len = (size_t)snprintf(yaml, sizeof(yaml), "sources:\n");

	for (int i = 0; i < 1000; i++)
		len += (size_t)snprintf(yaml + len, sizeof(yaml) - len,
					"  - {paths: s%d.bin, name: s%d}\n", i, i);
	len += (size_t)snprintf(yaml + len, sizeof(yaml) - len,
				"mixture:\n  schedule:\n"
				"    - {until_step: 10, weights: {s0: 1}}\n"
				"    - {until_step: 5000, weights: {s0: 1}, ramp_to: {s1: 1}, "
				"stages: 269}\n");
	cr_assert_lt(len, sizeof(yaml));
	rejects(yaml, "job.yaml:1005:",
		"schedule phase 2: 'stages' 269 of 1000 sources: a ramp of that many sources "
		"takes at most 2^28 / sources^2 stages (268 here)");
	sf__config_free(&cfg);
	memcpy(strstr(yaml, "stages: 269"), "stages: 268", 11);
	cr_assert_eq(load(yaml), 0, "%s", err.msg);
	sf__config_free(&cfg);
	/* 1,024 of 512 sources, as before. */
	*strstr(yaml, "  - {paths: s512.bin") = 0;
	len = strlen(yaml);
	snprintf(yaml + len, sizeof(yaml) - len,
		 "mixture:\n  schedule:\n"
		 "    - {until_step: 10, weights: {s0: 1}}\n"
		 "    - {until_step: 5000, weights: {s0: 1}, ramp_to: {s1: 1}, stages: 1024}\n");
	cr_assert_eq(load(yaml), 0, "%s", err.msg);
}

/*
 * A value an alias brings is named where the alias is, with the anchored value's
 * position: the position of the value alone (its anchor) named a line where nothing is
 * wrong ("producers: *c" reported at the consumers section's line).
 */
Test(config, a_value_through_an_alias_is_named_at_the_alias)
{
	rejects("consumers: &c {world_size: 1}\nsources: [a.bin]\nproducers: *c\n",
		"job.yaml:3:12: unknown key 'world_size' in section 'producers'",
		"(through an alias of 1:16)");
	rejects("batch: {size: 8, seq_len: &n 3000}\nsources: [a.bin]\nproducers: {count: *n}\n",
		"job.yaml:3:20: 'count' is out of range", "(through an alias of 1:27)");
	/* The second of two aliases of one value on a line, and items of a list. */
	rejects("consumers: {world_size: &w 2}\nsources: [a.bin]\n"
		"producers: {count: *w, stall_timeout: *w}\n",
		"job.yaml:3:39: 'stall_timeout' must be a duration", "(through an alias of 1:25)");
	rejects("batch: &m {size: 8}\nsources:\n  - {paths: [a.bin, *m]}\n",
		"job.yaml:3:21: 'paths' must be a path", "(through an alias of 1:8)");
	/* A check across fields points at the alias too, here the fourth of four sources. */
	rejects("sources:\n  - &s {paths: a.bin, name: x, weight: 1}\n"
		"  - &t {paths: b.bin, name: y, weight: 1}\n  - *t\n  - *s\n",
		"job.yaml:4:5: the name 'y' is given twice", "(through an alias of 3:29)");
	/* A key an alias brings, too (it was named at its anchor, without the note; a
	 * review), and keys after it in place. */
	rejects("job: &k akey\nsources: [a.bin]\nbatch:\n  *k : 5\n",
		"job.yaml:4:3: unknown key 'akey' in section 'batch'", "(through an alias of 1:6)");
	rejects("job: &k size\nsources: [a.bin]\nbatch: {*k : 5, seq: 2}\n",
		"job.yaml:3:17: unknown key 'seq' in section 'batch'", "expected one of");
	cr_expect(!strstr(err.msg, "alias"), "%s", err.msg);
	/* A value written in place has no such note. */
	rejects("sources: [a.bin]\nproducers: {count: 3000}\n", "job.yaml:2:20:", "out of range");
	cr_expect(!strstr(err.msg, "alias"), "%s", err.msg);
}
