/*
 * bench_slot: the cost of moving a batch through the arena, beside the alternatives, in
 * one run. Producer and consumer are separate processes (or threads where the
 * alternative needs a shared heap) pinned to different cores.
 *
 *  1. round trip claim -> fill -> publish -> consume -> release with one slot (a strict
 *     ping-pong), empty payload: ops/s and the distribution of one cycle's time;
 *     the same ping-pong through a pair of pipes, and with malloc/free per batch
 *     between two threads;
 *  2. 1 MiB payloads, 4 slots: GB/s written by the producer and read by the consumer;
 *     the same through a pipe carrying the payload, and with malloc/free per batch;
 *  3. wake latency: from the publish to the return of a consumer that slept in futex;
 *     beside it, the floor of this machine: a bare futex wait/wake between two
 *     processes, timed the same way.
 *
 * Usage: bench_slot [-n ITERATIONS] [--quick]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/futex.h"
#include "common/proc.h"
#include "common/slot.h"

#define MIB (1024u * 1024u)

static uint64_t *samples; /* shared: per-iteration times in ns */
static char job[64];

static void pin(int cpu)
{
	cpu_set_t set;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct dist {
	double p50, p99, p999, mean;
};

static struct dist distribution(uint64_t *v, size_t n)
{
	struct dist d;
	double sum = 0;

	qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	d.p50 = (double)v[n / 2];
	d.p99 = (double)v[(size_t)(n * 0.99)];
	d.p999 = (double)v[(size_t)(n * 0.999)];
	d.mean = sum / (double)n;
	return d;
}

static void row(const char *name, size_t n, uint64_t elapsed_ns, struct dist d, double bytes)
{
	printf("| %-34s | %10.0f | %8.0f | %8.0f | %8.0f | %8.0f |", name, n / (elapsed_ns / 1e9),
	       d.p50, d.mean, d.p99, d.p999);
	if (bytes > 0)
		printf(" %6.2f |\n", bytes * n / (elapsed_ns / 1e9) / 1e9);
	else
		printf("      - |\n");
}

/*
 * How many times the arena's figures another pattern's are: its p50 and its mean over
 * the arena's, and the arena's throughput over its own. The three differ where the
 * distributions differ in shape (a p50 at the timer's floor, a long tail), so none is
 * quoted without the others.
 */
static void ratio(const char *name, struct dist d, uint64_t elapsed_ns, struct dist ref,
		  uint64_t ref_elapsed_ns, const char *end)
{
	printf("  %s / arena: p50 %.1fx, mean %.1fx, throughput %.2fx%s", name, d.p50 / ref.p50,
	       d.mean / ref.mean, (double)elapsed_ns / (double)ref_elapsed_ns, end);
}

static void header(const char *rate)
{
	printf("| %-34s | %10s | %8s | %8s | %8s | %8s | %6s |\n", "pattern", rate, "p50", "mean",
	       "p99", "p99.9", "GB/s");
	printf("|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------------------", "------------",
	       "----------", "----------", "----------", "----------", "--------");
}

static struct sf_arena *make_arena(uint32_t slots, uint32_t payload_bytes)
{
	struct sf_geometry g = {.ranks = 1,
				.slots_per_rank = slots,
				.max_producers = 1,
				.batch = 1,
				.seq_tokens = payload_bytes / 2 < 2 ? 2 : payload_bytes / 2,
				.token_bytes = 2,
				.world_size = 1};
	struct sf_arena *a;
	struct sf_err e = {0};

	if (sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) < 0) {
		fprintf(stderr, "bench_slot: %s\n", e.msg);
		exit(1);
	}
	sf__arena_set_job_state(a, SF_JOB_RUNNING);
	return a;
}

/* The consumer's work on a payload: read every byte (sum of words), as training's copy
 * would. */
static uint64_t touch(const void *p, size_t len)
{
	const uint64_t *w = p;
	uint64_t s = 0;

	for (size_t i = 0; i < len / 8; i++)
		s += w[i];
	return s;
}

