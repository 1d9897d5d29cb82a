"""Start N rank processes the way torchrun --standalone does, for tests and the README.

    python3 examples/ranks.py --nproc 2 [--node-rank K] -- python3 train.py ARGS...

Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
(a free loopback port unless MASTER_PORT is set). If a rank fails, the others are
terminated; the exit status is the first failing rank's (0 when all succeed). Debian's
torchrun does not start under Python 3.11, hence this small stand-in."""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--nnodes", type=int, default=1)
    ap.add_argument("--node-rank", type=int, default=0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command")
    world = a.nproc * a.nnodes
    port = os.environ.get("MASTER_PORT") or str(free_port())
    procs = []
    for local in range(a.nproc):
        env = dict(os.environ, RANK=str(a.node_rank * a.nproc + local), LOCAL_RANK=str(local),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(a.nproc),
                   MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"), MASTER_PORT=port)
        procs.append(subprocess.Popen(cmd, env=env))

    def forward(sig, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while any(p.poll() is None for p in procs):
        for p in procs:
            if p.poll() not in (None, 0) and status == 0:
                status = p.returncode if p.returncode > 0 else 128 - p.returncode
                forward(signal.SIGTERM, None)
        time.sleep(0.05)
    for p in procs:
        if p.returncode != 0 and status == 0:
            status = p.returncode if p.returncode > 0 else 128 - p.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
