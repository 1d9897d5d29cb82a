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
    ck = torch.load(tmp_path / "ckpt.pt", weights_only=False) \
        if int(torch.__version__.split(".")[0]) >= 2 else torch.load(tmp_path / "ckpt.pt")
    assert ck["loader"]["step"] == 51 and ck["loader"]["rank"] == 0
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")
