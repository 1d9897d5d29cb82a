/*
 * CURVE authentication of the control and stats sockets: key files, the allow-list of
 * client keys, the ZAP handler that applies it, the client side of status/top, and the
 * key pairs `shmfeed keygen` writes.
 *
 * Any local user can reach a tcp port, loopback included, so a tcp:// endpoint is served
 * with CURVE only (unless control.insecure_tcp says otherwise). CURVE alone encrypts but
 * lets in any client that knows the server's public key; the allow-list is what
 * authenticates. libzmq asks a ZAP handler (RFC 27, a REP socket bound at
 * inproc://zeromq.zap.01 in the same context) about every CURVE handshake; the
 * supervisor serves that socket from its loop and answers 200 only for a client public
 * key in the list. Without a handler libzmq would accept every client, so the handler
 * is bound before the sockets it guards.
 *
 * Key files use ZeroMQ's certificate format (as czmq's zcert and pyzmq's zmq.auth write
 * and read it): `public-key = "Z85"` and `secret-key = "Z85"` lines. A secret key file
 * must be a regular file of this user with no access for group or others.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "shmfeed/shmfeed.h"
#include "common/log.h"
#include "launcher/launcher.h"

#define KEY_FILE_MAX   4096u	  /* a key file is a few lines */
#define ALLOW_FILE_MAX (1u << 20) /* an allow-list of up to ~20,000 keys */
#define ALLOW_KEYS_MAX 16384u
#define ZAP_ENDPOINT   "inproc://zeromq.zap.01"
#define ZAP_FRAMES     7 /* version, request id, domain, address, identity, mechanism, key */

static int z85_key(const char *s, size_t len)
{
	static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  ".-:+=^!/*?&<>()[]{}@%$#";

	char copy[41];
	uint8_t bytes[32];

	if (len != 40)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!s[i] || !strchr(z85, s[i]))
			return 0;
	/* Each 5 characters must decode to 4 bytes, below 2^32 ("%%%%%" is not). */
	memcpy(copy, s, 40);
	copy[40] = 0;
	return zmq_z85_decode(bytes, copy) != NULL;
}

/* Read a small text file into buf (NUL-terminated); with `secret`, check its owner and
 * mode first; any other is refused when another user than root owns it or group or
 * others may write it (an allow-list others can write lets them in). */
