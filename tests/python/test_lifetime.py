"""The Loader's lifetime (issue 12 item 9, issue 17 item 7): methods after close() raise,
and a batch's arrays keep the rank's attachment (its mapping of the arena) alive, so they
stay readable after close() or the Loader's collection; the rank is detached when the
last array goes. Each case runs in its own interpreter, so that a segfault (what every
one of them did before) is a failed test, not a dead pytest."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import HERE, Feed

PRELUDE = """
import gc, sys, weakref
import numpy as np
import shmfeed
from shmfeed import _native as N
sys.path.insert(0, {here!r})
from conftest import InterruptingLock, reference_tokens, reference_doc_starts
JOB = {job!r}
def expected(step, dtype=np.uint16):
    return reference_tokens(0, step, 4, 64, 1, dtype=dtype)
def interrupted_next(L):  # a next() that takes its batch and is interrupted as it returns
    InterruptingLock(L).armed = True
    try:
        L.next()
    except KeyboardInterrupt:
        pass
"""


def run_case(feed, body):
    code = PRELUDE.format(here=HERE, job=feed.job) + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert out.returncode == 0, \
        f"exit status {out.returncode}\nstdout: {out.stdout}\nstderr: {out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def feed():
    with Feed("life", extra=["--doc-starts", "3"]) as f:
        yield f


CALLS = ["L.next()", "next(L)", "L.state_dict()", "L.stats()", "L.counters()", "L.release()",
         "L.load_state_dict(state)"]


def test_methods_after_close_raise(feed):
    out = run_case(feed, f"""
        for call in {CALLS!r}:
            L = shmfeed.Loader(job=JOB)
            state = L.state_dict()
            L.close()
            try:
                eval(call)
            except shmfeed.Error as e:
                assert e.code == N.SF_E_STATE and "closed Loader" in str(e), (call, e)
            else:
                raise AssertionError(f"{{call}}: no error")
            assert L.closed
            L.close()  # closing twice does nothing
            print(call, "raised")
    """)
    assert out.count("raised") == len(CALLS), out


@pytest.mark.parametrize("numpy_mode", [False, True])
@pytest.mark.parametrize("dtype", ["native", "int64"])
def test_arrays_outlive_the_loader(feed, numpy_mode, dtype):
    """Zero-copy arrays (native) hold the rank until the last goes; int64 batches are
    copies (tokens, document starts), which read their batch after close() as well but
    hold nothing: the rank is free at once."""
    out = run_case(feed, f"""
        numpy_mode, dtype = {numpy_mode}, {dtype!r}
        as_np = (lambda a: a) if numpy_mode else (lambda a: a.numpy())
        for how in ("close", "del", "with"):
            L = shmfeed.Loader(job=JOB, numpy=numpy_mode, dtype=dtype)
            L.load_state_dict(dict(L.state_dict(), samples=0))
            for _ in range(3):
                b = L.next()
            tokens, x, y, docs, step = b.tokens, b.x, b.y, b.doc_starts, b.step
            zero_copy = L.dtype == "native"  # torch before 2.3 gets int32 copies instead
            del b
            if how == "close":
                L.close()
            elif how == "del":
                del L
                gc.collect()
            else:
                with L:
                    pass
            # The mapping is still there: the arrays read the batch they showed.
            want = expected(step)
            assert np.array_equal(as_np(tokens), want.astype(as_np(tokens).dtype))
            assert np.array_equal(as_np(x), want[:, :-1].astype(as_np(x).dtype))
            assert np.array_equal(as_np(y), want[:, 1:].astype(as_np(y).dtype))
            assert np.array_equal(docs, reference_doc_starts(want, 3))
            # A zero-copy rank is held until the last array goes...
            try:
                shmfeed.Loader(job=JOB).close()
            except shmfeed.Error as e:
                assert zero_copy, e
                assert e.code == N.SF_E_BUSY and "arrays of batches" in str(e), e
            else:
                assert not zero_copy, "the rank was free while views of it lived"
            assert np.array_equal(as_np(tokens), want.astype(as_np(tokens).dtype))
            del tokens, x, y, docs
            gc.collect()
            # ... and then it is free, at the position the closed Loader reached.
            with shmfeed.Loader(job=JOB) as L2:
                assert L2.next().step == step + 1
            print(how, "ok")
    """)
    assert out.split() == ["close", "ok", "del", "ok", "with", "ok"], out


def test_a_failed_constructor_detaches_at_once(feed):
    run_case(feed, """
        try:
            shmfeed.Loader(job=JOB, rank=0, world_size=5)
        except shmfeed.Error as e:
            assert e.code == N.SF_E_GEOMETRY
        with shmfeed.Loader(job=JOB) as L:
            L.next()
        print("ok")
    """)


@pytest.mark.parametrize("numpy_mode", [True, False], ids=["numpy", "torch"])
def test_a_loader_dropped_frees_its_rank_at_once(feed, numpy_mode):
    """`del L` with no batch kept detaches: its current-stream getter held the Loader (a
    reference cycle), so the rank stayed attached until the garbage collector ran, and a
    new Loader of the rank was refused as busy."""
    run_case(feed, f"""
        gc.disable()
        for _ in range(2):
            L = shmfeed.Loader(job=JOB, numpy={numpy_mode!r})
            L.next()
            del L
        print("ok")
    """)


def test_a_loader_without_world_size_says_it_reads_one_rank_of_several():
    """`shmfeed run JOB -- python train.py` of a job of 2 ranks, no torchrun: the Loader
    read rank 0's batches and nothing said that rank 1's were never read (a new user's
    trial). It warns; with WORLD_SIZE, or world_size=, it does not."""
    with Feed("noworld", ranks=2) as feed:
        env = {k: v for k, v in os.environ.items()
               if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
        code = PRELUDE.format(here=HERE, job=feed.job) + textwrap.dedent("""
            import warnings
            for kw in ({}, {"rank": 0, "world_size": 2}):
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    with shmfeed.Loader(job=JOB, numpy=True, **kw) as L:
                        L.next()
                print(len(w), w[0].message if w else "")
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith("1 ") and "WORLD_SIZE is not set" in lines[0] and \
            "of the job's 2 ranks" in lines[0], lines
        assert lines[1] == "0 ", lines