static volatile uint64_t sink;

/* Arena, producer and consumer processes. Returns the elapsed ns over n steps; fills
 * samples[] with the producer's per-step cycle time. */
static uint64_t arena_run(size_t n, uint32_t slots, uint32_t payload)
{
	struct sf_arena *a = make_arena(slots, payload);
	uint64_t t0, t1;
	pid_t c = fork();

	if (c == 0) {
		pin(1);
		for (uint64_t s = 0; s < n; s++) {
			struct sf_slot *sl;

			if (sf__consumer_claim(a, 1, 0, s, -1, &sl) < 0)
				_exit(1);
			sink += touch(sf__arena_payload(a, 0, (uint32_t)(s % slots)), sl->length);
			sf__consumer_release(a, 0, sl);
		}
		_exit(0);
	}
	pin(0);
	t0 = sf__now_ns();
	for (size_t i = 0; i < n; i++) {
		struct sf_fill f;
		uint64_t t = sf__now_ns();

		sf__producer_claim(a, 0, -1, &f);
		if (payload)
			memset(f.payload, (int)i, payload);
		sf__producer_publish(a, 0, &f, payload, f.step);
		samples[i] = sf__now_ns() - t;
	}
	waitpid(c, NULL, 0);
	t1 = sf__now_ns();
	sf__arena_destroy(a);
	return t1 - t0;
}

/*
 * read() of `len` bytes from `fd`; with `spin` (a non-blocking descriptor) polling instead
 * of sleeping, as the arena's claims spin before they sleep: a blocking pipe pays the
 * kernel's sleep and wake on each read, which is most of its round trip on this VM.
 */
static ssize_t read_all(int fd, void *buf, size_t len, int spin)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = read(fd, (char *)buf + got, len - got);

		if (r < 0 && spin && errno == EAGAIN) {
			sf__cpu_relax();
			continue;
		}
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Pipe: the payload (or an 8-byte token) goes through a pipe; with one slot the
 * consumer acknowledges each batch through a second pipe, as the arena's release does.
 * With `spin`, both ends poll their pipes (O_NONBLOCK) instead of sleeping in read(). */
static uint64_t pipe_run(size_t n, uint32_t payload, int pingpong, int spin)
{
	int data[2], ack[2];
	uint32_t len = payload ? payload : 8;
	unsigned char *buf = malloc(len);
	uint64_t t0, t1;
	pid_t c;

	if (pipe(data) || pipe(ack))
		exit(1);
	fcntl(data[1], F_SETPIPE_SZ, MIB);
	if (spin && (fcntl(data[0], F_SETFL, O_NONBLOCK) || fcntl(ack[0], F_SETFL, O_NONBLOCK)))
		exit(1);
	c = fork();
	if (c == 0) {
		pin(1);
		for (size_t i = 0; i < n; i++) {
			if (read_all(data[0], buf, len, spin) < 0)
				_exit(1);
			sink += touch(buf, len);
			if (pingpong && write(ack[1], "a", 1) != 1)
				_exit(1);
		}
		_exit(0);
	}
	pin(0);
	t0 = sf__now_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t t = sf__now_ns();
		char b;

		memset(buf, (int)i, len);
		if (write(data[1], buf, len) != (ssize_t)len)
			exit(1);
		if (pingpong && read_all(ack[0], &b, 1, spin) != 1)
			exit(1);
		samples[i] = sf__now_ns() - t;
	}
	waitpid(c, NULL, 0);
	t1 = sf__now_ns();
	close(data[0]);
	close(data[1]);
	close(ack[0]);
	close(ack[1]);
	free(buf);
	return t1 - t0;
}

/* malloc/free per batch between two threads: the producer allocates and fills a fresh
 * buffer, hands the pointer over a bounded single-producer single-consumer queue, and
 * the consumer reads and frees it. */
#define QCAP 4
static struct {
	_Atomic uint64_t head, tail;
	void *item[QCAP];
	uint32_t len;
	size_t n;
	uint32_t cap;
} q;

