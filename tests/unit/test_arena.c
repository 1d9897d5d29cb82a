/*
 * Unit tests of the arena: layout and alignment, create/attach/detach/destroy, and each
 * refusal (busy, stale, not shmfeed, layout version, uid, geometry, too small).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/io.h"
#include "common/slot.h"

static char job[64];

static void setup(void)
{
	snprintf(job, sizeof(job), "t-arena-%d", (int)getpid());
	sf__arena_unlink_job(job);
}

static void teardown(void)
{
	sf__arena_unlink_job(job);
}

TestSuite(arena, .init = setup, .fini = teardown);

static struct sf_geometry geo(void)
{
	return (struct sf_geometry){.ranks = 2,
				    .slots_per_rank = 4,
				    .max_producers = 2,
				    .batch = 3,
				    .seq_tokens = 17,
				    .token_bytes = 2,
				    .world_size = 2,
				    .flags = SF_ARENA_F_CHECKSUM,
				    .config_digest = 0x1234};
}

Test(arena, layout_is_aligned)
{
	struct sf_geometry g = geo();
	struct sf_arena_header h = {0};

	cr_assert_eq(sf__arena_layout(&g, 0, &h, NULL), 0);
	cr_expect_eq(h.participants_off % SF_CACHE_LINE, 0);
	cr_expect_eq(h.rings_off % SF_CACHE_LINE, 0);
	cr_expect_eq(h.slots_off % SF_CACHE_LINE, 0);
	cr_expect_eq(h.telemetry_off % SF_CACHE_LINE, 0);
	cr_expect_eq(h.payloads_off % SF_PAGE_SIZE, 0);
	cr_expect_eq(h.payload_stride % SF_PAGE_SIZE, 0);
	cr_expect_eq(h.payload_bytes, 3 * 17 * 2);
	cr_expect_geq(h.total_size, h.payloads_off + 8 * h.payload_stride);
	cr_expect_eq(sizeof(struct sf_slot), 64);
	cr_expect_eq(sizeof(struct sf_participant), 64);
	/* The slot headers do not overlap the telemetry, nor the telemetry the payloads. */
	cr_expect_geq(h.telemetry_off, h.slots_off + 8 * sizeof(struct sf_slot));
	cr_expect_geq(h.payloads_off, h.telemetry_off + 4 * sizeof(struct sf_telemetry));
}

/* A mixture's row sources are inside the payload: with tokens that fill a page exactly
 * (2 rows of 1,024 uint16), they needed a second page the stride did not give them. */
Test(arena, layout_holds_a_mixtures_sources)
{
	struct sf_geometry g = geo();
	struct sf_arena_header h = {0};

	g.batch = 2;
	g.seq_tokens = 1024;
	g.flags |= SF_ARENA_F_SOURCES;
	cr_assert_eq(sf__arena_layout(&g, 0, &h, NULL), 0);
	cr_expect_eq(h.payload_bytes, sf__sources_offset(2, 1024, 2, 0) + 2 * sizeof(int32_t));
	cr_expect_eq(h.payload_bytes, 4096 + 8);
	cr_expect_eq(h.payload_stride, 2 * SF_PAGE_SIZE);
	g.doc_starts_per_seq = 128;
	g.batch = 8;
	cr_assert_eq(sf__arena_layout(&g, 0, &h, NULL), 0);
	cr_expect_eq(h.payload_bytes,
		     sf__sources_offset(8, 1024, 2, 128) + 8 * sizeof(int32_t));
	cr_expect_geq(h.payload_stride, h.payload_bytes);
}

Test(arena, layout_rejects_bad_geometry)
{
	struct sf_geometry g = geo();
	struct sf_err e = {0};

	g.token_bytes = 3;
	cr_expect_eq(sf__arena_layout(&g, 0, NULL, &e), SF_E_CONFIG);
	cr_expect(strstr(e.msg, "token bytes"));
	g = geo();
	g.ranks = 0;
	cr_expect_eq(sf__arena_layout(&g, 0, NULL, &e), SF_E_CONFIG);
	g = geo();
	g.world_size = 1;
	cr_expect_eq(sf__arena_layout(&g, 0, NULL, &e), SF_E_CONFIG);
}

