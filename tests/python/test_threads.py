"""The Loader under threads, signals and fetch-ahead loops (found by review at stop 15,
each case failing before its fix): a close() from another thread while next() waits
(was a segfault), two threads sharing one Loader (duplicated and skipped steps, then a
wedged rank), Ctrl-C during a waiting next() (held off until the timeout), and batches
of a fetch-ahead loop whose int32 tokens or document starts were views of a slot the
next call handed back to the producers (wrong data, silently). Each case runs in its own
interpreter, so that a segfault is a failed test, not a dead pytest."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import HERE, Feed

PRELUDE = """
import sys, threading, time
import numpy as np
import shmfeed
from shmfeed import _native as N
sys.path.insert(0, {here!r})
from conftest import (InterruptingLock, ReturningLock, reference_tokens,
                      reference_doc_starts)
JOB = {job!r}
"""


def case(feed, body):
    return PRELUDE.format(here=HERE, job=feed.job) + textwrap.dedent(body)


def run_case(feed, body, timeout=60):
    out = subprocess.run([sys.executable, "-c", case(feed, body)], capture_output=True,
                         text=True, timeout=timeout, env=dict(os.environ))
    assert out.returncode == 0, \
        f"exit status {out.returncode}\nstdout: {out.stdout}\nstderr: {out.stderr}"
    return out.stdout


def test_close_from_another_thread_while_next_waits():
    with Feed("close-wait", producers=0) as feed:
        out = run_case(feed, """
            L = shmfeed.Loader(job=JOB, numpy=True)
            seen = []
            def wait():
                try:
                    L.next()
                except shmfeed.Error as e:
                    seen.append(e.code)
            t = threading.Thread(target=wait)
            t.start()
            time.sleep(0.3)
            t0 = time.monotonic()
            L.close()
            t.join(5)
            assert not t.is_alive(), "next() still waits after close()"
            assert seen == [N.SF_E_STATE], seen
            print("closed in", time.monotonic() - t0)
        """)
        assert "closed in" in out


def test_two_threads_share_one_stream():
    with Feed("two-threads", producers=2) as feed:
        out = run_case(feed, """
            L = shmfeed.Loader(job=JOB, numpy=True)
            steps = [[], []]
            def take(k):
                for _ in range(300):
                    steps[k].append(L.next().step)
            ts = [threading.Thread(target=take, args=(k,)) for k in range(2)]
            for t in ts: t.start()
            for t in ts: t.join(60)
            both = sorted(steps[0] + steps[1])
            assert both == list(range(600)), (both[:10], len(both), len(set(both)))
            # The rank goes on from there, alone.
            assert L.next().step == 600
            print("ok")
        """)
        assert "ok" in out


def test_ctrl_c_interrupts_a_waiting_next():
    with Feed("ctrl-c", producers=0) as feed:
        p = subprocess.Popen([sys.executable, "-c", case(feed, """
            import signal
            # Ctrl-C as a terminal gives it, whatever this suite inherited: a suite
            # started in the background by a shell without job control (`cmd &` in a
            # script) has SIGINT ignored, and Python then installs no KeyboardInterrupt.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            L = shmfeed.Loader(job=JOB, numpy=True)
            t0 = time.monotonic()
            try:
                print("waiting", flush=True)  # in the try: the signal may come at once
                L.next(timeout=20)
            except KeyboardInterrupt:
                print("interrupted after", time.monotonic() - t0, flush=True)
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        # Well below next()'s 20 s, with a loaded machine's margin for the exit.
        assert time.monotonic() - t0 < 10, ("KeyboardInterrupt waited for the timeout", out, err)
        assert p.returncode == 0 and "interrupted after" in out, (out, err)


def test_fetch_ahead_keeps_int32_tokens_and_document_starts():
    """README's loop fetches the next batch before training on the one in hand: with
    dtype int32 on a job of int32 tokens, and with the document starts and sources of
    the int64 default, the batch in hand must still be its own step's."""
    for extra, dtype in ((["--dtype", "i32", "--vocab", "100000"], "int32"),
                         (["--doc-starts", "3"], "int64")):
        with Feed("fetch-ahead", producers=1, extra=extra) as feed:
            out = run_case(feed, f"""
                vocab = 100000 if {dtype!r} == "int32" else 50257
                tdt = np.int32 if vocab > 65535 else np.uint16
                L = shmfeed.Loader(job=JOB, numpy=True, dtype={dtype!r})
                batch = L.next()
                for _ in range(60):
                    upcoming = L.next()
                    want = reference_tokens(0, batch.step, 4, 64, 1, vocab=vocab, dtype=tdt)
                    assert (batch.tokens == want).all(), f"step {{batch.step}}: tokens"
                    if batch.doc_starts is not None:
                        assert (batch.doc_starts == reference_doc_starts(want, 3)).all(), \\
                            f"step {{batch.step}}: document starts"
                    batch = upcoming
                print("ok")
            """)
            assert "ok" in out


