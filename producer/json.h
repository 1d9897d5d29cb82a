/*
 * A small strict JSON reader for one line of a .jsonl source: it validates the whole
 * value (RFC 8259: no trailing commas, no comments, no leading zeros, no control
 * characters in strings, surrogates paired) and extracts one top-level string field,
 * unescaped to UTF-8. It allocates nothing: the caller supplies the output buffer.
 */
#ifndef SF_PRODUCER_JSON_H
#define SF_PRODUCER_JSON_H

#include <stddef.h>

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

#endif