Test(arena, job_names)
{
	cr_expect(sf__job_name_valid("demo"));
	cr_expect(sf__job_name_valid("a.b-c_9"));
	cr_expect_not(sf__job_name_valid(""));
	cr_expect_not(sf__job_name_valid(".hidden"));
	cr_expect_not(sf__job_name_valid("a/b"));
	cr_expect_not(sf__job_name_valid("x.new.12"));
	cr_expect_not(sf__job_name_valid(
		"0123456789012345678901234567890123456789012345678901234567890123456789"));
}

Test(arena, create_attach_destroy)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b;
	struct sf_err e = {0};
	char path[128];

	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	cr_expect_eq(a->hdr->magic, SF_ARENA_MAGIC);
	cr_expect_eq(a->hdr->creator_pid, getpid());
	cr_expect_eq(((uintptr_t)a->payloads) % SF_PAGE_SIZE, 0);
	cr_expect_eq(((uintptr_t)a->slots) % SF_CACHE_LINE, 0);
	snprintf(path, sizeof(path), "/dev/shm/shmfeed.%s", job);
	{
		struct stat st;

		cr_assert_eq(stat(path, &st), 0);
		cr_expect_eq(st.st_mode & 0777, 0600);
		cr_expect_eq((uint64_t)st.st_size, a->hdr->total_size);
		/* posix_fallocate reserved every block: nothing is sparse. */
		cr_expect_geq((uint64_t)st.st_blocks * 512, a->hdr->total_size);
	}
	cr_assert_eq(sf__arena_attach(job, &g, &b, &e), 0, "%s", e.msg);
	cr_expect_eq(b->hdr->geo.batch, 3);
	/* Both mappings see the same memory. */
	a->slots[3].step = 77;
	cr_expect_eq(b->slots[3].step, 77);
	sf__arena_detach(b);
	sf__arena_destroy(a);
	cr_expect_eq(access(path, F_OK), -1);
	cr_expect_eq(sf__arena_attach(job, NULL, &b, &e), -ENOENT);
	cr_expect(strstr(e.msg, "no shmfeed job"));
	cr_expect(strstr(e.msg, "start it with `shmfeed run"), "%s", e.msg);
}

/*
 * Creating job J cleared "shmfeed.J.new.*" objects whose PID is dead, and read the
 * temporary of a live creator of job "J.new" ("shmfeed.J.new.new.PID") as PID 0, dead:
 * that job then failed to publish its arena. Only digits after the infix are a PID.
 */
Test(arena, the_temporary_of_a_job_named_j_new_is_not_js)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	char other[128], dead[128];
	int fd;

	snprintf(other, sizeof(other), "/shmfeed.%s.new.new.%d", job, (int)getpid());
	snprintf(dead, sizeof(dead), "/shmfeed.%s.new.%d", job, 0x7ffffff0);
	fd = shm_open(other, O_CREAT | O_EXCL | O_RDWR, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	fd = shm_open(dead, O_CREAT | O_EXCL | O_RDWR, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	sf__arena_destroy(a);
	cr_expect_eq(shm_unlink(other), 0, "job %s.new's temporary was removed", job);
	cr_expect_eq(shm_unlink(dead), -1, "a dead creator's temporary was left");
}

Test(arena, live_arena_is_busy)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b = NULL;
	struct sf_err e = {0};

	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0);
	cr_expect_eq(sf__arena_create(job, &g, NULL, &b, NULL, 0, &e), SF_E_BUSY);
	cr_expect(strstr(e.msg, "live pid"), "%s", e.msg);
	cr_expect_null(b);
	/* The live arena is untouched. */
	cr_expect_eq(a->hdr->magic, SF_ARENA_MAGIC);
	sf__arena_destroy(a);
}

