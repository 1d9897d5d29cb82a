#!/usr/bin/python3
"""run_all: every shmfeed benchmark beside the tools people use today, in one run, into
OUT/RESULTS.md (a table per benchmark, the machine, the command, the commit, caveats),
OUT/results.json, PNG plots and the raw latencies (OUT/raw/*.csv.gz). Started by
bench/run-all, which builds first.

  1 latency    bench_loader.py: time to the next batch, C and Python, against nanoGPT's
               get_batch, a vectorized NumPy gather and a torch DataLoader, B=12 T=1024
               and B=256 T=256, on one token file (100 M tokens; 5 M with --smoke)
  2 memory     bench_memory.py: RSS and PSS of every process, shmfeed against DataLoaders
  3 tokenizer  bench_tiktoken.py (the venv's Python, with tiktoken, bpe-openai and
               tokendagger from PyPI) and bench_tokenizer --serve: MB/s per core, each
               encoding and text class; the peers skipped, with the reason, when the venv
               lacks them
  4 e2e        bench_e2e.py: tokens/s from raw text to 2 ranks, 1 and 2 producers
  5 soak       bench_soak.py: --soak-minutes (30; 20 s with --smoke)
  6 memtest    bench_memtest: the seed's pool-versus-malloc table on the arena

A benchmark that fails is reported in RESULTS.md and makes the exit status 1; the others
still run. --only NAME[,NAME] runs a subset (for development).

usage: run_all.py --builddir DIR [--smoke] [--soak-minutes M] [--out DIR] [--data DIR]
                  [--cache DIR] [--only LIST] [--command TEXT]
"""

import argparse
import fcntl
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

ALL = ("latency", "memory", "tokenizer", "e2e", "soak", "memtest")
GEOMETRIES = ((12, 1024), (256, 256))


def sh(cmd, log, **kw):
    """Runs cmd, appends its output to the log, returns stdout; raises on failure."""
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}(exit {r.returncode}, "
                f"{time.monotonic() - t:.1f} s)\n\n")
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{os.path.basename(cmd[1] if cmd[0].endswith('python3') else cmd[0])}"
                           f" exited {r.returncode}:\n{tail}")
    return r.stdout


