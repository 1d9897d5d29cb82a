/*
 * A raw control client for tests: `ctl JOB FRAME...` sends the frames as one multipart
 * message (bytes as given, so malformed requests can be sent) over a DEALER socket to
 * the job's control endpoint and prints the reply. `ctl JOB --size N` sends a request of
 * N bytes. Exit status 0 when a reply came, 1 otherwise. JOB may be an endpoint instead
 * (tcp://..., ipc://...), with the server's CURVE key in $SF_CTL_SERVER_KEY; a CURVE
 * client's key pair comes from $SHMFEED_CURVE_KEY; $SF_CTL_TIMEOUT_MS bounds the wait.
 * `ctl JOB --flood SOCKETS SECONDS FRAME` sends FRAME on each of SOCKETS connections for
 * SECONDS, as fast as their queues take it, and prints the replies counted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "launcher/launcher.h"

static int flood(void *ctx, const struct sf_job_info *info, int n_socks, int seconds,
		 const char *frame)
{
	enum { IN_FLIGHT = 32, MAX_SOCKS = 64 };
	zmq_pollitem_t items[MAX_SOCKS];
	long long replies = 0;
	time_t end = time(NULL) + seconds;
	char buf[65536];

	if (n_socks < 1 || n_socks > MAX_SOCKS)
		return 2;
	for (int i = 0; i < n_socks; i++) {
		items[i] = (zmq_pollitem_t){.socket = zmq_socket(ctx, ZMQ_DEALER),
					    .events = ZMQ_POLLIN};
		zmq_setsockopt(items[i].socket, ZMQ_LINGER, &(int){0}, sizeof(int));
		if (zmq_connect(items[i].socket, info->control) < 0)
			return 1;
		for (int k = 0; k < IN_FLIGHT; k++)
			zmq_send(items[i].socket, frame, strlen(frame), 0);
	}
	while (time(NULL) < end) {
		for (int i = 0; i < n_socks; i++) {
			/* More whenever there is room: the launcher's queue never empties. */
			for (int k = 0; k < IN_FLIGHT; k++)
				if (zmq_send(items[i].socket, frame, strlen(frame), ZMQ_DONTWAIT) <
				    0)
					break;
			while (zmq_recv(items[i].socket, buf, sizeof(buf), ZMQ_DONTWAIT) >= 0)
				replies++;
		}
		if (zmq_poll(items, n_socks, 1) < 0)
			break;
	}
	for (int i = 0; i < n_socks; i++)
		zmq_close(items[i].socket);
	printf("%lld\n", replies);
	return 0;
}

int main(int argc, char **argv)
{
	struct sf_job_info info;
	struct sf_err e = {0};
	char reply[65536];
	int timeout = 3000, linger = 0, n;
	void *ctx, *sock;

	if (argc < 3) {
		fprintf(stderr, "usage: ctl JOB FRAME... | ctl JOB --size N\n");
		return 2;
	}
	if (strstr(argv[1], "://")) {
		/* An endpoint given directly: a client without the job's discovery file. */
		const char *server_key = getenv("SF_CTL_SERVER_KEY");

		memset(&info, 0, sizeof(info));
		snprintf(info.job, sizeof(info.job), "?");
		snprintf(info.control, sizeof(info.control), "%s", argv[1]);
		if (server_key)
			snprintf(info.curve_server_public, sizeof(info.curve_server_public), "%s",
				 server_key);
	} else if (sf__job_info_read(argv[1], &info, &e) < 0) {
		fprintf(stderr, "ctl: %s\n", e.msg);
		return 1;
	}
	if (getenv("SF_CTL_TIMEOUT_MS"))
		timeout = atoi(getenv("SF_CTL_TIMEOUT_MS"));
	ctx = zmq_ctx_new();
	sock = zmq_socket(ctx, ZMQ_DEALER);
	if (sf__curve_client_setup(sock, &info, &e) < 0) {
		fprintf(stderr, "ctl: %s\n", e.msg);
		return 1;
	}
	zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(sock, ZMQ_IPV6, &(int){1}, sizeof(int)); /* tcp://[IPv6]:PORT */
	if (zmq_connect(sock, info.control) < 0) {
		fprintf(stderr, "ctl: connect %s failed\n", info.control);
		return 1;
	}
	if (!strcmp(argv[2], "--flood") && argc == 6)
		return flood(ctx, &info, atoi(argv[3]), atoi(argv[4]), argv[5]);
	if (!strcmp(argv[2], "--size") && argc == 4) {
		size_t size = strtoul(argv[3], NULL, 10);
		char *big = malloc(size);

		memset(big, ' ', size);
		memcpy(big, "{\"v\":1,\"op\":\"status\"}", 21);
		zmq_send(sock, big, size, 0);
		free(big);
	} else {
		for (int i = 2; i < argc; i++)
			zmq_send(sock, argv[i], strlen(argv[i]), i + 1 < argc ? ZMQ_SNDMORE : 0);
	}
	n = zmq_recv(sock, reply, sizeof(reply) - 1, 0);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	if (n < 0) {
		fprintf(stderr, "ctl: no reply\n");
		return 1;
	}
	reply[n] = 0;
	printf("%s\n", reply);
	return 0;
}
