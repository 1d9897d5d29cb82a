"""Issue 18 under the real `shmfeed run`: long-context sequences (B=1, T=2M uint16 and
T=4M int32) lay out and run, each batch's digest being the XXH3 of one of the corpus's
windows; and producers.cpus pins the producers, not the launcher or the ranks. Each test
uses its own job name and runtime directory and leaves nothing in /dev/shm."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

SHMFEED = os.environ.get("SF_SHMFEED")
CONSUME = os.environ.get("SF_CONSUME")
ROOT = os.environ.get("SF_SOURCE_ROOT")

if not (SHMFEED and CONSUME and ROOT):
    pytest.skip("set by `meson test` (SF_SHMFEED, SF_CONSUME, SF_SOURCE_ROOT)",
                allow_module_level=True)

# The digests the ranks report are XXH3-64 (sf_digest, seed 0). They are computed here with
# the system's libxxhash, not libshmfeed: the test also runs in the sanitizer builds, whose
# library CPython cannot load.
_xxh = ctypes.CDLL("libxxhash.so.0")
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(data):
    return _xxh.XXH3_64bits(data, len(data))


_count = [0]


def job_name(tag):
    _count[0] += 1
    return f"tlp-{tag}-{os.getpid()}-{_count[0]}"


def run(cfg, job, cmd, sets=(), timeout=120):
    sets = [a for s in sets for a in ("--set", s)]
    out = subprocess.run([SHMFEED, "run", str(cfg), "--set", f"job={job}", *sets, "--", *cmd],
                         capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, LOCAL_RANK="0"))
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")
    return out


@pytest.mark.parametrize("T,dtype", [(2 * 1024 * 1024, "uint16"), (4 * 1024 * 1024, "int32")])
def test_long_sequences_lay_out_and_run(rt, tmp_path, T, dtype):
    # Two windows of T+1 tokens (stride T): 2T+1 tokens, ids below 50000.
    tokens = (np.arange(2 * T + 1, dtype=np.int64) * 7919) % 50000
    if dtype == "uint16":
        data = tmp_path / "long.bin"  # headerless uint16, as nanoGPT writes
        tokens.astype("<u2").tofile(data)
        width = "<u2"
    else:
        data = tmp_path / "long32.bin"  # an llm.c shard of uint32 tokens (version 7)
        with open(data, "wb") as f:
            f.write(np.array([20240801, 7, tokens.size] + [0] * 253, dtype="<i4").tobytes())
            f.write(tokens.astype("<u4").tobytes())
        width = "<i4"
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [{data}]\n"
                   f"batch: {{size: 1, seq_len: {T}, dtype: {dtype}}}\n"
                   "arena: {slots_per_rank: 2}\n"
                   "producers: {count: 1}\n")
    check = subprocess.run([SHMFEED, "check", str(cfg)], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stderr
    payload = (T + 1) * (2 if dtype == "uint16" else 4)
    assert f"1 rank x 2 slots of {payload} payload bytes" in check.stdout, check.stdout

    out_file = tmp_path / "r0.txt"
    out = run(cfg, job_name("long"), [CONSUME, "--steps", "2", "--out", str(out_file)])
    assert out.returncode == 0, out.stderr
    got = {int(line.split()[3], 16) for line in out_file.read_text().splitlines()}
    windows = {xxh3(tokens[s:s + T + 1].astype(width).tobytes()) for s in (0, T)}
    assert got == windows


def allowed_cpus(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return None


def test_producer_cpus_pin_the_producers_only(rt, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to tell pinned from unpinned")
    data = tmp_path / "a.bin"
    (np.arange(1 << 16) % 50000).astype("<u2").tofile(data)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [{data}]\nbatch: {{size: 2, seq_len: 64}}\n"
                   f"producers: {{count: 2, cpus: '{cpus[-1]}'}}\n")
    report = tmp_path / "cpus.txt"
    # The rank reports the launcher's children (the producers and itself) with their CPUs.
    script = os.path.join(ROOT, "tests", "launcher", "report_cpus.py")
    out = run(cfg, job_name("pin"), [sys.executable, script, CONSUME, str(report)])
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in report.read_text().splitlines()]
    everything = allowed_cpus(os.getpid())
    assert sorted(r[1] for r in rows if r[0] == "producer") == [str(cpus[-1])] * 2, rows
    assert [r[1] for r in rows if r[0] == "rank"] == [everything], rows
    assert [r[1] for r in rows if r[0] == "launcher"] == [everything], rows


def test_producer_cpus_outside_the_allowed_set_refuse_the_start(rt, tmp_path):
    data = tmp_path / "a.bin"
    (np.arange(1 << 12) % 50000).astype("<u2").tofile(data)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [{data}]\nbatch: {{size: 2, seq_len: 64}}\n"
                   "producers: {cpus: '1000'}\n")
    job = job_name("badcpu")
    out = run(cfg, job, [CONSUME, "--steps", "1", "--out", os.devnull])
    assert out.returncode != 0
    assert "job.yaml:3:19: CPU list '1000' names CPU 1000, which this process may not run on" \
        in out.stderr, out.stderr
