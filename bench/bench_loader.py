#!/usr/bin/python3
"""bench_loader: the time to get the next batch in a training loop, shmfeed against the
usual ways, over the same uint16 token file and geometry (B=12, T=1024 by default;
--batch and --seq-len set others), in one run.

  shmfeed C       sf_consumer_next() (bench_consumer, producers ahead)
  shmfeed Python  shmfeed.Loader.next(), producers ahead: NumPy views (zero copy); torch
                  tensors of a uint16 arena (torch < 2.3 has no uint16, so the Loader
                  widens the tokens to int32 into a buffer per slot: one copy); torch
                  tensors of an int32 arena (zero copy)
  get_batch       nanoGPT's get_batch on CPU: np.memmap + torch.stack of B random windows
  numpy gather    the windows gathered with one vectorized np.take into a preallocated array
  DataLoader      torch DataLoader, 2 workers, pin_memory=True, a Dataset of random
                  windows (torch turns pin_memory off when it sees no GPU)

With two or more CPUs, the producers run on CPU 1 and this process on CPU 0 while
shmfeed and the in-process baselines are timed (on a training node producers have cores
of their own; on a 2-CPU machine the scheduler otherwise runs a woken producer on the
consumer's CPU, in the middle of its next()); the DataLoader gets all CPUs back for its
workers.

--sweep instead times next() alone at three payload sizes (16 KiB, 4 MiB and 64 MiB of
uint16 tokens: B x (T+1) = 8 x 1024, 8 x 262144, 32 x 1048576), with checksums off, on
(every step verified) and verified one step in 16 (integrity.verify_every: 16): the C
call (bench_consumer, producers pinned to the last CPU, the caller to the first) and the
Python Loader's zero-copy NumPy view. With checksums off next() reads no payload byte, so
its time should not grow with the payload; with them on, a verified step hashes it all.
Each call is timed once its step is published, after 32 MiB of a private buffer were
written (--sweep-evict BYTES; 0: none), as a training step would: every size is then
timed with the same cold caches. Without it, a call that waited long for a large batch
finds its caches evicted by whatever ran on its CPU meanwhile (on this shared 2-CPU
machine, other processes), and one that waited microseconds for a small batch does not.

Each method is timed per call, with a simulated training step (a busy wait of --step-us)
between calls, so that producers and DataLoader workers can run ahead as in training.
Ratios are p50(method) / p50(shmfeed Python). Prints the machine and a table; --json
FILE also writes the percentiles (p50, p95, p99, p99.9) per method, --csv FILE every
timed call as CSV rows (method, ns), for a distribution plot.

--device cuda:N instead times the batch on a GPU: from the call until the batch is on the
device (the call, then the current stream synchronized), int64 x and y as a model takes
them: shmfeed.Loader on the device (the arena's slot copied by DMA from the registered
shared memory, widened there), nanoGPT's get_batch in its GPU branch (pin_memory(), then
a non-blocking copy), the NumPy gather into a pinned buffer copied the same way, and the
DataLoader with pin_memory=True copied the same way. The host's part of the call is
reported beside it (a non-blocking copy returns before it is done). The gather's and the
DataLoader's y are views (the Loader's and get_batch's are contiguous: a small advantage
to those two), and the DataLoader's time depends on its workers keeping up with the
simulated step (2 workers, --step-us).

usage: bench_loader.py [--fixture PATH] [--bench-consumer PATH] [--tokens FILE]
                       [--ntokens N] [--batch B] [--seq-len T] [--calls N]
                       [--c-steps N] [--step-us US] [--json FILE] [--csv FILE]
       bench_loader.py --sweep [--json FILE] [--sweep-calls 3000,500,60]
                       [--sweep-evict BYTES]
       bench_loader.py --device cuda:N [--calls N] [--json FILE] ...
"""

import argparse
import csv
import os
import platform
import signal
import subprocess
import sys
import time
import json

import numpy as np
import torch

