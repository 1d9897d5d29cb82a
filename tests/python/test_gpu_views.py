"""The Loader's GPU path without a GPU: tests/gpu/fake_cuda.c as libcuda.so.1 (device
memory is host memory) and a stand-in torch (tests/python/fake_torch) whose CUDA tensors
are NumPy arrays over it, in a child process. README's loop that fetches one batch ahead
and then trains on the batch before must see that batch's tokens, document starts and
rows, whatever the number of device buffers: with SHMFEED_GPU_BUFFERS=1 the int64 tokens
were widened into one tensor per device buffer, so the batch before showed the next
step's tokens; doc_starts were views of the device buffer on any count."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import WAIT_BEHIND, Feed, reference_doc_starts

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_CUDA = os.environ.get("SHMFEED_FAKE_CUDA")

if not FAKE_CUDA:
    pytest.skip("SHMFEED_FAKE_CUDA (the fake driver's directory) is set by `meson test`",
                allow_module_level=True)

FAKE_TORCH = os.path.join(HERE, "fake_torch")


def fake_gpu_env(**extra):
    """The environment of a rank on the fake driver, whose streams run at once, and the
    fake torch."""
    return dict(os.environ, LD_LIBRARY_PATH=FAKE_CUDA, FAKE_CUDA_POLICY="eager",
                PYTHONPATH=os.pathsep.join([FAKE_TORCH, os.environ["PYTHONPATH"]]), **extra)


def rank_output(code, env, *args):
    """The stdout of `code` run by this Python with `args` in `env` (a rank of a job),
    which must exit 0."""
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


RANK = """
import ctypes, json, sys
ctypes.CDLL("libcuda.so.1").fake_cuda_set_eager(None, 1)  # the NULL stream runs at once
import torch, shmfeed
assert torch.__file__.startswith(sys.argv[1]), torch.__file__
L = shmfeed.Loader(job=sys.argv[2], device="cuda:0", dtype=sys.argv[3])
out, batch = [], next(L)
for _ in range(9):
    upcoming = next(L)  # fetched ahead: `batch` is used only now
    out.append({"step": batch.step, "tokens": batch.tokens.host().tolist(),
                "x": batch.x.host().tolist(), "y": batch.y.host().tolist(),
                "dtype": str(batch.tokens.dtype),
                "docs": batch.doc_starts.host().tolist()})
    batch = upcoming
