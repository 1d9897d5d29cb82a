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
int sf__cmd_encode(int argc, char **argv);
int sf__cmd_decode(int argc, char **argv);
int sf__cmd_tokenize(int argc, char **argv);

#endif
