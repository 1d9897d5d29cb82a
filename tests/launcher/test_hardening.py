"""The launcher's edges: what it refuses before a job starts, and what it leaves behind
(nothing) when it does. Control endpoints that are not the job's own, tcp control without
CURVE keys, and a descriptor limit too low for the job.

Helpers and the private runtime directory fixture come from test_launcher.py."""

import os
import resource
import signal
import socket
import subprocess

from test_launcher import (FAKE, ctl, job_name, rt, shm_of, start_serving,  # noqa: F401
                           write_config)


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


def run_job(cfg, job, *sets, cmd=("true",)):
    args = [FAKE, "run", cfg, "--set", f"job={job}"]
    for kv in sets:
        args += ["--set", kv]
    return subprocess.run([*args, "--", *cmd], capture_output=True, text=True, timeout=30)


def test_an_ipc_endpoint_never_deletes_what_the_job_did_not_create(rt, tmp_path):
    cfg = write_config(tmp_path)
    ep = tmp_path / "ep"
    # A regular file at the socket path, at PATH.pub, and a lock file not shmfeed's.
    for victim in (ep, tmp_path / "ep.pub", tmp_path / "ep.lock"):
        victim.write_text("precious\n")
        job = job_name("victim")
        out = run_job(cfg, job, f"control.endpoint=ipc://{ep}")
        assert out.returncode == 1, out.stderr
        assert f"{victim} exists and is not a" in out.stderr, out.stderr
        assert victim.read_text() == "precious\n"
        assert sorted(os.listdir(tmp_path)) == sorted(["job.yaml", victim.name])
        assert not shm_of(job)
        victim.unlink()
    # Nor a socket someone else bound there.
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(ep))
    try:
        job = job_name("sock")
        out = run_job(cfg, job, f"control.endpoint=ipc://{ep}")
        assert out.returncode == 1 and "not a socket this job created" in out.stderr
        assert ep.is_socket()
    finally:
        s.close()
        ep.unlink()
    # A free path is bound, made private to the user, and cleaned up after.
    job = job_name("free")
    out = run_job(cfg, job, f"control.endpoint=ipc://{ep}",
                  cmd=("sh", "-c", f'stat -c %a {ep} > {tmp_path}/mode'))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "mode").read_text().strip() == "700"
    assert sorted(os.listdir(tmp_path)) == ["job.yaml", "mode"]


def test_a_second_job_on_the_same_ipc_path_is_refused(rt, tmp_path):
    cfg = write_config(tmp_path)
    ep = tmp_path / "ep"
    first = job_name("first")
    p = start_serving(cfg, first, extra=("--set", f"control.endpoint=ipc://{ep}"))
    try:
        second = job_name("second")
        out = run_job(cfg, second, f"control.endpoint=ipc://{ep}")
        assert out.returncode == 1
        assert f"control endpoint ipc://{ep} is in use by another job (launcher pid " \
            f"{p.pid} holds {ep}.lock)" in out.stderr, out.stderr
        assert not shm_of(second)
        # The first job is untouched and still reachable.
        assert ep.is_socket() and (tmp_path / "ep.pub").is_socket()
        assert ctl(first, '{"v":1,"op":"hello"}')["job"] == first
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    assert sorted(os.listdir(tmp_path)) == ["job.yaml"]
    assert not shm_of(first)


def test_the_stale_endpoint_of_a_killed_job_is_reclaimed(rt, tmp_path):
    cfg = write_config(tmp_path)
    ep = tmp_path / "ep"
    job = job_name("stale")
    p = start_serving(cfg, job, extra=("--set", f"control.endpoint=ipc://{ep}"))
    p.kill()
    p.wait()
    assert ep.is_socket() and (tmp_path / "ep.lock").exists()
    # The sockets it recorded in its lock are its own: the next run takes them over.
    out = run_job(cfg, job, f"control.endpoint=ipc://{ep}")
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(tmp_path)) == ["job.yaml"]
    assert not shm_of(job)