/* Make the arena of `job` stale: a child creates it and dies without destroying it. */
static void make_stale(void)
{
	struct sf_geometry g = geo();
	pid_t child = fork();
	int status;

	cr_assert_geq(child, 0);
	if (child == 0) {
		struct sf_arena *c;

		_exit(sf__arena_create(job, &g, NULL, &c, NULL, 0, NULL) == 0 ? 0 : 1);
	}
	waitpid(child, &status, 0);
	cr_assert_eq(WEXITSTATUS(status), 0);
}

Test(arena, stale_arena_is_reclaimed)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	char note[256] = "";

	make_stale();
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, note, sizeof(note), &e), 0, "%s", e.msg);
	cr_expect(strstr(note, "reclaimed"), "%s", note);
	cr_expect_eq(a->hdr->creator_pid, getpid());
	sf__arena_destroy(a);
}

/*
 * A creator that dies, its arena left behind, with a child of its own that lives on for
 * `child_ms`: forked by fork() (its fork handlers run), or by the raw system call, which
 * runs none, so that the child keeps all the creator inherited it (as one stopped before
 * its handlers ran does).
 */
static void dead_creator_with_a_child(int raw_fork, unsigned child_ms)
{
	struct sf_geometry g = geo();
	pid_t creator = fork();
	int status;

	cr_assert_geq(creator, 0);
	if (creator == 0) {
		struct sf_arena *c;

		if (sf__arena_create(job, &g, NULL, &c, NULL, 0, NULL) < 0)
			_exit(1);
		if ((raw_fork ? syscall(SYS_fork) : fork()) == 0) {
			usleep(child_ms * 1000);
			_exit(0);
		}
		_exit(0);
	}
	waitpid(creator, &status, 0);
	cr_assert_eq(WEXITSTATUS(status), 0);
}

/* A child of the dead creator that still holds what it inherited is waited for, then the
 * arena is reclaimed. */
Test(arena, an_orphan_holding_the_creators_lock_is_waited_for)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	char note[256] = "";

	dead_creator_with_a_child(1, 400);
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, note, sizeof(note), &e), 0, "%s", e.msg);
	cr_expect(strstr(note, "reclaimed"), "%s", note);
	sf__arena_destroy(a);
}

/* A restart of the job in the middle of an attach, as the hook makes it: the arena
 * `replaced` is destroyed and another one of the same job, with config digest 0x5678,
 * takes its name. */
static struct sf_arena *replaced, *replacement;

static void restart_during_attach(int point)
{
	struct sf_geometry g = geo();

	if (point != SF_TP_ATTACH_OPENED)
		return;
	sf__test_hook = NULL;
	sf__arena_destroy(replaced);
	g.config_digest = 0x5678;
	cr_assert_eq(sf__arena_create(job, &g, NULL, &replacement, NULL, 0, NULL), 0);
}

/* An attach that meets a restart attaches the new arena (it failed with "Stale file
 * handle" from the old one's descriptors). */
Test(arena, an_attach_during_a_restart_attaches_the_new_arena)
{
	struct sf_geometry g = geo();
	struct sf_arena *b = NULL;
	struct sf_err e = {0};

	cr_assert_eq(sf__arena_create(job, &g, NULL, &replaced, NULL, 0, &e), 0, "%s", e.msg);
	sf__test_hook = restart_during_attach;
	cr_assert_eq(sf__arena_attach(job, NULL, &b, &e), 0, "%s", e.msg);
	cr_expect_null(sf__test_hook, "the attach met the restart");
	cr_expect_eq(b->hdr->geo.config_digest, 0x5678);
	sf__arena_detach(b);
	sf__arena_destroy(replacement);
}

/* Another thread's fork() in the middle of an attach, as the hook makes it: the child
 * lives on 3 s with whatever it inherited. */
static void fork_during_attach(int point)
{
	if (point != SF_TP_ATTACH_OPENED)
		return;
	sf__test_hook = NULL;
	if (fork() == 0) {
		usleep(3000 * 1000);
		_exit(0);
	}
}

