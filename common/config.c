/*
 * The YAML job file loader: a schema table of every field (its YAML key, type, range,
 * default and place in struct sf_config), a walker that applies a libyaml document to a
 * config through that table, the cross-field checks, the command-line overrides, the
 * resolved-config writer of `shmfeed check`, and the digest of the fields that decide
 * the token stream. Every rejection names FILE:LINE:COLUMN and the expected form.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <yaml.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/config.h"
#include "common/cpus.h"
#include "common/io.h"

/* A job file is a few hundred bytes; anything far larger is a mistake. */
#define CONFIG_MAX_BYTES (1u << 20)

enum ftype {
	T_STRING,  /* any string; nullable fields take null */
	T_PATH,	   /* a string naming a file, resolved against the file's directory */
	T_CHOICE,  /* a string from `names`, stored as a string */
	T_ENUM,	   /* a name from `names`, stored as its index (uint32) */
	T_U32,	   /* unsigned integer in [min, max] */
	T_U64,	   /* unsigned 64-bit integer in [min, max] */
	T_MS,	   /* a duration ("5s", "500ms", "2.5s"): uint32 ms, 0 (off) or in [min, max] */
	T_BOOL,	   /* true/false (also yes/no, on/off), stored as uint32 0/1 */
	T_SECTION, /* a mapping of `sub` fields */
	T_SOURCES, /* a list of sources: path strings or mappings of source fields */
	T_PATHS,   /* a path or a list of paths (a source's `paths`) */
	T_WEIGHT,  /* a decimal weight, fixed point (SF_WEIGHT_SCALE); null: unset */
	T_WEIGHTS, /* a mapping of names to weights (struct sf_weights_config) */
	T_SCHEDULE, /* a list of mixture phases (sf_config.schedule) */
};

#define F_NULLABLE 0x1u /* null is allowed and means "unset" */
#define F_AUTO	   0x2u /* "auto" is allowed and stored as 0 */
#define F_AUTO_MAX 0x4u /* "auto" is allowed and stored as UINT32_MAX (0 is a value) */

struct field {
	const char *key;
	enum ftype type;
	size_t off;
	uint64_t min, max;
	const char *const *names;
	const struct field *sub;
	unsigned flags;
	const char *expect; /* the expected form, for messages */
};

/* consumers.rank_base while loading, before check_config() resolves it (into a value
 * and rank_base_auto). */
#define RANK_BASE_AUTO	UINT32_MAX
#define RANK_BASE_UNSET (UINT32_MAX - 1)

#define END_FIELDS                                                                                 \
	{                                                                                          \
		NULL, 0, 0, 0, 0, NULL, NULL, 0, NULL                                              \
	}
#define CFG(m) offsetof(struct sf_config, m)
#define SRC(m) offsetof(struct sf_source_config, m)
#define PH(m)  offsetof(struct sf_phase_config, m)

static const char *const format_names[] = {"auto", "nanogpt", "llmc", "megatron",
					   "text", "jsonl",   NULL};
static const char *const on_error_names[] = {"stop", "skip", NULL};
static const char *const index_names[] = {"cache", "beside", NULL};
static const char *const encoding_names[] = {"bytes",	  "char",	 "char:CORPUS", "gpt2",
					     "r50k_base", "cl100k_base", "o200k_base",	NULL};
static const char *const tok_format_names[] = {"auto", "tiktoken",	"tekken",
					       "hf",   "sentencepiece", NULL};
static const char *const dtype_names[] = {"auto", "uint16", "int32", NULL};
static const char *const mode_names[] = {"windows", "random", NULL};
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};

static const struct field source_fields[] = {
	{"paths", T_PATHS, SRC(paths), 0, 0, NULL, NULL, 0, "a path or glob, or a list of them"},
	{"format", T_ENUM, SRC(format), 0, 0, format_names, NULL, 0, NULL},
	{"text_field", T_STRING, SRC(text_field), 0, 0, NULL, NULL, 0, "a JSON field name"},
	{"separator", T_STRING, SRC(separator), 0, 0, NULL, NULL, F_NULLABLE,
	 "a string, or null for one document per file"},
	{"on_error", T_ENUM, SRC(on_error), 0, 0, on_error_names, NULL, 0, NULL},
	{"index", T_ENUM, SRC(index), 0, 0, index_names, NULL, 0, NULL},
	{"name", T_STRING, SRC(name), 0, 0, NULL, NULL, F_NULLABLE,
	 "1-63 characters of A-Z a-z 0-9 _ - . not starting with '.' or '-' nor holding "
	 "'.new.' (the arena's temporary names), or null"},
	{"group", T_STRING, SRC(group), 0, 0, NULL, NULL, F_NULLABLE, "a group name, or null"},
	{"weight", T_WEIGHT, SRC(weight), 0, 0, NULL, NULL, F_NULLABLE, NULL},
	END_FIELDS,
};

/* A ramp's stages x sources^2 at most: 16 stages of 4,096 sources (about 1.4 s to build),
 * 1,024 (the most) up to 512 sources. */
#define SF_STAGE_WORK_MAX (UINT64_C(1) << 28)

