"""The shipped job files and the real `shmfeed run`: every file in configs/ loads, the
demo trains a small DDP model on 2 Python ranks with the same batches run after run, and
the jobs whose data is present here start and deliver."""

import glob
import os
import subprocess
import tempfile

import pytest

SHMFEED = os.environ.get("SF_SHMFEED")
CONSUME = os.environ.get("SF_CONSUME")
ROOT = os.environ.get("SF_SOURCE_ROOT")
PY = "/usr/bin/python3"

if not (SHMFEED and CONSUME and ROOT):
    pytest.skip("set by `meson test`", allow_module_level=True)

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
SHARED = os.path.join(ROOT, "..", "shared", "data")


@pytest.fixture
def rt(monkeypatch):
    d = tempfile.mkdtemp(prefix="sf-rt-")
    monkeypatch.setenv("SHMFEED_RUNTIME_DIR", d)
    yield d
    left = os.listdir(d)
    assert not left, f"left in the runtime directory: {left}"
    os.rmdir(d)


def test_configs_are_there():
    names = {os.path.basename(p) for p in CONFIGS}
    assert {"demo.yaml", "shakespeare_char.yaml", "gpt2_jsonl.yaml", "cl100k_text.yaml",
            "o200k_text.yaml", "megatron.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_loads(path):
    out = subprocess.run([SHMFEED, "check", path], capture_output=True, text=True, timeout=30)
    if out.returncode and "tokenizer" in out.stderr and not os.path.isdir(SHARED):
        pytest.skip("check loads the vocabulary, and the shared test data is absent")
    own_data = os.path.join(ROOT, "configs", "data")
    if out.returncode and not os.path.exists(own_data):
        # check opens the sources as run does: an example whose data is not made yet
        # fails, naming it, and nothing else.
        assert out.returncode == 1 and own_data + "/" in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        return
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"# {path}: valid\n")
    assert "\nsources:\n  - paths: [" in out.stdout
    assert "# config digest " in out.stdout


def run_demo(tmp, job, steps):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run(
        [SHMFEED, "run", os.path.join(ROOT, "configs", "demo.yaml"), "--set", f"job={job}",
         "--", PY, os.path.join(ROOT, "examples", "ranks.py"), "--nproc", "2", "--",
         PY, os.path.join(ROOT, "tests", "launcher", "train_ranks.py"), "--steps", str(steps),
         "--out-dir", str(tmp)],
        capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_demo_trains_on_two_python_ranks(rt, tmp_path):
    if os.environ.get("SF_SANITIZE", "none") != "none":
        pytest.skip("CPython cannot load a sanitizer-instrumented libshmfeed.so")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    out = run_demo(a, f"cfg-demo-{os.getpid()}", 30)
    assert out.stdout.count("loss") == 2
    assert "tokens delivered" in out.stderr
    run_demo(b, f"cfg-demo2-{os.getpid()}", 30)
    for r in (0, 1):
        lines = (a / f"r{r}.txt").read_text().split("\n")[:-1]
        assert len(lines) == 30
        for s, line in enumerate(lines):
            rank, step, first, _ = line.split()
            assert (int(rank), int(step), int(first)) == (r, s, s * 16 + r * 8)
        assert (b / f"r{r}.txt").read_text() == (a / f"r{r}.txt").read_text()
    assert not glob.glob(f"/dev/shm/shmfeed.cfg-demo*-{os.getpid()}")


@pytest.mark.parametrize("name", ["shakespeare_char.yaml", "cl100k_text.yaml",
                                  "o200k_text.yaml"])
def test_shared_data_jobs_deliver(rt, tmp_path, name):
    if not os.path.exists(os.path.join(SHARED, "corpus", "tinyshakespeare.txt")):
        pytest.skip("no shared test data")
    job = f"cfg-{name.split('.')[0]}-{os.getpid()}"
    out = subprocess.run(
        [SHMFEED, "run", os.path.join(ROOT, "configs", name), "--set", f"job={job}",
         "--set", "consumers.world_size=1", "--",
         CONSUME, "--steps", "20", "--out", str(tmp_path / "r0.txt")],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, LOCAL_RANK="0"))
    assert out.returncode == 0, out.stderr
    assert len((tmp_path / "r0.txt").read_text().split("\n")) == 21
    if name.endswith("_text.yaml"):
        # Raw text: the producers report how many tokens they encoded per token written.
        ratio = float(out.stderr.split(" tokens encoded per token produced")[0].split()[-1])
        assert ratio > 0.5, out.stderr
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")
