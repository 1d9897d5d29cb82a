/*
 * Unit tests of the strict JSON field reader: unescaping (\uXXXX with surrogate pairs,
 * UTF-8 passed through), the last of repeated members, and rejection of what RFC 8259
 * forbids, each with the offset of the problem.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "producer/json.h"

static int field(const char *json, const char *name, char *out, size_t *len, size_t *at)
{
	const char *what = NULL;

	return sf__json_field(json, strlen(json), name, out, len, at, &what);
}

Test(json, unescapes_the_field)
{
	char out[256];
	size_t len, at;

	cr_assert_eq(
		field("{\"a\":1,\"text\":\"x\\ny\\t\\\"q\\\" \\\\ \\/\"}", "text", out, &len, &at),
		SF_JSON_OK);
	cr_expect_eq(len, 11);
	cr_expect(!memcmp(out, "x\ny\t\"q\" \\ /", len));
	cr_assert_eq(field(" {\"text\" : \"\\u00e9\\u4e2d\\ud83d\\ude00\"} \r\n", "text", out, &len,
			   &at),
		     SF_JSON_OK);
	cr_expect_eq(len, 2 + 3 + 4);
	cr_expect(!memcmp(out, "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", len));
	cr_assert_eq(field("{\"text\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}", "text", out, &len, &at),
		     SF_JSON_OK);
	cr_expect_eq(len, 10);
	cr_assert_eq(field("{\"text\":\"a\",\"nested\":{\"text\":\"b\"},\"text\":\"c\"}", "text",
			   out, &len, &at),
		     SF_JSON_OK);
	cr_expect(len == 1 && out[0] == 'c', "the last top-level member wins");
	cr_assert_eq(field("{\"text\":\"\\u0000\"}", "text", out, &len, &at), SF_JSON_OK);
	cr_expect(len == 1 && out[0] == 0);
}

Test(json, reports_shape_problems)
{
	char out[64];
	size_t len, at;

	cr_expect_eq(field("[1,2]", "text", out, &len, &at), SF_JSON_NOT_OBJECT);
	cr_expect_eq(field("{\"body\":\"x\"}", "text", out, &len, &at), SF_JSON_NO_FIELD);
	cr_expect_eq(field("{\"text\":[\"x\"]}", "text", out, &len, &at), SF_JSON_NOT_STRING);
	cr_expect_eq(field("{\"te\\u0078\":\"x\"}", "text", out, &len, &at), SF_JSON_NO_FIELD);
}

/* A name is its value, escaped or not: Python's json.dumps escapes every non-ASCII
 * character of a key ({"\u5185\u5bb9": ...} for a field named 内容). */
Test(json, escaped_names_match_their_value)
{
	char out[64];
	size_t len, at;

	cr_assert_eq(field("{\"te\\u0078t\":\"x\"}", "text", out, &len, &at), SF_JSON_OK);
	cr_expect(len == 1 && out[0] == 'x');
	cr_assert_eq(field("{\"\\u5185\\u5bb9\":\"yes\",\"text\":\"no\"}",
			   "\xe5\x86\x85\xe5\xae\xb9", out, &len, &at),
		     SF_JSON_OK);
	cr_expect(len == 3 && !memcmp(out, "yes", 3));
	/* Same decoded length, other bytes; and a longer escaped name. */
	cr_expect_eq(field("{\"te\\u0079t\":\"x\"}", "text", out, &len, &at), SF_JSON_NO_FIELD);
	cr_expect_eq(field("{\"text\\u0020\":\"x\"}", "text", out, &len, &at), SF_JSON_NO_FIELD);
	/* The value found first stays when a later escaped name does not match. */
	cr_assert_eq(field("{\"text\":\"kept\",\"t\\u0065xu\":\"x\"}", "text", out, &len, &at),
		     SF_JSON_OK);
	cr_expect(len == 4 && !memcmp(out, "kept", 4));
}

Test(json, rejects_invalid_json_with_position)
{
	static const struct {
		const char *json;
		size_t at;
	} bad[] = {
		{"{\"text\":\"x\",}", 12},	    /* trailing comma */
		{"{\"text\":\"x\"", 11},	    /* unterminated object */
		{"{\"text\":\"x}", 11},		    /* unterminated string */
		{"{\"text\":01}", 9},		    /* leading zero: 1 is unexpected */
		{"{\"text\":\"\\ud83d\"}", 15},	    /* lone high surrogate */
		{"{\"text\":\"\\ude00\"}", 15},	    /* lone low surrogate */
		{"{\"text\":\"\\x\"}", 10},	    /* bad escape */
		{"{\"text\":\"a\tb\"}", 10},	    /* raw control character */
		{"{\"text\":\"\xc3\x28\"}", 9},	    /* invalid UTF-8 */
		{"{\"text\":\"\xed\xa0\x80\"}", 9}, /* UTF-8 encoded surrogate */
		{"{\"a\":tru}", 5},		    /* bad literal */
		{"{\"a\":1} x", 8},		    /* trailing garbage */
		{"{\"a\":-}", 6},		    /* bad number */
		{"{\"a\":1.}", 7},		    /* bad number */
		{"{a:1}", 1},			    /* unquoted name */
		{"", 0},			    /* nothing */
	};
	char out[64];
	size_t len, at;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(field(bad[i].json, "text", out, &len, &at), SF_JSON_INVALID,
			     "case %zu", i);
		cr_expect_eq(at, bad[i].at, "case %zu: error at %zu", i, at);
	}
}