class Run:
    def __init__(self, args):
        self.a = args
        self.b = os.path.abspath(args.builddir)
        self.out = args.out
        self.log = os.path.join(self.out, "run.log")
        self.res = {}
        self.failed = {}
        self.skipped = {}
        self.secs = {}
        s = args.smoke
        self.ntokens = 5_000_000 if s else 100_000_000
        self.tokens = os.path.join(args.cache, f"tokens-{self.ntokens // 1_000_000}M.u16")
        self.text = os.path.join(args.cache, "tinyshakespeare-x16.txt")
        self.vocab = os.path.join(args.data, "vocab")
        # Intermediate files of this run only: a concurrent run into another OUT (or the
        # same one, refused by the lock in main) cannot take them away.
        self.tmp = tempfile.mkdtemp(prefix="sf-bench-run-")

    def py(self, script, *argv):
        return [bl.SYS_PYTHON, os.path.join(bl.HERE, script), *argv]

    # 1.
    def latency(self):
        s = self.a.smoke
        bl.ensure_tokens(self.tokens, self.ntokens)
        out = []
        for B, T in GEOMETRIES:
            stem = os.path.join(self.tmp, f"latency-B{B}-T{T}")
            sh(self.py("bench_loader.py", "--tokens", self.tokens, "--ntokens",
                       str(self.ntokens), "--batch", str(B), "--seq-len", str(T),
                       "--calls", "300" if s else "3000", "--c-steps", "2000" if s else "20000",
                       "--fixture", os.path.join(self.b, "tests/python/feed_fixture"),
                       "--bench-consumer", os.path.join(self.b, "bench/bench_consumer"),
                       "--lib", os.path.join(self.b, "libshmfeed.so"),
                       "--json", stem + ".json", "--csv", stem + ".csv"), self.log)
            with open(stem + ".json") as f:
                out.append(json.load(f))
        return out

    # 2.
    def memory(self):
        bl.ensure_tokens(self.tokens, self.ntokens)
        path = os.path.join(self.tmp, "memory.json")
        sh(self.py("bench_memory.py", "--builddir", self.b, "--tokens", self.tokens,
                   "--batches", "50" if self.a.smoke else "2000", "--vocab-dir", self.vocab,
                   "--json", path), self.log)
        with open(path) as f:
            return json.load(f)

    # 3.
    def tokenizer(self):
        pp = bl.peers_python()
        why = None
        if not pp:
            why = ("no Python with tiktoken, bpe-openai and tokendagger (scripts/deps puts them "
                   "in the venv at $SHMFEED_VENV or ~/.cache/shmfeed/venv-torch)")
        bench = os.path.join(self.b, "bench", "bench_tokenizer")
        rows = []
        if why is None:
            rows_json = os.path.join(self.tmp, "tokenizer.json")
            out = sh([pp, os.path.join(bl.HERE, "bench_tiktoken.py"), "--data", self.a.data,
                      "--bench", bench, "--repeat", "1" if self.a.smoke else "5",
                      "--passes", "3" if self.a.smoke else "10",
                      "--json", rows_json], self.log)
            with open(rows_json) as f:
                rows = json.load(f)["rows"]
            version = out.splitlines()[0]
            # shmfeed's ids must equal tiktoken's: a row that differs was not timed, and a
            # smoke run that passed over it would pass a broken tokenizer.
            wrong = [f"{r['encoding']} {r['file']}" for r in rows
                     if "shmfeed" in (r.get("differs") or {})]
            if wrong:
                raise RuntimeError("shmfeed's ids differ from tiktoken's on " +
                                   ", ".join(wrong))
        else:
            self.skipped["tokenizer"] = why
            print(f"  tokenizer comparison skipped: {why}")
            out = sh([bench, self.a.data], self.log)
            for line in out.splitlines():
                m = re.match(r"(\S+)\s+(\S+)\s+([\d.]+) MB/s", line)
                if m:
                    rows.append({"encoding": m[1], "file": m[2], "shmfeed_mb_s": float(m[3]),
                                 "tiktoken_mb_s": None})
            version = None
        if not rows:
            raise RuntimeError("no tokenizer rows in the output")
        return {"rows": rows, "tiktoken": version, "skipped": why}

    # 4.
    def e2e(self):
        bl.ensure_text(self.text, self.a.data, 16)
        path = os.path.join(self.tmp, "e2e.json")
        s = self.a.smoke
        sh(self.py("bench_e2e.py", "--builddir", self.b, "--text", self.text, "--seconds",
                   "4" if s else "30", "--warmup", "1" if s else "5", "--vocab-dir",
                   self.vocab, "--json", path), self.log)
        with open(path) as f:
            return json.load(f)

    # 5.
    def soak(self):
        bl.ensure_text(self.text, self.a.data, 16)
        path = os.path.join(self.tmp, "soak.json")
        s = self.a.smoke
        minutes = 20 / 60 if s else self.a.soak_minutes
        sh(self.py("bench_soak.py", "--builddir", self.b, "--text", self.text, "--minutes",
                   f"{minutes:.4f}", "--interval", "2" if s else "10", "--warmup",
                   "6" if s else "60", "--vocab-dir", self.vocab, "--json", path), self.log)
        with open(path) as f:
            return json.load(f)

    # 6.
    def memtest(self):
        argv = [os.path.join(self.b, "bench", "bench_memtest")]
        return {"table": sh(argv + (["--quick"] if self.a.smoke else []), self.log).strip()}

    def run(self, names):
        for name in names:
            print(f"== {name}", flush=True)
            t = time.monotonic()
            try:
                self.res[name] = getattr(self, name)()
            except Exception as e:  # a crashed benchmark fails the run, the rest go on
                self.failed[name] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            self.secs[name] = time.monotonic() - t
            print(f"   {name}: {'FAILED' if name in self.failed else 'ok'} in "
                  f"{self.secs[name]:.1f} s", flush=True)


# RESULTS.md.

def us(v):
    return f"{v:,.1f}" if v >= 10 else f"{v:.2f}"


def mib(kib):
    return f"{kib / 1024:,.1f}"


