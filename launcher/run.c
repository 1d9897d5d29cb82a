/*
 * The command line of `shmfeed run CONFIG [--set KEY=VALUE ...] [--quiet] [--grace-ms N]
 * [-- COMMAND ...]`: load the job file, apply overrides, and hand the job to the
 * supervisor with the given producer side. Shared by the shmfeed program and the test
 * launcher, which differ only in their producers.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/config.h"
#include "common/log.h"
#include "common/proc.h"
#include "launcher/launcher.h"

static int usage(void)
{
	fprintf(stderr, "usage: shmfeed run CONFIG [--set KEY=VALUE ...] [-q|--quiet] "
			"[--grace-ms N] [-- COMMAND [ARG ...]]\n");
	return 2;
}

/*
 * What execvp() would make of `cmd`: 0 when it finds a regular file that may be executed,
 * given as a path or in a directory of $PATH (execvp's own default without one);
 * -EISDIR for a path to a directory; -EACCES for a file found that may not be executed
 * (in $PATH: where no other is); -ENOENT for nothing found. Asked before the job starts: a
 * mistyped command ended the job right after its arena was made and its producers had
 * started reading.
 */
/*
 * The interpreter a script's #! line names (as the kernel reads it: up to the first
 * space, tab or newline, so a CRLF file's "\r" is part of it) must be there to run:
 * -ENOEXEC with it in `bad`, escaped, when it is not. 0 for a file without #!.
 */
static int interpreter_ok(const char *file, char *bad, size_t len)
{
	char line[256], interp[256];
	size_t n = 0, k = 0, i = 2;
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	ssize_t got = fd < 0 ? -1 : read(fd, line, sizeof(line) - 1);

	if (fd >= 0)
		close(fd);
	if (got < 2 || line[0] != '#' || line[1] != '!')
		return 0;
	while (i < (size_t)got && (line[i] == ' ' || line[i] == '\t'))
		i++;
	while (i < (size_t)got && line[i] != ' ' && line[i] != '\t' && line[i] != '\n')
		interp[n++] = line[i++];
	interp[n] = '\0';
	/* An empty one: execvp() runs the file with /bin/sh. */
	if (n == 0 || access(interp, X_OK) == 0)
		return 0;
	for (i = 0; i < n && k + 5 < len; i++)
		k += (size_t)(interp[i] == '\r' ? snprintf(bad + k, len - k, "\\r")
			      : (unsigned char)interp[i] < 0x20
				      ? snprintf(bad + k, len - k, "\\x%02x",
						 (unsigned char)interp[i])
				      : snprintf(bad + k, len - k, "%c", interp[i]));
	bad[k] = '\0';
	return -ENOEXEC;
}

static int command_lookup(const char *cmd, char *bad, size_t len)
{
	const char *dirs = getenv("PATH"), *p;
	char full[4096];
	struct stat st;
	int r = -ENOENT;

	if (strchr(cmd, '/')) {
		if (stat(cmd, &st) < 0)
			return -ENOENT;
		if (S_ISDIR(st.st_mode))
			return -EISDIR;
		if (!S_ISREG(st.st_mode) || access(cmd, X_OK) != 0)
			return -EACCES;
		return interpreter_ok(cmd, bad, len);
	}
	if (!dirs)
		dirs = "/bin:/usr/bin";
	for (p = dirs;; p++) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		/* An empty entry is the current directory, as for execvp(). */
		if ((size_t)snprintf(full, sizeof(full), "%.*s%s%s", (int)n, p, n ? "/" : "", cmd) <
			    sizeof(full) &&
		    stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
			/* A file whose interpreter is missing is passed over, as execvp() does
			 * (ENOENT from it): a later one of the name may run. The first such
			 * interpreter is the one reported. */
			char later[256];

			if (access(full, X_OK) != 0) {
				if (r != -ENOEXEC)
					r = -EACCES;
			} else if (interpreter_ok(full, r == -ENOEXEC ? later : bad,
						  r == -ENOEXEC ? sizeof(later) : len) == 0) {
				return 0;
			} else {
				r = -ENOEXEC;
			}
		}
		if (!end)
			return r;
		p = end;
	}
}