static const struct field phase_fields[] = {
	{"until_step", T_U64, PH(until_step), 1, UINT64_MAX - 1, NULL, NULL, F_NULLABLE, NULL},
	{"weights", T_WEIGHTS, PH(weights), 0, 0, NULL, NULL, 0, NULL},
	{"ramp_to", T_WEIGHTS, PH(ramp_to), 0, 0, NULL, NULL, 0, NULL},
	{"stages", T_U32, PH(stages), 1, 1024, NULL, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field mixture_fields[] = {
	{"groups", T_WEIGHTS, CFG(groups), 0, 0, NULL, NULL, 0, NULL},
	{"schedule", T_SCHEDULE, CFG(schedule), 0, 0, NULL, phase_fields, 0, NULL},
	END_FIELDS,
};

static const struct field tokenizer_fields[] = {
	{"encoding", T_CHOICE, CFG(encoding), 0, 0, encoding_names, NULL, F_NULLABLE,
	 "an encoding name, or null with a tokenizer 'file'"},
	{"vocab", T_PATH, CFG(vocab), 0, 0, NULL, NULL, F_NULLABLE, "a file path, or null"},
	{"vocab_dir", T_PATH, CFG(vocab_dir), 0, 0, NULL, NULL, F_NULLABLE,
	 "a directory path, or null"},
	{"eot_id", T_U64, CFG(eot_id), 0, UINT32_MAX - 1, NULL, NULL, F_NULLABLE, NULL},
	{"file", T_PATH, CFG(tok_file), 0, 0, NULL, NULL, F_NULLABLE,
	 "a tokenizer file (.tiktoken, tekken JSON, tokenizer.json, SentencePiece model), or "
	 "null"},
	{"format", T_ENUM, CFG(tok_format), 0, 0, tok_format_names, NULL, 0, NULL},
	{"pattern", T_STRING, CFG(tok_pattern), 0, 0, NULL, NULL, F_NULLABLE,
	 "a pre-tokenization regex, or null for the file's own"},
	{"bos", T_STRING, CFG(bos), 0, 0, NULL, NULL, 0,
	 "auto, none, or the text of a special token"},
	{"eos", T_STRING, CFG(eos), 0, 0, NULL, NULL, 0, "auto, or the text of a special token"},
	{"specials", T_BOOL, CFG(tok_specials), 0, 1, NULL, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field batch_fields[] = {
	{"size", T_U32, CFG(batch_size), 1, 65536, NULL, NULL, 0, NULL},
	/* T + 1 tokens a sequence must fit the arena's 32-bit count; what a slot may hold is
	 * checked against the job's token width below, and against the machine at start. */
	{"seq_len", T_U32, CFG(seq_len), 1, UINT32_MAX - 1, NULL, NULL, 0, NULL},
	{"dtype", T_ENUM, CFG(dtype), 0, 0, dtype_names, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field sampling_fields[] = {
	{"mode", T_ENUM, CFG(mode), 0, 0, mode_names, NULL, 0, NULL},
	{"seed", T_U64, CFG(seed), 0, UINT64_MAX, NULL, NULL, 0, NULL},
	{"epochs", T_U64, CFG(epochs), 0, UINT32_MAX, NULL, NULL, 0, NULL},
	{"doc_starts", T_U32, CFG(doc_starts), 0, 4096, NULL, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field arena_fields[] = {
	{"slots_per_rank", T_U32, CFG(slots_per_rank), 1, SF_MAX_SLOTS_PER_RANK, NULL, NULL, 0,
	 NULL},
	{"hugepages", T_BOOL, CFG(hugepages), 0, 1, NULL, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field producer_fields[] = {
	{"count", T_U32, CFG(producers), 1, SF_MAX_PRODUCERS, NULL, NULL, 0, NULL},
	{"max_restarts", T_U32, CFG(max_restarts), 0, 1000, NULL, NULL, 0, NULL},
	/* Not below 500 ms: an idle producer renews its heartbeat every 200 ms
	 * (producer.c's CLAIM_SLICE_NS), and a timeout near that killed idle ones. */
	{"stall_timeout", T_MS, CFG(stall_timeout_ms), 500, 3600000, NULL, NULL, 0, NULL},
	{"cpus", T_STRING, CFG(producer_cpus), 0, 0, NULL, NULL, F_NULLABLE,
	 "a CPU list like \"0-1,4\", or null"},
	END_FIELDS,
};

static const struct field consumer_fields[] = {
	{"world_size", T_U32, CFG(world_size), 1, 1u << 20, NULL, NULL, 0, NULL},
	{"local_ranks", T_U32, CFG(local_ranks), 1, SF_MAX_RANKS, NULL, NULL, F_AUTO, NULL},
	{"rank_base", T_U32, CFG(rank_base), 0, (1u << 20) - 1, NULL, NULL, F_AUTO_MAX, NULL},
	{"device", T_ENUM, CFG(device), 0, 0, device_names, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field control_fields[] = {
	{"endpoint", T_STRING, CFG(endpoint), 0, 0, NULL, NULL, F_NULLABLE,
	 "null (private ipc://), ipc://PATH or tcp://HOST:PORT"},
	{"stats_interval_ms", T_U32, CFG(stats_interval_ms), 10, 3600000, NULL, NULL, 0, NULL},
	{"curve_secret_key_file", T_PATH, CFG(curve_secret_key_file), 0, 0, NULL, NULL, F_NULLABLE,
	 "a file path (from `shmfeed keygen`), or null"},
	{"curve_allowed_clients", T_PATH, CFG(curve_allowed_clients), 0, 0, NULL, NULL, F_NULLABLE,
	 "a file path (Z85 public keys, one a line), or null"},
	{"insecure_tcp", T_BOOL, CFG(insecure_tcp), 0, 1, NULL, NULL, 0, NULL},
	{"metrics_file", T_PATH, CFG(metrics_file), 0, 0, NULL, NULL, F_NULLABLE,
	 "a file path (Prometheus text, rewritten every interval), or null"},
	{"metrics", T_STRING, CFG(metrics), 0, 0, NULL, NULL, F_NULLABLE,
	 "127.0.0.1:PORT or [::1]:PORT (loopback only), or null"},
	END_FIELDS,
};

static const struct field integrity_fields[] = {
	{"checksum", T_BOOL, CFG(checksum), 0, 1, NULL, NULL, 0, NULL},
	{"verify_every", T_U32, CFG(verify_every), 1, UINT32_MAX, NULL, NULL, 0, NULL},
	END_FIELDS,
};

static const struct field root_fields[] = {
	{"job", T_STRING, CFG(job), 0, 0, NULL, NULL, 0,
	 "1-63 characters of A-Z a-z 0-9 _ - . not starting with '.' or '-' nor holding "
	 "'.new.' (the arena's temporary names)"},
	{"sources", T_SOURCES, CFG(sources), 0, 0, NULL, source_fields, 0, NULL},
	{"tokenizer", T_SECTION, 0, 0, 0, NULL, tokenizer_fields, 0, NULL},
	{"batch", T_SECTION, 0, 0, 0, NULL, batch_fields, 0, NULL},
	{"sampling", T_SECTION, 0, 0, 0, NULL, sampling_fields, 0, NULL},
	{"arena", T_SECTION, 0, 0, 0, NULL, arena_fields, 0, NULL},
	{"producers", T_SECTION, 0, 0, 0, NULL, producer_fields, 0, NULL},
	{"consumers", T_SECTION, 0, 0, 0, NULL, consumer_fields, 0, NULL},
	{"control", T_SECTION, 0, 0, 0, NULL, control_fields, 0, NULL},
	{"integrity", T_SECTION, 0, 0, 0, NULL, integrity_fields, 0, NULL},
	{"mixture", T_SECTION, 0, 0, 0, NULL, mixture_fields, 0, NULL},
	END_FIELDS,
};

/* Where a value came from: a file position, or a command-line override. */
struct origin {
	const char *file;     /* the file (or "--set KEY" for an override) */
	const char *base_dir; /* relative paths are joined to this; NULL: keep as written */
	int override;
};

/* Positions of the fields that cross-field checks point at. */
struct mark {
	const struct field *f;
	int32_t source; /* the source whose field it is, or -1 */
	const char *file; /* the job file's name; NULL for an override, named in `set` */
	char set[96];	  /* "--set KEY", copied: it does not outlive the override's parsing */
	int override;
	size_t line, col;
	size_t alias_line, alias_col; /* where an alias took the value from; 0: none */
};

struct loader {
	yaml_document_t *doc;
	struct origin o;
	struct mark *marks; /* where each field was last written, per source for theirs */
	unsigned n_marks, cap_marks;
	int32_t source; /* the source being read, or -1 */
	/* The aliases of the document ("*name"), in the order of the text. */
	yaml_mark_t *aliases;
	size_t n_aliases;
	/*
	 * Where an alias brought the value being read, or NULL: messages about that value
	 * and what it holds are given there, where the user reads it, with the position of
	 * the anchored value it refers to.
	 */
	const yaml_mark_t *via;
	struct sf_err *e;
};

/*
 * Enter `v`, a value or list item whose text starts at offset *floor or after (a value
 * follows its key, an item the items before it) unless an alias brought it from
 * elsewhere: then the alias is the first one at *floor or after (nothing else is written
 * between), and *floor moves past it; else past `v`. Returns the L->via to restore.
 */
static const yaml_mark_t *enter(struct loader *L, size_t *floor, const yaml_node_t *v)
{
	const yaml_mark_t *was = L->via;
	size_t lo = 0, hi = L->n_aliases;

	if (v->start_mark.index >= *floor) {
		*floor = v->end_mark.index;
		return was;
	}
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (L->aliases[mid].index < *floor)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < L->n_aliases) {
		*floor = L->aliases[lo].index + 1;
		if (!was)
			L->via = &L->aliases[lo];
	}
	return was;
}

static int fail_at(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail_at(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
{
	char what[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (L->o.override || !n)
		return sf__err(L->e, SF_E_CONFIG, "%s: %s", L->o.file, what);
	if (L->via)
		return sf__err(L->e, SF_E_CONFIG, "%s:%zu:%zu: %s (through an alias of %zu:%zu)",
			       L->o.file, L->via->line + 1, L->via->column + 1, what,
			       n->start_mark.line + 1, n->start_mark.column + 1);
	return sf__err(L->e, SF_E_CONFIG, "%s:%zu:%zu: %s", L->o.file, n->start_mark.line + 1,
		       n->start_mark.column + 1, what);
}

static void remember(struct loader *L, const struct field *f, const yaml_node_t *n)
{
	struct mark *m = NULL;

	for (unsigned i = 0; i < L->n_marks; i++)
		if (L->marks[i].f == f && L->marks[i].source == L->source)
			m = &L->marks[i];
	if (!m && L->n_marks == L->cap_marks) {
		/* Positions are for messages only: without memory, a message has none. */
		unsigned cap = L->cap_marks ? 2 * L->cap_marks : 64;
		struct mark *more = realloc(L->marks, cap * sizeof(*more));

		if (!more)
			return;
		L->marks = more;
		L->cap_marks = cap;
	}
	if (!m)
		m = &L->marks[L->n_marks++];
	m->f = f;
	m->source = L->source;
	m->override = L->o.override;
	m->file = m->override ? NULL : L->o.file;
	if (m->override)
		snprintf(m->set, sizeof(m->set), "%s", L->o.file);
	m->line = (L->via ? *L->via : n->start_mark).line + 1;
	m->col = (L->via ? *L->via : n->start_mark).column + 1;
	m->alias_line = L->via ? n->start_mark.line + 1 : 0;
	m->alias_col = L->via ? n->start_mark.column + 1 : 0;
}

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static int is_plain(const yaml_node_t *n)
{
	return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ||
	       n->data.scalar.style == YAML_ANY_SCALAR_STYLE;
}

static int is_null(const yaml_node_t *n)
{
	const char *s;

	if (n->type != YAML_SCALAR_NODE || !is_plain(n))
		return 0;
	s = scalar(n);
	return !s[0] || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	       !strcmp(s, "NULL");
}

static const char *node_kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	default:
		return is_null(n) ? "null" : "a scalar";
	}
}

static void names_list(const char *const *names, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; names[i] && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", names[i]);
}

static void keys_list(const struct field *fields, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; fields[i].key && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", fields[i].key);
}

/*
 * A path from the file is relative to the file's directory, made absolute when the file
 * is read, so a job file works from any current directory and `check` prints where each
 * path leads; paths from overrides or from a config given as text stay relative to the
 * current directory. Every path is printed normalised: no "." segments, doubled or
 * trailing slashes ("./data//" is "data", "." stays "."); ".." segments stay, since
 * removing them by text would be wrong past a symlink.
 */
static char *resolve_path(const struct origin *o, const char *p)
{
	int absolute = p[0] == '/';
	const char *base = !absolute && o->base_dir ? o->base_dir : "";
	char *out = malloc(strlen(base) + strlen(p) + 3);
	size_t n;

	if (!out)
		return NULL;
	n = strlen(base);
	memcpy(out, base, n + 1);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = 0;
	if (absolute && n == 0)
		out[n++] = '/';
	for (const char *seg = p; *seg;) {
		const char *end = strchr(seg, '/');
		size_t len = end ? (size_t)(end - seg) : strlen(seg);

		if (len && !(len == 1 && seg[0] == '.')) {
			if (n && !(n == 1 && out[0] == '/'))
				out[n++] = '/';
			memcpy(out + n, seg, len);
			n += len;
		}
		seg += len + (end ? 1 : 0);
	}
	if (n == 0)
		out[n++] = '.';
	out[n] = 0;
	return out;
}

static int parse_u64(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	if (!s[0])
		return -EINVAL;
	for (const char *c = s; *c; c++) {
		/* '_' groups digits (1_000), so it stands between two of them. */
		if (*c == '_' && c != s && c[1] >= '0' && c[1] <= '9')
			continue;
		if (*c < '0' || *c > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - (uint64_t)(*c - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*c - '0');
	}
	*ret = v;
	return 0;
}

static int parse_bool(const char *s, uint32_t *ret)
{
	static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes",
					  "YES",  "on",	  "On",	  "ON",	 NULL};
	static const char *const no[] = {"false", "False", "FALSE", "no",  "No",
					 "NO",	  "off",   "Off",   "OFF", NULL};

	for (int i = 0; yes[i]; i++)
		if (!strcmp(s, yes[i])) {
			*ret = 1;
			return 0;
		}
	for (int i = 0; no[i]; i++)
		if (!strcmp(s, no[i])) {
			*ret = 0;
			return 0;
		}
	return -EINVAL;
}

static int apply_field(struct loader *L, const struct field *f, const yaml_node_t *n, void *base);

static int set_string(struct loader *L, const struct field *f, const yaml_node_t *n, void *base)
{
	char **dst = (char **)((char *)base + f->off);
	char *v;

	if (n->type != YAML_SCALAR_NODE)
		return fail_at(L, n, "'%s' must be %s, not %s", f->key, f->expect, node_kind(n));
	if (is_null(n)) {
		if (!(f->flags & F_NULLABLE))
			return fail_at(L, n, "'%s' must be %s, not null", f->key, f->expect);
		free(*dst);
		*dst = NULL;
		return 0;
	}
	if (strlen(scalar(n)) > PATH_MAX)
		return fail_at(L, n, "'%s' is longer than %d characters", f->key, PATH_MAX);
	if (f->type == T_PATH && !scalar(n)[0])
		return fail_at(L, n, "'%s' must be %s, not an empty path", f->key, f->expect);
	v = f->type == T_PATH ? resolve_path(&L->o, scalar(n)) : strdup(scalar(n));
	if (!v)
		return sf__err(L->e, -ENOMEM, "out of memory");
	free(*dst);
	*dst = v;
	return 0;
}

static int lookup_name(struct loader *L, const struct field *f, const yaml_node_t *n,
		       uint32_t *ret_index)
{
	char names[256];

	if (n->type == YAML_SCALAR_NODE && !is_null(n))
		for (uint32_t i = 0; f->names[i]; i++)
			if (!strcmp(scalar(n), f->names[i])) {
				*ret_index = i;
				return 0;
			}
	names_list(f->names, names, sizeof(names));
	if (n->type == YAML_SCALAR_NODE && !is_null(n))
		return fail_at(L, n, "'%s' must be one of %s; got '%.64s'", f->key, names,
			       scalar(n));
	return fail_at(L, n, "'%s' must be one of %s, not %s", f->key, names, node_kind(n));
}

static int set_number(struct loader *L, const struct field *f, const yaml_node_t *n, void *base)
{
	uint64_t v;
	int r;

	if (n->type == YAML_SCALAR_NODE && (f->flags & (F_AUTO | F_AUTO_MAX)) &&
	    !strcmp(scalar(n), "auto")) {
		*(uint32_t *)((char *)base + f->off) = f->flags & F_AUTO ? 0 : UINT32_MAX;
		return 0;
	}
	if (n->type == YAML_SCALAR_NODE && (f->flags & F_NULLABLE) && is_null(n)) {
		*(uint64_t *)((char *)base + f->off) = UINT64_MAX;
		return 0;
	}
	if (n->type != YAML_SCALAR_NODE || !is_plain(n) || is_null(n))
		return fail_at(L, n, "'%s' must be an unsigned integer in [%llu, %llu]%s, not %s",
			       f->key, (unsigned long long)f->min, (unsigned long long)f->max,
			       f->flags & (F_AUTO | F_AUTO_MAX) ? " or auto"
			       : f->flags & F_NULLABLE		? " or null"
								: "",
			       n->type == YAML_SCALAR_NODE && !is_null(n) ? "a quoted string"
									  : node_kind(n));
	r = parse_u64(scalar(n), &v);
	if (r == -EINVAL)
		return fail_at(L, n,
			       "'%s' must be an unsigned integer in [%llu, %llu]%s; got '%.64s'",
			       f->key, (unsigned long long)f->min, (unsigned long long)f->max,
			       f->flags & (F_AUTO | F_AUTO_MAX) ? " or auto" : "", scalar(n));
	if (r == -ERANGE || v < f->min || v > f->max)
		return fail_at(L, n, "'%s' is out of range: %.64s is not in [%llu, %llu]", f->key,
			       scalar(n), (unsigned long long)f->min, (unsigned long long)f->max);
	if (f->type == T_U32)
		*(uint32_t *)((char *)base + f->off) = (uint32_t)v;
	else
		*(uint64_t *)((char *)base + f->off) = v;
	return 0;
}

/*
 * Parse a duration: digits with an optional fraction, then "ms" or "s"; a bare "0" is
 * zero. Returns 0 and milliseconds (rounded down), -EINVAL or -ERANGE.
 */
static int parse_duration_ms(const char *s, uint64_t *ret_ms)
{
	uint64_t whole = 0, frac = 0, frac_scale = 1, scale;
	const char *c = s;

	if (!strcmp(s, "0")) {
		*ret_ms = 0;
		return 0;
	}
	if (*c < '0' || *c > '9')
		return -EINVAL;
	for (; *c >= '0' && *c <= '9'; c++) {
		if (whole > UINT32_MAX)
			return -ERANGE;
		whole = whole * 10 + (uint64_t)(*c - '0');
	}
	if (*c == '.') {
		if (c[1] < '0' || c[1] > '9')
			return -EINVAL;
		for (c++; *c >= '0' && *c <= '9'; c++) {
			if (frac_scale < 1000000) {
				frac = frac * 10 + (uint64_t)(*c - '0');
				frac_scale *= 10;
			}
		}
	}
	if (!strcmp(c, "ms"))
		scale = 1;
	else if (!strcmp(c, "s"))
		scale = 1000;
	else
		return -EINVAL;
	*ret_ms = whole * scale + frac * scale / frac_scale;
	return 0;
}

/* After "got 'TEXT'": why TEXT, right as written, is refused: its quotes. */
static const char *quoted_note(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE && !is_plain(n) ? ", quoted: write it without the quotes"
							   : "";
}

static int set_duration(struct loader *L, const struct field *f, const yaml_node_t *n, void *base)
{
	uint64_t ms;
	int r = -EINVAL;

	if (n->type == YAML_SCALAR_NODE && is_plain(n) && !is_null(n))
		r = parse_duration_ms(scalar(n), &ms);
	if (r == -EINVAL)
		return fail_at(L, n,
			       "'%s' must be a duration with a unit, such as 5s, 2.5s or 500ms "
			       "(0: off)%s%.64s%s%s",
			       f->key, n->type == YAML_SCALAR_NODE ? "; got '" : ", not ",
			       n->type == YAML_SCALAR_NODE ? scalar(n) : node_kind(n),
			       n->type == YAML_SCALAR_NODE ? "'" : "", quoted_note(n));
	/* 0 (off) is always taken; the range is that of the other values. */
	if (r == -ERANGE || (ms && ms < f->min) || ms > f->max)
		return fail_at(
			L, n, "'%s' is out of range: %.64s is not 0 (off) or in [%llums, %llums]",
			f->key, scalar(n), (unsigned long long)f->min, (unsigned long long)f->max);
	/* Kept in whole milliseconds, where 0 means off: 0.5ms must not turn it off. */
	if (!ms && strspn(scalar(n), "0._") != strcspn(scalar(n), "ms"))
		return fail_at(L, n, "'%s' is %.64s, less than 1ms but not 0 (0 turns it off)",
			       f->key, scalar(n));
	*(uint32_t *)((char *)base + f->off) = (uint32_t)ms;
	return 0;
}

static int set_paths(struct loader *L, const struct field *f, const yaml_node_t *n,
		     struct sf_source_config *src)
{
	const yaml_node_t *one = n;
	yaml_node_item_t *items = NULL;
	size_t count = 1, floor = n->start_mark.index;
	char **paths;

	if (n->type == YAML_SEQUENCE_NODE) {
		items = n->data.sequence.items.start;
		count = (size_t)(n->data.sequence.items.top - items);
		if (!count)
			return fail_at(L, n, "'%s' must be %s, not an empty list", f->key,
				       f->expect);
		if (count > 65536)
			return fail_at(L, n, "'%s' lists more than 65536 paths", f->key);
	}
	paths = calloc(count, sizeof(*paths));
	if (!paths)
		return sf__err(L->e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < count; i++) {
		const yaml_mark_t *was = L->via;

		if (items) {
			one = yaml_document_get_node(L->doc, items[i]);
			was = enter(L, &floor, one);
		}
		/* An empty path would be the job file's directory (`"${DATA}"` with DATA unset). */
		if (one->type != YAML_SCALAR_NODE || is_null(one) || !scalar(one)[0] ||
		    strlen(scalar(one)) > PATH_MAX) {
			int r = fail_at(L, one, "'%s' must be %s; this entry is %s", f->key,
					f->expect,
					one->type != YAML_SCALAR_NODE || is_null(one) ? node_kind(one)
					: !scalar(one)[0]			       ? "empty"
										       : "too long");

			L->via = was;
			for (size_t j = 0; j < i; j++)
				free(paths[j]);
			free(paths);
			return r;
		}
		L->via = was;
		paths[i] = resolve_path(&L->o, scalar(one));
		if (!paths[i]) {
			for (size_t j = 0; j < i; j++)
				free(paths[j]);
			free(paths);
			return sf__err(L->e, -ENOMEM, "out of memory");
		}
	}
	for (uint32_t j = 0; j < src->n_paths; j++)
		free(src->paths[j]);
	free(src->paths);
	src->paths = paths;
	src->n_paths = (uint32_t)count;
	return 0;
}

static void source_defaults(struct sf_source_config *src)
{
	memset(src, 0, sizeof(*src));
	src->format = SF_FMT_AUTO;
	src->on_error = SF_ON_ERROR_STOP;
	src->index = SF_INDEX_CACHE;
	src->weight = SF_WEIGHT_UNSET;
}

static void source_free(struct sf_source_config *src)
{
	for (uint32_t j = 0; j < src->n_paths; j++)
		free(src->paths[j]);
	free(src->paths);
	free(src->text_field);
	free(src->separator);
	free(src->name);
	free(src->group);
}

static void weights_free(struct sf_weights_config *w)
{
	for (uint32_t i = 0; i < w->n; i++)
		free(w->v[i].name);
	free(w->v);
	memset(w, 0, sizeof(*w));
}

static void schedule_free(struct sf_config *cfg)
{
	for (uint32_t i = 0; i < cfg->n_phases; i++) {
		weights_free(&cfg->schedule[i].weights);
		weights_free(&cfg->schedule[i].ramp_to);
	}
	free(cfg->schedule);
	cfg->schedule = NULL;
	cfg->n_phases = 0;
}

/*
 * Parse a weight: digits with an optional fraction of at most 9 digits, at most 10^9.
 * Returns 0 and the weight scaled by SF_WEIGHT_SCALE, -EINVAL or -ERANGE.
 */
static int parse_weight(const char *s, uint64_t *ret)
{
	uint64_t whole = 0, frac = 0, scale = SF_WEIGHT_SCALE;
	const char *c = s;

	if (*c < '0' || *c > '9')
		return -EINVAL;
	for (; *c >= '0' && *c <= '9'; c++) {
		whole = whole * 10 + (uint64_t)(*c - '0');
		if (whole > SF_WEIGHT_MAX / SF_WEIGHT_SCALE)
			return -ERANGE;
	}
	if (*c == '.') {
		if (c[1] < '0' || c[1] > '9')
			return -EINVAL;
		for (c++; *c >= '0' && *c <= '9'; c++) {
			if (scale == 1)
				return -ERANGE;
			scale /= 10;
			frac += (uint64_t)(*c - '0') * scale;
		}
	}
	if (*c)
		return -EINVAL;
	if (whole * SF_WEIGHT_SCALE + frac > SF_WEIGHT_MAX)
		return -ERANGE;
	*ret = whole * SF_WEIGHT_SCALE + frac;
	return 0;
}

static int weight_of(struct loader *L, const char *key, const yaml_node_t *n, uint64_t *ret)
{
	int r = -EINVAL;

	if (n->type == YAML_SCALAR_NODE && is_plain(n) && !is_null(n))
		r = parse_weight(scalar(n), ret);
	if (r == -ERANGE)
		return fail_at(L, n,
			       "'%s' is out of range: %.64s is not a weight in [0, 1e9] with at "
			       "most 9 digits after the point",
			       key, scalar(n));
	if (r < 0)
		return fail_at(
			L, n,
			"'%s' must be a non-negative decimal weight such as 0.3 or 2%s%.64s%s%s", key,
			n->type == YAML_SCALAR_NODE ? "; got '" : ", not ",
			n->type == YAML_SCALAR_NODE ? scalar(n) : node_kind(n),
			n->type == YAML_SCALAR_NODE ? "'" : "", quoted_note(n));
	return 0;
}

static int set_weight(struct loader *L, const struct field *f, const yaml_node_t *n, void *base)
{
	uint64_t *dst = (uint64_t *)((char *)base + f->off);

	if (is_null(n)) {
		*dst = SF_WEIGHT_UNSET;
		return 0;
	}
	return weight_of(L, f->key, n, dst);
}

/* A mapping of names to weights: groups, or the weights of a schedule phase. */
static int set_weights(struct loader *L, const struct field *f, const yaml_node_t *n, void *base)
{
	struct sf_weights_config *dst = (struct sf_weights_config *)((char *)base + f->off);
	struct sf_weights_config w = {0};
	size_t count;

	if (n->type != YAML_MAPPING_NODE)
		return fail_at(L, n,
			       "'%s' must be a mapping of source or group names to weights, "
			       "not %s",
			       f->key, node_kind(n));
	count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
	if (count > 4096)
		return fail_at(L, n, "'%s' lists more than 4096 weights", f->key);
	w.v = calloc(count ? count : 1, sizeof(*w.v));
	if (!w.v)
		return sf__err(L->e, -ENOMEM, "out of memory");
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
	     p++) {
		const yaml_node_t *k = yaml_document_get_node(L->doc, p->key);
		const yaml_node_t *v = yaml_document_get_node(L->doc, p->value);
		int r = 0;

		if (k->type != YAML_SCALAR_NODE || is_null(k))
			r = fail_at(L, k, "keys in '%s' must be source or group names, not %s",
				    f->key, node_kind(k));
		for (uint32_t i = 0; r == 0 && i < w.n; i++)
			if (!strcmp(w.v[i].name, scalar(k)))
				r = fail_at(L, k, "duplicate name '%.64s' in '%s'", scalar(k),
					    f->key);
		if (r == 0) {
			size_t floor = k->end_mark.index;
			const yaml_mark_t *was = enter(L, &floor, v);

			r = weight_of(L, scalar(k), v, &w.v[w.n].weight);
			L->via = was;
		}
		if (r == 0 && !(w.v[w.n].name = strdup(scalar(k))))
			r = sf__err(L->e, -ENOMEM, "out of memory");
		if (r < 0) {
			weights_free(&w);
			return r;
		}
		w.n++;
	}
	if (L->o.override)
		snprintf(w.at, sizeof(w.at), "%s", L->o.file);
	else
		snprintf(w.at, sizeof(w.at), "%s:%zu:%zu", L->o.file,
			 (L->via ? *L->via : n->start_mark).line + 1,
			 (L->via ? *L->via : n->start_mark).column + 1);
	weights_free(dst);
	*dst = w;
	return 0;
}

static int apply_mapping(struct loader *L, const struct field *fields, const char *where,
			 const yaml_node_t *n, void *base);

static int set_schedule(struct loader *L, const struct field *f, const yaml_node_t *n,
			struct sf_config *cfg)
{
	yaml_node_item_t *items;
	struct sf_phase_config *ph;
	size_t count;

	if (n->type != YAML_SEQUENCE_NODE)
		return fail_at(L, n,
			       "'schedule' must be a list of phases ({until_step: N, weights: "
			       "{...}}), not %s",
			       node_kind(n));
	items = n->data.sequence.items.start;
	count = (size_t)(n->data.sequence.items.top - items);
	if (!count || count > 4096)
		return fail_at(L, n, "'schedule' must list 1 to 4096 phases");
	ph = calloc(count, sizeof(*ph));
	if (!ph)
		return sf__err(L->e, -ENOMEM, "out of memory");
	schedule_free(cfg);
	cfg->schedule = ph;
	for (size_t i = 0, floor = n->start_mark.index; i < count; i++) {
		const yaml_node_t *item = yaml_document_get_node(L->doc, items[i]);
		const yaml_mark_t *was = enter(L, &floor, item);
		int r;

		ph[i].until_step = UINT64_MAX;
		cfg->n_phases = (uint32_t)i + 1;
		/* A phase's fields are marked per phase, as a source's are per source. */
		L->source = (int32_t)i;
		r = apply_mapping(L, f->sub, "a schedule phase", item, &ph[i]);
		L->source = -1;
		if (r == 0 && !ph[i].weights.v)
			r = fail_at(L, item, "a schedule phase needs 'weights'");
		if (r == 0 && ph[i].until_step == UINT64_MAX && i + 1 < count)
			r = fail_at(L, item,
				    "only the last schedule phase may leave out "
				    "'until_step'");
		if (r == 0 && i && ph[i].until_step <= ph[i - 1].until_step)
			r = fail_at(L, item, "'until_step' must grow from phase to phase");
		if (r == 0 && ph[i].ramp_to.v && ph[i].until_step == UINT64_MAX)
			r = fail_at(L, item, "a ramp needs 'until_step'");
		if (r == 0 && ph[i].stages && !ph[i].ramp_to.v)
			r = fail_at(L, item, "'stages' applies to a ramp ('ramp_to') only");
		L->via = was;
		if (r < 0)
			return r;
	}
	return 0;
}

static int apply_mapping(struct loader *L, const struct field *fields, const char *where,
			 const yaml_node_t *n, void *base)
{
	char keys[400];
	size_t next;

	if (n->type != YAML_MAPPING_NODE) {
		keys_list(fields, keys, sizeof(keys));
		return fail_at(L, n, "%s must be a mapping with keys %s, not %s", where, keys,
			       node_kind(n));
	}
	/* Where the next key starts at the earliest: before it, a node comes through an
	 * alias (enter()); a key too, which is named where its alias is (a review). */
	next = n->start_mark.index;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
	     p++) {
		const yaml_node_t *k = yaml_document_get_node(L->doc, p->key);
		const yaml_node_t *v = yaml_document_get_node(L->doc, p->value);
		const struct field *f = NULL;
		size_t floor = next;
		const yaml_mark_t *was = enter(L, &floor, k);
		int r;

		if (k->type != YAML_SCALAR_NODE)
			return fail_at(L, k, "keys in %s must be plain names, not %s", where,
				       node_kind(k));
		for (const yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
			const yaml_node_t *kq = yaml_document_get_node(L->doc, q->key);

			if (kq->type == YAML_SCALAR_NODE && !strcmp(scalar(kq), scalar(k)))
				return fail_at(L, k, "duplicate key '%.64s' in %s", scalar(k),
					       where);
		}
		for (const struct field *g = fields; g->key; g++)
			if (!strcmp(g->key, scalar(k)))
				f = g;
		if (!f) {
			keys_list(fields, keys, sizeof(keys));
			return fail_at(L, k, "unknown key '%.64s' in %s; expected one of: %s",
				       scalar(k), where, keys);
		}
		L->via = was;
		was = enter(L, &floor, v);
		r = apply_field(L, f, v, base);
		L->via = was;
		if (r < 0)
			return r;
		next = floor;
	}
	return 0;
}

/* What every source needs once its fields are read (from the file or a --set). */
static int source_done(struct loader *L, const yaml_node_t *n, struct sf_source_config *src)
{
	if (!src->n_paths)
		return fail_at(L, n, "a source needs 'paths'");
	if (src->separator && !*src->separator)
		return fail_at(L, n,
			       "'separator' is empty, which separates nothing: give a string, or "
			       "null for one document per file");
	if (!src->text_field && !(src->text_field = strdup("text")))
		return sf__err(L->e, -ENOMEM, "out of memory");
	return 0;
}

static int set_sources(struct loader *L, const struct field *f, const yaml_node_t *n,
		       struct sf_config *cfg)
{
	yaml_node_item_t *items;
	struct sf_source_config *srcs;
	size_t count;

	if (n->type != YAML_SEQUENCE_NODE)
		return fail_at(L, n,
			       "'sources' must be a list of sources (a path, or a mapping with "
			       "paths, format, ...), not %s",
			       node_kind(n));
	items = n->data.sequence.items.start;
	count = (size_t)(n->data.sequence.items.top - items);
	if (!count)
		return fail_at(L, n, "'sources' must list at least one source");
	if (count > SF_CONFIG_SOURCES_MAX)
		return fail_at(L, n, "'sources' lists more than %u sources", SF_CONFIG_SOURCES_MAX);
	srcs = calloc(count, sizeof(*srcs));
	if (!srcs)
		return sf__err(L->e, -ENOMEM, "out of memory");
	/* The positions of the sources this list replaces go with them. */
	for (unsigned k = 0; k < L->n_marks;)
		if (L->marks[k].source >= 0)
			L->marks[k] = L->marks[--L->n_marks];
		else
			k++;
	for (size_t i = 0, floor = n->start_mark.index; i < count; i++) {
		const yaml_node_t *item = yaml_document_get_node(L->doc, items[i]);
		const yaml_mark_t *was = enter(L, &floor, item);
		int r;

		L->source = (int32_t)i;
		remember(L, &root_fields[1], item);
		source_defaults(&srcs[i]);
		if (item->type == YAML_MAPPING_NODE)
			r = apply_mapping(L, f->sub, "a source", item, &srcs[i]);
		else if (item->type == YAML_SCALAR_NODE && !is_null(item))
			r = set_paths(L, &f->sub[0], item, &srcs[i]);
		else
			r = fail_at(L, item,
				    "a source must be a path or a mapping with keys paths, format, "
				    "text_field, separator, on_error, index; not %s",
				    node_kind(item));
		if (r == 0)
			r = source_done(L, item, &srcs[i]);
		L->source = -1;
		L->via = was;
		if (r < 0) {
			for (size_t j = 0; j <= i; j++)
				source_free(&srcs[j]);
			free(srcs);
			return r;
		}
	}
	for (uint32_t j = 0; j < cfg->n_sources; j++)
		source_free(&cfg->sources[j]);
	free(cfg->sources);
	cfg->sources = srcs;
	cfg->n_sources = (uint32_t)count;
	return 0;
}

static int apply_field(struct loader *L, const struct field *f, const yaml_node_t *n, void *base)
{
	char where[80];
	uint32_t idx;
	int r;

	remember(L, f, n);
	switch (f->type) {
	case T_STRING:
	case T_PATH:
		return set_string(L, f, n, base);
	case T_CHOICE:
		/* "char:CORPUS" names a file: its path is resolved like any other. */
		if (n->type == YAML_SCALAR_NODE && !strncmp(scalar(n), "char:", 5) &&
		    scalar(n)[5]) {
			char **dst = (char **)((char *)base + f->off);
			char *path = resolve_path(&L->o, scalar(n) + 5), *v = NULL;

			if (!path || asprintf(&v, "char:%s", path) < 0)
				v = NULL;
			free(path);
			if (!v)
				return sf__err(L->e, -ENOMEM, "out of memory");
			free(*dst);
			*dst = v;
			return 0;
		}
		if (n->type == YAML_SCALAR_NODE && is_null(n))
			return set_string(L, f, n, base);
		r = lookup_name(L, f, n, &idx);
		if (r < 0)
			return r;
		return set_string(L, f, n, base);
	case T_ENUM:
		r = lookup_name(L, f, n, &idx);
		if (r == 0)
			*(uint32_t *)((char *)base + f->off) = idx;
		return r;
	case T_U32:
	case T_U64:
		return set_number(L, f, n, base);
	case T_MS:
		return set_duration(L, f, n, base);
	case T_BOOL:
		if (n->type != YAML_SCALAR_NODE || !is_plain(n) ||
		    parse_bool(scalar(n), (uint32_t *)((char *)base + f->off)) < 0)
			return fail_at(L, n, "'%s' must be true or false%s%.64s%s", f->key,
				       n->type == YAML_SCALAR_NODE ? "; got '" : ", not ",
				       n->type == YAML_SCALAR_NODE ? scalar(n) : node_kind(n),
				       n->type == YAML_SCALAR_NODE ? "'" : "");
		return 0;
	case T_SECTION:
		snprintf(where, sizeof(where), "section '%s'", f->key);
		return apply_mapping(L, f->sub, where, n, base);
	case T_SOURCES:
		return set_sources(L, f, n, base);
	case T_PATHS:
		return set_paths(L, f, n, base);
	case T_WEIGHT:
		return set_weight(L, f, n, base);
	case T_WEIGHTS:
		return set_weights(L, f, n, base);
	case T_SCHEDULE:
		return set_schedule(L, f, n, base);
	}
	return fail_at(L, n, "internal: field '%s' has no type", f->key);
}

void sf__config_defaults(struct sf_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->batch_size = 8;
	cfg->seq_len = 256;
	cfg->dtype = SF_DTYPE_AUTO;
	cfg->eot_id = SF_EOT_ID_UNSET;
	cfg->mode = SF_SAMPLE_WINDOWS;
	cfg->seed = 1337;
	cfg->slots_per_rank = 4;
	cfg->producers = 2;
	cfg->max_restarts = 5;
	cfg->stall_timeout_ms = SF_STALL_TIMEOUT_DEFAULT_MS;
	cfg->world_size = 1;
	cfg->device = SF_DEVICE_AUTO;
	cfg->stats_interval_ms = 1000;
	cfg->checksum = 1;
	cfg->verify_every = 1;
}

void sf__config_free(struct sf_config *cfg)
{
	if (!cfg)
		return;
	for (uint32_t i = 0; i < cfg->n_sources; i++)
		source_free(&cfg->sources[i]);
	free(cfg->sources);
	free(cfg->path);
	free(cfg->job);
	free(cfg->encoding);
	free(cfg->vocab);
	free(cfg->vocab_dir);
	free(cfg->tok_file);
	free(cfg->tok_pattern);
	free(cfg->bos);
	free(cfg->eos);
	free(cfg->endpoint);
	free(cfg->curve_secret_key_file);
	free(cfg->metrics_file);
	free(cfg->metrics);
	free(cfg->curve_allowed_clients);
	weights_free(&cfg->groups);
	schedule_free(cfg);
	free(cfg->producer_cpus);
	memset(cfg, 0, sizeof(*cfg));
}

static const struct mark *mark_in(const struct loader *L, const struct field *f, int32_t source)
{
	for (unsigned i = 0; i < L->n_marks; i++)
		if (L->marks[i].f == f && L->marks[i].source == source)
			return &L->marks[i];
	return NULL;
}

static const struct mark *mark_of(const struct loader *L, const struct field *f)
{
	return mark_in(L, f, -1);
}

static int fail_mark(struct loader *L, const struct mark *m, const char *what);

/* A cross-field error: named at the position of field `f` when it was written, else at
 * the file. */
static int fail_field(struct loader *L, const struct field *f, const char *what)
{
	return fail_mark(L, mark_of(L, f), what);
}

/* The same for field `f` of source `i`: where it was written, else where the source
 * was. */
static int fail_source_field(struct loader *L, const struct field *f, uint32_t i, const char *what)
{
	const struct mark *m = mark_in(L, f, (int32_t)i);

	return fail_mark(L, m ? m : mark_in(L, &root_fields[1], (int32_t)i), what);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/*
 * nanoGPT's char encoding takes the characters of its corpus's bytes read as UTF-8: those
 * of a compressed file, or JSON syntax, are no corpus's (they were refused later, as "not
 * valid UTF-8" or a character "not in the vocabulary", or taken).
 */
static int check_char_corpus(struct loader *L, const struct sf_config *cfg, const char *corpus)
{
	const char *kind = NULL;
	char msg[768];

	if (ends_with(corpus, ".gz") || ends_with(corpus, ".zst"))
		kind = "compressed";
	else if (ends_with(corpus, ".jsonl") ||
		 (cfg->n_sources == 1 && cfg->sources[0].n_paths == 1 &&
		  cfg->sources[0].format == SF_FMT_JSONL &&
		  !strcmp(cfg->sources[0].paths[0], corpus)))
		kind = "JSONL";
	if (!kind)
		return 0;
	snprintf(msg, sizeof(msg),
		 "'encoding: char' takes its vocabulary from a corpus, and %.400s is %s: its "
		 "characters are read from plain UTF-8 text; write char:CORPUS naming a plain "
		 "text file (the corpus's text, or its characters)",
		 corpus, kind);
	return fail_field(L, &tokenizer_fields[0], msg);
}

static int fail_mark(struct loader *L, const struct mark *m, const char *what)
{
	/* A field never written is reported at the top of the file, where it belongs. */
	if (!m)
		return sf__err(L->e, SF_E_CONFIG, "%s:1:1: %s", L->o.file, what);
	if (m->override)
		return sf__err(L->e, SF_E_CONFIG, "%s: %s", m->set, what);
	if (m->alias_line)
		return sf__err(L->e, SF_E_CONFIG, "%s:%zu:%zu: %s (through an alias of %zu:%zu)",
			       m->file, m->line, m->col, what, m->alias_line, m->alias_col);
	return sf__err(L->e, SF_E_CONFIG, "%s:%zu:%zu: %s", m->file, m->line, m->col, what);
}

/* A port: one or more decimal digits, nothing else (parse_u64() also takes '_'). */
static int digits_only(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

/* A cross-field error at the first of `a`, `b`, `c` (NULL: none) that was written. */
static int fail_first(struct loader *L, const struct field *a, const struct field *b,
		      const struct field *c, const char *what)
{
	const struct mark *m = mark_of(L, a);

	if (!m && b)
		m = mark_of(L, b);
	if (!m && c)
		m = mark_of(L, c);
	return fail_mark(L, m, what);
}

/* An IPv4 address, or an IPv6 address in brackets. */
static bool tcp_host_is_address(const char *host, size_t len)
{
	char buf[INET6_ADDRSTRLEN + 2];
	unsigned char addr[sizeof(struct in6_addr)];

	if (len < 2 || len >= sizeof(buf))
		return false;
	memcpy(buf, host, len);
	buf[len] = 0;
	if (buf[0] != '[')
		return inet_pton(AF_INET, buf, addr) == 1;
	if (buf[len - 1] != ']')
		return false;
	buf[len - 1] = 0;
	return inet_pton(AF_INET6, buf + 1, addr) == 1;
}

static int check_endpoint(struct loader *L, struct sf_config *cfg)
{
	const struct field *f = &control_fields[0];
	const char *ep = cfg->endpoint;
	char msg[400];

	if (!ep)
		return 0;
	if (!strncmp(ep, "ipc://", 6)) {
		if (!ep[6])
			return fail_field(L, f, "'endpoint' ipc:// needs a socket path");
		/* An abstract socket has no file, so no permissions: any local user could
		 * connect and pause, seek or stop the job. */
		if (ep[6] == '@')
			return fail_field(L, f,
					  "'endpoint' ipc://@NAME is an abstract socket, which any "
					  "local user can connect to: give a path (ipc:///DIR/NAME)");
		/* zmq takes a relative path from each process's working directory, which a
		 * training script may change. */
		if (ep[6] != '/')
			return fail_field(L, f,
					  "'endpoint' ipc:// needs an absolute path "
					  "(ipc:///DIR/NAME)");
		/* A socket path holds 107 bytes, and the stats socket is PATH.pub. */
		if (strlen(ep + 6) > SF_IPC_PATH_MAX - 4) {
			snprintf(msg, sizeof(msg),
				 "'endpoint' ipc:// path is %zu bytes; a socket path holds at most "
				 "%d, and the stats socket PATH.pub takes 4 more: at most %d",
				 strlen(ep + 6), SF_IPC_PATH_MAX, SF_IPC_PATH_MAX - 4);
			return fail_field(L, f, msg);
		}
		return 0;
	}
	if (!strncmp(ep, "tcp://", 6)) {
		const char *host = ep + 6, *colon = strrchr(host, ':');
		uint64_t port;

		/* The stats socket takes PORT + 1. Digits only: zmq_bind reads no '_'. */
		if (!colon || colon == host || !digits_only(colon + 1) ||
		    parse_u64(colon + 1, &port) < 0 || port == 0 || port > 65534) {
			snprintf(msg, sizeof(msg),
				 "'endpoint' must be tcp://HOST:PORT with PORT in [1, 65534] (the "
				 "stats socket takes PORT + 1); got '%.64s'",
				 ep);
			return fail_field(L, f, msg);
		}
		/* The launcher binds it and clients connect to it: an address both can use. */
		if (!tcp_host_is_address(host, (size_t)(colon - host))) {
			snprintf(msg, sizeof(msg),
				 "'endpoint' HOST must be an IP address, a.b.c.d or [IPv6] (the "
				 "job binds it and its clients connect to it; a name, an "
				 "interface or * is not both); got '%.64s'",
				 ep);
			return fail_field(L, f, msg);
		}
		/* Any local user can reach a loopback port: tcp needs CURVE everywhere. */
		if (!cfg->curve_secret_key_file && !cfg->insecure_tcp) {
			snprintf(msg, sizeof(msg),
				 "'endpoint' %.64s is tcp without CURVE: set "
				 "control.curve_secret_key_file and control.curve_allowed_clients "
				 "(keys from `shmfeed keygen`), or control.insecure_tcp: true "
				 "to let anyone who reaches the port control the job",
				 ep);
			return fail_field(L, f, msg);
		}
		return 0;
	}
	snprintf(msg, sizeof(msg), "'endpoint' must be %s; got '%.64s'", f->expect, ep);
	return fail_field(L, f, msg);
}

int sf__config_metrics_address(const char *addr, int *ret_ipv6, uint16_t *ret_port)
{
	static const char *const hosts[] = {"127.0.0.1:", "[::1]:"};
	uint64_t port;

	for (int i = 0; i < 2; i++) {
		size_t n = strlen(hosts[i]);

		/* Digits only: parse_u64() also reads "9_100", printed back as written. */
		if (strncmp(addr, hosts[i], n) || !digits_only(addr + n) ||
		    parse_u64(addr + n, &port) < 0 || port > 65535)
			continue;
		*ret_ipv6 = i;
		*ret_port = (uint16_t)port;
		return 0;
	}
	return SF_E_CONFIG;
}

/* The source or group named `name` that a schedule's weights may name, or -1. */
static int weighable(const struct sf_config *cfg, const char *name)
{
	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		const struct sf_source_config *src = &cfg->sources[i];

		if ((!src->group && !strcmp(src->name, name)) ||
		    (src->group && !strcmp(src->group, name)))
			return (int)i;
	}
	return -1;
}

/*
 * A mixture: names given or defaulted (sourceN) and unique, groups used, weights where
 * the mode needs them (docs/mixtures.md). Weights that are all zero are caught when the
 * mixture is built, which names the phase.
 */
static int check_mixture(struct loader *L, struct sf_config *cfg)
{
	const struct field *f_name = &source_fields[6], *f_weight = &source_fields[8];
	const struct field *f_mix = &root_fields[10];
	char msg[400];

	for (uint32_t i = 0; i < cfg->n_sources; i++)
		if (cfg->sources[i].weight != SF_WEIGHT_UNSET || cfg->sources[i].group)
			cfg->mixture = 1;
	if (cfg->groups.n || cfg->n_phases)
		cfg->mixture = 1;
	/* A name is checked where it is written, mixture or not: it must not become an
	 * error only when a weight is added. */
	for (uint32_t i = 0; i < cfg->n_sources; i++)
		if (cfg->sources[i].name && !sf__job_name_valid(cfg->sources[i].name)) {
			snprintf(msg, sizeof(msg), "source and group names must be %s; got '%.64s'",
				 f_name->expect, cfg->sources[i].name);
			return fail_source_field(L, f_name, i, msg);
		}
	if (!cfg->mixture)
		return 0;
	if (cfg->epochs)
		return fail_field(
			L, &sampling_fields[2],
			cfg->n_phases ? "'epochs' does not apply to a mixture: each source "
					"repeats on its own, and the run ends at the schedule's "
					"last until_step"
				      : "'epochs' does not apply to a mixture: each source "
					"repeats on its own, and the run ends where the training "
					"stops (or a schedule's last until_step)");
	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		struct sf_source_config *src = &cfg->sources[i];

		if (!src->name && asprintf(&src->name, "source%u", i) < 0) {
			src->name = NULL;
			return sf__err(L->e, -ENOMEM, "out of memory");
		}
		if (src->group && !sf__job_name_valid(src->group)) {
			snprintf(msg, sizeof(msg), "source and group names must be %s; got '%.64s'",
				 f_name->expect, src->group);
			return fail_source_field(L, &source_fields[7], i, msg);
		}
		if (src->group && !strcmp(src->group, src->name)) {
			snprintf(msg, sizeof(msg),
				 "the name '%.64s' is given twice, to the source and its group "
				 "(source and group names share one namespace)",
				 src->name);
			return fail_source_field(L, &source_fields[7], i, msg);
		}
		for (uint32_t j = 0; j < i; j++) {
			/* Source names and group names share one namespace. */
			const int as_group = src->group && !strcmp(cfg->sources[j].name, src->group);

			if (!strcmp(cfg->sources[j].name, src->name) ||
			    (cfg->sources[j].group && !strcmp(cfg->sources[j].group, src->name)) ||
			    as_group) {
				char def_j[24], def_i[24];

				snprintf(def_j, sizeof(def_j), "source%u", j);
				snprintf(def_i, sizeof(def_i), "source%u", i);
				/* Source j's default, when the clash is with j's name. */
				if (!as_group && !strcmp(cfg->sources[j].name, src->name) &&
				    !strcmp(cfg->sources[j].name, def_j))
					snprintf(msg, sizeof(msg),
						 "the name '%.64s' is source %u's default (it has "
						 "no `name`): give one of them another",
						 src->name, j);
				else if (!as_group && !strcmp(src->name, def_i))
					snprintf(msg, sizeof(msg),
						 "source %u has no `name`, and its default '%.64s' "
						 "is another source's or group's: give it one",
						 i, src->name);
				else
					snprintf(
						msg, sizeof(msg),
						"the name '%.64s' is given twice (source and group "
						"names share one namespace)",
						as_group ? src->group : src->name);
				return fail_source_field(L, as_group ? &source_fields[7] : f_name,
							 i, msg);
			}
		}
		if (!cfg->n_phases && !src->group && src->weight == SF_WEIGHT_UNSET) {
			snprintf(msg, sizeof(msg),
				 "source '%.64s' needs a 'weight' (or a group): in a mixture every "
				 "source is weighted",
				 src->name);
			return fail_source_field(L, f_weight, i, msg);
		}
		/* A grouped source's share of its group is 1 unless given: the config
		 * holds it, so that check prints it and an explicit 1 has the same digest. */
		if (src->group && src->weight == SF_WEIGHT_UNSET)
			src->weight = SF_WEIGHT_SCALE;
		if (cfg->n_phases && !src->group && src->weight != SF_WEIGHT_UNSET) {
			snprintf(msg, sizeof(msg),
				 "source '%.64s' has a 'weight', but with a schedule the phases "
				 "give "
				 "the weights (a weight applies within a group)",
				 src->name);
			return fail_source_field(L, f_weight, i, msg);
		}
	}
	for (uint32_t g = 0; g < cfg->groups.n; g++) {
		int used = 0;

		for (uint32_t i = 0; i < cfg->n_sources; i++)
			used |= cfg->sources[i].group &&
				!strcmp(cfg->sources[i].group, cfg->groups.v[g].name);
		if (!used) {
			snprintf(msg, sizeof(msg), "group '%.64s' has no source",
				 cfg->groups.v[g].name);
			return fail_field(L, f_mix, msg);
		}
	}
	if (cfg->n_phases && cfg->groups.n)
		return fail_field(L, f_mix,
				  "'groups' gives weights without a schedule; with one, the "
				  "phases weigh the groups");
	for (uint32_t i = 0; !cfg->n_phases && i < cfg->n_sources; i++) {
		const char *group = cfg->sources[i].group;
		int found = 0;

		for (uint32_t g = 0; group && g < cfg->groups.n; g++)
			found |= !strcmp(cfg->groups.v[g].name, group);
		if (group && !found) {
			snprintf(msg, sizeof(msg), "group '%.64s' needs a weight in mixture.groups",
				 group);
			return fail_source_field(L, &source_fields[7], i, msg);
		}
	}
	for (uint32_t p = 0; p < cfg->n_phases; p++) {
		const struct sf_phase_config *ph = &cfg->schedule[p];

		/* Each stage builds a tree of every source, in time that grows with their
		 * square: 64 stages of 4,096 sources took 3 s and 50 MB in every process that
		 * opens the job (1,024 would take about 45 s), 1,024 of 100 sources 0.14 s. */
		if (ph->stages > 1 &&
		    (uint64_t)ph->stages * cfg->n_sources * cfg->n_sources > SF_STAGE_WORK_MAX) {
			const struct mark *m = mark_in(L, &phase_fields[3], (int32_t)p);
			uint64_t most = SF_STAGE_WORK_MAX / cfg->n_sources / cfg->n_sources;

			snprintf(msg, sizeof(msg),
				 "schedule phase %u: 'stages' %u of %u sources: a ramp of that "
				 "many sources takes at most 2^28 / sources^2 stages (%llu here): "
				 "each builds a tree of every source, in time that grows with "
				 "their square",
				 p + 1, ph->stages, cfg->n_sources,
				 (unsigned long long)(most ? most : 1));
			return fail_mark(L, m ? m : mark_of(L, f_mix), msg);
		}
		for (int which = 0; which < 2; which++) {
			const struct sf_weights_config *w = which ? &ph->ramp_to : &ph->weights;

			for (uint32_t j = 0; j < w->n; j++)
				if (weighable(cfg, w->v[j].name) < 0) {
					const struct mark *m =
						mark_in(L, &phase_fields[which ? 2 : 1], (int32_t)p);

					snprintf(msg, sizeof(msg),
						 "schedule phase %u: '%.64s' is neither an "
						 "ungrouped source nor a group",
						 p + 1, w->v[j].name);
					return fail_mark(L, m ? m : mark_of(L, f_mix), msg);
				}
		}
	}
	return 0;
}

/*
 * A tokenizer file replaces the encoding (the default `bytes` gives way to it; one
 * written out is an error, `encoding: null` is how the resolved config says it); the
 * options of a file apply to a file only.
 */
static int check_tokenizer(struct loader *L, struct sf_config *cfg)
{
	const struct field *f_encoding = &tokenizer_fields[0];
	const struct field *f_file = &tokenizer_fields[4];

	if (!cfg->tok_file && !cfg->encoding)
		return fail_field(L, f_encoding,
				  "'encoding' is null and no tokenizer 'file' is set");
	if (cfg->tok_file) {
		if (cfg->encoding && mark_of(L, f_encoding))
			return fail_field(L, f_file,
					  "'file' and 'encoding' name the tokenizer twice: keep "
					  "one");
		if (cfg->vocab || (cfg->vocab_dir && mark_of(L, &tokenizer_fields[2])))
			return fail_field(L, f_file,
					  "'vocab' and 'vocab_dir' belong to 'encoding'; a "
					  "tokenizer 'file' is the vocabulary");
		free(cfg->encoding);
		cfg->encoding = NULL;
		/* $SHMFEED_VOCAB_DIR is for encodings: not kept, nor printed. */
		free(cfg->vocab_dir);
		cfg->vocab_dir = NULL;
		return 0;
	}
	/* A vocabulary the encoding would not read: the job would run without it, unsaid. */
	if (cfg->vocab && (!strcmp(cfg->encoding, "bytes") || !strncmp(cfg->encoding, "char", 4)))
		return fail_field(L, &tokenizer_fields[1],
				  "'vocab' is a .tiktoken file, which encodings bytes and char do not "
				  "read (r50k_base, gpt2, cl100k_base and o200k_base do)");
	/* Written at their defaults (as the resolved config writes them), they are fine. */
	if (cfg->tok_format)
		return fail_field(L, &tokenizer_fields[5],
				  "'format' applies to a tokenizer 'file' only");
	if (cfg->tok_pattern)
		return fail_field(L, &tokenizer_fields[6],
				  "'pattern' applies to a tokenizer 'file' only");
	if (strcmp(cfg->bos, "auto"))
		return fail_field(L, &tokenizer_fields[7],
				  "'bos' applies to a tokenizer 'file' only");
	if (strcmp(cfg->eos, "auto"))
		return fail_field(L, &tokenizer_fields[8],
				  "'eos' applies to a tokenizer 'file' only");
	if (cfg->tok_specials)
		return fail_field(L, &tokenizer_fields[9],
				  "'specials' applies to a tokenizer 'file' only");
	return 0;
}

static int check_config(struct loader *L, struct sf_config *cfg)
{
	char msg[400];
	uint64_t payload, token_bytes;
	int r;

	if (!cfg->n_sources)
		return fail_field(L, &root_fields[1],
				  "'sources' is required: a list of paths or source mappings");
	if (!sf__job_name_valid(cfg->job) && !mark_of(L, &root_fields[0]))
		return sf__err(L->e, SF_E_CONFIG,
			       "%s: the job's name, taken from the file's, is '%.64s'; a name must "
			       "be %s: write `job: NAME`",
			       L->o.file, cfg->job, root_fields[0].expect);
	if (!sf__job_name_valid(cfg->job)) {
		snprintf(msg, sizeof(msg), "'job' must be %s; got '%.64s'", root_fields[0].expect,
			 cfg->job);
		return fail_field(L, &root_fields[0], msg);
	}
	/* The node's ranks: a static base as given; `auto` (and, when the job spans more
	 * ranks than this node serves, an unset base) takes them from the first rank that
	 * attaches (common/node_ranks.h). */
	if (cfg->rank_base == RANK_BASE_UNSET)
		cfg->rank_base =
			cfg->local_ranks && cfg->local_ranks < cfg->world_size ? RANK_BASE_AUTO : 0;
	cfg->rank_base_auto = cfg->rank_base == RANK_BASE_AUTO;
	if (cfg->rank_base_auto) {
		/* Global ranks are rank_base + local rank, so 0 until the base is known. */
		cfg->rank_base = 0;
		if (!cfg->local_ranks) {
			snprintf(msg, sizeof(msg),
				 "'rank_base: auto' needs local_ranks: the ranks on this node "
				 "(torchrun's --nproc_per_node)");
			return fail_first(L, &consumer_fields[2], &consumer_fields[1],
					  &consumer_fields[0], msg);
		}
		if (cfg->local_ranks > cfg->world_size) {
			snprintf(msg, sizeof(msg), "'local_ranks' %u is more than world_size %u",
				 cfg->local_ranks, cfg->world_size);
			return fail_first(L, &consumer_fields[1], &consumer_fields[0], NULL, msg);
		}
		goto ranks_done;
	}
	if (cfg->rank_base >= cfg->world_size) {
		snprintf(msg, sizeof(msg), "'rank_base' %u must be below world_size %u",
			 cfg->rank_base, cfg->world_size);
		return fail_field(L, &consumer_fields[2], msg);
	}
	/* `auto` never caps silently: a node left with ranks nobody serves would hang. */
	if (!cfg->local_ranks && cfg->world_size - cfg->rank_base > SF_MAX_RANKS) {
		snprintf(msg, sizeof(msg),
			 "'local_ranks: auto' means world_size - rank_base = %u ranks on this "
			 "node, more than the %u one job serves: set local_ranks and rank_base to "
			 "this node's ranks",
			 cfg->world_size - cfg->rank_base, SF_MAX_RANKS);
		return fail_first(L, &consumer_fields[1], &consumer_fields[0], &consumer_fields[2],
				  msg);
	}
	if (!cfg->local_ranks)
		cfg->local_ranks = cfg->world_size - cfg->rank_base;
	if ((uint64_t)cfg->rank_base + cfg->local_ranks > cfg->world_size) {
		/* A base of auto, or none given, is no base to name (it read "from rank_base
		 * 0" of one the job never had: a review). */
		if (cfg->rank_base_auto || !mark_of(L, &consumer_fields[2]))
			snprintf(msg, sizeof(msg),
				 "'local_ranks' %u is more than world_size %u: a node serves some "
				 "of the world's ranks",
				 cfg->local_ranks, cfg->world_size);
		else
			snprintf(msg, sizeof(msg),
				 "'local_ranks' %u from rank_base %u goes past world_size %u: this "
				 "node's ranks must be global ranks rank_base .. "
				 "rank_base+local_ranks-1",
				 cfg->local_ranks, cfg->rank_base, cfg->world_size);
		return fail_first(L, &consumer_fields[1], &consumer_fields[2], &consumer_fields[0],
				  msg);
	}
ranks_done:
	if (cfg->producers + cfg->local_ranks > SF_SLOT_OWNER_MAX) {
		snprintf(msg, sizeof(msg), "producers (%u) plus local_ranks (%u) exceed %u",
			 cfg->producers, cfg->local_ranks, SF_SLOT_OWNER_MAX);
		return fail_field(L, &producer_fields[0], msg);
	}
	if (cfg->doc_starts > cfg->seq_len + 1) {
		snprintf(msg, sizeof(msg), "'doc_starts' %u exceeds the %u tokens of a sequence",
			 cfg->doc_starts, cfg->seq_len + 1);
		return fail_field(L, &sampling_fields[3], msg);
	}
	/* At the job's token width: 2 bytes for uint16, and for auto too until the sources
	 * say more (the arena's own check at start sees the resolved width). B <= 2^16 and
	 * T + 1 <= 2^32 keep every product below 2^51. */
	token_bytes = cfg->dtype == SF_DTYPE_I32 ? 4 : 2;
	payload = (uint64_t)cfg->batch_size * (cfg->seq_len + 1) * token_bytes;
	if (cfg->doc_starts)
		payload = sf__doc_starts_offset(cfg->batch_size, cfg->seq_len + 1, token_bytes) +
			  (uint64_t)cfg->batch_size * cfg->doc_starts * 4;
	if (payload > SF_PAYLOAD_MAX) {
		snprintf(msg, sizeof(msg),
			 "a batch of size %u x %u %s tokens%s needs %llu bytes per slot; a slot "
			 "holds at most %llu (its length is a 32-bit count): lower batch.size or "
			 "batch.seq_len",
			 cfg->batch_size, cfg->seq_len + 1, token_bytes == 2 ? "uint16" : "int32",
			 cfg->doc_starts ? " and their document starts" : "",
			 (unsigned long long)payload, (unsigned long long)SF_PAYLOAD_MAX);
		return fail_field(L, &batch_fields[0], msg);
	}
	if (cfg->producer_cpus) {
		cpu_set_t cpus;

		r = sf__cpu_list_allowed(cfg->producer_cpus, &cpus, msg, sizeof(msg));
		if (r < 0)
			return r == SF_E_CONFIG ? fail_field(L, &producer_fields[3], msg)
						: sf__err(L->e, r, "%s", msg);
	}
	r = check_tokenizer(L, cfg);
	if (r < 0)
		return r;
	/* nanoGPT's char-level vocabulary is the set of characters of its input. */
	if (cfg->encoding && !strcmp(cfg->encoding, "char")) {
		char *v = NULL;

		struct stat sb;

		/* One file: a pattern matches any number, but a file whose name has *?[ is one. */
		if (cfg->n_sources != 1 || cfg->sources[0].n_paths != 1 ||
		    (strpbrk(cfg->sources[0].paths[0], "*?[") &&
		     (stat(cfg->sources[0].paths[0], &sb) < 0 || !S_ISREG(sb.st_mode))))
			return fail_field(
				L, &tokenizer_fields[0],
				"'encoding: char' takes its characters from the one source "
				"file; with several, write char:CORPUS");
		if (asprintf(&v, "char:%s", cfg->sources[0].paths[0]) < 0)
			return sf__err(L->e, -ENOMEM, "out of memory");
		free(cfg->encoding);
		cfg->encoding = v;
	}
	if (cfg->encoding && !strncmp(cfg->encoding, "char:", 5)) {
		r = check_char_corpus(L, cfg, cfg->encoding + 5);
		if (r < 0)
			return r;
	}
	r = check_endpoint(L, cfg);
	if (r == 0)
		r = check_mixture(L, cfg);
	if (r < 0)
		return r;
	if (!!cfg->curve_secret_key_file != !!cfg->curve_allowed_clients)
		return fail_field(
			L, cfg->curve_secret_key_file ? &control_fields[2] : &control_fields[3],
			"CURVE needs both curve_secret_key_file and curve_allowed_clients");
	if (cfg->insecure_tcp && cfg->curve_secret_key_file)
		return fail_field(L, &control_fields[4],
				  "'insecure_tcp' and the CURVE keys exclude each other");
	if (cfg->insecure_tcp && (!cfg->endpoint || strncmp(cfg->endpoint, "tcp://", 6)))
		return fail_field(L, &control_fields[4],
				  "'insecure_tcp' applies to a tcp:// endpoint only");
	if (cfg->metrics) {
		int ipv6;
		uint16_t port;

		if (sf__config_metrics_address(cfg->metrics, &ipv6, &port) < 0) {
			snprintf(msg, sizeof(msg),
				 "'metrics' must be %s; got '%.64s' (metrics are served on "
				 "loopback only: expose them through a local agent or the "
				 "metrics_file)",
				 control_fields[6].expect, cfg->metrics);
			return fail_field(L, &control_fields[6], msg);
		}
	}
	return 0;
}

/* The most nodes a config may expand to through anchors and aliases. */
#define CONFIG_MAX_NODES 1000000

static int too_many_nodes(const char *name, struct sf_err *e)
{
	return sf__err(e, SF_E_CONFIG,
		       "%s: the config expands to more than %d values through its anchors and "
		       "aliases",
		       name, CONFIG_MAX_NODES);
}

/* Push node `id` on the walk's stack, which grows as needed: every node on it is one
 * more value to visit, so it never needs more than CONFIG_MAX_NODES. */
static int push_node(int **stack, int *top, int *cap, int id, const char *name,
		     struct sf_err *e)
{
	if (*top == *cap) {
		int ncap = *cap ? *cap * 2 : 64, *grown;

		if (*cap >= CONFIG_MAX_NODES)
			return too_many_nodes(name, e);
		grown = realloc(*stack, (size_t)ncap * sizeof(*grown));
		if (!grown)
			return sf__err(e, -ENOMEM, "out of memory");
		*stack = grown;
		*cap = ncap;
	}
	(*stack)[(*top)++] = id;
	return 0;
}

/* The n-th node under node `n` (a mapping's keys and values in turn), or 0 past them. */
static int child_node(const yaml_node_t *n, size_t k)
{
	if (n->type == YAML_SEQUENCE_NODE)
		return k < (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
			       ? n->data.sequence.items.start[k]
			       : 0;
	if (n->type == YAML_MAPPING_NODE &&
	    k / 2 < (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start))
		return k % 2 ? n->data.mapping.pairs.start[k / 2].value
			     : n->data.mapping.pairs.start[k / 2].key;
	return 0;
}

/* A node on the walk's path, and the next of its children to visit. */
struct walk_step {
	int id;
	size_t next;
};

/*
 * A value that holds an alias of itself (`a: &x [*x]`) expands without end: refused by
 * where it starts. A depth-first walk that meets a node on its own path.
 */
static int refuse_loops(const char *name, yaml_document_t *doc, struct sf_err *e)
{
	const size_t n = (size_t)(doc->nodes.top - doc->nodes.start);
	unsigned char *state = calloc(n + 1, 1); /* 1: on the path, 2: done */
	struct walk_step *path = malloc((n + 1) * sizeof(*path));
	size_t depth = 0;
	int r = 0;

	if (!state || !path) {
		free(state);
		free(path);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	path[depth++] = (struct walk_step){1, 0};
	state[1] = 1;
	while (depth && r == 0) {
		const int id = path[depth - 1].id;
		const int c = child_node(yaml_document_get_node(doc, id), path[depth - 1].next++);

		if (c <= 0 || (size_t)c > n) {
			state[id] = 2;
			depth--;
		} else if (state[c] == 1) {
			const yaml_node_t *loop = yaml_document_get_node(doc, c);

			r = sf__err(e, SF_E_CONFIG,
				    "%s:%zu:%zu: this value holds an alias of itself, which never "
				    "ends",
				    name, loop->start_mark.line + 1, loop->start_mark.column + 1);
		} else if (state[c] == 0) {
			state[c] = 1;
			path[depth++] = (struct walk_step){c, 0};
		}
	}
	free(state);
	free(path);
	return r;
}

/*
 * Every node the loader will read, aliases followed: fewer than CONFIG_MAX_NODES (a small
 * file of aliases of aliases expands without bound: 290 KB took gigabytes), and no
 * scalar holding a NUL, which C strings would silently cut (a key, a name, a path).
 */
static int check_nodes(const char *name, yaml_document_t *doc, struct sf_err *e)
{
	int *stack = NULL, top = 0, cap = 0, r = 0;
	uint64_t visits = 0;

	if (yaml_document_get_root_node(doc))
		r = refuse_loops(name, doc, e);
	if (r == 0 && yaml_document_get_root_node(doc))
		r = push_node(&stack, &top, &cap, 1, name, e);
	while (top > 0 && r == 0) {
		yaml_node_t *n = yaml_document_get_node(doc, stack[--top]);

		if (!n)
			continue;
		if (++visits > CONFIG_MAX_NODES)
			r = too_many_nodes(name, e);
		else if (n->type == YAML_SCALAR_NODE &&
			 strlen((const char *)n->data.scalar.value) != n->data.scalar.length)
			r = sf__err(e, SF_E_CONFIG,
				    "%s:%zu:%zu: a value holds a NUL character, which no setting can",
				    name, n->start_mark.line + 1, n->start_mark.column + 1);
		else if (n->type == YAML_SEQUENCE_NODE)
			for (yaml_node_item_t *i = n->data.sequence.items.start;
			     i < n->data.sequence.items.top && r == 0; i++)
				r = push_node(&stack, &top, &cap, *i, name, e);
		else if (n->type == YAML_MAPPING_NODE)
			for (yaml_node_pair_t *pr = n->data.mapping.pairs.start;
			     pr < n->data.mapping.pairs.top && r == 0; pr++)
				if ((r = push_node(&stack, &top, &cap, pr->key, name, e)) == 0)
					r = push_node(&stack, &top, &cap, pr->value, name, e);
	}
	free(stack);
	return r;
}

/* Deeper than any job file nests (a schedule's weights are at depth 5). */
#define CONFIG_MAX_DEPTH 64

/*
 * Refuse, before the document is loaded, nesting deeper than CONFIG_MAX_DEPTH (libyaml
 * takes time quadratic in the depth to load it, 33 s for 100,000 '[', while its events
 * reach the limit at once) and YAML tags, which the loader would ignore (`!include x`
 * read as the path "x"). A syntax error is left for the load to report. The positions
 * of the aliases go to *ret_aliases (the loaded document keeps none), for messages.
 */
static int check_events(const char *name, const char *text, size_t len, yaml_mark_t **ret_aliases,
			size_t *ret_n, struct sf_err *e)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	size_t cap = 0;
	int depth = 0, r = 0;

	if (!yaml_parser_initialize(&parser))
		return sf__err(e, -ENOMEM, "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	while (yaml_parser_parse(&parser, &ev)) {
		const int end = ev.type == YAML_STREAM_END_EVENT;
		const yaml_char_t *tag = ev.type == YAML_SCALAR_EVENT ? ev.data.scalar.tag
					 : ev.type == YAML_SEQUENCE_START_EVENT
						 ? ev.data.sequence_start.tag
					 : ev.type == YAML_MAPPING_START_EVENT ? ev.data.mapping_start.tag
									       : NULL;

		if (tag)
			r = sf__err(e, SF_E_CONFIG,
				    "%s:%zu:%zu: a YAML tag (%.40s): tags are not read (no !include, "
				    "no type casts); write the value itself",
				    name, ev.start_mark.line + 1, ev.start_mark.column + 1,
				    (const char *)tag);
		if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT)
			depth++;
		else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT)
			depth--;
		if (depth > CONFIG_MAX_DEPTH && r == 0)
			r = sf__err(e, SF_E_CONFIG,
				    "%s:%zu:%zu: nested deeper than %d levels; not a job file", name,
				    ev.start_mark.line + 1, ev.start_mark.column + 1,
				    CONFIG_MAX_DEPTH);
		if (ev.type == YAML_ALIAS_EVENT && r == 0 && *ret_n == cap) {
			size_t grown = cap ? 2 * cap : 16;
			yaml_mark_t *more = realloc(*ret_aliases, grown * sizeof(*more));

			if (more) {
				*ret_aliases = more;
				cap = grown;
			} else {
				r = sf__err(e, -ENOMEM, "out of memory");
			}
		}
		if (ev.type == YAML_ALIAS_EVENT && r == 0)
			(*ret_aliases)[(*ret_n)++] = ev.start_mark;
		yaml_event_delete(&ev);
		if (end || r < 0)
			break;
	}
	yaml_parser_delete(&parser);
	return r;
}

/* The parser's failure, at its position. */
static int invalid_yaml(const char *name, const char *text, size_t len,
			const yaml_parser_t *parser, struct sf_err *e)
{
	size_t line = parser->problem_mark.line, col = parser->problem_mark.column;

	/* A byte the reader refuses (invalid UTF-8, a control character) has no mark: its
	 * offset tells where it is. */
	if (parser->error == YAML_READER_ERROR) {
		line = col = 0;
		for (size_t i = 0; i < parser->problem_offset && i < len; i++) {
			if (text[i] == '\n')
				line++, col = 0;
			else if (((unsigned char)text[i] & 0xc0) != 0x80)
				col++;
		}
	}
	return sf__err(e, SF_E_CONFIG, "%s:%zu:%zu: invalid YAML: %s%s%s", name, line + 1, col + 1,
		       parser->problem ? parser->problem : "syntax error",
		       parser->context ? " " : "", parser->context ? parser->context : "");
}

/*
 * Parse `len` bytes of YAML into `doc`, and the positions of its aliases into `L`, which
 * the caller frees (forget_aliases()) whether it succeeds or not; a syntax error is
 * reported at its position.
 */
static int parse_document(struct loader *L, const char *name, const char *text, size_t len,
			  yaml_document_t *doc)
{
	struct sf_err *e = L->e;
	yaml_mark_t *aliases = NULL;
	yaml_parser_t parser;
	yaml_document_t more;
	size_t n_aliases = 0;
	int ok, r;

	r = check_events(name, text, len, &aliases, &n_aliases, e);
	L->aliases = aliases;
	L->n_aliases = n_aliases;
	if (r < 0)
		return r;
	if (!yaml_parser_initialize(&parser))
		return sf__err(e, -ENOMEM, "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	ok = yaml_parser_load(&parser, doc);
	if (!ok) {
		r = invalid_yaml(name, text, len, &parser, e);
		yaml_parser_delete(&parser);
		return r;
	}
	/* A second document ("---") would be silently ignored: one job, one document. What
	 * follows the first that is no document is a syntax error, said as one (it was
	 * called a second document, at the line where the parser stopped; a review). */
	if (yaml_document_get_root_node(doc)) {
		ok = yaml_parser_load(&parser, &more);
		r = ok ? 0 : invalid_yaml(name, text, len, &parser, e);
		if (ok && yaml_document_get_root_node(&more))
			r = sf__err(e, SF_E_CONFIG,
				    "%s:%zu: a second YAML document: a job file holds one", name,
				    (size_t)more.start_mark.line + 1);
		if (ok)
			yaml_document_delete(&more);
		if (r < 0) {
			yaml_parser_delete(&parser);
			yaml_document_delete(doc);
			return r;
		}
	}
	yaml_parser_delete(&parser);
	r = check_nodes(name, doc, e);
	if (r < 0)
		yaml_document_delete(doc);
	return r;
}

static char *job_from_path(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *b = slash ? slash + 1 : path;
	size_t n = strlen(b);

	if (n > 5 && !strcmp(b + n - 5, ".yaml"))
		n -= 5;
	else if (n > 4 && !strcmp(b + n - 4, ".yml"))
		n -= 4;
	return strndup(b, n);
}

/* The directory of `path`, absolute (as written when it cannot be resolved). */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir, *abs;

	if (!slash)
		dir = strdup(".");
	else if (slash == path)
		dir = strdup("/");
	else
		dir = strndup(path, (size_t)(slash - path));
	abs = dir ? realpath(dir, NULL) : NULL;
	if (!abs)
		return dir;
	free(dir);
	return abs;
}

static void forget_aliases(struct loader *L)
{
	free(L->aliases);
	L->aliases = NULL;
	L->n_aliases = 0;
}

static int apply_text(struct loader *L, const char *text, size_t len, struct sf_config *cfg)
{
	yaml_document_t doc;
	yaml_node_t *root;
	int r;

	r = parse_document(L, L->o.file, text, len, &doc);
	if (r < 0) {
		forget_aliases(L);
		return r;
	}
	L->doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (!root)
		r = sf__err(L->e, SF_E_CONFIG,
			    "%s:1:1: the file is empty; expected a mapping "
			    "with at least 'sources'",
			    L->o.file);
	else
		r = apply_field(L,
				&(struct field){"the job file", T_SECTION, 0, 0, 0, NULL,
						root_fields, 0, NULL},
				root, cfg);
	L->doc = NULL;
	yaml_document_delete(&doc);
	forget_aliases(L);
	return r;
}

/* Find the field named by a dotted key: "job", "batch.size". */
/* The section a dotted key ("batch.size") names before its dot, or NULL. */
static const struct field *section_of(const char *key)
{
	const char *dot = strchr(key, '.');

	if (dot)
		for (const struct field *f = root_fields; f->key; f++)
			if (f->type == T_SECTION && strlen(f->key) == (size_t)(dot - key) &&
			    !strncmp(f->key, key, (size_t)(dot - key)))
				return f;
	return NULL;
}

static const struct field *field_by_key(const char *key)
{
	const struct field *fields = root_fields;
	const char *dot = strchr(key, '.');

	if (dot) {
		const struct field *sec = section_of(key);

		if (!sec)
			return NULL;
		fields = sec->sub;
		key = dot + 1;
	}
	for (const struct field *f = fields; f->key; f++)
		if (!strcmp(f->key, key))
			return f;
	return NULL;
}

/* An override of no field: the keys of its section (or the top level's) that it could
 * have meant, as a typo in the file lists them. */
static int unknown_override(struct loader *L, const char *key)
{
	const struct field *sec = section_of(key);
	const char *dot = strchr(key, '.');
	char keys[512];

	/* Into a field's value (mixture.schedule.0.until_step): the field is set whole. */
	if (dot && (dot = strchr(dot + 1, '.')) && (size_t)(dot - key) < sizeof(keys)) {
		const struct field *f;

		memcpy(keys, key, (size_t)(dot - key));
		keys[dot - key] = 0;
		f = field_by_key(keys);
		if (f && f->type != T_SECTION)
			return sf__err(L->e, SF_E_CONFIG,
				       "--set %s: '%s' is set whole, not in parts: --set "
				       "'%s=VALUE', VALUE written in YAML as in the file",
				       key, keys, keys);
	}

	keys_list(sec ? sec->sub : root_fields, keys, sizeof(keys));
	return sf__err(L->e, SF_E_CONFIG, "--set %s: no such field%s%s%s; expected one of: %s%s",
		       key, sec ? " in section '" : "", sec ? sec->key : "", sec ? "'" : "", keys,
		       sec ? "" : " (a section's as SECTION.KEY)");
}

static int apply_override(struct loader *L, const char *ov, struct sf_config *cfg)
{
	const char *eq = strchr(ov, '=');
	struct sf_source_config *source = NULL;
	const struct field *f;
	char key[64], name[96];
	yaml_document_t doc;
	yaml_node_t *root;
	int r;

	if (!eq || eq == ov)
		return sf__err(L->e, SF_E_CONFIG,
			       "--set '%.64s': expected KEY=VALUE, e.g. batch.size=16", ov);
	/* Longer than any field's name (sources.N.KEY included). */
	if ((size_t)(eq - ov) >= sizeof(key))
		return sf__err(L->e, SF_E_CONFIG, "--set %.*s...: no such field", 48, ov);
	memcpy(key, ov, (size_t)(eq - ov));
	key[eq - ov] = 0;
	/* sources.N.KEY: one field of source N. */
	if (!strncmp(key, "sources.", 8) && key[8] >= '0' && key[8] <= '9') {
		char *dot;
		unsigned long i = strtoul(key + 8, &dot, 10);

		f = NULL;
		if (*dot == '.')
			for (const struct field *sf = source_fields; sf->key; sf++)
				if (!strcmp(sf->key, dot + 1))
					f = sf;
		if (!f)
			return sf__err(L->e, SF_E_CONFIG,
				       "--set %s: no such field; a source's are sources.N.KEY with "
				       "KEY one of paths, format, text_field, separator, on_error, "
				       "index, name, group, weight",
				       key);
		if (i >= cfg->n_sources)
			return sf__err(L->e, SF_E_CONFIG,
				       "--set %s: the job has %u source%s (0..%u)", key,
				       cfg->n_sources, cfg->n_sources == 1 ? "" : "s",
				       cfg->n_sources - 1);
		source = &cfg->sources[i];
	} else {
		f = field_by_key(key);
	}
	if (f && f->type == T_SECTION) {
		char keys[512];

		keys_list(f->sub, keys, sizeof(keys));
		return sf__err(L->e, SF_E_CONFIG,
			       "--set %s: '%s' is a section: set one of its keys as %s.KEY (%s)",
			       key, key, key, keys);
	}
	if (!f)
		return unknown_override(L, key);
	snprintf(name, sizeof(name), "--set %s", key);
	L->o = (struct origin){name, NULL, 1};
	r = parse_document(L, name, eq + 1, strlen(eq + 1), &doc);
	/* An override's messages name no position. */
	forget_aliases(L);
	if (r < 0)
		return r;
	L->doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (!root) {
		/* "KEY=" sets the empty value: null for the fields that take it. */
		yaml_document_delete(&doc);
		if (!yaml_document_initialize(&doc, NULL, NULL, NULL, 1, 1))
			return sf__err(L->e, -ENOMEM, "out of memory");
		yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE);
		root = yaml_document_get_root_node(&doc);
	}
	if (source)
		L->source = (int32_t)(source - cfg->sources);
	r = apply_field(L, f, root, source ? (void *)source : cfg);
	if (r == 0 && source)
		r = source_done(L, root, source);
	L->source = -1;
	L->doc = NULL;
	yaml_document_delete(&doc);
	return r;
}

/*
 * Opened without waiting for a writer, then read as usual: a FIFO nobody writes to reads
 * as empty instead of blocking for good, while a shell's <(...) pipe is read whole.
 */
static int read_file(const char *path, char **ret_text, size_t *ret_len, struct sf_err *e)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	FILE *f = NULL;
	char *text;
	size_t n;

	if (fd >= 0 && fcntl(fd, F_SETFL, 0) == 0)
		f = fdopen(fd, "rb");
	if (!f) {
		int r = -errno;

		if (fd >= 0)
			close(fd);
		return sf__err(e, r, "cannot open job file %s: %s", path, strerror(-r));
	}
	text = malloc(CONFIG_MAX_BYTES + 1);
	if (!text) {
		fclose(f);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	errno = 0;
	n = fread(text, 1, CONFIG_MAX_BYTES + 1, f);
	if (ferror(f)) {
		const int code = errno ? errno : EIO;
		int r = sf__err(e, -code, "cannot read job file %s: %s", path, strerror(code));

		fclose(f);
		free(text);
		return r;
	}
	fclose(f);
	if (n > CONFIG_MAX_BYTES) {
		free(text);
		return sf__err(e, SF_E_CONFIG, "%s: larger than %u bytes; not a job file", path,
			       CONFIG_MAX_BYTES);
	}
	*ret_text = text;
	*ret_len = n;
	return 0;
}

static int load(const char *name, const char *text, size_t len, const char *base_dir,
		const char *const *overrides, uint32_t n_overrides, struct sf_config *ret_cfg,
		struct sf_err *e)
{
	const char *env_vocab = getenv("SHMFEED_VOCAB_DIR");
	struct loader L = {.e = e, .source = -1};
	struct sf_config cfg;
	char cwd[PATH_MAX];
	int r = 0;

	sf__config_defaults(&cfg);
	/* Resolved by check_config(): told apart from an explicit 0 until then. */
	cfg.rank_base = RANK_BASE_UNSET;
	cfg.path = strdup(name ? name : "(defaults)");
	cfg.job = name ? job_from_path(name) : strdup("shmfeed");
	cfg.encoding = strdup("bytes");
	cfg.bos = strdup("auto");
	cfg.eos = strdup("auto");
	if (env_vocab && env_vocab[0]) {
		/* From the current directory, so that a printed config means the same to a
		 * process started elsewhere. */
		struct origin here = {NULL, getcwd(cwd, sizeof(cwd)), 0};

		cfg.vocab_dir = resolve_path(&here, env_vocab);
	}
	if (!cfg.path || !cfg.job || !cfg.encoding || !cfg.bos || !cfg.eos ||
	    (env_vocab && env_vocab[0] && !cfg.vocab_dir)) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto fail;
	}
	if (text) {
		L.o = (struct origin){name, base_dir, 0};
		r = apply_text(&L, text, len, &cfg);
		if (r < 0)
			goto fail;
	}
	for (uint32_t i = 0; i < n_overrides; i++) {
		r = apply_override(&L, overrides[i], &cfg);
		if (r < 0)
			goto fail;
	}
	L.o = (struct origin){cfg.path, NULL, 0};
	r = check_config(&L, &cfg);
	if (r < 0)
		goto fail;
	free(L.marks);
	*ret_cfg = cfg;
	return 0;
fail:
	free(L.marks);
	sf__config_free(&cfg);
	return r;
}

int sf__config_load_overrides(const char *path, const char *const *overrides, uint32_t n_overrides,
			      struct sf_config *ret_cfg, struct sf_err *e)
{
	char *text = NULL, *dir = NULL;
	size_t len = 0;
	int r;

	if (path) {
		struct stat st;

		r = read_file(path, &text, &len, e);
		if (r < 0)
			return r;
		/* A job file from a pipe (`<(...)`, /dev/stdin, also redirected from a file) has
		 * no directory of its own: its relative paths are the current directory's, as
		 * the shell meant them. */
		dir = dir_of((stat(path, &st) == 0 && !S_ISREG(st.st_mode)) ||
					     !strncmp(path, "/dev/", 5) ||
					     !strncmp(path, "/proc/", 6)
				     ? "./"
				     : path);
		if (!dir) {
			free(text);
			return sf__err(e, -ENOMEM, "out of memory");
		}
	}
	r = load(path, text, len, dir, overrides, n_overrides, ret_cfg, e);
	free(text);
	free(dir);
	return r;
}

int sf__config_load(const char *path, struct sf_config *ret_cfg, struct sf_err *e)
{
	return sf__config_load_overrides(path, NULL, 0, ret_cfg, e);
}

int sf__config_load_string(const char *name, const char *yaml, size_t len,
			   struct sf_config *ret_cfg, struct sf_err *e)
{
	if (len > CONFIG_MAX_BYTES)
		return sf__err(e, SF_E_CONFIG, "%s: larger than %u bytes; not a job file", name,
			       CONFIG_MAX_BYTES);
	return load(name, yaml, len, NULL, NULL, 0, ret_cfg, e);
}

/* The YAML escape of the line break at `c` that is not ASCII (U+0085, U+2028, U+2029):
 * YAML reads these raw as line breaks, even inside quotes. Else 0. */
static char unicode_break(const unsigned char *c)
{
	if (c[0] == 0xc2 && c[1] == 0x85)
		return 'N';
	if (c[0] == 0xe2 && c[1] == 0x80 && (c[2] == 0xa8 || c[2] == 0xa9))
		return c[2] == 0xa8 ? 'L' : 'P';
	return 0;
}

/* A YAML double-quoted scalar, or null. */
static void write_string(FILE *out, const char *s)
{
	if (!s) {
		fputs("null", out);
		return;
	}
	fputc('"', out);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		char br = unicode_break(c);

		if (br) {
			fprintf(out, "\\%c", br);
			c += br == 'N' ? 1 : 2;
		} else if (*c == '"' || *c == '\\')
			fprintf(out, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(out, "\\x%02x", *c);
		else
			fputc(*c, out);
	}
	fputc('"', out);
}

void sf__config_write_text(FILE *out, const char *s)
{
	for (const unsigned char *c = (const unsigned char *)s; *c; c++)
		if (*c < 0x20 || *c == 0x7f || *c == '"' || unicode_break(c)) {
			write_string(out, s);
			return;
		}
	fputs(s, out);
}

static void write_weight(FILE *out, uint64_t w)
{
	char frac[16];
	int n;

	if (w == SF_WEIGHT_UNSET) {
		fputs("null", out);
		return;
	}
	n = snprintf(frac, sizeof(frac), "%09llu", (unsigned long long)(w % SF_WEIGHT_SCALE));
	while (n > 1 && frac[n - 1] == '0')
		frac[--n] = 0;
	fprintf(out, "%llu.%s", (unsigned long long)(w / SF_WEIGHT_SCALE), frac);
}

static void write_weights(FILE *out, const struct sf_weights_config *w)
{
	fputc('{', out);
	for (uint32_t i = 0; i < w->n; i++) {
		fputs(i ? ", " : "", out);
		write_string(out, w->v[i].name);
		fputs(": ", out);
		write_weight(out, w->v[i].weight);
	}
	fputc('}', out);
}

static void write_schedule(FILE *out, const struct sf_config *cfg, int indent)
{
	for (uint32_t i = 0; i < cfg->n_phases; i++) {
		const struct sf_phase_config *ph = &cfg->schedule[i];

		fprintf(out, "\n%*s- until_step: ", indent, "");
		if (ph->until_step == UINT64_MAX)
			fputs("null", out);
		else
			fprintf(out, "%llu", (unsigned long long)ph->until_step);
		fprintf(out, "\n%*s  weights: ", indent, "");
		write_weights(out, &ph->weights);
		if (ph->ramp_to.v) {
			fprintf(out, "\n%*s  ramp_to: ", indent, "");
			write_weights(out, &ph->ramp_to);
			if (ph->stages)
				fprintf(out, "\n%*s  stages: %u", indent, "", ph->stages);
		}
	}
}

static void write_fields(FILE *out, const struct field *fields, const void *base, int indent)
{
	for (const struct field *f = fields; f->key; f++) {
		const char *p = (const char *)base + f->off;

		if (f->type == T_SECTION || f->type == T_SOURCES)
			continue;
		if (f->type == T_SCHEDULE && !((const struct sf_config *)base)->n_phases)
			continue;
		if (f->type == T_WEIGHTS && !((const struct sf_weights_config *)p)->n)
			continue;
		fprintf(out, "%*s%s: ", indent, "", f->key);
		switch (f->type) {
		case T_STRING:
		case T_PATH:
		case T_CHOICE:
			write_string(out, *(char *const *)p);
			break;
		case T_ENUM:
			fputs(f->names[*(const uint32_t *)p], out);
			break;
		case T_U32:
			/* Only consumers.rank_base has F_AUTO_MAX; once resolved, its auto
			 * is a flag beside it. */
			if ((f->flags & F_AUTO_MAX) &&
			    ((const struct sf_config *)base)->rank_base_auto)
				fputs("auto", out);
			else
				fprintf(out, "%u", *(const uint32_t *)p);
			break;
		case T_U64:
			if ((f->flags & F_NULLABLE) && *(const uint64_t *)p == UINT64_MAX)
				fputs("null", out);
			else
				fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)p);
			break;
		case T_MS:
			fprintf(out, "%ums", *(const uint32_t *)p);
			break;
		case T_BOOL:
			fputs(*(const uint32_t *)p ? "true" : "false", out);
			break;
		case T_WEIGHT:
			write_weight(out, *(const uint64_t *)p);
			break;
		case T_WEIGHTS:
			write_weights(out, (const struct sf_weights_config *)p);
			break;
		case T_SCHEDULE:
			write_schedule(out, base, indent + 2);
			break;
		case T_PATHS: {
			const struct sf_source_config *src = base;

			fputc('[', out);
			for (uint32_t i = 0; i < src->n_paths; i++) {
				if (i)
					fputs(", ", out);
				write_string(out, src->paths[i]);
			}
			fputc(']', out);
			break;
		}
		default:
			break;
		}
		fputc('\n', out);
	}
}

int sf__config_write(const struct sf_config *cfg, FILE *out)
{
	fputs("job: ", out);
	write_string(out, cfg->job);
	fputs("\nsources:\n", out);
	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		const struct sf_source_config *src = &cfg->sources[i];

		fputs("  - ", out);
		/* The first key follows the dash; the others are indented under it. */
		fputs("paths: ", out);
		fputc('[', out);
		for (uint32_t j = 0; j < src->n_paths; j++) {
			if (j)
				fputs(", ", out);
			write_string(out, src->paths[j]);
		}
		fputs("]\n", out);
		write_fields(out, source_fields + 1, src, 4);
	}
	for (const struct field *f = root_fields; f->key; f++) {
		/* A mixture of per-source weights alone has nothing of its own to write. */
		if (f->type != T_SECTION ||
		    (f->sub == mixture_fields && (!cfg->mixture || (!cfg->groups.n && !cfg->n_phases))))
			continue;
		fprintf(out, "%s:\n", f->key);
		write_fields(out, f->sub, cfg, 2);
	}
	return ferror(out) ? -EIO : 0;
}

static void digest_str(XXH3_state_t *st, const char *s)
{
	uint32_t n = s ? (uint32_t)strlen(s) + 1 : 0;

	XXH3_64bits_update(st, &n, sizeof(n));
	if (s)
		XXH3_64bits_update(st, s, n);
}

static void digest_u64(XXH3_state_t *st, uint64_t v)
{
	XXH3_64bits_update(st, &v, sizeof(v));
}

static void digest_weights(XXH3_state_t *st, const struct sf_weights_config *w)
{
	digest_u64(st, w->n);
	for (uint32_t i = 0; i < w->n; i++) {
		digest_str(st, w->v[i].name);
		digest_u64(st, w->v[i].weight);
	}
}

/* A file's identity for the digest: its path, size and modification time; whether it
 * is there, with its stat in *sb. */
static bool digest_file_stat(XXH3_state_t *st, const char *path, struct stat *sb)
{
	digest_str(st, path);
	if (stat(path, sb) != 0)
		return false;
	digest_u64(st, (uint64_t)sb->st_size);
	digest_u64(st, (uint64_t)sb->st_mtim.tv_sec * 1000000000u + (uint64_t)sb->st_mtim.tv_nsec);
	return true;
}

static void digest_file(XXH3_state_t *st, const char *path)
{
	struct stat sb;

	digest_file_stat(st, path, &sb);
}

/*
 * The files a source's digest has named, by identity: a file under a second name (a hard
 * or symbolic link) is read once (paths.c), so the digest says which of its names repeat
 * an earlier one. A link broken by a copy that kept size and time (`cp -p`) made the
 * source read the file twice, under the same digest (a review). Names are compared as
 * spelled, less repeated slashes and "./" (a directory's "d//a.bin" and a glob's
 * "d/a.bin" are one name); sorted once, at the source's end (seen_digest()).
 */
struct digest_seen {
	struct seen_file {
		uint64_t dev, ino, name, order; /* name: a hash of the name as compared */
	} * v;
	size_t n, cap;
};

/* A hash of `path` without repeated slashes and "./" components. */
static uint64_t name_hash(const char *path)
{
	XXH3_state_t st;

	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	for (const char *p = path; *p;) {
		if (*p == '/' && p[1] == '/') {
			p++;
		} else if ((p == path || p[-1] == '/') && p[0] == '.' && p[1] == '/') {
			p += 2;
		} else {
			XXH3_64bits_update(&st, p, 1);
			p++;
		}
	}
	return XXH3_64bits_digest(&st);
}

/* A file of a source: its identity (digest_file()), and its name and place, kept. */
static void digest_source_file(XXH3_state_t *st, struct digest_seen *seen, const char *path)
{
	struct stat sb;

	if (!digest_file_stat(st, path, &sb))
		return;
	if (seen->n == seen->cap) {
		size_t cap = seen->cap ? 2 * seen->cap : 64;
		void *grown = realloc(seen->v, cap * sizeof(*seen->v));

		if (!grown)
			return;
		seen->v = grown;
		seen->cap = cap;
	}
	seen->v[seen->n] = (struct seen_file){(uint64_t)sb.st_dev, (uint64_t)sb.st_ino,
					      name_hash(path), seen->n};
	seen->n++;
}

static int by_identity(const void *a, const void *b)
{
	const struct seen_file *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return (x->order > y->order) - (x->order < y->order);
}

/* The source's files named under more than one name, by their places; then forgotten. */
static void seen_digest(XXH3_state_t *st, struct digest_seen *seen)
{
	if (seen->n)
		qsort(seen->v, seen->n, sizeof(*seen->v), by_identity);
	for (size_t a = 0, b; a < seen->n; a = b) {
		for (b = a + 1; b < seen->n && seen->v[b].dev == seen->v[a].dev &&
				seen->v[b].ino == seen->v[a].ino;
		     b++)
			;
		for (size_t k = a + 1; k < b; k++)
			if (seen->v[k].name != seen->v[a].name) {
				digest_str(st, "same file as");
				digest_u64(st, seen->v[a].order);
				digest_u64(st, seen->v[k].order);
			}
	}
	free(seen->v);
	memset(seen, 0, sizeof(*seen));
}

/* Whether both files of the Megatron pair of prefix `path` exist. */
static bool pair_beside(const char *path)
{
	bool both = true;
	struct stat sb;

	for (int k = 0; k < 2 && both; k++) {
		char *f = sf__megatron_file(path, k ? ".idx" : ".bin");

		both = f && stat(f, &sb) == 0;
		free(f);
	}
	return both;
}

/*
 * A data file a source names, and the Megatron pair it stands for: the .idx beside a
 * .bin, the .bin beside an .idx, both for a prefix that names no file itself; and, under
 * format megatron (`pair`), both for a name that is a file of its own with a pair beside
 * it (notes `corpus` beside corpus.bin and corpus.idx), which that format reads as the
 * pair. (A part's manifest, corpus_00000-of-00002.json, has no pair of its own name: its
 * digest stays what it was.)
 */
static void digest_data_file(XXH3_state_t *st, struct digest_seen *seen, const char *path,
			     bool pair)
{
	const size_t n = strlen(path);
	const bool bin = n > 4 && !strcmp(path + n - 4, ".bin"),
		   idx = n > 4 && !strcmp(path + n - 4, ".idx");
	struct stat sb;

	digest_source_file(st, seen, path);
	if (!bin && !idx && stat(path, &sb) == 0 && !(pair && pair_beside(path)))
		return;
	for (int k = 0; k < 2; k++) {
		const char *ext = k ? ".idx" : ".bin";
		char *other;

		if ((bin && !k) || (idx && k))
			continue; /* the file itself, digested above */
		other = sf__megatron_file(path, ext);
		if (other && ((!bin && !idx) || stat(other, &sb) == 0))
			digest_source_file(st, seen, other);
		free(other);
	}
}

const char *sf__config_format_name(uint32_t format)
{
	return format <= SF_FMT_JSONL ? format_names[format] : "?";
}

static int not_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Byte order, as the producers sort: a locale's collation must not change the digest. */
static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/*
 * The files one source path reads, as the producers find them (producer/source/paths.c):
 * a directory's files, a path that exists taken literally (even with glob characters),
 * else the matches of the glob, each with its Megatron companion.
 */
/* The regular files of directory `path`, as a directory source reads them. */
static void digest_dir(XXH3_state_t *st, struct digest_seen *seen, const char *path)
{
	struct dirent **list;
	struct stat sb;
	int n = scandir(path, &list, not_hidden, by_name);

	for (int i = 0; i < n; i++) {
		char *full = malloc(strlen(path) + strlen(list[i]->d_name) + 2);

		if (full) {
			sprintf(full, "%s/%s", path, list[i]->d_name);
			if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode))
				digest_source_file(st, seen, full);
			free(full);
		}
		free(list[i]);
	}
	if (n > 0)
		free(list);
}

static void digest_source_path(XXH3_state_t *st, struct digest_seen *seen, const char *path,
			       bool pair)
{
	char *pattern = NULL;
	struct stat sb;
	glob_t g;

	digest_str(st, path);
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		digest_dir(st, seen, path);
	} else if (stat(path, &sb) == 0 || sf__megatron_prefix(path) ||
		   sf__glob_pattern(path, &pattern) <= 0) {
		/* A file, or a Megatron pair by its prefix, as the expansion takes them. */
		digest_data_file(st, seen, path, pair);
	} else if (glob(pattern, 0, NULL, &g) == 0) {
		/* A directory the pattern matches is read as its files (paths.c). */
		for (size_t k = 0; k < g.gl_pathc; k++) {
			if (stat(g.gl_pathv[k], &sb) == 0 && S_ISDIR(sb.st_mode))
				digest_dir(st, seen, g.gl_pathv[k]);
			else
				digest_data_file(st, seen, g.gl_pathv[k], pair);
		}
		globfree(&g);
	}
	free(pattern);
}

uint64_t sf__config_digest(const struct sf_config *cfg)
{
	XXH3_state_t st;
	const char *vocab_dir;

	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	/* From version 2 on, so that the digests of version 1 stay what they were. */
	if (SF_STREAM_VERSION > 1)
		digest_u64(&st, SF_STREAM_VERSION);
	digest_u64(&st, cfg->n_sources);
	for (uint32_t i = 0; i < cfg->n_sources; i++) {
		const struct sf_source_config *src = &cfg->sources[i];
		struct digest_seen seen = {0};

		digest_u64(&st, src->format);
		digest_str(&st, src->text_field);
		digest_str(&st, src->separator);
		digest_u64(&st, src->on_error);
		/* The files actually read, so that a resume refuses changed data. */
		for (uint32_t j = 0; j < src->n_paths; j++)
			digest_source_path(&st, &seen, src->paths[j],
					   src->format == SF_FMT_MEGATRON);
		seen_digest(&st, &seen);
	}
	digest_str(&st, cfg->encoding);
	/* The vocabulary found in vocab_dir, or in $SHMFEED_VOCAB_DIR where vocab_dir is null
	 * (the tokenizer looks there then), by its file name. */
	vocab_dir = cfg->vocab_dir ? cfg->vocab_dir : getenv("SHMFEED_VOCAB_DIR");
	if (cfg->vocab) {
		digest_file(&st, cfg->vocab);
	} else if (cfg->encoding && !strncmp(cfg->encoding, "char:", 5)) {
		digest_file(&st, cfg->encoding + 5); /* the corpus sets the alphabet */
	} else if (cfg->encoding && strcmp(cfg->encoding, "bytes") && vocab_dir) {
		const char *name = strcmp(cfg->encoding, "gpt2") ? cfg->encoding : "r50k_base";
		char *v = malloc(strlen(vocab_dir) + strlen(name) + 12);

		if (v) {
			sprintf(v, "%s/%s.tiktoken", vocab_dir, name);
			digest_file(&st, v);
			free(v);
		}
	}
	/* Only when set, so that the digests of jobs without it stay what they were. */
	if (cfg->eot_id != SF_EOT_ID_UNSET)
		digest_u64(&st, cfg->eot_id);
	if (cfg->tok_file) {
		digest_file(&st, cfg->tok_file);
		digest_u64(&st, cfg->tok_format);
		digest_str(&st, cfg->tok_pattern);
		digest_str(&st, cfg->bos);
		digest_str(&st, cfg->eos);
		digest_u64(&st, cfg->tok_specials);
	}
	digest_u64(&st, cfg->seq_len);
	digest_u64(&st, cfg->dtype);
	digest_u64(&st, cfg->mode);
	digest_u64(&st, cfg->seed);
	digest_u64(&st, cfg->epochs);
	digest_u64(&st, cfg->doc_starts);
	digest_u64(&st, (uint64_t)cfg->batch_size * cfg->world_size);
	/* Only for a mixture, so that the digests of other jobs stay what they were. */
	if (cfg->mixture) {
		digest_str(&st, "mixture");
		for (uint32_t i = 0; i < cfg->n_sources; i++) {
			digest_str(&st, cfg->sources[i].name);
			digest_str(&st, cfg->sources[i].group);
			digest_u64(&st, cfg->sources[i].weight);
		}
		digest_weights(&st, &cfg->groups);
		digest_u64(&st, cfg->n_phases);
		for (uint32_t p = 0; p < cfg->n_phases; p++) {
			digest_u64(&st, cfg->schedule[p].until_step);
			digest_weights(&st, &cfg->schedule[p].weights);
			digest_weights(&st, &cfg->schedule[p].ramp_to);
			digest_u64(&st, cfg->schedule[p].stages);
		}
	}
	return XXH3_64bits_digest(&st);
}
