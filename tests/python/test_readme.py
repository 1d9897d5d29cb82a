"""The README's Python snippet, taken from README.md as it stands, runs as it says: saved
as train.py under `shmfeed run configs/demo.yaml -- torchrun --nproc_per_node=2 train.py`,
with the real torchrun of PyPI's torch 2.x, and writes its checkpoint."""

import os
import re
import subprocess

import pytest
import torch

from conftest import HERE, unique_job
from test_torchrun import CLI, PY, ROOT, torchrun


@pytest.mark.skipif(not CLI or not PY, reason="needs SHMFEED_CLI and a torch 2.x venv")
def test_readme_snippet(tmp_path):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("## Using it from a training script"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "train.py").write_text(code.replace("range(100)", "range(60)"))
    job = unique_job("readme")
    out = subprocess.run([CLI, "run", os.path.join(ROOT, "configs", "demo.yaml"), "--set",
                          f"job={job}", "--quiet", "--",
                          *torchrun("--standalone", "--nproc_per_node=2", "train.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-3000:]
    for rank in range(2):  # each rank's own state, at the batch not trained on yet
        f = tmp_path / f"loader{rank}.pt"
        st = torch.load(f, weights_only=False) \
            if int(torch.__version__.split(".")[0]) >= 2 else torch.load(f)
        assert st["step"] == 51 and st["rank"] == rank, st
    assert (tmp_path / "model.pt").exists()
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")


@pytest.mark.skipif(not CLI or not PY, reason="needs SHMFEED_CLI and a torch 2.x venv")
def test_readme_demo_without_its_environment_says_how_to_make_it(tmp_path):
    """`scripts/demo --no-deps` before any run with the dependencies ended in "torchrun:
    command not found" after the build (a review as a new user): it says what to run."""
    env = dict(os.environ, SHMFEED_VENV=str(tmp_path / "none"))
    out = subprocess.run([os.path.join(ROOT, "scripts", "demo"), "--no-deps", "2"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1, out.stderr
    assert "run scripts/demo without --no-deps once" in out.stderr, out.stderr


def test_readme_demo_command(tmp_path):
    """The README's first command, `scripts/demo` (here with --no-deps and 2 steps), runs
    the demo job to its end and leaves nothing behind: no build log in $TMPDIR, no arena.
    meson and ninja are stand-ins that do nothing, so that the test neither rebuilds nor
    reconfigures the build it runs from; it runs only where build/ is that build."""
    built = os.path.join(ROOT, "build", "cli", "shmfeed")
    if not os.path.exists(built) or not os.path.samefile(built, CLI):
        pytest.skip("build/ is not the build under test")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("meson", "ninja"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PATH=f"{bin_dir}:{os.environ['PATH']}",
               SHMFEED_VENV=os.path.dirname(os.path.dirname(PY)))
    out = subprocess.run([os.path.join(ROOT, "scripts", "demo"), "--no-deps", "2"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"job demo: \d+ batches", out.stderr), out.stderr[-3000:]
    # torchrun's and torch's own directories (torchelastic_*, torchinductor_*) aside.
    left = [p.name for p in tmp.iterdir() if not p.name.startswith("torch")]
    assert left == [], left
    assert not os.path.exists("/dev/shm/shmfeed.demo")
