/*
 * Run-time loading of the CUDA Driver API: dlopen("libcuda.so.1") once per process,
 * resolve the versioned symbols that cuda.h would select (cuMemAlloc is cuMemAlloc_v2, and
 * so on), and cuInit(0). Also the translation of a CUresult into its name for messages.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "consumer/cuda.h"

static struct sf_cuda cuda_table;
static const struct sf_cuda *cuda_loaded;
static struct sf_err cuda_load_err;
static int cuda_load_rc;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pid_t cuda_pid; /* the process that loaded and initialized the driver */

static void cuda_load_once(void)
{
	struct sf_cuda *t = &cuda_table;
	sf_curesult r;
	void *lib;
	int count = 0;

	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		cuda_load_rc = sf__err(&cuda_load_err, -ENODEV, "no CUDA driver: %s", dlerror());
		return;
	}
	/* The library stays loaded for the life of the process: the table points into it,
	 * and CUDA itself does not support being unloaded. */
#define RESOLVE(field, name)                                                                       \
	*(void **)&t->field = dlsym(lib, name);                                                    \
	if (!t->field) {                                                                           \
		cuda_load_rc = sf__err(&cuda_load_err, SF_E_CUDA,                                  \
				       "libcuda.so.1 lacks %s: driver too old", name);             \
		return;                                                                            \
	}
	CUDA_SYMBOLS(RESOLVE)
#undef RESOLVE
	r = t->cuInit(0);
	if (r == SF_CUDA_ERROR_NO_DEVICE) {
		cuda_load_rc = sf__err(&cuda_load_err, -ENODEV, "cuInit: no CUDA device");
		return;
	}
	/* The toolkit's stub libcuda (lib64/stubs, for linking) found first: no driver. */
	if (r == SF_CUDA_ERROR_STUB_LIBRARY) {
		cuda_load_rc = sf__err(&cuda_load_err, -ENODEV,
				       "cuInit: libcuda.so.1 is the CUDA toolkit's stub, not a "
				       "driver (CUDA_ERROR_STUB_LIBRARY)");
		return;
	}
	if (r != SF_CUDA_SUCCESS) {
		cuda_load_rc = sf__cuda_check(t, r, "cuInit", &cuda_load_err);
		return;
	}
	r = t->cuDeviceGetCount(&count);
	if (r != SF_CUDA_SUCCESS) {
		cuda_load_rc = sf__cuda_check(t, r, "cuDeviceGetCount", &cuda_load_err);
		return;
	}
	if (count < 1) {
		cuda_load_rc = sf__err(&cuda_load_err, -ENODEV, "no CUDA device");
		return;
	}
	cuda_pid = getpid();
	cuda_loaded = t;
}

int sf__cuda_load(const struct sf_cuda **ret_cuda, struct sf_err *e)
{
	pthread_once(&cuda_once, cuda_load_once);
	/* A child of fork() inherits the loaded table and skips cuInit, but CUDA does not
	 * survive a fork: say so rather than fail on the first call with a driver code. */
	if (cuda_loaded && cuda_pid != getpid())
		return sf__err(e, SF_E_CUDA,
			       "CUDA was initialized by the parent process before fork(); a child "
			       "cannot use it (start the process with spawn, not fork)");
	if (!cuda_loaded) {
		if (e)
			*e = cuda_load_err;
		return cuda_load_rc;
	}
	*ret_cuda = cuda_loaded;
	return 0;
}

const char *sf__cuda_error_name(const struct sf_cuda *cu, sf_curesult r)
{
	const char *name = NULL;

	if (cu && cu->cuGetErrorName && cu->cuGetErrorName(r, &name) == SF_CUDA_SUCCESS && name)
		return name;
	return "CUDA_ERROR_UNKNOWN_CODE";
}

const char *sf__cuda_error_text(const struct sf_cuda *cu, sf_curesult r)
{
	const char *text = NULL;

	if (cu && cu->cuGetErrorString && cu->cuGetErrorString(r, &text) == SF_CUDA_SUCCESS && text)
		return text;
	return "no description from the driver";
}

bool sf__cuda_sticky(sf_curesult r)
{
	/* cuda.h: after these, "any further CUDA work will return the same error", whoever
	 * caused it: most often a kernel of the training on the same context, reported by
	 * the next driver call, which may be shmfeed's. */
	return r == 226 || r == 700 || r == 702 || r == 710 || (r >= 714 && r <= 719) || r == 721 ||
	       r == 810 || r == 911;
}

int sf__cuda_check(const struct sf_cuda *cu, sf_curesult r, const char *what, struct sf_err *e)
{
	const bool sticky = sf__cuda_sticky(r);

	if (r == SF_CUDA_SUCCESS)
		return 0;
	return sf__err(e, SF_E_CUDA, "%s: %s (%u): %s%s", what, sf__cuda_error_name(cu, r), r,
		       sf__cuda_error_text(cu, r),
		       sticky ? "; a sticky error: the GPU context is unusable, maybe from "
				"earlier work on it (the training's own kernels), and the "
				"process must restart"
			      : "");
}
