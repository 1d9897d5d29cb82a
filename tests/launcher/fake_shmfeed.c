/*
 * A shmfeed program for launcher tests: `fake_shmfeed run ...` is `shmfeed run ...` over
 * the synthetic producers of fake_producers.c.
 */
#include <stdio.h>
#include <string.h>

#include "launcher/launcher.h"
#include "tests/launcher/fake_producers.h"

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "run")) {
		fprintf(stderr, "usage: fake_shmfeed run CONFIG [--set K=V] [-- COMMAND]\n");
		return 2;
	}
	return sf__run_command(argc - 1, argv + 1, &sf__fake_producers);
}
