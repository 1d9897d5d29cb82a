/*
 * libcuda.so.1 for tests: the driver functions shmfeed's table resolves, over host memory,
 * with streams modelled as queues (see fake_cuda.h for the model and its environment).
 * The prototypes are the table's own typedefs (consumer/cuda.h), so a drift between the
 * two fails to compile.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer/cuda.h"
#include "tests/gpu/fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

/* Declared with the table's types: a definition below that differs fails to compile. */
sf_cuInit_fn cuInit;
sf_cuDeviceGet_fn cuDeviceGet;
sf_cuDeviceGetCount_fn cuDeviceGetCount;
sf_cuDevicePrimaryCtxRetain_fn cuDevicePrimaryCtxRetain;
sf_cuDevicePrimaryCtxRelease_fn cuDevicePrimaryCtxRelease_v2;
sf_cuCtxPushCurrent_fn cuCtxPushCurrent_v2;
sf_cuCtxPopCurrent_fn cuCtxPopCurrent_v2;
sf_cuMemHostRegister_fn cuMemHostRegister_v2;
sf_cuMemHostUnregister_fn cuMemHostUnregister;
sf_cuMemAlloc_fn cuMemAlloc_v2;
sf_cuMemFree_fn cuMemFree_v2;
sf_cuMemcpyHtoDAsync_fn cuMemcpyHtoDAsync_v2;
sf_cuMemcpyHtoD_fn cuMemcpyHtoD_v2;
sf_cuMemcpyDtoH_fn cuMemcpyDtoH_v2;
sf_cuMemAllocHost_fn cuMemAllocHost_v2;
sf_cuMemFreeHost_fn cuMemFreeHost;
sf_cuStreamCreate_fn cuStreamCreate;
sf_cuStreamDestroy_fn cuStreamDestroy_v2;
sf_cuStreamWaitEvent_fn cuStreamWaitEvent;
sf_cuStreamSynchronize_fn cuStreamSynchronize;
sf_cuEventCreate_fn cuEventCreate;
sf_cuEventRecord_fn cuEventRecord;
sf_cuEventQuery_fn cuEventQuery;
sf_cuEventSynchronize_fn cuEventSynchronize;
sf_cuEventDestroy_fn cuEventDestroy_v2;
sf_cuGetErrorName_fn cuGetErrorName;
sf_cuGetErrorString_fn cuGetErrorString;
fake_cuda_stats_fn fake_cuda_stats;
fake_cuda_read_async_fn fake_cuda_read_async;
fake_cuda_set_eager_fn fake_cuda_set_eager;
fake_cuda_set_busy_fn fake_cuda_set_busy;

enum {
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	INVALID_DEVICE = 101,
	INVALID_CONTEXT = 201,
	INVALID_HANDLE = 400,
	NOT_READY = 600,
	ALREADY_REGISTERED = 712,
	NOT_REGISTERED = 713,
	NOT_SUPPORTED = 801
};

enum op_kind { OP_COPY, OP_READ, OP_RECORD, OP_WAIT };

struct CUstream_st;

struct CUevent_st {
	uint64_t recorded; /* records queued so far; record g is the g-th */
	uint64_t ran;	   /* bit g % 64: record g has run (records older than 64 have) */
	uint64_t polled;   /* the record cuEventQuery last answered about */
	struct CUstream_st *on;
	int destroyed; /* kept, not freed: queued operations may still name it */
};

struct op {
	enum op_kind kind;
	unsigned char *dst;
	const unsigned char *src;
	size_t n;
	unsigned char *snapshot; /* OP_COPY: the source as it was when queued */
	struct CUevent_st *ev;
	struct CUstream_st *ev_on; /* OP_WAIT: the stream the awaited record was queued on */
	uint64_t gen;
};

struct CUstream_st {
	struct op *ops;
	size_t head, tail, cap;
	int eager; /* runs its work as soon as its waits allow (see fake_cuda.h) */
	int busy;  /* runs none of its work: the GPU is still at something earlier */
};

struct CUctx_st {
	int unused;
};