def test_device_tensors_outlive_the_loader():
    """GPU mode: the device buffers are freed by the detach, so a batch's CUDA tensors
    keep them too. An int32 job, so that the tensor is the device buffer itself (uint16
    tokens are widened into a tensor of torch's own on torch < 2.3). Runs only where
    torch sees a GPU (never on this project's machines so far)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU visible to torch")
    with Feed("life-gpu", extra=["--dtype", "i32"]) as feed:
        out = run_case(feed, """
        import torch
        L = shmfeed.Loader(job=JOB, device="cuda:0")
        L.load_state_dict(dict(L.state_dict(), samples=0))
        b = L.next()
        tokens, step = b.tokens, b.step
        del b
        L.close()
        torch.cuda.synchronize()
        got = tokens.cpu().numpy()
        assert np.array_equal(got, expected(step, dtype=np.int32))
        del tokens
        gc.collect()
        with shmfeed.Loader(job=JOB, device="cuda:0") as L2:
            assert L2.next().step == step + 1
        print("ok")
    """)
    assert out.strip() == "ok"


def test_a_fork_while_another_thread_is_in_a_loader_call():
    """fork() while another thread of the parent is inside a Loader call (holds its lock,
    as a thread waiting in next() does): the child inherited the lock held by a thread it
    does not have, and every method, close() too, hung for good. A new Loader for the
    rank in the child was told the rank is held in this process, when the parent holds
    it. Now the child's calls answer at once, and refuse: state_dict() and stats() gave
    the parent's figures at the fork as the child's."""
    with Feed("fork", producers=0) as f:
        run_case(f, """
        import faulthandler, os, threading
        L = shmfeed.Loader(job=JOB)
        held, done = threading.Event(), threading.Event()
        def hold():
            with L._lock:  # where a next() waiting for a batch is
                held.set()
                done.wait()
        th = threading.Thread(target=hold)
        th.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(10, exit=True)  # a hang fails the test
            code = 0
            try:
                L.next(timeout=0)
                code = 2
            except shmfeed.Error as e:
                if e.code != N.SF_E_STATE:
                    print("child: next:", e, flush=True)
                    code = 3
            # The parent's figures at the fork were given as the child's own.
            for call in (L.state_dict, L.stats):
                try:
                    call()
                    code = code or 6
                except shmfeed.Error as e:
                    if e.code != N.SF_E_STATE or "fork" not in str(e):
                        print("child:", call.__name__, e, flush=True)
                        code = code or 7
            try:
                shmfeed.Loader(job=JOB)
                code = 4
            except shmfeed.Error as e:
                if e.code != N.SF_E_BUSY or "held in this process" in str(e):
                    print("child: new Loader:", e, flush=True)
                    code = code or 5
            L.close()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        done.set()
        th.join()
        assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
        L.close()
        """)


# A library whose function `name` raises KeyboardInterrupt as it returns, as a Ctrl-C
# handled at that instant does.
INTERRUPT = """
class Interrupting:
    def __init__(self, lib, name, before=False):
        self._lib, self._name, self._before = lib, name, before
    def __getattr__(self, attr):
        f = getattr(self._lib, attr)
        if attr != self._name:
            return f
        def interrupted(*args):
            if self._before:  # a Ctrl-C just before the call: once
                self._name = None
            else:
                f(*args)
            raise KeyboardInterrupt
        return interrupted
