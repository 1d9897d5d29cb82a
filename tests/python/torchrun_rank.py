"""A rank under torchrun (or examples/ranks.py): joins the gloo process group, reads
--steps batches with shmfeed.Loader and writes, per step, the SHA-256 of the batch's
token bytes to OUT/rank{RANK}.jsonl. With --ckpt DIR it checkpoints the loader's state
after every step it trained on and resumes from it when restarted; with --die-at S, rank
0 of the first attempt SIGKILLs itself after consuming step S, before checkpointing it.
With --no-dist it joins no process group (see test_torchrun.py: torch 2.x's gloo does
not reconnect after an elastic restart here). With --hold-at S --gate FILE it waits
before step S until FILE exists, so that a test can restart nodes while every rank still
runs; --starts FILE logs each rank's start (after attach and resume); --die-gate FILE
holds the death of --die-at until FILE exists (until every rank has started)."""

import argparse
import hashlib
import json
import os
import signal
import time

import numpy as np
import torch
import torch.distributed as dist

import shmfeed

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--ckpt")
ap.add_argument("--die-at", type=int, default=-1)
ap.add_argument("--no-dist", action="store_true")
ap.add_argument("--starts", help="append 'RANK PID ATTEMPT STEP' here once attached and resumed")
ap.add_argument("--hold-at", type=int, default=-1,
                help="before step S, wait until the --gate file exists")
ap.add_argument("--gate")
ap.add_argument("--die-gate", help="with --die-at: wait until this file exists to die")
a = ap.parse_args()

if not a.no_dist:
    dist.init_process_group("gloo")
rank = dist.get_rank() if not a.no_dist else int(os.environ["RANK"])
world_size = dist.get_world_size() if not a.no_dist else int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
ckpt = os.path.join(a.ckpt, f"rank{rank}.json") if a.ckpt else None
with shmfeed.Loader(numpy=True) as loader:
    assert loader.rank == rank and loader.world_size == world_size
    if ckpt and os.path.exists(ckpt):
        with open(ckpt) as f:
            loader.load_state_dict(json.load(f))
    if a.starts:
        with open(a.starts, "a") as f:
            f.write(f"{rank} {os.getpid()} {attempt} {loader.state_dict()['step']}\n")
    with open(os.path.join(a.out, f"rank{rank}.jsonl"), "a") as out:
        while True:
            st = loader.state_dict()
            if st["step"] >= a.steps:
                break
            if st["step"] == a.hold_at:
                while not os.path.exists(a.gate):
                    time.sleep(0.02)
            b = loader.next()
            tokens = np.ascontiguousarray(b.tokens)
            out.write(json.dumps({"step": b.step, "attempt": attempt, "pid": os.getpid(),
                                  "job": os.environ["SHMFEED_JOB"],
                                  "base": loader.rank - loader.local_rank,
                                  "sha": hashlib.sha256(tokens.tobytes()).hexdigest()}) + "\n")
            out.flush()
            if rank == 0 and attempt == 0 and b.step == a.die_at:
                while a.die_gate and not os.path.exists(a.die_gate):
                    time.sleep(0.02)
                os.kill(os.getpid(), signal.SIGKILL)
            if ckpt:
                tmp = ckpt + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(loader.state_dict(), f)
                os.replace(tmp, ckpt)
            if not a.no_dist:
                # A collective per step, as a training step's all-reduce would be.
                dist.all_reduce(torch.ones(1))
if not a.no_dist:
    dist.destroy_process_group()
