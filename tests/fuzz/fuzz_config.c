/*
 * Fuzz target of the job file loader: any bytes go through sf__config_load_string(); a
 * file it accepts must be written back (sf__config_write) into a file that loads again
 * to the same digest and geometry. Rejections must carry a positioned message.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise it
 * is linked with the replay main of replay_main.c, which runs it over the files and
 * directories given as arguments (the committed corpus tests/fuzz/corpus/config/ in CI).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_config cfg, again;
	struct sf_err e = {0};
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	if (sf__config_load_string("fuzz.yaml", (const char *)data, size, &cfg, &e) < 0) {
		if (!e.msg[0])
			abort();
		return 0;
	}
	f = open_memstream(&text, &len);
	if (!f || sf__config_write(&cfg, f) < 0)
		abort();
	fclose(f);
	if (sf__config_load_string("again.yaml", text, len, &again, &e) < 0) {
		fprintf(stderr, "written config does not load: %s\n%s", e.msg, text);
		abort();
	}
	if (sf__config_digest(&again) != sf__config_digest(&cfg) ||
	    again.batch_size != cfg.batch_size || again.local_ranks != cfg.local_ranks ||
	    strcmp(again.job, cfg.job))
		abort();
	sf__config_free(&again);
	sf__config_free(&cfg);
	free(text);
	return 0;
}