real = N.lib()
"""


def test_an_interrupt_as_attach_returns_leaves_the_rank_free(feed):
    """Ctrl-C during the attach (a GPU attach takes a while) landed after the library had
    attached and before the Loader owned the handle: the rank stayed taken until the
    process exited, every later Loader of it refused with SF_E_BUSY."""
    out = run_case(feed, INTERRUPT + textwrap.dedent("""
        N.lib = lambda: Interrupting(real, "sf_consumer_attach_ranks")
        try:
            shmfeed.Loader(job=JOB)
        except KeyboardInterrupt:
            print("interrupted")
        N.lib = lambda: real
        L = shmfeed.Loader(job=JOB)
        print("attached again")
    """))
    assert "interrupted" in out and "attached again" in out, out


def test_an_interrupt_as_a_seek_returns_drops_the_batch_kept(feed):
    """A next() interrupted as it returned keeps its batch for the next call; a
    load_state_dict() interrupted as its seek returned did not drop it, so the next call
    delivered that batch of before the seek, from a slot already released."""
    out = run_case(feed, INTERRUPT + textwrap.dedent("""
        L = shmfeed.Loader(job=JOB, numpy=True)
        L.load_state_dict(dict(L.state_dict(), samples=0))
        start = L.state_dict()
        for _ in range(3):
            L.next()
        plain_next = L._next
        def interrupted_next(*args):
            r = plain_next(*args)
            if r:  # not ready: next() calls again; the interrupt is for a taken batch
                return r
            raise KeyboardInterrupt
        L._next = interrupted_next
        try:
            L.next()
        except KeyboardInterrupt:
            pass
        L._next = plain_next
        L._lib = Interrupting(real, "sf_consumer_seek")
        try:
            L.load_state_dict(start)
        except KeyboardInterrupt:
            pass
        L._lib = real
        assert L.state_dict()["step"] == 0, L.state_dict()
        steps = [L.next().step for _ in range(3)]
        assert steps == [0, 1, 2], steps
        assert (L.next().tokens == expected(3)).all()
        print("ok")
    """))
    assert "ok" in out, out


def test_a_message_cut_inside_a_character_is_still_an_error(feed):
    """The library cuts its message at 512 bytes, which may fall inside a UTF-8
    character: decoding it raised UnicodeDecodeError instead of shmfeed.Error."""
    out = run_case(feed, """
        try:
            shmfeed.Loader(job="\\u00e9" * 300, numpy=True)
        except shmfeed.Error as e:
            assert "invalid job name" in str(e), e
            print("refused")
    """)
    assert "refused" in out, out


def test_errors_of_any_code_can_be_made(feed):
    """shmfeed.Error(code, message) of a code that is not a number raised TypeError."""
    out = run_case(feed, """
        for code in (None, "foo", 3.5):
            e = shmfeed.Error(code, "bar")
            assert e.message == "bar" and "bar" in str(e), e
        assert "x" in str(shmfeed.Error(message="x"))
        print("made")
    """)
    assert "made" in out, out


def test_world_size_warning_as_an_error_lets_the_rank_go():
    """Under `-W error` (pytest's filterwarnings = error) the WORLD_SIZE warning became an
    exception after the constructor's clean-up: the half-built Loader kept the rank, and
    a retry in the `except` was refused as busy (a review)."""
    with Feed("noworld-err", ranks=2) as feed:
        env = {k: v for k, v in os.environ.items()
               if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
        code = PRELUDE.format(here=HERE, job=feed.job) + textwrap.dedent("""
            import warnings
            warnings.simplefilter("error")
            try:
                shmfeed.Loader(job=JOB, rank=1, numpy=True)
            except RuntimeWarning as w:
                assert "WORLD_SIZE is not set" in str(w), w
                with shmfeed.Loader(job=JOB, rank=1, world_size=2, numpy=True) as L:
                    assert L.next().step == 0
            else:
                raise AssertionError("no warning")
            print("ok")
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, env=env)
        assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_closed_after_an_interrupt_the_next_loader_starts_at_the_kept_batch():
    """Ctrl-C or SIGTERM inside next() keeps the batch that call took (state_dict() says
    it comes next), but close() dropped it with the slot the library held: the next
    Loader of the rank, in this process or after a restart, started one step later
    (a review: step 6 saved, step 7 delivered). close() now puts the rank back at the
    kept batch. A lock that raises as next() lets it go stands in for the signal."""
    with Feed("close-kept", producers=2) as feed:
        run_case(feed, """
            for how in ("close", "del"):
                L = shmfeed.Loader(job=JOB, numpy=True)
                L.load_state_dict(dict(L.state_dict(), samples=0, provenance=0))
                assert L.next().step == 0
                interrupted_next(L)
                saved = L.state_dict()
                assert saved["step"] == 1, saved
                if how == "close":
                    L.close()
                del L
                gc.collect()
                L2 = shmfeed.Loader(job=JOB, numpy=True)
                assert L2.state_dict()["samples"] == saved["samples"], (how, L2.state_dict())
                b = L2.next()
                assert b.step == 1 and (b.tokens == expected(1)).all(), (how, b.step)
                L2.close()
                del L2, b
                gc.collect()
            print("ok")
        """)


