"""The Loader's GPU path on a real GPU (skipped where torch sees none: never on this
project's CI machines; scripts/gpu-check runs it on a GPU machine). A batch fetched ahead
must stay whole while the next one is widened, on the default stream and on a stream of
the caller's, whether the widening runs as CUDA graphs (torch 2.1 and later) or op by op.
The batches are copied on the device as they come and read back only at the end, so that
a widening not ordered before the caller's work on its stream shows."""

import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import WAIT_BEHIND, Feed, reference_doc_starts

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no GPU visible to torch", allow_module_level=True)

RANK = """
import json, sys
import torch, shmfeed
L = shmfeed.Loader(job=sys.argv[1], device="cuda:0", dtype=sys.argv[2])
graphs = L._widen is not None
side = torch.cuda.Stream()
kept, batch = [], next(L)
for i in range(40):
    if i % 2:  # fetched on a stream of the caller's every other step, used there
        with torch.cuda.stream(side):
            assert L._raw_stream() == side.cuda_stream
            upcoming = next(L)
            kept.append((batch, [t.clone() for t in (batch.tokens, batch.x, batch.y,
                                                     batch.doc_starts)]))
        torch.cuda.current_stream().wait_stream(side)
    else:
        assert L._raw_stream() == torch.cuda.current_stream().cuda_stream
        upcoming = next(L)
        kept.append((batch, [t.clone() for t in (batch.tokens, batch.x, batch.y,
                                                 batch.doc_starts)]))
    batch = upcoming
torch.cuda.synchronize()
out = [{"step": b.step, "tokens": tok.tolist(), "x": x.tolist(), "y": y.tolist(),
        "y_contiguous": b.y.is_contiguous(), "dtype": str(b.tokens.dtype),
        "docs": docs.tolist()} for b, (tok, x, y, docs) in kept]
L.close()
print(json.dumps({"graphs": graphs, "batches": out}))
"""