struct range {
	uintptr_t p;
	size_t n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_cuda_stats stats;
static struct CUctx_st primary;
static struct CUstream_st null_stream, *streams[64];
static struct CUevent_st *events[256]; /* every event made, destroyed ones included */
static struct range allocs[64], registered[16], pinned[16];
static int n_devices = 1, init_code, eager = 1, no_register;
/* As with the driver, the context stack is per thread: a call made on a thread that has no
 * context current fails, whatever other threads have pushed. */
static _Thread_local int ctx_depth;
/* The injected failures (FAKE_CUDA_FAIL), and the code every later call returns once a
 * sticky one has happened. */
static struct fail {
	char name[64];
	unsigned code;
	long nth, calls;
	int sticky;
} fails[4];
static unsigned sticky_code;

/* The injected failure, if this call is the one; after a sticky one, every call but the
 * context stack's and the primary context's release fails with its code, as the driver's
 * "any further CUDA work will return the same error". */
static int failing(const char *name, sf_curesult *ret)
{
	if (sticky_code && strcmp(name, "cuCtxPushCurrent") && strcmp(name, "cuCtxPopCurrent") &&
	    strcmp(name, "cuDevicePrimaryCtxRelease")) {
		*ret = sticky_code;
		return 1;
	}
	for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++) {
		struct fail *f = &fails[i];

		if (!f->name[0] || strcmp(name, f->name) || (++f->calls != f->nth && f->nth))
			continue;
		*ret = f->code;
		if (f->sticky)
			sticky_code = f->code;
		return 1;
	}
	return 0;
}

/* FAKE_CUDA_FAIL: NAME:CODE[:NTH[:sticky]], several separated by commas. */
static void read_fails(const char *v)
{
	size_t n = 0;

	while (*v && n < sizeof(fails) / sizeof(fails[0])) {
		struct fail *f = &fails[n];
		char flag[16] = "";
		int got;

		f->nth = 1;
		got = sscanf(v, "%63[^:,]:%u:%ld:%15[^,]", f->name, &f->code, &f->nth, flag);
		if (got < 2) {
			f->name[0] = 0;
			break;
		}
		f->sticky = !strcmp(flag, "sticky");
		n++;
		v += strcspn(v, ",");
		v += *v == ',';
	}
}

#define ENTER(name)                                                                                \
	sf_curesult ret_ = 0;                                                                      \
	pthread_mutex_lock(&lock);                                                                 \
	if (failing(name, &ret_))                                                                  \
	goto out

#define LEAVE()                                                                                    \
	progress();                                                                                \
	out:                                                                                       \
	pthread_mutex_unlock(&lock);                                                               \
	return ret_

static struct CUstream_st *stream_of(sf_custream s)
{
	return s ? s : &null_stream;
}

static int in_ranges(const struct range *r, size_t n, uintptr_t p, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].n && p >= r[i].p && p + len <= r[i].p + r[i].n)
			return 1;
	return 0;
}

static int push(struct CUstream_st *s, struct op o)
{
	if (s->tail == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct op *ops = realloc(s->ops, cap * sizeof(*ops));

		if (!ops)
			return -1;
		s->ops = ops;
		s->cap = cap;
	}
	s->ops[s->tail++] = o;
	return 0;
}

static int run_one(struct CUstream_st *s);

/* Whether record `gen` of `ev` has run. */
static int record_ran(const struct CUevent_st *ev, uint64_t gen)
{
	return gen == 0 || ev->recorded - gen >= 64 || (ev->ran >> (gen % 64) & 1);
}

/* Run what an OP_WAIT needs: the awaited record's stream up to that record. */
static void satisfy(const struct op *o)
{
	while (!record_ran(o->ev, o->gen) && run_one(o->ev_on))
		;
}

/* Run the oldest queued operation of `s`; 0 when there is none, or it cannot run yet
 * (its stream, or a stream it waits for, is busy). */
static int run_one(struct CUstream_st *s)
{
	struct op o;

	if (s->head == s->tail || s->busy)
		return 0;
	o = s->ops[s->head];
	if (o.kind == OP_WAIT) {
		satisfy(&o); /* may run other streams, never this one's head */
		if (!record_ran(o.ev, o.gen))
			return 0;
	}
	s->head++;
	switch (o.kind) {
	case OP_COPY:
		if (memcmp(o.snapshot, o.src, o.n))
			stats.violations++;
		memcpy(o.dst, o.src, o.n);
		free(o.snapshot);
		break;
	case OP_READ:
		memcpy(o.dst, o.src, o.n);
		break;
	case OP_RECORD:
		o.ev->ran |= UINT64_C(1) << (o.gen % 64);
		break;
	case OP_WAIT:
		break;
	}
	if (s->head == s->tail)
		s->head = s->tail = 0;
	return 1;
}