def test_a_second_interrupt_in_close_keeps_the_kept_batch():
    """A second Ctrl-C inside close() (landing before its seek to the batch an interrupted
    next() kept) lost that batch: close() had forgotten it before seeking, and closing
    again did not seek, so the next Loader started a step later (a review). The batch is
    forgotten only after the seek; closing again seeks."""
    with Feed("close-twice", producers=2) as feed:
        run_case(feed, INTERRUPT + textwrap.dedent("""
            L = shmfeed.Loader(job=JOB, numpy=True)
            L.load_state_dict(dict(L.state_dict(), samples=0, provenance=0))
            assert L.next().step == 0
            interrupted_next(L)
            assert L.state_dict()["step"] == 1
            L._lib = Interrupting(real, "sf_consumer_seek", before=True)
            try:
                L.close()
            except KeyboardInterrupt:
                print("interrupted")
            L._lib = real
            L._closing = False
            L.close()
            del L
            gc.collect()
            L2 = shmfeed.Loader(job=JOB, numpy=True)
            b = L2.next()
            assert b.step == 1 and (b.tokens == expected(1)).all(), b.step
            print("ok")
        """))


DETACH_INTERRUPTED = """
from shmfeed import loader as SL
plain_detach = SL._Attachment.detach
def interrupted_detach(self):
    SL._Attachment.detach = plain_detach  # once
    raise KeyboardInterrupt
"""


