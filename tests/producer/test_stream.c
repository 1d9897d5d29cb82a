/*
 * The stream a job delivers, pinned (needs ../shared/data; exits 77 without it).
 *
 * A resumed run gets the samples of the steps it has not seen only if the sample at each
 * step is the one the first run would have got: across restarts of one build (the other
 * producer tests), and across an upgrade of shmfeed between save and resume (this test).
 * For jobs of every input format, both orders, epochs, document starts, the three
 * encodings and a tokenizer file with its document convention, mixtures with a schedule
 * and a ramp, a mixture served from its period table and one whose period is too long for
 * a table, each written with the defaults
 * a user leaves in place, the batches of every rank at steps [0, 40) and at four steps
 * far out are hashed (tokens, document starts, row sources, length, first sample) and
 * compared with the table of this stream version below. A change of shmfeed that moves
 * any sample of them fails here. Such a change must raise SF_STREAM_VERSION
 * (common/config.h), which changes every job's config digest, so that a state saved by
 * an earlier shmfeed is refused instead of resumed onto other data, and add the new
 * version's table; the test checks that the table of this version is there and that the
 * stream differs from every earlier version's.
 */
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/arena.h"
#include "common/config.h"
#include "producer/producer.h"
#include "tests/producer/harness.h"

#define STEPS 40

static uint64_t rng = 0x5eed5eed5eedull;

static uint32_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void write_tokens(void)
{
	static uint16_t t16[20000];
	static uint32_t t32[6000], lens[400];
	size_t n = 0, d;
	char name[32];

	for (size_t i = 0; i < 20000; i++)
		t16[i] = (uint16_t)(next_rand() % 50257);
	h_write_nanogpt("a.bin", t16, 20000);
	for (int s = 0; s < 5; s++) {
		snprintf(name, sizeof(name), "mix%d.bin", s);
		h_write_nanogpt(name, t16 + s * 3000, 1000 + (size_t)s * 500);
	}
	for (size_t i = 0; i < 6000; i++)
		t32[i] = next_rand() % 128256;
	h_write_llmc("b.bin", t32, 3000, 1);
	for (d = 0; d < 400 && n < 5800; d++) {
		lens[d] = 1 + next_rand() % 40;
		if (n + lens[d] > 6000)
			break;
		n += lens[d];
	}
	h_write_megatron("c", t32, lens, d, 1);
}

/* Documents of words in several scripts, now and then holding special-token text. */
static void write_text(void)
{
	static const char *const words[] = {
		"the",	 "data",   "loader", "Tokyo",	      "東京", "データ", "über", "Straße",
		"naïve", "данные", "поток",  "ελληνικά",      "عربى", "हिन्दी",	"😀",	"1234567",
		"  ",	 "don't",  "I'll",   "<|endoftext|>", "\t",   "x=y+1;", "  \n", "ÅÄÖ"};
	const size_t n_words = sizeof(words) / sizeof(words[0]);
	FILE *j = fopen("d.jsonl", "w"), *t = fopen("e.txt", "w");

	H_CHECK(j && t, "cannot write the text sources");
	for (int doc = 0; doc < 300; doc++) {
		uint32_t len = 3 + next_rand() % 60;

		fputs("{\"text\": \"", j);
		for (uint32_t w = 0; w < len; w++) {
			const char *word = words[next_rand() % n_words];

			for (const char *c = word; *c; c++)
				if (*c == '\n')
					fputs("\\n", j);
				else if (*c == '\t')
					fputs("\\t", j);
				else
					fputc(*c, j);
			fputc(' ', j);
			fputs(word, t);
			fputc(w % 7 == 6 ? '\n' : ' ', t);
		}
		fputs("\"}\n", j);
		fputs("\n\n", t);
	}
	H_CHECK(fclose(j) == 0 && fclose(t) == 0, "cannot write the text sources");
}

struct job {
	const char *name;
	/* "$D" stands for the shared data directory, "$L" for Llama 3's tokenizer.model */
	const char *yaml;
	uint64_t far; /* a step far out (0: none, a finite job) */
};

