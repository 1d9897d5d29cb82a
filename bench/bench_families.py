#!/usr/bin/env python3
"""Tokenizer files of model families against each family's reference implementation, one
core each, vocabulary load excluded, side by side in one run: English prose, source code
and multilingual text built from what Debian carries (tests/unit/tokenizer/
family_corpora.py, 1 MiB each). shmfeed is timed by `shmfeed encode --tokenizer FILE
--bench TEXT` (best pass of at least ten and one second of CPU time), the reference the
same way in this process (time.process_time(): the references encode one string on the
calling thread), so that time spent descheduled on a shared machine counts for neither.
Run it with the Python of the virtual environment scripts/deps makes.

usage: bench_families.py [--shmfeed build/cli/shmfeed] [--repeat N] [--only FAMILY]
                         [--json FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "unit", "tokenizer"))
import family_corpora  # noqa: E402
from test_families_ref import FAMILIES  # noqa: E402

# One file per format is enough for speed; the others of a family share its code.
BENCH_FAMILIES = ["llama3", "llama4", "qwen", "qwen3.5", "tekken-240911", "sp-v3"]


def time_reference(encode, text):
    best, total, passes = float("inf"), 0.0, 0
    while passes < 10 or total < 1.0:
        t = time.process_time()
        encode(text)
        dt = time.process_time() - t
        best = min(best, dt)
        total += dt
        passes += 1
    return best


def time_shmfeed(shmfeed, path, text_path):
    out = subprocess.run([shmfeed, "encode", "--tokenizer", path, "--bench", text_path],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([0-9.]+) MB/s", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shmfeed", default=os.path.join(HERE, "..", "build", "cli", "shmfeed"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only")
    ap.add_argument("--json")
    args = ap.parse_args()

    corpora = {"prose": family_corpora.prose(), "code": family_corpora.code(),
               "multilingual": family_corpora.multilingual()}
    rows = []
    with tempfile.TemporaryDirectory(prefix="sf-bench-families-") as tmp:
        paths = {}
        for name, text in corpora.items():
            paths[name] = os.path.join(tmp, name + ".txt")
            with open(paths[name], "w", encoding="utf-8") as f:
                f.write(text)
        print("%-14s %-13s %10s %10s %7s" % ("family", "text", "reference", "shmfeed",
                                              "ratio"))
        for family in BENCH_FAMILIES:
            if args.only and family != args.only:
                continue
            path, ref = FAMILIES[family]()
            for name, text in corpora.items():
                mb = len(text.encode()) / 1e6
                refs, ours = [], []
                for _ in range(args.repeat):
                    refs.append(mb / time_reference(ref, text))
                    ours.append(time_shmfeed(args.shmfeed, path, paths[name]))
                row = {"family": family, "text": name, "reference_mbs": max(refs),
                       "shmfeed_mbs": max(ours), "ratio": max(ours) / max(refs)}
                rows.append(row)
                print("%-14s %-13s %10.1f %10.1f %6.1fx" % (family, name, row["reference_mbs"],
                                                             row["shmfeed_mbs"], row["ratio"]),
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
