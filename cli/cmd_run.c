/*
 * `shmfeed run CONFIG [--set KEY=VALUE ...] [--quiet] [--grace-ms N] [-- COMMAND ...]`:
 * the job's supervisor (launcher/launcher.c) over the real producers.
 */
#include "cli/commands.h"
#include "launcher/launcher.h"

int sf__cmd_run(int argc, char **argv)
{
	return sf__run_command(argc, argv, &sf__real_producers);
}