def test_a_signal_handler_may_call_state_dict_or_close_inside_next():
    """The preemption pattern: a SIGTERM handler saves a checkpoint (state_dict()) or
    closes the Loader. It runs inside next(), which held a plain lock: the handler's
    call waited for that lock for good."""
    for call in ("state_dict", "close"):
        with Feed("sig-handler", producers=0) as feed:
            out = run_case(feed, f"""
                import signal
                L = shmfeed.Loader(job=JOB, numpy=True)
                got = []
                signal.signal(signal.SIGALRM, lambda *a: got.append(L.{call}()))
                signal.setitimer(signal.ITIMER_REAL, 0.3)
                try:
                    L.next(timeout=2)
                except shmfeed.Error as e:
                    print("raised", N.ERROR_NAMES[e.code])
                assert len(got) == 1, got
                if {call!r} == "state_dict":
                    assert got[0]["step"] == 0, got
                    assert L.state_dict() == got[0]
                else:
                    assert L.closed
                print("ok")
            """, timeout=30)
            want = "raised SF_E_TIMEOUT" if call == "state_dict" else "raised SF_E_STATE"
            assert want in out and "ok" in out, out


@pytest.mark.parametrize("where,every", [("next", 0.0002), ("anywhere", 0.00003)])
def test_an_interrupt_inside_next_loses_no_batch(where, every):
    """A KeyboardInterrupt raised inside next() (as Ctrl-C is, when a C call returns)
    lost the batch that call had taken: the library had moved on, state_dict() pointed
    past it, and the next call returned the one after. The handler raises only inside
    the Loader's own code: an interrupt after next() returned is the caller's.
    "anywhere": in any of the Loader's functions, every 30 us, so that a second
    interrupt lands while next() handles the first: one landing in the code that kept
    the batch lost it (a review: 1,657 steps of 20,000 skipped, counted as delivered)."""
    with Feed("interrupts", producers=2) as feed:
        out = run_case(feed, f"""
            import inspect, signal
            every = {every}
            if {where!r} == "next":
                inside = {{shmfeed.Loader.next.__code__, shmfeed.Loader._take.__code__}}
            else:
                inside = {{f.__code__ for f in vars(shmfeed.Loader).values()
                          if inspect.isfunction(f)}}
            def interrupt(sig, frame):
                if frame is not None and frame.f_code in inside:
                    raise KeyboardInterrupt
            L = shmfeed.Loader(job=JOB, numpy=True)
            signal.signal(signal.SIGALRM, interrupt)
            signal.setitimer(signal.ITIMER_REAL, every, every)
            steps, interrupts, t_end = [], 0, time.monotonic() + 60
            # At least 3,000 batches and 20 interrupts inside the Loader (how many land
            # there depends on the machine's load), within a minute.
            while (len(steps) < 3000 or interrupts < 20) and time.monotonic() < t_end:
                try:
                    b = L.next()
                except KeyboardInterrupt:
                    interrupts += 1
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    # The batch the interrupted call took is not counted as delivered.
                    assert L.state_dict()["step"] == len(steps), (L.state_dict(), len(steps))
                    signal.setitimer(signal.ITIMER_REAL, every, every)
                    continue
                steps.append(b.step)
                want = reference_tokens(0, b.step, 4, 64, 1)
                assert (b.tokens == want).all(), f"step {{b.step}}: tokens"
            signal.setitimer(signal.ITIMER_REAL, 0)
            assert steps == list(range(len(steps))), \
                [s for i, s in enumerate(steps) if s != i][:5]
            assert interrupts >= 20, interrupts
            print("ok", interrupts, "interrupts")
        """, timeout=120)
        assert "ok" in out, out


def test_timeouts_and_pickling_say_what_they_mean():
    with Feed("timeouts", producers=0) as feed:
        out = run_case(feed, """
            import pickle
            L = shmfeed.Loader(job=JOB, numpy=True)
            for t in (0, 0.0004):
                try:
                    L.next(timeout=t)
                except shmfeed.Error as e:
                    assert e.code == N.SF_E_TIMEOUT, (t, e)
                    assert "no batch within" in str(e), e
            try:
                pickle.dumps(L)
            except TypeError as e:
                assert "create the Loader in the process that reads it" in str(e), e
            else:
                raise AssertionError("pickled")
            print("ok")
        """)
        assert "ok" in out, out