/* Let a thread that clears a busy stream in; called with the lock held. */
static void wait_for_busy(void)
{
	pthread_mutex_unlock(&lock);
	usleep(1000);
	pthread_mutex_lock(&lock);
}

/* Run all of `s`, as a synchronizing call does: it blocks while work is busy. */
static void drain(struct CUstream_st *s)
{
	while (s->head != s->tail)
		if (!run_one(s))
			wait_for_busy();
}

/* Run eager streams as far as their waits allow, without forcing any other stream. */
static void progress(void)
{
	int moved = 1;

	while (moved) {
		moved = 0;
		for (size_t i = 0; i <= sizeof(streams) / sizeof(streams[0]); i++) {
			struct CUstream_st *s = i ? streams[i - 1] : &null_stream;

			while (s && s->eager && !s->busy && s->head < s->tail) {
				const struct op *o = &s->ops[s->head];

				if (o->kind == OP_WAIT && !record_ran(o->ev, o->gen))
					break;
				run_one(s);
				moved = 1;
			}
		}
	}
}

EXPORT sf_curesult cuInit(unsigned int flags)
{
	const char *v;

	(void)flags;
	pthread_mutex_lock(&lock);
	if ((v = getenv("FAKE_CUDA_DEVICES")))
		n_devices = atoi(v);
	if ((v = getenv("FAKE_CUDA_INIT")))
		init_code = atoi(v);
	if ((v = getenv("FAKE_CUDA_NO_REGISTER")))
		no_register = atoi(v);
	if ((v = getenv("FAKE_CUDA_POLICY")))
		eager = strcmp(v, "lazy") != 0;
	if ((v = getenv("FAKE_CUDA_FAIL")))
		read_fails(v);
	pthread_mutex_unlock(&lock);
	return (sf_curesult)init_code;
}

EXPORT sf_curesult cuDeviceGetCount(int *count)
{
	ENTER("cuDeviceGetCount");
	*count = n_devices;
	LEAVE();
}

EXPORT sf_curesult cuDeviceGet(sf_cudevice *device, int ordinal)
{
	ENTER("cuDeviceGet");
	if (ordinal < 0 || ordinal >= n_devices)
		ret_ = INVALID_DEVICE;
	else
		*device = ordinal;
	LEAVE();
}

EXPORT sf_curesult cuDevicePrimaryCtxRetain(sf_cucontext *pctx, sf_cudevice dev)
{
	ENTER("cuDevicePrimaryCtxRetain");
	if (dev < 0 || dev >= n_devices) {
		ret_ = INVALID_DEVICE;
	} else {
		*pctx = &primary;
		stats.retains++;
	}
	LEAVE();
}

EXPORT sf_curesult cuDevicePrimaryCtxRelease_v2(sf_cudevice dev)
{
	ENTER("cuDevicePrimaryCtxRelease");
	if (dev < 0 || dev >= n_devices)
		ret_ = INVALID_DEVICE;
	else
		stats.releases++;
	LEAVE();
}

EXPORT sf_curesult cuCtxPushCurrent_v2(sf_cucontext ctx)
{
	ENTER("cuCtxPushCurrent");
	if (ctx != &primary) {
		ret_ = INVALID_CONTEXT;
	} else {
		ctx_depth++;
		stats.pushes++;
	}
	LEAVE();
}

EXPORT sf_curesult cuCtxPopCurrent_v2(sf_cucontext *pctx)
{
	ENTER("cuCtxPopCurrent");
	if (!ctx_depth) {
		ret_ = INVALID_CONTEXT;
	} else {
		ctx_depth--;
		stats.pops++;
		if (pctx)
			*pctx = &primary;
	}
	LEAVE();
}

/* Calls that act in the current context fail without one, as the driver's do. */
#define NEED_CONTEXT()                                                                             \
	if (!ctx_depth) {                                                                          \
		ret_ = INVALID_CONTEXT;                                                            \
		goto out;                                                                          \
	}

