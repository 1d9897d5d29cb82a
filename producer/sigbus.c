/*
 * sf__sigbus_call(): the handler jumps back to the call that was armed on the faulting
 * thread. Each thread has its own jump buffer: a SIGBUS of a mapped read is delivered to
 * the thread that made it.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/errors.h"
#include "producer/sigbus.h"

static _Thread_local sigjmp_buf jump;
static _Thread_local volatile sig_atomic_t armed;
static _Thread_local void *volatile fault_addr;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (!armed) {
		/* Not in a guarded call: returning re-raises it with the default action. */
		signal(sig, SIG_DFL);
		return;
	}
	armed = 0;
	fault_addr = si->si_addr;
	siglongjmp(jump, 1);
}

static int install_result;

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	/* SA_NODEFER: the jump leaves the handler without unblocking SIGBUS. */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	install_result = sigaction(SIGBUS, &sa, NULL) < 0 ? -errno : 0;
}

int sf__sigbus_call(int (*fn)(void *arg), void *arg, void **ret_addr, struct sf_err *e)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int r;

	*ret_addr = NULL;
	if (armed)
		return fn(arg); /* within a call already: its jump serves */
	pthread_once(&once, install);
	if (install_result < 0)
		return sf__err(e, install_result, "cannot install the SIGBUS handler: %s",
			       strerror(-install_result));
	/* savemask 0: no system call per call; the handler runs with SA_NODEFER. */
	if (sigsetjmp(jump, 0)) {
		*ret_addr = fault_addr;
		return -EFAULT;
	}
	armed = 1;
	r = fn(arg);
	armed = 0;
	return r;
}

int sf__sigbus_truncated(const char *path, unsigned long long off, struct sf_err *e)
{
	return sf__err(e, SF_E_SOURCE,
		       "%s: byte %llu: cannot read: the file is shorter than when the job opened "
		       "it (truncated under the running job?)",
		       path, off);
}
