"""shmfeed.Loader in one process: content, views, errors, resume, end of data."""

import ctypes
import ctypes.util
import decimal
import errno
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
import torch

import shmfeed
from shmfeed import _native as N

from conftest import FIXTURE, HERE, Feed, rank_env, reference_doc_starts


def test_struct_mirrors_match_the_c_layout():
    layout = N._layout(N.lib())
    mirrored = set()
    for cname, mirror in N.MIRRORS.items():
        assert layout[cname] == (0, ctypes.sizeof(mirror)), cname
        mirrored.add(cname)
        for fname, _ in mirror._fields_:
            field = getattr(mirror, fname)
            assert layout[f"{cname}.{fname}"] == (field.offset, field.size), f"{cname}.{fname}"
            mirrored.add(f"{cname}.{fname}")
    # Every field the library lists is mirrored: one left out would be read nowhere.
    assert set(layout) == mirrored
    consts = json.loads(subprocess.check_output([FIXTURE, "--abi"], text=True))
    assert "SF_OUTPUT_TARGETS" in consts
    for name, value in consts.items():
        assert getattr(N, name) == value, name


def test_a_library_of_another_layout_is_refused():
    """A package of one build and a library of another (a pip-installed package with
    SHMFEED_LIB, a stale libshmfeed.so.0 on the loader's path) misread each other's structs:
    a review saw another slot's tokens served and sf_consumer_info write 8 bytes past the
    package's struct, silently. The package compares its mirrors with the library's own
    layout when it loads it."""
    class WiderBatch(ctypes.Structure):
        _fields_ = N.Batch._fields_[:11] + [("flags", ctypes.c_uint64)] + N.Batch._fields_[11:]

    mirrors = dict(N.MIRRORS, sf_batch=WiderBatch)
    with pytest.raises(OSError) as exc:
        N.check_layout(N.lib(), mirrors)
    msg = str(exc.value)
    assert f"libshmfeed at {N.lib()._name} (shmfeed {shmfeed.version()})" in msg
    assert "lays out its structs otherwise than this Python package expects" in msg
    assert "struct sf_batch is 104 bytes there, 112 here" in msg
    assert "sf_batch.flags unknown there, at 72 (8 bytes) here" in msg
    assert "sf_batch.buffer at 72 (4 bytes) there, at 80 (4 bytes) here" in msg
    assert "; and 3 more)" in msg  # four shown: size, flags, buffer, output
    assert "load the library built with this package" in msg
    N.check_layout(N.lib())  # its own mirrors pass


