/*
 * The byte ranges of a tokenize part (see part_plan.h): the sources expanded exactly as
 * the dataset expands them, each file stat()ed, the byte space cut into equal ranges.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "producer/part_plan.h"
#include "producer/producer.h"

struct listed_file {
	uint64_t size;
	uint64_t mtime_ns;
};

static void hash_str(XXH3_state_t *st, const char *s)
{
	/* With its NUL, so that ("ab", "c") and ("a", "bc") differ. */
	if (s)
		XXH3_128bits_update(st, s, strlen(s) + 1);
	else
		XXH3_128bits_update(st, "", 1);
}

/* floor(a * b / c) for a <= c: the product in 128 bits, the quotient at most b. */
__extension__ typedef unsigned __int128 sf_u128;

static uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c)
{
	return (uint64_t)((sf_u128)a * b / c);
}

int sf__part_plan_make(const struct sf_config *cfg, uint32_t part, uint32_t n_parts,
		       struct sf_part_plan *ret_plan, struct sf_err *e)
{
	struct sf_part_plan p = {.part = part, .n_parts = n_parts};
	struct listed_file *listed = NULL;
	uint64_t cap = 0, base = 0;
	XXH3_state_t st;
	XXH128_canonical_t canon;
	XXH128_hash_t h;
	int r = 0;

	if (n_parts == 0 || part >= n_parts)
		return sf__err(e, SF_E_CONFIG, "part %u of %u: the part must be below the count",
			       part, n_parts);
	XXH3_128bits_reset(&st);
	for (uint32_t s = 0; s < cfg->n_sources && r == 0; s++) {
		const struct sf_source_config *src = &cfg->sources[s];
		uint32_t words[2] = {src->format, src->on_error};
		char **paths;
		size_t n;

		r = sf__source_expand(src, &paths, &n, e);
		if (r < 0)
			break;
		XXH3_128bits_update(&st, words, sizeof(words));
		hash_str(&st, src->text_field);
		hash_str(&st, src->separator);
		for (size_t i = 0; i < n && r == 0; i++) {
			struct stat sb;
			struct listed_file lf = {0};

			if (p.n_files == cap) {
				uint64_t ncap = cap ? cap * 2 : 64;
				struct listed_file *nl = realloc(listed, ncap * sizeof(*nl));

				if (!nl) {
					r = sf__err(e, -ENOMEM, "out of memory");
					break;
				}
				listed = nl;
				cap = ncap;
			}
			if (stat(paths[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
				lf.size = (uint64_t)sb.st_size;
				lf.mtime_ns = (uint64_t)sb.st_mtim.tv_sec * 1000000000u +
					      (uint64_t)sb.st_mtim.tv_nsec;
			}
			hash_str(&st, paths[i]);
			XXH3_128bits_update(&st, &lf, sizeof(lf));
			listed[p.n_files++] = lf;
			p.total_bytes += lf.size;
		}
		for (size_t i = 0; i < n; i++)
			free(paths[i]);
		free(paths);
	}
	if (r < 0)
		goto fail;
	p.files = calloc(p.n_files + 1, sizeof(*p.files));
	if (!p.files) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto fail;
	}
	p.lo = mul_div(part, p.total_bytes, n_parts);
	p.hi = part + 1 == n_parts ? UINT64_MAX : mul_div(part + 1, p.total_bytes, n_parts);
	for (uint64_t i = 0; i < p.n_files; i++) {
		uint64_t end = base + listed[i].size;
		struct sf_part_file *f = &p.files[i];

		/* The part reads the file when the file starts in its range (an empty file
		 * included) or when the range and the file's bytes overlap. */
		if ((base >= p.lo && base < p.hi) || (p.lo < end && base < p.hi)) {
			f->in_part = 1;
			f->lo = p.lo > base ? p.lo - base : 0;
			f->hi = p.hi >= end ? UINT64_MAX : p.hi - base;
		}
		base = end;
	}
	h = XXH3_128bits_digest(&st);
	XXH128_canonicalFromHash(&canon, h);
	memcpy(p.listing_digest, canon.digest, sizeof(p.listing_digest));
	free(listed);
	*ret_plan = p;
	return 0;
fail:
	free(listed);
	free(p.files);
	return r;
}

void sf__part_plan_free(struct sf_part_plan *plan)
{
	free(plan->files);
	plan->files = NULL;
}
