#!/usr/bin/env python3
"""shmfeed's tokenizer beside the tiktoken-compatible encoders of PyPI, in one run, on one
core: tiktoken, bpe-openai (the Python package of GitHub's Rust `bpe` crate) and
tokendagger, each encoding (r50k_base, cl100k_base, o200k_base) on each text class: the
shared data's tinyshakespeare and unicode_mix, and English prose, source code and
multilingual text built from the system's own files (tok_corpora.py).

Before anything is timed, every tokenizer's ids for every text are compared with
tiktoken's; one that differs is reported (with the first differing position) and not
timed. shmfeed is timed through `bench_tokenizer --serve`, which encodes in C with a
fresh encoder each pass (its piece cache empty, as a producer meets new text), into a
uint32 buffer; the peers through their Python calls for one string, which run on one
thread: tiktoken's core encode_to_tiktoken_buffer (the ids of encode_ordinary in a
buffer: no Python list is built, as none is on shmfeed's side), bpe-openai's encode and
tokendagger's encode_ordinary, which return lists (they have no other output; building the
list costs tiktoken about a tenth of its time, a cost these two pay here). This process and
bench_tokenizer are pinned to the same CPU (--cpu), and the tokenizers take turns cell by
cell, round after round (--repeat), so that a load on the machine falls on all of them
alike. Every tokenizer makes exactly --passes passes of each cell per round, and a
cell's figure is the median of its passes over all rounds, by process CPU time: with the
same number of samples on every side, and a statistic that does not drift with their
number, a faster tokenizer is not favoured by making more passes in the same time (as a
best-of over "at least N passes and S seconds" favours it). The best pass and the wall
times are kept beside the medians in the JSON.

The vocabularies are read from the shared data directory (bpe-openai carries its own
copies of cl100k_base and o200k_base and has no r50k_base). Nothing is downloaded.
usage: bench_tiktoken.py [--data DIR] [--bench PATH/TO/bench_tokenizer] [--repeat N]
                         [--cpu N] [--json FILE] [--encodings ...] [--texts ...]
"""
import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import tiktoken
import tiktoken.load

import benchlib
import tok_corpora

ENCODINGS = ["r50k_base", "cl100k_base", "o200k_base"]
SHARED_TEXTS = [("tinyshakespeare", "corpus/tinyshakespeare.txt"),
                ("unicode_mix", "tokref/unicode_mix.txt")]
PEERS = ["tiktoken", "bpe_openai", "tokendagger"]


def load_tiktoken(data, name):
    with open(os.path.join(data, "vocab", name + ".json")) as f:
        meta = json.load(f)
    ranks = tiktoken.load.load_tiktoken_bpe(os.path.join(data, "vocab", name + ".tiktoken"))
    enc = tiktoken.Encoding(name, pat_str=meta["pat_str"], mergeable_ranks=ranks,
                            special_tokens=meta["special_tokens"],
                            explicit_n_vocab=meta.get("explicit_n_vocab"))
    return enc, meta, ranks


def load_peers(data, names):
    """{peer: {encoding: callable(str) -> ids}} and {peer: version or why it is absent}."""
    fns = {p: {} for p in PEERS}
    versions = {"tiktoken": tiktoken.__version__}
    for name in names:
        enc, meta, ranks = load_tiktoken(data, name)
        fns["tiktoken"][name] = functools.partial(enc._core_bpe.encode_to_tiktoken_buffer,
                                                  allowed_special=set())
        try:
            import tokendagger
            td = tokendagger.Tokenizer(name, pat_str=meta["pat_str"], mergeable_ranks=ranks,
                                       special_tokens=meta["special_tokens"])
            fns["tokendagger"][name] = td.encode_ordinary
            versions["tokendagger"] = tokendagger.__version__
        except ImportError as e:
            versions["tokendagger"] = f"not installed ({e})"
        try:
            import bpe_openai
            from bpe_openai import _bindings
            # The Rust tokenizer itself: the package's Encoding wrapper adds Python
            # checks and refuses strings of a million characters or more.
            if name in _bindings.supported_encodings():
                fns["bpe_openai"][name] = _bindings.tokenizer_for_encoding(name).encode
            versions["bpe_openai"] = bpe_openai.__version__
        except ImportError as e:
            versions["bpe_openai"] = f"not installed ({e})"
    return fns, versions


