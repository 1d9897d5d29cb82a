/*
 * The shared chunk cache (see producer/chunk_share.h): one MAP_SHARED anonymous mapping
 * holding a table of one-cache-line entry headers followed by each entry's document
 * starts and tokens. The mapping is made by the launcher before it forks, so every
 * producer sees it at the same address; the handle around it is private to each process
 * (fork copies it), and so are its counters.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/futex.h"
#include "common/proc.h"
#include "producer/chunk_share.h"

/* Entry states. */
#define E_EMPTY	  0u
#define E_FILLING 1u
#define E_READY	  2u

/*
 * The word: bits 0..1 state, 2..23 the pid of the filler (Linux pids stay below
 * PID_MAX_LIMIT = 2^22), 24..63 a generation bumped by every claim, so a reader can tell
 * that an entry was refilled while it copied, even with the same chunk.
 */
#define PID_BITS 22u
#define PID_MASK ((UINT64_C(1) << PID_BITS) - 1)

static inline uint64_t make_word(uint32_t state, uint32_t pid, uint64_t gen)
{
	return (uint64_t)state | (((uint64_t)pid & PID_MASK) << 2) | (gen << (2 + PID_BITS));
}
static inline uint32_t word_state(uint64_t w)
{
	return (uint32_t)(w & 3u);
}
static inline uint32_t word_pid(uint64_t w)
{
	return (uint32_t)((w >> 2) & PID_MASK);
}
static inline uint64_t word_gen(uint64_t w)
{
	return w >> (2 + PID_BITS);
}

/* The identity of a filler beside its pid: pid << 40 | start time in clock ticks. */
#define START_BITS 40u
#define START_MASK ((UINT64_C(1) << START_BITS) - 1)

/* How long a waiter sleeps before it looks again whether the filler is still alive. */
#define WAIT_SLICE_NS (2 * 1000 * 1000)

struct share_entry {
	_Atomic uint64_t word;
	_Atomic uint64_t owner; /* identity of the FILLING process, written just after its claim */
	/* Written by the filler before its release store of READY; read by readers after
	 * their acquire load of the word and trusted only once sf__share_valid() agrees.
	 * Atomics (relaxed) so that a torn value is impossible, only a stale one. */
	_Atomic uint64_t chunk;
	_Atomic uint64_t n_tokens;
	_Atomic uint64_t n_docs;
	_Atomic uint32_t seq; /* futex: bumped when a fill ends and somebody waits */
	/* 1 when somebody may sleep on seq. Sleepers set it and never clear it; the wake
	 * that sees it clears it. A sleeper killed in its sleep (or one that left at its
	 * slice's end) so costs at most one futex wake, never one per later publish. */
	_Atomic uint32_t waiters;
	uint64_t pad[2];
};

_Static_assert(sizeof(struct share_entry) == 64, "an entry header is one cache line");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free in shared memory");

struct sf_chunk_share {
	unsigned char *map;
	size_t map_len;
	struct share_entry *entries;
	unsigned char *data; /* entry i's starts and tokens at data + i * stride */
	uint64_t n_entries;
	uint64_t stride;
	uint64_t tokens_cap;
	uint32_t token_bytes;
	uint64_t docs_cap;
	/* This process, as of fork generation `forks`. */
	uint32_t pid;
	uint64_t ident;
	uint32_t forks;
	/* The busy entry word a waiting look-up of this process gave up on last: found
	 * again unchanged, its filler's start time is read (see filler_dead()). */
	const struct share_entry *suspect;
	uint64_t suspect_word;
	struct sf_share_counters counters;
};

/* Bumped in every child a fork() makes, so that self() notices a new process without a
 * getpid() system call at every look-up. */
static _Atomic uint32_t fork_generation = 1;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
	atomic_fetch_add_explicit(&fork_generation, 1, memory_order_relaxed);
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, count_fork);
}

static uint64_t round_up(uint64_t n, uint64_t to)
{
	return (n + to - 1) / to * to;
}

int sf__share_create(uint64_t n_entries, uint64_t tokens_cap, uint32_t token_bytes,
		     uint64_t docs_cap, struct sf_chunk_share **ret_share, struct sf_err *e)
{
	struct sf_chunk_share *s = calloc(1, sizeof(*s));
	uint64_t head, stride, total;
	void *m;

	if (!s)
		return sf__err(e, -ENOMEM, "out of memory");
	head = round_up(n_entries * sizeof(struct share_entry), 4096);
	stride = round_up(docs_cap * sizeof(uint64_t) + tokens_cap * token_bytes, 4096);
	total = head + n_entries * stride;
	/* MAP_NORESERVE: entries take memory only as they are filled. */
	m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (m == MAP_FAILED) {
		free(s);
		return sf__err(e, -ENOMEM, "cannot map %llu bytes for the shared chunk cache",
			       (unsigned long long)total);
	}
	pthread_once(&atfork_once, register_atfork);
	s->map = m;
	s->map_len = total;
	s->entries = m;
	s->data = s->map + head;
	s->n_entries = n_entries;
	s->stride = stride;
	s->tokens_cap = tokens_cap;
	s->token_bytes = token_bytes;
	s->docs_cap = docs_cap;
	*ret_share = s;
	return 0;
}

