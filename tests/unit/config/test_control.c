/*
 * Unit tests of control messages: every request form, each way a request is rejected,
 * and the JSON reader's limits (depth, token count, UTF-8, escapes, numbers).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/control.h"

static struct sf_err err;

static int parse(const char *s, struct sf_ctl_request *req)
{
	memset(&err, 0, sizeof(err));
	return sf__ctl_parse_request(s, strlen(s), req, &err);
}

static void rejects(const char *s, const char *what)
{
	struct sf_ctl_request req;

	cr_expect_eq(parse(s, &req), SF_E_PROTOCOL, "accepted %s", s);
	cr_expect(strstr(err.msg, what), "'%s': message '%s' lacks '%s'", s, err.msg, what);
}

Test(control, every_request_parses)
{
	static const char *const ops[] = {"hello", "status", "stats", "pause", "resume", "stop"};
	struct sf_ctl_request req;
	char buf[128];

	for (uint32_t i = 0; i < 6; i++) {
		snprintf(buf, sizeof(buf), " {\"op\" : \"%s\", \"v\":1}\n", ops[i]);
		cr_assert_eq(parse(buf, &req), 0, "%s: %s", buf, err.msg);
		cr_expect_str_eq(sf__ctl_op_name(req.op), ops[i]);
		cr_expect_eq(req.has_id, 0);
	}
	/* The largest step any geometry has: 4096 slots x (2^48 - 1) laps, minus one. */
	cr_assert_eq(parse("{\"v\":1,\"op\":\"seek\",\"rank\":3,\"step\":1152921504606842879,"
			   "\"id\":9}",
			   &req),
		     0, "%s", err.msg);
	cr_expect_eq(req.op, SF_CTL_SEEK);
	cr_expect_eq(req.rank, 3);
	cr_expect_eq(req.step, SF_STEP_MAX - 1);
	cr_expect_eq(req.has_id, 1);
	cr_expect_eq(req.id, 9);
}

/* A message is not NUL-terminated (a ZeroMQ frame): a \u escape is decoded within it.
 * Here the message ends where an unreadable page begins (sscanf() read past it). */
Test(control, a_unicode_escape_reads_nothing_past_the_message)
{
	static const char msg[] = "{\"v\":1,\"op\":\"\\u0073top\"}";
	const long page = sysconf(_SC_PAGESIZE);
	char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *at = map + page - (sizeof(msg) - 1);
	struct sf_ctl_request req;

	cr_assert(map != MAP_FAILED);
	cr_assert_eq(mprotect(map + page, page, PROT_NONE), 0);
	memcpy(at, msg, sizeof(msg) - 1);
	memset(&err, 0, sizeof(err));
	cr_assert_eq(sf__ctl_parse_request(at, sizeof(msg) - 1, &req, &err), 0, "%s", err.msg);
	cr_expect_eq(req.op, SF_CTL_STOP);
	munmap(map, 2 * page);
}

/* An unknown key is quoted up to 32 bytes, never cutting a character in two. */
Test(control, an_unknown_key_is_quoted_whole_characters)
{
	struct sf_ctl_request req;

	cr_assert_eq(parse("{\"v\":1,\"op\":\"hello\",\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\u00e9\":1}",
			   &req),
		     SF_E_PROTOCOL);
	cr_assert_eq(parse("{\"v\":1,\"op\":\"hello\",\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9\":1}",
			   &req),
		     SF_E_PROTOCOL);
	cr_expect(strstr(err.msg, "unknown key 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';"), "%s", err.msg);
}

Test(control, formatted_requests_parse_back)
{
	struct sf_ctl_request in = {.op = SF_CTL_SEEK, .rank = 2, .step = 77, .id = 5, .has_id = 1};
	struct sf_ctl_request out;
	char buf[128];

	cr_assert_gt(sf__ctl_format_request(&in, buf, sizeof(buf)), 0);
	cr_assert_eq(parse(buf, &out), 0, "%s", err.msg);
	cr_expect_eq(out.op, in.op);
	cr_expect_eq(out.rank, in.rank);
	cr_expect_eq(out.step, in.step);
	cr_expect_eq(out.id, in.id);
	cr_expect_eq(sf__ctl_format_request(&in, buf, 10), -ENOSPC);
}

