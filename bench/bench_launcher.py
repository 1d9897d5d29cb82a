"""Launcher benchmarks (run from the source root after building into BUILD):

    /usr/bin/python3 bench/bench_launcher.py BUILD

1. Throughput of `shmfeed run configs/demo.yaml` with 2 C ranks taking STEPS batches
   each, with and without `shmfeed top` subscribed to the job's stats (the overhead must
   stay within 1%); runs alternate, the median of each is compared.
2. Time from starting `shmfeed run` to the first batch on rank 0, for pre-tokenized data
   (a Megatron pair made by `shmfeed tokenize` from the shared corpus) and for the demo.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
SHMFEED = os.path.join(BUILD, "cli", "shmfeed")
CONSUME = os.path.join(BUILD, "tests", "launcher", "consume")
STEPS = int(os.environ.get("STEPS", "100000"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
CPU = []  # (CPU seconds of the job with its ranks, of top) per run
RUNTIME = tempfile.mkdtemp(prefix="sf-bench-")
os.environ["SHMFEED_RUNTIME_DIR"] = RUNTIME


def run_job(cfg, job, steps, top=False, extra=()):
    cmd = ["sh", "-c", " ".join(
        f"LOCAL_RANK={r} {CONSUME} --steps {steps} --out /dev/null &" for r in range(2))
        + " wait"]
    t0 = time.monotonic()
    p = subprocess.Popen([SHMFEED, "run", cfg, "--quiet", "--set", f"job={job}", *extra,
                          "--", *cmd])
    viewer = None
    if top:
        # The discovery file appears once the job serves; waiting on it costs a stat.
        info = os.path.join(RUNTIME, f"{job}.json")
        while not os.path.exists(info) and p.poll() is None:
            time.sleep(0.002)
        viewer = subprocess.Popen([SHMFEED, "top", job], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    _, status, job_ru = os.wait4(p.pid, 0)
    assert status == 0
    p.returncode = 0
    dt = time.monotonic() - t0
    top_cpu = 0.0
    if viewer:
        viewer.terminate()
        _, _, ru = os.wait4(viewer.pid, 0)
        viewer.returncode = 0
        top_cpu = ru.ru_utime + ru.ru_stime
    CPU.append((job_ru.ru_utime + job_ru.ru_stime, top_cpu))
    return dt


def first_batch(cfg, job, extra=()):
    """Seconds from starting `shmfeed run` to the first batch in rank 0's hands."""
    with tempfile.NamedTemporaryFile() as out:
        t0 = time.monotonic()
        p = subprocess.Popen([SHMFEED, "run", cfg, "--quiet", "--set", f"job={job}",
                              "--set", "consumers.world_size=1", *extra, "--", CONSUME,
                              "--steps", "1", "--out", out.name],
                             env=dict(os.environ, LOCAL_RANK="0"))
        while os.path.getsize(out.name) == 0 and p.poll() is None:
            time.sleep(0.0005)
        dt = time.monotonic() - t0
        assert p.wait() == 0
    return dt


def main():
    demo = "configs/demo.yaml"
    with_top, without = [], []
    for i in range(ROUNDS):
        without.append(run_job(demo, f"bench-a-{os.getpid()}-{i}", STEPS,
                               extra=["--set", "control.stats_interval_ms=100"]))
        with_top.append(run_job(demo, f"bench-b-{os.getpid()}-{i}", STEPS, top=True,
                                extra=["--set", "control.stats_interval_ms=100"]))
    tokens = 2 * STEPS * 8 * 256
    a, b = statistics.median(without), statistics.median(with_top)
    print(f"throughput without top: {tokens / a / 1e6:.2f} Mtok/s (median of {ROUNDS}: "
          f"{a:.3f} s for {tokens} tokens)")
    print(f"throughput with top:    {tokens / b / 1e6:.2f} Mtok/s (median {b:.3f} s); "
          f"overhead {100 * (b - a) / a:+.2f}%")
    job_cpu = sum(c for c, t in CPU if t > 0)
    top_cpu = sum(t for c, t in CPU)
    print(f"  CPU: top used {top_cpu * 1e3:.1f} ms while its jobs used {job_cpu:.2f} s: "
          f"{100 * top_cpu / job_cpu:.3f}% of the job's CPU")
    print(f"  runs without: {' '.join(f'{x:.3f}' for x in without)}")
    print(f"  runs with:    {' '.join(f'{x:.3f}' for x in with_top)}")

    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "shakespeare")
        r = subprocess.run([SHMFEED, "tokenize", "configs/cl100k_text.yaml", "-o", prefix,
                            "-q"], capture_output=True, text=True)
        if r.returncode == 0:
            cfg = os.path.join(d, "mt.yaml")
            with open(cfg, "w") as f:
                f.write(f"sources: [{{paths: ['{prefix}'], format: megatron}}]\n"
                        "tokenizer: {encoding: cl100k_base, vocab_dir: "
                        f"'{os.path.abspath('../shared/data/vocab')}'}}\n"
                        "batch: {size: 8, seq_len: 1024}\n")
            times = [first_batch(cfg, f"bench-mt-{os.getpid()}-{i}") for i in range(ROUNDS)]
            print(f"first batch, Megatron .bin/.idx: median {statistics.median(times) * 1e3:.1f}"
                  f" ms, max {max(times) * 1e3:.1f} ms")
        else:
            print("no Megatron data (shmfeed tokenize failed):", r.stderr.strip())
    times = [first_batch(demo, f"bench-demo-{os.getpid()}-{i}") for i in range(ROUNDS)]
    print(f"first batch, demo (raw text, bytes): median {statistics.median(times) * 1e3:.1f} ms,"
          f" max {max(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