import benchlib as bl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sanitized(build_dir):
    """Whether meson configured `build_dir` with a sanitizer (CPython cannot load such a
    libshmfeed.so, and its timings mean nothing)."""
    try:
        with open(os.path.join(build_dir, "meson-info", "intro-buildoptions.json")) as f:
            opts = {o["name"]: o["value"] for o in json.load(f)}
    except (OSError, ValueError, KeyError):
        return False
    return opts.get("b_sanitize", "none") != "none"


def default_build(name):
    """The newest `name` among the build directories of the source tree, sanitizer builds
    left out."""
    found = [os.path.join(ROOT, d, name) for d in os.listdir(ROOT)
             if d.startswith("build") and not sanitized(os.path.join(ROOT, d))]
    found = [p for p in found if os.path.exists(p)]
    return max(found, key=os.path.getmtime) if found else None


ap = argparse.ArgumentParser()
ap.add_argument("--fixture", default=os.environ.get("SHMFEED_FIXTURE") or
                default_build("tests/python/feed_fixture"))
ap.add_argument("--bench-consumer", default=default_build("bench/bench_consumer"))
ap.add_argument("--lib", default=os.environ.get("SHMFEED_LIB") or default_build("libshmfeed.so"))
ap.add_argument("--tokens", default="/tmp/shmfeed_bench_tokens.u16")
ap.add_argument("--ntokens", type=int, default=50_000_000)
ap.add_argument("--batch", type=int, default=12)
ap.add_argument("--seq-len", type=int, default=1024)
ap.add_argument("--calls", type=int, default=3000)
ap.add_argument("--c-steps", type=int, default=20000, help="calls of the C benchmark")
ap.add_argument("--step-us", type=float, default=300.0)
ap.add_argument("--json", help="write the percentiles per method to this file")
ap.add_argument("--csv", help="write every timed call as method,ns to this file")
ap.add_argument("--sweep", action="store_true",
                help="time next() alone at 16 KiB, 4 MiB and 64 MiB payloads")
ap.add_argument("--sweep-calls", default="3000,500,60",
                help="calls per payload size in --sweep (16 KiB, 4 MiB, 64 MiB)")
ap.add_argument("--device", help="time batches delivered on this CUDA device (cuda:N)")
ap.add_argument("--sweep-evict", type=int, default=32 << 20,
                help="bytes written before each timed call in --sweep (0: none)")
args = ap.parse_args()
B, T = args.batch, args.seq_len
PCTS = (50, 95, 99, 99.9)

os.environ["SHMFEED_LIB"] = args.lib
sys.path.insert(0, os.path.join(ROOT, "python"))
import shmfeed  # noqa: E402


def ensure_tokens(path, n):
    if os.path.exists(path) and os.path.getsize(path) == 2 * n:
        return
    rng = np.random.default_rng(1337)
    tmp = path + ".tmp"
    rng.integers(0, 50257, size=n, dtype=np.uint16).tofile(tmp)
    os.rename(tmp, path)


def busy(us):
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


def timed(fn, calls, step_us, warmup=50):
    for _ in range(warmup):
        fn()
        busy(step_us)
    out = np.empty(calls, dtype=np.int64)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        out[i] = time.perf_counter_ns() - t0
        busy(step_us)
    return out


def get_batch():
    """nanoGPT's get_batch, verbatim but for the device move (its GPU branch then pins x
    and y and copies them without blocking)."""
    data = np.memmap(args.tokens, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - T, (B,))
    x = torch.stack([torch.from_numpy((data[i:i + T]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + T]).astype(np.int64)) for i in ix])
    return x, y


def summary(ns):
    """The percentiles PCTS in microseconds, and the raw nanoseconds for --csv."""
    return [float(np.percentile(ns, p)) / 1e3 for p in PCTS], ns


class Windows(torch.utils.data.Dataset):
    def __init__(self, path):
        self.path = path
        self.data = None

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        if self.data is None:  # opened in each worker
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        s = np.random.randint(0, len(self.data) - T - 1)
        return torch.from_numpy(self.data[s:s + T + 1].astype(np.int64))


