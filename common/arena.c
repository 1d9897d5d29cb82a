/*
 * Arena creation, attach, stale-arena reclaim and destruction.
 *
 * Creation never exposes a half-built arena: the object is built under a temporary name
 * ("shmfeed.JOB.new.PID"), its full size reserved with posix_fallocate (so a full
 * /dev/shm is an error here, never a SIGBUS later), its header written with the magic
 * stored last, and only then linked under its real name with link(2), which fails with
 * EEXIST instead of replacing another arena.
 *
 * Liveness (see arena.h) rests on OFD locks of the arena object. A stale arena, whose
 * creator's lock is free, is reclaimed only by the process that takes that lock, so two
 * launchers can never both reclaim it and unlink each other's fresh arena.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/futex.h"
#include "common/io.h"
#include "common/proc.h"
#include "common/slot.h"

#define SHM_DIR_DEFAULT "/dev/shm"
#define SHM_PREFIX	"shmfeed."
#define TMP_INFIX	".new."

/* How long a reclaimer waits for children of a dead creator to let go of its lock. */
#define RECLAIM_WAIT_MS 3000

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

int sf__job_name_valid(const char *job)
{
	size_t n;

	/* Not '.' first (a hidden file), nor '-' (the commands would read it as an option). */
	if (!job || !job[0] || job[0] == '.' || job[0] == '-')
		return 0;
	n = strlen(job);
	if (n >= SF_JOB_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = job[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return 0;
	}
	/* The temporary name used during creation must not be a job name. */
	return strstr(job, TMP_INFIX) == NULL;
}

int sf__arena_layout(const struct sf_geometry *geo, int hugepages, struct sf_arena_header *hdr,
		     struct sf_err *e)
{
	uint64_t nslots, payload_bytes, stride, off, palign;
	uint32_t nparts;

	if (geo->ranks < 1 || geo->ranks > SF_MAX_RANKS)
		return sf__err(e, SF_E_CONFIG, "ranks must be 1..%u, got %u", SF_MAX_RANKS,
			       geo->ranks);
	if (geo->slots_per_rank < 1 || geo->slots_per_rank > SF_MAX_SLOTS_PER_RANK)
		return sf__err(e, SF_E_CONFIG, "slots per rank must be 1..%u, got %u",
			       SF_MAX_SLOTS_PER_RANK, geo->slots_per_rank);
	if (geo->max_producers > SF_MAX_PRODUCERS)
		return sf__err(e, SF_E_CONFIG, "producers must be 0..%u, got %u", SF_MAX_PRODUCERS,
			       geo->max_producers);
	if (geo->token_bytes != 2 && geo->token_bytes != 4)
		return sf__err(e, SF_E_CONFIG, "token bytes must be 2 or 4, got %u",
			       geo->token_bytes);
	if (geo->batch < 1 || geo->seq_tokens < 2)
		return sf__err(e, SF_E_CONFIG, "batch must be >= 1 and seq_tokens >= 2");
	if (geo->world_size < geo->ranks || geo->rank_base > geo->world_size - geo->ranks)
		return sf__err(e, SF_E_CONFIG,
			       "world size %u and rank base %u do not hold %u local ranks",
			       geo->world_size, geo->rank_base, geo->ranks);
	nparts = geo->max_producers + geo->ranks;
	if (nparts > SF_SLOT_OWNER_MAX)
		return sf__err(e, SF_E_CONFIG, "too many participants (%u)", nparts);

	/* Each product is bounded before it is scaled, so that no geometry (these fields may
	 * come from a crafted arena header) wraps the 64-bit arithmetic below. */
	if ((uint64_t)geo->batch * geo->seq_tokens > SF_PAYLOAD_MAX / geo->token_bytes ||
	    (uint64_t)geo->batch * geo->doc_starts_per_seq > SF_PAYLOAD_MAX / sizeof(uint32_t))
		return sf__err(e, SF_E_CONFIG,
			       "a payload of %u x %u tokens and %u document starts a row exceeds "
			       "%llu bytes",
			       geo->batch, geo->seq_tokens, geo->doc_starts_per_seq,
			       (unsigned long long)SF_PAYLOAD_MAX);
	payload_bytes = (uint64_t)geo->batch * geo->seq_tokens * geo->token_bytes;
	if (geo->doc_starts_per_seq)
		payload_bytes =
			sf__doc_starts_offset(geo->batch, geo->seq_tokens, geo->token_bytes) +
			(uint64_t)geo->batch * geo->doc_starts_per_seq * sizeof(uint32_t);
	/* A mixture's row sources follow, inside the payload (its checksum, its GPU copy). */
	if (geo->flags & SF_ARENA_F_SOURCES)
		payload_bytes = sf__sources_offset(geo->batch, geo->seq_tokens, geo->token_bytes,
						   geo->doc_starts_per_seq) +
				(uint64_t)geo->batch * sizeof(int32_t);
	if (payload_bytes > SF_PAYLOAD_MAX)
		return sf__err(e, SF_E_CONFIG, "payload of %llu bytes is too large",
			       (unsigned long long)payload_bytes);
	palign = hugepages ? SF_HUGE_PAGE_SIZE : SF_PAGE_SIZE;
	stride = align_up(payload_bytes ? payload_bytes : 1, SF_PAGE_SIZE);
	/* A huge-page stride only pays for payloads of at least half a huge page. */
	if (hugepages && stride >= SF_HUGE_PAGE_SIZE / 2)
		stride = align_up(stride, SF_HUGE_PAGE_SIZE);
	nslots = (uint64_t)geo->ranks * geo->slots_per_rank;

	if (!hdr)
		return 0;
	off = SF_PAGE_SIZE;
	hdr->participants_off = off;
	off += align_up((uint64_t)nparts * sizeof(struct sf_participant), SF_CACHE_LINE);
	hdr->rings_off = off;
	off += (uint64_t)geo->ranks * sizeof(struct sf_ring);
	hdr->slots_off = off;
	off += nslots * sizeof(struct sf_slot);
	hdr->telemetry_off = off;
	off += (uint64_t)nparts * sizeof(struct sf_telemetry);
	hdr->payloads_off = align_up(off, palign);
	hdr->payload_stride = stride;
	hdr->payload_bytes = payload_bytes;
	hdr->total_size = align_up(hdr->payloads_off + nslots * stride, palign);
	return 0;
}

static const char *shm_dir(const struct sf_arena_options *opt)
{
	return opt && opt->shm_dir ? opt->shm_dir : SHM_DIR_DEFAULT;
}

static void shm_name_of(const char *job, char *buf, size_t len)
{
	snprintf(buf, len, "/" SHM_PREFIX "%s", job);
}

/* Decide on transparent huge pages for shmem: they are used only when the kernel's
 * shmem_enabled policy honours madvise. */
int sf__arena_hugepages_usable(char *why, size_t len)
{
	char buf[256] = "";
	const char *sel, *end;
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");

	if (!f) {
		snprintf(why, len, "no transparent huge pages for shmem in this kernel");
		return 0;
	}
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	sel = strchr(buf, '[');
	end = sel ? strchr(sel, ']') : NULL;
	if (!sel || !end) {
		snprintf(why, len, "unreadable shmem_enabled policy");
		return 0;
	}
	sel++;
	if (!strncmp(sel, "always", 6) || !strncmp(sel, "within_size", 11) ||
	    !strncmp(sel, "advise", 6) || !strncmp(sel, "force", 5)) {
		snprintf(why, len, "shmem_enabled is [%.*s]", (int)(end - sel), sel);
		return 1;
	}
	snprintf(why, len, "shmem_enabled is [%.*s]", (int)(end - sel), sel);
	return 0;
}

/*
 * Map `size` bytes of the object `name` that the handle `a` has open, through a
 * descriptor of its own, closed once mapped. Never through the lock descriptor: a mapping
 * holds its open file description until unmapped, and a child of fork() inherits the
 * mapping, so the lock descriptor's locks (the creator's, a participant's) would live on
 * in any child after the fork handler closed the descriptor, and a dead process would look
 * alive until its last child ended. 0 and *ret, or -errno (-ESTALE: `name` now names
 * another object).
 */
static int map_object(const struct sf_arena *a, const char *name, size_t size, void **ret)
{
	struct stat st;
	void *p;
	int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0), r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (st.st_ino != a->ino || st.st_dev != a->dev)
		r = -ESTALE;
	if (r == 0) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			r = -errno;
		else
			*ret = p;
	}
	close(fd);
	return r;
}