static int read_small(const char *what, const char *path, int secret, char *buf, size_t len,
		      struct sf_err *e)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return sf__err(e, -errno, "%s %s: %s", what, path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sf__err(e, SF_E_CONFIG, "%s %s is not a regular file", what, path);
	}
	if (secret ? st.st_uid != geteuid() || (st.st_mode & 077)
		   : (st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)) {
		close(fd);
		return sf__err(e, SF_E_CONFIG, "%s %s must belong to uid %u %s; it has uid %u, mode %03o",
			       what, path, (unsigned)geteuid(),
			       secret ? "with no access for group or others (chmod 600)"
				      : "(or root) and not be writable by group or others",
			       (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
	}
	if ((uint64_t)st.st_size >= len) {
		close(fd);
		return sf__err(e, SF_E_CONFIG, "%s %s is larger than %zu bytes", what, path,
			       len - 1);
	}
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return sf__err(e, -errno, "%s %s: %s", what, path, strerror(errno));
	/* A NUL would end the text there, and what follows would go unread. */
	if (memchr(buf, 0, (size_t)n))
		return sf__err(e, SF_E_CONFIG, "%s %s holds a NUL byte: not a text file", what,
			       path);
	buf[n] = 0;
	return 0;
}

/* The value of a `NAME = "Z85"` line of a certificate; 0 when there is none. */
static int cert_value(const char *text, const char *name, char out[41])
{
	size_t nlen = strlen(name);

	for (const char *line = text, *end; *line; line = end + !!*end) {
		const char *p = line + strspn(line, " \t");

		end = line + strcspn(line, "\n");
		if (strncmp(p, name, nlen))
			continue;
		p += nlen;
		p += strspn(p, " \t");
		if (*p++ != '=')
			continue;
		p += strspn(p, " \t");
		if (*p++ != '"' || !z85_key(p, strcspn(p, "\"\n")) || p[40] != '"')
			return -1;
		memcpy(out, p, 40);
		out[40] = 0;
		return 1;
	}
	return 0;
}

int sf__curve_read_key_pair(const char *path, char ret_public[41], char ret_secret[41],
			    struct sf_err *e)
{
	char buf[KEY_FILE_MAX], pub[41], sec[41], derived[41];
	int r, has_pub;

	r = read_small("CURVE secret key file", path, 1, buf, sizeof(buf), e);
	if (r < 0)
		return r;
	if (cert_value(buf, "secret-key", sec) != 1)
		return sf__err(e, SF_E_CONFIG,
			       "CURVE secret key file %s: no line secret-key = \"<40 Z85 "
			       "characters>\" (write one with `shmfeed keygen`)",
			       path);
	has_pub = cert_value(buf, "public-key", pub);
	if (zmq_curve_public(derived, sec) < 0)
		return sf__err(e, SF_E_CONFIG, "CURVE secret key file %s: %s", path,
			       zmq_strerror(errno));
	if (has_pub < 0 || (has_pub && strcmp(pub, derived)))
		return sf__err(e, SF_E_CONFIG,
			       "CURVE secret key file %s: its public-key is not the public key of "
			       "its secret-key",
			       path);
	memcpy(ret_public, derived, 41);
	memcpy(ret_secret, sec, 41);
	return 0;
}

int sf__curve_read_allowed(const char *path, uint8_t (**ret_keys)[32], uint32_t *ret_count,
			   struct sf_err *e)
{
	char *buf = malloc(ALLOW_FILE_MAX);
	uint8_t(*keys)[32] = NULL;
	uint32_t n = 0, line_no = 0;
	char *line, *next;
	int r;

	if (!buf)
		return sf__err(e, -ENOMEM, "out of memory");
	r = read_small("CURVE allow-list", path, 0, buf, ALLOW_FILE_MAX, e);
	if (r < 0)
		goto out;
	for (line = buf; line; line = next) {
		size_t len;
		char key[41];

		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		line_no++;
		line += strspn(line, " \t\r");
		if (!*line || *line == '#')
			continue;
		len = strcspn(line, " \t\r");
		/* A key, then optionally a comment: "KEY alice@node3". */
		if (!z85_key(line, len)) {
			r = sf__err(
				e, SF_E_CONFIG,
				"CURVE allow-list %s:%u: expected a 40-character Z85 public key "
				"(a line of a .pub file from `shmfeed keygen`)",
				path, line_no);
			goto out;
		}
		if (n == ALLOW_KEYS_MAX) {
			r = sf__err(e, SF_E_CONFIG, "CURVE allow-list %s: more than %u keys", path,
				    ALLOW_KEYS_MAX);
			goto out;
		}
		if (n % 64 == 0) {
			uint8_t(*more)[32] = realloc(keys, (n + 64) * sizeof(*keys));

			if (!more) {
				r = sf__err(e, -ENOMEM, "out of memory");
				goto out;
			}
			keys = more;
		}
		memcpy(key, line, 40);
		key[40] = 0;
		zmq_z85_decode(keys[n++], key);
	}
	if (!n) {
		r = sf__err(e, SF_E_CONFIG,
			    "CURVE allow-list %s holds no key: no client could connect", path);
		goto out;
	}
	*ret_keys = keys;
	*ret_count = n;
	keys = NULL;
	r = 0;
out:
	free(keys);
	free(buf);
	return r;
}

int sf__curve_server_load(const struct sf_config *cfg, struct sf_curve_server *ret,
			  struct sf_err *e)
{
	struct sf_curve_server c = {0};
	int r;

	if (!cfg->curve_secret_key_file) {
		*ret = c;
		return 0;
	}
	if (!zmq_has("curve"))
		return sf__err(
			e, SF_E_CONFIG,
			"this libzmq was built without CURVE; the control keys cannot be used");
	r = sf__curve_read_key_pair(cfg->curve_secret_key_file, c.public_key, c.secret_key, e);
	if (r < 0)
		return r;
	r = sf__curve_read_allowed(cfg->curve_allowed_clients, &c.allowed, &c.n_allowed, e);
	if (r < 0)
		return r;
	c.enabled = 1;
	*ret = c;
	return 0;
}

void sf__curve_server_free(struct sf_curve_server *c)
{
	free(c->allowed);
	/* The secret does not outlive its use in this process's memory. */
	explicit_bzero(c->secret_key, sizeof(c->secret_key));
	memset(c, 0, sizeof(*c));
}

int sf__curve_server_setup(struct sf_curve_server *c, void *zctx, void *const *socks,
			   uint32_t n_socks, struct sf_err *e)
{
	int one = 1;

	c->zap = zmq_socket(zctx, ZMQ_REP);
	if (!c->zap)
		return sf__err(e, -errno, "zmq_socket: %s", zmq_strerror(errno));
	zmq_setsockopt(c->zap, ZMQ_LINGER, &(int){0}, sizeof(int));
	if (zmq_bind(c->zap, ZAP_ENDPOINT) < 0)
		return sf__err(e, -errno, "cannot bind the ZAP handler %s: %s", ZAP_ENDPOINT,
			       zmq_strerror(errno));
	for (uint32_t i = 0; i < n_socks; i++)
		if (zmq_setsockopt(socks[i], ZMQ_CURVE_SERVER, &one, sizeof(one)) < 0 ||
		    zmq_setsockopt(socks[i], ZMQ_CURVE_SECRETKEY, c->secret_key, 41) < 0)
			return sf__err(e, -errno, "CURVE: %s", zmq_strerror(errno));
	return 0;
}

static int allowed(const struct sf_curve_server *c, const void *key, size_t len)
{
	if (len != 32)
		return 0;
	for (uint32_t i = 0; i < c->n_allowed; i++)
		if (!memcmp(c->allowed[i], key, 32))
			return 1;
	return 0;
}

/* Answer one ZAP request (frames in `f`, `n` of them). */
static void zap_reply(struct sf_curve_server *c, zmq_msg_t *f, int n)
{
	const char *code = "400", *text = "not allowed";
	char who[41] = "?", addr[64] = "?";

	if (n == ZAP_FRAMES && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3) &&
	    zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
	    allowed(c, zmq_msg_data(&f[6]), zmq_msg_size(&f[6]))) {
		code = "200";
		text = "OK";
	} else {
		c->refused++;
		if (n == ZAP_FRAMES && zmq_msg_size(&f[6]) == 32)
			zmq_z85_encode(who, zmq_msg_data(&f[6]), 32);
		if (n >= 4)
			snprintf(addr, sizeof(addr), "%.*s", (int)zmq_msg_size(&f[3]),
				 (const char *)zmq_msg_data(&f[3]));
		/* Every refusal counts; the log gets the first and then each power of two, so
		 * a client retrying in a loop cannot flood it. */
		if (!(c->refused & (c->refused - 1)))
			sf__log_error("control: refused a client from %s with public key %s: not "
				      "in curve_allowed_clients (%llu refused so far)",
				      addr, who, (unsigned long long)c->refused);
	}
	zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
	if (n >= 2)
		zmq_send(c->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
	else
		zmq_send(c->zap, "", 0, ZMQ_SNDMORE);
	zmq_send(c->zap, code, 3, ZMQ_SNDMORE);
	zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE);
	zmq_send(c->zap, "", 0, ZMQ_SNDMORE); /* user id */
	zmq_send(c->zap, "", 0, 0);	      /* metadata */
}