static void *malloc_consumer(void *arg)
{
	(void)arg;
	pin(1);
	for (size_t i = 0; i < q.n; i++) {
		uint64_t t = atomic_load_explicit(&q.tail, memory_order_relaxed);
		void *p;

		/* Acquire: pairs with the producer's release of head. */
		while (atomic_load_explicit(&q.head, memory_order_acquire) == t)
			;
		p = q.item[t % QCAP];
		sink += touch(p, q.len);
		free(p);
		/* Release: the slot of the queue may be reused. */
		atomic_store_explicit(&q.tail, t + 1, memory_order_release);
	}
	return NULL;
}

static uint64_t malloc_run(size_t n, uint32_t cap, uint32_t payload)
{
	uint32_t len = payload ? payload : 8;
	uint64_t t0, t1;
	pthread_t c;

	q.n = n;
	q.len = len;
	q.cap = cap;
	atomic_store(&q.head, 0);
	atomic_store(&q.tail, 0);
	pthread_create(&c, NULL, malloc_consumer, NULL);
	pin(0);
	t0 = sf__now_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t t = sf__now_ns();
		void *p;

		/* Acquire: pairs with the consumer's release of tail. */
		while (i - atomic_load_explicit(&q.tail, memory_order_acquire) >= cap)
			;
		p = malloc(len);
		memset(p, (int)i, len);
		q.item[i % QCAP] = p;
		/* Release: publishes the buffer's content with its pointer. */
		atomic_store_explicit(&q.head, i + 1, memory_order_release);
		samples[i] = sf__now_ns() - t;
	}
	pthread_join(c, NULL);
	t1 = sf__now_ns();
	return t1 - t0;
}

/* Wake latency: the producer waits long enough for the consumer to fall asleep in
 * futex, then publishes; the consumer measures publish (fill_ns) to return. */
static void wake_run(size_t n)
{
	struct sf_arena *a = make_arena(1, 64);
	pid_t c = fork();

	if (c == 0) {
		pin(1);
		for (uint64_t s = 0; s < n; s++) {
			struct sf_slot *sl;

			if (sf__consumer_claim(a, 1, 0, s, -1, &sl) < 0)
				_exit(1);
			samples[s] = sf__now_ns() - sl->fill_ns;
			sf__consumer_release(a, 0, sl);
		}
		_exit(0);
	}
	pin(0);
	for (size_t i = 0; i < n; i++) {
		struct sf_fill f;

		sf__producer_claim(a, 0, -1, &f);
		usleep(1000);
		sf__producer_publish(a, 0, &f, 64, f.step);
	}
	waitpid(c, NULL, 0);
	sf__arena_destroy(a);
}

/* The platform's floor for the same measurement: one process sleeps in FUTEX_WAIT on a
 * shared word, the other stores a timestamp, bumps the word and calls FUTEX_WAKE. */
static void bare_futex_run(size_t n)
{
	struct shared_word {
		_Atomic uint32_t word;
		_Atomic uint64_t sent_ns;
	} *w = mmap(NULL, sizeof(*w), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t c;

	atomic_store(&w->word, 0);
	c = fork();
	if (c == 0) {
		pin(1);
		for (uint32_t s = 0; s < n; s++) {
			while (atomic_load_explicit(&w->word, memory_order_acquire) == s)
				sf__futex_wait(&w->word, s, -1);
			samples[s] = sf__now_ns() - atomic_load(&w->sent_ns);
		}
		_exit(0);
	}
	pin(0);
	for (uint32_t i = 0; i < n; i++) {
		usleep(1000);
		atomic_store(&w->sent_ns, sf__now_ns());
		atomic_store_explicit(&w->word, i + 1, memory_order_release);
		sf__futex_wake(&w->word, 1);
	}
	waitpid(c, NULL, 0);
	munmap(w, sizeof(*w));
}

static void machine(void)
{
	char model[256] = "unknown";
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[512];

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "model name", 10)) {
			char *p = strchr(line, ':');

			snprintf(model, sizeof(model), "%.200s", p ? p + 2 : line);
			model[strcspn(model, "\n")] = 0;
			break;
		}
	if (f)
		fclose(f);
	uname(&u);
	printf("machine: %s, %ld cores, kernel %s\n\n", model, sysconf(_SC_NPROCESSORS_ONLN),
	       u.release);
}

