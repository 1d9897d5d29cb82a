/*
 * CPU lists: parsing, checking against the process's affinity, and formatting.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/cpus.h"

/* One CPU number at *p, advanced past it. -1 when there is none or it is too large. */
static long cpu_number(const char **p)
{
	const char *s = *p;
	long v = 0;

	if (!isdigit((unsigned char)*s))
		return -1;
	while (isdigit((unsigned char)*s)) {
		v = v * 10 + (*s++ - '0');
		if (v >= CPU_SETSIZE)
			return -1;
	}
	*p = s;
	return v;
}

int sf__cpu_list_parse(const char *list, cpu_set_t *ret_set, char *msg, size_t len)
{
	const char *p = list;
	cpu_set_t set;

	CPU_ZERO(&set);
	for (;;) {
		long lo, hi;

		while (*p == ' ')
			p++;
		lo = cpu_number(&p);
		hi = lo;
		if (lo >= 0 && *p == '-') {
			p++;
			hi = cpu_number(&p);
		}
		if (lo < 0 || hi < lo) {
			snprintf(msg, len,
				 "'%.64s' is not a CPU list: expected CPU numbers (0..%d) and "
				 "ranges like \"0-1,4\"",
				 list, CPU_SETSIZE - 1);
			return SF_E_CONFIG;
		}
		for (long c = lo; c <= hi; c++)
			CPU_SET((int)c, &set);
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		if (*p++ != ',') {
			snprintf(msg, len,
				 "'%.64s' is not a CPU list: expected CPU numbers and ranges "
				 "separated by commas, like \"0-1,4\"",
				 list);
			return SF_E_CONFIG;
		}
	}
	*ret_set = set;
	return 0;
}

void sf__cpu_list_format(const cpu_set_t *set, char *buf, size_t len)
{
	size_t n = 0;

	if (len)
		buf[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE && n < len; c++) {
		int hi = c;

		if (!CPU_ISSET(c, set))
			continue;
		while (hi + 1 < CPU_SETSIZE && CPU_ISSET(hi + 1, set))
			hi++;
		n += (size_t)snprintf(buf + n, len - n, hi == c ? "%s%d" : "%s%d-%d", n ? "," : "",
				      c, hi);
		c = hi;
	}
}

int sf__cpu_list_allowed(const char *list, cpu_set_t *ret_set, char *msg, size_t len)
{
	cpu_set_t set, allowed, outside;
	char have[256], bad[256];
	int r = sf__cpu_list_parse(list, &set, msg, len);

	if (r < 0)
		return r;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0) {
		r = -errno;
		snprintf(msg, len, "cannot read this process's CPUs: %s", strerror(-r));
		return r;
	}
	CPU_XOR(&outside, &set, &allowed);
	CPU_AND(&outside, &outside, &set);
	if (CPU_COUNT(&outside)) {
		sf__cpu_list_format(&outside, bad, sizeof(bad));
		sf__cpu_list_format(&allowed, have, sizeof(have));
		snprintf(msg, len,
			 "CPU list '%.64s' names CPU %s, which this process may not run on "
			 "(allowed: %s)",
			 list, bad, have);
		return SF_E_CONFIG;
	}
	*ret_set = set;
	return 0;
}
