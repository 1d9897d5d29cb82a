#!/usr/bin/env python3
"""Tokenizer files of model families against each family's reference implementation, one
core each, vocabulary load excluded, side by side in one run: English prose, source code
and multilingual text built from what Debian carries (tests/unit/tokenizer/
family_corpora.py, 1 MiB each). shmfeed is timed by `shmfeed encode --tokenizer FILE
--bench TEXT` (the median pass of at least ten and one second of CPU time), the reference
by the same rule in this process (time.process_time(): the references encode one string
on the calling thread), so that time spent descheduled on a shared machine counts for
neither. The median does not favour the faster side for making more passes in its
second, as a best pass would. With --repeat N, the median of the N rounds' figures.
Run it with the Python of the virtual environment scripts/deps makes. The tiktoken-based
references (Llama, Qwen) are timed through tiktoken's core encode_to_tiktoken_buffer, the
ids of encode_ordinary in a buffer: no Python list is built, as none is on shmfeed's side
(building it costs tiktoken about a tenth of its time). mistral-common's Tekkenizer.encode
is its tiktoken model's encode(), which looks for special tokens a tekken model does not
have, and a Python list of each id plus the special count: it is timed as that model's
encode_ordinary alone, its fastest path (the buffer output is slower there: 14.5 against
23 MB/s on the prose), the ids less the special count, which the check adds: 2x the
speed of Tekkenizer.encode (a review found the tekken ratios measured against it).
sentencepiece returns lists, which it has no other way to give. Before a family's cells
are timed, shmfeed's ids of each text (of each document, with --docs) are checked equal
to the reference's.

With --docs BYTES each text is cut into documents of about BYTES (at the first newline
after BYTES), as a job's documents come: the reference encodes them one by one in a loop,
shmfeed in one `shmfeed encode --records` process (one encoder for all of them, fresh in
each process, as a producer's); its CPU time less that of a run with no records (the
vocabulary load, the median of five runs), the median of ten runs, and the reference's
loop the median of ten or more passes as above.

usage: bench_families.py [--shmfeed build/cli/shmfeed] [--repeat N] [--only FAMILY]
                         [--docs BYTES] [--json FILE]
"""
import argparse
import functools
import json
import os
import re
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "unit", "tokenizer"))
import family_corpora  # noqa: E402
import numpy as np  # noqa: E402
from test_families_ref import FAMILIES, tekken_encode  # noqa: E402

# One file per format is enough for speed; the others of a family share its code.
BENCH_FAMILIES = ["llama3", "llama4", "qwen", "qwen3.5", "tekken-240911", "sp-v3"]


def timed_form(encode):
    """What is timed of a reference, and the constant its ids are less than the family's:
    a tiktoken Encoding's encode_ordinary as its core's buffer output, a Tekkenizer's
    encode as its model's encode_ordinary (less its special count); others as they are."""
    owner = getattr(encode, "__self__", None)
    if type(owner).__module__.startswith("tiktoken") and encode.__name__ == "encode_ordinary":
        return functools.partial(owner._core_bpe.encode_to_tiktoken_buffer,
                                 allowed_special=set()), 0
    if isinstance(encode, functools.partial) and encode.func is tekken_encode:
        tok = encode.args[0]
        return tok._model.encode_ordinary, tok.num_special_tokens
    return encode, 0


def ids_of(ids, offset):
    """A reference's output (a list, or a buffer of uint32) as the family's ids."""
    ids = ids if isinstance(ids, list) else np.frombuffer(ids, np.uint32).tolist()
    return [i + offset for i in ids] if offset else ids


def check_ids(shmfeed, path, encode, offset, texts):
    """shmfeed's ids of each text equal the reference's (`encode` as timed), or exit."""
    records = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    out = subprocess.run([shmfeed, "encode", "--tokenizer", path, "--records"],
                         input=records, capture_output=True, check=True).stdout
    at = 0
    for i, t in enumerate(texts):
        (n,) = struct.unpack_from("<I", out, at)
        ours = np.frombuffer(out, np.uint32, n, at + 4).tolist()
        at += 4 + 4 * n
        if ours != ids_of(encode(t), offset):
            sys.exit(f"bench_families: {path}: text {i}: shmfeed's ids differ from the "
                     "reference's")


