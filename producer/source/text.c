/*
 * The plain text format: documents separated by the source's separator (for example
 * "\n\n"), or one document per file when it has none. Plain text has no bad records, so
 * it needs no line numbers: counting the newlines of every document would cost a pass
 * over the text per tokenization.
 */
#include <string.h>

#include "producer/source/text_file.h"

static const char *text_doc_end(const char *sep, uint32_t sep_len, const char *p, const char *end,
				const char **ret_next)
{
	const char *q;

	if (!sep_len) {
		*ret_next = end;
		return end;
	}
	q = sf__find_sep(p, end, sep, sep_len);
	*ret_next = q ? q + sep_len : end;
	return q ? q : end;
}

static int text_decode(struct sf_doc_walk *w, const char *p, size_t n, const char **ret_doc,
		       size_t *ret_len, struct sf_err *e)
{
	(void)w;
	(void)e;
	if (n == 0)
		return 0; /* empty documents add nothing but a separator */
	*ret_doc = p;
	*ret_len = n;
	return 1;
}

const struct sf_text_format sf__format_text = {
	.name = "text",
	.doc_end = text_doc_end,
	.decode = text_decode,
};
