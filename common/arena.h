/*
 * The arena: one POSIX shared-memory object per job holding a header page, a participant
 * table, one ring of K slot headers per local rank, the page-aligned payloads and the
 * telemetry blocks. Producers, consumers and the supervisor all map it; the layout below
 * is the contract between them, pinned by SF_ARENA_LAYOUT_VERSION and by the sizeof
 * fields of the header, so a differently built binary refuses to attach.
 *
 * Caveats: a mapping does not survive exec(); after fork() a child may use its parent's
 * mapping but must register as a participant of its own. All cross-process fields are
 * C11 atomics that are lock-free (checked at compile time), so they work between
 * processes.
 */
#ifndef SF_COMMON_ARENA_H
#define SF_COMMON_ARENA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/errors.h"

#define SF_ARENA_MAGIC		0x00444545464d4853ull /* "SHMFEED\0" in little-endian bytes */
#define SF_ARENA_LAYOUT_VERSION 5u
#define SF_CACHE_LINE		64u
#define SF_PAGE_SIZE		4096u
#define SF_HUGE_PAGE_SIZE	(2u * 1024u * 1024u)
#define SF_JOB_NAME_MAX		64u
#define SF_MAX_RANKS		1024u
#define SF_MAX_SLOTS_PER_RANK	4096u
#define SF_MAX_PRODUCERS	256u
#define SF_WAIT_BUCKETS		48u		    /* log2 histogram of wait times in ns */
/* Bytes of one slot's payload, at most: what the slot header's 32-bit length can say.
 * Whether the machine can map the arena is asked of the machine (sf__arena_fits()). */
#define SF_PAYLOAD_MAX UINT64_C(0xffffffff)

/* Job states (header.job_state). */
#define SF_JOB_INIT	0u
#define SF_JOB_RUNNING	1u
#define SF_JOB_PAUSED	2u
#define SF_JOB_STOPPING 3u

/* Header flags. */
#define SF_ARENA_F_HUGEPAGES  0x1u /* payloads 2 MiB aligned and THP advised */
#define SF_ARENA_F_CHECKSUM   0x2u /* producers store xxh3-64 of each payload */
#define SF_ARENA_F_DOC_STARTS 0x4u /* payloads carry document starts after the tokens */
#define SF_ARENA_F_SOURCES    0x8u /* payloads carry each row's mixture source */
#define SF_ARENA_F_RANK_AUTO  0x10u /* rank_base: auto; the base is in node_ranks, not geo */
#define SF_ARENA_F_DEVICE_CPU  0x20u /* consumers.device: cpu, ranks get CPU views */
#define SF_ARENA_F_DEVICE_CUDA 0x40u /* consumers.device: cuda, ranks must copy to a GPU */
#define SF_ARENA_F_KNOWN       0x7fu /* every flag this build knows; attach refuses others */

/* Participant roles. */
#define SF_ROLE_NONE	 0u
#define SF_ROLE_PRODUCER 1u
#define SF_ROLE_CONSUMER 2u

/*
 * The batch geometry and options chosen by whoever creates the arena. Attach compares
 * the fields a consumer or producer was built for against the header.
 */
struct sf_geometry {
	uint32_t ranks;		     /* R: local ranks, one ring each */
	uint32_t slots_per_rank;     /* K */
	uint32_t max_producers;	     /* P: participant entries reserved for producers */
	uint32_t batch;		     /* B */
	uint32_t seq_tokens;	     /* T + 1 */
	uint32_t token_bytes;	     /* 2 (uint16) or 4 (int32) */
	uint32_t doc_starts_per_seq; /* 0, or max document starts recorded per sequence */
	uint32_t world_size;	     /* W: global ranks of the whole job */
	uint32_t rank_base;	     /* global rank of local rank 0 (0 with SF_ARENA_F_RANK_AUTO) */
	uint32_t flags;		     /* SF_ARENA_F_* */
	uint64_t config_digest;	     /* digest of the resolved config */
	uint64_t samples_per_epoch;  /* global samples in one epoch (windows of the stream) */
};

