#!/usr/bin/python3
"""bench_memory: host memory of a node's data path, shmfeed against torch DataLoaders, on
the same token file and geometry (B=12 T=1024 by default), 2 ranks each.

  shmfeed     `shmfeed run` (the launcher), its producers (random windows of the file)
              and 2 ranks reading with shmfeed.Loader;
  DataLoader  2 ranks, each with a torch DataLoader of 2 workers (pin_memory=True) over
              random windows of the same file, nanoGPT-style.

Both sides start their ranks from one Python process, as torchrun would. Each rank reads
--batches batches, then holds still; once both do, every process of the tree is sampled
(/proc/PID/smaps_rollup: RSS, PSS and PSS split into anonymous, file and shared memory)
and the totals summed. RSS counts a shared page in every process that maps it (the
arena, the page cache of the mapped token file, pages inherited over fork), so its sum
over processes overstates; PSS splits each shared page among its mappers and sums to the
real total.

usage: bench_memory.py --builddir DIR --tokens FILE [--batches N] [--batch B]
                       [--seq-len T] [--vocab-dir DIR] [--json OUT]
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

KEYS = ("rss", "pss", "pss_anon", "pss_file", "pss_shmem")


def measure(cmd, env, d, shmfeed_root, ranks, job=None, timeout=300):
    """Runs cmd, waits until its ranks hold, samples the tree, stops it."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    try:
        bl.wait_ready(p, d, ranks, timeout, ' '.join(cmd[:3]))
        time.sleep(1.0)  # DataLoader workers refill their prefetch queues
        procs = bl.sample_tree(p.pid, shmfeed_root)
        arena = bl.shm_job_bytes(job) if job else (0, 0)
    finally:
        rc = bl.stop_ranks(p, d)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit {rc}")
    totals = {k: sum(m.get(k, 0) for m in procs) for k in KEYS}
    return {"procs": [{k: m.get(k) for k in ("pid", "role", "comm", *KEYS)} for m in procs],
            "totals_kib": totals, "arena_bytes": arena[0], "arena_allocated": arena[1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--batches", type=int, default=2000)
    bl.add_job_args(ap)
    args = ap.parse_args()
    builddir = os.path.abspath(args.builddir)
    env = bl.env_for_ranks(builddir)
    ranks_py = os.path.join(bl.HERE, "bench_ranks.py")
    geo = ["--batch", str(args.batch), "--seq-len", str(args.seq_len)]
    out = {"batches": args.batches, "batch": args.batch, "seq_len": args.seq_len,
           "tokens_file": args.tokens}
    with tempfile.TemporaryDirectory(prefix="sf-bench-mem-") as tmp:
        job = f"bench-mem-{os.getpid()}"
        cfg = bl.write_config(os.path.join(tmp, "job.yaml"), job, args.tokens, "nanogpt",
                              "r50k_base", os.path.abspath(args.vocab_dir), args.batch, args.seq_len,
                              producers=2)
        d = os.path.join(tmp, "shmfeed")
        os.mkdir(d)
        out["shmfeed"] = measure(
            [os.path.join(builddir, "cli", "shmfeed"), "run", cfg, "--quiet", "--",
             bl.SYS_PYTHON, ranks_py, "--dir", d, "--mode", "shmfeed", "--hold",
             str(args.batches)], env, d, True, 2, job)
        d = os.path.join(tmp, "dataloader")
        os.mkdir(d)
        out["dataloader"] = measure(
            [bl.SYS_PYTHON, ranks_py, "--dir", d, "--mode", "dataloader", "--tokens",
             args.tokens, "--hold", str(args.batches), *geo], env, d, False, 2)
    for side in ("shmfeed", "dataloader"):
        t = out[side]["totals_kib"]
        print(f"{side:10s} {len(out[side]['procs'])} processes: RSS {t['rss'] / 1024:8.1f} MiB"
              f"  PSS {t['pss'] / 1024:8.1f} MiB (anon {t['pss_anon'] / 1024:.1f}, file "
              f"{t['pss_file'] / 1024:.1f}, shmem {t['pss_shmem'] / 1024:.1f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
