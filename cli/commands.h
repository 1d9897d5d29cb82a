/*
 * Subcommands of the shmfeed program. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit status.
 */
#ifndef SF_CLI_COMMANDS_H
#define SF_CLI_COMMANDS_H

int sf__cmd_inspect(int argc, char **argv);
int sf__cmd_check(int argc, char **argv);
int sf__cmd_run(int argc, char **argv);
int sf__cmd_status(int argc, char **argv);
int sf__cmd_top(int argc, char **argv);
/* stop, pause and resume: argv[0] names the control request. */
int sf__cmd_control(int argc, char **argv);
int sf__cmd_seek(int argc, char **argv);
int sf__cmd_encode(int argc, char **argv);
int sf__cmd_decode(int argc, char **argv);
int sf__cmd_tokenize(int argc, char **argv);
int sf__cmd_keygen(int argc, char **argv);

/*
 * sf__cli_job_args - the arguments "[JOB] [--json]" of inspect and status: at most one
 * job name and the --json flag. Returns 0, or -1 on anything else (the caller prints its
 * usage).
 */
int sf__cli_job_args(int argc, char **argv, const char **ret_job, int *ret_json);

/* Bit fd set: descriptor 0, 1 or 2 was closed when shmfeed started (main() gives it
 * /dev/null, so that no file opened later takes its place). */
extern unsigned sf__cli_closed_std;

#endif
