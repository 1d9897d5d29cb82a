/*
 * The JSONL format: one JSON object per line, its document the string in the source's
 * text field ("text" by default). A line that is not such an object is a bad record:
 * it stops the job, or with on_error: skip is passed over and counted, the message
 * naming the file, line and column.
 */
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/json.h"
#include "producer/source/text_file.h"

static const char *jsonl_doc_end(const char *sep, uint32_t sep_len, const char *p, const char *end,
				 const char **ret_next)
{
	const char *q = memchr(p, '\n', (size_t)(end - p));

	(void)sep;
	(void)sep_len;
	*ret_next = q ? q + 1 : end;
	return q ? q : end;
}

/*
 * The bad record [p, p + n): stops the walk, or is skipped and counted. One that holds a
 * NUL byte (which JSON never holds raw) may be the zeros past a truncation: a file that
 * changed is named as such, never skipped.
 */
static int bad_record(struct sf_doc_walk *w, const char *p, size_t n, struct sf_err *e,
		      const char *fmt_what, const char *detail, size_t column)
{
	struct sf_err why;
	int r;

	if (w->src->on_error != SF_ON_ERROR_SKIP || memchr(p, 0, n)) {
		r = sf__doc_walk_changed(w, e);
		if (r < 0)
			return r;
	}
	if (column)
		sf__err(&why, SF_E_SOURCE, "%s:%llu: column %zu: %s%s", w->file->path,
			(unsigned long long)w->line, column, fmt_what, detail);
	else
		sf__err(&why, SF_E_SOURCE, "%s:%llu: %s%s", w->file->path,
			(unsigned long long)w->line, fmt_what, detail);
	if (w->src->on_error != SF_ON_ERROR_SKIP) {
		*e = why;
		return SF_E_SOURCE;
	}
	if (w->skipped++ == 0)
		w->why = why;
	return 0;
}

static int jsonl_decode(struct sf_doc_walk *w, const char *p, size_t n, const char **ret_doc,
			size_t *ret_len, struct sf_err *e)
{
	const char *field = w->src->text_field ? w->src->text_field : "text";
	const char *what;
	size_t i = 0, at, len;
	int r;

	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
		i++;
	if (i == n) {
		w->line++;
		return 0; /* blank lines separate nothing */
	}
	r = sf__json_field(p, n, field, w->scratch, &len, &at, &what);
	if (r == SF_JSON_OK) {
		w->line++;
		*ret_doc = w->scratch;
		*ret_len = len;
		return 1;
	}
	if (r == SF_JSON_INVALID && n - i >= 3 && !memcmp(p + i, "\xef\xbb\xbf", 3))
		r = bad_record(w, p, n, e,
			       "a UTF-8 byte order mark (EF BB BF), which JSON does not allow: "
			       "remove it",
			       "", i + 1);
	else if (r == SF_JSON_INVALID && n - i >= 4 && !memcmp(p + i, "\xff\xfe\0\0", 4))
		r = bad_record(w, p, n, e, "a UTF-32 byte order mark (FF FE 00 00): ",
			       "the file is UTF-32; JSONL is UTF-8 (iconv -f UTF-32 -t UTF-8)",
			       i + 1);
	else if (r == SF_JSON_INVALID && n - i >= 2 &&
		 (!memcmp(p + i, "\xff\xfe", 2) || !memcmp(p + i, "\xfe\xff", 2)))
		r = bad_record(w, p, n, e,
			       p[i] == '\xff' ? "a UTF-16 byte order mark (FF FE): "
					      : "a UTF-16 byte order mark (FE FF): ",
			       "the file is UTF-16; JSONL is UTF-8 (iconv -f UTF-16 -t UTF-8)",
			       i + 1);
	else if (r == SF_JSON_INVALID)
		r = bad_record(w, p, n, e, "invalid JSON: ", what, at + 1);
	else if (r == SF_JSON_NOT_OBJECT)
		r = bad_record(w, p, n, e, "not a JSON object", "", 0);
	else if (r == SF_JSON_NO_FIELD)
		r = bad_record(w, p, n, e, "no field ", field, 0);
	else
		r = bad_record(w, p, n, e, "not a string: field ", field, 0);
	w->line++;
	return r;
}

const struct sf_text_format sf__format_jsonl = {
	.name = "jsonl",
	.doc_end = jsonl_doc_end,
	.decode = jsonl_decode,
};
