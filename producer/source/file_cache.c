/*
 * A bounded cache of mapped source files (producer/source/file_cache.h). A table of
 * `capacity` entries, each a mapped file, in a list from the most to the least recently
 * used, a stack of the free ones, and for every file the entry that holds it. A miss takes
 * a free entry, else the least recently used one: O(1) either way. (A scan for them cost
 * more than the open and the mapping of a miss: 28 % of the start of a job of 5,000 small
 * files, scanning up to 4,096 entries a miss.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "producer/source/file_cache.h"

#define NO_ENTRY UINT32_MAX
#define MIN_CAP	 2u
#define MAX_CAP	 4096u

struct cache_entry {
	const char *data; /* NULL: free */
	size_t len;
	size_t cap; /* bytes to munmap */
	uint32_t file;
	uint32_t private;      /* cap counts toward private_bytes */
	uint32_t newer, older; /* its neighbours in the list of used entries */
};

struct sf_file_cache {
	sf_file_map_fn map;
	void *arg;
	uint32_t n_files;
	uint32_t capacity;
	uint32_t n_open;
	uint32_t newest, oldest; /* the list of used entries, NO_ENTRY when empty */
	uint32_t *free;		 /* the free entries, a stack of n_free */
	uint32_t n_free;
	uint32_t cursor; /* sf__file_cache_rotate() */
	uint64_t private_bytes;
	uint32_t *entry_of; /* per file: its entry, or NO_ENTRY */
	struct cache_entry *entries;
};

uint32_t sf__file_cache_capacity(void)
{
	uint64_t cap = MAX_CAP, max_maps = 65530;
	struct rlimit rl;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");

	if (f) {
		unsigned long long v;

		if (fscanf(f, "%llu", &v) == 1 && v > 0)
			max_maps = v;
		fclose(f);
	}
	if (max_maps / 4 < cap)
		cap = max_maps / 4;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 2 < cap)
		cap = rl.rlim_cur / 2;
	return cap < MIN_CAP ? MIN_CAP : (uint32_t)cap;
}

int sf__file_cache_create(uint32_t n_files, uint32_t capacity, sf_file_map_fn map, void *arg,
			  struct sf_file_cache **ret_c, struct sf_err *e)
{
	struct sf_file_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return sf__err(e, -ENOMEM, "out of memory");
	c->map = map;
	c->arg = arg;
	c->n_files = n_files;
	c->capacity = capacity ? capacity : sf__file_cache_capacity();
	if (c->capacity < MIN_CAP)
		c->capacity = MIN_CAP;
	if (c->capacity > n_files)
		c->capacity = n_files > MIN_CAP ? n_files : MIN_CAP;
	c->entry_of = malloc(((size_t)n_files + 1) * sizeof(*c->entry_of));
	c->entries = calloc(c->capacity, sizeof(*c->entries));
	c->free = malloc(c->capacity * sizeof(*c->free));
	if (!c->entry_of || !c->entries || !c->free) {
		sf__file_cache_free(c);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < n_files; i++)
		c->entry_of[i] = NO_ENTRY;
	for (uint32_t k = 0; k < c->capacity; k++)
		c->free[c->n_free++] = c->capacity - 1 - k;
	c->newest = c->oldest = NO_ENTRY;
	*ret_c = c;
	return 0;
}

static void unlink_entry(struct sf_file_cache *c, uint32_t k)
{
	const struct cache_entry *en = &c->entries[k];

	if (en->newer != NO_ENTRY)
		c->entries[en->newer].older = en->older;
	else
		c->newest = en->older;
	if (en->older != NO_ENTRY)
		c->entries[en->older].newer = en->newer;
	else
		c->oldest = en->newer;
}

static void link_newest(struct sf_file_cache *c, uint32_t k)
{
	struct cache_entry *en = &c->entries[k];

	en->newer = NO_ENTRY;
	en->older = c->newest;
	if (c->newest != NO_ENTRY)
		c->entries[c->newest].newer = k;
	else
		c->oldest = k;
	c->newest = k;
}

