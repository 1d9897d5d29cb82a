// The SentencePiece shim (see sp_shim.h): libsentencepiece's processor behind a C API.
// Nothing is re-implemented here: loading, normalization, encoding and decoding are the
// library's. C++ exceptions never cross into C: the library reports through Status, but
// parts of it throw (darts-clone, the trie of a unigram model, on a piece it cannot hold),
// so every entry point catches std::bad_alloc as out of memory and any other exception as
// the library's refusal.
//
// In parts. For a model where it is exact (sf__sp_parts() says when), a second processor
// of the same model, loaded with its normalizer's add_dummy_prefix off, encodes the parts
// of a text that no piece can span one by one, so that the encoder can keep the ids of
// parts it has seen (encode.c, sp_split.c). Why that gives the ids of the whole text:
// docs/tokenizer.md, "SentencePiece in parts".
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/sp_shim.h"

struct sf_sp {
	sentencepiece::SentencePieceProcessor proc;
	// The parts processor, when sf__sp_parts() holds for the model; else null.
	std::unique_ptr<sentencepiece::SentencePieceProcessor> parts;
	bool dummy_prefix;
	bool byte_fallback;	  // unknown characters become their bytes' pieces, one by one
	const char *whole_reason; // why there is no parts processor, else null
};

namespace {

// A reader of the protobuf wire format, enough to read the few settings of the model
// (ModelProto in sentencepiece_model.proto) that decide whether a text may be encoded
// in parts. The library parses the file itself; this only reads what it parsed.
struct Wire {
	const unsigned char *p, *end;

	bool varint(uint64_t *v)
	{
		*v = 0;
		for (int shift = 0; shift < 64 && p < end; shift += 7) {
			const unsigned char c = *p++;

			*v |= (uint64_t)(c & 0x7f) << shift;
			if (c < 0x80)
				return true;
		}
		return false;
	}

