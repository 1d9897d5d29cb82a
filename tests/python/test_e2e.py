"""End to end with the real launcher and producers: `shmfeed run configs/demo.yaml` serves
two ranks (torchrun's environment), twice; both runs deliver the same batches."""

import json
import os
import subprocess
import sys

import pytest

from conftest import HERE, unique_job

CLI = os.environ.get("SHMFEED_CLI")
ROOT = os.path.join(HERE, "..", "..")


@pytest.mark.skipif(not CLI, reason="SHMFEED_CLI is set by `meson test`")
def test_shmfeed_run_serves_two_deterministic_ranks():
    runs = []
    for _ in range(2):
        job = unique_job("e2e")
        out = subprocess.run([CLI, "run", os.path.join(ROOT, "configs", "demo.yaml"), "--set",
                              f"job={job}", "--quiet", "--", sys.executable,
                              os.path.join(HERE, "e2e_ranks.py")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        assert not os.path.exists(f"/dev/shm/shmfeed.{job}")
    first, second = runs
    assert [r["rank"] for r in first] == [0, 1]
    assert first == second
    assert first[0]["shape"] == [8, 257]
    assert not set(first[0]["d"]) & set(first[1]["d"])
