/*
 * The cut tables of a SentencePiece model (sp_split.h). Below SF_SP_KIND_CODES a code's
 * two bits say whether some piece holds it (KIND_HELD) and whether it is a piece of its
 * own (KIND_SINGLE); pairs of ASCII are bits. The others are keys of one open-addressed
 * set: a single is SINGLE | code, a code some piece holds HELD | code, a pair PAIR | a <<
 * 21 | b (code points fit in 21 bits).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "producer/tokenizer/sp_shim.h"
#include "producer/tokenizer/sp_split.h"
#include "producer/tokenizer/unicode.h"

#define HELD   (UINT64_C(1) << 61)
#define SINGLE (UINT64_C(1) << 62)
#define PAIR   (UINT64_C(1) << 63)

/* The code of a character: U+2581 (SentencePiece's space) and ' ' are both 0x20. */
static uint32_t code_of(uint32_t cp)
{
	return cp == 0x2581 ? 0x20 : cp;
}

static uint64_t slot_of(uint64_t key, size_t mask)
{
	return (key * 0x9e3779b97f4a7c15ull >> 32) & mask;
}

static bool set_has(const struct sf_sp_split *t, uint64_t key)
{
	for (size_t i = slot_of(key, t->mask);; i = (i + 1) & t->mask) {
		if (t->set[i] == key)
			return true;
		if (!t->set[i])
			return false;
	}
}

static void set_add(struct sf_sp_split *t, uint64_t key)
{
	size_t i = slot_of(key, t->mask);

	while (t->set[i] && t->set[i] != key)
		i = (i + 1) & t->mask;
	t->set[i] = key;
}

/*
 * What a character is to the cut: a piece of its own, held by no piece, or neither (held
 * by some piece but no single; or a byte that starts no UTF-8 sequence). As the table's
 * two bits: a single is held too.
 */
enum cut_kind {
	CUT_FREE = 0,
	KIND_HELD = 1,
	CUT_NEVER = KIND_HELD,
	KIND_SINGLE = 2,
	CUT_SINGLE = KIND_HELD | KIND_SINGLE
};

static void add_kind(struct sf_sp_split *t, uint32_t c, unsigned bits)
{
	t->kind[c >> 2] |= (uint8_t)(bits << 2 * (c & 3));
}

static void add_single(struct sf_sp_split *t, uint32_t c)
{
	if (c < SF_SP_KIND_CODES)
		add_kind(t, c, KIND_SINGLE);
	else
		set_add(t, SINGLE | c);
}

static void add_pair(struct sf_sp_split *t, uint32_t a, uint32_t b)
{
	if (a < 128 && b < 128)
		t->ascii_pair[a][b >> 6] |= UINT64_C(1) << (b & 63);
	else
		set_add(t, PAIR | (uint64_t)a << 21 | b);
}

static void add_held(struct sf_sp_split *t, uint32_t c)
{
	if (c < SF_SP_KIND_CODES)
		add_kind(t, c, KIND_HELD);
	else
		set_add(t, HELD | c);
}

static bool has_pair(const struct sf_sp_split *t, uint32_t a, uint32_t b)
{
	return a < 128 && b < 128 ? t->ascii_pair[a][b >> 6] >> (b & 63) & 1
				  : set_has(t, PAIR | (uint64_t)a << 21 | b);
}

/* kind_of() above the table: rare, kept out of the split's loop. */
static __attribute__((noinline)) enum cut_kind kind_above(const struct sf_sp_split *t, uint32_t c)
{
	if (c == SF_UC_INVALID)
		return CUT_NEVER;
	if (set_has(t, SINGLE | c))
		return CUT_SINGLE;
	return set_has(t, HELD | c) ? CUT_NEVER : CUT_FREE;
}

static inline enum cut_kind kind_of(const struct sf_sp_split *t, uint32_t c)
{
	if (c < SF_SP_KIND_CODES)
		return (enum cut_kind)(t->kind[c >> 2] >> 2 * (c & 3) & 3);
	return kind_above(t, c);
}

/* The code of the character at s[0] (SF_UC_INVALID for a byte that starts none), and its
 * length in *ret_len. */