Test(control, malformed_requests_are_rejected)
{
	char big[SF_CTL_MAX_REQUEST + 8];

	rejects("", "unexpected end");
	rejects("{", "expected a string key");
	rejects("{\"v\":1,\"op\":\"stats\"", "expected ',' or '}'");
	rejects("\"status\"", "must be a JSON object");
	rejects("{\"v\":1,\"op\":\"stats\"}x", "trailing bytes");
	/* A CLI of another build: told whose protocol this is and what to use. */
	rejects("{\"v\":2,\"op\":\"stats\"}",
		"unsupported protocol version: \"v\" must be 1 (this job runs "
		"shmfeed " SF_VERSION_STRING ": control it with the shmfeed that started it)");
	rejects("{\"v\":\"1\",\"op\":\"stats\"}", "unsupported protocol version");
	rejects("{\"op\":\"stats\"}", "missing \"v\"");
	rejects("{\"v\":1}", "missing \"op\"");
	rejects("{\"v\":1,\"op\":5}", "\"op\" must be a short string");
	rejects("{\"v\":1,\"op\":\"reboot\"}", "unknown op 'reboot'");
	/* A NUL escape cut the op: "resume\u0000zz" resumed, "stop\u0000" stopped. */
	rejects("{\"v\":1,\"op\":\"resume\\u0000zz\"}", "\"op\" must be a short string");
	rejects("{\"v\":1,\"op\":\"stop\\u0000\"}", "\"op\" must be a short string");
	rejects("{\"v\":1,\"op\":\"stats\",\"x\":1}", "unknown key 'x'");
	rejects("{\"v\":1,\"v\":1,\"op\":\"stats\"}", "duplicate key 'v'");
	rejects("{\"v\":1,\"op\":\"seek\",\"step\":1}", "seek needs");
	rejects("{\"v\":1,\"op\":\"stats\",\"step\":1}", "belong to seek only");
	rejects("{\"v\":1,\"op\":\"seek\",\"rank\":1.5,\"step\":1}", "\"rank\" must be");
	rejects("{\"v\":1,\"op\":\"seek\",\"rank\":1,\"step\":18446744073709551616}",
		"\"step\" must be");
	/* Steps that would wrap the slot words' 48-bit lap in every geometry. */
	rejects("{\"v\":1,\"op\":\"seek\",\"rank\":1,\"step\":18446744073709551615}",
		"\"step\" must be an unsigned integer below 1152921504606842880");
	rejects("{\"v\":1,\"op\":\"seek\",\"rank\":1,\"step\":1152921504606842880}",
		"\"step\" must be");
	rejects("{\"v\":1,\"op\":\"stats\",\"id\":-1}", "\"id\" must be");
	memset(big, ' ', sizeof(big));
	memcpy(big, "{\"v\":1,\"op\":\"stats\"}", 20);
	{
		struct sf_ctl_request req;

		cr_expect_eq(sf__ctl_parse_request(big, sizeof(big), &req, &err), SF_E_PROTOCOL);
		cr_expect(strstr(err.msg, "limit"), "%s", err.msg);
	}
}

static int json(const char *s)
{
	struct sf_json_token tok[64];

	memset(&err, 0, sizeof(err));
	return sf__json_parse(s, strlen(s), tok, 64, &err);
}

Test(control, the_reader_is_strict)
{
	cr_expect_eq(json("{\"a\":[1,-2.5e3,true,false,null,\"x\\u00e9\\ud83d\\ude00\"]}"), 9);
	cr_expect_eq(json("\"\xc3\xa9\""), 1, "UTF-8 passes");
	cr_expect_eq(json("\"\xc3\""), SF_E_PROTOCOL, "truncated UTF-8");
	cr_expect_eq(json("\"\xc0\xaf\""), SF_E_PROTOCOL, "overlong UTF-8");
	cr_expect_eq(json("\"\xed\xa0\x80\""), SF_E_PROTOCOL, "encoded surrogate");
	cr_expect_eq(json("\"\\ud83d\""), SF_E_PROTOCOL, "lone high surrogate");
	cr_expect_eq(json("\"\\ude00\""), SF_E_PROTOCOL, "lone low surrogate");
	cr_expect_eq(json("\"a\tb\""), SF_E_PROTOCOL, "raw control character");
	cr_expect_eq(json("\"\\x\""), SF_E_PROTOCOL, "unknown escape");
	cr_expect_eq(json("01"), SF_E_PROTOCOL, "leading zero");
	cr_expect_eq(json("1."), SF_E_PROTOCOL);
	cr_expect_eq(json("1e"), SF_E_PROTOCOL);
	cr_expect_eq(json("-"), SF_E_PROTOCOL);
	cr_expect_eq(json("[1,]"), SF_E_PROTOCOL, "trailing comma");
	cr_expect_eq(json("{\"a\" 1}"), SF_E_PROTOCOL);
	cr_expect_eq(json("tru"), SF_E_PROTOCOL);
	cr_expect_eq(json("[[[[[[[[[1]]]]]]]]]"), SF_E_PROTOCOL, "8 levels is the limit");
	cr_expect_eq(json("[[[[[[[[1]]]]]]]]"), 9);
}