int sf__run_command(int argc, char **argv, const struct sf_producer_ops *ops)
{
	const char **sets = calloc((size_t)argc + 1, sizeof(*sets));
	struct sf_launch l = {.ops = ops, .progress = 1, .grace_ms = 10000};
	const char *path = NULL;
	struct sf_config cfg;
	struct sf_err e = {0};
	uint32_t n_sets = 0;
	int status = 0, sig = 0, r;
	char bad[256];

	if (!sets)
		return 1;
	sf__children_waitable();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			/* An empty `-- $CMD` must not serve forever as if none was meant. */
			if (i + 1 == argc) {
				free(sets);
				fprintf(stderr, "shmfeed run: nothing after `--`: give the command to "
						"run, or leave `--` out to serve without one\n");
				return 2;
			}
			l.command = argv + i + 1;
			break;
		} else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
			sets[n_sets++] = argv[++i];
		} else if (!strncmp(argv[i], "--set=", 6)) {
			sets[n_sets++] = argv[i] + 6;
		} else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
			l.progress = 0;
			sf__log_set_quiet(1);
		} else if (!strcmp(argv[i], "--grace-ms")) {
			const char *arg = i + 1 < argc ? argv[++i] : "";
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(arg, &end, 10);
			if (errno || end == arg || *end || arg[0] == '-' || v > 3600000) {
				free(sets);
				fprintf(stderr, "shmfeed run: --grace-ms takes milliseconds, 0 to "
						"3600000; not '%s'\n",
					arg);
				return 2;
			}
			l.grace_ms = (uint32_t)v;
		} else if (argv[i][0] == '-' || path) {
			free(sets);
			if (argv[i][0] == '-')
				fprintf(stderr, "shmfeed run: unknown option '%s'%s\n", argv[i],
					!strcmp(argv[i], "--set") ? " (it takes KEY=VALUE)" : "");
			else
				fprintf(stderr,
					"shmfeed run: '%s' after the job file: the command to run "
					"goes after `--` (shmfeed run %s -- %s ...)\n",
					argv[i], path, argv[i]);
			return usage();
		} else {
			path = argv[i];
		}
	}
	if (!path) {
		free(sets);
		return usage();
	}
	if (l.command && (r = command_lookup(l.command[0], bad, sizeof(bad))) < 0) {
		free(sets);
		/* The shell's statuses: 127 for nothing found, 126 for what cannot be run. */
		if (r == -ENOEXEC)
			fprintf(stderr,
				"shmfeed run: %s: bad interpreter '%s' in its #! line (nothing was "
				"started)\n",
				l.command[0], bad);
		else
			fprintf(stderr, "shmfeed run: %s: %s (nothing was started)\n", l.command[0],
				r == -ENOENT   ? "command not found"
				: r == -EISDIR ? "is a directory"
					       : "permission denied");
		return r == -ENOENT ? 127 : 126;
	}
	r = sf__config_load_overrides(path, sets, n_sets, &cfg, &e);
	free(sets);
	if (r < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	l.cfg = &cfg;
	/* From here the launcher supervises: a stderr that nobody reads must not stop it. */
	sf__log_set_bounded(100);
	r = sf__launcher_run(&l, &status, &sig, &e);
	/* Everything is cleaned up: the last lines wait for their reader, and say what
	 * could not be written before them. */
	sf__log_set_bounded(0);
	if (r < 0) {
		sf__log_error("job %s: %s", cfg.job, e.msg[0] ? e.msg : sf_strerror(r));
		sf__config_free(&cfg);
		return 1;
	}
	sf__log_flush();
	sf__config_free(&cfg);
	if (sig) {
		sigset_t set;

		/* End by the signal, with nothing left to clean up. */
		fflush(NULL);
		signal(sig, SIG_DFL);
		sigemptyset(&set);
		sigaddset(&set, sig);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(sig);
	}
	return status;
}