/* Each job has two ranks and batches of 4 sequences of 32 tokens unless it says
 * otherwise. */
#define GEO "batch: {size: 4, seq_len: 32}\nconsumers: {world_size: 2}\n"
static const struct job jobs[] = {
	{"nanogpt, windows", "sources: [{paths: [a.bin], format: nanogpt}]\n" GEO, 100000},
	{"nanogpt, random",
	 "sources: [{paths: [a.bin], format: nanogpt}]\n" GEO "sampling: {mode: random, seed: 7}\n",
	 123457},
	{"llm.c int32, windows, 2 epochs, document starts",
	 "sources: [{paths: [b.bin]}]\n" GEO "tokenizer: {eot_id: 128001}\n"
	 "sampling: {epochs: 2, doc_starts: 3}\n",
	 0},
	{"megatron int32, random, document starts",
	 "sources: [{paths: [c]}]\n" GEO "sampling: {mode: random, doc_starts: 4}\n", 250000},
	{"text, cl100k_base, windows",
	 "sources: [{paths: [\"$D/corpus/tinyshakespeare.txt\"]}]\n" GEO
	 "tokenizer: {encoding: cl100k_base, vocab_dir: \"$D/vocab\"}\n",
	 100003},
	{"jsonl, o200k_base, random, document starts",
	 "sources: [{paths: [d.jsonl]}]\n" GEO
	 "tokenizer: {encoding: o200k_base, vocab_dir: \"$D/vocab\"}\n"
	 "sampling: {mode: random, doc_starts: 2}\n",
	 77777},
	{"text with a separator, r50k_base, 1 epoch",
	 "sources: [{paths: [e.txt], separator: \"\\n\\n\"}]\n"
	 "batch: {size: 8, seq_len: 128}\nconsumers: {world_size: 2}\n"
	 "tokenizer: {encoding: r50k_base, vocab_dir: \"$D/vocab\"}\n"
	 "sampling: {epochs: 1}\n",
	 0},
	{"text, Llama 3's tokenizer file (bos and eos of its family)",
	 "sources: [{paths: [e.txt], separator: \"\\n\\n\"}]\n" GEO "tokenizer: {file: \"$L\"}\n",
	 54321},
	{"mixture: weights, text and tokens",
	 "sources:\n"
	 "  - {name: web, paths: [a.bin], format: nanogpt, weight: 0.7}\n"
	 "  - {name: books, paths: [e.txt], separator: \"\\n\\n\", weight: 0.2}\n"
	 "  - {name: small, paths: [mix0.bin], format: nanogpt, weight: 0.1}\n" GEO
	 "tokenizer: {encoding: r50k_base, vocab_dir: \"$D/vocab\"}\n",
	 99999},
	{"mixture: groups and a schedule with a ramp",
	 "sources:\n"
	 "  - {name: web, paths: [a.bin], format: nanogpt}\n"
	 "  - {name: code, paths: [mix1.bin], format: nanogpt, group: hq, weight: 2}\n"
	 "  - {name: math, paths: [mix2.bin], format: nanogpt, group: hq}\n" GEO "mixture:\n"
	 "  schedule:\n"
	 "    - {until_step: 10, weights: {web: 0.8, hq: 0.2}}\n"
	 "    - {until_step: 30, weights: {web: 0.8, hq: 0.2}, ramp_to: {web: 0.3, hq: 0.7},"
	 " stages: 5}\n"
	 "    - {weights: {web: 0.3, hq: 0.7}}\n",
	 100000},
	{"mixture: five sources served from the period table",
	 "sources:\n"
	 "  - {paths: [mix0.bin], format: nanogpt, weight: 14631}\n"
	 "  - {paths: [mix1.bin], format: nanogpt, weight: 2919}\n"
	 "  - {paths: [mix2.bin], format: nanogpt, weight: 47789}\n"
	 "  - {paths: [mix3.bin], format: nanogpt, weight: 1}\n"
	 "  - {paths: [mix4.bin], format: nanogpt, weight: 34663}\n" GEO "sampling: {seed: 99}\n",
	 1000003},
	{"mixture: five sources, a period too long for a table",
	 "sources:\n"
	 "  - {paths: [mix0.bin], format: nanogpt, weight: 2926210}\n"
	 "  - {paths: [mix1.bin], format: nanogpt, weight: 583800}\n"
	 "  - {paths: [mix2.bin], format: nanogpt, weight: 9557610}\n"
	 "  - {paths: [mix3.bin], format: nanogpt, weight: 201}\n"
	 "  - {paths: [mix4.bin], format: nanogpt, weight: 6932410}\n" GEO "sampling: {seed: 99}\n",
	 7000001},
	/* Read across a block's edge (sample 50,946,048 = 12,438 x 4096) that the light
	 * source's 8th window (samples 46,666,744 to 53,333,422) spans. */
	{"mixture: one source lighter than a block, across a block's edge far out",
	 "sources:\n"
	 "  - {paths: [mix0.bin], format: nanogpt, weight: 2926210}\n"
	 "  - {paths: [mix1.bin], format: nanogpt, weight: 583800}\n"
	 "  - {paths: [mix2.bin], format: nanogpt, weight: 9557610}\n"
	 "  - {paths: [mix3.bin], format: nanogpt, weight: 3}\n"
	 "  - {paths: [mix4.bin], format: nanogpt, weight: 6932410}\n" GEO "sampling: {seed: 99}\n",
	 6368254},
};

