/*
 * `shmfeed keygen FILE`: a new CURVE key pair for the control socket of tcp:// jobs.
 * FILE gets the pair (mode 0600; the job's control.curve_secret_key_file, or a client's
 * --key / $SHMFEED_CURVE_KEY), FILE.pub the public key as one line of an allow-list
 * (control.curve_allowed_clients). Existing files are never replaced.
 */
#include <stdio.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/log.h"
#include "launcher/launcher.h"

int sf__cmd_keygen(int argc, char **argv)
{
	struct sf_err e = {0};
	char pub[41];

	if (argc != 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: shmfeed keygen FILE   (writes FILE, mode 0600, and "
				"FILE.pub)\n");
		return 2;
	}
	if (sf__curve_keygen(argv[1], pub, &e) < 0) {
		sf__log_error("%s", e.msg);
		return 1;
	}
	printf("%s\n", pub);
	return 0;
}