def md_latency(r):
    out = ["## 1. Batch-ready latency",
           "",
           "Time for one call that returns the next batch, in a loop with a simulated training "
           "step (a busy wait) between calls, so that producers and DataLoader workers can run "
           "ahead as in training. shmfeed C is `sf_consumer_next()` timed once the step is "
           "published (bench_consumer); the Loader rows are `shmfeed.Loader.next()` served by "
           "the test feed's producer from random windows of the token file; `get_batch` is "
           "nanoGPT's CPU branch (np.memmap + torch.stack); the NumPy gather is one "
           "`np.take` into a preallocated array; the DataLoader has 2 workers, "
           "persistent, pin_memory=True, over a Dataset of random windows.",
           ""]
    for g in r:
        rows = g["rows"]
        ref = next(x for x in rows if x["method"].startswith("shmfeed Loader (torch, int32"))
        out += [f"### B={g['batch']} T={g['seq_len']}", "", f"Setup: {g['setup']}.", ""]
        out.append(bl.fmt_table(
            ["method", "calls", "p50 us", "p95 us", "p99 us", "p99.9 us",
             "p50 / Loader torch int32"],
            [[x["method"], x["calls"], us(x["p50_us"]), us(x["p95_us"]), us(x["p99_us"]),
              us(x["p999_us"]), f"{x['p50_us'] / ref['p50_us']:.1f}x"] for x in rows],
            "lrrrrrr"))
        out += ["", f"The Loader's own wait for producers (its p99 over the Loader rows): "
                    f"{g['loader_wait_p99_us']:,.1f} us.", ""]
    out += ["![latency distributions](latency.png)", ""]
    return out


def md_memory(r):
    out = ["## 2. Host memory: 2 ranks and their data pipeline",
           "",
           f"Both sides read random windows of the same token file, B={r['batch']} "
           f"T={r['seq_len']}; each rank read {r['batches']} batches and then held still while "
           "every process was sampled from /proc/PID/smaps_rollup. Both sides' ranks import "
           "torch, and both start their ranks from one Python process as torchrun would. RSS "
           "counts a shared page in every process that maps it (the arena, the page cache of "
           "the mapped token file, pages a DataLoader worker inherited over fork and has not "
           "written), so the RSS sum overstates; PSS divides each shared page among its "
           "mappers and sums to what the processes hold together. Sizes in MiB.",
           ""]
    rows = []
    for key, label in (("shmfeed", "shmfeed"), ("dataloader", "DataLoader")):
        for p in r[key]["procs"]:
            rows.append([label, p["role"], p["pid"], mib(p["rss"]), mib(p["pss"]),
                         mib(p["pss_anon"]), mib(p["pss_file"]), mib(p["pss_shmem"])])
        t = r[key]["totals_kib"]
        rows.append([f"**{label} total**", f"{len(r[key]['procs'])} processes", "",
                     f"**{mib(t['rss'])}**", f"**{mib(t['pss'])}**", mib(t["pss_anon"]),
                     mib(t["pss_file"]), mib(t["pss_shmem"])])
    out.append(bl.fmt_table(["side", "process", "pid", "RSS", "PSS", "PSS anon", "PSS file",
                             "PSS shmem"], rows, "lllrrrrr"))
    a = r["shmfeed"]
    out += ["", f"shmfeed's arena (/dev/shm, counted in PSS shmem of its mappers): "
                f"{a['arena_bytes'] / 2**20:.2f} MiB.", "", "![memory](memory.png)", ""]
    return out


