/*
 * Fuzz target of a JSONL line, the reader every JSONL document goes through: the input's
 * first byte picks the text field, the rest is the line. sf__json_field() (which
 * validates and extracts without building anything) is checked against the other reader
 * of producer/json.c, sf__json_tree_parse(), which builds the whole tree: both must agree
 * on whether the line is JSON, on whether it is an object, on whether the field is there
 * and a string, and on its unescaped bytes (the last of repeated members). The field's
 * output buffer is exactly as long as the line, so that a write past what the header
 * promises is a sanitizer report.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the files and
 * directories given as arguments (the committed corpus tests/fuzz/corpus/jsonl/ in CI).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *line, size_t n)
{
	fprintf(stderr, "fuzz_jsonl: %s, line of %zu bytes: %.*s\n", what, n,
		(int)(n > 200 ? 200 : n), line);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* By the first byte modulo 6 ("0" to "5" in the corpus): "text" and "content" as jobs
	 * name them, and names a config may give. */
	static const char *const fields[] = {"text", "content",		  "t",
					     "",     "\xc3\xa9t\xc3\xa9", "a\"b"};
	const char *field, *line, *what = NULL, *twhat = NULL;
	size_t n, len = 0, at = 0, tat = 0;
	struct sf_json_doc *doc = NULL;
	char *out;
	int rf, rt;

	if (size == 0)
		return 0;
	field = fields[data[0] % (sizeof(fields) / sizeof(fields[0]))];
	n = size - 1;
	/* Copies of exactly their length, so that a read past either end is caught. */
	line = n ? memcpy(malloc(n), data + 1, n) : NULL;
	out = malloc(n ? n : 1);
	if ((n && !line) || !out)
		abort();
	rf = sf__json_field(n ? line : "", n, field, out, &len, &at, &what);
	rt = sf__json_tree_parse(n ? line : "", n, &doc, &tat, &twhat);
	if (rt < 0)
		goto out; /* out of memory: nothing to compare */
	if ((rf == SF_JSON_INVALID) != (rt == SF_JSON_INVALID))
		fail(rf == SF_JSON_INVALID ? "the field reader refuses what the tree reads"
					   : "the tree refuses what the field reader reads",
		     line, n);
	if (rf == SF_JSON_INVALID) {
		if (at > n || !what || !*what)
			fail("a refusal without its place or reason", line, n);
	} else {
		const struct sf_json_node *root = sf__json_tree_root(doc), *m;

		if ((rf == SF_JSON_NOT_OBJECT) != (root->type != SF_JSON_OBJECT))
			fail("the readers disagree on whether the line is an object", line, n);
		m = sf__json_tree_get(doc, root, field);
		if (rf == SF_JSON_NO_FIELD && m)
			fail("the field reader misses a member the tree has", line, n);
		if (rf == SF_JSON_NOT_STRING && (!m || m->type == SF_JSON_STRING))
			fail("the field reader says 'not a string' of a string", line, n);
		if (rf == SF_JSON_OK) {
			if (!m || m->type != SF_JSON_STRING)
				fail("the field reader finds a string the tree does not", line, n);
			if (len > n)
				fail("the field is longer than the line", line, n);
			if (m->len != len || memcmp(sf__json_tree_str(doc, m), out, len))
				fail("the readers unescape the field differently", line, n);
		}
		if (rf != SF_JSON_OK && rf != SF_JSON_NOT_OBJECT && rf != SF_JSON_NO_FIELD &&
		    rf != SF_JSON_NOT_STRING)
			fail("an unknown result", line, n);
	}
out:
	sf__json_tree_free(doc);
	free(out);
	free((void *)line);
	return 0;
}
