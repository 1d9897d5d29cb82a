/*
 * The tokenizer of the producer: byte-level BPE that gives the same ids as tiktoken for
 * r50k_base (GPT-2), cl100k_base and o200k_base, a byte tokenizer and a character
 * tokenizer, and model files of other families (sf__tok_load_file(): Llama 3 and 4 and
 * Qwen .tiktoken files, Mistral tekken JSON, SentencePiece models). Two objects:
 *
 *  - struct sf_tok, a loaded vocabulary. It is read-only once sf__tok_load() returns, so
 *    one instance may be shared by any number of threads.
 *  - struct sf_tok_encoder, per-thread scratch (the id buffer, BPE work arrays, PCRE2
 *    match data). Its buffers only grow, so encoding allocates nothing once they have
 *    reached the size of the largest document seen.
 *
 * Text is bytes. Valid UTF-8 is split exactly as tiktoken splits it; a byte that starts no
 * valid UTF-8 sequence is taken as a character of its own that is neither letter, number
 * nor space, so any input encodes and decodes back to the same bytes.
 *
 * All functions returning int return >= 0 on success, -errno for a system failure, or
 * SF_E_TOKENIZER; detail goes to `e` when it is not NULL. Out-parameters are written only
 * on success.
 */
#ifndef SF_PRODUCER_TOKENIZER_TOKENIZER_H
#define SF_PRODUCER_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"

struct sf_tok;
struct sf_tok_encoder;

/* At most this many special tokens per vocabulary (Llama 4 has 2,048). */
#define SF_TOK_MAX_SPECIALS 4096

/*
 * Allowed sets for sf__tok_encode(): bit i allows special token i of the vocabulary for
 * i < 63; bit 63 allows every special token from the 64th on.
 */
#define SF_TOK_ALLOW_NONE ((uint64_t)0)
#define SF_TOK_ALLOW_ALL  UINT64_MAX

/* The environment variable naming the directory where NAME.tiktoken files are found. */
#define SF_TOK_VOCAB_DIR_ENV "SHMFEED_VOCAB_DIR"

/* A special token of a custom vocabulary: its text and its id. */
struct sf_tok_special {
	const char *text;
	uint32_t id;
};

/*
 * A custom BPE vocabulary for sf__tok_load_spec(). `pattern` is a tiktoken pre-tokenization
 * regex; when it equals one of the built-in patterns the hand-written scanner is used,
 * otherwise PCRE2 runs it (with \s and \S meaning White_Space as in Rust's regex crate).
 */
struct sf_tok_spec {
	const char *name;
	const char *vocab_path; /* a .tiktoken file: "base64 rank" lines */
	const char *pattern;
	const struct sf_tok_special *specials;
	uint32_t n_specials;
};

/*
 * sf__tok_load - load the tokenizer named `encoding`:
 *  - "r50k_base" (alias "gpt2"), "cl100k_base", "o200k_base": the tiktoken encoding, with
 *    its pattern and special tokens built in. Its vocabulary is read from `vocab_path`
 *    when that is not NULL, else from $SHMFEED_VOCAB_DIR/ENCODING.tiktoken.
 *  - "bytes": ids 0..255 are the bytes, 256 is <|endoftext|>.
 *  - "char:PATH": one id per distinct code point of the UTF-8 file PATH, in code point
 *    order (nanoGPT's shakespeare_char), and <|endoftext|> after them.
 * Stores the tokenizer in *ret_tok; free it with sf__tok_free().
 */
int sf__tok_load(const char *encoding, const char *vocab_path, struct sf_tok **ret_tok,
		 struct sf_err *e);

/* sf__tok_load_spec - load a custom BPE vocabulary (see struct sf_tok_spec). */
int sf__tok_load_spec(const struct sf_tok_spec *spec, struct sf_tok **ret_tok, struct sf_err *e);

/*
 * sf__tok_load_hf_json - load a Hugging Face tokenizer.json whose model is byte-level BPE
 * (docs/tokenizer.md says which constructs are supported). Its ids equal those of
 * `tokenizers`' encode(text, add_special_tokens=False), with special tokens matched only
 * when allowed. A construct that is not supported is refused with SF_E_TOKENIZER and a
 * message naming its JSON path. The tokenizer's name is the file's base name.
 */
int sf__tok_load_hf_json(const char *path, struct sf_tok **ret_tok, struct sf_err *e);

