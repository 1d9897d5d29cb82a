/*
 * sf__pcre_compile() asks the PCRE2 it runs with for its Unicode version and refuses one
 * outside 14.0-16.0 (tokenizer-pretok tests the rule itself). This program stands in for
 * PCRE2's pcre2_config() (the linker binds the library code linked into it to this
 * definition before libpcre2's), reporting the version a test sets and passing every
 * other question on to the real one.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pcre2.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/tok_impl.h"

static const char *unicode = "14.0.0";

int pcre2_config_8(uint32_t what, void *where)
{
	int (*real)(uint32_t, void *);

	/* POSIX's way to take a function from dlsym() (ISO C has no object-to-function
	 * pointer conversion). */
	*(void **)&real = dlsym(RTLD_NEXT, "pcre2_config_8");
	if (what != PCRE2_CONFIG_UNICODE_VERSION)
		return real(what, where);
	if (where)
		strcpy(where, unicode);
	return (int)strlen(unicode) + 1;
}

static int compile_with(const char *version, struct sf_err *e)
{
	pcre2_code *re = NULL, *fast = NULL;
	int rc;

	unicode = version;
	rc = sf__pcre_compile("\\p{L}+|\\p{N}", &re, &fast, e);
	pcre2_code_free(re);
	pcre2_code_free(fast);
	return rc;
}

Test(pcre_unicode, a_pattern_is_refused_under_a_pcre2_of_another_unicode)
{
	struct sf_err e = {0};

	cr_expect_eq(compile_with("14.0.0", &e), 0, "%s", e.msg);
	cr_expect_eq(compile_with("16.0.0", &e), 0, "%s", e.msg);
	cr_expect_eq(compile_with("17.0.0", &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "this PCRE2 library's Unicode is 17.0.0"), "%s", e.msg);
	cr_expect_eq(compile_with("13.0.0", &e), SF_E_TOKENIZER);
	cr_expect(strstr(e.msg, "a PCRE2 of Unicode 14.0 to 16.0.0 is needed"), "%s", e.msg);
}
