/*
 * Control messages of a job: the small, versioned JSON requests a client sends to the
 * supervisor's ROUTER socket, their strict validation, and a small bounded JSON reader
 * that clients (shmfeed status, top) use on replies and published stats. Nothing here
 * touches a socket; the launcher and the clients do the I/O.
 *
 * A request is one JSON object of at most SF_CTL_MAX_REQUEST bytes:
 *   {"v": 1, "op": "hello" | "status" | "stats" | "pause" | "resume" | "stop"}
 *   {"v": 1, "op": "seek", "rank": LOCAL_RANK, "step": STEP}
 * with an optional "id" (an unsigned integer echoed in the reply). Unknown keys, other
 * versions, duplicate keys, missing or extra arguments are rejected with SF_E_PROTOCOL.
 */
#ifndef SF_COMMON_CONTROL_H
#define SF_COMMON_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "common/json_escape.h"

#define SF_CTL_VERSION	   1u
#define SF_CTL_MAX_REQUEST 1024u  /* bytes of one request */
#define SF_CTL_MAX_REPLY   65536u /* bytes of one reply or stats message */
#define SF_STATS_MAX_MESSAGE 4096   /* bytes of one message to the stats socket */
#define SF_JSON_MAX_DEPTH  8u	  /* nesting the reader accepts */
#define SF_JSON_MAX_TOKENS 4096u  /* values the reader accepts in one message */

/* Request operations. */
#define SF_CTL_HELLO  1u
#define SF_CTL_STATUS 2u
#define SF_CTL_STATS  3u
#define SF_CTL_PAUSE  4u
#define SF_CTL_RESUME 5u
#define SF_CTL_SEEK   6u
#define SF_CTL_STOP   7u

struct sf_ctl_request {
	uint32_t op;	 /* SF_CTL_* */
	uint32_t rank;	 /* seek: local rank */
	uint64_t step;	 /* seek: step */
	uint64_t id;	 /* echoed in the reply; 0 when absent */
	uint32_t has_id; /* 1 when the request carried an id */
	uint32_t pad;
};

/* sf__ctl_op_name - the wire name of an operation ("seek"), or NULL. */
const char *sf__ctl_op_name(uint32_t op);

/*
 * sf__ctl_parse_request - validate `len` bytes as a request. Returns 0 and fills *ret;
 * SF_E_PROTOCOL with the reason in `e` for anything malformed, and then only ret->has_id
 * and ret->id: the request's id, where it is a JSON object with a valid one, for the
 * error reply.
 */
int sf__ctl_parse_request(const char *buf, size_t len, struct sf_ctl_request *ret,
			  struct sf_err *e);

/*
 * sf__ctl_format_request - write the request `req` as JSON into buf (NUL-terminated).
 * Returns its length, or -ENOSPC.
 */
int sf__ctl_format_request(const struct sf_ctl_request *req, char *buf, size_t len);

/* The reader: a flat array of tokens over the caller's buffer (jsmn-style). */
#define SF_JSON_OBJECT 1u
#define SF_JSON_ARRAY  2u
#define SF_JSON_STRING 3u /* start/end exclude the quotes; escapes are left as written */
#define SF_JSON_NUMBER 4u
#define SF_JSON_TRUE   5u
#define SF_JSON_FALSE  6u
#define SF_JSON_NULL   7u

struct sf_json_token {
	uint32_t type;
	uint32_t start, end; /* byte range in the buffer */
	uint32_t size;	     /* objects: pairs; arrays: elements */
	uint32_t next;	     /* index of the token after this value and its children */
};

/*
 * sf__json_parse - parse `len` bytes holding exactly one JSON value (RFC 8259; strings
 * must be valid UTF-8 without control characters) into `tok`, at most `max` tokens and
 * SF_JSON_MAX_DEPTH levels. Object keys are string tokens followed by their value.
 * Returns the number of tokens, or SF_E_PROTOCOL with the position in `e`.
 */
int sf__json_parse(const char *buf, size_t len, struct sf_json_token *tok, uint32_t max,
		   struct sf_err *e);

/* sf__json_get - index of the value of `key` in object token `obj`, or -1. */
int sf__json_get(const char *buf, const struct sf_json_token *tok, int obj, const char *key);

/* sf__json_at - index of element `i` of array token `arr`, or -1. */
int sf__json_at(const struct sf_json_token *tok, int arr, uint32_t i);

/* sf__json_u64 - the unsigned integer at token `t`; 0, or SF_E_PROTOCOL when it is not one. */
int sf__json_u64(const char *buf, const struct sf_json_token *tok, int t, uint64_t *ret);

/* sf__json_double - the number at token `t` (0.0 when `t` is not a number). */
double sf__json_double(const char *buf, const struct sf_json_token *tok, int t);

/*
 * sf__json_string - copy the string at token `t` (escapes decoded; \u escapes outside
 * ASCII become '?') into out, NUL-terminated. Returns its length, or SF_E_PROTOCOL (also
 * for a \u0000, which would cut it).
 */
int sf__json_string(const char *buf, const struct sf_json_token *tok, int t, char *out, size_t len);

#endif