/* Formats of a tokenizer file, for sf__tok_load_file(). */
#define SF_TOK_FORMAT_AUTO	    0 /* detected from the content */
#define SF_TOK_FORMAT_TIKTOKEN	    1 /* "base64 rank" lines (Llama 3/4, Qwen) */
#define SF_TOK_FORMAT_TEKKEN	    2 /* Mistral tekken JSON */
#define SF_TOK_FORMAT_HF	    3 /* Hugging Face tokenizer.json */
#define SF_TOK_FORMAT_SENTENCEPIECE 4 /* SentencePiece model protobuf */

/* What sf__tok_load_file() reads. */
struct sf_tok_file_opts {
	const char *path;
	int format;	     /* SF_TOK_FORMAT_* */
	const char *pattern; /* NULL: the family's (recognized file) or the file's own */
};

/*
 * sf__tok_load_file - load a tokenizer file. The format is detected from its first bytes
 * unless given. A .tiktoken file of a known family (Llama 3, Llama 4, Qwen, Qwen 3.5/3.6,
 * recognized by vocabulary size and a hash of the token bytes) gets that family's
 * pattern, special tokens and document convention (sf__tok_bos(), sf__tok_eot()); another
 * .tiktoken file needs `pattern` and has no special tokens. A tekken file carries its
 * pattern; its ids follow its special tokens as in mistral-common. A SentencePiece model
 * needs the build with libsentencepiece and is refused with a message without it. A
 * Hugging Face tokenizer.json (family "hf-json") is sf__tok_load_hf_json()'s, and takes
 * no `pattern`.
 */
int sf__tok_load_file(const struct sf_tok_file_opts *opts, struct sf_tok **ret_tok,
		      struct sf_err *e);

/* sf__tok_format_parse - SF_TOK_FORMAT_* for "auto", "tiktoken", "tekken", "hf",
 * "sentencepiece", or -1. */
int sf__tok_format_parse(const char *name);

/* sf__tok_family - what a loaded file was recognized as ("llama3", "qwen", "tekken"...),
 * or "" for a built-in encoding or an unknown file. Never NULL. */
const char *sf__tok_family(const struct sf_tok *tok);

/*
 * sf__tok_how - how a SentencePiece model's texts are encoded: "in parts", or "whole:"
 * and why (docs/tokenizer.md, "SentencePiece in parts"), in buf (capacity cap); NULL for
 * other tokenizers.
 */
const char *sf__tok_how(const struct sf_tok *tok, char *buf, size_t cap);

/* sf__tok_free - free a tokenizer; accepts NULL. Free its encoders first. */
void sf__tok_free(struct sf_tok *tok);

/*
 * sf__tok_vocab_name - the tiktoken name of `encoding`, which its vocabulary file is named
 * after (NAME.tiktoken): "r50k_base" for its alias "gpt2", `encoding` itself otherwise.
 * Never NULL.
 */
const char *sf__tok_vocab_name(const char *encoding);

/* sf__tok_name - the encoding name given at load time. Never NULL. */
const char *sf__tok_name(const struct sf_tok *tok);

/* sf__tok_n_vocab - one more than the largest id the tokenizer can produce. */
uint32_t sf__tok_n_vocab(const struct sf_tok *tok);

/*
 * sf__tok_eot - the id that ends each document: <|endoftext|> for the built-in encodings,
 * the family's end token for a tokenizer file (Llama <|end_of_text|>, Mistral </s>), or
 * SF_E_TOKENIZER when there is none.
 */
int sf__tok_eot(const struct sf_tok *tok);

/*
 * sf__tok_text_may_give - whether ordinary text (specials not allowed) may encode to `id`:
 * a rank of the vocabulary, or a tokenizer.json token its merges build (a special token
 * listed in model.vocab too); never a special token of the other formats.
 */
bool sf__tok_text_may_give(const struct sf_tok *tok, uint32_t id);

/*
 * sf__tok_bos - the id the family's training convention puts before each document
 * (Llama <|begin_of_text|>, Mistral <s>), or SF_E_TOKENIZER when it puts none.
 */
int sf__tok_bos(const struct sf_tok *tok);

/*
 * sf__tok_first_char - for a vocabulary of characters (char, char:CORPUS), its first
 * character as UTF-8 in out (1 to 4 bytes), whose length is returned: the only text it
 * encodes may hold no 'a' nor space. 0 for every other tokenizer, which encodes any text.
 */
size_t sf__tok_first_char(const struct sf_tok *tok, char out[4]);

/* sf__tok_special_text - the text of special token `id`, or NULL when `id` is none. */
const char *sf__tok_special_text(const struct sf_tok *tok, uint32_t id);

/*
 * sf__tok_marker - resolve a job's bos or eos policy (`is_bos` says which): "auto" is
 * the family's convention (sf__tok_bos() or sf__tok_eot()), "none" no token, anything
 * else the text of a special token of the vocabulary. Stores the id, or -1 for none, in
 * *ret_id; SF_E_TOKENIZER for an unknown token or "none" for eos.
 */
