#!/usr/bin/python3
"""bench_e2e: tokens per second delivered to 2 CPU ranks from raw text, with 1 and 2
producers: `shmfeed run` over tinyshakespeare repeated (documents split at blank lines,
r50k_base, B=12 T=1024 by default, windows of the token stream), and 2 ranks reading
back to back with shmfeed.Loader (torch tensors). The rate is measured over a common
window of --seconds after --warmup seconds, from the ranks' progress lines; a token is
one of the B x (T+1) of a batch. Producer CPU time over the same window gives the rate
per producer CPU-second.

On a machine with fewer cores than producers + ranks, producers and ranks share cores,
and the rate is what that sharing allows, not what the producers could do alone.

usage: bench_e2e.py --builddir DIR --text FILE [--producers 1,2] [--seconds S]
                    [--warmup S] [--vocab-dir DIR] [--json OUT]
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

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            _, f = bl._stat(pid)
            total += int(f[11]) + int(f[12])
        except (OSError, ValueError, IndexError):
            pass
    return total / TICK


def run_one(args, builddir, env, P, tmp):
    job = f"bench-e2e-{os.getpid()}-{P}"
    cfg = bl.write_config(os.path.join(tmp, f"e2e{P}.yaml"), job, os.path.abspath(args.text),
                          "text", "r50k_base", os.path.abspath(args.vocab_dir), args.batch,
                          args.seq_len, producers=P, mode="windows", separator="\n\n")
    d = os.path.join(tmp, f"p{P}")
    os.mkdir(d)
    cmd = [os.path.join(builddir, "cli", "shmfeed"), "run", cfg, "--quiet", "--",
           bl.SYS_PYTHON, os.path.join(bl.HERE, "bench_ranks.py"), "--dir", d]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    try:
        bl.wait_ready(p, d, 2, 600, f"shmfeed run (P={P})")
        producers = [m["pid"] for m in bl.sample_tree(p.pid, True) if m["role"] == "producer"]
        bl.touch(os.path.join(d, "go"))
        time.sleep(args.warmup)
        t_a, c_a = time.monotonic(), cpu_seconds(producers)
        time.sleep(args.seconds)
        t_b, c_b = time.monotonic(), cpu_seconds(producers)
        time.sleep(2 * 0.25)  # a progress line after t_b from each rank
    finally:
        rc = bl.stop_ranks(p, d)
    if rc != 0:
        raise RuntimeError(f"shmfeed run (P={P}): exit {rc}")
    per_rank = []
    for r in range(2):
        prog = bl.read_progress(os.path.join(d, f"rank.{r}.jsonl"))
        per_rank.append((bl.tokens_at(prog, t_b) - bl.tokens_at(prog, t_a)) / (t_b - t_a))
    total = sum(per_rank)
    cpu = c_b - c_a
    return {"producers": P, "tokens_per_s": total, "per_rank": per_rank,
            "window_s": t_b - t_a, "producer_cpu_s": cpu,
            "tokens_per_producer_cpu_s": total * (t_b - t_a) / cpu if cpu > 0 else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--producers", default="1,2")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=5)
    bl.add_job_args(ap)
    args = ap.parse_args()
    builddir = os.path.abspath(args.builddir)
    env = bl.env_for_ranks(builddir)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sf-bench-e2e-") as tmp:
        for P in (int(x) for x in args.producers.split(",")):
            r = run_one(args, builddir, env, P, tmp)
            rows.append(r)
            per_cpu = r["tokens_per_producer_cpu_s"]
            print(f"P={P}: {r['tokens_per_s'] / 1e6:7.2f} M tokens/s to 2 ranks "
                  f"({', '.join(f'{x / 1e6:.2f}' for x in r['per_rank'])}), "
                  f"{per_cpu / 1e6 if per_cpu else float('nan'):.2f} M tokens per producer "
                  f"CPU-second, over {r['window_s']:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "seq_len": args.seq_len, "text": args.text,
                       "text_bytes": os.path.getsize(args.text), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