SWEEP_SIZES = ((8, 1023), (8, 262143), (32, 1048575))  # B, T: 16 KiB, 4 MiB, 64 MiB
SWEEP_MODES = (("off", ["--no-checksum"]), ("every step", []),
               ("1 in 16", ["--verify-every", "16"]))


def machine_line():
    return (f"{platform.node()} {bl.cpu_model()}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
            f"Python {platform.python_version()}, NumPy {np.__version__}")


def sweep():
    """next() against the payload size, checksums off, on, and verified 1 step in 16."""
    calls = [int(c) for c in args.sweep_calls.split(",")]
    all_cpus = sorted(os.sched_getaffinity(0))
    pin = len(all_cpus) >= 2
    rows = []
    for (B, T), n in zip(SWEEP_SIZES, calls):
        size = B * (T + 1) * 2
        for label, flags in SWEEP_MODES:
            out = subprocess.check_output(
                [args.bench_consumer, "--tokens", args.tokens, "--steps", str(n),
                 "--b2b-steps", "0", "--batch", str(B), "--seq-len", str(T), "--slots", "4",
                 "--pin", "--evict", str(args.sweep_evict), "--json", *flags], text=True)
            c = json.loads(out)
            rows.append({"payload_bytes": size, "checksum": label, "api": "C sf_consumer_next",
                         "calls": n, "p50_us": c["ahead_p50_ns"] / 1e3,
                         "p99_us": c["ahead_p99_ns"] / 1e3})
            job = f"bench-sweep-{os.getpid()}-{len(rows)}"
            fx_flags = [f for f in flags if f != "--verify-every" and f != "16"]
            if "--verify-every" in flags:
                fx_flags += ["--verify-every", "16"]
            fx = subprocess.Popen([args.fixture, "--job", job, "--ranks", "1", "--batch", str(B),
                                   "--seq-len", str(T), "--slots", "4", "--producers", "1",
                                   "--dtype", "u16", "--tokens", args.tokens, "--lifetime",
                                   "900", *fx_flags],
                                  stdout=subprocess.PIPE, text=True,
                                  preexec_fn=(lambda: os.sched_setaffinity(
                                      0, {all_cpus[-1]})) if pin else None)
            assert fx.stdout.readline().startswith("ready")
            if pin:
                os.sched_setaffinity(0, {all_cpus[0]})
            try:
                with shmfeed.Loader(job=job, rank=0, world_size=1, numpy=True,
                                    dtype="native") as L:
                    ns = timed_ready(L, n)
                p50, p99 = (float(np.percentile(ns, p)) / 1e3 for p in (50, 99))
                rows.append({"payload_bytes": size, "checksum": label,
                             "api": "Python Loader (NumPy view)", "calls": n,
                             "p50_us": p50, "p99_us": p99})
            finally:
                os.sched_setaffinity(0, set(all_cpus))
                fx.send_signal(signal.SIGTERM)
                fx.wait()
            r = rows[-2:]
            print(f"{size:>10,} B  checksum {label:10s}  C p50 {r[0]['p50_us']:9.2f} us  "
                  f"p99 {r[0]['p99_us']:9.2f} us   Python p50 {r[1]['p50_us']:9.2f} us  "
                  f"p99 {r[1]['p99_us']:9.2f} us", flush=True)
    print(f"machine: {machine_line()}")
    for api in ("C sf_consumer_next", "Python Loader (NumPy view)"):
        off = [r["p50_us"] for r in rows if r["api"] == api and r["checksum"] == "off"]
        print(f"{api}: checksums off, p50 at 64 MiB / p50 at 16 KiB = {off[-1] / off[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_line(), "evict_bytes": args.sweep_evict,
                       "timing": "each call timed once its step is published, after "
                       "evict_bytes of a private buffer were written", "rows": rows},
                      f, indent=1)