/*
 * A process attaches, takes participant entry 0 and dies, leaving a child that lives on
 * 3 s: forked by another thread in the middle of the attach (`during_attach`), or after
 * it, with the arena mapped. The child lets go of what it inherited when its fork handler
 * runs, which is when the scheduler first runs it: on a loaded machine that may come
 * after its parent died. It must come long before the child itself ends.
 */
static void holder_dies_leaving_a_child(int during_attach)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	pid_t holder;
	int status;

	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	holder = fork();
	cr_assert_geq(holder, 0);
	if (holder == 0) {
		struct sf_arena *b;

		if (during_attach)
			sf__test_hook = fork_during_attach;
		if (sf__arena_attach(job, NULL, &b, NULL) < 0)
			_exit(1);
		if (sf__participant_register(b, 0, SF_ROLE_PRODUCER, 0, NULL) < 1)
			_exit(2);
		if (!during_attach && fork() == 0) {
			usleep(3000 * 1000);
			_exit(0);
		}
		_exit(0); /* dies holding entry 0; its child lives on */
	}
	waitpid(holder, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
	for (int ms = 0; ms < 2000 && sf__participant_alive(a, 0); ms += 10)
		usleep(10 * 1000);
	cr_expect_eq(sf__participant_alive(a, 0), 0, "the dead holder's child keeps its lock");
	cr_expect_geq(sf__arena_repair(a, 0), 0);
	sf__arena_destroy(a);
}

Test(arena, a_fork_during_attach_leaves_the_child_no_lock)
{
	holder_dies_leaving_a_child(1);
}

/* A child forked after the attach inherits the mapping of the arena, not only its
 * descriptors: the mapping must not keep a dead holder's lock alive (it did when the
 * arena was mapped through the lock descriptor, whose open file description the mapping
 * pins, so that closing the descriptor in the fork handler dropped nothing). */
Test(arena, a_child_forked_after_attach_leaves_the_dead_holder_no_lock)
{
	holder_dies_leaving_a_child(0);
}

/* The creator's lock is not kept by a child that inherited the creator's mapping: the
 * arena of a dead creator is reclaimed while that child lives. */
Test(arena, a_child_of_the_dead_creator_does_not_keep_the_arena_live)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	char note[256] = "";

	dead_creator_with_a_child(0, 3000);
	/* The child runs its fork handler when first scheduled; give it that. */
	usleep(200 * 1000);
	{
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		cr_assert_eq(sf__arena_create(job, &g, NULL, &a, note, sizeof(note), &e), 0,
			     "%s", e.msg);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		cr_expect_lt((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000,
			     2000, "waited for the creator's child to end");
	}
	cr_expect(strstr(note, "reclaimed"), "%s", note);
	sf__arena_destroy(a);
}

/* While this process holds the stale arena's fence, a second launcher tries to create. */
static void second_launcher(int point)
{
	struct sf_geometry g = geo();
	pid_t child;
	int status;

	if (point != SF_TP_RECLAIM_FENCED)
		return;
	sf__test_hook = NULL;
	child = fork();
	if (child == 0) {
		struct sf_arena *c;
		int r = sf__arena_create(job, &g, NULL, &c, NULL, 0, NULL);

		/* 0 would mean it reclaimed the same stale arena and published its own, which
		 * this process is about to unlink. */
		_exit(r == SF_E_BUSY ? 0 : 1);
	}
	waitpid(child, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a second launcher reclaimed the same stale arena");
}

Test(arena, two_launchers_never_both_reclaim)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b;
	struct sf_err e = {0};

	make_stale();
	sf__test_hook = second_launcher;
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	sf__test_hook = NULL;
	/* The name is this process's arena, and it is live. */
	cr_assert_eq(sf__arena_attach(job, NULL, &b, &e), 0, "%s", e.msg);
	cr_expect_eq(b->hdr->creator_pid, getpid());
	cr_expect_eq(sf__arena_creator_alive(b), 1);
	sf__arena_detach(b);
	sf__arena_destroy(a);
}