def test_an_interrupt_as_a_loader_is_detached_leaves_the_rank_free(feed):
    """Ctrl-C landing as a closed or dropped Loader's attachment was detached (in its
    __del__, where Python only prints an exception) lost the handle: the rank stayed taken
    in the process, every later Loader of it refused with SF_E_BUSY, and its held batch
    came again in the next process (a review). The handle is detached by the next attach
    of the process, or at its exit."""
    out = run_case(feed, DETACH_INTERRUPTED + textwrap.dedent("""
        for how in ("close", "drop"):
            L = shmfeed.Loader(job=JOB, numpy=True)
            L.load_state_dict(dict(L.state_dict(), samples=0, provenance=0))
            assert [L.next().step for _ in range(3)] == [0, 1, 2]
            SL._Attachment.detach = interrupted_detach
            if how == "close":
                L.close()
            del L
            gc.collect()
            assert SL._Attachment.detach is plain_detach, "the detach was not tried"
            L = shmfeed.Loader(job=JOB, numpy=True)
            b = L.next()
            assert b.step == 3 and (b.tokens == expected(3)).all(), (how, b.step)
            L.close()
            del L, b
            gc.collect()
        print("ok")
    """))
    assert "ok" in out, out
    # At exit: the batch held is not handed out again by the next process.
    run_case(feed, DETACH_INTERRUPTED + textwrap.dedent("""
        L = shmfeed.Loader(job=JOB, numpy=True)
        L.load_state_dict(dict(L.state_dict(), samples=0, provenance=0))
        assert [L.next().step for _ in range(3)] == [0, 1, 2]
        SL._Attachment.detach = interrupted_detach
        L.close()
        del L
        gc.collect()
    """))
    out = run_case(feed, """
        L = shmfeed.Loader(job=JOB, numpy=True)
        b = L.next()
        assert b.step == 3, b.step
        print("ok")
    """)
    assert "ok" in out, out


def test_a_loader_collected_after_its_attachment_in_a_cycle():
    """A Loader in a reference cycle with a batch kept from an interrupted next(): the
    cyclic collector may finalize its attachment first, which detached the handle, and
    then the Loader's finalizer seeked with it (a freed handle before; a NULL one, and a
    segfault, once the detach cleared the box; a review). The attachment's finalizer
    leaves the detach to the Loader's, which puts the kept batch back first: the next
    Loader starts at it. A collection forced while the Loader is made puts the
    attachment first in the collector's order."""
    with Feed("cycle", producers=2) as feed:
        out = run_case(feed, """
        import faulthandler
        faulthandler.enable()
        from shmfeed import loader as SL
        plain = SL.Loader._pick_device
        def collecting(self, *a):
            r = plain(self, *a)
            gc.collect(0)
            return r
        SL.Loader._pick_device = collecting
        L = shmfeed.Loader(job=JOB, numpy=True)
        SL.Loader._pick_device = plain
        assert L.next().step == 0
        interrupted_next(L)
        L.cycle = L
        del L
        gc.collect()
        L = shmfeed.Loader(job=JOB, numpy=True)
        b = L.next()
        assert b.step == 1 and (b.tokens == expected(1)).all(), b.step
        print("ok")
    """)
    assert "ok" in out, out