#define N_JOBS (sizeof(jobs) / sizeof(jobs[0]))
#define N_PINS (sizeof(pins) / sizeof(pins[0]))

/*
 * The hashes of each stream version's batches, in the order of jobs[]. A change that
 * moves a sample raises SF_STREAM_VERSION and adds the table of the new version; the
 * tables of earlier versions stay as they are, and each must differ from the current
 * stream in some job (else the version was raised, and every resume state refused, for
 * nothing).
 */
static const struct {
	int version;
	uint64_t hash[N_JOBS];
} pins[] = {
	{1,
	 {UINT64_C(0xc2e5741f47d34a4e), UINT64_C(0xff572d0fe82697b9), UINT64_C(0x860c0336a4f2ad9e),
	  UINT64_C(0x4f0a1d2a0e97ea39), UINT64_C(0x43e5eddc607efda3), UINT64_C(0x0d22cab8e70c610f),
	  UINT64_C(0x530fba699168c413), UINT64_C(0x2677071a4dcdd3a4), UINT64_C(0x53e7f61952a8d0ea),
	  UINT64_C(0x93ae0a0c5b7f060a), UINT64_C(0x93e7830c1cfa9a0d), UINT64_C(0x73de0e7d911dac44),
	  UINT64_C(0x9fb2d7b407067275)}},
	/* 2: a weight set that no tree keeps below 1 and whose period is too long for a
	 * table takes blocks (docs/mixtures.md). */
	{2,
	 {UINT64_C(0xc2e5741f47d34a4e), UINT64_C(0xff572d0fe82697b9), UINT64_C(0x860c0336a4f2ad9e),
	  UINT64_C(0x4f0a1d2a0e97ea39), UINT64_C(0x43e5eddc607efda3), UINT64_C(0x0d22cab8e70c610f),
	  UINT64_C(0x530fba699168c413), UINT64_C(0x2677071a4dcdd3a4), UINT64_C(0x53e7f61952a8d0ea),
	  UINT64_C(0x93ae0a0c5b7f060a), UINT64_C(0x93e7830c1cfa9a0d), UINT64_C(0x6e7524a48d860222),
	  UINT64_C(0x9fb2d7b407067275)}},
	/* 3: blocks are cut by the second lightest source, the lightest may be lighter than
	 * a block (docs/mixtures.md, "Blocks"). */
	{3,
	 {UINT64_C(0xc2e5741f47d34a4e), UINT64_C(0xff572d0fe82697b9), UINT64_C(0x860c0336a4f2ad9e),
	  UINT64_C(0x4f0a1d2a0e97ea39), UINT64_C(0x43e5eddc607efda3), UINT64_C(0x0d22cab8e70c610f),
	  UINT64_C(0x530fba699168c413), UINT64_C(0x2677071a4dcdd3a4), UINT64_C(0x53e7f61952a8d0ea),
	  UINT64_C(0x93ae0a0c5b7f060a), UINT64_C(0x93e7830c1cfa9a0d), UINT64_C(0x6e7524a48d860222),
	  UINT64_C(0x0bb7bd20e7e77ee5)}},
};