EXPORT sf_curesult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
	size_t i;

	ENTER("cuMemHostRegister");
	(void)flags;
	NEED_CONTEXT();
	if (no_register) {
		ret_ = NOT_SUPPORTED;
		goto out;
	}
	for (i = 0; i < 16; i++)
		if (registered[i].n && (uintptr_t)p < registered[i].p + registered[i].n &&
		    registered[i].p < (uintptr_t)p + bytesize) {
			ret_ = ALREADY_REGISTERED;
			goto out;
		}
	for (i = 0; i < 16 && registered[i].n; i++)
		;
	if (!p || !bytesize || i == 16) {
		ret_ = i == 16 ? OUT_OF_MEMORY : INVALID_VALUE;
		goto out;
	}
	registered[i] = (struct range){(uintptr_t)p, bytesize};
	stats.registers++;
	LEAVE();
}

EXPORT sf_curesult cuMemHostUnregister(void *p)
{
	ENTER("cuMemHostUnregister");
	NEED_CONTEXT();
	ret_ = NOT_REGISTERED;
	for (size_t i = 0; i < 16; i++)
		if (registered[i].n && registered[i].p == (uintptr_t)p) {
			registered[i].n = 0;
			stats.unregisters++;
			ret_ = 0;
		}
	LEAVE();
}

EXPORT sf_curesult cuMemAlloc_v2(sf_cudeviceptr *dptr, size_t bytesize)
{
	size_t i;
	void *p;

	ENTER("cuMemAlloc");
	NEED_CONTEXT();
	for (i = 0; i < 64 && allocs[i].n; i++)
		;
	p = i < 64 && bytesize ? malloc(bytesize) : NULL;
	if (!p) {
		ret_ = bytesize ? OUT_OF_MEMORY : INVALID_VALUE;
		goto out;
	}
	/* Garbage, not zeros: a copy that did not happen must not look like one. */
	memset(p, 0xa5, bytesize);
	allocs[i] = (struct range){(uintptr_t)p, bytesize};
	*dptr = (sf_cudeviceptr)(uintptr_t)p;
	stats.allocs++;
	LEAVE();
}

/*
 * Queued operations that still touch [p, p + n): counted as freed_in_use and made empty,
 * so that the test sees the violation rather than a use after free.
 */
static void drop_ops_on(uintptr_t p, size_t n)
{
	for (size_t i = 0; i <= sizeof(streams) / sizeof(streams[0]); i++) {
		struct CUstream_st *s = i ? streams[i - 1] : &null_stream;

		for (size_t k = s ? s->head : 0; s && k < s->tail; k++) {
			struct op *o = &s->ops[k];
			uintptr_t dev = o->kind == OP_COPY   ? (uintptr_t)o->dst
					: o->kind == OP_READ ? (uintptr_t)o->src
							     : 0;

			if (dev && o->n && dev < p + n && p < dev + o->n) {
				stats.freed_in_use++;
				o->n = 0;
			}
		}
	}
}

EXPORT sf_curesult cuMemFree_v2(sf_cudeviceptr dptr)
{
	ENTER("cuMemFree");
	NEED_CONTEXT();
	ret_ = INVALID_VALUE;
	for (size_t i = 0; i < 64; i++)
		if (allocs[i].n && allocs[i].p == (uintptr_t)dptr) {
			drop_ops_on(allocs[i].p, allocs[i].n);
			free((void *)allocs[i].p);
			allocs[i].n = 0;
			stats.frees++;
			ret_ = 0;
		}
	LEAVE();
}

/* A device range must lie in one allocation. */
static int device_ok(sf_cudeviceptr p, size_t n)
{
	if (in_ranges(allocs, 64, (uintptr_t)p, n))
		return 1;
	stats.bad_pointers++;
	return 0;
}