void sf__share_free(struct sf_chunk_share *s)
{
	if (!s)
		return;
	munmap(s->map, s->map_len);
	free(s);
}

uint64_t sf__share_entries(const struct sf_chunk_share *s)
{
	return s->n_entries;
}

void sf__share_counters(const struct sf_chunk_share *s, struct sf_share_counters *ret)
{
	*ret = s->counters;
}

/* The calling process's pid and identity, read again after a fork. */
static void self(struct sf_chunk_share *s)
{
	uint32_t forks = atomic_load_explicit(&fork_generation, memory_order_relaxed);
	uint32_t pid;
	uint64_t start = 0;

	if (forks == s->forks && s->pid)
		return;
	pid = (uint32_t)getpid();
	if (sf__proc_starttime((pid_t)pid, &start) < 0)
		start = 0;
	s->forks = forks;
	s->pid = pid;
	s->ident = ((uint64_t)pid << START_BITS) | (start & START_MASK);
	s->suspect = NULL;
}

/*
 * Whether the filler recorded in `w` is gone. An entry FILLING under this process's own
 * pid was left by an earlier process that had the same pid, since this one fills
 * nothing while it looks an entry up. A filler whose pid no longer exists is gone. One
 * whose pid exists may still be a zombie, or the pid may name another process now,
 * which only its start time tells (read from /proc): that is looked at with
 * `look_closer`, when this word has been busy for a wait slice or was found busy by an
 * earlier look-up, rather than at every busy look-up (a live filler publishes long
 * before).
 */
static int filler_dead(struct sf_chunk_share *s, const struct share_entry *en, uint64_t w,
		       int look_closer)
{
	uint32_t pid = word_pid(w);
	uint64_t ident;

	if (pid == s->pid)
		return 1;
	if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
		return 1;
	if (!look_closer)
		return 0;
	/* Relaxed: the identity is advisory; a mismatch only means it is not written yet. */
	ident = atomic_load_explicit(&en->owner, memory_order_relaxed);
	if ((ident >> START_BITS) != pid)
		return 0; /* it has only just claimed the entry */
	/* A zombie, or the pid now names another process. */
	return !sf__proc_alive((pid_t)pid, ident & START_MASK);
}

static void fill_ref(const struct sf_chunk_share *s, struct share_entry *en, uint64_t w,
		     struct sf_share_ref *ref)
{
	unsigned char *d = s->data + (uint64_t)(en - s->entries) * s->stride;

	ref->word = w;
	ref->entry = en;
	ref->doc_starts = s->docs_cap ? (uint64_t *)(void *)d : NULL;
	ref->tokens = d + s->docs_cap * sizeof(uint64_t);
	ref->n_tokens = 0;
	ref->n_docs = 0;
}

int sf__share_acquire(struct sf_chunk_share *s, uint64_t key, uint64_t chunk, int64_t wait_ns,
		      struct sf_share_ref *ret_ref)
{
	struct share_entry *en = &s->entries[key % s->n_entries];
	uint64_t deadline = 0, busy_word = 0, busy_since = 0;
	int waited = 0;

