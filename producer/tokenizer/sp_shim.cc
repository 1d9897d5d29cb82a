// The SentencePiece shim (see sp_shim.h): libsentencepiece's processor behind a C API.
// Nothing is re-implemented here: loading, normalization, encoding and decoding are the
// library's. C++ exceptions never cross into C: the library reports through Status, and
// std::bad_alloc is caught at each entry point.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/sp_shim.h"

struct sf_sp {
	sentencepiece::SentencePieceProcessor proc;
};

static int fail(char *msg, size_t msg_cap, int rc, const std::string &what)
{
	if (msg && msg_cap)
		std::snprintf(msg, msg_cap, "%s", what.c_str());
	return rc;
}

extern "C" int sf__sp_load(const char *path, struct sf_sp **ret_sp, char *msg, size_t msg_cap)
{
	try {
		sf_sp *sp = new sf_sp;
		const auto status = sp->proc.Load(path);

		if (!status.ok()) {
			delete sp;
			return fail(msg, msg_cap, SF_E_TOKENIZER, status.ToString());
		}
		*ret_sp = sp;
		return 0;
	} catch (const std::bad_alloc &) {
		return fail(msg, msg_cap, -ENOMEM, "out of memory");
	}
}

extern "C" void sf__sp_free(struct sf_sp *sp)
{
	delete sp;
}

extern "C" uint32_t sf__sp_n_vocab(const struct sf_sp *sp)
{
	return (uint32_t)sp->proc.GetPieceSize();
}

extern "C" int32_t sf__sp_bos(const struct sf_sp *sp)
{
	return sp->proc.bos_id();
}

extern "C" int32_t sf__sp_eos(const struct sf_sp *sp)
{
	return sp->proc.eos_id();
}

extern "C" const char *sf__sp_piece(const struct sf_sp *sp, uint32_t id)
{
	if (id >= (uint32_t)sp->proc.GetPieceSize())
		return nullptr;
	return sp->proc.IdToPiece((int)id).c_str();
}

extern "C" int sf__sp_encode(const struct sf_sp *sp, const void *text, size_t len, uint32_t *out,
			     size_t cap, size_t *ret_n, char *msg, size_t msg_cap)
{
	try {
		std::vector<int> ids;
		const auto status = sp->proc.Encode(
			absl::string_view(static_cast<const char *>(text), len), &ids);

		if (!status.ok())
			return fail(msg, msg_cap, SF_E_TOKENIZER, status.ToString());
		*ret_n = ids.size();
		if (ids.size() > cap)
			return -ENOBUFS;
		for (size_t i = 0; i < ids.size(); i++)
			out[i] = (uint32_t)ids[i];
		return 0;
	} catch (const std::bad_alloc &) {
		return fail(msg, msg_cap, -ENOMEM, "out of memory");
	}
}

extern "C" int sf__sp_decode(const struct sf_sp *sp, const uint32_t *ids, size_t n, void *buf,
			     size_t cap, size_t *ret_len, char *msg, size_t msg_cap)
{
	try {
		const uint32_t size = (uint32_t)sp->proc.GetPieceSize();
		std::vector<int> in(n);
		std::string text;

		for (size_t i = 0; i < n; i++) {
			if (ids[i] >= size)
				return fail(msg, msg_cap, SF_E_TOKENIZER,
					    "unknown id " + std::to_string(ids[i]) + " at index " +
						    std::to_string(i));
			in[i] = (int)ids[i];
		}
		const auto status = sp->proc.Decode(in, &text);

		if (!status.ok())
			return fail(msg, msg_cap, SF_E_TOKENIZER, status.ToString());
		*ret_len = text.size();
		if (text.size() > cap)
			return -ENOBUFS;
		std::memcpy(buf, text.data(), text.size());
		return 0;
	} catch (const std::bad_alloc &) {
		return fail(msg, msg_cap, -ENOMEM, "out of memory");
	}
}
