/*
 * Writing a JSON string: what the control replies, the stats and a tokenize part's
 * manifest share (common/control.c), apart from either JSON reader.
 */
#ifndef SF_COMMON_JSON_ESCAPE_H
#define SF_COMMON_JSON_ESCAPE_H

#include <stddef.h>

/*
 * sf__json_escape - append `s` as a JSON string (with quotes) at buf[*pos], never past
 * len-1; *pos advances by what was needed, so the caller detects truncation when
 * *pos >= len.
 */
void sf__json_escape(char *buf, size_t len, size_t *pos, const char *s);

#endif