void sf__curve_zap_serve(struct sf_curve_server *c)
{
	for (;;) {
		zmq_msg_t f[ZAP_FRAMES + 1];
		int n = 0, more = 1;

		while (more) {
			zmq_msg_t *m = &f[n < ZAP_FRAMES ? n : ZAP_FRAMES];

			zmq_msg_init(m);
			if (zmq_msg_recv(m, c->zap, n ? 0 : ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(m);
				if (!n)
					return;
				break;
			}
			more = zmq_msg_more(m);
			if (n >= ZAP_FRAMES)
				zmq_msg_close(m);
			n++;
		}
		zap_reply(c, f, n);
		for (int i = 0; i < n && i < ZAP_FRAMES; i++)
			zmq_msg_close(&f[i]);
	}
}

int sf__curve_client_setup(void *sock, const struct sf_job_info *info, struct sf_err *e)
{
	const char *file =
		info->client_key_file[0] ? info->client_key_file : getenv("SHMFEED_CURVE_KEY");
	char pub[41], sec[41];
	int r;

	if (!info->curve_server_public[0])
		return 0;
	if (!file || !file[0])
		return sf__err(
			e, SF_E_CONFIG,
			"job '%s' takes CURVE clients only: give a key pair whose public key "
			"is in the job's curve_allowed_clients (--key FILE or "
			"SHMFEED_CURVE_KEY; `shmfeed keygen` writes one)",
			info->job);
	r = sf__curve_read_key_pair(file, pub, sec, e);
	if (r < 0)
		return r;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, info->curve_server_public, 41) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 41) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 41) < 0)
		r = sf__err(e, -errno, "CURVE: %s", zmq_strerror(errno));
	explicit_bzero(sec, sizeof(sec));
	return r;
}

