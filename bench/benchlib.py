"""Helpers shared by the benchmark driver (run_all.py) and its benchmarks: the machine's
description, the process tree of a job and the memory of each process in it, the cached
input files, job configs and the options that describe them, and the ready/go/stop files
through which bench_ranks.py ranks and a driver agree on when to measure.

Memory per process comes from /proc/PID/smaps_rollup: RSS counts every resident page the
process maps, so a shared page (the arena, a page-cache page of a mapped token file, a
page inherited over fork and not yet written) counts once in every process that maps it;
PSS divides each page by the number of processes mapping it, so PSS sums to the memory
the processes really hold together.
"""

import json
import os
import platform
import re
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYS_PYTHON = "/usr/bin/python3"


def run_text(cmd, **kw):
    """stdout of cmd, or '' when it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              **kw).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def path_python():
    """The python3 on PATH when it is another interpreter than Debian's (it has PyPI
    packages such as tiktoken, but no torch), else None."""
    p = shutil.which("python3")
    if not p:
        return None
    real = run_text([p, "-c", "import sys; print(sys.executable)"])
    return p if real and os.path.realpath(real) != os.path.realpath(SYS_PYTHON) else None


def peers_python():
    """The venv Python that scripts/deps fills with the tokenizer peers (tiktoken,
    bpe-openai, tokendagger), or None when it lacks one of them."""
    venv = os.environ.get("SHMFEED_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "shmfeed",
        "venv-torch")
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run(
        [py, "-c", "import tiktoken, bpe_openai, tokendagger"],
        capture_output=True).returncode == 0
    return py if ok else None


def cpu_model():
    """The processor's name as /proc/cpuinfo gives it."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def machine(builddir):
    """What the results were measured on and with."""
    m = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
         "kernel": platform.release(), "cores": os.cpu_count(), "cpu": cpu_model()}
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                m["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    cc = "cc"
    info = os.path.join(builddir, "meson-info", "intro-compilers.json")
    try:
        with open(info) as f:
            cc = json.load(f)["host"]["c"]["exelist"][0]
    except (OSError, KeyError, ValueError):
        pass
    m["compiler"] = run_text([cc, "--version"]).splitlines()[0:1] or ["?"]
    m["compiler"] = m["compiler"][0]
    m["python"] = platform.python_version()
    import numpy
    m["numpy"] = numpy.__version__
    try:
        import torch
        m["torch"] = torch.__version__
    except ImportError:
        m["torch"] = "absent"
    pp = peers_python() or path_python()
    tk = run_text([pp, "-c", "import tiktoken, platform; print(tiktoken.__version__, "
                   "platform.python_version())"]) if pp else ""
    m["tiktoken"] = f"{tk.split()[0]} (Python {tk.split()[1]})" if tk else "absent"
    m["commit"] = run_text(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"]) or "?"
    dirty = run_text(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    m["tree"] = "with uncommitted changes" if dirty else "clean"
    thp = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
    m["thp_shmem"] = open(thp).read().strip() if os.path.exists(thp) else "?"
    return m


# Inputs, made once and kept in the cache directory.

def ensure_tokens(path, n):
    """A headerless uint16 token file of n random GPT-2 ids (nanoGPT's train.bin shape)."""
    import numpy as np
    if os.path.exists(path) and os.path.getsize(path) == 2 * n:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(1337)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        for lo in range(0, n, 1 << 24):
            rng.integers(0, 50257, size=min(1 << 24, n - lo), dtype=np.uint16).tofile(f)
    os.rename(tmp, path)
    return path


def ensure_text(path, data_dir, copies):
    """tinyshakespeare repeated `copies` times: raw text whose paragraphs (split at blank
    lines) are the documents."""
    src = os.path.join(data_dir, "corpus", "tinyshakespeare.txt")
    with open(src, "rb") as f:
        text = f.read()
    if os.path.exists(path) and os.path.getsize(path) == len(text) * copies:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        for _ in range(copies):
            f.write(text)
    os.rename(tmp, path)
    return path


def write_config(path, job, source, fmt, encoding, vocab_dir, batch, seq_len, producers,
                 ranks=2, slots=8, mode="random", separator=None):
    """A job config for `shmfeed run`: one source, CPU consumers."""
    sep = f"    separator: {json.dumps(separator)}\n" if separator else ""
    with open(path, "w") as f:
        f.write(f"""job: {job}
sources:
  - paths: [{json.dumps(source)}]
    format: {fmt}
{sep}tokenizer:
  encoding: {encoding}
  vocab_dir: {json.dumps(vocab_dir)}
batch:
  size: {batch}
  seq_len: {seq_len}
sampling:
  mode: {mode}
  seed: 1337
  epochs: 0
arena:
  slots_per_rank: {slots}
producers:
  count: {producers}
consumers:
  world_size: {ranks}
  device: cpu
""")
    return path


# Processes.

def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    return s[:s.rindex(")")].split("(", 1)[1], s[s.rindex(")") + 2:].split()


def tree(root):
    """root and all its descendants, parents before children: [(pid, ppid)]."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                _, f = _stat(d)
            except (OSError, ValueError):
                continue
            children.setdefault(int(f[1]), []).append(int(d))
    out, todo = [], [(root, 0)]
    while todo:
        pid, ppid = todo.pop(0)
        out.append((pid, ppid))
        todo.extend((c, pid) for c in sorted(children.get(pid, ())))
    return out


def proc_memory(pid):
    """Memory of one process in KiB (RSS, PSS and PSS by kind from smaps_rollup, VmData
    from status), its minor faults and command line; None when it has gone."""
    try:
        m = {"pid": pid}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem"):
                    m[k.lower()] = int(v.split()[0])
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    m["vmdata"] = int(line.split()[1])
        comm, fields = _stat(pid)
        m["minflt"] = int(fields[7])
        m["comm"] = comm
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            m["cmdline"] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        return m if "rss" in m else None
    except (OSError, ValueError, IndexError):
        return None


def classify(root, procs, shmfeed_root):
    """Names each process's role by its place in the tree: under `shmfeed run` (the
    launcher), forks of the launcher are producers and its python child starts the ranks;
    otherwise the root starts the ranks. Children of a rank are DataLoader workers."""
    depth = {root: 0}
    role = {}
    for pid, ppid in procs:
        if pid != root:
            depth[pid] = depth.get(ppid, 0) + 1
    for pid, ppid in procs:
        d = depth[pid] - (1 if shmfeed_root else 0)
        if shmfeed_root and pid == root:
            role[pid] = "launcher (shmfeed run)"
        elif shmfeed_root and d == 0:
            role[pid] = "rank starter (torchrun's place)" if "python" in _comm(pid) \
                else "producer"
        elif d == 0:
            role[pid] = "rank starter (torchrun's place)"
        elif d == 1:
            role[pid] = "rank"
        elif d == 2:
            role[pid] = "DataLoader worker"
        else:
            role[pid] = "other"
    return role


def _comm(pid):
    """The process's command name (a fork keeps its parent's)."""
    try:
        return _stat(pid)[0]
    except (OSError, ValueError):
        return ""


def sample_tree(root, shmfeed_root):
    """Memory of every live process of the tree, each with its role."""
    procs = tree(root)
    roles = classify(root, procs, shmfeed_root)
    out = []
    for pid, _ in procs:
        m = proc_memory(pid)
        if m:
            m["role"] = roles[pid]
            out.append(m)
    return out


# The ranks' handshake files (see bench_ranks.py).

def wait_files(paths, timeout, proc=None):
    """Waits until every path exists; False on timeout or when proc has exited."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(os.path.exists(p) for p in paths):
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def touch(path):
    with open(path, "w"):
        pass


def wait_ready(p, d, ranks, timeout, what):
    """Waits for the ready files of ranks 0..ranks-1 in d; raises RuntimeError naming
    `what` when they do not all come within timeout seconds or p exits first."""
    if not wait_files([os.path.join(d, f"ready.{r}") for r in range(ranks)], timeout, p):
        raise RuntimeError(f"{what}: ranks not ready (exit {p.poll()})")


def stop_ranks(p, d):
    """Tells the ranks to stop (the stop file in d) and waits for p, killing it after
    60 s; returns its exit status."""
    touch(os.path.join(d, "stop"))
    try:
        return p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


def add_job_args(ap):
    """The options every job benchmark ends with: the geometry, the vocabularies and
    the JSON output."""
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--vocab-dir", default=os.path.join(ROOT, "..", "shared", "data",
                                                         "vocab"))
    ap.add_argument("--json")


def env_for_ranks(builddir):
    """Environment for ranks that import the in-tree package and library."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SHMFEED_LIB"] = os.path.join(builddir, "libshmfeed.so")
    return env


def read_progress(path):
    """The progress lines a rank wrote, as dicts."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    except OSError:
        pass
    return out


def tokens_at(progress, t):
    """A rank's cumulative tokens at monotonic time t, interpolated between samples."""
    prev = None
    for p in progress:
        if p["t"] >= t:
            if prev is None:
                return p["tokens"]
            f = (t - prev["t"]) / max(p["t"] - prev["t"], 1e-9)
            return prev["tokens"] + f * (p["tokens"] - prev["tokens"])
        prev = p
    return prev["tokens"] if prev else 0


def fmt_table(headers, rows, align=None):
    """A Markdown table; numbers right-aligned."""
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if (align or "l" * len(headers))[i] == "r" else "---"
                          for i in range(len(headers))) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def shm_job_bytes(job):
    """Size and allocated bytes of a job's arena in /dev/shm (0, 0 when absent)."""
    try:
        st = os.stat(f"/dev/shm/shmfeed.{job}")
        return st.st_size, st.st_blocks * 512
    except OSError:
        return 0, 0


def safe_name(s):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s)