	// The next field: its number, its wire type (0 varint, 2 length-delimited), and its
	// value (varint) or its bytes; the values of other wire types are skipped. False at
	// the end or on malformed input.
	bool next(uint32_t *field, uint32_t *type, uint64_t *value, Wire *bytes)
	{
		uint64_t tag, n;

		if (p >= end || !varint(&tag))
			return false;
		*field = (uint32_t)(tag >> 3);
		*type = (uint32_t)(tag & 7);
		switch (tag & 7) {
		case 0:
			return varint(value);
		case 1:
		case 5: {
			const size_t w = (tag & 7) == 1 ? 8 : 4;

			if ((size_t)(end - p) < w)
				return false;
			p += w;
			*value = 0;
			return true;
		}
		case 2:
			if (!varint(&n) || n > (uint64_t)(end - p))
				return false;
			*bytes = Wire{p, p + n};
			p += n;
			*value = n;
			return true;
		default:
			return false;
		}
	}
};

// The settings of a model that encoding in parts depends on, with the proto's
// defaults; a message that occurs twice is merged, the later value winning, as protobuf
// parsers do.
struct Settings {
	uint64_t model_type = 1; // TrainerSpec.model_type: UNIGRAM
	uint64_t whitespace_as_suffix = 0;
	uint64_t charsmap_len = 0;
	uint64_t add_dummy_prefix = 1;
	uint64_t remove_extra_whitespaces = 1;
	uint64_t escape_whitespaces = 1;
	uint64_t byte_fallback = 0;
	bool user_defined_bytes = false; // a user-defined piece is not valid UTF-8
	bool ok = true;
};

// Whether s[0..n) is UTF-8 as the library reads it: each character whole, no overlong
// forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		const unsigned c = s[i];
		size_t len;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

// A piece of ModelProto.pieces: whether it is user-defined (type 4) and not valid UTF-8
// (st.user_defined_bytes); a field of another wire type than its own makes the settings
// unreadable (a protobuf parser skips it as unknown).
void read_piece(Wire piece, Settings &st)
{
	uint32_t f, w;
	uint64_t v;
	Wire text{nullptr, nullptr}, bytes{nullptr, nullptr};
	uint64_t type = 1; // NORMAL

	while (piece.p < piece.end) {
		if (!piece.next(&f, &w, &v, &bytes) || (f == 1 && w != 2) || (f == 3 && w != 0)) {
			st.ok = false;
			return;
		}
		if (f == 1)
			text = bytes;
		else if (f == 3)
			type = v;
	}
	if (type == 4 && !valid_utf8(text.p, (size_t)(text.end - text.p)))
		st.user_defined_bytes = true;
}

// A field of TrainerSpec (in 2) or NormalizerSpec (in 3) that read_settings() takes, and
// the wire type it must have; 0 for the others.
uint64_t *setting(Settings &st, uint32_t in, uint32_t field, uint32_t *ret_type)
{
	*ret_type = 0;
	if (in == 2 && field == 3)
		return &st.model_type;
	if (in == 2 && field == 24)
		return &st.whitespace_as_suffix;
	if (in == 2 && field == 35)
		return &st.byte_fallback;
	if (in == 3 && field == 2) {
		*ret_type = 2;
		return &st.charsmap_len;
	}
	if (in == 3 && field == 3)
		return &st.add_dummy_prefix;
	if (in == 3 && field == 4)
		return &st.remove_extra_whitespaces;
	if (in == 3 && field == 5)
		return &st.escape_whitespaces;
	return nullptr;
}

Settings read_settings(const std::string &model)
{
	Settings st;
	Wire top{reinterpret_cast<const unsigned char *>(model.data()),
		 reinterpret_cast<const unsigned char *>(model.data()) + model.size()};
	uint32_t f, g, w, want;
	uint64_t v, x, *dst;
	Wire sub{nullptr, nullptr}, ignored{nullptr, nullptr};

	while (top.p < top.end && st.ok) {
		if (!top.next(&f, &w, &v, &sub) || (f >= 1 && f <= 3 && w != 2)) {
			st.ok = false;
			break;
		}
		if (f == 1)
			read_piece(sub, st);
		if (f != 2 && f != 3)
			continue;
		while (sub.p < sub.end) {
			if (!sub.next(&g, &w, &x, &ignored)) {
				st.ok = false;
				break;
			}
			dst = setting(st, f, g, &want);
			if (dst && w != want) {
				st.ok = false;
				break;
			}
			if (dst)
				*dst = x;
		}
	}
	return st;
}

// Why a text of the model behind `st` may not be encoded in parts (the conditions of
// docs/tokenizer.md, "SentencePiece in parts"), or null when it may: a BPE model whose
// normalizer maps each character on its own (no character map, no removal of extra
// spaces) and writes spaces as U+2581 before words.
const char *whole_reason(const Settings &st)
{
	if (!st.ok)
		return "its settings could not be read";
	if (st.model_type != 2)
		return "not a BPE model";
	if (st.charsmap_len)
		return "its normalizer has a character map (NFKC or other rules)";
	if (st.remove_extra_whitespaces)
		return "its normalizer removes extra spaces";
	if (!st.escape_whitespaces)
		return "its normalizer keeps spaces as they are";
	if (st.whitespace_as_suffix)
		return "it puts spaces after words";
	// The library matches user-defined pieces byte by byte in the text, so one that ends
	// inside a character can span a cut between characters.
	if (st.user_defined_bytes)
		return "a user-defined piece is not valid UTF-8";
	return nullptr;
}

// The parts processor for `sp`, or null with sp->whole_reason set.
std::unique_ptr<sentencepiece::SentencePieceProcessor> parts_processor(sf_sp *sp)
{
	const std::string model = sp->proc.serialized_model_proto();
	const Settings st = read_settings(model);

	sp->whole_reason = whole_reason(st);
	if (sp->whole_reason)
		return nullptr;
	// The library keeps the unknown, control and byte pieces apart from the others, and
	// looks a text up among them first: an ordinary piece whose text is also such a
	// piece's comes out with that piece's id (an <unk> "a" makes every "a" <unk>, merged
	// with the <unk>s beside it across any cut). Such a model is encoded whole.
	for (int id = 0; id < sp->proc.GetPieceSize(); id++)
		if (sp->proc.PieceToId(sp->proc.IdToPiece(id)) != id) {
			sp->whole_reason = "a piece's text is also another piece's";
			return nullptr;
		}
	// A second NormalizerSpec with only add_dummy_prefix = false (field 3, varint 0):
	// the parser merges it into the model's own.
	static const char kNoDummyPrefix[] = {0x1a, 0x02, 0x18, 0x00};
	auto parts = std::make_unique<sentencepiece::SentencePieceProcessor>();

	if (!parts->LoadFromSerializedProto(model + std::string(kNoDummyPrefix, 4)).ok()) {
		sp->whole_reason = "the library refused it without the dummy prefix";
		return nullptr;
	}
	sp->dummy_prefix = st.add_dummy_prefix != 0;
	sp->byte_fallback = st.byte_fallback != 0;
	return parts;
}

} // namespace

static int fail(char *msg, size_t msg_cap, int rc, const std::string &what)
{
	if (msg && msg_cap)
		std::snprintf(msg, msg_cap, "%s", what.c_str());
	return rc;
}