@pytest.mark.parametrize("buffers", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("wide", [False, True], ids=["u16", "i32"])
def test_a_batch_fetched_ahead_stays_whole_on_the_gpu(buffers, dtype, wide):
    extra = ["--doc-starts", "5"] + (["--dtype", "i32", "--vocab", "100277"] if wide else [])
    kw = {"vocab": 100277, "dtype": np.int32} if wide else {}
    env = dict(os.environ, SHMFEED_GPU_BUFFERS=buffers)
    with Feed("gpureal", extra=extra) as feed:
        r = subprocess.run([sys.executable, "-c", RANK, feed.job, dtype],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
    # Captured as CUDA graphs where torch can capture on one thread (2.1 and later).
    assert got["graphs"] == ("capture_error_mode" in
                             inspect.signature(torch.cuda.CUDAGraph.capture_begin).parameters)
    assert "RuntimeWarning" not in r.stderr, r.stderr
    assert [b["step"] for b in got["batches"]] == list(range(40))
    for b in got["batches"]:
        want = feed.expected(0, b["step"], **kw).astype(np.int64)
        assert b["dtype"] == f"torch.{dtype}"
        assert np.array_equal(np.array(b["tokens"]), want), f"step {b['step']}"
        assert np.array_equal(np.array(b["x"]), want[:, :-1]), f"step {b['step']}"
        assert np.array_equal(np.array(b["y"]), want[:, 1:]), f"step {b['step']}"
        assert b["y_contiguous"]
        docs = reference_doc_starts(want, 5).astype(np.int64)
        docs[docs == 0xFFFFFFFF] = -1  # int32 on the device: the padding reads -1
        assert np.array_equal(np.array(b["docs"]), docs), f"step {b['step']}"


BEHIND = """
import json, signal, sys, time
import torch, shmfeed
L = shmfeed.Loader(job=sys.argv[1], device="cuda:0", dtype="int64")
kept = [next(L) for _ in range(2)]
kept = [(b.step, b.tokens.clone()) for b in kept]
torch.cuda._sleep(int(6e9))  # a long kernel: the GPU falls seconds behind the host
# Steps 2 and 3 come at once (their copies wait on the device); the call after them waits
# for step 3's copy, queued behind the kernel.
for _ in range(2):
    b = next(L)
    kept.append((b.step, b.tokens.clone()))
""" + WAIT_BEHIND + """still_behind = not torch.cuda.current_stream().query()
for _ in range(3):
    b = next(L)
    kept.append((b.step, b.tokens.clone()))
torch.cuda.synchronize()
L.close()
print(json.dumps({"timed_out": timed_out, "timeout_s": t1 - t0, "interrupted": interrupted,
                  "interrupt_s": t2 - t1, "still_behind": still_behind,
                  "batches": [[s, t.tolist()] for s, t in kept]}))
"""


def test_a_gpu_behind_the_host_neither_blocks_next_past_its_timeout_nor_ctrl_c():
    """A long kernel on the caller's stream: the copy of the batch next() releases waits
    on the device behind it. next() waited for it in cuEventSynchronize, past its timeout
    and past Ctrl-C; now a timeout says why, Ctrl-C lands within a slice, and every batch
    comes whole and in order."""
    env = dict(os.environ, SHMFEED_GPU_BUFFERS="2")
    with Feed("gpubehind") as feed:
        r = subprocess.run([sys.executable, "-c", BEHIND, feed.job], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
    assert got["still_behind"], "the kernel ended before the checks: not a test of them"
    code, msg = got["timed_out"]
    assert code == -1007 and "has not completed on the device" in msg, got
    assert 0.2 <= got["timeout_s"] < 1, got
    assert got["interrupted"] and got["interrupt_s"] < 1, got
    assert [s for s, _ in got["batches"]] == list(range(7))
    for step, tokens in got["batches"]:
        assert np.array_equal(np.array(tokens), feed.expected(0, step).astype(np.int64))


RESUMED = """
import json, sys
import numpy as np, torch, shmfeed
L = shmfeed.Loader(job=sys.argv[1], device="cuda:0", dtype=sys.argv[2])
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    b0 = next(L)
    torch.cuda._sleep(int(2e9))  # the caller's work on batch 0, about a second, on s
    b1 = next(L)
    # Step 2 goes into batch 0's buffer: its copy waits on the device for that work.
    if sys.argv[3] == "widen":  # the exception lands as next() wraps the batch
        take = L._take

        def interrupted(b):
            L._take = take
            raise KeyboardInterrupt

        L._take = interrupted
    else:  # ... as next() lets its lock go, the batch wrapped
        lock = L._lock

        class Interrupting:
            def __enter__(self):
                return lock.__enter__()

            def __exit__(self, *exc):
                lock.__exit__(*exc)
                if L._returning is not None:
                    L._lock = lock
                    raise KeyboardInterrupt

            def _is_owned(self):
                return lock._is_owned()

        L._lock = Interrupting()
    try:
        next(L)
    except KeyboardInterrupt:
        pass
b2 = next(L)  # resumed on the default stream, as the `with` block was left
got = b2.tokens.to(torch.int64).clone()
torch.cuda.synchronize()
print(json.dumps({"step": b2.step, "tokens": got.tolist()}))
L.close()
"""


@pytest.mark.parametrize("dtype", ["int64", "native"])
@pytest.mark.parametrize("where", ["widen", "release"])
def test_a_batch_taken_by_an_interrupted_call_is_ordered_on_the_current_stream(dtype, where):
    """next() under `with torch.cuda.stream(s)`, interrupted after the library handed it
    the batch: the call after it, on another stream, returned that batch without making
    the current stream wait for its copy (ordered before s only), so a kernel there read
    the buffer's previous batch (a review, on the fake driver)."""
    if dtype == "native" and where == "widen":
        pytest.skip("native batches are not widened")
    env = dict(os.environ, SHMFEED_GPU_BUFFERS="2")
    with Feed("gpuresumed") as feed:
        r = subprocess.run([sys.executable, "-c", RESUMED, feed.job, dtype, where], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
    assert got["step"] == 2
    assert np.array_equal(np.array(got["tokens"]), feed.expected(0, 2).astype(np.int64))