def test_a_library_that_does_not_say_its_layout_is_refused():
    """An older library (no sf_abi_entry) is refused at the first use of the package, before
    any struct crosses."""
    other = ctypes.util.find_library("xxhash")
    assert other
    code = ("import shmfeed\n"
            "try:\n"
            "    shmfeed.Loader(job='nothing')\n"
            "except OSError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, SHMFEED_LIB=other), timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"libshmfeed at {other}" in out.stdout
    assert "does not say how its structs are laid out (no sf_abi_entry" in out.stdout
    assert "Traceback" not in out.stderr, out.stderr  # nor again at exit


def test_batches_match_the_reference_on_both_ranks():
    with Feed("content", ranks=2, extra=["--doc-starts", "5"]) as feed:
        loaders = [shmfeed.Loader(job=feed.job, rank=r, world_size=2, local_rank=r)
                   for r in range(2)]
        for step in range(12):
            for r, L in enumerate(loaders):
                b = next(L)
                want = feed.expected(r, step)
                assert b.step == step
                assert b.first_sample == step * 4 * 2 + r * 4
                assert isinstance(b.tokens, torch.Tensor)
                assert b.tokens.shape == (4, 65)
                assert b.tokens.dtype == torch.int64  # the default: ready for a model
                assert np.array_equal(b.tokens.numpy(), want.astype(np.int64))
                assert torch.equal(b.x, b.tokens[:, :-1]) and torch.equal(b.y, b.tokens[:, 1:])
                assert b.digest == shmfeed.digest(want.tobytes())
                assert np.array_equal(b.doc_starts, reference_doc_starts(want, 5))
        for L in loaders:
            L.close()


def test_numpy_views_are_zero_copy_and_read_only():
    with Feed("numpy", extra=["--dtype", "i32", "--vocab", "100277"]) as feed:
        with shmfeed.Loader(job=feed.job, numpy=True, dtype="native") as L:
            b = L.next()
            assert b.tokens.dtype == np.int32
            assert not b.tokens.flags.writeable
            assert not b.tokens.flags.owndata
            assert np.array_equal(b.tokens, feed.expected(0, 0, vocab=100277, dtype=np.int32))
            assert np.shares_memory(b.x, b.tokens) and np.shares_memory(b.y, b.tokens)
            assert b.doc_starts is None
        # The batch's arrays hold the closed Loader's rank until they go.
        with pytest.raises(shmfeed.Error) as e:
            shmfeed.Loader(job=feed.job)
        assert e.value.code == N.SF_E_BUSY and "arrays of batches" in str(e.value)
        del b
        with shmfeed.Loader(job=feed.job, dtype="native") as L:  # torch views int32 in place
            b = L.next()
            assert b.tokens.dtype == torch.int32 and b.step == 1


def test_a_checksum_failure_of_native_views_names_a_stale_write():
    """A write into a native batch after the next call lands in a slot being refilled:
    a later batch of the rank fails its checksum, which read as shared memory gone bad
    (a review wrote `y[y == 32] = -100` one batch late: 766 SF_E_CHECKSUM in 2,000
    steps). The error of a native CPU Loader says what writes do; a copying one's not."""
    with Feed("stalewrite", extra=["--dtype", "i32", "--vocab", "100277"]) as feed:
        for dtype, named in (("native", True), ("int64", False)):
            with shmfeed.Loader(job=feed.job, dtype=dtype, device="cpu") as L:
                with pytest.raises(shmfeed.Error) as e:
                    L._raise(N.SF_E_CHECKSUM, "rank 0 step 5: payload checksum mismatch")
                assert e.value.code == N.SF_E_CHECKSUM
                assert ("after the next call lands in a slot being refilled" in str(e.value)) \
                    == named, str(e.value)


def test_provenance_is_the_chain_of_digests():
    with Feed("prov") as feed:
        with shmfeed.Loader(job=feed.job) as L:
            chain = 0
            for _ in range(6):
                b = L.next()
                rec = b.step.to_bytes(8, "little") + b.digest.to_bytes(8, "little")
                chain = shmfeed.digest(rec, chain)
            assert L.counters()["provenance"] == chain == L.state_dict()["provenance"]


def test_state_dict_resume_is_byte_identical():
    with Feed("resume", ranks=2, extra=("--samples-per-epoch", "12")) as feed:
        L = shmfeed.Loader(job=feed.job, local_rank=1)
        for _ in range(5):
            L.next()
        state = L.state_dict()
        assert state["samples"] == 5 * 4 * 2 and state["step"] == 5
        assert state["epoch"] == 40 // 12
        first = [(bytes(L.next().tokens.numpy().tobytes())) for _ in range(8)]
        end_prov = L.state_dict()["provenance"]
        L.close()
        with shmfeed.Loader(job=feed.job, local_rank=1) as L2:
            L2.load_state_dict(json.loads(json.dumps(state)))
            again = [bytes(L2.next().tokens.numpy().tobytes()) for _ in range(8)]
            assert again == first
            assert L2.state_dict()["provenance"] == end_prov
            bad = dict(state, config_digest=state["config_digest"] ^ 1)
            with pytest.raises(shmfeed.Error) as e:
                L2.load_state_dict(bad)
            assert e.value.code == N.SF_E_DIGEST and "config" in str(e.value)
        # Another rank's state: the batches follow, the provenance chain is the other's.
        with shmfeed.Loader(job=feed.job, local_rank=0) as L0:
            with pytest.warns(RuntimeWarning, match="loads the state of rank 1"):
                L0.load_state_dict(state)
            assert L0.next().step == 5


def test_errors_carry_the_c_message():
    with pytest.raises(shmfeed.Error) as e:
        shmfeed.Loader(job="py-no-such-job", rank=0, world_size=1)
    assert e.value.code == -errno.ENOENT and "py-no-such-job" in str(e.value)
    # Named once, where the library's message names it already (it said "job
    # 'py-no-such-job' rank 0: no shmfeed job 'py-no-such-job'").
    assert str(e.value).count("py-no-such-job") == 2, e.value  # the job and its arena
    assert str(e.value).startswith("shmfeed: rank 0: no shmfeed job"), e.value
    with Feed("errors", ranks=2, producers=0) as feed:
        with pytest.raises(shmfeed.Error) as e:
            shmfeed.Loader(job=feed.job, local_rank=2)
        assert e.value.code == N.SF_E_RANGE and "0..1" in str(e.value)
        with pytest.raises(shmfeed.Error) as e:
            shmfeed.Loader(job=feed.job, rank=1, world_size=3, local_rank=1)
        assert e.value.code == N.SF_E_GEOMETRY and "WORLD_SIZE=3" in str(e.value)
        with pytest.raises(shmfeed.Error) as e:
            shmfeed.Loader(job=feed.job, rank=0, world_size=2, local_rank=1)
        assert "RANK=0" in str(e.value)
        with shmfeed.Loader(job=feed.job, local_rank=0, timeout=0.05) as L:
            with pytest.raises(shmfeed.Error) as e:
                L.next()
            assert e.value.code == N.SF_E_TIMEOUT
            with pytest.raises(shmfeed.Error) as e:
                shmfeed.Loader(job=feed.job, local_rank=0)
            assert e.value.code == N.SF_E_BUSY
        with pytest.raises(ValueError):
            shmfeed.Loader(job=feed.job, local_rank=0, device="tpu")
        # A bool is no device number (device=True read as 'cuda:True').
        for flag in (True, False):
            with pytest.raises(ValueError) as e:
                shmfeed.Loader(job=feed.job, local_rank=0, device=flag)
            assert "a bool" in str(e.value) and f"cuda:{flag}" not in str(e.value), e.value


def test_no_job_name_says_how_a_job_starts(monkeypatch):
    # A training script run without `shmfeed run` around it: the first mistake a user
    # makes, answered with the way out.
    monkeypatch.delenv("SHMFEED_JOB", raising=False)
    with pytest.raises(ValueError) as e:
        shmfeed.Loader(local_rank=0)
    assert "SHMFEED_JOB" in str(e.value)
    assert "shmfeed run JOB.yaml -- COMMAND" in str(e.value)


def test_job_gone_when_the_launcher_is_killed():
    """A rank blocked in next() with no timeout raises JobGone within 2 s of a SIGKILL of
    the arena's creator (the fixture stands for the launcher), instead of waiting forever."""
    feed = Feed("gone", producers=0)
    killed = []

    def kill_creator():
        time.sleep(0.3)
        killed.append(time.monotonic())
        feed.proc.kill()
        feed.proc.wait()

    try:
        with shmfeed.Loader(job=feed.job) as L:
            killer = threading.Thread(target=kill_creator)
            killer.start()
            with pytest.raises(shmfeed.JobGone) as e:
                L.next()
            gone = time.monotonic()
            killer.join()
            # The liveness check runs every 0.5 s; the rest is a loaded machine's margin.
            assert gone - killed[0] < 5.0, f"JobGone {gone - killed[0]:.3f} s after the kill"
            assert isinstance(e.value, shmfeed.Error)
            assert e.value.code == N.SF_E_JOB_GONE and "launcher" in str(e.value)
            with pytest.raises(shmfeed.JobGone):
                next(L)
    finally:
        if feed.proc.poll() is None:
            feed.proc.kill()
            feed.proc.wait()
        if os.path.exists(f"/dev/shm/shmfeed.{feed.job}"):
            os.unlink(f"/dev/shm/shmfeed.{feed.job}")


def test_iteration_stops_at_the_end_of_data():
    with Feed("end", extra=["--steps", "3"]) as feed:
        with shmfeed.Loader(job=feed.job) as L:
            assert [b.step for b in L] == [0, 1, 2]
            with pytest.raises(shmfeed.Error) as e:
                L.next()
            assert e.value.code == N.SF_E_END
            assert "the data ended at step 3" in str(e.value), e.value
            # A resume state past the end: where the end is, not where the rank is.
            L.load_state_dict(dict(L.state_dict(), samples=1000 * 4))
            with pytest.raises(shmfeed.Error) as e:
                L.next()
            assert e.value.code == N.SF_E_END
            assert "the data ended at step 3, before step 1000 (the job's steps are 0..2)" \
                in str(e.value), e.value


def test_environment_defaults(monkeypatch):
    with Feed("env", ranks=2, world_size=4, rank_base=2) as feed:
        monkeypatch.setenv("SHMFEED_JOB", feed.job)
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("LOCAL_RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "4")
        with shmfeed.Loader() as L:
            assert (L.rank, L.local_rank, L.world_size) == (3, 1, 4)
            b = L.next()
            assert np.array_equal(b.tokens.numpy(), feed.expected(3, 0).astype(np.int32))
            assert str(L.device) == "cpu"


def test_out_of_range_inputs_are_refused(monkeypatch):
    """Ranks, sizes, timeouts and resume states from the environment or the caller are
    range-checked, never wrapped by ctypes (before, LOCAL_RANK=2^32 attached as rank 0 and
    a resume state of -8 samples became 2^64-8)."""
    with Feed("range") as feed:  # B = 4, W = 1, K = 4
        monkeypatch.setenv("SHMFEED_JOB", feed.job)
        for name, value in [("LOCAL_RANK", "4294967296"), ("LOCAL_RANK", "-1"),
                            ("LOCAL_RANK", " 0"), ("LOCAL_RANK", "+0"), ("LOCAL_RANK", "0_0"),
                            ("LOCAL_RANK", "\u0660"), ("RANK", "4294967296"),
                            ("WORLD_SIZE", "0"), ("WORLD_SIZE", "18446744073709551617")]:
            with monkeypatch.context() as m:
                m.setenv(name, value)
                with pytest.raises(ValueError) as e:
                    shmfeed.Loader()
                assert f"{name}=" in str(e.value) and "..2147483647" in str(e.value), e.value
        for kw in [{"local_rank": 2**32}, {"local_rank": -1}, {"local_rank": True},
                   {"local_rank": np.True_},
                   {"local_rank": 0.0}, {"rank": 2**31}, {"world_size": 0},
                   {"timeout": -1}, {"timeout": 1e10}, {"timeout": float("nan")},
                   {"timeout": "soon"}, {"timeout": "5"}, {"timeout": True},
                   {"timeout": bytearray(b"5")}, {"timeout": np.True_},
                   {"timeout": np.array(True)}, {"timeout": 10**400},
                   {"timeout": decimal.Decimal("sNaN")}]:
            with pytest.raises(ValueError) as e:
                shmfeed.Loader(**kw)
            assert next(iter(kw)) in str(e.value), e.value
            # A string is no number, not a number out of range (it said so before).
            if isinstance(kw.get("timeout"), (str, bool, bytearray)) or \
                    str(getattr(kw.get("timeout"), "dtype", "")) == "bool":
                assert "is not a number of seconds" in str(e.value), e.value
            elif isinstance(kw.get("timeout"), (int, float)):
                assert "is out of range" in str(e.value), e.value
        # Numbers of other types are durations: numpy's, a 0-d tensor, a fraction.
        from shmfeed.loader import _timeout_ms
        assert [_timeout_ms(t) for t in (np.float32(0.5), torch.tensor(5.0),
                                         decimal.Decimal("0.25"), 2)] == [500, 5000, 250, 2000]
        with shmfeed.Loader() as L:
            with pytest.raises(ValueError):
                L.next(timeout=-5)
            state = L.state_dict()
            for field, value in [("samples", -8), ("samples", 2**64), ("epoch", -1),
                                 ("config_digest", -1), ("provenance", 2**64),
                                 ("samples", "8")]:
                with pytest.raises(ValueError) as e:
                    L.load_state_dict(dict(state, **{field: value}))
                assert f"{field}=" in str(e.value) and "18446744073709551615" in str(e.value)
            # rank and world_size, when the state has them, are integers too (an array
            # made NumPy's "truth value is ambiguous" the message).
            # NumPy's bool is no integer either (numpy 1.x's operator.index took it as
            # 1: a review).
            for field, value in [("rank", np.array([1, 2])), ("world_size", "2"),
                                 ("rank", -1), ("world_size", np.True_),
                                 ("step", np.True_)]:
                with pytest.raises(ValueError) as e:
                    L.load_state_dict(dict(state, **{field: value}))
                assert str(e.value).startswith(f"shmfeed: load_state_dict: {field}="), e.value
            # A multiple of the global batch, but beyond the 48-bit lap of K = 4 slots.
            with pytest.raises(shmfeed.Error) as e:
                L.load_state_dict(dict(state, samples=8 * 2**50))
            assert e.value.code == N.SF_E_RANGE
            assert f"step {2**51}, out of range" in str(e.value), e.value
            assert f"steps are 0..{4 * (2**48 - 1) - 1}" in str(e.value), e.value
            assert L.next().step == 0  # nothing moved
        # The helpers: a code or seed that ctypes would wrap (strerror(2**40) said
        # "success", digest(b, 2**64) was digest(b, 0)).
        for call in (lambda: shmfeed.strerror(2**40), lambda: shmfeed.digest(b"x", 2**64),
                     lambda: shmfeed.digest(b"x", -1)):
            with pytest.raises((ValueError, OverflowError)):
                call()
        monkeypatch.setenv("LOCAL_RANK", "0")
        with shmfeed.Loader() as L:
            assert L.local_rank == 0 and L.next().step == 1


def test_batches_are_ready_for_a_model_in_every_dtype():
    """int64 by default (nn.Embedding and F.cross_entropy take it as it is), int32, and the
    arena's own width; the same ids in each."""
    import torch.nn.functional as F

    with Feed("dtypes") as feed:
        for dtype, want_dtype in (("int64", torch.int64), ("int32", torch.int32),
                                  ("native", getattr(torch, "uint16", torch.int32))):
            with shmfeed.Loader(job=feed.job, dtype=dtype) as L:
                b = L.next()
                assert L.dtype == (dtype if want_dtype != torch.int32 or dtype != "native"
                                   else "int32")
                assert b.tokens.dtype == want_dtype, dtype
                want = feed.expected(0, b.step)
                assert np.array_equal(b.tokens.to(torch.int64).numpy(), want.astype(np.int64))
                assert np.array_equal(b.y.to(torch.int64).numpy(), want[:, 1:].astype(np.int64))
                if dtype != "native":
                    # nanoGPT's model.py flattens the targets with view(-1), which the
                    # strided view tokens[:, 1:] refused: it stopped at its first step.
                    assert b.y.is_contiguous(), dtype
                    assert b.y.view(-1).shape == (feed.batch * feed.seq_len,)
                if dtype == "int64":
                    emb = torch.nn.Embedding(50257, 8)
                    logits = emb(b.x) @ emb.weight.T
                    loss = F.cross_entropy(logits.view(-1, 50257), b.y.view(-1))
                    assert torch.isfinite(loss)
                    assert int(b.x.max()) + 1 > 0
            del b
        with shmfeed.Loader(job=feed.job, numpy=True) as L:
            b = L.next()
            assert b.tokens.dtype == np.int64
            assert b.y.flags.c_contiguous
            assert np.array_equal(b.y, feed.expected(0, b.step)[:, 1:])
        del b
        with pytest.raises(ValueError, match="dtype"):
            shmfeed.Loader(job=feed.job, dtype="float32")


def test_prefetching_loop_resumes_at_the_batch_it_did_not_train_on():
    """nanoGPT fetches the next batch before it checkpoints: saving that batch's
    `state` resumes exactly there; every later batch equals an uninterrupted run's."""
    with Feed("prefetch") as feed:
        with shmfeed.Loader(job=feed.job) as L:
            start = L.state_dict()
            straight = [L.next().digest for _ in range(12)]
        with shmfeed.Loader(job=feed.job) as L:
            L.load_state_dict(start)
            seen = []
            b = L.next()  # fetched before the loop, as train.py does
            for _ in range(5):
                seen.append(b.digest)  # "train" on b ...
                b = L.next()  # ... while the next batch is fetched
            ckpt = b.state  # the checkpoint: b has not been trained on
            assert ckpt != L.state_dict()  # the Loader's own state is one batch later
        with shmfeed.Loader(job=feed.job) as L:
            L.load_state_dict(ckpt)
            rest = [L.next().digest for _ in range(12 - len(seen))]
        assert seen + rest == straight
        assert ckpt["step"] == 5 and ckpt["samples"] == 5 * 4


def test_stats_cover_the_batches_since_the_previous_call():
    def near(got_ms, want_ns):
        # The histogram's buckets are 1/8 of a power of two wide, their middle stands
        # for them; below 16 ns each nanosecond has its own.
        return abs(got_ms * 1e6 - want_ns) <= want_ns / 8 + 16

    def pct(waits, p):
        return sorted(waits)[-(-len(waits) * p // 100) - 1]

    with Feed("window", batch=2, seq_len=32) as feed:
        with shmfeed.Loader(job=feed.job) as L:
            for n in (7, 3):
                waits = [L.next().wait_ns for _ in range(n)]
                st = L.stats()
                assert all(isinstance(v, (int, float)) for v in st.values())
                assert st["batches"] == n and st["tokens"] == n * 2 * 32
                assert st["stalls"] == sum(w >= 1 << 20 for w in waits)
                assert near(st["wait_p50_ms"], pct(waits, 50)), (st, waits)
                assert near(st["wait_p99_ms"], pct(waits, 99)), (st, waits)
            assert st["tokens_total"] == 10 * 2 * 32 == L.counters()["tokens"]
            assert L.stats() == {"batches": 0, "tokens": 0, "stalls": 0, "wait_p50_ms": 0.0,
                                 "wait_p99_ms": 0.0, "tokens_total": 10 * 2 * 32}


@pytest.mark.parametrize("dtype", ["int64", "int32", "native"])
def test_a_batch_moved_to_shared_memory_leaves_later_batches_right(dtype):
    """torch.multiprocessing sends a CPU tensor by moving its storage into shared memory
    in place (share_memory_(): DataLoader workers, mp.Queue, mp.spawn's arguments). The
    Loader hands out the same tensors again at later steps: once moved they showed the
    moved copy while the library wrote elsewhere, so every later batch of that buffer
    repeated an old one, silently."""
    with Feed("moved") as feed:
        with shmfeed.Loader(job=feed.job, dtype=dtype) as L:
            for step in range(8):
                b = L.next()
                want = feed.expected(0, b.step).astype(np.int64)
                assert b.step == step
                assert np.array_equal(b.tokens.to(torch.int64).numpy(), want), (dtype, step)
                assert np.array_equal(b.x.to(torch.int64).numpy(), want[:, :-1])
                assert np.array_equal(b.y.to(torch.int64).numpy(), want[:, 1:])
                if step < 4:  # both outputs (and some slots), then not again
                    b.tokens.share_memory_()
                    b.y.share_memory_()
                    # the moved batch keeps its own ids
                    assert np.array_equal(b.tokens.to(torch.int64).numpy(), want)
                del b


class _WorkerDataset(torch.utils.data.IterableDataset):
    """The README's pattern: the Loader made in the DataLoader worker that reads it."""

    def __init__(self, job, dtype, steps):
        self.job, self.dtype, self.steps = job, dtype, steps

    def __iter__(self):
        with shmfeed.Loader(job=self.job, dtype=self.dtype) as L:
            for _ in range(self.steps):
                b = L.next()
                yield b.step, b.tokens, b.y


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_batches_from_a_dataloader_worker_are_right(dtype):
    """With the default prefetch_factor (2) the main process has received batch s before
    it asks for s + 2, which is when the worker's next() refills s's output. (Native views
    are released at the worker's next next(), before torch's queue thread may have copied
    them: not safe in a worker, and not tested here; README.)"""
    with Feed("worker") as feed:
        dl = torch.utils.data.DataLoader(_WorkerDataset(feed.job, dtype, 8), batch_size=None,
                                         num_workers=1)
        steps = []
        for step, tokens, y in dl:
            want = feed.expected(0, step).astype(np.int64)
            assert np.array_equal(tokens.to(torch.int64).numpy(), want), (dtype, step)
            assert np.array_equal(y.to(torch.int64).numpy(), want[:, 1:]), (dtype, step)
            steps.append(step)
        assert steps == list(range(8))


def test_a_second_dataloader_worker_of_one_rank_says_num_workers_1(tmp_path, monkeypatch):
    """num_workers=2: the second worker's Loader was refused with "local rank 0 is
    consumed by another process", which says nothing of DataLoader workers (a review).
    A rank's batches go to one consumer: the refusal names num_workers=1."""
    # The worker the DataLoader ends leaves its multiprocessing directory (pymp-*) behind:
    # in the test's own directory, not in /tmp.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with Feed("workers2") as feed:
        dl = torch.utils.data.DataLoader(_WorkerDataset(feed.job, "int64", 50),
                                         batch_size=None, num_workers=2)
        with pytest.raises(shmfeed.Error) as info:
            for _ in dl:
                pass
        assert "SF_E_BUSY" in str(info.value), info.value
        assert "num_workers=1" in str(info.value), info.value


def test_errors_survive_pickling_and_a_dataloader_worker():
    """multiprocessing and torch return a worker's exception pickled: Error's arguments
    did not match its signature, so unpickling raised TypeError (a Pool's result thread
    died and get() hung for good) and a DataLoader worker's JobGone reached the main
    process as a plain RuntimeError."""
    import pickle

    for cls, code in ((shmfeed.Error, N.SF_E_TIMEOUT), (shmfeed.JobGone, N.SF_E_JOB_GONE)):
        e = pickle.loads(pickle.dumps(cls(code, "shmfeed: job 'x' rank 0: gone")))
        assert type(e) is cls and e.code == code
        assert str(e) == f"shmfeed: job 'x' rank 0: gone [{N.ERROR_NAMES[code]}]"
        # Made from a text alone (torch re-raises a worker's exception so): its code is
        # the text's last [NAME]; pickled, it stays that text.
        t = cls(f"Caught {cls.__name__} in DataLoader worker process 0.\nOriginal "
                f"Traceback: ...: shmfeed: job 'x' [{N.ERROR_NAMES[code]}]\n")
        assert t.code == code and str(t).startswith("Caught")
        assert str(pickle.loads(pickle.dumps(t))) == str(t)
        # Made from a code alone: the library's text for it (it once took the number for
        # a worker's text and lost the code).
        c = cls(code)
        assert c.code == code and str(c) == f"{N.strerror(code)} [{N.ERROR_NAMES[code]}]"
        # Notes added on the way (add_note) survive pickling, as on any exception.
        c.add_note("while fetching step 3")
        assert pickle.loads(pickle.dumps(c)).__notes__ == ["while fetching step 3"]
        assert cls(np.int32(code)).code == code
    # The code decides the class, however the error is made (shmfeed.Error(-1019) was
    # no JobGone, and `except shmfeed.JobGone` missed it).
    gone = N.ERROR_NAMES[N.SF_E_JOB_GONE]
    for made in (shmfeed.Error(N.SF_E_JOB_GONE), shmfeed.Error(N.SF_E_JOB_GONE, "gone"),
                 shmfeed.Error(f"Caught Error in DataLoader worker: ... [{gone}]\n")):
        assert type(made) is shmfeed.JobGone and made.code == N.SF_E_JOB_GONE, repr(made)
        assert type(pickle.loads(pickle.dumps(made))) is shmfeed.JobGone
    assert type(shmfeed.Error(N.SF_E_TIMEOUT)) is shmfeed.Error
    # Codes the library has no text for.
    for code in (0, 5, 2**31, -2**31 - 1):
        assert str(shmfeed.Error(code)).startswith("shmfeed: unknown error"), code
    feed = Feed("gone-worker", producers=0)
    try:
        # The launcher dies: the worker's Loader (made before or after) raises JobGone.
        feed.proc.kill()
        feed.proc.wait()
        dl = torch.utils.data.DataLoader(_WorkerDataset(feed.job, "int64", 1),
                                         batch_size=None, num_workers=1)
        with pytest.raises(shmfeed.JobGone) as exc:
            next(iter(dl))
        assert exc.value.code == N.SF_E_JOB_GONE
    finally:
        if os.path.exists(f"/dev/shm/shmfeed.{feed.job}"):
            os.unlink(f"/dev/shm/shmfeed.{feed.job}")


def test_a_loader_in_a_dataloader_worker_serves_cpu_batches(monkeypatch):
    """device=None picked the rank's GPU wherever torch sees one, a DataLoader worker
    too: there the attach fails (CUDA does not survive the fork of a parent that used
    it), and a worker's batches go to the main process through shared memory anyway."""
    import torch.utils.data as tud

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(tud, "get_worker_info", lambda: object())
    with Feed("worker-device") as feed:
        with shmfeed.Loader(job=feed.job) as L:
            assert L.device == torch.device("cpu"), L.device
            assert L.next().tokens.device == torch.device("cpu")


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_a_batch_copy_stays_valid_across_a_seek(dtype):
    """A copied batch stays valid until the second next() after it. The copies went
    into output step % 2, so the first next() after a seek to a step of the parity of
    the batch held wrote over it."""
    with Feed("seek-copy") as feed:
        with shmfeed.Loader(job=feed.job, dtype=dtype) as L:
            L.next()
            held = L.next()
            kept = held.tokens.clone()
            state = L.state_dict()
            L.load_state_dict(dict(state, samples=3 * state["samples"] // 2))  # step 3
            b = L.next()
            assert b.step == 3
            assert torch.equal(held.tokens, kept), "the batch held was overwritten"
            assert np.array_equal(b.tokens.numpy(), feed.expected(0, 3).astype(dtype))


def test_cpu_device_names_with_numpy_and_a_resume_step_that_disagrees():
    """Found by review: numpy=True refused device="cpu:0" (and torch.device("cpu", 0))
    saying "a GPU device needs torch"; a state whose `step` was edited resumed at its
    `samples` and said nothing about the step it ignored."""
    with Feed("cpu-names") as feed:  # B = 4, W = 1
        for device in ("cpu", "cpu:0", torch.device("cpu", 0)):
            with shmfeed.Loader(job=feed.job, device=device, numpy=True) as L:
                assert isinstance(L.next().tokens, np.ndarray)
        with pytest.raises(ValueError) as e:
            shmfeed.Loader(job=feed.job, device="cuda:0", numpy=True)
        assert "numpy=True" in str(e.value), e.value
        with shmfeed.Loader(job=feed.job, numpy=True) as L:
            state = L.state_dict()  # the position the Loaders above left: step 3
            with pytest.warns(RuntimeWarning, match=r"step 7 is not its samples 12 over "
                              r"the global batch 4 \(step 3\): it resumes at samples"):
                L.load_state_dict(dict(state, step=7))
            assert L.next().step == 3
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                L.load_state_dict(dict(state, samples=8, step=2))  # consistent: silent
                L.load_state_dict({k: v for k, v in state.items() if k != "step"})
            assert L.next().step == 3


def test_a_global_rank_above_the_nodes_says_how_to_name_the_local_one(monkeypatch):
    """Loader(rank=3, world_size=4) on a node serving global ranks 2..3, LOCAL_RANK unset:
    the local rank defaulted to 3 and the refusal said only "local ranks 0..1, not 3"
    (a review). It now says where the 3 came from and what to pass."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with Feed("node-two", ranks=2, world_size=4, rank_base=2) as feed:
        with pytest.raises(shmfeed.Error) as e:
            shmfeed.Loader(job=feed.job, rank=3, world_size=4, numpy=True)
        assert e.value.code == N.SF_E_RANGE
        assert "defaulted to the rank 3" in str(e.value) and \
            "local_rank=" in str(e.value), e.value
        with shmfeed.Loader(job=feed.job, rank=3, world_size=4, local_rank=1,
                            numpy=True) as L:
            assert L.next().step == 0


def test_a_data_parallel_rank_under_torchrun_takes_its_own_local_rank(monkeypatch):
    """Tensor parallelism 2 on 4 GPUs, torchrun's rank 2 (LOCAL_RANK=2): the README says
    to pass the data-parallel rank and size, Loader(rank=1, world_size=2), but the local
    rank came from LOCAL_RANK, 2, and the job of 2 ranks refused it (a review). Beside a
    rank= that is not RANK, the local rank is rank= itself; with RANK equal to rank=,
    LOCAL_RANK still counts."""
    with Feed("dp-rank", ranks=2) as feed:
        monkeypatch.setenv("RANK", "2")
        monkeypatch.setenv("LOCAL_RANK", "2")
        monkeypatch.setenv("WORLD_SIZE", "4")
        with shmfeed.Loader(job=feed.job, rank=1, world_size=2, numpy=True) as L:
            assert (L.rank, L.local_rank) == (1, 1)
            assert np.array_equal(L.next().tokens, feed.expected(1, 0))
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("LOCAL_RANK", "0")
        with pytest.raises(shmfeed.Error) as e:
            shmfeed.Loader(job=feed.job, rank=1, world_size=2, numpy=True)
        assert e.value.code == N.SF_E_RANGE, e.value
    # A LOCAL_RANK without RANK (a script's own, under srun) is this rank's: the node's
    # ranks 2..3, LOCAL_RANK 0 with rank=2 (a review of the rule above: it dropped it).
    monkeypatch.delenv("RANK")
    with Feed("dp-rank-node", ranks=2, world_size=4, rank_base=2) as feed:
        with shmfeed.Loader(job=feed.job, rank=2, world_size=4, numpy=True) as L:
            assert (L.rank, L.local_rank) == (2, 0)
        monkeypatch.setenv("RANK", "x")  # rank= overrides it: no error for it
        with shmfeed.Loader(job=feed.job, rank=2, world_size=4, local_rank=0,
                            numpy=True) as L:
            assert (L.rank, L.local_rank) == (2, 0)


def test_an_error_made_of_a_numpy_code_and_a_message_is_named():
    """Error(np.int32(-1007), "m") kept the NumPy code and said "m [-1007]", where
    Error(-1007, "m") says "m [SF_E_TIMEOUT]" (a review)."""
    e = shmfeed.Error(np.int32(N.SF_E_TIMEOUT), "m")
    assert type(e.code) is int and e.code == N.SF_E_TIMEOUT and str(e) == "m [SF_E_TIMEOUT]", e


_LEAK_AT_EXIT = """
import ctypes, shmfeed
from conftest import InterruptingLock
L = shmfeed.Loader(job={job!r}, numpy=True, dtype="native")
for _ in range(3):
    b = next(L)
if {interrupt}:  # a fourth next() interrupted as it returns: its batch not delivered
    InterruptingLock(L).armed = True
    try:
        next(L)
    except KeyboardInterrupt:
        pass
# What torch 2.x does with the tensors alive at exit: it frees none, so the batch's
# arrays, and through them the attachment, are never let go (nor, here, the Loader).
ctypes.pythonapi.Py_IncRef(ctypes.py_object(b.tokens))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(L))
print(b.step, L.state_dict()["step"])
"""


def test_a_batch_alive_at_exit_is_not_delivered_again():
    """A process that ends with a batch's arrays still alive (a script whose last `batch`
    is a global, under torch 2.x, which frees no tensor at exit) kept the rank's slot
    claimed: the next attach, finding its consumer dead, handed that batch out again,
    against the position state_dict() gave (a review). The batches held are released
    at exit."""
    for interrupt in (False, True):
        with Feed("leak-exit") as feed:
            env = rank_env(feed.job, 0, 0, 1, 1)
            env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")])
            out = subprocess.run([sys.executable, "-c",
                                  _LEAK_AT_EXIT.format(job=feed.job, interrupt=interrupt)],
                                 capture_output=True, text=True, timeout=60, env=env)
            assert out.returncode == 0, out.stderr
            delivered, state_step = map(int, out.stdout.split())
            assert (delivered, state_step) == (2, 3)
            # The interrupted call's batch (step 3) was taken, not delivered: it comes next.
            with shmfeed.Loader(job=feed.job, numpy=True) as L:
                assert next(L).step == 3

