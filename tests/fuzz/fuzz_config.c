/*
 * Fuzz target of the job file loader: any bytes go through sf__config_load_string(); a
 * file it accepts must be written back (sf__config_write) into a file that loads again
 * to the same digest and geometry. Rejections must carry a positioned message.
 *
 * Built with -DSF_LIBFUZZER and -fsanitize=fuzzer it is a libFuzzer target; otherwise a
 * replay main runs it over the files and directories given as arguments (the committed
 * corpus tests/fuzz/corpus/config/ in CI).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

#ifndef SF_LIBFUZZER
static int run_file(const char *path)
{
	uint8_t *buf;
	long len;
	FILE *f = fopen(path, "rb");

	if (!f) {
		perror(path);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)len + 1);
	if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
		perror(path);
		fclose(f);
		free(buf);
		return 1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)len);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int i, rc = 0, count = 0;

	for (i = 1; i < argc; i++) {
		struct stat st;
		struct dirent *de;
		DIR *d;

		if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			d = opendir(argv[i]);
			while (d && (de = readdir(d))) {
				char path[4096];

				if (de->d_name[0] == '.')
					continue;
				snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
				rc |= run_file(path);
				count++;
			}
			if (d)
				closedir(d);
		} else {
			rc |= run_file(argv[i]);
			count++;
		}
	}
	printf("replayed %d inputs\n", count);
	return rc;
}
#endif
