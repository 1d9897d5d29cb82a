"""shmfeed under the real torchrun of PyPI's torch 2.x (`python -m torch.distributed.run`,
what the `torchrun` command runs), with gloo on CPU:
- one node, `--standalone --nproc_per_node=2`: every batch (SHA-256 of its tokens) equals
  what the in-repo rank starter (examples/ranks.py) reads from the same job, and ranks
  read disjoint batches;
- two nodes on this machine (two `shmfeed run` launchers with rank_base 0 and 2, each
  under a torchrun of `--nnodes=2 --rdzv_backend=c10d`): four ranks equal to one node of
  four, batch by batch;
- an elastic restart (`--max-restarts 1`, rank 0 SIGKILLed mid-run): after the restore
  from each rank's checkpoint no batch is lost or repeated. Its ranks join no gloo group:
  torch 2.15's gloo fails to connect its full mesh after an elastic restart on this
  machine even without shmfeed (a ten-line script of init_process_group, all_reduce and
  a SIGKILL shows it), so the restart is tested on shmfeed's side alone.
The ranks run under a torch >= 2 interpreter: this one if its torch is, else the venv
that scripts/deps makes ($SHMFEED_VENV, by default ~/.cache/shmfeed/venv-torch)."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import HERE, unique_job

CLI = os.environ.get("SHMFEED_CLI")
ROOT = os.path.join(HERE, "..", "..")
RANK_SCRIPT = os.path.join(HERE, "torchrun_rank.py")
STEPS = 8


def torch2_python():
    try:
        import torch
        if int(torch.__version__.split(".")[0]) >= 2:
            return sys.executable
    except ImportError:
        pass
    venv = os.environ.get("SHMFEED_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shmfeed",
        "venv-torch")
    py = os.path.join(venv, "bin", "python")
    return py if os.path.exists(py) else None


PY = torch2_python()
pytestmark = [pytest.mark.skipif(not CLI, reason="SHMFEED_CLI is set by `meson test`"),
              pytest.mark.skipif(not PY, reason="no torch 2.x interpreter (run scripts/deps)")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_job(tmp_path, name, world_size, local_ranks=None, rank_base=0):
    data = tmp_path / "tokens.bin"
    if not data.exists():
        rng = np.random.default_rng(7)
        rng.integers(0, 50257, size=400_000, dtype=np.uint16).tofile(data)
    consumers = f"{{world_size: {world_size}, rank_base: {rank_base}"
    consumers += f", local_ranks: {local_ranks}}}" if local_ranks else "}"
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"""job: {name}
sources:
  - paths: ["{data}"]
    format: nanogpt