/* The hash of one batch: its tokens, document starts and row sources, length and first
 * sample. */
static uint64_t batch_hash(const struct sf_config *cfg, const struct sf_geometry *g,
			   const unsigned char *buf, uint32_t len, uint64_t first)
{
	const uint64_t B = cfg->batch_size, S = g->seq_tokens, w = g->token_bytes;
	uint64_t v[5] = {len, first, 0, 0, 0};

	if (len) {
		v[2] = XXH3_64bits(buf, B * S * w);
		if (cfg->doc_starts)
			v[3] = XXH3_64bits(buf + sf__doc_starts_offset(B, S, w),
					   B * cfg->doc_starts * 4);
		if (cfg->mixture)
			v[4] = XXH3_64bits(buf + sf__sources_offset(B, S, w, cfg->doc_starts),
					   B * 4);
	}
	return XXH3_64bits(v, sizeof(v));
}

/* The job's YAML with "$D" and "$L" replaced. */
static void job_yaml(const char *yaml, const char *data, const char *llama3, char *out, size_t cap)
{
	size_t n = 0;

	for (const char *c = yaml; *c; c++) {
		const char *put = c[0] != '$'	? NULL
				  : c[1] == 'D' ? data
				  : c[1] == 'L' ? llama3
						: NULL;
		const size_t len = put ? strlen(put) : 1;

		H_CHECK(n + len < cap, "job file too long");
		memcpy(out + n, put ? put : c, len);
		n += len;
		c += put != NULL;
	}
	out[n] = 0;
}

/*
 * Llama 3's tokenizer.model, from the llama-models package in the virtual environment
 * that scripts/deps makes ($SHMFEED_VENV, else ${XDG_CACHE_HOME:-~/.cache}/shmfeed/
 * venv-torch, where the other tests look; CI has it), or NULL.
 */
static char *llama3_file(void)
{
	const char *venv = getenv("SHMFEED_VENV"), *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char pattern[PATH_MAX];
	glob_t g;
	char *found = NULL;

	if (venv && venv[0])
		snprintf(pattern, sizeof(pattern), "%s", venv);
	else if (xdg && xdg[0])
		snprintf(pattern, sizeof(pattern), "%s/shmfeed/venv-torch", xdg);
	else
		snprintf(pattern, sizeof(pattern), "%s/.cache/shmfeed/venv-torch",
			 home ? home : "/root");
	strncat(pattern, "/lib/python3*/site-packages/llama_models/llama3/tokenizer.model",
		sizeof(pattern) - strlen(pattern) - 1);
	if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc)
		found = strdup(g.gl_pathv[0]);
	globfree(&g);
	return found;
}

static uint64_t job_hash(const struct job *j, const char *data, const char *llama3)
{
	char yaml[4096];
	struct sf_config cfg;
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_geometry g;
	struct sf_err e = {0};
	unsigned char *buf;
	uint64_t h = 0, ends = 0;

	job_yaml(j->yaml, data, llama3, yaml, sizeof(yaml));
	H_CHECK(sf__config_load_string("stream.yaml", yaml, strlen(yaml), &cfg, &e) == 0, "%s: %s",
		j->name, e.msg);
	buf = h_builder(&cfg, &ds, &b);
	H_CHECK(sf__dataset_geometry(ds, &cfg, &g, &e) == 0, "%s", e.msg);
	for (uint64_t i = 0; i < STEPS + (j->far ? 4 : 0); i++) {
		const uint64_t step = i < STEPS ? i : j->far + i - STEPS;

		for (uint32_t r = 0; r < cfg.world_size; r++) {
			uint32_t len;
			uint64_t first, v[2];

			H_CHECK(sf__builder_fill(b, r, step, buf, &len, &first, &e) == 0, "%s: %s",
				j->name, e.msg);
			ends += !len;
			v[0] = h;
			v[1] = batch_hash(&cfg, &g, buf, len, first);
			h = XXH3_64bits(v, sizeof(v));
		}
	}
	/* A finite job here must reach its end within the steps hashed, and an open one must
	 * not: the end is part of what is pinned. */
	H_CHECK(j->far ? ends == 0 : ends > 0, "%s: %llu batches past the end", j->name,
		(unsigned long long)ends);
	free(buf);
	sf__builder_free(b);
	sf__dataset_close(ds);
	sf__config_free(&cfg);
	return h;
}

