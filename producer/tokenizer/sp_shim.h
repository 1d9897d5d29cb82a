/*
 * The SentencePiece shim: a small extern "C" face of libsentencepiece's C++ processor
 * (sp_shim.cc), so that the tokenizer stays C. Built only when meson finds the library;
 * otherwise sp_none.c answers every load with a message saying so.
 *
 * Functions returning int return 0 on success and -errno or SF_E_TOKENIZER on failure,
 * with detail in `msg` (capacity `msg_cap`) where they take one.
 */
#ifndef SF_PRODUCER_TOKENIZER_SP_SHIM_H
#define SF_PRODUCER_TOKENIZER_SP_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sf_sp;

/* sf__sp_load - load the model file `path`; free it with sf__sp_free(). */
int sf__sp_load(const char *path, struct sf_sp **ret_sp, char *msg, size_t msg_cap);

/* sf__sp_free - accepts NULL. */
void sf__sp_free(struct sf_sp *sp);

/* sf__sp_n_vocab - the number of pieces. */
uint32_t sf__sp_n_vocab(const struct sf_sp *sp);

/* sf__sp_bos, sf__sp_eos - the model's <s> and </s> ids, or -1 when it has none. */
int32_t sf__sp_bos(const struct sf_sp *sp);
int32_t sf__sp_eos(const struct sf_sp *sp);

/*
 * sf__sp_piece - the bytes of piece `id` (owned by the model, NUL-terminated, though a
 * piece may hold a NUL: its length goes to *ret_len), or NULL.
 */
const char *sf__sp_piece(const struct sf_sp *sp, uint32_t id, size_t *ret_len);

/*
 * sf__sp_parts - 1 when the model's ids of a text are those of its parts encoded one by
 * one, for parts cut between two characters that no piece can span (sp_split.c,
 * docs/tokenizer.md "SentencePiece in parts"), with *ret_dummy_prefix telling whether the
 * model writes a space before a text; else 0, with why in *ret_why (a static string).
 */
int sf__sp_parts(const struct sf_sp *sp, bool *ret_dummy_prefix, const char **ret_why);

/*
 * sf__sp_byte_fallback - whether a character the model does not know becomes the pieces
 * of its bytes (else one <unk> for a run of them); known only where sf__sp_parts() holds,
 * false elsewhere.
 */
bool sf__sp_byte_fallback(const struct sf_sp *sp);

/* sf__sp_plain - whether piece `id` is an ordinary piece (not unknown, control, unused
 * or byte). */
bool sf__sp_plain(const struct sf_sp *sp, uint32_t id);

/* sf__sp_control - whether piece `id` is a control piece (<s>, </s>, [INST], ...). */
bool sf__sp_control(const struct sf_sp *sp, uint32_t id);

/*
 * sf__sp_encode - the ids of `len` bytes of `text` (no BOS or EOS) into `out` of capacity
 * `cap`; their count goes to *ret_n even when it exceeds `cap` (then nothing usable is
 * written and -ENOBUFS is returned, so that the caller can grow `out` and call again).
 * With `part` (only where sf__sp_parts() holds), `text` is a part other than the first of
 * a text: no space is written before it.
 */
int sf__sp_encode(const struct sf_sp *sp, bool part, const void *text, size_t len, uint32_t *out,
		  size_t cap, size_t *ret_n, char *msg, size_t msg_cap);

/*
 * sf__sp_decode - the text of `n` ids into `buf` (capacity `cap`), its length in
 * *ret_len even when it exceeds `cap` (-ENOBUFS). An id outside the vocabulary is
 * SF_E_TOKENIZER.
 */
int sf__sp_decode(const struct sf_sp *sp, const uint32_t *ids, size_t n, void *buf, size_t cap,
		  size_t *ret_len, char *msg, size_t msg_cap);

#ifdef __cplusplus
}
#endif

#endif