/*
 * Header page. The first fields, up to and including creator_starttime, keep their
 * offsets in every layout version so that any version can recognize and reclaim a stale
 * arena of any other.
 */
struct sf_arena_header {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t creator_uid;
	int32_t creator_pid;
	uint32_t pad0;
	uint64_t creator_starttime;
	/* Version-specific from here on. */
	uint32_t header_size;	   /* sizeof(struct sf_arena_header) */
	uint32_t participant_size; /* sizeof(struct sf_participant) */
	uint32_t slot_size;	   /* sizeof(struct sf_slot) */
	uint32_t ring_size;	   /* sizeof(struct sf_ring) */
	uint32_t telemetry_size;   /* sizeof(struct sf_telemetry) */
	/* With SF_ARENA_F_CHECKSUM: consumers verify the checksum of the steps that are
	 * multiples of this (1: every step). Always >= 1. */
	uint32_t verify_every;
	char job[SF_JOB_NAME_MAX];
	struct sf_geometry geo;
	uint64_t payload_stride; /* bytes between payloads, page or huge-page aligned */
	uint64_t payload_bytes;	 /* useful bytes of a payload: tokens + doc starts */
	uint64_t participants_off;
	uint64_t rings_off;
	uint64_t slots_off;
	uint64_t telemetry_off;
	uint64_t payloads_off;
	uint64_t total_size;
	uint64_t created_ns; /* CLOCK_REALTIME of creation, for inspect */
	/* Mutable job state, on cache lines of their own. */
	_Alignas(64) _Atomic uint32_t job_state;
	_Atomic uint32_t job_seq;		/* bumped on every job_state change; futex word */
	_Alignas(64) _Atomic uint32_t free_seq; /* futex: bumped when a slot becomes FREE */
	uint32_t pad2;
	/* Bit p of word p / 64: producer p sleeps on free_seq. One bit per producer rather
	 * than a count, so that a sleeper killed in its sleep leaves a bit that repair
	 * clears, never a count nobody can correct. */
	_Atomic uint64_t free_waiters[SF_MAX_PRODUCERS / 64];
	_Alignas(64) _Atomic uint64_t producer_restarts;
	_Atomic uint64_t repairs;	 /* participants repaired after death */
	_Atomic uint64_t slots_repaired; /* slots returned by repairs */
	/* The node's global ranks, generation << 32 | (rank base + 1); a low half of 0:
	 * not known (yet, or while a re-base discards the old ranks' batches). Written only
	 * under the SF_LOCK_NODE_RANKS lock, read by producers before they fill and by
	 * consumers at attach; see common/node_ranks.h. A static rank base is set at
	 * creation, generation 1. */
	_Alignas(64) _Atomic uint64_t node_ranks;
};

/*
 * One cache line per participant. Producer p uses entry p, the consumer of local rank r
 * uses entry max_producers + r; the entry index is the owner stored in slot words.
 * `pid` is the claim: 0 means free, and it is set by CAS so two processes never share an
 * entry.
 */
struct sf_participant {
	_Atomic int32_t pid;
	uint32_t role;
	uint64_t starttime;
	_Atomic uint32_t incarnation; /* bumped at each registration */
	int32_t rank;		      /* local rank (consumers), producer index (producers) */
	_Atomic uint64_t heartbeat_ns;
	_Atomic uint64_t batches;
	_Atomic uint64_t busy_ns; /* producers: time spent filling */
	_Atomic uint64_t wait_ns; /* time spent waiting */
	uint64_t pad;
};

/*
 * Per-rank ring control: the futex a consumer sleeps on for READY slots of its ring.
 */