def time_reference(encode, text):
    """The median pass's CPU seconds, by `shmfeed encode --bench`'s rule."""
    times = []
    while len(times) < 10 or sum(times) < 1.0:
        t = time.process_time()
        encode(text)
        times.append(time.process_time() - t)
    return statistics.median(times)


def split_docs(text, size):
    """text cut into documents of about `size` bytes: each ends at the first newline
    after its size (or at the end)."""
    data, docs, p = text.encode(), [], 0
    while p < len(data):
        end = data.find(b"\n", p + size)
        end = len(data) if end < 0 else end + 1
        docs.append(data[p:end])
        p = end
    return docs


def child_cpu(cmd, stdin_path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(stdin_path, "rb") as f:
        subprocess.run(cmd, stdin=f, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_shmfeed_docs(shmfeed, path, records_path, empty_path, mb):
    cmd = [shmfeed, "encode", "--tokenizer", path, "--records"]
    load = statistics.median(child_cpu(cmd, empty_path) for _ in range(5))
    mid = statistics.median(child_cpu(cmd, records_path) for _ in range(10))
    return mb / (mid - load)


def time_reference_docs(encode, docs):
    texts = [d.decode() for d in docs]

    def encode_all(_):
        for t in texts:
            encode(t)
    return time_reference(encode_all, None)


def time_shmfeed(shmfeed, path, text_path):
    out = subprocess.run([shmfeed, "encode", "--tokenizer", path, "--bench", text_path],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([0-9.]+) MB/s", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shmfeed", default=os.path.join(HERE, "..", "build", "cli", "shmfeed"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only")
    ap.add_argument("--docs", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()

    corpora = {"prose": family_corpora.prose(), "code": family_corpora.code(),
               "multilingual": family_corpora.multilingual()}
    rows = []
    with tempfile.TemporaryDirectory(prefix="sf-bench-families-") as tmp:
        paths, docs = {}, {}
        empty = os.path.join(tmp, "empty.records")
        open(empty, "wb").close()
        for name, text in corpora.items():
            paths[name] = os.path.join(tmp, name + ".txt")
            with open(paths[name], "w", encoding="utf-8") as f:
                f.write(text)
            if args.docs:
                docs[name] = split_docs(text, args.docs)
                with open(paths[name] + ".records", "wb") as f:
                    for d in docs[name]:
                        f.write(struct.pack("<I", len(d)) + d)
        print("%-14s %-13s %10s %10s %7s" % ("family", "text", "reference", "shmfeed",
                                              "ratio"))
        for family in BENCH_FAMILIES:
            if args.only and family != args.only:
                continue
            path, ref = FAMILIES[family]()
            ref, offset = timed_form(ref)
            for name, text in corpora.items():
                check_ids(args.shmfeed, path, ref, offset,
                          [d.decode() for d in docs[name]] if args.docs else [text])
                mb = len(text.encode()) / 1e6
                refs, ours = [], []
                for _ in range(args.repeat):
                    if args.docs:
                        refs.append(mb / time_reference_docs(ref, docs[name]))
                        ours.append(time_shmfeed_docs(args.shmfeed, path,
                                                      paths[name] + ".records", empty, mb))
                    else:
                        refs.append(mb / time_reference(ref, text))
                        ours.append(time_shmfeed(args.shmfeed, path, paths[name]))
                ref_mbs, our_mbs = statistics.median(refs), statistics.median(ours)
                row = {"family": family, "text": name, "docs": args.docs,
                       "reference_mbs": ref_mbs, "shmfeed_mbs": our_mbs,
                       "ratio": our_mbs / ref_mbs, "rounds": {"reference": refs,
                                                              "shmfeed": ours}}
                rows.append(row)
                print("%-14s %-13s %10.1f %10.1f %6.1fx" % (family, name, row["reference_mbs"],
                                                             row["shmfeed_mbs"], row["ratio"]),
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
