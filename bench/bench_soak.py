#!/usr/bin/python3
"""bench_soak: a long run of the whole pipeline, watched from outside. `shmfeed run` over
raw text (tinyshakespeare repeated, r50k_base, 2 producers, B=12 T=1024, endless epochs)
feeds 2 ranks that read back to back with shmfeed.Loader for --minutes. Every
--interval seconds the driver records, for every process of the job's tree, RSS, PSS,
VmData (heap and anonymous mappings: what allocation grows) and minor faults, and the
supervisor's counters (`shmfeed status --json`: producer restarts, repairs, skipped
records); the ranks record their throughput, Python's allocated block count and glibc's
bytes in use every second.

After --warmup seconds, the summary reports per process the change of RSS and VmData, in
the ranks the change of allocated blocks and malloc bytes, and the throughput per
interval. The producers and the launcher expose no allocation counter, so for them
VmData (and RSS) is the allocation measure here; the unit test test_steady_state counts
the slot protocol's allocations exactly, and test_tok_steady the tokenizer's.

usage: bench_soak.py --builddir DIR --text FILE [--minutes M] [--interval S]
                     [--warmup S] [--producers P] [--vocab-dir DIR] [--json OUT]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def status(shmfeed, job):
    try:
        out = subprocess.run([shmfeed, "status", job, "--json"], capture_output=True,
                             text=True, timeout=10).stdout
        s = json.loads(out)["stats"]
        return {k: s.get(k) for k in ("produced", "batches", "restarts", "repairs", "skipped",
                                      "state")}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return None


def summarize(samples, progress, t0, warmup, interval):
    after = [s for s in samples if s["t"] - t0 >= warmup]
    if len(after) < 2:
        raise RuntimeError("soak: fewer than two samples after the warm-up")
    first, last = after[0], after[-1]
    procs = []
    for m in first["procs"]:
        ends = [p for s in after for p in s["procs"] if p["pid"] == m["pid"]]
        e = ends[-1]
        procs.append({"pid": m["pid"], "role": m["role"], "rss_start_kib": m["rss"],
                      "rss_end_kib": e["rss"], "rss_max_kib": max(p["rss"] for p in ends),
                      "vmdata_start_kib": m["vmdata"], "vmdata_end_kib": e["vmdata"],
                      "minflt_delta": e["minflt"] - m["minflt"],
                      "alive_to_end": any(p["pid"] == m["pid"] for p in last["procs"])})
    ranks = []
    for r, prog in enumerate(progress):
        pa = [p for p in prog if p["t"] >= first["t"]]
        pe = [p for p in prog if p["t"] <= last["t"]]
        if pa and pe:
            ranks.append({"rank": r, "py_blocks_start": pa[0]["py_blocks"],
                          "py_blocks_end": pe[-1]["py_blocks"],
                          "malloc_in_use_start": pa[0]["malloc_in_use"],
                          "malloc_in_use_end": pe[-1]["malloc_in_use"]})
    rates = []
    for a, b in zip(samples, samples[1:]):
        tok = sum(bl.tokens_at(p, b["t"]) - bl.tokens_at(p, a["t"]) for p in progress)
        rates.append({"t": b["t"] - t0, "tokens_per_s": tok / (b["t"] - a["t"])})
    steady = [r["tokens_per_s"] for r in rates if r["t"] - interval >= warmup]
    mean = sum(steady) / len(steady) if steady else 0
    return {"procs": procs, "ranks": ranks, "rates": rates,
            "throughput": {"mean": mean, "min": min(steady, default=0),
                           "max": max(steady, default=0), "intervals": len(steady)},
            "measured_s": last["t"] - first["t"], "status_end": last.get("status")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--producers", type=int, default=2)
    bl.add_job_args(ap)
    args = ap.parse_args()
    builddir = os.path.abspath(args.builddir)
    shmfeed = os.path.join(builddir, "cli", "shmfeed")
    env = bl.env_for_ranks(builddir)
    job = f"bench-soak-{os.getpid()}"
    samples = []
    with tempfile.TemporaryDirectory(prefix="sf-bench-soak-") as d:
        cfg = bl.write_config(os.path.join(d, "soak.yaml"), job, os.path.abspath(args.text),
                              "text", "r50k_base", os.path.abspath(args.vocab_dir),
                              args.batch, args.seq_len, producers=args.producers,
                              mode="windows", separator="\n\n")
        cmd = [shmfeed, "run", cfg, "--quiet", "--", bl.SYS_PYTHON,
               os.path.join(bl.HERE, "bench_ranks.py"), "--dir", d, "--sample-s", "1"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
        try:
            bl.wait_ready(p, d, 2, 600, "soak")
            bl.touch(os.path.join(d, "go"))
            t0 = time.monotonic()
            end = t0 + args.minutes * 60
            nxt = t0
            while True:
                procs = bl.sample_tree(p.pid, True)
                samples.append({"t": time.monotonic(), "status": status(shmfeed, job),
                                "procs": [{k: m.get(k) for k in (
                                    "pid", "role", "rss", "pss", "vmdata", "minflt")}
                                    for m in procs]})
                if p.poll() is not None:
                    raise RuntimeError(f"soak: the job ended early (exit {p.returncode})")
                nxt += args.interval
                if nxt > end + 1e-6:
                    break
                time.sleep(max(0.0, nxt - time.monotonic()))
        finally:
            rc = bl.stop_ranks(p, d)
        if rc != 0:
            raise RuntimeError(f"soak: shmfeed run exit {rc}")
        progress = [bl.read_progress(os.path.join(d, f"rank.{r}.jsonl")) for r in range(2)]
    s = summarize(samples, progress, t0, args.warmup, args.interval)
    th = s["throughput"]
    print(f"soak {args.minutes:g} min, {len(samples)} samples every {args.interval:g} s, "
          f"warm-up {args.warmup:g} s: {th['mean'] / 1e6:.2f} M tokens/s mean "
          f"(min {th['min'] / 1e6:.2f}, max {th['max'] / 1e6:.2f})")
    for m in s["procs"]:
        print(f"  {m['role']:34s} pid {m['pid']:7d}  RSS {m['rss_start_kib'] / 1024:7.1f} -> "
              f"{m['rss_end_kib'] / 1024:7.1f} MiB  VmData {m['vmdata_start_kib'] / 1024:7.1f}"
              f" -> {m['vmdata_end_kib'] / 1024:7.1f} MiB")
    for r in s["ranks"]:
        print(f"  rank {r['rank']}: Python blocks {r['py_blocks_start']} -> "
              f"{r['py_blocks_end']}, malloc in use {r['malloc_in_use_start']} -> "
              f"{r['malloc_in_use_end']} bytes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"minutes": args.minutes, "interval_s": args.interval,
                       "warmup_s": args.warmup, "producers": args.producers,
                       "batch": args.batch, "seq_len": args.seq_len,
                       "t0": t0, "samples": samples, "summary": s}, f, indent=1)


if __name__ == "__main__":
    main()