def md_tokenizer(r):
    out = ["## 3. Tokenizer throughput per core", "",
           "bench_tiktoken.py: shmfeed's BPE (bench_tokenizer --serve, C, a fresh encoder per "
           "pass so its piece cache starts empty) beside tiktoken's core "
           "`encode_to_tiktoken_buffer` (the ids of `encode_ordinary` in a buffer, as "
           "shmfeed's), bpe-openai's Rust `encode` and tokendagger's `encode_ordinary`, one "
           "string on one thread each, all pinned to one CPU and taking turns cell by cell "
           "over the rounds; every tokenizer makes the same number of passes of a cell each "
           "round (bench_tiktoken.py --passes), and a cell is the median pass by process CPU "
           "time. Every tokenizer's ids were compared "
           "with tiktoken's before timing (a tokenizer that differs is marked and not timed). "
           "Texts: the shared tinyshakespeare and unicode_mix, and about 1 MB each of English "
           "prose, source code and multilingual text built from the system's own files "
           "(bench/tok_corpora.py). bpe-openai has no r50k_base."
           + (f" {r['tiktoken']}." if r["tiktoken"] else ""), ""]
    if r["skipped"]:
        out += [f"**Comparison skipped:** {r['skipped']}.", ""]

    def mbs(x, who):
        if who in x.get("differs", {}):
            return "differs"
        v = x.get(who + "_mb_s")
        return f"{v:.1f}" if v else "-"

    def ratio(x, who):
        v = x.get(who + "_mb_s")
        return f"{x['shmfeed_mb_s'] / v:.1f}x" if v and x.get("shmfeed_mb_s") else "-"

    out.append(bl.fmt_table(
        ["encoding", "text", "shmfeed MB/s", "tiktoken", "bpe-openai", "tokendagger",
         "x tiktoken", "x bpe-openai", "x tokendagger"],
        [[x["encoding"], x["file"], mbs(x, "shmfeed"), mbs(x, "tiktoken"),
          mbs(x, "bpe_openai"), mbs(x, "tokendagger"), ratio(x, "tiktoken"),
          ratio(x, "bpe_openai"), ratio(x, "tokendagger")] for x in r["rows"]],
        "llrrrrrrr"))
    return out + ["", "![tokenizer](tokenizer.png)", ""]


def md_e2e(r):
    out = ["## 4. End-to-end: raw text to 2 CPU ranks", "",
           f"`shmfeed run` over tinyshakespeare x16 ({r['text_bytes'] / 1e6:.1f} MB, documents "
           f"split at blank lines, r50k_base), B={r['batch']} T={r['seq_len']}, windows of the "
           "token stream, endless epochs; 2 ranks read back to back with shmfeed.Loader "
           "(torch tensors). A token is one of the B x (T+1) of a batch; the rate is over a "
           "common window after a warm-up, from the ranks' own counts.", ""]
    out.append(bl.fmt_table(
        ["producers", "M tokens/s (2 ranks)", "per rank", "M tokens per producer CPU-s",
         "window s"],
        [[x["producers"], f"{x['tokens_per_s'] / 1e6:.2f}",
          " / ".join(f"{v / 1e6:.2f}" for v in x["per_rank"]),
          f"{x['tokens_per_producer_cpu_s'] / 1e6:.2f}" if x["tokens_per_producer_cpu_s"]
          else "-", f"{x['window_s']:.1f}"] for x in r["rows"]], "rrrrr"))
    return out + [""]


def md_soak(r):
    s = r["summary"]
    th = s["throughput"]
    st = s.get("status_end") or {}
    out = ["## 5. Soak", "",
           f"`shmfeed run` over the raw text of section 4 with {r['producers']} producers, 2 "
           f"ranks reading back to back, for {r['minutes']:g} minutes; every process sampled "
           f"every {r['interval_s']:g} s; changes below are from the end of a "
           f"{r['warmup_s']:g} s warm-up to the last sample ({s['measured_s']:.0f} s later). "
           "VmData is the process's heap and anonymous mappings: it grows when the process "
           "allocates and keeps what it allocated. The producers and the launcher expose no "
           "allocation counter, so VmData and RSS are the allocation measure for them; in the "
           "ranks, Python's allocated block count and glibc's bytes in use (mallinfo2) are "
           "recorded too.", ""]
    out.append(bl.fmt_table(
        ["process", "pid", "RSS start MiB", "RSS end MiB", "RSS max MiB", "VmData start MiB",
         "VmData end MiB", "minor faults"],
        [[p["role"], p["pid"], mib(p["rss_start_kib"]), mib(p["rss_end_kib"]),
          mib(p["rss_max_kib"]), mib(p["vmdata_start_kib"]), mib(p["vmdata_end_kib"]),
          p["minflt_delta"]] for p in s["procs"]], "lrrrrrrr"))
    out += [""]
    out.append(bl.fmt_table(
        ["rank", "Python blocks start", "end", "malloc bytes in use start", "end"],
        [[x["rank"], x["py_blocks_start"], x["py_blocks_end"], x["malloc_in_use_start"],
          x["malloc_in_use_end"]] for x in s["ranks"]], "rrrrr"))
    out += ["", f"Throughput after the warm-up, per {r['interval_s']:g} s interval: mean "
                f"{th['mean'] / 1e6:.2f} M tokens/s, min {th['min'] / 1e6:.2f}, max "
                f"{th['max'] / 1e6:.2f} ({th['intervals']} intervals). Supervisor at the end: "
                f"producer restarts {st.get('restarts', '?')}, repairs {st.get('repairs', '?')}, "
                f"records skipped {st.get('skipped', '?')}.", "", "![soak](soak.png)", ""]
    return out


