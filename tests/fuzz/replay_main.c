/*
 * Replay main shared by the fuzz targets when they are not built for libFuzzer: it runs
 * the target's LLVMFuzzerTestOneInput() once on every file given as an argument and on
 * every file (not starting with '.') of every directory given, which is how CI replays
 * the committed corpora under tests/fuzz/corpus/. Each replay program links this file
 * with one target; the libFuzzer builds use libFuzzer's own main instead.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