	for (;;) {
		/* Acquire: pairs with the release store of READY in sf__share_publish(), so
		 * the entry's fields and contents are those of the fill that published. */
		uint64_t w = atomic_load_explicit(&en->word, memory_order_acquire);
		uint64_t nw;

		if (word_state(w) == E_READY &&
		    atomic_load_explicit(&en->chunk, memory_order_relaxed) == chunk) {
			uint64_t n = atomic_load_explicit(&en->n_tokens, memory_order_relaxed);
			uint64_t d = atomic_load_explicit(&en->n_docs, memory_order_relaxed);

			fill_ref(s, en, w, ret_ref);
			/* Bounded, so that even a stale count never reads past the entry. */
			ret_ref->n_tokens = n < s->tokens_cap ? n : s->tokens_cap;
			ret_ref->n_docs = d < s->docs_cap || !s->docs_cap ? d : s->docs_cap;
			s->counters.hits++;
			return SF_SHARE_HIT;
		}
		self(s);
		if (word_state(w) == E_FILLING) {
			if (wait_ns <= 0) {
				s->counters.busy++;
				return SF_SHARE_BUSY;
			}
			uint64_t now = sf__now_ns();

			if (w != busy_word) {
				busy_word = w;
				busy_since = now;
			}
			if (filler_dead(s, en, w,
					now - busy_since >= WAIT_SLICE_NS ||
						(s->suspect == en && s->suspect_word == w))) {
				s->counters.takeovers++;
			} else {
				uint32_t seq;

				if (!deadline)
					deadline = now + (uint64_t)wait_ns;
				if (now >= deadline) {
					s->counters.busy++;
					s->suspect = en;
					s->suspect_word = w;
					return SF_SHARE_BUSY;
				}
				if (!waited++)
					s->counters.waits++;
				atomic_store_explicit(&en->waiters, 1, memory_order_relaxed);
				/* Pairs with the fence in wake(): either the filler sees this
				 * waiter, or this waiter sees the word it published. */
				atomic_thread_fence(memory_order_seq_cst);
				/* Acquire: the load of the word below may not pass it; pairs
				 * with the seq_cst increment in wake(), made after the word's
				 * store (see eventcount_sleep() in common/slot.c). */
				seq = atomic_load_explicit(&en->seq, memory_order_acquire);
				if (atomic_load_explicit(&en->word, memory_order_relaxed) == w)
					sf__futex_wait(&en->seq, seq,
						       deadline - now < WAIT_SLICE_NS
							       ? (int64_t)(deadline - now)
							       : WAIT_SLICE_NS);
				continue;
			}
		}
		/* EMPTY, another chunk, or a dead filler's: claim it. */
		nw = make_word(E_FILLING, s->pid, word_gen(w) + 1);
		/* Acq_rel: acquire orders this fill after a dead filler's writes that a takeover
		 * replaces; the release half and the fence below order the claim before the
		 * data stores, so a reader copying them sees the word changed (seqlock). */
		if (!atomic_compare_exchange_strong_explicit(
			    &en->word, &w, nw, memory_order_acq_rel, memory_order_relaxed))
			continue;
		atomic_store_explicit(&en->owner, s->ident, memory_order_relaxed);
		/* Pairs with the acquire fence in sf__share_valid(). */
		atomic_thread_fence(memory_order_release);
		fill_ref(s, en, nw, ret_ref);
		s->counters.fills++;
		return SF_SHARE_FILL;
	}
}

int sf__share_valid(struct sf_chunk_share *s, const struct sf_share_ref *ref)
{
	struct share_entry *en = ref->entry;

	/* Pairs with the release fence after the claim in sf__share_acquire(): if the copy
	 * read anything a later filler wrote, this load sees that filler's word. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&en->word, memory_order_relaxed) == ref->word)
		return 1;
	s->counters.stale_reads++;
	return 0;
}

static void wake(struct share_entry *en)
{
	/* Store-load barrier between the word's store and the waiter count; pairs with the
	 * fence a waiter makes between its count increment and its last look. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&en->waiters, memory_order_relaxed) &&
	    atomic_exchange_explicit(&en->waiters, 0, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&en->seq, 1, memory_order_seq_cst);
		sf__futex_wake(&en->seq, INT32_MAX);
	}
}

int sf__share_publish(const struct sf_share_ref *ref, uint64_t chunk, uint64_t n_tokens,
		      uint64_t n_docs)
{
	struct share_entry *en = ref->entry;
	uint64_t w = ref->word;

	/* The fields are written before the word is checked: a filler that lost the entry
	 * (only a misjudged death gets there) writes them over its taker's; the CAS below
	 * then fails and the caller's batch fails, but a taker that had published already
	 * keeps the fields written here until its entry is next filled. */
	atomic_store_explicit(&en->chunk, chunk, memory_order_relaxed);
	atomic_store_explicit(&en->n_tokens, n_tokens, memory_order_relaxed);
	atomic_store_explicit(&en->n_docs, n_docs, memory_order_relaxed);
	/* Release: publishes the contents and the fields above; pairs with the acquire load
	 * in sf__share_acquire(). A CAS from this fill's own word, so that a filler whose
	 * entry was taken over never labels the taker's contents as its chunk. */
	if (!atomic_compare_exchange_strong_explicit(&en->word, &w,
						     make_word(E_READY, 0, word_gen(ref->word)),
						     memory_order_release, memory_order_relaxed))
		return SF_E_STATE;
	wake(en);
	return 0;
}

int sf__share_abandon(const struct sf_share_ref *ref)
{
	struct share_entry *en = ref->entry;
	uint64_t w = ref->word;

	/* Release: pairs with the acquire load of a later claimer, like a publish. */
	if (!atomic_compare_exchange_strong_explicit(&en->word, &w,
						     make_word(E_EMPTY, 0, word_gen(ref->word)),
						     memory_order_release, memory_order_relaxed))
		return SF_E_STATE;
	wake(en);
	return 0;
}