def md_memtest(r):
    return ["## 6. The seed's memtest, on the arena", "",
            "bench_memtest's own output: slot reuse against malloc/free per batch, fixed and "
            "routed shapes, with and without pre-touching the arena's pages.", "",
            *r["table"].splitlines(), ""]


CAVEATS = [
    "One machine, one run: the numbers are this machine's; nothing here was averaged over "
    "runs. Producers and ranks share the machine's cores, so on a small machine the "
    "end-to-end and soak rates measure that sharing as much as shmfeed.",
    "No GPU here: every rank is a CPU rank. shmfeed's GPU path (DMA into device buffers) "
    "and the DataLoader's pin_memory were not measured; torch turns pin_memory off when it "
    "sees no GPU, so the DataLoader row ran without its pinning thread.",
    "Latency measures the call that hands over a batch, not training: with a real step, "
    "producers and DataLoader workers overlap it; the simulated step is a busy wait of "
    "300 us. The shmfeed Loader rows are served by the test feed's producer (random windows "
    "of the token file, as nanoGPT samples), not the full `shmfeed run` pipeline; its "
    "producer is pinned to the second CPU and the consumer to the first while in-process "
    "methods are timed, and the DataLoader gets all CPUs back. torch 1.13 has no uint16, so "
    "the u16 Loader row includes a widening copy to int32; get_batch and the DataLoader "
    "convert to int64 as nanoGPT does; the NumPy gather and the zero-copy Loader rows do no "
    "conversion. The rows are not equal in work: they are what each method costs as "
    "people use it.",
    "Memory: RSS double-counts shared pages (see section 2); compare PSS. The page cache of "
    "the token file appears in PSS file of the processes that map it and depends on how much "
    "of the file they have touched, which is why both sides read the same number of batches "
    "before sampling.",
    "Tokenizer: single-core numbers; shmfeed's is a C benchmark loop, the peers' a Python "
    "call of their Rust (tiktoken, bpe-openai) or C++ (tokendagger) core, so theirs include "
    "turning the str into UTF-8 and building the Python list of ids, as their users pay.",
    "End-to-end has no baseline in the same run: Debian's Python (with torch) has no "
    "tiktoken, and the PyPI Python (with tiktoken) has no torch, so a DataLoader that "
    "tokenizes raw text was not measured.",
    "Allocation after warm-up is not a count for the C processes (no counter is exposed and "
    "the soak uses no LD_PRELOAD): VmData and RSS are reported instead; exact zero-allocation "
    "checks live in the unit tests test_steady_state and test_tok_steady.",
]


