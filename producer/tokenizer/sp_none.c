/*
 * The SentencePiece shim of a build without libsentencepiece: a model is refused at load
 * with a message saying what to install. The other functions are never reached, since no
 * model can be loaded; they keep the link whole.
 */
#include <errno.h>
#include <stdio.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/sp_shim.h"

int sf__sp_load(const char *path, struct sf_sp **ret_sp, char *msg, size_t msg_cap)
{
	(void)path;
	(void)ret_sp;
	snprintf(msg, msg_cap,
		 "a SentencePiece model, and this shmfeed was built without libsentencepiece "
		 "(install libsentencepiece-dev and rebuild with -Dsentencepiece=auto)");
	return SF_E_TOKENIZER;
}

void sf__sp_free(struct sf_sp *sp)
{
	(void)sp;
}

uint32_t sf__sp_n_vocab(const struct sf_sp *sp)
{
	(void)sp;
	return 0;
}

int32_t sf__sp_bos(const struct sf_sp *sp)
{
	(void)sp;
	return -1;
}

int32_t sf__sp_eos(const struct sf_sp *sp)
{
	(void)sp;
	return -1;
}

const char *sf__sp_piece(const struct sf_sp *sp, uint32_t id, size_t *ret_len)
{
	(void)sp;
	(void)id;
	*ret_len = 0;
	return NULL;
}

int sf__sp_parts(const struct sf_sp *sp, bool *ret_dummy_prefix, const char **ret_why)
{
	(void)sp, (void)ret_dummy_prefix;
	*ret_why = "built without libsentencepiece";
	return 0;
}

bool sf__sp_byte_fallback(const struct sf_sp *sp)
{
	(void)sp;
	return false;
}

bool sf__sp_plain(const struct sf_sp *sp, uint32_t id)
{
	(void)sp, (void)id;
	return false;
}

bool sf__sp_control(const struct sf_sp *sp, uint32_t id)
{
	(void)sp, (void)id;
	return false;
}

int sf__sp_encode(const struct sf_sp *sp, bool part, const void *text, size_t len, uint32_t *out,
		  size_t cap, size_t *ret_n, char *msg, size_t msg_cap)
{
	(void)sp, (void)part, (void)text, (void)len, (void)out, (void)cap, (void)ret_n;
	snprintf(msg, msg_cap, "built without libsentencepiece");
	return SF_E_TOKENIZER;
}

int sf__sp_decode(const struct sf_sp *sp, const uint32_t *ids, size_t n, void *buf, size_t cap,
		  size_t *ret_len, char *msg, size_t msg_cap)
{
	(void)sp, (void)ids, (void)n, (void)buf, (void)cap, (void)ret_len;
	snprintf(msg, msg_cap, "built without libsentencepiece");
	return SF_E_TOKENIZER;
}