/* The pointers into a mapping, from the offsets of `layout`: a header this process wrote
 * or a private copy that sf__arena_header_check() accepted. */
/* Point the handle at the regions of the mapping `base` of `size` bytes. */
static void arena_map(struct sf_arena *a, void *base, size_t size,
		      const struct sf_arena_header *layout)
{
	unsigned char *b = base;

	a->hdr = base;
	a->map_size = size;
	a->participants = (struct sf_participant *)(b + layout->participants_off);
	a->rings = (struct sf_ring *)(b + layout->rings_off);
	a->slots = (struct sf_slot *)(b + layout->slots_off);
	a->telemetry = (struct sf_telemetry *)(b + layout->telemetry_off);
	a->payloads = b + layout->payloads_off;
	a->geo = layout->geo;
	a->verify_every = layout->verify_every ? layout->verify_every : 1;
	a->payload_stride = layout->payload_stride;
	a->payload_bytes = layout->payload_bytes;
}

/* One OFD lock operation on byte `byte` of `fd`: F_OFD_SETLK with `type`. */
static int ofd_setlk(int fd, uint64_t byte, short type)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};

	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	return errno == EAGAIN || errno == EACCES ? SF_E_BUSY : -errno;
}

/*
 * The arenas this process has open, so that a child of fork() closes the descriptors it
 * inherited: they share their open file descriptions, hence their locks, with the
 * parent, and a child that kept them would keep a dead parent looking alive.
 */
static pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sf_arena *fork_list;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&fork_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&fork_lock);
}

static void fork_child(void)
{
	for (struct sf_arena *a = fork_list; a; a = a->fork_next) {
		if (a->lock_fd >= 0)
			close(a->lock_fd);
		if (a->probe_fd >= 0)
			close(a->probe_fd);
		a->lock_fd = -1;
		a->probe_fd = -1;
		a->inherited = 1;
	}
	pthread_mutex_unlock(&fork_lock);
}