int sf__tok_marker(const struct sf_tok *tok, const char *policy, int is_bos, int32_t *ret_id,
		   struct sf_err *e);

/*
 * sf__tok_ids_bound - the most ids `len` bytes can encode to, or SIZE_MAX when there is
 * no bound known before encoding (SentencePiece normalizes first): sf__tok_encode_to()
 * needs this much room. len + 1 for the BPE encodings; more for a tokenizer.json whose
 * normalizer (NFC) or pre-tokenizer (a prefix space) adds text.
 */
size_t sf__tok_ids_bound(const struct sf_tok *tok, size_t len);

/*
 * sf__tok_special - the id of the special token `text`, and its bit for an allowed set in
 * *ret_bit (when not NULL). Returns the id, or -ENOENT when there is no such token.
 */
int sf__tok_special(const struct sf_tok *tok, const char *text, uint64_t *ret_bit);

/* sf__tok_encoder_create - per-thread encoder for `tok`, which must outlive it. */
int sf__tok_encoder_create(const struct sf_tok *tok, struct sf_tok_encoder **ret_enc,
			   struct sf_err *e);

/* sf__tok_encoder_free - free an encoder; accepts NULL. */
void sf__tok_encoder_free(struct sf_tok_encoder *enc);

/*
 * sf__tok_progress - when not NULL, called by a BPE encode every SF_TOK_PROGRESS_BYTES of
 * input it has worked through, with the bytes since the previous call, and with 0 every
 * SF_TOK_PROGRESS_POPS + 1 merge steps of one long piece. A producer sets it to renew its
 * heartbeat, so that one long document (a whole file without a separator, a run of
 * millions of spaces) does not look like a stalled producer. Per process; NULL by default.
 */
#define SF_TOK_PROGRESS_BYTES (256u * 1024u)
#define SF_TOK_PROGRESS_POPS  0xffffu
extern void (*sf__tok_progress)(uint64_t bytes);

/*
 * sf__tok_encode - encode `len` bytes of `text` as one document. Special tokens in the
 * `allowed` set (SF_TOK_ALLOW_*, or bits from sf__tok_special()) become their ids; all
 * other text, special-looking or not, is encoded as ordinary text (tiktoken's
 * encode_ordinary when `allowed` is 0). Nothing is appended. The ids are stored in the
 * encoder: *ret_ids stays valid until the next call on `enc`.
 */
int sf__tok_encode(struct sf_tok_encoder *enc, const void *text, size_t len, uint64_t allowed,
		   const uint32_t **ret_ids, size_t *ret_n, struct sf_err *e);

/*
 * sf__tok_encode_to - sf__tok_encode() into the caller's `out`, which must hold
 * sf__tok_ids_bound() ids (len + 1 for the BPE encodings: every id covers a byte at
 * least): saves copying the ids out of the encoder. -ENOBUFS when `cap` is smaller than
 * len + 1, or than the ids turn out to need.
 */
int sf__tok_encode_to(struct sf_tok_encoder *enc, const void *text, size_t len, uint64_t allowed,
		      uint32_t *out, size_t cap, size_t *ret_n, struct sf_err *e);

/*
 * sf__tok_decode - the bytes of `n` ids. Writes them to `buf` (capacity `cap`) and their
 * length to *ret_len. Fails with SF_E_TOKENIZER on an id the vocabulary does not have and
 * with -ENOBUFS when `cap` is too small; sf__tok_decoded_len() says how much is needed.
 * The bytes need not be valid UTF-8 (a token may hold part of a character); see
 * sf__utf8_replace() to display them.
 */
int sf__tok_decode(const struct sf_tok *tok, const uint32_t *ids, size_t n, void *buf, size_t cap,
		   size_t *ret_len, struct sf_err *e);

/* sf__tok_decoded_len - the number of bytes sf__tok_decode() would write for `ids`. */
int sf__tok_decoded_len(const struct sf_tok *tok, const uint32_t *ids, size_t n, size_t *ret_len,
			struct sf_err *e);

/*
 * sf__utf8_replace - copy `len` bytes to `out`, replacing each maximal invalid UTF-8
 * subsequence by U+FFFD the way Python's bytes.decode("utf-8", errors="replace") does.
 * `out` must hold 3 * len bytes. Returns the number of bytes written.
 */
size_t sf__utf8_replace(const void *in, size_t len, char *out);

/* sf__tok_unicode_version - the Unicode version of the character tables. Never NULL. */
const char *sf__tok_unicode_version(void);

#endif
