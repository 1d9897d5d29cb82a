/*
 * Fuzz target of control messages: any bytes go through the request validator and the
 * JSON reader. An accepted request must format back to one that parses identically; a
 * rejected one must say why; every token of a parsed value must lie inside the input and
 * every string must decode within bounds, or be refused for holding a \u0000.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the files and
 * directories given as arguments (the committed corpus tests/fuzz/corpus/control/ in CI).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sf_json_token tok[SF_JSON_MAX_TOKENS];

/* Whether the JSON string text s[0..n) holds the escape \u0000, which sf__json_string()
 * refuses (a NUL would cut the string). An escaped backslash is not an escape's start. */
static bool has_nul_escape(const char *s, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++) {
		if (s[i] != '\\')
			continue;
		if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4))
			return true;
		i++;
	}
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct sf_ctl_request req, back;
	struct sf_err e = {0};
	char out[256];
	int n;

	if (sf__ctl_parse_request(buf, size, &req, &e) == 0) {
		n = sf__ctl_format_request(&req, out, sizeof(out));
		if (n < 0 || sf__ctl_parse_request(out, (size_t)n, &back, &e) < 0 ||
		    back.op != req.op || back.rank != req.rank || back.step != req.step ||
		    back.id != req.id || back.has_id != req.has_id)
			abort();
	} else if (!e.msg[0]) {
		abort();
	}
	n = sf__json_parse(buf, size, tok, SF_JSON_MAX_TOKENS, &e);
	for (int i = 0; i < n; i++) {
		char s[64];

		if (tok[i].start > tok[i].end || tok[i].end > size || tok[i].next <= (uint32_t)i ||
		    tok[i].next > (uint32_t)n)
			abort();
		if (tok[i].type == SF_JSON_STRING) {
			int r = sf__json_string(buf, tok, i, s, sizeof(s));

			if (r < 0 ? !has_nul_escape(buf + tok[i].start, tok[i].end - tok[i].start)
				  : strlen(s) >= sizeof(s))
				abort();
		}
		if (tok[i].type == SF_JSON_OBJECT)
			sf__json_get(buf, tok, i, "op");
		if (tok[i].type == SF_JSON_ARRAY)
			sf__json_at(tok, i, tok[i].size ? tok[i].size - 1 : 0);
	}
	return 0;
}