static void release(struct sf_file_cache *c, uint32_t k)
{
	struct cache_entry *en = &c->entries[k];

	if (!en->data)
		return;
	unlink_entry(c, k);
	c->free[c->n_free++] = k;
	c->entry_of[en->file] = NO_ENTRY;
	if (en->private)
		c->private_bytes -= en->cap;
	en->private = 0;
	/* Cleared before the unmap: a SIGBUS handler never finds a dying mapping. */
	{
		const char *data = en->data;

		en->data = NULL;
		if (en->cap)
			munmap((void *)data, en->cap);
	}
	c->n_open--;
}

void sf__file_cache_drop(struct sf_file_cache *c)
{
	for (uint32_t k = 0; c && k < c->capacity; k++)
		release(c, k);
}

void sf__file_cache_free(struct sf_file_cache *c)
{
	if (!c)
		return;
	if (c->entries && c->entry_of)
		sf__file_cache_drop(c);
	free(c->entries);
	free(c->entry_of);
	free(c->free);
	free(c);
}

/*
 * Past the budget of decompressed bytes, unmap the least recently used decompressed
 * files but the two most recently returned (entry `now`, and the most recently used of
 * the others): a caller may read two files at once (a Megatron index and its .bin).
 */
static void shed_private(struct sf_file_cache *c, uint32_t now)
{
	/* `now` is the newest entry: the one before it in use is the next in the list. */
	const uint32_t before = c->entries[now].older;

	while (c->private_bytes > SF_FILE_CACHE_PRIVATE_BYTES) {
		uint32_t victim = c->oldest;

		while (victim != NO_ENTRY &&
		       (!c->entries[victim].private || victim == now || victim == before))
			victim = c->entries[victim].newer;
		if (victim == NO_ENTRY)
			return;
		release(c, victim);
	}
}

/* An empty file maps to this: a valid address that holds nothing. */
static const char empty_file[1];

int sf__file_cache_get(struct sf_file_cache *c, uint32_t i, const char **ret_data, size_t *ret_len,
		       struct sf_err *e)
{
	uint32_t k = c->entry_of[i];
	struct cache_entry *en;
	const char *data;
	size_t len, cap;
	int r, private = 0;

	if (k != NO_ENTRY) {
		en = &c->entries[k];
		if (k != c->newest) {
			unlink_entry(c, k);
			link_newest(c, k);
		}
		*ret_data = en->data;
		*ret_len = en->len;
		return 0;
	}
	if (!c->n_free)
		release(c, c->oldest);
	r = c->map(c->arg, i, &data, &len, &cap, &private, e);
	if (r < 0)
		return r;
	k = c->free[--c->n_free];
	en = &c->entries[k];
	en->len = len;
	en->cap = data ? cap : 0;
	en->file = i;
	link_newest(c, k);
	en->data = data ? data : empty_file;
	en->private = private && en->cap;
	if (en->private)
		c->private_bytes += en->cap;
	c->entry_of[i] = k;
	c->n_open++;
	shed_private(c, k);
	*ret_data = en->data;
	*ret_len = len;
	return 0;
}

int sf__file_cache_find(const struct sf_file_cache *c, const void *addr, uint32_t *ret_i,
			uint64_t *ret_off)
{
	uintptr_t a = (uintptr_t)addr;

	for (uint32_t k = 0; c && k < c->capacity; k++) {
		const struct cache_entry *en = &c->entries[k];
		uintptr_t b = (uintptr_t)en->data;

		if (en->data && en->cap && a >= b && a - b < en->cap) {
			*ret_i = en->file;
			*ret_off = a - b;
			return 1;
		}
	}
	return 0;
}

int sf__file_cache_each(const struct sf_file_cache *c, int (*fn)(void *arg, uint32_t i), void *arg)
{
	for (uint32_t k = 0; c && k < c->capacity; k++) {
		int r = c->entries[k].data ? fn(arg, c->entries[k].file) : 0;

		if (r)
			return r;
	}
	return 0;
}

uint32_t sf__file_cache_rotate(struct sf_file_cache *c, uint32_t n)
{
	uint32_t first = c->cursor;

	c->cursor = (uint32_t)(((uint64_t)c->cursor + n) % c->n_files);
	return first;
}

uint32_t sf__file_cache_open_count(const struct sf_file_cache *c, uint32_t *ret_capacity)
{
	*ret_capacity = c->capacity;
	return c->n_open;
}

uint64_t sf__file_cache_private_bytes(const struct sf_file_cache *c)
{
	return c->private_bytes;
}