class Shmfeed:
    """bench_tokenizer --serve, pinned to `cpu`."""

    def __init__(self, bench, data, cpu):
        self.p = subprocess.Popen(["taskset", "-c", str(cpu), bench, "--serve", data],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, encoding, path, passes, ids_path=None):
        """Each pass's CPU seconds and each pass's wall seconds."""
        req = f"{encoding} {path} {passes}" + (f" {ids_path}" if ids_path else "")
        self.p.stdin.write(req + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline().split()
        if not reply or reply[0] != "ok":
            raise RuntimeError(f"bench_tokenizer: {' '.join(reply) or 'no reply'}")
        times = [float(x) for x in reply[3:]]
        return times[:passes], times[passes:]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def time_call(fn, text, passes):
    """Each of `passes` calls' CPU seconds and each one's wall seconds."""
    cpu, wall = [], []
    for _ in range(passes):
        c, t = time.process_time(), time.perf_counter()
        fn(text)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return cpu, wall


def as_list(ids):
    """A peer's ids as a list (tiktoken's buffer holds uint32s)."""
    return ids if isinstance(ids, list) else memoryview(ids).cast("B").cast("I").tolist()


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get(
        "SF_TEST_DATA", os.path.join(here, "..", "..", "shared", "data")))
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench",
                                                    "bench_tokenizer"))
    ap.add_argument("--corpora", default=tok_corpora.default_dir())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1)
    ap.add_argument("--encodings", nargs="*", default=ENCODINGS)
    ap.add_argument("--texts", nargs="*")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()

    os.sched_setaffinity(0, {args.cpu})
    texts = [(label, os.path.join(args.data, rel)) for label, rel in SHARED_TEXTS]
    texts += list(tok_corpora.build(args.corpora).items())
    if args.texts:
        texts = [t for t in texts if t[0] in args.texts]
    fns, versions = load_peers(args.data, args.encodings)
    ours = Shmfeed(args.bench, args.data, args.cpu)

    # Check every id before timing anything.
    cells = {}
    with tempfile.TemporaryDirectory(prefix="sf-bench-tok-") as tmp:
        for name in args.encodings:
            for label, path in texts:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                want = as_list(fns["tiktoken"][name](text))
                ids_path = os.path.join(tmp, "ids.u32")
                ours.ask(name, path, 1, ids_path)
                with open(ids_path, "rb") as f:
                    got = list(memoryview(f.read()).cast("I"))
                cell = {"text": text, "size": len(text.encode("utf-8")), "tokens": len(want),
                        "differs": {}, "cpu": {p: [] for p in ["shmfeed"] + PEERS},
                        "wall": {p: [] for p in ["shmfeed"] + PEERS}}
                for who, ids in [("shmfeed", got)] + [
                        (p, as_list(fns[p][name](text))) for p in PEERS[1:] if name in fns[p]]:
                    if ids != want:
                        cell["differs"][who] = first_difference(ids, want)
                        print(f"{who} {name} {label}: ids differ from tiktoken's at "
                              f"token {cell['differs'][who]} ({len(ids)} vs {len(want)} "
                              "tokens); not timed", file=sys.stderr)
                cells[(name, label)] = cell

    for _ in range(args.repeat):
        for name in args.encodings:
            for label, path in texts:
                cell = cells[(name, label)]
                timed = [("shmfeed", lambda: ours.ask(name, path, args.passes))]
                timed += [(p, lambda p=p: time_call(fns[p][name], cell["text"], args.passes))
                          for p in PEERS if name in fns[p]]
                for who, run in timed:
                    if who in cell["differs"]:
                        continue
                    c, w = run()
                    cell["cpu"][who] += c
                    cell["wall"][who] += w
    ours.close()

    print("tiktoken %s, bpe-openai %s, tokendagger %s, Python %s; %d round(s) of %d passes "
          "each, pinned to CPU %d; MB/s of the median pass by CPU time" % (
              versions["tiktoken"], versions.get("bpe_openai", "-"),
              versions.get("tokendagger", "-"), sys.version.split()[0], args.repeat,
              args.passes, args.cpu))
    print("%-12s %-16s %9s %9s %9s %9s %8s %8s %8s" % (
        "encoding", "text", "shmfeed", "tiktoken", "bpe-oai", "tokdagger", "x tikt",
        "x bpe", "x dagger"))
    rows = []
    for name in args.encodings:
        for label, _ in texts:
            cell = cells[(name, label)]
            mbs = {who: cell["size"] / statistics.median(s) / 1e6
                   for who, s in cell["cpu"].items() if s}
            best = {who: cell["size"] / min(s) / 1e6 for who, s in cell["cpu"].items() if s}
            wall = {who: cell["size"] / statistics.median(s) / 1e6
                    for who, s in cell["wall"].items() if s}

            def fmt(who):
                if who in cell["differs"]:
                    return "differs"
                return f"{mbs[who]:.1f}" if who in mbs else "-"

            def ratio(who):
                if "shmfeed" in mbs and who in mbs:
                    return f"{mbs['shmfeed'] / mbs[who]:.1f}x"
                return "-"

            print("%-12s %-16s %9s %9s %9s %9s %8s %8s %8s" % (
                name, label, fmt("shmfeed"), fmt("tiktoken"), fmt("bpe_openai"),
                fmt("tokendagger"), ratio("tiktoken"), ratio("bpe_openai"),
                ratio("tokendagger")))
            row = {"encoding": name, "file": label, "bytes": cell["size"],
                   "tokens": cell["tokens"], "differs": cell["differs"],
                   "passes": {who: len(s) for who, s in cell["cpu"].items() if s},
                   "best_mb_s": best, "wall_mb_s": wall}
            for who in ["shmfeed"] + PEERS:
                row[who + "_mb_s"] = mbs.get(who)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": versions, "repeat": args.repeat, "passes": args.passes,
                       "cpu": args.cpu, "machine": benchlib.cpu_model(),
                       "timing": "median pass by process CPU time, the same number of "
                                 "passes for every tokenizer", "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