def write_results(run, m, args, started, wall):
    res = run.res
    lines = ["# shmfeed benchmark results" + (" (smoke run: short, not for quoting)"
                                              if args.smoke else ""), "",
             f"Command: `{args.command}` (run from the repository root).", "",
             bl.fmt_table(["", ""], [
                 ["date", m["date"]], ["commit", f"{m['commit']} ({m['tree']})"],
                 ["CPU", m.get("cpu", "?")], ["cores", m["cores"]],
                 ["memory", f"{m.get('memory_gib', '?')} GiB"], ["kernel", m["kernel"]],
                 ["compiler", m["compiler"]], ["Python (ranks)", m["python"]],
                 ["torch", m["torch"]], ["NumPy", m["numpy"]], ["tiktoken", m["tiktoken"]],
                 ["THP for shmem", m["thp_shmem"]],
                 ["wall time", f"{wall / 60:.1f} min ({', '.join(f'{k} {v:.0f} s' for k, v in run.secs.items())})"],
             ]), ""]
    if run.failed:
        lines += ["**Failed benchmarks:**", ""]
        lines += [f"- {k}: `{v.splitlines()[0]}`" for k, v in run.failed.items()]
        lines += ["", "(details in run.log)", ""]
    for name, fn in (("latency", md_latency), ("memory", md_memory),
                     ("tokenizer", md_tokenizer), ("e2e", md_e2e), ("soak", md_soak),
                     ("memtest", md_memtest)):
        if name in res:
            lines += fn(res[name])
    lines += ["## Caveats", ""] + [f"- {c}" for c in CAVEATS] + [""]
    with open(os.path.join(run.out, "RESULTS.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(run.out, "results.json"), "w") as f:
        json.dump({"machine": m, "command": args.command, "started": started,
                   "wall_s": wall, "failed": run.failed, "skipped": run.skipped,
                   "results": {k: v for k, v in res.items() if k != "soak"},
                   "soak_summary": res["soak"]["summary"] if "soak" in res else None},
                  f, indent=1)


def draw(run):
    import plots
    res, out = run.res, run.out
    todo = []
    if "latency" in res:
        csvs = [os.path.join(run.tmp, f"latency-B{g['batch']}-T{g['seq_len']}.csv")
                for g in res["latency"]]
        todo.append(("latency", lambda: plots.latency(
            csvs, [f"B={g['batch']} T={g['seq_len']}" for g in res["latency"]],
            os.path.join(out, "latency.png"))))
    if "memory" in res:
        todo.append(("memory", lambda: plots.memory(res["memory"],
                                                    os.path.join(out, "memory.png"))))
    if "tokenizer" in res:
        todo.append(("tokenizer", lambda: plots.tokenizer(res["tokenizer"]["rows"],
                                                          os.path.join(out, "tokenizer.png"))))
    if "soak" in res:
        todo.append(("soak", lambda: plots.soak(res["soak"], os.path.join(out, "soak.png"))))
    for name, fn in todo:
        try:
            fn()
        except Exception as e:
            run.failed[f"{name} plot"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    # Keep the raw latencies (compressed) and the soak's samples.
    for name in os.listdir(run.tmp):
        p = os.path.join(run.tmp, name)
        if name.endswith(".csv"):
            with open(p, "rb") as f, gzip.open(os.path.join(out, "raw", name + ".gz"),
                                               "wb") as g:
                shutil.copyfileobj(f, g)
        elif name == "soak.json":
            shutil.copy(p, os.path.join(out, "raw", name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--soak-minutes", type=float, default=30)
    ap.add_argument("--out")
    ap.add_argument("--data", default=os.environ.get(
        "SF_TEST_DATA", os.path.join(bl.ROOT, "..", "shared", "data")))
    ap.add_argument("--cache", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "shmfeed-bench"))
    ap.add_argument("--only", default=",".join(ALL))
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    args.data = os.path.abspath(args.data)
    args.out = os.path.abspath(args.out or os.path.join(
        bl.HERE, "results", "smoke" if args.smoke else ""))
    names = [n for n in args.only.split(",") if n]
    bad = [n for n in names if n not in ALL]
    if bad:
        sys.exit(f"run_all: unknown benchmark {', '.join(bad)} (known: {', '.join(ALL)})")
    if not os.path.isdir(os.path.join(args.data, "vocab")):
        sys.exit(f"run_all: no shared data at {args.data} (set SF_TEST_DATA or --data)")
    os.makedirs(os.path.join(args.out, "raw"), exist_ok=True)
    lock = open(os.path.join(args.out, ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"run_all: another run is writing to {args.out}")
    for name in os.listdir(os.path.join(args.out, "raw")):
        os.unlink(os.path.join(args.out, "raw", name))
    open(os.path.join(args.out, "run.log"), "w").close()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    t0 = time.monotonic()
    m = bl.machine(args.builddir)
    print(f"shmfeed benchmarks{' (smoke)' if args.smoke else ''}: {m.get('cpu')}, "
          f"{m['cores']} cores, {m.get('memory_gib')} GiB, Linux {m['kernel']}; "
          f"commit {m['commit']}; results in {args.out}", flush=True)
    run = Run(args)
    run.run(names)
    draw(run)
    shutil.rmtree(run.tmp, ignore_errors=True)
    wall = time.monotonic() - t0
    write_results(run, m, args, started, wall)
    print(f"wrote {os.path.join(args.out, 'RESULTS.md')} in {wall:.0f} s"
          + (f"; FAILED: {', '.join(run.failed)}" if run.failed else ""), flush=True)
    for k, v in run.skipped.items():
        print(f"{k}: tiktoken comparison skipped: {v}")
    sys.exit(1 if run.failed else 0)


if __name__ == "__main__":
    main()
