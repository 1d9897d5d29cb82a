/*
 * The connection cap of the control and stats sockets, tcp or ipc (launcher.h). libzmq's monitor
 * sends two frames per event: 6 bytes (the event, 16 bits, and its value, 32 bits, in
 * this machine's order) and the endpoint. For ZMQ_EVENT_ACCEPTED and
 * ZMQ_EVENT_DISCONNECTED the value is the connection's descriptor; every connection
 * accepted is reported gone, however it ends, before its descriptor is closed. libzmq
 * blocks its I/O thread rather than drop an event when the monitor's pipe is full.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <zmq.h>

#include "shmfeed/shmfeed.h"
#include "common/log.h"
#include "common/proc.h"
#include "launcher/launcher.h"

int sf__conn_cap_open(struct sf_conn_cap *c, void *zctx, void *sock, const char *name,
		      const char *what, int port, const char *path, struct sf_err *e)
{
	char ep[64];
	int linger = 0, handshake = SF_TCP_HANDSHAKE_MS;

	memset(c, 0, sizeof(*c));
	zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &handshake, sizeof(handshake));
	snprintf(ep, sizeof(ep), "inproc://%s", name);
	if (zmq_socket_monitor(sock, ep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) < 0)
		return sf__err(e, -errno, "zmq_socket_monitor: %s", zmq_strerror(errno));
	c->mon = zmq_socket(zctx, ZMQ_PAIR);
	if (!c->mon)
		return sf__err(e, -errno, "zmq_socket: %s", zmq_strerror(errno));
	zmq_setsockopt(c->mon, ZMQ_LINGER, &linger, sizeof(linger));
	if (zmq_connect(c->mon, ep) < 0) {
		int r = -errno;

		zmq_close(c->mon);
		c->mon = NULL;
		return sf__err(e, r, "cannot connect to %s: %s", ep, zmq_strerror(-r));
	}
	c->sock = sock;
	c->what = what;
	c->port = port;
	c->path = path;
	return 0;
}

/* Whether descriptor `fd` is still a connection to our tcp port or ipc path (a check
 * against a descriptor closed and taken again meanwhile). */
static bool ours(const struct sf_conn_cap *c, int fd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return false;
	if (c->path) {
		const struct sockaddr_un *un = (const struct sockaddr_un *)&sa;
		/* An abstract socket (ipc://@NAME) has a NUL where a path starts. */
		const bool abstract = c->path[0] == '@';

		return sa.ss_family == AF_UNIX && (un->sun_path[0] == '\0') == abstract &&
		       !strncmp(un->sun_path + abstract, c->path + abstract,
				sizeof(un->sun_path) - 1);
	}
	if (sa.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&sa)->sin_port) == c->port;
	if (sa.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&sa)->sin6_port) == c->port;
	return false;
}

/*
 * The connections shut, said when the first of a flood is (none for a minute before)
 * and then every 10 s at most, whatever the rate at which they come, and at the end
 * (`last`).
 */
static void say(struct sf_conn_cap *c, bool last)
{
	const uint64_t now = sf__now_ns();
	const bool fresh = !c->logged_ns || now - c->logged_ns >= 60000000000ull;

	if (!c->shut || (!last && !fresh && now - c->logged_ns < 10000000000ull))
		return;
	if (fresh)
		sf__log_error("%s socket: more than %u connections open: shutting some at once "
			      "(a client opening many?)",
			      c->what, SF_TCP_MAX_CONNECTIONS);
	else
		sf__log_error("%s socket: %llu more connection%s shut, over the %u open", c->what,
			      (unsigned long long)c->shut, c->shut == 1 ? "" : "s",
			      SF_TCP_MAX_CONNECTIONS);
	c->shut = 0;
	c->logged_ns = now;
}

/* Record or forget a connection; false when out of memory. */
static bool track(struct sf_conn_cap *c, uint16_t event, int fd)
{
	if (event == ZMQ_EVENT_DISCONNECTED) {
		for (uint32_t k = 0; k < c->n; k++)
			if (c->conns[k].fd == fd) {
				c->conns[k] = c->conns[--c->n];
				break;
			}
		return true;
	}
	if (c->n == c->cap) {
		uint32_t cap = c->cap ? 2 * c->cap : 2 * SF_TCP_MAX_CONNECTIONS;
		struct sf_conn *grown = realloc(c->conns, cap * sizeof(*grown));

		if (!grown)
			return false;
		c->conns = grown;
		c->cap = cap;
	}
	c->conns[c->n++] = (struct sf_conn){.fd = fd, .since_ns = sf__now_ns()};
	return true;
}

/* The connection to shut: the oldest still inside its handshake interval, else the
 * newest; -1 when none is left. */
static int victim(const struct sf_conn_cap *c)
{
	const uint64_t young = sf__now_ns() - (uint64_t)SF_TCP_HANDSHAKE_MS * 1000000;
	int oldest_young = -1, newest = -1;

	for (uint32_t k = 0; k < c->n; k++) {
		const struct sf_conn *x = &c->conns[k];

		if (x->shut)
			continue;
		if (x->since_ns >= young &&
		    (oldest_young < 0 || x->since_ns < c->conns[oldest_young].since_ns))
			oldest_young = (int)k;
		if (newest < 0 || x->since_ns >= c->conns[newest].since_ns)
			newest = (int)k;
	}
	return oldest_young >= 0 ? oldest_young : newest;
}

void sf__conn_cap_serve(struct sf_conn_cap *c)
{
	uint32_t live = 0;
	uint8_t head[6];

	/* Every event waiting first: a descriptor reported gone later in them is not shut. */
	for (;;) {
		int n = zmq_recv(c->mon, head, sizeof(head), ZMQ_DONTWAIT), more = 0;
		size_t more_len = sizeof(more);
		uint16_t event;
		uint32_t fd;

		if (n < 0)
			break;
		/* The endpoint frame: not needed. */
		while (zmq_getsockopt(c->mon, ZMQ_RCVMORE, &more, &more_len) == 0 && more) {
			char skip[8];

			zmq_recv(c->mon, skip, sizeof(skip), 0);
		}
		if (n != (int)sizeof(head))
			continue;
		memcpy(&event, head, sizeof(event));
		memcpy(&fd, head + 2, sizeof(fd));
		if ((event == ZMQ_EVENT_ACCEPTED || event == ZMQ_EVENT_DISCONNECTED) &&
		    !track(c, event, (int)fd))
			shutdown((int)fd, SHUT_RDWR); /* out of memory: not kept, not counted */
	}
	for (uint32_t k = 0; k < c->n; k++)
		live += !c->conns[k].shut;
	while (live > SF_TCP_MAX_CONNECTIONS) {
		struct sf_conn *x = &c->conns[victim(c)];

		if (ours(c, x->fd))
			shutdown(x->fd, SHUT_RDWR);
		x->shut = 1;
		live--;
		c->shut++;
	}
	say(c, false);
}

void sf__conn_cap_close(struct sf_conn_cap *c)
{
	char skip[256];

	if (!c->mon)
		return;
	say(c, true);
	/* The monitor stopped, and its last events read, before either socket closes: an
	 * event libzmq queued for a monitor already closed was never freed (LeakSanitizer,
	 * ipc connections shut by the cap). */
	zmq_socket_monitor(c->sock, NULL, 0);
	while (zmq_recv(c->mon, skip, sizeof(skip), ZMQ_DONTWAIT) >= 0)
		;
	zmq_close(c->mon);
	c->mon = NULL;
	free(c->conns);
	c->conns = NULL;
	c->n = c->cap = 0;
}