EXPORT sf_curesult cuMemcpyHtoDAsync_v2(sf_cudeviceptr dst, const void *src, size_t bytes,
					sf_custream stream)
{
	struct op o = {
		.kind = OP_COPY, .dst = (unsigned char *)(uintptr_t)dst, .src = src, .n = bytes};

	ENTER("cuMemcpyHtoDAsync");
	NEED_CONTEXT();
	if (!device_ok(dst, bytes)) {
		ret_ = INVALID_VALUE;
		goto out;
	}
	o.snapshot = malloc(bytes);
	if (!o.snapshot || push(stream_of(stream), o) < 0) {
		free(o.snapshot);
		ret_ = OUT_OF_MEMORY;
		goto out;
	}
	memcpy(o.snapshot, src, bytes);
	stats.htod_async++;
	if (in_ranges(registered, 16, (uintptr_t)src, bytes))
		stats.htod_async_registered++;
	if (in_ranges(pinned, 16, (uintptr_t)src, bytes))
		stats.htod_async_pinned++;
	LEAVE();
}

EXPORT sf_curesult cuMemcpyHtoD_v2(sf_cudeviceptr dst, const void *src, size_t bytes)
{
	ENTER("cuMemcpyHtoD");
	NEED_CONTEXT();
	drain(&null_stream);
	if (!device_ok(dst, bytes))
		ret_ = INVALID_VALUE;
	else
		memcpy((void *)(uintptr_t)dst, src, bytes);
	LEAVE();
}

EXPORT sf_curesult cuMemcpyDtoH_v2(void *dst, sf_cudeviceptr src, size_t bytes)
{
	ENTER("cuMemcpyDtoH");
	NEED_CONTEXT();
	drain(&null_stream);
	if (!device_ok(src, bytes))
		ret_ = INVALID_VALUE;
	else
		memcpy(dst, (const void *)(uintptr_t)src, bytes);
	LEAVE();
}

EXPORT sf_curesult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	size_t i;
	void *p;

	ENTER("cuMemAllocHost");
	NEED_CONTEXT();
	for (i = 0; i < 16 && pinned[i].n; i++)
		;
	p = i < 16 && bytesize ? malloc(bytesize) : NULL;
	if (!p) {
		ret_ = bytesize ? OUT_OF_MEMORY : INVALID_VALUE;
		goto out;
	}
	pinned[i] = (struct range){(uintptr_t)p, bytesize};
	stats.host_allocs++;
	*pp = p;
	LEAVE();
}

EXPORT sf_curesult cuMemFreeHost(void *p)
{
	ENTER("cuMemFreeHost");
	NEED_CONTEXT();
	ret_ = INVALID_VALUE;
	for (size_t i = 0; i < 16; i++)
		if (pinned[i].n && pinned[i].p == (uintptr_t)p) {
			free(p);
			pinned[i].n = 0;
			stats.host_frees++;
			ret_ = 0;
		}
	LEAVE();
}

EXPORT sf_curesult cuStreamCreate(sf_custream *stream, unsigned int flags)
{
	size_t i;

	ENTER("cuStreamCreate");
	(void)flags;
	NEED_CONTEXT();
	for (i = 0; i < 64 && streams[i]; i++)
		;
	if (i == 64 || !(streams[i] = calloc(1, sizeof(*streams[i])))) {
		ret_ = OUT_OF_MEMORY;
		goto out;
	}
	streams[i]->eager = eager;
	*stream = streams[i];
	stats.streams++;
	LEAVE();
}

EXPORT sf_curesult cuStreamDestroy_v2(sf_custream stream)
{
	ENTER("cuStreamDestroy");
	NEED_CONTEXT();
	ret_ = INVALID_HANDLE;
	for (size_t i = 0; i < 64; i++)
		if (stream && streams[i] == stream) {
			/* Queued work still completes, as with the driver. */
			drain(stream);
			free(stream->ops);
			free(stream);
			streams[i] = NULL;
			stats.stream_destroys++;
			ret_ = 0;
		}
	LEAVE();
}

EXPORT sf_curesult cuStreamWaitEvent(sf_custream stream, sf_cuevent event, unsigned int flags)
{
	struct op o = {.kind = OP_WAIT, .ev = event};

	ENTER("cuStreamWaitEvent");
	(void)flags;
	NEED_CONTEXT();
	o.ev_on = event->on;
	o.gen = event->recorded;
	/* An event never recorded is complete: nothing to wait for. */
	if (o.gen && push(stream_of(stream), o) < 0)
		ret_ = OUT_OF_MEMORY;
	LEAVE();
}

EXPORT sf_curesult cuStreamSynchronize(sf_custream stream)
{
	ENTER("cuStreamSynchronize");
	NEED_CONTEXT();
	drain(stream_of(stream));
	LEAVE();
}