Test(arena, creator_liveness_is_its_lock)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b;
	struct sf_err e = {0};

	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	cr_assert_eq(sf__arena_attach(job, NULL, &b, &e), 0, "%s", e.msg);
	cr_expect_eq(sf__arena_creator_alive(b), 1);
	/* Detaching without destroying is what a crash leaves: the lock goes with it. */
	sf__arena_detach(a);
	cr_expect_eq(sf__arena_creator_alive(b), 0);
	sf__arena_detach(b);
}

Test(arena, foreign_object_is_refused_and_kept)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	char name[128], junk[SF_PAGE_SIZE];
	int fd;

	snprintf(name, sizeof(name), "/shmfeed.%s", job);
	fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
	cr_assert_geq(fd, 0);
	memset(junk, 'x', sizeof(junk));
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	cr_expect_eq(sf__arena_attach(job, NULL, &a, &e), SF_E_NOT_SHMFEED);
	cr_expect_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), SF_E_NOT_SHMFEED);
	cr_expect(strstr(e.msg, "not a shmfeed arena"), "%s", e.msg);
	/* Nothing of someone else's was removed. */
	fd = shm_open(name, O_RDONLY, 0);
	cr_expect_geq(fd, 0);
	close(fd);
}

Test(arena, other_layout_version_is_refused)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b;
	struct sf_err e = {0};

	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0);
	a->hdr->layout_version = 99;
	cr_expect_eq(sf__arena_attach(job, NULL, &b, &e), SF_E_LAYOUT);
	cr_expect(strstr(e.msg, "layout version 99"), "%s", e.msg);
	sf__arena_destroy(a);
}

Test(arena, other_uid_is_refused)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b;
	struct sf_err e = {0};
	char path[128];

	if (geteuid() != 0)
		cr_skip_test("changing the owner needs root");
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0);
	snprintf(path, sizeof(path), "/dev/shm/shmfeed.%s", job);
	cr_assert_eq(chown(path, 65534, 65534), 0);
	cr_expect_eq(sf__arena_attach(job, NULL, &b, &e), SF_E_UID);
	cr_expect(strstr(e.msg, "uid 65534"), "%s", e.msg);
	sf__arena_destroy(a);
}

Test(arena, geometry_mismatch_is_refused)
{
	struct sf_geometry g = geo(), want = {0};
	struct sf_arena *a, *b;
	struct sf_err e = {0};

	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0);
	want.seq_tokens = 1025;
	cr_expect_eq(sf__arena_attach(job, &want, &b, &e), SF_E_GEOMETRY);
	cr_expect(strstr(e.msg, "seq_tokens 17, expected 1025"), "%s", e.msg);
	want = (struct sf_geometry){.config_digest = 0x999};
	cr_expect_eq(sf__arena_attach(job, &want, &b, &e), SF_E_GEOMETRY);
	sf__arena_destroy(a);
}

/*
 * The limit of a slot is what the machine can map: under an RLIMIT_AS too small for the
 * arena, creation fails before anything is made, naming the limit; the same geometry is
 * accepted without it. B = 1, T + 1 = 2^21 + 1 uint16 tokens: a 4 MiB sequence.
 */
Test(arena, address_space_limits_are_named)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	int status;
	pid_t pid;

	g.batch = 1;
	g.seq_tokens = (1u << 21) + 1;
	g.slots_per_rank = 64; /* 2 ranks x 64 x 4 MiB: 512 MiB */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* 256 MiB more than the process maps now (a sanitizer's shadow included). */
		unsigned long long vm_kib = 0;
		char line[256];
		FILE *f = fopen("/proc/self/status", "re");
		struct rlimit lim;

		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "VmSize: %llu kB", &vm_kib) == 1)
				break;
		if (f)
			fclose(f);
		lim.rlim_cur = lim.rlim_max = (rlim_t)(vm_kib * 1024 + (256u << 20));
		if (!vm_kib || setrlimit(RLIMIT_AS, &lim) < 0)
			_exit(3);
		if (sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) != SF_E_CONFIG)
			_exit(1);
		_exit(strstr(e.msg, "of address space in every process of the job, but this "
				    "process cannot map it under its RLIMIT_AS")
			      ? 0
			      : 2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
	cr_expect_eq(sf__arena_attach(job, NULL, &a, &e), -ENOENT);
	g.slots_per_rank = 2;
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	cr_expect_eq(a->hdr->payload_bytes, ((1u << 21) + 1) * 2);
	sf__arena_destroy(a);
}