struct sf_ring {
	_Atomic uint32_t ready_seq; /* futex: bumped when a slot of this ring is READY */
	uint32_t pad0;
	/* 1 while the rank's consumer sleeps on ready_seq. A ring has one consumer, so a
	 * flag is exact, and registration or repair of that consumer clears what a killed
	 * sleeper left. */
	_Atomic uint64_t ready_waiters;
	/* 1 + the step a seek of this ring (sf__ring_seek()) is moving it to, 0 when none
	 * is under way: what a consumer killed mid-seek leaves, for its successor to finish. */
	_Atomic uint64_t seek_to;
	uint64_t pad[5];
};

/*
 * One slot header per cache line. `word` packs the state, the owner and the lap:
 *   bits  0..1   state (SF_SLOT_*)
 *   bits  2..15  owner (participant index, while FILLING or CLAIMED)
 *   bits 16..63  lap: slot i of a ring serves step lap*K + i
 * Every transition is one CAS or one release store on `word`; the other fields are
 * written by the FILLING owner before its release store of READY and read by the consumer
 * after its acquire load of READY.
 */
struct sf_slot {
	_Atomic uint64_t word;
	uint64_t step;
	uint64_t checksum; /* xxh3-64 of the payload's first `length` bytes (0 without
			    * SF_ARENA_F_CHECKSUM) */
	uint64_t first_sample; /* global index of the batch's first sample; in an end marker
				* (length 0), the samples of the whole finite job */
	uint64_t fill_ns;  /* CLOCK_MONOTONIC when published */
	uint32_t length;   /* payload bytes written */
	uint32_t producer; /* participant index that filled it */
	/* xxh3-64 of the batch's token bytes (the first B x (T+1) x token size bytes, or
	 * fewer when `length` is shorter), computed by the filler whatever the checksum
	 * setting: the batch digest consumers chain into their provenance without reading
	 * the payload. */
	uint64_t digest;
	/* 1 when the slot is READY again after a consumer held it (a dead one's claim
	 * repaired, a copy out of it that failed): the holder may have written into it
	 * through its view, so the next claim verifies it and has it refilled if it
	 * changed. A producer's fill clears it. */
	uint64_t held_before;
};

/* Single-writer telemetry block, one per participant. */
struct sf_telemetry {
	_Atomic uint64_t wait_hist[SF_WAIT_BUCKETS]; /* counts of waits by floor(log2(ns)) */
	_Atomic uint64_t tokens;  /* tokens written (producers) or handed out (consumers) */
	_Atomic uint64_t bytes;	  /* payload bytes written (producers) */
	_Atomic uint64_t skipped; /* records skipped by policy (producers) */
	_Atomic uint64_t encoded; /* tokens its tokenizer produced (producers of raw text) */
	uint64_t pad[4];
};

_Static_assert(sizeof(struct sf_participant) == SF_CACHE_LINE, "participant is one line");
_Static_assert(sizeof(struct sf_slot) == SF_CACHE_LINE, "slot header is one line");
_Static_assert(sizeof(struct sf_ring) == SF_CACHE_LINE, "ring control is one line");
_Static_assert(sizeof(struct sf_telemetry) % SF_CACHE_LINE == 0, "telemetry is whole lines");
_Static_assert(sizeof(struct sf_arena_header) <= SF_PAGE_SIZE, "header fits its page");
_Static_assert(sizeof(struct sf_arena_header) % SF_CACHE_LINE == 0, "header is whole lines");
_Static_assert(offsetof(struct sf_arena_header, creator_starttime) == 24, "stable prefix");
_Static_assert(offsetof(struct sf_arena_header, job_state) % SF_CACHE_LINE == 0, "own line");
_Static_assert(offsetof(struct sf_arena_header, free_seq) % SF_CACHE_LINE == 0, "own line");
_Static_assert(offsetof(struct sf_arena_header, node_ranks) % SF_CACHE_LINE == 0, "own line");
_Static_assert(SF_MAX_PRODUCERS % 64 == 0, "free_waiters holds one bit per producer");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free in shm");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free in shm");