extern "C" int sf__sp_load(const char *path, struct sf_sp **ret_sp, char *msg, size_t msg_cap)
{
	try {
		auto sp = std::make_unique<sf_sp>();
		const auto status = sp->proc.Load(path);

		if (!status.ok())
			return fail(msg, msg_cap, SF_E_TOKENIZER, status.ToString());
		sp->parts = parts_processor(sp.get());
		*ret_sp = sp.release();
		return 0;
	} catch (const std::bad_alloc &) {
		return fail(msg, msg_cap, -ENOMEM, "out of memory");
	} catch (const std::exception &ex) {
		return fail(msg, msg_cap, SF_E_TOKENIZER,
			    std::string("the library cannot load it: ") + ex.what());
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

extern "C" const char *sf__sp_piece(const struct sf_sp *sp, uint32_t id, size_t *ret_len)
{
	*ret_len = 0;
	if (id >= (uint32_t)sp->proc.GetPieceSize())
		return nullptr;
	const std::string &piece = sp->proc.IdToPiece((int)id);

	*ret_len = piece.size();
	return piece.c_str();
}

extern "C" int sf__sp_parts(const struct sf_sp *sp, bool *ret_dummy_prefix,
			    const char **ret_why)
{
	*ret_why = sp->whole_reason;
	if (!sp->parts)
		return 0;
	*ret_dummy_prefix = sp->dummy_prefix;
	return 1;
}

extern "C" bool sf__sp_byte_fallback(const struct sf_sp *sp)
{
	return sp->byte_fallback;
}

extern "C" bool sf__sp_plain(const struct sf_sp *sp, uint32_t id)
{
	const int i = (int)id;

	return id < (uint32_t)sp->proc.GetPieceSize() && !sp->proc.IsUnknown(i) &&
	       !sp->proc.IsControl(i) && !sp->proc.IsUnused(i) && !sp->proc.IsByte(i);
}

extern "C" bool sf__sp_control(const struct sf_sp *sp, uint32_t id)
{
	return id < (uint32_t)sp->proc.GetPieceSize() && sp->proc.IsControl((int)id);
}

/* The most ids whose buffer sf__sp_encode() keeps for the next call. */
#define SP_IDS_KEPT 4096

extern "C" int sf__sp_encode(const struct sf_sp *sp, bool part, const void *text, size_t len,
			     uint32_t *out, size_t cap, size_t *ret_n, char *msg, size_t msg_cap)
{
	try {
		/*
		 * The library clears it. Kept per thread, its buffer is not allocated again
		 * for each of the many short parts of a text; the buffer of a long text
		 * (a model encoded whole) is not kept.
		 */
		static thread_local std::vector<int> ids;
		const auto &proc = part ? *sp->parts : sp->proc;
		const auto status = proc.Encode(
			absl::string_view(static_cast<const char *>(text), len), &ids);
		int rc = 0;

		if (!status.ok())
			return fail(msg, msg_cap, SF_E_TOKENIZER, status.ToString());
		*ret_n = ids.size();
		if (ids.size() > cap)
			rc = -ENOBUFS;
		else
			for (size_t i = 0; i < ids.size(); i++)
				out[i] = (uint32_t)ids[i];
		if (ids.capacity() > SP_IDS_KEPT)
			std::vector<int>().swap(ids);
		return rc;
	} catch (const std::bad_alloc &) {
		return fail(msg, msg_cap, -ENOMEM, "out of memory");
	} catch (const std::exception &ex) {
		return fail(msg, msg_cap, SF_E_TOKENIZER,
			    std::string("the library failed to encode: ") + ex.what());
	}
}

extern "C" int sf__sp_decode(const struct sf_sp *sp, const uint32_t *ids, size_t n, void *buf,
			     size_t cap, size_t *ret_len, char *msg, size_t msg_cap)
{
	try {
		const uint32_t size = (uint32_t)sp->proc.GetPieceSize();
		std::vector<int> in(n);
		std::string text;
		bool control = false;

		for (size_t i = 0; i < n; i++) {
			if (ids[i] >= size)
				return fail(msg, msg_cap, SF_E_TOKENIZER,
					    "unknown id " + std::to_string(ids[i]) + " at index " +
						    std::to_string(i));
			in[i] = (int)ids[i];
			control |= sp->proc.IsControl(in[i]);
		}
		const auto status = sp->proc.Decode(in, &text);

		if (!status.ok())
			return fail(msg, msg_cap, SF_E_TOKENIZER, status.ToString());
		/*
		 * The library writes nothing for a control piece; decode writes the bytes of
		 * every id, as for the other formats (`</s>` and `[INST]` vanished from
		 * decoded text; a review). Each piece's surface is its share of `text`.
		 */
		if (control) {
			const auto spt = sp->proc.DecodeIdsAsImmutableProto(in);
			std::string with;

			for (const auto &p : spt.pieces())
				with += sp->proc.IsControl((int)p.id()) ? p.piece() : p.surface();
			text.swap(with);
		}
		*ret_len = text.size();
		if (text.size() > cap)
			return -ENOBUFS;
		std::memcpy(buf, text.data(), text.size());
		return 0;
	} catch (const std::bad_alloc &) {
		return fail(msg, msg_cap, -ENOMEM, "out of memory");
	} catch (const std::exception &ex) {
		return fail(msg, msg_cap, SF_E_TOKENIZER,
			    std::string("the library failed to decode: ") + ex.what());
	}
}
