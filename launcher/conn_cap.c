/*
 * The connection cap of tcp control and stats sockets (launcher.h). libzmq's monitor
 * sends two frames per event: 6 bytes (the event, 16 bits, and its value, 32 bits, in
 * this machine's order) and the endpoint. For ZMQ_EVENT_ACCEPTED and
 * ZMQ_EVENT_DISCONNECTED the value is the connection's descriptor.
 */
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#include "shmfeed/shmfeed.h"
#include "common/log.h"
#include "common/proc.h"
#include "launcher/launcher.h"

int sf__conn_cap_open(struct sf_conn_cap *c, void *zctx, void *sock, const char *name,
		      const char *what, int port, struct sf_err *e)
{
	char ep[64];
	int linger = 0;

	memset(c, 0, sizeof(*c));
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
	c->what = what;
	c->port = port;
	return 0;
}

/* Whether descriptor `fd` is still a tcp connection to our port: it may have been closed
 * and taken again by the time its event is read. */
static int ours(const struct sf_conn_cap *c, int fd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return 0;
	if (sa.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&sa)->sin_port) == c->port;
	if (sa.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&sa)->sin6_port) == c->port;
	return 0;
}

/* The connections shut, said when the first is and then every 10 s at most, whatever the
 * rate at which they come, and at the end (`last`). */
static void say(struct sf_conn_cap *c, bool last)
{
	const uint64_t now = sf__now_ns();

	if (!c->shut || (!last && c->logged_ns && now - c->logged_ns < 10000000000ull))
		return;
	if (!c->logged_ns)
		sf__log_error("%s socket: more than %u connections open: shutting new ones at "
			      "once (a client opening many?)",
			      c->what, SF_TCP_MAX_CONNECTIONS);
	else
		sf__log_error("%s socket: %llu more connection%s shut, over the %u open", c->what,
			      (unsigned long long)c->shut, c->shut == 1 ? "" : "s",
			      SF_TCP_MAX_CONNECTIONS);
	c->shut = 0;
	c->logged_ns = now;
}

void sf__conn_cap_serve(struct sf_conn_cap *c)
{
	uint8_t head[6];
	uint16_t event;
	uint32_t fd;

	for (;;) {
		int n = zmq_recv(c->mon, head, sizeof(head), ZMQ_DONTWAIT), more = 0;
		size_t more_len = sizeof(more);

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
		if (event == ZMQ_EVENT_DISCONNECTED) {
			c->open -= c->open > 0;
			continue;
		}
		if (event != ZMQ_EVENT_ACCEPTED)
			continue;
		c->open++;
		/* Over the cap: end it. Its disconnection is counted off when libzmq sees it. */
		if (c->open > SF_TCP_MAX_CONNECTIONS && ours(c, (int)fd)) {
			shutdown((int)fd, SHUT_RDWR);
			c->shut++;
		}
	}
	say(c, false);
}

void sf__conn_cap_close(struct sf_conn_cap *c)
{
	if (!c->mon)
		return;
	say(c, true);
	zmq_close(c->mon);
	c->mon = NULL;
}
