#!/usr/bin/env python3
"""Time PyPI tiktoken on the files bench_tokenizer uses, run bench_tokenizer in the same
run, and print the ratio per encoding and file (both on one core: tiktoken's
encode_ordinary is single-threaded for one string). With --repeat N both are measured N
times, alternating, and the best and the range of each are printed: on a shared machine
one round says little.

The vocabularies are loaded by path from the shared data directory, so nothing is
downloaded. usage: bench_tiktoken.py [--data DIR] [--bench PATH/TO/bench_tokenizer] [--repeat N]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import tiktoken
import tiktoken.load

ENCODINGS = ["r50k_base", "cl100k_base", "o200k_base"]
FILES = [("corpus/tinyshakespeare.txt", "tinyshakespeare"),
         ("tokref/unicode_mix.txt", "unicode_mix")]


def load(data, name):
    with open(os.path.join(data, "vocab", name + ".json")) as f:
        meta = json.load(f)
    ranks = tiktoken.load.load_tiktoken_bpe(os.path.join(data, "vocab", name + ".tiktoken"))
    return tiktoken.Encoding(name, pat_str=meta["pat_str"], mergeable_ranks=ranks,
                             special_tokens=meta["special_tokens"],
                             explicit_n_vocab=meta.get("explicit_n_vocab"))


def time_tiktoken(enc, text):
    """Best pass of at least ten and one second, like bench_tokenizer."""
    best, total, passes = float("inf"), 0.0, 0
    while passes < 10 or total < 1.0:
        t = time.perf_counter()
        ids = enc.encode_ordinary(text)
        dt = time.perf_counter() - t
        best = min(best, dt)
        total += dt
        passes += 1
    return best, len(ids)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get(
        "SF_TEST_DATA", os.path.join(here, "..", "..", "shared", "data")))
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench",
                                                    "bench_tokenizer"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="also write the rows (best MB/s of each) to this file")
    args = ap.parse_args()

    encs = {name: load(args.data, name) for name in ENCODINGS}
    texts = {}
    for path, label in FILES:
        with open(os.path.join(args.data, path), encoding="utf-8") as f:
            texts[label] = f.read()
    ours, theirs = {}, {}
    for _ in range(args.repeat):
        out = subprocess.run([args.bench, args.data], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            m = re.match(r"(\S+)\s+(\S+)\s+([\d.]+) MB/s", line)
            if m:
                ours.setdefault((m.group(1), m.group(2)), []).append(float(m.group(3)))
        for name in ENCODINGS:
            for _, label in FILES:
                size = len(texts[label].encode("utf-8"))
                best, _ = time_tiktoken(encs[name], texts[label])
                theirs.setdefault((name, label), []).append(size / best / 1e6)

    print("tiktoken %s, Python %s, %d round(s); MB/s best (range)" % (
        tiktoken.__version__, sys.version.split()[0], args.repeat))
    print("%-12s %-16s %22s %22s %7s" % ("encoding", "file", "tiktoken", "shmfeed",
                                         "ratio"))
    rows = []
    for name in ENCODINGS:
        for _, label in FILES:
            t = theirs[(name, label)]
            o = ours.get((name, label), [float("nan")])
            print("%-12s %-16s %6.1f (%5.1f-%5.1f) %6.1f (%5.1f-%5.1f) %6.1fx" % (
                name, label, max(t), min(t), max(t), max(o), min(o), max(o),
                max(o) / max(t)))
            rows.append({"encoding": name, "file": label, "tiktoken_mb_s": max(t),
                         "shmfeed_mb_s": max(o), "tiktoken_range": [min(t), max(t)],
                         "shmfeed_range": [min(o), max(o)]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tiktoken": tiktoken.__version__, "repeat": args.repeat,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
