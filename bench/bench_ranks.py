#!/usr/bin/python3
"""bench_ranks: two (or --ranks) training-rank stand-ins for the benchmarks, started the
way torchrun starts ranks (RANK, LOCAL_RANK, WORLD_SIZE in the environment), that read
batches and tell the benchmark driver where they are through files in --dir:

  shmfeed mode     each rank reads its batches with shmfeed.Loader (torch tensors), from
                   the job this runs under (`shmfeed run CONFIG -- bench_ranks.py ...`);
  dataloader mode  each rank reads batches of random windows of --tokens from a torch
                   DataLoader with 2 workers and pin_memory=True, as nanoGPT-style
                   training scripts do.

  --hold N   read N batches, create DIR/ready.RANK, then hold everything (loader, workers,
             arena views) alive without reading until DIR/stop exists: a steady state
             whose memory the driver samples;
  otherwise  read one batch, create DIR/ready.RANK, wait for DIR/go, then read batches
             back to back (with --step-us of busy work between them) until DIR/stop,
             appending a progress line to DIR/rank.RANK.jsonl every --sample-s seconds:
             monotonic time, batches, tokens (B x (T+1) per batch), Python's allocated
             block count (sys.getallocatedblocks) and glibc's bytes in use (mallinfo2).

usage: bench_ranks.py --dir DIR [--mode shmfeed|dataloader] [--ranks R] [--hold N]
                      [--tokens FILE] [--batch B] [--seq-len T] [--sample-s S]
                      [--step-us US]
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--mode", choices=("shmfeed", "dataloader"), default="shmfeed")
ap.add_argument("--ranks", type=int, default=2)
ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
ap.add_argument("--hold", type=int, default=0)
ap.add_argument("--tokens")
ap.add_argument("--batch", type=int, default=12)
ap.add_argument("--seq-len", type=int, default=1024)
ap.add_argument("--sample-s", type=float, default=0.25)
ap.add_argument("--step-us", type=float, default=0.0)
args = ap.parse_args()


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def malloc_in_use():
    """Bytes glibc's malloc has handed out and not had back (heap chunks + mmapped)."""
    try:
        f = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return -1
    f.restype = MallInfo2
    m = f()
    return m.uordblks + m.hblkhd


def start_ranks():
    """The parent: starts the ranks as torchrun would and returns the worst exit code."""
    ps = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks),
                   LOCAL_WORLD_SIZE=str(args.ranks))
        ps.append(subprocess.Popen([sys.executable, *sys.argv, "--rank", str(r)], env=env))
    return max(p.wait() for p in ps)


def dataloader_batches():
    import numpy as np
    import torch
    B, T, path = args.batch, args.seq_len, args.tokens

    class Windows(torch.utils.data.Dataset):
        def __init__(self):
            self.data = None

        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            if self.data is None:  # opened in each worker
                self.data = np.memmap(path, dtype=np.uint16, mode="r")
            s = np.random.randint(0, len(self.data) - T - 1)
            return torch.from_numpy(self.data[s:s + T + 1].astype(np.int64))

    dl = torch.utils.data.DataLoader(Windows(), batch_size=B, num_workers=2,
                                     persistent_workers=True, pin_memory=True)
    it = iter(dl)
    return lambda: next(it), B * (T + 1), it


def shmfeed_batches():
    import shmfeed
    L = shmfeed.Loader()
    return L.next, L.batch_size * (L.seq_len + 1), L


def busy(us):
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


def rank_main():
    d = args.dir
    nxt, per_batch, keep = (shmfeed_batches if args.mode == "shmfeed" else
                            dataloader_batches)()
    ready = os.path.join(d, f"ready.{args.rank}")
    stop = os.path.join(d, "stop")
    if args.hold:
        for _ in range(args.hold):
            nxt()
        open(ready, "w").close()
        while not os.path.exists(stop):
            time.sleep(0.1)
        return 0
    nxt()
    open(ready, "w").close()
    while not os.path.exists(os.path.join(d, "go")):
        if os.path.exists(stop):
            return 0
        time.sleep(0.01)
    n = 0
    log = open(os.path.join(d, f"rank.{args.rank}.jsonl"), "w")

    def sample():
        log.write(json.dumps({"t": time.monotonic(), "batches": n, "tokens": n * per_batch,
                              "py_blocks": sys.getallocatedblocks(),
                              "malloc_in_use": malloc_in_use()}) + "\n")
        log.flush()

    sample()
    next_t = time.monotonic() + args.sample_s
    while True:
        nxt()
        n += 1
        if args.step_us:
            busy(args.step_us)
        now = time.monotonic()
        if now >= next_t:
            sample()
            next_t = now + args.sample_s
            if os.path.exists(stop):
                break
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(start_ranks() if args.rank is None else rank_main())