int main(int argc, char **argv)
{
	size_t n = 200000, nbig = 5000, nwake = 1000;
	uint64_t el, ref_el;
	struct dist d, ref;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			n = 20000;
			nbig = 500;
			nwake = 100;
		} else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
			n = strtoull(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: bench_slot [-n ITERATIONS] [--quick]\n");
			return 2;
		}
	}
	samples = mmap(NULL, (n > nbig ? n : nbig) * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	snprintf(job, sizeof(job), "bench-slot-%d", (int)getpid());
	machine();

	printf("1. round trip, empty payload, one slot (ping-pong), %zu iterations; ns per "
	       "cycle\n\n",
	       n);
	header("ops/s");
	ref_el = arena_run(n, 1, 0);
	ref = distribution(samples, n);
	row("arena slot (2 processes)", n, ref_el, ref, 0);
	el = pipe_run(n, 0, 1, 0);
	d = distribution(samples, n);
	row("pipe pair, blocking (2 processes)", n, el, d, 0);
	ratio("blocking pipe", d, el, ref, ref_el, "\n");
	/* The arena's claims spin before they sleep: the fair pipe spins too. */
	el = pipe_run(n, 0, 1, 1);
	d = distribution(samples, n);
	row("pipe pair, polled (2 processes)", n, el, d, 0);
	ratio("polled pipe", d, el, ref, ref_el, "\n");
	el = malloc_run(n, 1, 0);
	d = distribution(samples, n);
	row("malloc/free per batch (2 threads)", n, el, d, 0);
	ratio("malloc/free", d, el, ref, ref_el, "\n\n");

	printf("2. 1 MiB payloads, 4 slots, %zu batches; ns per batch at the producer\n\n", nbig);
	header("batches/s");
	ref_el = arena_run(nbig, 4, MIB);
	ref = distribution(samples, nbig);
	row("arena slot (2 processes)", nbig, ref_el, ref, MIB);
	el = pipe_run(nbig, MIB, 0, 0);
	d = distribution(samples, nbig);
	row("pipe with payload (2 processes)", nbig, el, d, MIB);
	ratio("pipe", d, el, ref, ref_el, "\n");
	/* Read by polling, as the arena's consumer spins before it sleeps (a review: the
	 * blocking reader pays a sleep and wake per read). */
	el = pipe_run(nbig, MIB, 0, 1);
	d = distribution(samples, nbig);
	row("pipe with payload, polled reads", nbig, el, d, MIB);
	ratio("polled pipe", d, el, ref, ref_el, "\n");
	el = malloc_run(nbig, 4, MIB);
	d = distribution(samples, nbig);
	row("malloc/free per batch (2 threads)", nbig, el, d, MIB);
	ratio("malloc/free", d, el, ref, ref_el, "\n\n");

	printf("3. wake latency, publish to return of a consumer asleep in futex, %zu wakes\n\n",
	       nwake);
	wake_run(nwake);
	d = distribution(samples, nwake);
	printf("arena consumer:        p50 %.1f us, p99 %.1f us, p99.9 %.1f us\n", d.p50 / 1e3,
	       d.p99 / 1e3, d.p999 / 1e3);
	bare_futex_run(nwake);
	d = distribution(samples, nwake);
	printf("bare futex wait/wake:  p50 %.1f us, p99 %.1f us, p99.9 %.1f us (this machine's "
	       "floor)\n",
	       d.p50 / 1e3, d.p99 / 1e3, d.p999 / 1e3);
	return 0;
}
