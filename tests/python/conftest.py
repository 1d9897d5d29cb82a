"""Shared fixtures of the Python tests: the feed fixture program (a job served by
deterministic synthetic producers, see tests/unit/consumer/feed.h), a reference of its
content computed independently here, and a helper that starts rank processes the way
torchrun does."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.environ.get("SHMFEED_FIXTURE")
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
ODD = np.uint64(0xD1B54A32D192ED03)
DOC_MOD = 61

if not FIXTURE:
    pytest.skip("SHMFEED_FIXTURE is set by `meson test` and scripts/test-install",
                allow_module_level=True)

_counter = [0]


@pytest.fixture(autouse=True)
def own_index_cache(tmp_path, monkeypatch):
    """Index caches of the corpora a test makes stay in its temporary directory."""
    monkeypatch.setenv("SHMFEED_CACHE_DIR", str(tmp_path / "index-cache"))


def unique_job(tag):
    _counter[0] += 1
    return f"py-{tag}-{os.getpid()}-{_counter[0]}"


def mix(z):
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def reference_tokens(global_rank, step, B, T, world_size, seed=1337, vocab=50257,
                     dtype=np.uint16):
    """What global rank `global_rank` must receive at `step`: [B, T+1] tokens."""
    k = (np.uint64(step * B * world_size + global_rank * B) +
         np.arange(B, dtype=np.uint64))[:, None]
    j = np.arange(T + 1, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        h = mix(np.uint64(seed) + k * GOLDEN + j * ODD)
    return (h % np.uint64(vocab)).astype(dtype)


def reference_doc_starts(tokens, D):
    out = np.full((tokens.shape[0], D), 0xFFFFFFFF, dtype=np.uint32)
    for b, row in enumerate(tokens):
        pos = np.nonzero(row.astype(np.int64) % DOC_MOD == 0)[0][:D]
        out[b, :len(pos)] = pos
    return out


class ReturningLock:
    """Stands in for a Loader's lock: once armed, it calls `at_release` as it is let go
    with a batch taken (the last instant an exception can land inside next(), after the
    batch was wrapped), once. (A release of next() whose library call found nothing
    ready yet, as after a seek, passes: it would test no batch.)"""

    def __init__(self, loader, at_release):
        self.loader, self.real, self.at_release, self.armed = \
            loader, loader._lock, at_release, False
        loader._lock = self

    def __enter__(self):
        return self.real.__enter__()

    def __exit__(self, *exc):
        self.real.__exit__(*exc)
        if self.armed and self.loader._returning is not None:
            self.armed = False
            self.at_release()

    def __getattr__(self, name):
        return getattr(self.real, name)


class InterruptingLock(ReturningLock):
    """A ReturningLock that raises KeyboardInterrupt there, first calling `before` (a
    handler's checkpoint), as a signal would."""

    def __init__(self, loader, before=None):
        def interrupt():
            if before:
                before()
            raise KeyboardInterrupt
        super().__init__(loader, interrupt)


class Feed:
    """A job served by feed_fixture until the context exits."""

    def __init__(self, tag, ranks=1, world_size=None, rank_base=0, batch=4, seq_len=64,
                 slots=4, producers=2, extra=()):
        self.job = unique_job(tag)
        self.batch, self.seq_len = batch, seq_len
        self.world_size = world_size or ranks
        args = [FIXTURE, "--job", self.job, "--ranks", str(ranks),
                "--world-size", str(self.world_size), "--rank-base", str(rank_base),
                "--batch", str(batch), "--seq-len", str(seq_len), "--slots", str(slots),
                "--producers", str(producers), "--lifetime", "120", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "ready":
            self.proc.kill()
            raise RuntimeError(f"feed_fixture did not start: {args}")
        self.config_digest = int(line[2], 16)

    def expected(self, global_rank, step, **kw):
        return reference_tokens(global_rank, step, self.batch, self.seq_len, self.world_size,
                                **kw)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        assert not os.path.exists(f"/dev/shm/shmfeed.{self.job}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rank_env(job, rank, local_rank, world_size, local_world_size, port=None):
    """The environment torchrun gives a rank (plus the job name shmfeed run sets)."""
    env = dict(os.environ)
    env.update({"SHMFEED_JOB": job, "RANK": str(rank), "LOCAL_RANK": str(local_rank),
                "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(local_world_size),
                "GROUP_RANK": str(rank // local_world_size)})
    if port is not None:
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    return env


def spawn_worker(env, *args):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "rank_worker.py"), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}): {err}"
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else None


def free_port():
    """A free tcp port on loopback below the kernel's ephemeral range (32768 and up), so
    that no connection another test opens meanwhile (gloo, torchrun) takes it before the
    caller binds it, as a port the kernel picked could be."""
    import random
    import socket
    for _ in range(100):
        port = random.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767")


# For the tests of a GPU behind the host (tests/python/test_gpu_*.py): the part of a rank's
# script where the Loader `L` waits for a copy queued behind the GPU's work. next() with
# a 0.2 s timeout: `timed_out` [code, message] or None, `t0`..`t1` its time; next() without
# one, interrupted by SIGALRM's KeyboardInterrupt after 0.3 s: `interrupted`, `t1`..`t2`.
WAIT_BEHIND = """
t0 = time.monotonic()
try:
    L.next(timeout=0.2)
    timed_out = None
except shmfeed.Error as e:
    timed_out = [e.code, str(e)]
t1 = time.monotonic()


def interrupt(*_):
    raise KeyboardInterrupt


signal.signal(signal.SIGALRM, interrupt)
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    L.next()
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
t2 = time.monotonic()
"""