EXPORT sf_curesult cuEventCreate(sf_cuevent *event, unsigned int flags)
{
	size_t i;

	ENTER("cuEventCreate");
	(void)flags;
	NEED_CONTEXT();
	for (i = 0; i < 256 && events[i]; i++)
		;
	if (i == 256 || !(events[i] = calloc(1, sizeof(*events[i])))) {
		ret_ = OUT_OF_MEMORY;
		goto out;
	}
	*event = events[i];
	stats.events++;
	LEAVE();
}

EXPORT sf_curesult cuEventRecord(sf_cuevent event, sf_custream stream)
{
	struct op o = {.kind = OP_RECORD, .ev = event};

	ENTER("cuEventRecord");
	NEED_CONTEXT();
	o.gen = event->recorded + 1;
	if (push(stream_of(stream), o) < 0) {
		ret_ = OUT_OF_MEMORY;
		goto out;
	}
	event->recorded = o.gen;
	event->ran &= ~(UINT64_C(1) << (o.gen % 64));
	event->on = stream_of(stream);
	LEAVE();
}

EXPORT sf_curesult cuEventQuery(sf_cuevent event)
{
	ENTER("cuEventQuery");
	NEED_CONTEXT();
	progress();
	/* A record asked about again: the GPU got on with its work meanwhile. */
	if (event->polled == event->recorded)
		while (!record_ran(event, event->recorded) && run_one(event->on))
			;
	event->polled = event->recorded;
	if (!record_ran(event, event->recorded))
		ret_ = NOT_READY;
	LEAVE();
}

EXPORT sf_curesult cuEventSynchronize(sf_cuevent event)
{
	ENTER("cuEventSynchronize");
	NEED_CONTEXT();
	while (!record_ran(event, event->recorded))
		if (!run_one(event->on))
			wait_for_busy();
	LEAVE();
}

EXPORT sf_curesult cuEventDestroy_v2(sf_cuevent event)
{
	ENTER("cuEventDestroy");
	NEED_CONTEXT();
	if (event->destroyed) {
		ret_ = INVALID_HANDLE;
	} else {
		/* As with the driver, work queued before still completes: the event stays
		 * allocated (and reachable) for the operations that name it. */
		event->destroyed = 1;
		stats.event_destroys++;
	}
	LEAVE();
}

/* The codes the fake returns, with the driver's own names and descriptions. */
static const struct {
	unsigned code;
	const char *name, *text;
} errors[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	 "part or all of the requested memory range is already mapped"},
	{713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	 "pointer does not correspond to a registered memory region"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static sf_curesult error_field(sf_curesult error, const char **pstr, int text)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error) {
			*pstr = text ? errors[i].text : errors[i].name;
			return 0;
		}
	*pstr = NULL;
	return INVALID_VALUE;
}

EXPORT sf_curesult cuGetErrorName(sf_curesult error, const char **pstr)
{
	return error_field(error, pstr, 0);
}

EXPORT sf_curesult cuGetErrorString(sf_curesult error, const char **pstr)
{
	return error_field(error, pstr, 1);
}

EXPORT void fake_cuda_stats(struct fake_cuda_stats *ret)
{
	pthread_mutex_lock(&lock);
	*ret = stats;
	pthread_mutex_unlock(&lock);
}

EXPORT int fake_cuda_read_async(void *dst, unsigned long long src, size_t bytes, void *stream)
{
	struct op o = {.kind = OP_READ,
		       .dst = dst,
		       .src = (const unsigned char *)(uintptr_t)src,
		       .n = bytes};
	int r = -1;

	pthread_mutex_lock(&lock);
	if (ctx_depth && device_ok(src, bytes))
		r = push(stream_of(stream), o);
	progress();
	pthread_mutex_unlock(&lock);
	return r;
}

EXPORT void fake_cuda_set_eager(void *stream, int on)
{
	pthread_mutex_lock(&lock);
	stream_of(stream)->eager = on;
	progress();
	pthread_mutex_unlock(&lock);
}

EXPORT void fake_cuda_set_busy(void *stream, int on)
{
	pthread_mutex_lock(&lock);
	stream_of(stream)->busy = on;
	progress();
	pthread_mutex_unlock(&lock);
}
