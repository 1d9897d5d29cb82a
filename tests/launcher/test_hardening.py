"""The launcher's edges: what it refuses before a job starts, and what it leaves behind
(nothing) when it does. Control endpoints that are not the job's own, tcp control without
CURVE keys, and a descriptor limit too low for the job.

Helpers and the private runtime directory fixture come from test_launcher.py."""

import os
import resource
import subprocess

from test_launcher import FAKE, job_name, rt, shm_of, write_config  # noqa: F401


def with_nofile(n):
    """preexec_fn: the child runs under `ulimit -n n`."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def test_a_low_descriptor_limit_is_refused_and_leaves_nothing(rt, tmp_path):
    cfg = write_config(tmp_path)
    for n in (6, 10, 16):
        job = job_name(f"nofile{n}")
        out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "true"],
                             capture_output=True, text=True, timeout=30,
                             preexec_fn=with_nofile(n))
        assert out.returncode == 1, (n, out.returncode, out.stderr)
        assert "file descriptors" in out.stderr and f"the limit is {n}" in out.stderr, \
            out.stderr
        assert not shm_of(job)
        assert os.listdir(rt) == []
    # The same job runs at the default limit.
    job = job_name("nofile")
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "true"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert not shm_of(job)