def timed_ready(L, n, warmup=4):
    """Loader.next() timed once the step it returns is published (as bench_consumer times
    the C call), so that the time is the call's own, not a wait for a 64 MiB fill: each
    call is first tried with timeout 0 until it succeeds, and only the successful call
    is timed (the failed tries release the previous batch, which the timed call then
    does not)."""
    out = np.empty(n, dtype=np.int64)
    scratch = np.empty(max(args.sweep_evict, 1), dtype=np.uint8)
    for i in range(n + warmup):
        while True:
            if args.sweep_evict:
                scratch.fill(i & 0xFF)
            t0 = time.perf_counter_ns()
            try:
                L.next(timeout=0)
            except shmfeed.Error as e:
                if e.code != -1016:  # SF_E_AGAIN: not published yet
                    raise
                time.sleep(0.0002)
                continue
            break
        if i >= warmup:
            out[i - warmup] = time.perf_counter_ns() - t0
    return out


def main():
    ensure_tokens(args.tokens, args.ntokens)
    rows = []

    # shmfeed C.
    if args.bench_consumer:
        raw = (args.csv or "/tmp/bench_loader") + f".c-{os.getpid()}"
        out = subprocess.check_output([args.bench_consumer, "--tokens", args.tokens,
                                       "--steps", str(args.c_steps), "--batch", str(B),
                                       "--seq-len", str(T), "--json", "--csv", raw],
                                      text=True)
        ns = np.loadtxt(raw, dtype=np.int64, ndmin=1)
        os.unlink(raw)
        rows.append(("shmfeed C sf_consumer_next", *summary(ns)))

    # shmfeed Python: jobs served by the feed fixture from the token file, with uint16
    # tokens (as the file) and with int32 tokens (what torch < 2.3 can view in place).
    ncpu = len(os.sched_getaffinity(0))
    pin = ncpu >= 2
    all_cpus = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {sorted(all_cpus)[0]})
    waited = 0
    native_u16 = "u16" if hasattr(torch, "uint16") else "u16->int32"
    for dtype, label, numpy_mode, out, post in (
            ("u16", "shmfeed Loader (NumPy, zero copy)", True, "native", None),
            ("u16", "shmfeed Loader (torch, int64 default)", False, "int64", None),
            ("u16", f"shmfeed Loader (torch, native {native_u16})", False, "native", None),
            ("u16", "shmfeed Loader native + .long() x, y", False, "native",
             lambda b: (b.x.long(), b.y.long())),
            ("i32", "shmfeed Loader (torch, int32 arena)", False, "native", None)):
        job = f"bench-loader-{os.getpid()}-{len(rows)}"
        fx = subprocess.Popen([args.fixture, "--job", job, "--ranks", "1", "--batch", str(B),
                               "--seq-len", str(T), "--slots", "8", "--producers", "1",
                               "--dtype", dtype, "--tokens", args.tokens, "--lifetime", "600"],
                              stdout=subprocess.PIPE, text=True,
                              preexec_fn=(lambda: os.sched_setaffinity(
                                  0, {sorted(all_cpus)[1]})) if pin else None)
        assert fx.stdout.readline().startswith("ready")
        try:
            with shmfeed.Loader(job=job, rank=0, world_size=1, numpy=numpy_mode,
                                dtype=out) as L:
                fn = L.next if post is None else (lambda: post(L.next()))
                ns = timed(fn, args.calls, args.step_us)
                waited = max(waited, L.counters()["wait_ns_p99"])
            rows.append((label, *summary(ns)))
        finally:
            fx.send_signal(signal.SIGTERM)
            fx.wait()
    if waited > 20_000:
        print(f"note: producers were not always ahead (wait p99 {waited / 1e3:.1f} us)")

    rows.append(("nanoGPT get_batch", *summary(timed(get_batch, min(args.calls, 1000),
                                                     args.step_us))))

    # The strongest simple baseline: one vectorized gather into a preallocated array.
    data = np.memmap(args.tokens, dtype=np.uint16, mode="r")
    out = np.empty((B, T + 1), dtype=np.uint16)
    offs = np.arange(T + 1, dtype=np.int64)
    rng = np.random.default_rng(0)

    def gather():
        starts = rng.integers(0, len(data) - T - 1, size=B)
        np.take(data, starts[:, None] + offs, out=out)
        return out[:, :-1], out[:, 1:]
    rows.append(("numpy vectorized gather", *summary(timed(gather, args.calls, args.step_us))))

    os.sched_setaffinity(0, all_cpus)
    dl = torch.utils.data.DataLoader(Windows(args.tokens), batch_size=B, num_workers=2,
                                     persistent_workers=True, pin_memory=True)
    it = iter(dl)
    pinned = it._pin_memory  # False without a GPU: torch then skips the pinning thread
    rows.append((f"torch DataLoader, 2 workers{', pinned' if pinned else ''}",
                 *summary(timed(lambda: next(it), min(args.calls, 1000), args.step_us))))
    del it, dl

    machine = f"{machine_line()}, torch {torch.__version__}"
    setup = (f"B={B} T={T} uint16, token file {args.tokens} "
             f"({os.path.getsize(args.tokens) // 2:,} tokens), {args.calls} calls, "
             f"simulated step {args.step_us:.0f} us, "
             f"{'producers pinned to CPU 1, consumer to CPU 0' if pin else 'no pinning'}")
    print(f"machine: {machine}")
    print(f"geometry: {setup}")
    ref_np = next(r for r in rows if r[0].startswith("shmfeed Loader (NumPy"))[1][0]
    ref_t = next(r for r in rows if r[0].startswith("shmfeed Loader (torch, int32"))[1][0]
    print(f"{'method':38s} {'p50 us':>9s} {'p99 us':>9s} {'p50/Loader NumPy':>17s} "
          f"{'p50/Loader torch i32':>21s}")
    for name, (p50, _, p99, _), _ in rows:
        print(f"{name:38s} {p50:9.2f} {p99:9.2f} {p50 / ref_np:16.1f}x {p50 / ref_t:20.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "setup": setup, "batch": B, "seq_len": T,
                       "step_us": args.step_us, "loader_wait_p99_us": waited / 1e3,
                       "rows": [{"method": name, "calls": len(ns),
                                 **{f"p{p:g}_us".replace(".", ""): v
                                    for p, v in zip(PCTS, pct)}}
                                for name, pct, ns in rows]}, f, indent=1)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("method", "ns"))
            for name, _, ns in rows:
                w.writerows((name, v) for v in ns.tolist())