Test(arena, too_large_fails_at_creation_with_sizes)
{
	struct sf_geometry g = geo();
	struct sf_arena *a;
	struct sf_err e = {0};
	char tmp[128];

	/* 1024 ranks x 4096 slots x 256 KiB: far beyond any /dev/shm. */
	g.ranks = 1024;
	g.world_size = 1024;
	g.slots_per_rank = 4096;
	g.batch = 128;
	g.seq_tokens = 1024;
	cr_expect_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), SF_E_CONFIG, "%s", e.msg);
	cr_expect(strstr(e.msg, "the arena needs 1099780661248 bytes (1024.3 GiB) but /dev/shm "
				"holds"),
		  "%s", e.msg);
	/* Nothing is left behind: neither the arena nor its temporary. */
	snprintf(tmp, sizeof(tmp), "/dev/shm/shmfeed.%s.new.%d", job, (int)getpid());
	cr_expect_eq(access(tmp, F_OK), -1);
	cr_expect_eq(sf__arena_attach(job, NULL, &a, &e), -ENOENT);
}

Test(arena, hugepages_fall_back_cleanly)
{
	struct sf_geometry g = geo();
	struct sf_arena_options opt = {.hugepages = 1};
	struct sf_arena *a;
	struct sf_err e = {0};
	char note[256] = "";

	cr_assert_eq(sf__arena_create(job, &g, &opt, &a, note, sizeof(note), &e), 0, "%s", e.msg);
	cr_expect(strstr(note, "huge pages"), "%s", note);
	if (a->hdr->geo.flags & SF_ARENA_F_HUGEPAGES)
		cr_expect_eq(a->hdr->payloads_off % SF_HUGE_PAGE_SIZE, 0);
	else
		cr_expect(strstr(note, "unavailable"), "%s", note);
	sf__arena_destroy(a);
}

Test(arena, strerror_never_null)
{
	for (int c = SF_E_LAST - 3; c <= 1; c++)
		cr_expect_not_null(sf_strerror(c));
	cr_expect_str_eq(sf_strerror(SF_E_LAYOUT), "arena of another layout version");
	cr_expect_str_eq(sf_strerror(-ENOENT), "No such file or directory");
	cr_expect_not_null(sf_strerror(-100000));
}

/*
 * A same-user file with the right magic, version and structure sizes but a header that
 * lies about its geometry or offsets: attach refuses each one (before the fix, a consumer
 * or inspect read past the mapping). Each case edits the header of a real arena through
 * the creator's mapping.
 */
struct header_lie {
	const char *what;
	void (*edit)(struct sf_arena_header *h);
	const char *message;
};

static void lie_ranks(struct sf_arena_header *h)
{
	h->geo.ranks = 1000;
	h->geo.world_size = 1000;
}
static void lie_slots_off(struct sf_arena_header *h)
{
	h->slots_off = UINT64_C(1) << 50;
}
static void lie_payloads_off(struct sf_arena_header *h)
{
	h->payloads_off = h->total_size - 64;
}
static void lie_producers(struct sf_arena_header *h)
{
	h->geo.max_producers = 100000;
}
static void lie_token_bytes(struct sf_arena_header *h)
{
	h->geo.token_bytes = 0;
}
static void lie_stride(struct sf_arena_header *h)
{
	h->payload_stride *= 2;
}
static void lie_total(struct sf_arena_header *h)
{
	h->total_size += SF_PAGE_SIZE;
}
static void lie_slots(struct sf_arena_header *h)
{
	h->geo.slots_per_rank = 0;
}
static void lie_batch_overflow(struct sf_arena_header *h)
{
	/* B x (T+1) x 4 wraps 64 bits. */
	h->geo.batch = UINT32_MAX;
	h->geo.seq_tokens = UINT32_MAX;
	h->geo.token_bytes = 4;
}
static void lie_job_name(struct sf_arena_header *h)
{
	memset(h->job, 'x', sizeof(h->job));
}
static void lie_flags(struct sf_arena_header *h)
{
	h->geo.flags |= 0x80000000u;
}
static void lie_rank_base(struct sf_arena_header *h)
{
	h->geo.rank_base = UINT32_MAX;
}
static void lie_node_ranks(struct sf_arena_header *h)
{
	/* Base 1 of world size 2 leaves no room for 2 local ranks. */
	atomic_store_explicit(&h->node_ranks, sf__node_ranks_word(1, 1, 1), memory_order_relaxed);
}
static void lie_node_ranks_unknown(struct sf_arena_header *h)
{
	/* A static base is known from creation. */
	atomic_store_explicit(&h->node_ranks, 0, memory_order_relaxed);
}

