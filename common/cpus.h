/*
 * CPU lists as the kernel writes them ("0-3,8,10-11": cpuset's and taskset's form): the
 * job file's producers.cpus is one. Parsed into a cpu_set_t, checked against the CPUs the
 * process may run on, and written back for messages and `check`.
 */
#ifndef SF_COMMON_CPUS_H
#define SF_COMMON_CPUS_H

#include <sched.h>
#include <stddef.h>

/*
 * sf__cpu_list_parse - parse `list` (comma-separated CPU numbers and ranges LO-HI, each
 * below CPU_SETSIZE; spaces around items allowed) into *ret_set, which is written only
 * on success. Returns 0, or SF_E_CONFIG with what is wrong in `msg`.
 */
int sf__cpu_list_parse(const char *list, cpu_set_t *ret_set, char *msg, size_t len);

/* sf__cpu_list_format - write `set` as a CPU list ("" when empty) into buf. */
void sf__cpu_list_format(const cpu_set_t *set, char *buf, size_t len);

/*
 * sf__cpu_list_allowed - parse `list` and check that every CPU in it is one this process
 * may run on (sched_getaffinity). Returns 0 and the set in *ret_set, or SF_E_CONFIG with
 * the CPUs not allowed and the allowed list in `msg`, or -errno.
 */
int sf__cpu_list_allowed(const char *list, cpu_set_t *ret_set, char *msg, size_t len);

#endif
