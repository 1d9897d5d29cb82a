/*
 * A small strict JSON reader (RFC 8259: no trailing commas, no comments, no leading
 * zeros, no control characters in strings, surrogates paired), in two forms:
 *  - sf__json_field() validates one line of a .jsonl source and extracts one top-level
 *    string field, unescaped to UTF-8. It allocates nothing: the caller supplies the
 *    output buffer.
 *  - sf__json_tree_parse() builds a read-only tree of a whole document (a tokenizer.json),
 *    every string unescaped and NUL-terminated, for loaders that walk a configuration.
 */
#ifndef SF_PRODUCER_JSON_H
#define SF_PRODUCER_JSON_H

#include <stddef.h>
#include <stdint.h>

/* The result of sf__json_field(). */
#define SF_JSON_OK	   0
#define SF_JSON_INVALID	   1 /* not valid JSON; *ret_error_at and *ret_what say why */
#define SF_JSON_NOT_OBJECT 2 /* valid, but not an object */
#define SF_JSON_NO_FIELD   3 /* valid object without the field */
#define SF_JSON_NOT_STRING 4 /* the field holds something else than a string */

/*
 * sf__json_field - parse `len` bytes holding exactly one JSON value (surrounding
 * whitespace allowed) and, when it is an object with a string member `field`, store its
 * unescaped bytes in `out` (which must hold `len` bytes: unescaping never grows a string)
 * and their count in *ret_len. A repeated member: the last one wins, as in Python.
 * On SF_JSON_INVALID, *ret_error_at is the byte offset of the problem and *ret_what a
 * static description.
 */
int sf__json_field(const char *text, size_t len, const char *field, char *out, size_t *ret_len,
		   size_t *ret_error_at, const char **ret_what);

/* The node types of a parsed document. */
#define SF_JSON_NULL   0
#define SF_JSON_FALSE  1
#define SF_JSON_TRUE   2
#define SF_JSON_NUMBER 3
#define SF_JSON_STRING 4
#define SF_JSON_ARRAY  5
#define SF_JSON_OBJECT 6

struct sf_json_doc;

/*
 * One value of a document. Strings (and numbers, as their source text) are `len` bytes at
 * sf__json_tree_str(); an array's or object's `len` children are consecutive nodes, an object's
 * each carrying its member name. `at` is the value's byte offset in the source text.
 */
struct sf_json_node {
	uint32_t type;
	uint32_t len;
	uint32_t off; /* string or number: offset of its bytes; container: first child */
	uint32_t key; /* member of an object: offset of its name's bytes */
	uint32_t key_len;
	uint32_t at;
};

/*
 * sf__json_tree_parse - parse `len` bytes (at most 2 GiB) holding exactly one JSON value into a
 * tree; free it with sf__json_tree_free(). Returns SF_JSON_OK, SF_JSON_INVALID (with
 * *ret_error_at and *ret_what as for sf__json_field()), or -ENOMEM.
 */
int sf__json_tree_parse(const char *text, size_t len, struct sf_json_doc **ret_doc,
			size_t *ret_error_at, const char **ret_what);

/* sf__json_tree_free - free a document; accepts NULL. Its nodes and strings go with it. */
void sf__json_tree_free(struct sf_json_doc *doc);

/* sf__json_tree_root - the top-level value. */
const struct sf_json_node *sf__json_tree_root(const struct sf_json_doc *doc);

/* sf__json_tree_child - child i (< node->len) of an array or object. */
const struct sf_json_node *sf__json_tree_child(const struct sf_json_doc *doc,
					       const struct sf_json_node *node, uint32_t i);

/*
 * sf__json_tree_get - the member `name` of an object (the last one when repeated, as in
 * Python), or NULL when `node` is not an object or has no such member.
 */
const struct sf_json_node *sf__json_tree_get(const struct sf_json_doc *doc,
					     const struct sf_json_node *node, const char *name);

/* sf__json_tree_str - a string's unescaped bytes, NUL-terminated (a number's text). */
const char *sf__json_tree_str(const struct sf_json_doc *doc, const struct sf_json_node *node);

/* sf__json_tree_key - the unescaped, NUL-terminated name of an object's member. */
const char *sf__json_tree_key(const struct sf_json_doc *doc, const struct sf_json_node *node);

#endif