def test_an_interrupt_as_next_lets_its_lock_go_keeps_the_batch():
    """The last instant an exception can land inside next() is its lock's release, after
    the batch was wrapped: the batch was then kept twice (returned again by the next
    call and wrapped again by the one after). A lock that raises there, after a
    handler's state_dict() (a checkpoint), stands in for the signal."""
    with Feed("lock-release", producers=2) as feed:
        out = run_case(feed, """
            L = shmfeed.Loader(job=JOB, numpy=True)
            saved = []
            lock = InterruptingLock(L, lambda: saved.append(L.state_dict()["step"]))
            assert L.next().step == 0
            lock.armed = True
            try:
                L.next()
            except KeyboardInterrupt:
                pass
            else:
                raise AssertionError("not interrupted")
            # The handler's checkpoint and the Loader agree: step 1 is not delivered.
            assert saved == [1] and L.state_dict()["step"] == 1, (saved, L.state_dict())
            steps = [L.next().step for _ in range(3)]
            assert steps == [1, 2, 3], steps
            print("ok")
        """)
        assert "ok" in out, out


def test_a_close_from_another_thread_as_next_returns_puts_no_batch_back():
    """next() lets its lock go with the batch it returns marked as being returned (for a
    signal handler's state_dict() or close() there, in its own thread). A close() from
    another thread that took the lock in that instant saw the mark and put the rank back
    at that batch, which next() then returned all the same: the next Loader of the rank
    served it again (a review). A lock that runs the other thread's close() as next()
    lets it go stands in for the thread switch."""
    with Feed("close-returning", producers=2) as feed:
        out = run_case(feed, """
            def close_in_another_thread():
                t = threading.Thread(target=L.close)
                t.start()
                t.join(10)
                assert not t.is_alive()

            L = shmfeed.Loader(job=JOB, numpy=True)
            assert L.next().step == 0
            lock = ReturningLock(L, close_in_another_thread)
            lock.armed = True
            b = L.next()
            assert not lock.armed and L.closed
            assert b.step == 1, b.step
            L2 = shmfeed.Loader(job=JOB, numpy=True)
            steps = [L2.next().step for _ in range(2)]
            assert steps == [2, 3], steps
            print("ok")
        """)
        assert "ok" in out, out


def test_close_from_a_handler_inside_any_call_waits_for_the_call():
    """close() from a signal handler that runs inside stats(), state_dict() or another
    call tore the handle down under the call, which then passed it to the library (a
    segfault). It now takes effect as the call returns."""
    with Feed("close-inside", producers=1) as feed:
        out = run_case(feed, """
            for method, c_name in (("stats", "sf_consumer_window"),
                                   ("counters", "sf_consumer_stats"),
                                   ("state_dict", "sf_consumer_state"),
                                   ("release", "sf_consumer_release")):
                L = shmfeed.Loader(job=JOB, numpy=True)
                L.next()
                real = L._lib
                class Lib:
                    def __getattr__(self, name):
                        f = getattr(real, name)
                        if name != c_name:
                            return f
                        def in_handler(*args):
                            L.close()  # as a handler that runs just before the call
                            assert not L._h is None, "torn down inside the call"
                            return f(*args)
                        return in_handler
                L._lib = Lib()
                getattr(L, method)()
                assert L.closed and L._h is None, method
                try:
                    L.next()
                except shmfeed.Error as e:
                    assert e.code == N.SF_E_STATE, e
                else:
                    raise AssertionError("next() after close()")
                del L
            print("ok")
        """)
        assert "ok" in out, out


def test_a_handler_that_moves_the_loader_inside_next_is_refused():
    """A signal handler that called next(), load_state_dict() or release() while next()
    was inside its library call (the lock lets its own thread in again) took or reset the
    batch that call had just taken, and the interrupted next() then returned an empty one:
    step 2^64 - 1 (a review: 740 of 20,000 batches). A handler may read state_dict() or
    close() the Loader; these three are refused with SF_E_STATE and change nothing. The
    handler runs where a signal would: right after the library's next()."""
    with Feed("reentrant", producers=2) as feed:
        out = run_case(feed, """
            for inner in ("next", "load_state_dict", "release"):
                L = shmfeed.Loader(job=JOB, numpy=True)
                L.load_state_dict(dict(L.state_dict(), samples=0, provenance=0))
                s0 = L.state_dict()
                assert L.next().step == 0
                real, refused = L._next, []
                first = [True]
                def then_handler(*args):
                    # The first call finds nothing ready, as after a seek whose refill is
                    # not done: next() calls again, and the handler runs on the call that
                    # took the batch (the CI's run had counted two refusals).
                    r = N.SF_E_AGAIN if first[0] else real(*args)
                    first[0] = False
                    if r:
                        return r
                    try:
                        if inner == "load_state_dict":
                            L.load_state_dict(s0)
                        else:
                            getattr(L, inner)()
                    except shmfeed.Error as e:
                        refused.append(e.code)
                    return r
                L._next = then_handler
                b = L.next()
                L._next = real
                assert b.step == 1 and (b.tokens == reference_tokens(0, 1, 4, 64, 1)).all(), \\
                    (inner, b.step)
                assert refused == [N.SF_E_STATE], (inner, refused)
                assert [L.next().step for _ in range(2)] == [2, 3], inner
                L.close()
                del L, b
            print("ok")
        """)
        assert "ok" in out, out