static const struct header_lie lies[] = {
	{"ranks", lie_ranks, "header field"},
	{"slots_off", lie_slots_off, "header field slots_off is 1125899906842624"},
	{"payloads_off", lie_payloads_off, "header field payloads_off"},
	{"max_producers", lie_producers, "producers must be 0..256, got 100000"},
	{"token_bytes", lie_token_bytes, "token bytes must be 2 or 4, got 0"},
	{"payload_stride", lie_stride, "header field payload_stride"},
	{"total_size", lie_total, "header field total_size"},
	{"slots_per_rank", lie_slots, "slots per rank must be 1..4096, got 0"},
	{"batch overflow", lie_batch_overflow, "exceeds"},
	{"job name", lie_job_name, "job name"},
	{"flags", lie_flags, "unknown flags 0x80000000"},
	{"rank_base", lie_rank_base, "rank base"},
	{"node_ranks", lie_node_ranks, "node ranks 0x0000000100000002 do not fit"},
	{"node_ranks unknown", lie_node_ranks_unknown, "static rank base 0"},
};

Test(arena, node_ranks_of_a_static_or_automatic_base)
{
	struct sf_geometry g = geo();
	struct sf_arena *a, *b = NULL;
	struct sf_err e = {0};

	g.world_size = 4;
	g.rank_base = 2;
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	cr_expect_eq(atomic_load_explicit(&a->hdr->node_ranks, memory_order_relaxed),
		     sf__node_ranks_word(1, 2, 1), "a static base is known from creation");
	sf__arena_destroy(a);
	g.rank_base = 0;
	g.flags |= SF_ARENA_F_RANK_AUTO;
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	cr_expect_eq(atomic_load_explicit(&a->hdr->node_ranks, memory_order_relaxed), 0,
		     "an automatic base is not known at creation");
	/* Known, in range: accepted; out of range: refused. */
	atomic_store_explicit(&a->hdr->node_ranks, sf__node_ranks_word(5, 2, 1),
			      memory_order_relaxed);
	cr_expect_eq(sf__arena_attach(job, NULL, &b, &e), 0, "%s", e.msg);
	sf__arena_detach(b);
	atomic_store_explicit(&a->hdr->node_ranks, sf__node_ranks_word(5, 3, 1),
			      memory_order_relaxed);
	cr_expect_eq(sf__arena_attach(job, NULL, &b, &e), SF_E_LAYOUT);
	cr_expect(strstr(e.msg, "automatic rank base"), "%s", e.msg);
	sf__arena_destroy(a);
}

Test(arena, lying_header_is_refused)
{
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		struct sf_geometry g = geo();
		struct sf_arena *a, *b = NULL;
		struct sf_err e = {0};

		cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
		lies[i].edit(a->hdr);
		cr_expect_eq(sf__arena_attach(job, NULL, &b, &e), SF_E_LAYOUT, "%s: %s",
			     lies[i].what, e.msg);
		cr_expect_null(b, "%s", lies[i].what);
		cr_expect(strstr(e.msg, lies[i].message), "%s: %s", lies[i].what, e.msg);
		cr_expect(strstr(e.msg, job), "%s: %s", lies[i].what, e.msg);
		sf__arena_destroy(a);
	}
}