static uint32_t next_code(const uint8_t *s, size_t n, size_t *ret_len)
{
	uint32_t cp;

	if (s[0] < 0x80) {
		*ret_len = 1;
		return s[0];
	}
	*ret_len = sf__utf8_next(s, n, &cp);
	return cp == SF_UC_INVALID ? cp : code_of(cp);
}

/*
 * The keys of piece `id`: the codes it holds, its pairs and, when it is one ordinary
 * character, that single.
 * With `count`, nothing is added: the return value is how many of them would go to the
 * set (those not both ASCII), which sizes it.
 */
static size_t piece_keys(struct sf_sp_split *t, const struct sf_sp *sp, uint32_t id, bool count)
{
	size_t n, p, len, chars = 0, keys = 0;
	const uint8_t *piece = (const uint8_t *)sf__sp_piece(sp, id, &n);
	uint32_t prev = SF_UC_INVALID, c = SF_UC_INVALID;

	for (p = 0; p < n; p += len, prev = c, chars++) {
		c = next_code(piece + p, n - p, &len);
		/* Bytes that are not valid UTF-8 match nothing in a normalized text, whose
		 * invalid bytes are U+FFFD: no pair with them. (A user-defined piece, which
		 * the library matches byte by byte, is valid UTF-8 in a model encoded in
		 * parts: sf__sp_parts().) */
		if (c != SF_UC_INVALID) {
			if (count)
				keys += c >= SF_SP_KIND_CODES;
			else
				add_held(t, c);
		}
		if (prev == SF_UC_INVALID || c == SF_UC_INVALID)
			continue;
		if (count)
			keys += prev >= 128 || c >= 128;
		else
			add_pair(t, prev, c);
	}
	/*
	 * A literal ' ' matches nothing either, since the normalizer writes every space as
	 * U+2581; as part of a pair it only costs cuts, but as a single it would make ' '
	 * a character to cut beside even where U+2581 is no piece.
	 */
	if (chars == 1 && c != SF_UC_INVALID && piece[0] != ' ' && sf__sp_plain(sp, id)) {
		if (count)
			keys += c >= SF_SP_KIND_CODES;
		else
			add_single(t, c);
	}
	return keys;
}

int sf__sp_split_build(const struct sf_sp *sp, uint32_t n_vocab, struct sf_sp_split **ret,
		       struct sf_err *e)
{
	struct sf_sp_split *t = calloc(1, sizeof(*t));
	size_t keys = 0, cap = 64;
	uint32_t id;

	if (!t)
		return sf__err(e, -ENOMEM, "out of memory");
	for (id = 0; id < n_vocab; id++)
		keys += piece_keys(t, sp, id, true);
	while (cap < 2 * keys)
		cap *= 2;
	t->set = calloc(cap, sizeof(*t->set));
	if (!t->set) {
		free(t);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	t->mask = cap - 1;
	t->byte_fallback = sf__sp_byte_fallback(sp);
	for (id = 0; id < n_vocab; id++)
		piece_keys(t, sp, id, false);
	*ret = t;
	return 0;
}

void sf__sp_split_free(struct sf_sp_split *t)
{
	if (!t)
		return;
	free(t->set);
	free(t);
}

size_t sf__sp_split_cuts(const struct sf_sp_split *t, const uint8_t *s, size_t n, size_t *ends,
			 size_t max)
{
	size_t len, p, k = 0;
	uint32_t prev = next_code(s, n, &len), c;
	enum cut_kind kp = kind_of(t, prev), kc;

	for (p = len; p < n; p += len, prev = c, kp = kc) {
		c = next_code(s + p, n - p, &len);
		kc = kind_of(t, c);
		if (kp == CUT_NEVER || kc == CUT_NEVER)
			continue;
		/* Two singles: cut where no piece holds the pair. No pair holds a free
		 * character; two free ones are each its bytes' pieces, or together one <unk>. */
		if (kp == CUT_SINGLE && kc == CUT_SINGLE
			    ? !has_pair(t, prev, c)
			    : kp == CUT_SINGLE || kc == CUT_SINGLE || t->byte_fallback) {
			ends[k++] = p;
			if (k == max)
				return k;
		}
	}
	ends[k++] = n;
	return k;
}