int main(int argc, char **argv)
{
	char data[PATH_MAX], *dir, *llama3 = llama3_file();
	uint64_t got[N_JOBS] = {0};
	bool ran[N_JOBS] = {false};
	/* The table of this version: the last, whose version must be this one. */
	const __typeof__(pins[0]) *now =
		pins[N_PINS - 1].version == SF_STREAM_VERSION ? &pins[N_PINS - 1] : NULL;
	int changed = 0, fails = 0, skipped = 0;

	if (argc < 2 || !realpath(argv[1], data) || access(data, R_OK) != 0) {
		printf("skip: no shared test data (../shared/data)\n");
		return 77;
	}
	dir = h_tmpdir();
	H_CHECK(chdir(dir) == 0, "chdir %s", dir);
	write_tokens();
	write_text();
	printf("stream version %d\n", SF_STREAM_VERSION);
	for (size_t i = 0; i < N_JOBS; i++) {
		if (strstr(jobs[i].yaml, "$L") && !llama3) {
			printf("skip: %s: no llama-models in the virtual environment (scripts/deps "
			       "installs it)\n",
			       jobs[i].name);
			skipped++;
			continue;
		}
		got[i] = job_hash(&jobs[i], data, llama3);
		ran[i] = true;
		if (!now)
			printf("new: %s: 0x%016llx\n", jobs[i].name, (unsigned long long)got[i]);
		else if (got[i] == now->hash[i])
			printf("ok: %s: 0x%016llx\n", jobs[i].name, (unsigned long long)got[i]);
		else
			printf("CHANGED: %s: 0x%016llx, pinned 0x%016llx\n", jobs[i].name,
			       (unsigned long long)got[i], (unsigned long long)now->hash[i]);
		changed += now && got[i] != now->hash[i];
	}
	H_CHECK(chdir("/") == 0, "chdir /");
	h_rmtree(dir);
	free(dir);
	free(llama3);
	if (changed)
		printf("shmfeed delivers other samples than it did at stream version %d: if that "
		       "is intended, raise SF_STREAM_VERSION in common/config.h and add the new "
		       "version's table (the hashes above) to pins[] in %s, leaving the tables of "
		       "earlier versions as they are\n",
		       SF_STREAM_VERSION, __FILE__);
	if (!now)
		printf("no table of stream version %d in pins[] of %s: add it (the hashes above), "
		       "leaving the tables of earlier versions as they are\n",
		       SF_STREAM_VERSION, __FILE__);
	/* Each earlier version's stream differs from this one's in some job; where it
	 * differs in none that ran, a skipped one may be the one that moved. */
	for (size_t v = 0; v < N_PINS; v++) {
		bool differs = false;

		if (&pins[v] == now)
			continue;
		for (size_t i = 0; i < N_JOBS; i++)
			differs |= ran[i] && got[i] != pins[v].hash[i];
		if (!differs && skipped) {
			printf("skip: stream version %d delivers what version %d did in every job "
			       "run: the skipped ones tell whether it was raised for a change\n",
			       SF_STREAM_VERSION, pins[v].version);
		} else if (!differs) {
			printf("stream version %d delivers what version %d did in every job: a "
			       "version is raised only for a change of the stream (it refuses "
			       "every "
			       "resume state of the versions before)\n",
			       SF_STREAM_VERSION, pins[v].version);
			fails++;
		}
	}
	if (changed || !now || fails)
		return 1;
	/* A job not run is no pass: skipped, seen as such. */
	return skipped ? 77 : 0;
}
