/*
 * The shmfeed command: a table of subcommands, each living in its own cmd_*.c, and the
 * argument parsing that several of them share.
 */
#include <stdio.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;
};

static const struct command commands[] = {
	{"inspect", sf__cmd_inspect, "inspect JOB [--json]      arena header, participants, slots"},
	{"run", sf__cmd_run, "run CONFIG [--set K=V] [-- CMD ...]  run a job, supervise CMD"},
	{"check", sf__cmd_check,
	 "check CONFIG [--set K=V]  validate a job file, print it resolved"},
	{"encode", sf__cmd_encode,
	 "encode -e ENCODING         text on stdin to uint32 ids on stdout"},
	{"decode", sf__cmd_decode,
	 "decode -e ENCODING         uint32 ids on stdin to text on stdout"},
	{"status", sf__cmd_status,
	 "status [JOB] [--json] [--key FILE]  a running job: rates, slots, producers"},
	{"top", sf__cmd_top,
	 "top [JOB] [--count N] [--key FILE]  the same, refreshed every stats interval"},
	{"stop", sf__cmd_control, "stop [JOB] [--key FILE]   stop a running job (as SIGTERM does)"},
	{"pause", sf__cmd_control, "pause [JOB] [--key FILE]  pause a job's producers"},
	{"resume", sf__cmd_control, "resume [JOB] [--key FILE] resume a paused job"},
	{"keygen", sf__cmd_keygen,
	 "keygen FILE               a CURVE key pair for tcp control: FILE, FILE.pub"},
	{"tokenize", sf__cmd_tokenize,
	 "tokenize CONFIG -o PREFIX  raw text sources to Megatron .bin/.idx"},
};

int sf__cli_job_args(int argc, char **argv, const char **ret_job, int *ret_json)
{
	*ret_job = NULL;
	*ret_json = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			*ret_json = 1;
		else if (argv[i][0] != '-' && !*ret_job)
			*ret_job = argv[i];
		else
			return -1;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: shmfeed COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %s\n", commands[i].usage);
	fprintf(f, "  version                   print the version\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		printf("shmfeed %s\n", sf_version());
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "shmfeed: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
