"""examples/train_gpt.py runs on CPU, alone and as two gloo ranks started as torchrun would,
reading every step from shmfeed, and a run checkpointed mid-way (with the prefetched
batch's state) resumes with the losses of a run that never stopped. (The feed's tokens
are uniform, so the loss stays near ln(vocab): the test checks that training runs, not
that it learns.)"""

import os
import re
import subprocess
import sys

from conftest import HERE, Feed, free_port, rank_env

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_gpt.py")


def losses(out):
    return [float(m) for m in re.findall(r"loss ([0-9.]+)", out)]


def test_example_trains_one_rank():
    with Feed("example", batch=4, seq_len=32, extra=["--vocab", "64"]) as feed:
        env = rank_env(feed.job, 0, 0, 1, 1)
        out = subprocess.run([sys.executable, EXAMPLE, "--steps", "8", "--vocab", "64"],
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        ls = losses(out.stdout)
        assert len(ls) == 8 and all(0 < v < 10 for v in ls)
        assert "rank 0: 8 batches trained on, 9 fetched" in out.stdout


# Runs the example as its own __main__ and, at exit (after the handlers of torch and
# shmfeed, before the interpreter's teardown), prints the threads of gloo and of the
# TCPStore still alive in the process.
THREADS_AT_EXIT = """
import atexit, os, runpy, sys
def report():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    print("torch threads at exit:", sorted(n for n in names if "gloo" in n or "tcpstore" in n),
          flush=True)
atexit.register(report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_example_two_gloo_ranks():
    """Two ranks train; and each has torn its process group down, threads included, when
    the interpreter's teardown starts. (torch 2.x: a group that outlives
    destroy_process_group keeps gloo's threads running into that teardown, where a rank
    aborted now and then: 'terminate called without an active exception'.)"""
    with Feed("example2", ranks=2, batch=4, seq_len=32, extra=["--vocab", "64"]) as feed:
        port = free_port()
        procs = [subprocess.Popen([sys.executable, "-c", THREADS_AT_EXIT, EXAMPLE, "--steps", "4",
                                   "--vocab", "64"],
                                  env=rank_env(feed.job, r, r, 2, 2, port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
        for r, (p, (out, err)) in enumerate(zip(procs, outs)):
            assert p.returncode == 0, f"rank {r}: {err}\n{out}"
            assert "torch threads at exit: []" in out, f"rank {r}: {out}"
        assert len(losses(outs[0][0])) == 4
        assert "rank 1: 4 batches trained on" in outs[1][0]


def test_example_resumes_with_the_losses_of_an_unbroken_run(tmp_path):
    """nanoGPT's order: the next batch is fetched before the checkpoint is written. The
    checkpoint holds that batch's state, so steps 4..7 after a resume at step 4 have the
    losses steps 4..7 have in one run of 8."""
    def run(feed, steps, ckpt=None):
        cmd = [sys.executable, EXAMPLE, "--steps", str(steps), "--vocab", "64"]
        if ckpt:
            cmd += ["--checkpoint", str(ckpt)]
        out = subprocess.run(cmd, env=rank_env(feed.job, 0, 0, 1, 1), capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return re.findall(r"step (\d+) loss ([0-9.]+)", out.stdout)

    with Feed("resume-a", batch=4, seq_len=32, extra=["--vocab", "64"]) as feed:
        unbroken = run(feed, 8)
    ckpt = tmp_path / "ckpt.pt"
    with Feed("resume-b", batch=4, seq_len=32, extra=["--vocab", "64"]) as feed:
        first = run(feed, 4, ckpt)
        resumed = run(feed, 4, ckpt)
    assert [s for s, _ in unbroken] == [str(i) for i in range(8)]
    assert first == unbroken[:4]
    assert resumed == unbroken[4:]


def test_two_ranks_resume_with_their_own_provenance(tmp_path):
    """The checkpoint held rank 0's loader state only, and every rank loaded it: the
    batches were right (the position is global), but rank 1's provenance chain became
    rank 0's, so a resumed run no longer compared equal to an unbroken one."""
    def run(feed, steps, ckpt=None):
        port = free_port()
        cmd = [sys.executable, EXAMPLE, "--steps", str(steps), "--vocab", "64"]
        if ckpt:
            cmd += ["--checkpoint", str(ckpt)]
        procs = [subprocess.Popen(cmd, env=rank_env(feed.job, r, r, 2, 2, port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
            assert "RuntimeWarning" not in err, err
        return [re.search(r"provenance ([0-9a-f]{16})", out).group(1) for out, _ in outs]

    with Feed("prov-a", ranks=2, batch=4, seq_len=32, extra=["--vocab", "64"]) as feed:
        unbroken = run(feed, 8)
    ckpt = tmp_path / "ckpt.pt"
    with Feed("prov-b", ranks=2, batch=4, seq_len=32, extra=["--vocab", "64"]) as feed:
        run(feed, 4, ckpt)
        resumed = run(feed, 4, ckpt)
    assert unbroken[0] != unbroken[1]
    assert resumed == unbroken, (resumed, unbroken)


def test_checkpoint_resumes_on_another_world_size(tmp_path):
    """The checkpoint held the DDP wrapper's weights ("module."-prefixed) under two ranks
    and the bare model's under one, and a resume loaded them into whichever the new run
    had: a change between one rank and two failed to load (a review). The bare model's
    weights are saved and loaded now, before the wrapping, so the global batch (8 rows)
    goes on at the step it stopped at with either world size."""
    def run(feed, world, steps, ckpt):
        port = free_port()
        cmd = [sys.executable, EXAMPLE, "--steps", str(steps), "--vocab", "64",
               "--checkpoint", str(ckpt)]
        procs = [subprocess.Popen(cmd, env=rank_env(feed.job, r, r, world, world, port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
        return [int(s) for s in re.findall(r"step (\d+) loss", outs[0][0])]

    for first, then in ((2, 1), (1, 2)):
        ckpt = tmp_path / f"ckpt{first}{then}.pt"
        with Feed(f"ws-a{first}", ranks=first, batch=8 // first, seq_len=32,
                  extra=["--vocab", "64"]) as feed:
            assert run(feed, first, 3, ckpt) == [0, 1, 2]
        with Feed(f"ws-b{then}", ranks=then, batch=8 // then, seq_len=32,
                  extra=["--vocab", "64"]) as feed:
            assert run(feed, then, 2, ckpt) == [3, 4]