/* Write `text` to a new file `path` with `mode`; an existing file is never replaced. */
static int write_new(const char *path, mode_t mode, const char *text, struct sf_err *e)
{
	size_t len = strlen(text);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);

	if (fd < 0)
		return sf__err(e, -errno, "cannot create %s: %s", path, strerror(errno));
	if (fchmod(fd, mode) < 0 || write(fd, text, len) != (ssize_t)len || fsync(fd) < 0) {
		int r = sf__err(e, -errno, "cannot write %s: %s", path, strerror(errno));

		close(fd);
		unlink(path);
		return r;
	}
	close(fd);
	return 0;
}

int sf__curve_keygen(const char *path, char ret_public[41], struct sf_err *e)
{
	char pub[41], sec[41], text[512], pub_path[4096];
	int r;

	if ((size_t)snprintf(pub_path, sizeof(pub_path), "%s.pub", path) >= sizeof(pub_path))
		return sf__err(e, -ENAMETOOLONG, "key file path too long");
	if (!zmq_has("curve"))
		return sf__err(e, -ENOTSUP, "this libzmq was built without CURVE");
	if (zmq_curve_keypair(pub, sec) < 0)
		return sf__err(e, -errno, "zmq_curve_keypair: %s", zmq_strerror(errno));
	snprintf(text, sizeof(text),
		 "#   shmfeed CURVE key pair (ZeroMQ certificate format)\n"
		 "#   The secret key: keep this file private (mode 0600).\n\n"
		 "metadata\n"
		 "curve\n"
		 "    public-key = \"%s\"\n"
		 "    secret-key = \"%s\"\n",
		 pub, sec);
	r = write_new(path, 0600, text, e);
	explicit_bzero(sec, sizeof(sec));
	explicit_bzero(text, sizeof(text));
	if (r < 0)
		return r;
	/* The .pub file is one line of an allow-list: the key, then a comment. */
	snprintf(text, sizeof(text), "%s %s\n", pub, path);
	r = write_new(pub_path, 0644, text, e);
	if (r < 0) {
		unlink(path);
		return r;
	}
	memcpy(ret_public, pub, 41);
	return 0;
}
