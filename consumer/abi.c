/*
 * The layout of the public structs (sf_abi_entry() in shmfeed.h), for bindings that
 * mirror them. Each entry is computed by the compiler from the header this library was
 * built with; a field that a binding mirrors and this table lacks is a layout the
 * binding cannot trust, so every field of every public struct is listed.
 */
#include <stddef.h>

#include "shmfeed/shmfeed.h"

struct entry {
	const char *name;
	size_t offset, size;
};

#define S(s)                                                                                       \
	{                                                                                          \
#s, 0, sizeof(struct s)                                                            \
	}
#define F(s, f)                                                                                    \
	{                                                                                          \
#s "." #f, offsetof(struct s, f), sizeof(((struct s *)0)->f)                       \
	}

static const struct entry entries[] = {
	S(sf_batch),
	F(sf_batch, step),
	F(sf_batch, first_sample),
	F(sf_batch, batch),
	F(sf_batch, seq_tokens),
	F(sf_batch, dtype),
	F(sf_batch, doc_starts_per_seq),
	F(sf_batch, tokens),
	F(sf_batch, device_ptr),
	F(sf_batch, doc_starts),
	F(sf_batch, digest),
	F(sf_batch, wait_ns),
	F(sf_batch, buffer),
	F(sf_batch, output),
	F(sf_batch, provenance),
	F(sf_batch, epoch),
	F(sf_batch, sources),
	S(sf_rank_env),
	F(sf_rank_env, rank),
	F(sf_rank_env, local_rank),
	F(sf_rank_env, world_size),
	F(sf_rank_env, local_world_size),
	F(sf_rank_env, group_rank),
	S(sf_resume),
	F(sf_resume, samples),
	F(sf_resume, epoch),
	F(sf_resume, config_digest),
	F(sf_resume, provenance),
	S(sf_consumer_stats),
	F(sf_consumer_stats, batches),
	F(sf_consumer_stats, tokens),
	F(sf_consumer_stats, wait_ns_total),
	F(sf_consumer_stats, wait_ns_p50),
	F(sf_consumer_stats, wait_ns_p99),
	F(sf_consumer_stats, provenance),
	F(sf_consumer_stats, next_step),
	F(sf_consumer_stats, gpu),
	F(sf_consumer_stats, gpu_staged),
	F(sf_consumer_stats, staged_copies),
	S(sf_consumer_window),
	F(sf_consumer_window, batches),
	F(sf_consumer_window, tokens),
	F(sf_consumer_window, wait_ns_total),
	F(sf_consumer_window, wait_ns_p50),
	F(sf_consumer_window, wait_ns_p99),
	F(sf_consumer_window, stalls),
	S(sf_consumer_info),
	F(sf_consumer_info, local_rank),
	F(sf_consumer_info, global_rank),
	F(sf_consumer_info, world_size),
	F(sf_consumer_info, ranks),
	F(sf_consumer_info, rank_base),
	F(sf_consumer_info, slots_per_rank),
	F(sf_consumer_info, batch),
	F(sf_consumer_info, seq_tokens),
	F(sf_consumer_info, dtype),
	F(sf_consumer_info, doc_starts_per_seq),
	F(sf_consumer_info, device),
	F(sf_consumer_info, gpu_buffers),
	F(sf_consumer_info, payload_stride),
	F(sf_consumer_info, ring_base),
	F(sf_consumer_info, device_buffer),
	F(sf_consumer_info, doc_starts_buffer),
	F(sf_consumer_info, config_digest),
	F(sf_consumer_info, sources_offset),
};

const char *sf_abi_entry(uint32_t i, size_t *ret_offset, size_t *ret_size)
{
	if (i >= sizeof(entries) / sizeof(entries[0]))
		return NULL;
	*ret_offset = entries[i].offset;
	*ret_size = entries[i].size;
	return entries[i].name;
}