static void fork_register_handlers(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Open both descriptors of the object `name` (the first with `oflag`), the same object
 * both, into `a`; the caller holds fork_lock. 0 or -errno, nothing left open on failure. */
static int open_fds_locked(struct sf_arena *a, const char *name, int oflag)
{
	struct stat st, pst;
	int r = 0;

	a->lock_fd = shm_open(name, oflag | O_CLOEXEC, 0600);
	if (a->lock_fd < 0)
		return -errno;
	a->probe_fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (a->probe_fd < 0 || fstat(a->lock_fd, &st) < 0 || fstat(a->probe_fd, &pst) < 0)
		r = -errno;
	else if (st.st_ino != pst.st_ino || st.st_dev != pst.st_dev ||
		 (a->ino && (st.st_ino != a->ino || st.st_dev != a->dev)))
		r = -ESTALE; /* the name was replaced between the opens, or since attach */
	if (r < 0) {
		close(a->lock_fd);
		if (a->probe_fd >= 0)
			close(a->probe_fd);
		a->lock_fd = a->probe_fd = -1;
		return r;
	}
	a->ino = st.st_ino;
	a->dev = st.st_dev;
	return 0;
}

/*
 * A new handle of the object `name`, its two descriptors opened and the handle entered
 * in the process's list in one step under fork_lock: a fork() by another thread meanwhile
 * either comes before (the child has none of them) or after (its fork handler closes
 * them), never between, where a child would keep this process's locks. 0 and *ret, or
 * -errno (ENOMEM when out of memory).
 */
static int arena_open(const char *name, int oflag, struct sf_arena **ret)
{
	struct sf_arena *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return -ENOMEM;
	pthread_once(&fork_once, fork_register_handlers);
	pthread_mutex_lock(&fork_lock);
	r = open_fds_locked(a, name, oflag);
	if (r == 0) {
		a->fork_next = fork_list;
		fork_list = a;
	}
	pthread_mutex_unlock(&fork_lock);
	if (r < 0) {
		free(a);
		return r;
	}
	*ret = a;
	return 0;
}

/* Take the handle out of the list and close its descriptors, under fork_lock; free it. */
static void arena_close(struct sf_arena *a)
{
	pthread_mutex_lock(&fork_lock);
	for (struct sf_arena **pp = &fork_list; *pp; pp = &(*pp)->fork_next) {
		if (*pp == a) {
			*pp = a->fork_next;
			break;
		}
	}
	if (a->lock_fd >= 0)
		close(a->lock_fd);
	if (a->probe_fd >= 0)
		close(a->probe_fd);
	pthread_mutex_unlock(&fork_lock);
	free(a);
}

/* Open the lock descriptors again where fork() closed them: in a child, by name, and only
 * if the name still names the object attached. */
static int lock_fds(struct sf_arena *a)
{
	int r = 0;

	if (a->lock_fd >= 0 && a->probe_fd >= 0)
		return 0;
	pthread_mutex_lock(&fork_lock);
	if (a->lock_fd < 0 || a->probe_fd < 0)
		r = open_fds_locked(a, a->shm_name, O_RDWR);
	pthread_mutex_unlock(&fork_lock);
	return r;
}

int sf__arena_lock(struct sf_arena *a, uint64_t byte)
{
	int r = lock_fds(a);

	return r < 0 ? r : ofd_setlk(a->lock_fd, byte, F_WRLCK);
}

int sf__arena_lock_wait(struct sf_arena *a, uint64_t byte)
{
	struct flock fl = {
		.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};
	int r = lock_fds(a);

	if (r < 0)
		return r;
	while (fcntl(a->lock_fd, F_OFD_SETLKW, &fl) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

void sf__arena_unlock(struct sf_arena *a, uint64_t byte)
{
	if (a->lock_fd >= 0)
		ofd_setlk(a->lock_fd, byte, F_UNLCK);
}

int sf__arena_fence(struct sf_arena *a, uint64_t byte)
{
	int r = lock_fds(a);

	return r < 0 ? r : ofd_setlk(a->probe_fd, byte, F_WRLCK);
}

void sf__arena_unfence(struct sf_arena *a, uint64_t byte)
{
	if (a->probe_fd >= 0)
		ofd_setlk(a->probe_fd, byte, F_UNLCK);
}

int sf__arena_lock_held(struct sf_arena *a, uint64_t byte)
{
	struct flock fl = {
		.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};
	int r = lock_fds(a);

	if (r < 0)
		return r;
	if (fcntl(a->probe_fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	return fl.l_type != F_UNLCK;
}

/*
 * An existing object named like the arena: reclaim it if it is a stale shmfeed arena.
 * Returns 1 once it is unlinked, or an error that leaves it alone: SF_E_NOT_SHMFEED,
 * SF_E_UID, SF_E_BUSY (live creator), -ENOENT (it vanished or changed meanwhile: look
 * again).
 */
static int reclaim_stale(const char *dir, const char *name, struct sf_err *e)
{
	struct sf_arena_header prefix;
	struct stat st, now;
	char path[512];
	int fd, r;
	void *p;

	fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		/* Job names are one namespace for every user of the machine. */
		if (errno == EACCES)
			return sf__err(e, SF_E_UID,
				       "/dev/shm%s belongs to another user (job names are shared by "
				       "all users of the machine): give this job another name",
				       name);
		return -errno;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (st.st_uid != geteuid()) {
		r = sf__err(e, SF_E_UID, "/dev/shm%s belongs to uid %u, not to uid %u", name,
			    (unsigned)st.st_uid, (unsigned)geteuid());
		goto out;
	}
	if ((size_t)st.st_size < SF_PAGE_SIZE) {
		r = sf__err(e, SF_E_NOT_SHMFEED,
			    "/dev/shm%s exists but is not a shmfeed arena (%lld bytes)", name,
			    (long long)st.st_size);
		goto out;
	}
	p = mmap(NULL, SF_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto out;
	}
	memcpy(&prefix, p, offsetof(struct sf_arena_header, header_size));
	munmap(p, SF_PAGE_SIZE);
	if (prefix.magic != SF_ARENA_MAGIC) {
		r = sf__err(e, SF_E_NOT_SHMFEED,
			    "/dev/shm%s exists but is not a shmfeed arena (bad magic)", name);
		goto out;
	}
	/* The fence: holding the creator's byte proves the creator gone and keeps every
	 * other reclaimer out until this descriptor closes. A creator of a layout before
	 * version 3 held no such lock; its process is asked instead. */
	r = ofd_setlk(fd, SF_LOCK_CREATOR, F_WRLCK);
	/* A child forked by the creator holds the byte too until it has closed what it
	 * inherited (at once after fork(), unless it was stopped before it ran): with the
	 * creator itself gone, give such an orphan a few seconds to do so or die. */
	for (int waited = 0; r == SF_E_BUSY && waited < RECLAIM_WAIT_MS &&
			     kill(prefix.creator_pid, 0) < 0 && errno == ESRCH;
	     waited += 10) {
		usleep(10 * 1000);
		r = ofd_setlk(fd, SF_LOCK_CREATOR, F_WRLCK);
	}
	if (r == 0 && prefix.layout_version < 3 &&
	    sf__proc_alive(prefix.creator_pid, prefix.creator_starttime))
		r = SF_E_BUSY;
	if (r == SF_E_BUSY) {
		r = sf__err(e, SF_E_BUSY,
			    "job arena /dev/shm%s is in use by live pid %d: the job runs already "
			    "(`shmfeed status %s`, `shmfeed stop %s`), or give this one another "
			    "name (--set job=NAME)",
			    name, prefix.creator_pid, name + 1 + strlen(SHM_PREFIX),
			    name + 1 + strlen(SHM_PREFIX));
		goto out;
	}
	if (r < 0) {
		r = sf__err(e, r, "cannot lock /dev/shm%s: %s", name, strerror(-r));
		goto out;
	}
	/* Only a reclaimer holding this object's creator byte unlinks its name, and link()
	 * never replaces a name, so while the byte is held the name still names this object
	 * unless it was unlinked before the byte was taken: check that last case. */
	snprintf(path, sizeof(path), "%s%s", dir, name);
	if (stat(path, &now) < 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
		r = -ENOENT;
		goto out;
	}
	SF_TEST_POINT(SF_TP_RECLAIM_FENCED);
	r = shm_unlink(name) < 0 ? -errno : 1;
out:
	close(fd);
	return r;
}

/* A size in bytes for messages, with its binary-unit rounding. */
static void size_words(uint64_t bytes, char *buf, size_t len)
{
	if (bytes >= (UINT64_C(1) << 30))
		snprintf(buf, len, "%llu bytes (%.1f GiB)", (unsigned long long)bytes,
			 (double)bytes / (double)(UINT64_C(1) << 30));
	else
		snprintf(buf, len, "%llu bytes (%.1f MiB)", (unsigned long long)bytes,
			 (double)bytes / (double)(UINT64_C(1) << 20));
}

/*
 * Leftovers of creations that died before linking: "shmfeed.JOB.new.PID" with PID dead
 * (names of live creators are left alone). Removes them, or, with `out`, lists them there
 * ("PATH (SIZE), ...") and returns how many there are.
 */
static int dead_temporaries(const char *dir, const char *job, char *out, size_t len)
{
	char prefix[SF_JOB_NAME_MAX + 32];
	struct dirent *de;
	size_t plen;
	int count = 0;
	DIR *d;

	snprintf(prefix, sizeof(prefix), SHM_PREFIX "%s" TMP_INFIX, job);
	plen = strlen(prefix);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char name[300], size[64];
		struct stat st;
		size_t used;
		pid_t pid;

		/* Digits only: "shmfeed.J.new.new.PID" is the temporary of job "J.new". */
		if (strncmp(de->d_name, prefix, plen) || !de->d_name[plen] ||
		    strspn(de->d_name + plen, "0123456789") != strlen(de->d_name + plen))
			continue;
		pid = (pid_t)atoi(de->d_name + plen);
		/* EPERM: alive, another user's. */
		if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM))
			continue;
		if (!out) {
			snprintf(name, sizeof(name), "/%s", de->d_name);
			shm_unlink(name);
			continue;
		}
		snprintf(name, sizeof(name), "%s/%s", dir, de->d_name);
		if (stat(name, &st) < 0)
			continue;
		size_words((uint64_t)st.st_size, size, sizeof(size));
		used = strlen(out);
		snprintf(out + used, len - used, "%s%s (%s)", count ? ", " : "", name, size);
		count++;
	}
	closedir(d);
	return count;
}

int sf__arena_dead_temporaries(const char *job, char *out, size_t len)
{
	if (!len)
		return 0;
	out[0] = '\0';
	return dead_temporaries(SHM_DIR_DEFAULT, job, out, len);
}

int sf__arena_fits(uint64_t total_size, const char *dir, struct sf_err *e)
{
	char need[64], have[64];
	struct statvfs vfs;
	struct rlimit as;
	void *probe;

	if (!dir)
		dir = SHM_DIR_DEFAULT;
	size_words(total_size, need, sizeof(need));
	if (total_size > SIZE_MAX / 2)
		return sf__err(e, SF_E_CONFIG,
			       "an arena of %s is more than this machine can address", need);
	if (statvfs(dir, &vfs) == 0 && vfs.f_blocks &&
	    total_size > (uint64_t)vfs.f_blocks * vfs.f_frsize) {
		size_words((uint64_t)vfs.f_blocks * vfs.f_frsize, have, sizeof(have));
		return sf__err(e, SF_E_CONFIG,
			       "the arena needs %s but %s holds %s in all: lower batch.size, "
			       "batch.seq_len, arena.slots_per_rank or the local ranks, or enlarge "
			       "%s (mount -o remount,size=...)",
			       need, dir, have, dir);
	}
	/* Every process of the job maps the whole arena: ask the kernel whether this one can
	 * (address space, RLIMIT_AS) with a reservation that costs no memory. */
	probe = mmap(NULL, (size_t)total_size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (probe == MAP_FAILED) {
		int err = errno;

		if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
			size_words((uint64_t)as.rlim_cur, have, sizeof(have));
			return sf__err(
				e, SF_E_CONFIG,
				"the arena needs %s of address space in every process of the "
				"job, but this process cannot map it under its RLIMIT_AS of %s "
				"(ulimit -v): raise the limit or make the arena smaller",
				need, have);
		}
		return sf__err(e, SF_E_CONFIG,
			       "the arena needs %s of address space in every process of the job, "
			       "and this process cannot map it: %s",
			       need, strerror(err));
	}
	munmap(probe, (size_t)total_size);
	return 0;
}

int sf__arena_create(const char *job, const struct sf_geometry *geo,
		     const struct sf_arena_options *opt, struct sf_arena **ret_arena,
		     char *ret_note, size_t note_len, struct sf_err *e)
{
	struct sf_arena_header layout = {0};
	char name[SF_JOB_NAME_MAX + 16], tmp[SF_JOB_NAME_MAX + 48], path[512], tpath[512];
	char why[128] = "";
	struct sf_arena_header *h;
	struct sf_arena *a;
	uint64_t starttime = 0;
	int hugepages = 0, fd, r;
	void *base = NULL;

	if (!sf__job_name_valid(job))
		return sf__err(e, SF_E_CONFIG,
			       "invalid job name '%s': use 1-63 characters of A-Z a-z 0-9 _ - .",
			       job ? job : "");
	if (opt && opt->hugepages)
		hugepages = sf__arena_hugepages_usable(why, sizeof(why));
	r = sf__arena_layout(geo, hugepages, &layout, e);
	if (r < 0)
		return r;
	r = sf__arena_fits(layout.total_size, shm_dir(opt), e);
	if (r < 0)
		return r;
	if (ret_note && note_len)
		snprintf(ret_note, note_len, "%s",
			 !(opt && opt->hugepages) ? "huge pages not requested; 4 KiB pages"
			 : hugepages		  ? "huge pages (2 MiB, THP) advised for payloads"
						  : "huge pages unavailable, using 4 KiB pages");
	if (ret_note && note_len && opt && opt->hugepages) {
		size_t n = strlen(ret_note);

		snprintf(ret_note + n, note_len - n, " (%s)", why);
	}

	shm_name_of(job, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), "/" SHM_PREFIX "%s" TMP_INFIX "%d", job, (int)getpid());
	snprintf(path, sizeof(path), "%s%s", shm_dir(opt), name);
	snprintf(tpath, sizeof(tpath), "%s%s", shm_dir(opt), tmp);
	dead_temporaries(shm_dir(opt), job, NULL, 0);
	sf__proc_starttime(getpid(), &starttime);

	r = arena_open(tmp, O_RDWR | O_CREAT | O_EXCL, &a);
	if (r < 0) {
		if (r != -EEXIST)
			shm_unlink(tmp);
		return sf__err(e, r, "cannot create /dev/shm%s: %s", tmp, strerror(-r));
	}
	/* The creator's lock, held through the handle's lock descriptor for the arena's
	 * life (its probe descriptor tests other processes' locks). */
	fd = a->lock_fd;
	r = ofd_setlk(fd, SF_LOCK_CREATOR, F_WRLCK);
	if (r < 0) {
		r = sf__err(e, r, "cannot lock /dev/shm%s: %s", tmp, strerror(-r));
		goto fail_unlink;
	}
	{
		/* Past RLIMIT_FSIZE the reservation raises SIGXFSZ, which killed the launcher
		 * without a word: held, it fails with EFBIG instead. */
		sigset_t saved;
		bool held = sf__xfsz_hold(&saved);

		r = posix_fallocate(fd, 0, (off_t)layout.total_size);
		sf__xfsz_release(held, &saved);
	}
	if (r) {
		struct statvfs vfs;
		unsigned long long avail = 0;

		if (statvfs(shm_dir(opt), &vfs) == 0)
			avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
		r = sf__err(e, -r,
			    "cannot reserve %llu bytes for job '%s' in %s (%llu bytes free): %s%s",
			    (unsigned long long)layout.total_size, job, shm_dir(opt), avail,
			    strerror(r),
			    r == EFBIG ? " (the file size limit, ulimit -f, is below the arena's "
					 "size)"
				       : "");
		goto fail_unlink;
	}
	r = map_object(a, tmp, layout.total_size, &base);
	if (r < 0) {
		sf__err(e, r, "cannot map arena of %llu bytes: %s",
			(unsigned long long)layout.total_size, strerror(-r));
		goto fail_unlink;
	}
	/* posix_fallocate left every byte zero: all slots are FREE at lap 0, all
	 * participants free, all counters zero. Only the header needs writing. */
	h = base;
	h->layout_version = SF_ARENA_LAYOUT_VERSION;
	h->creator_uid = (uint32_t)geteuid();
	h->creator_pid = (int32_t)getpid();
	h->creator_starttime = starttime;
	h->header_size = sizeof(struct sf_arena_header);
	h->participant_size = sizeof(struct sf_participant);
	h->slot_size = sizeof(struct sf_slot);
	h->ring_size = sizeof(struct sf_ring);
	h->telemetry_size = sizeof(struct sf_telemetry);
	h->verify_every = opt && opt->verify_every ? opt->verify_every : 1;
	snprintf(h->job, sizeof(h->job), "%s", job);
	h->geo = *geo;
	h->geo.flags =
		(geo->flags & ~SF_ARENA_F_HUGEPAGES) | (hugepages ? SF_ARENA_F_HUGEPAGES : 0);
	h->payload_stride = layout.payload_stride;
	h->payload_bytes = layout.payload_bytes;
	h->participants_off = layout.participants_off;
	h->rings_off = layout.rings_off;
	h->slots_off = layout.slots_off;
	h->telemetry_off = layout.telemetry_off;
	h->payloads_off = layout.payloads_off;
	h->total_size = layout.total_size;
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		h->created_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
	atomic_store_explicit(&h->job_state, SF_JOB_INIT, memory_order_relaxed);
	/* A static base is known from the start; an automatic one when the first rank
	 * attaches (common/node_ranks.c). Relaxed: published by the release store of the
	 * magic below. */
	if (!(geo->flags & SF_ARENA_F_RANK_AUTO))
		atomic_store_explicit(&h->node_ranks, sf__node_ranks_word(1, geo->rank_base, 1),
				      memory_order_relaxed);
	if (hugepages)
		madvise((unsigned char *)base + h->payloads_off, h->total_size - h->payloads_off,
			MADV_HUGEPAGE);
	/* Release: pairs with the acquire load of the magic in sf__arena_attach(), so an
	 * attacher that sees the magic sees the whole header. */
	atomic_store_explicit((_Atomic uint64_t *)&h->magic, SF_ARENA_MAGIC, memory_order_release);

	for (int attempt = 0;; attempt++) {
		if (link(tpath, path) == 0)
			break;
		if (errno != EEXIST || attempt == 2) {
			r = sf__err(e, -errno, "cannot publish arena %s: %s", path,
				    strerror(errno));
			goto fail_unmap;
		}
		r = reclaim_stale(shm_dir(opt), name, e);
		if (r == -ENOENT)
			continue;
		if (r < 0)
			goto fail_unmap;
		if (ret_note && note_len) {
			size_t n = strlen(ret_note);

			snprintf(ret_note + n, note_len - n,
				 "; reclaimed the stale arena of a dead launcher");
		}
	}
	shm_unlink(tmp);

	/* The header as this process wrote it (`layout` holds offsets, not geometry). */
	arena_map(a, base, layout.total_size, h);
	a->creator = 1;
	snprintf(a->shm_name, sizeof(a->shm_name), "%s", name);
	*ret_arena = a;
	return 0;

fail_unmap:
	munmap(base, layout.total_size);
fail_unlink:
	shm_unlink(tmp);
	arena_close(a);
	return r;
}

int sf__arena_header_check(const struct sf_arena_header *h, uint64_t file_size, const char *where,
			   struct sf_err *e)
{
	struct sf_arena_header want = {0};
	struct sf_err why = {0};

	if (h->magic != SF_ARENA_MAGIC)
		return sf__err(e, SF_E_NOT_SHMFEED, "%s is not a shmfeed arena", where);
	if (h->layout_version != SF_ARENA_LAYOUT_VERSION)
		return sf__err(e, SF_E_LAYOUT,
			       "%s has layout version %u, this build speaks version %u", where,
			       h->layout_version, SF_ARENA_LAYOUT_VERSION);
	if (h->header_size != sizeof(struct sf_arena_header) ||
	    h->participant_size != sizeof(struct sf_participant) ||
	    h->slot_size != sizeof(struct sf_slot) || h->ring_size != sizeof(struct sf_ring) ||
	    h->telemetry_size != sizeof(struct sf_telemetry))
		return sf__err(e, SF_E_LAYOUT, "%s: arena structure sizes differ from this build",
			       where);
	if (!memchr(h->job, 0, sizeof(h->job)) || !sf__job_name_valid(h->job))
		return sf__err(e, SF_E_LAYOUT, "%s: the header's job name is not a valid name",
			       where);
	if (h->geo.flags & ~SF_ARENA_F_KNOWN)
		return sf__err(e, SF_E_LAYOUT, "%s: unknown flags 0x%x in the header", where,
			       h->geo.flags & ~SF_ARENA_F_KNOWN);
	if (h->verify_every < 1)
		return sf__err(e, SF_E_LAYOUT, "%s: the header's verify_every is 0", where);
	/* The geometry decides every offset: recompute the layout from it, with this
	 * build's limits, and accept only a header that says exactly the same. */
	if (sf__arena_layout(&h->geo, !!(h->geo.flags & SF_ARENA_F_HUGEPAGES), &want, &why) < 0)
		return sf__err(e, SF_E_LAYOUT, "%s: invalid geometry in the header: %s", where,
			       why.msg);
#define LAYOUT_CHECK(f)                                                                            \
	if (h->f != want.f)                                                                        \
		return sf__err(e, SF_E_LAYOUT,                                                     \
			       "%s: header field " #f " is %llu, but its geometry lays it out at " \
			       "%llu",                                                             \
			       where, (unsigned long long)h->f, (unsigned long long)want.f);
	LAYOUT_CHECK(participants_off)
	LAYOUT_CHECK(rings_off)
	LAYOUT_CHECK(slots_off)
	LAYOUT_CHECK(telemetry_off)
	LAYOUT_CHECK(payloads_off)
	LAYOUT_CHECK(payload_stride)
	LAYOUT_CHECK(payload_bytes)
	LAYOUT_CHECK(total_size)
#undef LAYOUT_CHECK
	{
		/* The node's ranks: mutable, but always a base that holds the local ranks,
		 * and for a static base the configured one. */
		uint64_t nr = atomic_load_explicit(&h->node_ranks, memory_order_relaxed);
		uint32_t base;
		int known = sf__node_ranks_decode(nr, &h->geo, &base);

		if (known < 0 || (!(h->geo.flags & SF_ARENA_F_RANK_AUTO) &&
				  (!known || base != h->geo.rank_base)))
			return sf__err(e, SF_E_LAYOUT,
				       "%s: the header's node ranks 0x%016llx do not fit %u local "
				       "ranks of world size %u (%s rank base %u)",
				       where, (unsigned long long)nr, h->geo.ranks,
				       h->geo.world_size,
				       h->geo.flags & SF_ARENA_F_RANK_AUTO ? "automatic" : "static",
				       h->geo.rank_base);
		if ((h->geo.flags & SF_ARENA_F_RANK_AUTO) && h->geo.rank_base)
			return sf__err(e, SF_E_LAYOUT,
				       "%s: rank base %u in the geometry of an automatic base",
				       where, h->geo.rank_base);
	}
	if (h->total_size != file_size)
		return sf__err(e, SF_E_LAYOUT, "%s: the header says %llu bytes, the file has %llu",
			       where, (unsigned long long)h->total_size,
			       (unsigned long long)file_size);
	return 0;
}

static int attach_once(const char *job, const struct sf_geometry *expect,
		       struct sf_arena **ret_arena, struct sf_err *e)
{
	char name[SF_JOB_NAME_MAX + 16], where[SF_JOB_NAME_MAX * 2 + 48];
	struct sf_arena_header h;
	struct sf_arena *a;
	struct stat st;
	void *base = NULL;
	ssize_t got;
	int fd, r;

	if (!sf__job_name_valid(job))
		return sf__err(e, SF_E_CONFIG, "invalid job name '%s'", job ? job : "");
	shm_name_of(job, name, sizeof(name));
	snprintf(where, sizeof(where), "job '%s': /dev/shm%s", job, name);
	/* Both descriptors first, entered in the fork list at once (see arena_open()). */
	r = arena_open(name, O_RDWR, &a);
	if (r < 0) {
		if (r == -ENOENT)
			return sf__err(e, r,
				       "no shmfeed job '%s' (no /dev/shm%s): start it with "
				       "`shmfeed run JOB.yaml -- COMMAND`",
				       job, name);
		if (r == -EACCES)
			return sf__err(e, SF_E_UID, "job '%s': /dev/shm%s belongs to another user",
				       job, name);
		return sf__err(e, r, "cannot open /dev/shm%s: %s", name, strerror(-r));
	}
	fd = a->lock_fd;
	SF_TEST_POINT(SF_TP_ATTACH_OPENED);
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto fail_close;
	}
	if (st.st_uid != geteuid()) {
		r = sf__err(e, SF_E_UID, "job '%s': /dev/shm%s belongs to uid %u, not %u", job,
			    name, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail_close;
	}
	if ((size_t)st.st_size < SF_PAGE_SIZE) {
		r = sf__err(e, SF_E_NOT_SHMFEED, "%s is not a shmfeed arena", where);
		goto fail_close;
	}
	/* The header is read into private memory and checked there, against the file's
	 * size, before anything is mapped: nothing derived from it can point outside the
	 * file, and a header rewritten meanwhile cannot change what was checked. The
	 * creator stores the magic last and links the name only after that, so a header
	 * read through the name is complete. */
	got = pread(fd, &h, sizeof(h), 0);
	if (got != (ssize_t)sizeof(h)) {
		r = got < 0 ? -errno : SF_E_NOT_SHMFEED;
		if (r == SF_E_NOT_SHMFEED)
			sf__err(e, r, "%s: short header", where);
		goto fail_close;
	}
	r = sf__arena_header_check(&h, (uint64_t)st.st_size, where, e);
	if (r < 0)
		goto fail_close;
	if (expect) {
		const struct sf_geometry *g = &h.geo;
#define GEO_CHECK(f)                                                                               \
	if (expect->f && expect->f != g->f) {                                                      \
		r = sf__err(e, SF_E_GEOMETRY, "job '%s': arena has " #f " %llu, expected %llu",    \
			    job, (unsigned long long)g->f, (unsigned long long)expect->f);         \
		goto fail_close;                                                                   \
	}
		GEO_CHECK(ranks)
		GEO_CHECK(slots_per_rank)
		GEO_CHECK(max_producers)
		GEO_CHECK(batch)
		GEO_CHECK(seq_tokens)
		GEO_CHECK(token_bytes)
		GEO_CHECK(world_size)
		GEO_CHECK(config_digest)
#undef GEO_CHECK
	}
	/* Mapped, not populated: a consumer touches only the header, the tables and its
	 * own ring (sf__arena_populate_rank()), so its resident set is that, not the whole
	 * arena of every rank. */
	r = map_object(a, name, (size_t)st.st_size, &base);
	if (r < 0) {
		sf__err(e, r, "cannot map arena of job '%s': %s", job, strerror(-r));
		goto fail_close;
	}
	arena_map(a, base, (size_t)st.st_size, &h);
	snprintf(a->shm_name, sizeof(a->shm_name), "%s", name);
	*ret_arena = a;
	return 0;

fail_close:
	arena_close(a);
	if (r > -4096 && r < 0 && e && e->code != r)
		sf__err(e, r, "cannot attach job '%s': %s", job, strerror(-r));
	return r;
}

/* A restart of the job may replace its arena between the opens and the mapping
 * (-ESTALE): the name then names the new arena, which is attached instead. */
int sf__arena_attach(const char *job, const struct sf_geometry *expect, struct sf_arena **ret_arena,
		     struct sf_err *e)
{
	int r;

	for (int tries = 0; tries < 4; tries++) {
		r = attach_once(job, expect, ret_arena, e);
		if (r != -ESTALE)
			return r;
	}
	return sf__err(e, r,
		       "job '%s': its arena was replaced each of 4 times this process attached "
		       "it (is the job restarting over and over?)",
		       job);
}

/* Fault in `len` bytes at `p` now rather than on first use; `write`: for writing. */
static int populate(unsigned char *p, uint64_t len, int write)
{
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
	if (madvise(p, (size_t)len, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
#endif
	/* A kernel before 5.14: read a byte of each page, which maps it. */
	for (uint64_t off = 0; off < len; off += SF_PAGE_SIZE)
		(void)*(volatile unsigned char *)(p + off);
	return 0;
}

int sf__arena_populate_rank(struct sf_arena *a, uint32_t rank)
{
	const struct sf_arena_header *h = a->hdr;
	int r;

	if (rank >= a->geo.ranks)
		return SF_E_RANGE;
	r = populate((unsigned char *)h, h->payloads_off, 1);
	if (r == 0)
		r = populate(sf__arena_payload(a, rank, 0),
			     (uint64_t)a->geo.slots_per_rank * a->payload_stride, 0);
	return r;
}

void sf__arena_detach(struct sf_arena *a)
{
	if (!a)
		return;
	munmap(a->hdr, a->map_size);
	arena_close(a);
}

void sf__arena_destroy(struct sf_arena *a)
{
	if (!a)
		return;
	if (a->creator)
		shm_unlink(a->shm_name);
	sf__arena_detach(a);
}

int sf__arena_unlink_job(const char *job)
{
	char name[SF_JOB_NAME_MAX + 16];

	if (!sf__job_name_valid(job))
		return SF_E_CONFIG;
	shm_name_of(job, name, sizeof(name));
	return shm_unlink(name) < 0 ? -errno : 0;
}

int sf__arena_creator_alive(struct sf_arena *a)
{
	return sf__arena_lock_held(a, SF_LOCK_CREATOR) != 0;
}

void sf__arena_set_job_state(struct sf_arena *a, uint32_t state)
{
	struct sf_arena_header *h = a->hdr;

	atomic_store_explicit(&h->job_state, state, memory_order_seq_cst);
	/* Every sleeper re-reads the job state when woken: bump each futex word so a waiter
	 * that has not slept yet does not sleep on a stale value. */
	atomic_fetch_add_explicit(&h->job_seq, 1, memory_order_seq_cst);
	sf__futex_wake(&h->job_seq, INT32_MAX);
	atomic_fetch_add_explicit(&h->free_seq, 1, memory_order_seq_cst);
	sf__futex_wake(&h->free_seq, INT32_MAX);
	for (uint32_t r = 0; r < a->geo.ranks; r++) {
		atomic_fetch_add_explicit(&a->rings[r].ready_seq, 1, memory_order_seq_cst);
		sf__futex_wake(&a->rings[r].ready_seq, INT32_MAX);
	}
}