Test(json, depth_is_limited)
{
	char deep[2100];
	char out[8];
	size_t len, at, n = 0;

	n += (size_t)sprintf(deep, "{\"a\":");
	for (int i = 0; i < 1000; i++)
		deep[n++] = '[';
	for (int i = 0; i < 1000; i++)
		deep[n++] = ']';
	deep[n++] = '}';
	deep[n] = 0;
	cr_expect_eq(field(deep, "text", out, &len, &at), SF_JSON_INVALID);
}

Test(json_tree, builds_the_document)
{
	const char *json = "{\"vocab\": {\"a\\u00e9\": 0, \"b\": 1}, \"empty\": [], \"none\": {},"
			   " \"list\": [[\"x\", \"y\"], 12, -3.5e2, true, false, null],"
			   " \"vocab\": {\"last\": 7}}";
	const struct sf_json_node *root, *v, *list, *pair;
	struct sf_json_doc *doc = NULL;
	const char *what = NULL;
	size_t at = 0;

	cr_assert_eq(sf__json_tree_parse(json, strlen(json), &doc, &at, &what), SF_JSON_OK,
		     "%s at %zu", what, at);
	root = sf__json_tree_root(doc);
	cr_assert_eq(root->type, SF_JSON_OBJECT);
	cr_expect_eq(root->len, 5);
	/* A repeated member: the last one wins. */
	v = sf__json_tree_get(doc, root, "vocab");
	cr_assert(v && v->type == SF_JSON_OBJECT && v->len == 1);
	cr_expect_str_eq(sf__json_tree_key(doc, sf__json_tree_child(doc, v, 0)), "last");
	v = sf__json_tree_child(doc, root, 0);
	cr_expect_str_eq(sf__json_tree_key(doc, sf__json_tree_child(doc, v, 0)), "a\xc3\xa9");
	cr_expect_str_eq(sf__json_tree_str(doc, sf__json_tree_child(doc, v, 1)), "1");
	cr_expect_eq(sf__json_tree_get(doc, root, "empty")->len, 0);
	cr_expect_eq(sf__json_tree_get(doc, root, "none")->type, SF_JSON_OBJECT);
	cr_expect_null(sf__json_tree_get(doc, root, "missing"));
	list = sf__json_tree_get(doc, root, "list");
	cr_assert(list && list->type == SF_JSON_ARRAY && list->len == 6);
	pair = sf__json_tree_child(doc, list, 0);
	cr_assert(pair->type == SF_JSON_ARRAY && pair->len == 2);
	cr_expect_str_eq(sf__json_tree_str(doc, sf__json_tree_child(doc, pair, 1)), "y");
	cr_expect_str_eq(sf__json_tree_str(doc, sf__json_tree_child(doc, list, 2)), "-3.5e2");
	cr_expect_eq(sf__json_tree_child(doc, list, 3)->type, SF_JSON_TRUE);
	cr_expect_eq(sf__json_tree_child(doc, list, 4)->type, SF_JSON_FALSE);
	cr_expect_eq(sf__json_tree_child(doc, list, 5)->type, SF_JSON_NULL);
	sf__json_tree_free(doc);
}

Test(json_tree, empty_containers_and_errors)
{
	static const char *const bad[][2] = {
		{"{\"a\": [1,]}", "9"},
		{"{\"a\" 1}", "5"},
		{"[\"\\ud800\"]", "8"},
		{"{} x", "3"},
	};
	struct sf_json_doc *doc = NULL;
	const char *what = NULL;
	size_t at = 0, i;

	cr_assert_eq(sf__json_tree_parse("[]", 2, &doc, &at, &what), SF_JSON_OK);
	cr_expect_eq(sf__json_tree_root(doc)->len, 0);
	sf__json_tree_free(doc);
	cr_assert_eq(sf__json_tree_parse("{\"a\": {}, \"b\": []}", 18, &doc, &at, &what),
		     SF_JSON_OK);
	sf__json_tree_free(doc);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[8];

		cr_expect_eq(sf__json_tree_parse(bad[i][0], strlen(bad[i][0]), &doc, &at, &what),
			     SF_JSON_INVALID, "%s", bad[i][0]);
		snprintf(want, sizeof(want), "%zu", at);
		cr_expect_str_eq(want, bad[i][1], "%s: error at %zu (%s)", bad[i][0], at, what);
	}
}

Test(json_tree, long_escaped_strings)
{
	/* 2,000 escapes in one string: the room reserved for it must be its unescaped
	 * length (4,000 bytes), not its count of unescaped bytes (none). */
	size_t n = 2000, i, at = 0;
	char *json = malloc(6 * n + 16), *p = json;
	struct sf_json_doc *doc = NULL;
	const struct sf_json_node *s;
	const char *what = NULL, *v;

	p += sprintf(p, "[\"");
	for (i = 0; i < n; i++)
		p += sprintf(p, "\\u00e9");
	p += sprintf(p, "\", \"\\n\\t\"]");
	cr_assert_eq(sf__json_tree_parse(json, (size_t)(p - json), &doc, &at, &what), SF_JSON_OK);
	s = sf__json_tree_child(doc, sf__json_tree_root(doc), 0);
	cr_assert_eq(s->len, 2 * n);
	v = sf__json_tree_str(doc, s);
	for (i = 0; i < n; i++)
		cr_assert(v[2 * i] == '\xc3' && v[2 * i + 1] == '\xa9');
	cr_expect_str_eq(
		sf__json_tree_str(doc, sf__json_tree_child(doc, sf__json_tree_root(doc), 1)),
		"\n\t");
	sf__json_tree_free(doc);
	free(json);
}