def on_device():
    """The time until a batch of int64 x, y is on the GPU, per method (--device)."""
    dev = torch.device(args.device)
    if dev.index is None:  # "cuda": the current device, named
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    ensure_tokens(args.tokens, args.ntokens)
    stream = torch.cuda.current_stream(dev)
    all_cpus = sorted(os.sched_getaffinity(0))
    rows, failed = [], []

    def timed_gpu(fn, calls, warmup=50):
        """Per call: (host ns until fn returned, ns until the stream had done its work)."""
        out = np.empty((calls, 2), dtype=np.int64)
        for i in range(warmup + calls):
            t0 = time.perf_counter_ns()
            b = fn()
            t1 = time.perf_counter_ns()
            stream.synchronize()
            t2 = time.perf_counter_ns()
            if i == warmup - 1:  # what a model gets: int64 on the device
                assert b[0].dtype == torch.int64 and b[0].device == dev, (b[0].dtype, b[0].device)
                assert b[0].shape == (B, T), b[0].shape
            if i >= warmup:
                out[i - warmup] = (t1 - t0, t2 - t0)
            busy(args.step_us)
        return out

    def add(name, fn, calls=args.calls):
        try:
            ns = timed_gpu(fn, calls)
        except Exception as e:  # one method's failure does not hide the others' numbers
            failed.append(f"{name}: {type(e).__name__}: {e}")
            print(f"FAILED {failed[-1]}", flush=True)
            return
        rows.append((name, *(float(np.percentile(ns[:, 1], p)) / 1e3 for p in (50, 99)),
                     float(np.percentile(ns[:, 0], 50)) / 1e3))
        print(f"{name}: p50 {rows[-1][1]:.1f} us", flush=True)

    # shmfeed: the feed fixture serves the token file, its producer on the last CPU.
    for label, dtype in (("shmfeed Loader on the GPU (int64 default)", "int64"),
                         ("shmfeed Loader on the GPU, native uint16", "native")):
        job = f"bench-gpu-{os.getpid()}-{len(rows) + len(failed)}"
        fx = subprocess.Popen([args.fixture, "--job", job, "--ranks", "1", "--batch", str(B),
                               "--seq-len", str(T), "--slots", "8", "--producers", "1",
                               "--dtype", "u16", "--tokens", args.tokens, "--lifetime", "600"],
                              stdout=subprocess.PIPE, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, {all_cpus[-1]}))
        assert fx.stdout.readline().startswith("ready")
        try:
            with shmfeed.Loader(job=job, rank=0, world_size=1, device=dev, dtype=dtype) as L:
                if dtype == "int64":
                    add(label, lambda: (lambda b: (b.x, b.y))(L.next()))
                else:  # what the model then does with it
                    add(label, lambda: (lambda b: (b.x.long(), b.y.long()))(L.next()))
        except Exception as e:
            failed.append(f"{label}: {type(e).__name__}: {e}")
            print(f"FAILED {failed[-1]}", flush=True)
        finally:
            fx.send_signal(signal.SIGTERM)
            fx.wait()

    # nanoGPT get_batch, GPU branch.
    def get_batch_gpu():
        x, y = get_batch()
        return (x.pin_memory().to(dev, non_blocking=True),
                y.pin_memory().to(dev, non_blocking=True))
    add("nanoGPT get_batch (pinned, non_blocking)", get_batch_gpu, min(args.calls, 1000))

    # The NumPy gather into pinned buffers (two, so that a copy in flight is not
    # overwritten), one non-blocking copy, widened on the device.
    data = np.memmap(args.tokens, dtype=np.uint16, mode="r")
    offs = np.arange(T + 1, dtype=np.int64)
    rng = np.random.default_rng(0)
    pinned = [torch.empty((B, T + 1), dtype=torch.int16).pin_memory() for _ in range(2)]
    done = [None, None]
    turn = [0]

    def gather():
        k = turn[0] = turn[0] ^ 1
        if done[k] is not None:
            done[k].synchronize()
        out = pinned[k].numpy().view(np.uint16)
        starts = rng.integers(0, len(data) - T - 1, size=B)
        np.take(data, starts[:, None] + offs, out=out)
        d = pinned[k].to(dev, non_blocking=True)
        done[k] = torch.cuda.Event()
        done[k].record(stream)
        d = d.long() & 0xFFFF
        return d[:, :-1], d[:, 1:]
    add("numpy gather, pinned, non_blocking", gather)

    dl = torch.utils.data.DataLoader(Windows(args.tokens), batch_size=B, num_workers=2,
                                     persistent_workers=True, pin_memory=True)
    it = iter(dl)

    def dl_next():
        b = next(it).to(dev, non_blocking=True)
        return b[:, :-1], b[:, 1:]
    add("torch DataLoader, 2 workers, pinned", dl_next, min(args.calls, 1000))

    machine = (f"{machine_line()}, torch {torch.__version__}, "
               f"{torch.cuda.get_device_name(dev)}")
    setup = (f"B={B} T={T}, int64 x, y on {dev}, token file of "
             f"{os.path.getsize(args.tokens) // 2:,} uint16 tokens, {args.calls} calls "
             f"(1000 for get_batch and the DataLoader), simulated step {args.step_us:.0f} us")
    print(f"machine: {machine}")
    print(f"geometry: {setup}")
    if rows:
        ref = rows[0][1]
        print(f"{'method':42s} {'p50 us':>9s} {'p99 us':>9s} {'host p50 us':>12s} "
              f"{'p50/' + rows[0][0][:22]:>28s}")
        for name, p50, p99, host in rows:
            print(f"{name:42s} {p50:9.1f} {p99:9.1f} {host:12.1f} {p50 / ref:27.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "setup": setup, "failed": failed,
                       "rows": [{"method": n, "p50_us": a, "p99_us": b, "host_p50_us": h}
                                for n, a, b, h in rows]}, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    if args.device:
        on_device()
    elif args.sweep:
        sweep()
    else:
        main()