tokenizer: {{encoding: r50k_base, vocab_dir: {os.path.join(ROOT, '..', 'shared', 'data', 'vocab')}}}
batch: {{size: 4, seq_len: 64}}
sampling: {{mode: windows, seed: 11}}
producers: {{count: 2}}
consumers: {consumers}
""")
    return str(cfg)


def torchrun(*args):
    return [PY, "-m", "torch.distributed.run", *args]


def serve(cfg, command, timeout=240):
    """`shmfeed run CFG -- COMMAND`, started; returns the Popen. torchrun's own temporary
    directories go beside the job file, which pytest removes."""
    env = dict(os.environ, TMPDIR=os.path.dirname(cfg))
    return subprocess.Popen([CLI, "run", cfg, "--quiet", "--", *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(p, timeout=240):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"exit {p.returncode}\n{out[-3000:]}\n{err[-3000:]}"


def read_ranks(out, ranks):
    """{rank: [(step, attempt, sha), ...]} in the order written."""
    res = {}
    for r in ranks:
        with open(os.path.join(out, f"rank{r}.jsonl")) as f:
            res[r] = [(d["step"], d["attempt"], d["sha"]) for d in map(json.loads, f)]
    return res


def shas(records):
    return [sha for _, _, sha in records]


def reference(tmp_path, world_size):
    """Every rank's batches of one node of `world_size`, read through the in-repo rank
    starter."""
    name = unique_job("ref")
    out = tmp_path / f"out-{name}"
    out.mkdir()
    cfg = write_job(tmp_path, name, world_size)
    finish(serve(cfg, [sys.executable, os.path.join(ROOT, "examples", "ranks.py"), "--nproc",
                       str(world_size), "--", PY, RANK_SCRIPT, "--steps", str(STEPS),
                       "--out", str(out)]))
    return read_ranks(out, range(world_size))


def test_standalone_two_ranks_equal_the_rank_starter(tmp_path):
    ref = reference(tmp_path, 2)
    name = unique_job("trs")
    out = tmp_path / "out"
    out.mkdir()
    cfg = write_job(tmp_path, name, 2)
    finish(serve(cfg, torchrun("--standalone", "--nproc_per_node=2", RANK_SCRIPT, "--steps",
                               str(STEPS), "--out", str(out))))
    got = read_ranks(out, range(2))
    for r in range(2):
        assert [s for s, _, _ in got[r]] == list(range(STEPS))
        assert shas(got[r]) == shas(ref[r])
    assert not set(shas(got[0])) & set(shas(got[1]))
    assert not os.path.exists(f"/dev/shm/shmfeed.{name}")


def test_two_nodes_under_c10d_equal_one_node_of_four(tmp_path):
    ref = reference(tmp_path, 4)
    port = free_port()
    rdzv_id = unique_job("rdzv")
    out = tmp_path / "out"
    out.mkdir()
    nodes = []
    for k in range(2):
        name = unique_job(f"node{k}")
        cfg = write_job(tmp_path, name, 4, local_ranks=2, rank_base=2 * k)
        nodes.append(serve(cfg, torchrun(
            "--nnodes=2", f"--node_rank={k}", "--nproc_per_node=2", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id", rdzv_id, RANK_SCRIPT,
            "--steps", str(STEPS), "--out", str(out))))
        if k == 0:
            # c10d hands out group ranks in the order agents join: node 0 joins first
            # (a static rank_base needs that; see the multi-node issue for rank_base:
            # auto). Its agent hosts the rendezvous store on the port.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.1)
            time.sleep(1.0)
    for p in nodes:
        finish(p)
    got = read_ranks(out, range(4))
    for r in range(4):
        assert [s for s, _, _ in got[r]] == list(range(STEPS))
        assert shas(got[r]) == shas(ref[r]), f"rank {r}"
    everything = [sha for r in range(4) for sha in shas(got[r])]
    assert len(set(everything)) == len(everything)


def test_elastic_restart_loses_and_repeats_nothing(tmp_path):
    ref = reference(tmp_path, 2)
    name = unique_job("ela")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    ckpt.mkdir()
    cfg = write_job(tmp_path, name, 2)
    finish(serve(cfg, torchrun("--standalone", "--nproc_per_node=2", "--max-restarts", "1",
                               RANK_SCRIPT, "--steps", str(STEPS), "--out", str(out),
                               "--ckpt", str(ckpt), "--die-at", "3", "--no-dist")))
    got = read_ranks(out, range(2))
    assert any(a == 1 for _, a, _ in got[0]), "no restart happened"
    ref_shas = {r: shas(ref[r]) for r in range(2)}
    for r in range(2):
        first = [s for s, a, _ in got[r] if a == 0]
        second = [s for s, a, _ in got[r] if a == 1]
        # Each attempt reads consecutive steps, the first from step 0; the restart
        # resumes from the rank's checkpoint: right after the last step trained on, so
        # at most the one step read but not yet checkpointed is read again, none lost.
        for part in (first, second):
            assert part == list(range(part[0], part[0] + len(part))) if part else True
        # (A rank killed by torchrun before it read anything has no first part.)
        assert (first or second)[0] == 0
        assert (second or first)[-1] == STEPS - 1
        if first and second:
            assert first[-1] <= second[0] <= first[-1] + 1, (first, second)
        for s, _, sha in got[r]:
            assert sha == ref_shas[r][s], f"rank {r} step {s}"
    assert not os.path.exists(f"/dev/shm/shmfeed.{name}")