L.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("buffers", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("wide", [False, True], ids=["u16", "i32"])
def test_a_batch_fetched_ahead_stays_whole_on_a_gpu(buffers, dtype, wide):
    extra = ["--doc-starts", "5"] + (["--dtype", "i32", "--vocab", "100277"] if wide else [])
    kw = {"vocab": 100277, "dtype": np.int32} if wide else {}
    env = fake_gpu_env(SHMFEED_GPU_BUFFERS=buffers)
    with Feed("gpuviews", extra=extra) as feed:
        got = json.loads(rank_output(RANK, env, FAKE_TORCH, feed.job, dtype))
        assert [b["step"] for b in got] == list(range(9))
        for b in got:
            want = feed.expected(0, b["step"], **kw).astype(np.int64)
            assert b["dtype"] == dtype
            assert np.array_equal(np.array(b["tokens"]), want), f"step {b['step']}"
            assert np.array_equal(np.array(b["x"]), want[:, :-1]), f"step {b['step']}"
            assert np.array_equal(np.array(b["y"]), want[:, 1:]), f"step {b['step']}"
            docs = reference_doc_starts(want, 5).astype(np.int64)
            docs[docs == 0xFFFFFFFF] = -1  # int32 on the device: the padding reads -1
            assert np.array_equal(np.array(b["docs"]), docs), f"step {b['step']}"


MIX_RANK = """
import ctypes, json, sys
ctypes.CDLL("libcuda.so.1").fake_cuda_set_eager(None, 1)
import torch, shmfeed
L = shmfeed.Loader(device="cuda:0", dtype=sys.argv[1])
out = []
for _ in range(12):
    b = next(L)
    out.append({"first": [row[0] for row in b.tokens.host().tolist()],
                "sources": b.sources.host().tolist()})
L.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("seq_len", [1023, 1000])
@pytest.mark.parametrize("dtype", ["int64", "native"])
def test_a_mixtures_row_sources_reach_the_gpu(tmp_path, dtype, seq_len):
    """`batch.sources` on the device: the layout left a mixture's row sources out of the
    payload, so the GPU copy did not carry them and the device buffer was too small for
    them (the tensor read past it). B=2 rows of 1,024 uint16 tokens fill a page, the
    case where they did not fit the slot either (1,001 tokens: only the GPU copy)."""
    cli = os.environ.get("SHMFEED_CLI")
    if not cli:
        pytest.skip("SHMFEED_CLI is set by `meson test`")
    tag = 20000
    for s, name in enumerate(("web", "code")):
        (s * tag + np.arange(30000) % tag).astype(np.uint16).tofile(tmp_path / f"{name}.bin")
    cfg = tmp_path / "mix.yaml"
    cfg.write_text("sources:\n"
                   f"  - {{name: web, paths: {tmp_path}/web.bin, weight: 1}}\n"
                   f"  - {{name: code, paths: {tmp_path}/code.bin, weight: 1}}\n"
                   f"batch: {{size: 2, seq_len: {seq_len}}}\nconsumers: {{world_size: 1}}\n")
    env = fake_gpu_env()
    job = f"gpumix-{os.getpid()}-{dtype}-{seq_len}"
    r = subprocess.run([cli, "run", str(cfg), "--set", f"job={job}", "--quiet", "--",
                        sys.executable, "-c", MIX_RANK, dtype],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(got) == 12
    for b in got:
        assert b["sources"] == [t // tag for t in b["first"]], b
    assert {s for b in got for s in b["sources"]} == {0, 1}
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")


def test_cuda_without_an_index_is_the_ranks_visible_gpu():
    """device="cuda" took LOCAL_RANK as the ordinal: with one GPU visible to each rank
    (CUDA_VISIBLE_DEVICES, Slurm's --gpus-per-task) rank 1 asked for a second GPU and
    failed to attach. It is the rank's GPU among those visible, as for device=None."""
    env = fake_gpu_env(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2")
    code = ("import ctypes, sys\n"
            "ctypes.CDLL('libcuda.so.1').fake_cuda_set_eager(None, 1)\n"
            "import shmfeed\n"
            "L = shmfeed.Loader(job=sys.argv[1], device='cuda')\n"
            "b = next(L)\n"
            "print(L.device.type, L.device.index, b.step)\n"
            "L.close()\n")
    with Feed("gpudev", ranks=2) as feed:
        out = rank_output(code, env, feed.job)
        assert out.split() == ["cuda", "0", "0"], out


SIDE_STREAM = """
import ctypes, json, sys
ctypes.CDLL("libcuda.so.1").fake_cuda_set_eager(None, 1)
import torch, shmfeed
L = shmfeed.Loader(job=sys.argv[1], device="cuda:0", dtype=sys.argv[2])
batches = [next(L)]  # on the stream the outputs were allocated on: nothing to record
tokens = [batches[0].tokens.host().tolist()]
before = len(torch.recorded)
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    for _ in range(2):
        batches.append(next(L))
        tokens.append(batches[-1].tokens.host().tolist())


def on_side(t):
    return any(p <= t.data_ptr() and t.data_ptr() + t._a.nbytes <= p + n and
               s == side.cuda_stream for p, n, s in torch.recorded)


print(json.dumps({"before": before, "steps": [b.step for b in batches],
                  "tokens": tokens,
                  "side": [on_side(t) for b in batches
                           for t in (b.tokens, b.x, b.y, b.doc_starts)]}))
L.close()
"""


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_outputs_widened_on_a_side_stream_are_recorded_on_it(dtype):
    """The int64/int32 outputs are allocated once, on the stream current at attach, and
    written by the widening on the stream current at next(): a batch fetched on a side
    stream (`with torch.cuda.stream(s): next(loader)`, the usual prefetch) left torch's
    caching allocator free to give their memory out again, on the first stream, as soon
    as the Loader and its batches were dropped, with the last widening still queued on
    the side stream (a review). Each output is recorded on each stream the Loader
    widens on (record_stream, once per stream change)."""
    env = fake_gpu_env()
    with Feed("gpuside", extra=["--doc-starts", "5"]) as feed:
        got = json.loads(rank_output(SIDE_STREAM, env, feed.job, dtype))
        assert got["steps"] == [0, 1, 2], got
        for step, tokens in enumerate(got["tokens"]):
            assert np.array_equal(np.array(tokens), feed.expected(0, step)), step
    assert got["before"] == 0, got
    assert all(got["side"]), got


def test_a_rank_of_another_numbering_gets_the_processs_gpu():
    """rank= of the data-parallel group (the README's Megatron recipe: tensor parallelism
    of 2 on 8 GPUs, so torchrun's rank 2 is data-parallel rank 1) took the ring's local
    rank as the GPU too: the process with LOCAL_RANK=2, whose model is on cuda:2, got its
    batches on cuda:1, which another process owns (a review). The GPU is the process's,
    cuda:(LOCAL_RANK modulo those visible), as documented; the ring is rank 1's. Without
    LOCAL_RANK the ring's local rank names the GPU, as before."""
    env = fake_gpu_env(FAKE_CUDA_DEVICES="8", RANK="2", LOCAL_RANK="2", WORLD_SIZE="8",
                       LOCAL_WORLD_SIZE="8", GROUP_RANK="0")
    code = ("import ctypes, json, os, sys\n"
            "ctypes.CDLL('libcuda.so.1').fake_cuda_set_eager(None, 1)\n"
            "import shmfeed\n"
            "out = []\n"
            "for kw in (dict(), dict(device='cuda'), dict(local_rank=1)):\n"
            "    L = shmfeed.Loader(job=sys.argv[1], rank=1, world_size=4, **kw)\n"
            "    b = next(L)\n"
            "    out.append([L.device.index, b.tokens.device.index, L.rank, b.step])\n"
            "    del b\n"
            "    L.close()\n"
            "for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK'):\n"
            "    del os.environ[k]\n"
            "L = shmfeed.Loader(job=sys.argv[1], rank=3, world_size=4, local_rank=3)\n"
            "b = next(L)\n"
            "out.append([L.device.index, b.tokens.device.index, L.rank, b.step])\n"
            "del b\n"
            "L.close()\n"
            "print(json.dumps(out))\n")
    with Feed("gpuoftp", ranks=4) as feed:
        out = rank_output(code, env, feed.job)
        assert json.loads(out) == [[2, 2, 1, 0], [2, 2, 1, 1], [2, 2, 1, 2], [3, 3, 3, 0]], out


def _run_device_job(tmp_path, job_device, code, env):
    """`shmfeed run` of a job of `consumers.device: job_device` over a file whose token i
    is i (B=2, T=64), with one rank running `code`: its stdout."""
    cli = os.environ.get("SHMFEED_CLI")
    if not cli:
        pytest.skip("SHMFEED_CLI is set by `meson test`")
    np.arange(20000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [{tmp_path}/t.bin]\nbatch: {{size: 2, seq_len: 64}}\n"
                   f"consumers: {{world_size: 1, device: {job_device}}}\n")
    job = f"gpudevice-{os.getpid()}-{job_device}"
    r = subprocess.run([cli, "run", str(cfg), "--set", f"job={job}", "--quiet", "--",
                        sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")
    return r.stdout


@pytest.mark.parametrize("job_device", ["cpu", "cuda", "auto"])
def test_the_jobs_consumers_device_decides(tmp_path, job_device):
    """consumers.device was parsed and then ignored. cpu: a Loader where torch sees a GPU
    gets CPU batches; cuda: a Loader asking for the CPU is refused; auto: the Loader's
    own choice (the GPU here)."""
    code = ("import ctypes, sys\n"
            "ctypes.CDLL('libcuda.so.1').fake_cuda_set_eager(None, 1)\n"
            "import shmfeed\n"
            "for asked in (None, 'cpu'):\n"
            "    try:\n"
            "        L = shmfeed.Loader(device=asked, dtype='int64')\n"
            "    except shmfeed.Error as e:\n"
            "        print(asked, 'refused', 'consumers.device: cuda' in str(e))\n"
            "        continue\n"
            "    b = next(L)\n"
            "    print(asked, L.device.type, L.counters()['gpu'])\n"
            "    del b\n"
            "    L.close()\n")
    out = _run_device_job(tmp_path, job_device, code, fake_gpu_env())
    want = {"cpu": ["None cpu False", "cpu cpu False"],
            "cuda": ["None cuda True", "cpu refused True"],
            "auto": ["None cuda True", "cpu cpu False"]}[job_device]
    assert out.strip().splitlines() == want, out


def test_a_cpu_job_serves_a_gpu_asked_of_a_torch_that_sees_none(tmp_path):
    """consumers.device: cpu with a CUDA driver present and a torch without CUDA: a Loader
    asking for device="cuda" gets the job's CPU batches (the check for a torch without
    CUDA once ran before the job was known and refused it)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch sees a GPU")
    code = ("import shmfeed, torch\n"
            "for device in ('cuda', 'cuda:0'):\n"
            "    with shmfeed.Loader(device=device, dtype='int64') as L:\n"
            "        b = next(L)\n"
            "        assert b.tokens.device.type == 'cpu' and b.tokens.dtype == torch.int64\n"
            "        assert b.tokens.shape == (2, 65), b.tokens.shape\n"
            "        # Windows of the file, whose token i is i.\n"
            "        assert bool((b.tokens[:, 1:] - b.tokens[:, :-1] == 1).all()), b.tokens\n"
            "        print(device, L.device.type, L.counters()['gpu'])\n")
    out = _run_device_job(tmp_path, "cpu", code, dict(os.environ, LD_LIBRARY_PATH=FAKE_CUDA))
    assert out.split() == ["cuda", "cpu", "False", "cuda:0", "cpu", "False"], out


def test_a_gpu_asked_of_a_torch_that_sees_none():
    """A CUDA driver and a torch without CUDA (a CPU-only wheel, or no GPU visible to it):
    device="cuda" was taken, and the rank's first batch failed with torch's own
    RuntimeError. Now the Loader refuses at once (SF_E_CUDA, saying why) and the rank
    stays free."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch sees a GPU")
    code = """
import sys, shmfeed
from shmfeed import _native as N
for device in ("cuda", "cuda:0", 0):
    try:
        shmfeed.Loader(job=sys.argv[1], device=device)
        sys.exit(f"device={device!r} was taken")
    except shmfeed.Error as e:
        assert e.code == N.SF_E_CUDA and "torch sees no CUDA device" in str(e), e
with shmfeed.Loader(job=sys.argv[1], device="cpu") as L:
    assert L.next().step == 0
"""
    with Feed("cpu-torch") as feed:
        rank_output(code, dict(os.environ, LD_LIBRARY_PATH=FAKE_CUDA), feed.job)


def run_rank(tag, script, dtype):
    """Run `script` (it prints "ok") against a job of its own, on the fake driver and
    the stand-in torch, with the eager policy."""
    with Feed(tag) as feed:
        out = rank_output(script, fake_gpu_env(), FAKE_TORCH, feed.job, dtype)
        assert "ok" in out, out


SEEK = """
import ctypes, sys
ctypes.CDLL("libcuda.so.1").fake_cuda_set_eager(None, 1)
import torch, shmfeed
L = shmfeed.Loader(job=sys.argv[2], device="cuda:0", dtype=sys.argv[3])
next(L)
held = next(L)
kept = held.tokens.host().tolist()
state = L.state_dict()
L.load_state_dict(dict(state, samples=3 * state["samples"] // 2))  # step 3
b = next(L)
assert b.step == 3, b.step
assert held.tokens.host().tolist() == kept, "the batch held was overwritten"
print("ok")
"""


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_a_gpu_batch_copy_stays_valid_across_a_seek(dtype):
    """As on the CPU: the copies went into output step % 2, so the first next() after a
    seek to a step of the held batch's parity wrote over it."""
    run_rank("gpuseek", SEEK, dtype)


TAKE_AGAIN = """
import ctypes, sys
ctypes.CDLL("libcuda.so.1").fake_cuda_set_eager(None, 1)
import torch, shmfeed
L = shmfeed.Loader(job=sys.argv[2], device="cuda:0", dtype=sys.argv[3])
held = next(L)
kept = held.tokens.host().tolist()
plain_copy, calls = torch.Tensor.copy_, [0]
def copy_once_interrupted(self, src):
    calls[0] += 1
    if calls[0] == 2:  # inside the second copy of the next batch
        raise KeyboardInterrupt
    return plain_copy(self, src)
torch.Tensor.copy_ = copy_once_interrupted
try:
    next(L)
except KeyboardInterrupt:
    pass
torch.Tensor.copy_ = plain_copy
b = next(L)  # the interrupted batch, taken again
assert b.step == 1, b.step
assert held.tokens.host().tolist() == kept, "the batch held was overwritten"
print("ok")
"""


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_a_gpu_batch_taken_again_after_an_interrupt_keeps_the_held_one(dtype):
    """An exception inside the copies of a batch (Ctrl-C between two torch calls): the
    next next() takes that batch again, into the same output, not into the output of the
    batch the caller holds."""
    run_rank("gputake", TAKE_AGAIN, dtype)


BEHIND = """
import ctypes, json, signal, sys, threading, time
cuda = ctypes.CDLL("libcuda.so.1")
cuda.fake_cuda_set_eager(None, 1)
import shmfeed
L = shmfeed.Loader(job=sys.argv[1], device="cuda:0", dtype="int64")
steps = [next(L).step for _ in range(3)]
cuda.fake_cuda_set_busy(None, 1)  # the GPU is behind: the work on the NULL stream waits
# A safety net: the GPU catches up after 5 s whatever happens, so that a next() that
# waits without a limit fails the test instead of hanging it.
net = threading.Timer(5, cuda.fake_cuda_set_busy, (None, 0))
net.start()
# Steps 3 and 4: step 4's copy waits for the work on step 2 in the same buffer, and the
# next call waits for that copy.
steps += [next(L).step for _ in range(2)]
""" + WAIT_BEHIND + """cuda.fake_cuda_set_busy(None, 0)
net.cancel()
steps += [next(L).step for _ in range(2)]
L.close()
print(json.dumps({"steps": steps, "timed_out": timed_out, "timeout_s": t1 - t0,
                  "interrupted": interrupted, "interrupt_s": t2 - t1}))
"""


def test_a_gpu_behind_the_host_neither_blocks_next_past_its_timeout_nor_ctrl_c():
    """When the host runs ahead of the GPU, the copy of the batch next() releases still
    waits on the device for the work queued on its buffer. next() waited for it in
    cuEventSynchronize: past its timeout, and past Ctrl-C (Python's handlers run only
    between C calls). Now a timeout says why, Ctrl-C lands within a slice, and no step is
    lost or skipped."""
    env = fake_gpu_env()
    with Feed("gpubehind") as feed:
        got = json.loads(rank_output(BEHIND, env, feed.job))
    assert got["steps"] == list(range(7)), got  # step 5 neither lost nor skipped
    code, msg = got["timed_out"]
    assert code == -1007 and "has not completed on the device" in msg, got
    assert 0.2 <= got["timeout_s"] < 2, got
    assert got["interrupted"] and got["interrupt_s"] < 2, got


def test_a_cuda_job_without_a_gpu_says_why_the_rank_is_on_the_cpu(tmp_path):
    """consumers.device: cuda, and a Loader(device=None) where torch sees no GPU: the
    refusal said the rank "asked for CPU views", which nobody had (a new user's trial)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch sees a GPU")
    code = ("import shmfeed\n"
            "try:\n"
            "    shmfeed.Loader()\n"
            "except shmfeed.Error as e:\n"
            "    print(e)\n")
    out = _run_device_job(tmp_path, "cuda", code, dict(os.environ))
    assert "consumers.device: cuda" in out and "device=None gave the CPU: no CUDA device " \
        "is visible to this process's torch" in out, out


def test_a_cuda_job_refusing_numpy_arrays_says_so(tmp_path):
    """consumers.device: cuda, and a Loader(numpy=True) where torch sees a GPU: the
    refusal said no CUDA device was visible to this process's torch, and to run it where
    one is (a review): the CPU came from numpy=True."""
    code = ("import ctypes, shmfeed\n"
            "ctypes.CDLL('libcuda.so.1').fake_cuda_set_eager(None, 1)\n"
            "try:\n"
            "    shmfeed.Loader(numpy=True)\n"
            "except shmfeed.Error as e:\n"
            "    print(e)\n")
    out = _run_device_job(tmp_path, "cuda", code, fake_gpu_env())
    assert "consumers.device: cuda" in out and "numpy=True gives CPU arrays" in out, out
    assert "no CUDA device is visible" not in out, out