Test(control, the_reader_bounds_its_tokens)
{
	struct sf_json_token tok[4];

	cr_expect_eq(sf__json_parse("[1,2,3]", 7, tok, 4, &err), 4);
	cr_expect_eq(sf__json_parse("[1,2,3,4]", 9, tok, 4, &err), SF_E_PROTOCOL);
	cr_expect(strstr(err.msg, "more than 4 values"), "%s", err.msg);
}

Test(control, lookups_walk_objects_and_arrays)
{
	const char *s = "{\"a\":{\"x\":[1,2]},\"b\":[{\"c\":3},{\"c\":44}],\"s\":\"q\\\"\\n\"}";
	struct sf_json_token tok[32];
	char str[16];
	uint64_t v;
	int b, e1;

	cr_assert_gt(sf__json_parse(s, strlen(s), tok, 32, &err), 0);
	b = sf__json_get(s, tok, 0, "b");
	cr_assert_geq(b, 0);
	e1 = sf__json_at(tok, b, 1);
	cr_assert_eq(sf__json_u64(s, tok, sf__json_get(s, tok, e1, "c"), &v), 0);
	cr_expect_eq(v, 44);
	cr_expect_eq(sf__json_at(tok, b, 2), -1);
	cr_expect_eq(sf__json_get(s, tok, 0, "zz"), -1);
	cr_expect_eq(sf__json_get(s, tok, b, "c"), -1, "not an object");
	cr_assert_eq(sf__json_string(s, tok, sf__json_get(s, tok, 0, "s"), str, sizeof(str)), 3);
	cr_expect_str_eq(str, "q\"\n");
}

Test(control, escaping_round_trips)
{
	const char *raw = "a\"b\\c\n\x01";
	char buf[64], out[64];
	struct sf_json_token tok[2];
	size_t pos = 0;

	sf__json_escape(buf, sizeof(buf), &pos, raw);
	cr_assert_lt(pos, sizeof(buf));
	cr_assert_eq(sf__json_parse(buf, pos, tok, 2, &err), 1, "%s: %s", buf, err.msg);
	sf__json_string(buf, tok, 0, out, sizeof(out));
	cr_expect_str_eq(out, raw);
	pos = 0;
	sf__json_escape(buf, 4, &pos, raw);
	cr_expect_gt(pos, 4, "truncation is reported");
	cr_expect_eq(strlen(buf), 3);
}

/* A refused request still gives its "id", wherever it stands, for the error reply. */
Test(control, a_refused_request_gives_its_id)
{
	static const char *const refused[] = {
		"{\"v\":2,\"op\":\"status\",\"id\":9}",
		"{\"v\":1,\"op\":\"bogus\",\"id\":9}",
		"{\"op\":\"status\",\"id\":9}",
		"{\"id\":9,\"v\":1,\"op\":\"status\",\"rank\":1}",
	};
	struct sf_ctl_request req;

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		cr_assert_eq(parse(refused[i], &req), SF_E_PROTOCOL, "accepted %s", refused[i]);
		cr_expect(req.has_id && req.id == 9, "%s: no id", refused[i]);
	}
	cr_assert_eq(parse("{\"v\":1,\"op\":\"bogus\",\"id\":\"9\"}", &req), SF_E_PROTOCOL);
	cr_expect(!req.has_id);
	cr_assert_eq(parse("{\"v\":1,\"op\":\"bogus\"", &req), SF_E_PROTOCOL);
	cr_expect(!req.has_id);
}
