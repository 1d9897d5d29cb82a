"""shmfeed.Loader in one process: content, views, errors, resume, end of data."""

import ctypes
import errno
import json
import os
import subprocess
import threading
import time

import numpy as np
import pytest
import torch

import shmfeed
from shmfeed import _native as N

from conftest import FIXTURE, Feed, reference_doc_starts


def test_struct_mirrors_match_the_c_layout():
    abi = json.loads(subprocess.check_output([FIXTURE, "--abi"], text=True))
    for cname, mirror in N.MIRRORS.items():
        assert ctypes.sizeof(mirror) == abi[cname], cname
        for fname, _ in mirror._fields_:
            off, size = abi[f"{cname}.{fname}"]
            field = getattr(mirror, fname)
            assert (field.offset, field.size) == (off, size), f"{cname}.{fname}"


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
                assert np.array_equal(b.tokens.numpy(), want.astype(np.int32))
                assert torch.equal(b.x, b.tokens[:, :-1]) and torch.equal(b.y, b.tokens[:, 1:])
                assert b.digest == shmfeed.digest(want.tobytes())
                assert np.array_equal(b.doc_starts, reference_doc_starts(want, 5))
        for L in loaders:
            L.close()


def test_numpy_views_are_zero_copy_and_read_only():
    with Feed("numpy", extra=["--dtype", "i32", "--vocab", "100277"]) as feed:
        with shmfeed.Loader(job=feed.job, numpy=True) as L:
            b = L.next()
            assert b.tokens.dtype == np.int32
            assert not b.tokens.flags.writeable
            assert not b.tokens.flags.owndata
            assert np.array_equal(b.tokens, feed.expected(0, 0, vocab=100277, dtype=np.int32))
            assert np.shares_memory(b.x, b.tokens) and np.shares_memory(b.y, b.tokens)
            assert b.doc_starts is None
        with shmfeed.Loader(job=feed.job) as L:  # torch views int32 in place
            b = L.next()
            assert b.tokens.dtype == torch.int32 and b.step == 1


def test_provenance_is_the_chain_of_digests():
    with Feed("prov") as feed:
        with shmfeed.Loader(job=feed.job) as L:
            chain = 0
            for _ in range(6):
                b = L.next()
                rec = b.step.to_bytes(8, "little") + b.digest.to_bytes(8, "little")
                chain = shmfeed.digest(rec, chain)
            assert L.stats()["provenance"] == chain == L.state_dict()["provenance"]


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


def test_errors_carry_the_c_message():
    with pytest.raises(shmfeed.Error) as e:
        shmfeed.Loader(job="py-no-such-job", rank=0, world_size=1)
    assert e.value.code == -errno.ENOENT and "py-no-such-job" in str(e.value)
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
            assert gone - killed[0] < 2.0, f"JobGone {gone - killed[0]:.3f} s after the kill"
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