Test(arena, header_check_accepts_what_create_wrote)
{
	struct sf_geometry g = geo();
	struct sf_arena_header copy;
	struct sf_arena *a;
	struct sf_err e = {0};

	g.doc_starts_per_seq = 3;
	g.flags |= SF_ARENA_F_DOC_STARTS;
	cr_assert_eq(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e), 0, "%s", e.msg);
	memcpy(&copy, a->hdr, sizeof(copy));
	cr_expect_eq(sf__arena_header_check(&copy, a->hdr->total_size, "here", &e), 0, "%s", e.msg);
	cr_expect_eq(sf__arena_header_check(&copy, a->hdr->total_size - 1, "here", &e),
		     SF_E_LAYOUT);
	cr_expect(strstr(e.msg, "the file has"), "%s", e.msg);
	copy.magic ^= 1;
	cr_expect_eq(sf__arena_header_check(&copy, a->hdr->total_size, "here", &e),
		     SF_E_NOT_SHMFEED);
	sf__arena_destroy(a);
}

Test(arena, step_limit)
{
	struct sf_geometry g = geo();

	/* K = 4 slots with a 48-bit lap. */
	cr_expect_eq(sf__arena_step_limit(&g), 4 * ((UINT64_C(1) << 48) - 1));
	/* A global batch of 2^20 samples: 2^44 steps would overflow the sample count. */
	g.batch = 1u << 19;
	cr_expect_eq(sf__arena_step_limit(&g), UINT64_MAX / (UINT64_C(1) << 20));
}

/*
 * Two processes taking one lock path at once: one holds it and the other finds it held,
 * or takes it after; neither may find a file it cannot use, and none may be left behind.
 * The lock used to be created empty and marked after its flock: the loser could take the
 * flock first, find the file empty and refuse it, while the creator, its flock refused,
 * left the empty file, which refused every later run (a review found both refused in 8
 * of 3,000 rounds).
 */
Test(path_lock, two_takers_at_once_never_leave_an_unusable_file, .timeout = 60)
{
	char path[] = "/tmp/sf-test-lock-XXXXXX";
	int dir_fd = mkstemp(path);

	cr_assert_geq(dir_fd, 0);
	close(dir_fd);
	unlink(path);
	for (int round = 0; round < 400; round++) {
		int go[2], res[2], status, got[2], held = 0;
		pid_t pid[2];

		cr_assert_eq(pipe(go), 0);
		cr_assert_eq(pipe(res), 0);
		for (int k = 0; k < 2; k++) {
			pid[k] = fork();
			cr_assert_geq(pid[k], 0);
			if (pid[k] == 0) {
				char c;
				int fd, r;

				close(go[1]);
				if (read(go[0], &c, 1) != 1)
					_exit(2);
				fd = sf__path_lock(path);
				r = fd >= 0 ? 0 : fd;
				if (fd >= 0) {
					usleep(1000);
					sf__path_unlock(path, fd);
				}
				_exit(write(res[1], &r, sizeof(r)) == sizeof(r) ? 0 : 2);
			}
		}
		close(go[0]);
		close(res[1]);
		cr_assert_eq(write(go[1], "gg", 2), 2);
		close(go[1]);
		for (int k = 0; k < 2; k++) {
			cr_assert_eq(read(res[0], &got[k], sizeof(got[k])), (ssize_t)sizeof(got[k]));
			cr_assert_eq(waitpid(pid[k], &status, 0), pid[k]);
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		close(res[0]);
		for (int k = 0; k < 2; k++) {
			cr_assert(got[k] == 0 || got[k] == -EBUSY, "round %d: %s", round,
				  strerror(-got[k]));
			held += got[k] == 0;
		}
		cr_assert_geq(held, 1, "round %d: neither took the lock", round);
		cr_assert_eq(access(path, F_OK), -1, "round %d: %s left behind", round, path);
	}
}
