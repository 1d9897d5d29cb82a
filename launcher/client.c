/*
 * The control client of `shmfeed status` and `shmfeed top`: one request and its reply
 * over a DEALER socket connected to the job's ROUTER, bounded by a timeout so a wedged
 * or vanished supervisor never hangs the caller. With a CURVE-protected endpoint the
 * client uses the server key from the discovery file and its own key pair
 * (sf__curve_client_setup), whose public key the job must allow.
 */
#include <errno.h>
#include <string.h>
#include <zmq.h>

#include "shmfeed/shmfeed.h"
#include "common/control.h"
#include "launcher/launcher.h"

/*
 * A client's libzmq context holds 5 descriptors (an eventfd and an epoll descriptor for
 * each of its two threads, the context's own eventfd), its socket an eventfd and a
 * connection.
 */
#define CLIENT_FDS 7u

int sf__ctl_call(const struct sf_job_info *info, const char *request, int timeout_ms, char *reply,
		 size_t reply_len, struct sf_err *e)
{
	void *ctx, *sock = NULL;
	int linger = 0, r, n;
	uint64_t open_now, limit, need = sf__fds_needed(CLIENT_FDS, &open_now, &limit);

	if (need > limit)
		return sf__err(e, -EMFILE,
			       "a control client needs %llu file descriptors (%llu open now) but "
			       "the limit is %llu (RLIMIT_NOFILE); raise it with `ulimit -n %llu`",
			       (unsigned long long)need, (unsigned long long)open_now,
			       (unsigned long long)limit, (unsigned long long)need);
	ctx = zmq_ctx_new();
	if (!ctx)
		return sf__err(e, -errno, "zmq_ctx_new: %s", zmq_strerror(errno));
	sock = zmq_socket(ctx, ZMQ_DEALER);
	if (!sock) {
		r = sf__err(e, -errno, "zmq_socket: %s", zmq_strerror(errno));
		goto out;
	}
	zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(sock, ZMQ_IPV6, &(int){1}, sizeof(int)); /* tcp://[IPv6]:PORT */
	zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
	zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof(timeout_ms));
	r = sf__curve_client_setup(sock, info, e);
	if (r < 0)
		goto out;
	if (zmq_connect(sock, info->control) < 0) {
		r = sf__err(e, -errno, "cannot connect to %s: %s", info->control,
			    zmq_strerror(errno));
		goto out;
	}
	if (zmq_send(sock, request, strlen(request), 0) < 0) {
		r = sf__err(e, -errno, "cannot send to job '%s': %s", info->job,
			    zmq_strerror(errno));
		goto out;
	}
	n = zmq_recv(sock, reply, reply_len - 1, 0);
	if (n < 0) {
		/* A CURVE server says nothing to a client it refuses. */
		r = errno == EAGAIN
			    ? sf__err(e, SF_E_TIMEOUT,
				      "job '%s' (pid %d) did not answer within %d ms%s", info->job,
				      info->pid, timeout_ms,
				      info->curve_server_public[0]
					      ? " (or does not allow this client's CURVE key)"
					      : "")
			    : sf__err(e, -errno, "receive from job '%s': %s", info->job,
				      zmq_strerror(errno));
		goto out;
	}
	if ((size_t)n >= reply_len) {
		r = sf__err(e, SF_E_PROTOCOL, "reply of job '%s' larger than %zu bytes", info->job,
			    reply_len);
		goto out;
	}
	reply[n] = 0;
	r = n;
out:
	if (sock)
		zmq_close(sock);
	zmq_ctx_term(ctx);
	return r;
}