/* Slot states. */
#define SF_SLOT_FREE	0u
#define SF_SLOT_FILLING 1u
#define SF_SLOT_READY	2u
#define SF_SLOT_CLAIMED 3u

#define SF_SLOT_OWNER_MAX ((1u << 14) - 1)
#define SF_SLOT_LAP_MAX	  ((UINT64_C(1) << 48) - 1)

static inline uint64_t sf__slot_word(uint32_t state, uint32_t owner, uint64_t lap)
{
	return (uint64_t)state | ((uint64_t)owner << 2) | (lap << 16);
}
static inline uint32_t sf__slot_state(uint64_t w)
{
	return (uint32_t)(w & 3u);
}
static inline uint32_t sf__slot_owner(uint64_t w)
{
	return (uint32_t)((w >> 2) & SF_SLOT_OWNER_MAX);
}
static inline uint64_t sf__slot_lap(uint64_t w)
{
	return w >> 16;
}

/*
 * Add to a counter that has one writer (a participant's own entry or telemetry block):
 * a relaxed load and store, no locked instruction on the hot path. Readers sample it
 * and see each update whole.
 */
static inline void sf__counter_add(_Atomic uint64_t *counter, uint64_t v)
{
	atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/*
 * Offset of the document starts inside a payload: after the B x (T+1) tokens, rounded up
 * to a cache line so that the uint32 offsets are aligned whatever B, T and the token size.
 */
static inline uint64_t sf__doc_starts_offset(uint64_t batch, uint64_t seq_tokens,
					     uint64_t token_bytes)
{
	return (batch * seq_tokens * token_bytes + SF_CACHE_LINE - 1) / SF_CACHE_LINE *
	       SF_CACHE_LINE;
}

/*
 * Offset of the row sources of a mixture (B int32 source indexes, in config order) inside
 * a payload: after the tokens and the document starts, rounded up to a cache line.
 */
static inline uint64_t sf__sources_offset(uint64_t batch, uint64_t seq_tokens, uint64_t token_bytes,
					  uint64_t doc_starts_per_seq)
{
	uint64_t end = doc_starts_per_seq ? sf__doc_starts_offset(batch, seq_tokens, token_bytes) +
						    batch * doc_starts_per_seq * 4
					  : batch * seq_tokens * token_bytes;

	return (end + SF_CACHE_LINE - 1) / SF_CACHE_LINE * SF_CACHE_LINE;
}

/*
 * A process's view of an arena: its mapping and the pointers derived from the header.
 * Created by sf__arena_create() or sf__arena_attach(), freed by sf__arena_detach().
 */
struct sf_arena {
	struct sf_arena_header *hdr;
	struct sf_participant *participants;
	struct sf_ring *rings;
	struct sf_slot *slots; /* rank r's ring is slots[r*K .. r*K+K-1] */
	struct sf_telemetry *telemetry;
	unsigned char *payloads;
	size_t map_size;
	/* The geometry and what addresses and hashes the slots, copied from the header that
	 * was checked (written by this process, or sf__arena_header_check()'s private copy):
	 * the shared header can be rewritten after the check, and a slot count, batch shape,
	 * stride or verify_every read from it then made a call read past the mapping or
	 * divide by 0. Nothing of the shared header's geometry is read after the map. */
	struct sf_geometry geo;
	uint32_t verify_every; /* 1 and up */
	uint64_t payload_stride;
	uint64_t payload_bytes;
	int creator; /* this process created it and will unlink it */
	char shm_name[SF_JOB_NAME_MAX + 16];
	/* Two open file descriptions of the arena object for OFD locks (see "Liveness"
	 * below): lock_fd holds this process's locks, probe_fd tests and fences others'.
	 * Both are closed in a child of fork() (the child must not share the parent's
	 * locks) and opened again when the child needs them. */
	int lock_fd;
	int probe_fd;
	ino_t ino; /* the object's identity, checked when a child opens it again */
	dev_t dev;
	/* Set in a child of fork(): the handle is a copy of its parent's, whose participant
	 * entries, slots and device state are the parent's. Only unmapping is left to it. */
	int inherited;
	struct sf_arena *fork_next; /* the process's list of arenas, for fork() */
};

/*
 * Liveness. A process holds an OFD lock (fcntl F_OFD_SETLK) on one byte of the arena
 * object for as long as it holds a role: the creator on SF_LOCK_CREATOR for its
 * lifetime, the holder of participant entry i on SF_LOCK_PARTICIPANT(i). The kernel drops
 * such a lock when the last descriptor of its open file description closes, that is when
 * the holding process has exited (all of its threads), whatever namespace it ran in and
 * without reading /proc. Taking the byte from another open file description is therefore
 * a fence: while a repairer holds it, the previous holder is known dead and no new one
 * can start. The locks are advisory: they never touch the bytes themselves.
 */
#define SF_LOCK_CREATOR	       0u
#define SF_LOCK_PARTICIPANT(i) (1u + (uint64_t)(i))
/* Held (waited for) while a consumer agrees on the node's ranks or re-bases them: past
 * every participant byte. */
#define SF_LOCK_NODE_RANKS (2u + (uint64_t)SF_SLOT_OWNER_MAX)

/* Options of sf__arena_create(). */
struct sf_arena_options {
	int hugepages;	       /* 1: try 2 MiB pages for payloads (falls back cleanly) */
	uint32_t verify_every; /* header.verify_every; 0 stands for 1 */
	const char *shm_dir; /* where POSIX shm lives, for the free-space message; NULL: /dev/shm */
};

/*
 * sf__arena_layout - the layout (offsets and total size) that `geo` needs. Fills the
 * offset fields of `hdr` when not NULL. Returns 0, or SF_E_CONFIG for a geometry out of
 * range (detail in `e`).
 */
int sf__arena_layout(const struct sf_geometry *geo, int hugepages, struct sf_arena_header *hdr,
		     struct sf_err *e);

/*
 * sf__arena_hugepages_usable - whether an arena asked for huge pages gets them: the
 * kernel's shmem_enabled policy honours madvise (sf__arena_create() decides so); `why`
 * says what the policy is.
 */
int sf__arena_hugepages_usable(char *why, size_t len);

/*
 * sf__arena_fits - whether an arena of `total_size` bytes (sf__arena_layout()) can exist
 * on this machine: no larger than the shared-memory file system `dir` (NULL: /dev/shm)
 * in all, and mappable in this process's address space (RLIMIT_AS included). Free space
 * is for sf__arena_create() to find when it reserves the bytes. Returns 0, or
 * SF_E_CONFIG with the size needed, the limit met and what to change in `e`.
 */
int sf__arena_fits(uint64_t total_size, const char *dir, struct sf_err *e);

/* sf__job_name_valid - 1 when `job` is 1..63 characters of [A-Za-z0-9_.-], not starting with '.'.
 */
int sf__job_name_valid(const char *job);

/*
 * sf__arena_create - create the arena of job `job`: built under a temporary name with
 * shm_open(O_CREAT|O_EXCL, 0600), posix_fallocate of the full size (a full /dev/shm fails
 * here with -ENOSPC and a message giving bytes needed and free), mmap, header written
 * last with a release store of the magic, then linked under its real name. An existing
 * arena whose creator is dead is reclaimed; a live one yields SF_E_BUSY. `ret_note` (may
 * be NULL) receives a line saying whether huge pages are used and why, and whether a
 * stale arena was reclaimed, for the caller to log.
 * Returns 0 and *ret_arena (free with sf__arena_detach(), unlink with sf__arena_destroy()).
 */
int sf__arena_create(const char *job, const struct sf_geometry *geo,
		     const struct sf_arena_options *opt, struct sf_arena **ret_arena,
		     char *ret_note, size_t note_len, struct sf_err *e);

/*
 * sf__arena_header_check - whether the header `h` (a private copy, not the shared
 * mapping) describes an arena this build can use in a file of `file_size` bytes: the
 * magic, the layout version, the structure sizes, a NUL-terminated valid job name, known
 * flags, a geometry within sf__arena_layout()'s limits, and every offset, stride and size
 * equal to the layout recomputed from that geometry, whose total is the file's size. So
 * every participant, ring, slot, telemetry block and payload an accepted header implies
 * lies inside the file. `where` names the arena in messages. Returns 0, SF_E_NOT_SHMFEED
 * (bad magic) or SF_E_LAYOUT (anything else), with the field and its values in `e`.
 */
int sf__arena_header_check(const struct sf_arena_header *h, uint64_t file_size, const char *where,
			   struct sf_err *e);

/*
 * sf__arena_attach - map the existing arena of job `job` read-write. Refuses a
 * non-shmfeed object (SF_E_NOT_SHMFEED), another owner (SF_E_UID), another layout
 * version or any header that sf__arena_header_check() refuses (SF_E_LAYOUT: checked on a
 * private copy before anything is mapped) and, when `expect` is not NULL, a geometry
 * whose fields differ from the non-zero fields of `expect` (SF_E_GEOMETRY). -ENOENT when
 * there is no such job. An arena replaced meanwhile (a restart of the job) is left for
 * the one that took its name; -ESTALE only when that happened 4 times in a row.
 */
int sf__arena_attach(const char *job, const struct sf_geometry *expect, struct sf_arena **ret_arena,
		     struct sf_err *e);

/*
 * sf__arena_populate_rank - fault in what the consumer of local rank `rank` uses: the
 * header, participant, ring, slot and telemetry tables (for writing) and the rank's own
 * payloads (for reading), so that its first batches take no page faults. Attach maps
 * the arena without populating it, so the other ranks' rings never enter this process's
 * resident set. Returns 0, SF_E_RANGE, or -errno from madvise (the pages then fault in
 * on first use).
 */
int sf__arena_populate_rank(struct sf_arena *a, uint32_t rank);

/* sf__arena_detach - unmap and free; accepts NULL. Does not unlink. */
void sf__arena_detach(struct sf_arena *a);

/* sf__arena_destroy - unlink the arena of `a` (if this process created it) and detach. */
void sf__arena_destroy(struct sf_arena *a);

/*
 * sf__arena_dead_temporaries - list in `out` what creations of job `job` in /dev/shm left
 * when they died before the arena was linked under its name ("PATH (SIZE), ..."; the next
 * sf__arena_create() of the job removes them). Returns how many.
 */
int sf__arena_dead_temporaries(const char *job, char *out, size_t len);

/* sf__arena_unlink_job - unlink the shm object of `job` by name; 0 or -errno. */
int sf__arena_unlink_job(const char *job);

/*
 * sf__arena_creator_alive - 1 when the arena's creator still runs (it holds its lock),
 * 0 when it is gone. When that cannot be told (an fcntl error) the answer is 1: only a
 * known death counts.
 */
int sf__arena_creator_alive(struct sf_arena *a);

/*
 * sf__arena_lock - take lock byte `byte` for this process (its lock_fd). Returns 0,
 * SF_E_BUSY when another open file description holds it, or -errno.
 * sf__arena_unlock - give it back.
 */
int sf__arena_lock(struct sf_arena *a, uint64_t byte);
void sf__arena_unlock(struct sf_arena *a, uint64_t byte);

/* sf__arena_lock_wait - sf__arena_lock() that waits while another holds the byte.
 * Returns 0 or -errno. Only for locks held briefly (SF_LOCK_NODE_RANKS). */
int sf__arena_lock_wait(struct sf_arena *a, uint64_t byte);

/*
 * A handle's fences are not counted: OFD locks do not conflict within one open file
 * description, so two threads fencing the same byte through one handle would both hold
 * it. A handle is used for fences by one thread at a time (the launcher's loop; a
 * consumer's own calls).
 *
 * sf__arena_fence - take lock byte `byte` from the probe descriptor, to act on behalf of
 * a holder that must be dead: 0 when taken (nobody else holds it, and nobody can take
 * it until sf__arena_unfence()), SF_E_BUSY when held (also by this process's own
 * lock_fd), or -errno (unknown: act as if held).
 */
int sf__arena_fence(struct sf_arena *a, uint64_t byte);
void sf__arena_unfence(struct sf_arena *a, uint64_t byte);

/* sf__arena_lock_held - 1 when some open file description (this process's lock_fd
 * included) holds lock byte `byte`, 0 when none does, -errno when it cannot be told. */
int sf__arena_lock_held(struct sf_arena *a, uint64_t byte);

/*
 * sf__arena_step_limit - the first step a rank of geometry `g` cannot serve. A slot word
 * keeps a 48-bit lap, and slot i serves steps lap*K + i, so steps stay below
 * K * (2^48 - 1): the slot released after the last step then moves to lap 2^48 - 1, which
 * still fits. And the global sample count after a step, (step + 1) * B * W, must fit in
 * 64 bits. Every step from outside (a seek, a resume state, a control request) is checked
 * against this limit; with K = 8 it is about 2.3e15 steps.
 */
/* The largest step limit of any geometry: SF_MAX_SLOTS_PER_RANK laps of 48 bits. */
#define SF_STEP_MAX ((uint64_t)SF_MAX_SLOTS_PER_RANK * SF_SLOT_LAP_MAX)

static inline uint64_t sf__arena_step_limit(const struct sf_geometry *g)
{
	uint64_t laps = (uint64_t)g->slots_per_rank * SF_SLOT_LAP_MAX;
	uint64_t global_batch = (uint64_t)g->batch * g->world_size;
	uint64_t samples = global_batch ? UINT64_MAX / global_batch : UINT64_MAX;

	return laps < samples ? laps : samples;
}

static inline struct sf_slot *sf__arena_slot(const struct sf_arena *a, uint32_t rank, uint32_t i)
{
	return &a->slots[(size_t)rank * a->geo.slots_per_rank + i];
}

static inline unsigned char *sf__arena_payload(const struct sf_arena *a, uint32_t rank, uint32_t i)
{
	return a->payloads + ((size_t)rank * a->geo.slots_per_rank + i) * a->payload_stride;
}

/*
 * The node_ranks word: generation << 32 | (base + 1), or a low half of 0 while the base
 * is not known. sf__node_ranks_decode - 1 and *ret_base when the word holds a base that
 * fits the geometry (base + ranks <= world size), 0 when it holds none, -1 when it holds
 * one that does not fit (a corrupt header).
 */
static inline uint64_t sf__node_ranks_word(uint32_t generation, uint32_t base, int known)
{
	return (uint64_t)generation << 32 | (known ? (uint64_t)base + 1 : 0);
}
static inline uint32_t sf__node_ranks_generation(uint64_t word)
{
	return (uint32_t)(word >> 32);
}
static inline int sf__node_ranks_decode(uint64_t word, const struct sf_geometry *g,
					uint32_t *ret_base)
{
	uint32_t low = (uint32_t)word;

	if (!low)
		return 0;
	if (g->world_size < g->ranks || low - 1 > g->world_size - g->ranks)
		return -1;
	*ret_base = low - 1;
	return 1;
}

/* sf__arena_set_job_state - store a job state and wake everyone sleeping on it. */
void sf__arena_set_job_state(struct sf_arena *a, uint32_t state);

/* sf__arena_stopping - whether the job is stopping. Acquire: pairs with the seq_cst
 * store of sf__arena_set_job_state(). */
static inline int sf__arena_stopping(const struct sf_arena *a)
{
	return atomic_load_explicit(&a->hdr->job_state, memory_order_acquire) == SF_JOB_STOPPING;
}

#endif
