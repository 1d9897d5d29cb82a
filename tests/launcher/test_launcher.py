"""The supervisor end to end: `shmfeed run` over synthetic producers (fake_shmfeed) with C
training ranks (consume), driven as a user would, checked through the ranks' outputs,
the control socket, the logs, /dev/shm and the runtime directory.

Each test uses a job name with this process's pid and its own private runtime directory,
and asserts that nothing of the job is left behind."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

FAKE = os.environ.get("SF_FAKE_SHMFEED")
CONSUME = os.environ.get("SF_CONSUME")
CTL = os.environ.get("SF_CTL")
SHMFEED = os.environ.get("SF_SHMFEED")

if not (FAKE and CONSUME and CTL and SHMFEED):
    pytest.skip("set by `meson test` (SF_FAKE_SHMFEED, SF_CONSUME, SF_CTL, SF_SHMFEED)",
                allow_module_level=True)

_count = [0]


def job_name(tag):
    _count[0] += 1
    return f"tl-{tag}-{os.getpid()}-{_count[0]}"


def write_config(tmp_path, text="", world=2):
    p = tmp_path / "job.yaml"
    # A real nanoGPT file: `shmfeed check` opens the sources as `run` does (the fake
    # producers of these tests read nothing). Beside tmp_path, whose listing some tests
    # compare.
    tokens = tmp_path.parent / f"{tmp_path.name}-tokens.bin"
    tokens.write_bytes(bytes(range(256)) * 32)
    p.write_text(f"sources: [{tokens}]\n"
                 "batch: {size: 2, seq_len: 16}\n"
                 f"consumers: {{world_size: {world}}}\n"
                 "control: {stats_interval_ms: 100}\n" + text)
    return str(p)


def ranks_command(n, steps, out_dir, extra="", base=0):
    """A shell command that starts n consume ranks, like torchrun's workers."""
    parts = [f"LOCAL_RANK={r} {CONSUME} --fake --steps {steps} --out {out_dir}/r{r + base}.txt "
             f"{extra} &" for r in range(n)]
    return ["sh", "-c", " ".join(parts) + " wait"]


def shm_of(job):
    return os.path.exists(f"/dev/shm/shmfeed.{job}")


def read_lines(path):
    with open(path) as f:
        return [line.split() for line in f]


def ctl(job, *frames):
    out = subprocess.run([CTL, job, *frames], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def start_serving(cfg, job, env=None, extra=()):
    """`run` without a command: it serves until stopped. Returns once it answers hello."""
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", *extra],
                         stderr=subprocess.PIPE, text=True, env=env)
    if not wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                           capture_output=True).returncode == 0):
        # Stopped, not left serving (its arena stayed in /dev/shm).
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        raise AssertionError("the job never answered hello: " + p.stderr.read())
    return p


def test_two_ranks_end_to_end(rt, tmp_path):
    job = job_name("e2e")
    cfg = write_config(tmp_path)
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          *ranks_command(2, 200, tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for r in (0, 1):
        lines = read_lines(tmp_path / f"r{r}.txt")
        assert [int(l[1]) for l in lines] == list(range(200))
        assert all(int(l[0]) == r for l in lines)
        # Megatron's rule: first sample = step*B*W + rank*B.
        assert all(int(l[2]) == int(l[1]) * 4 + r * 2 for l in lines)
    assert "400 batches, 12800 tokens delivered" in out.stderr
    assert not shm_of(job)


def test_exit_status_of_the_command(rt, tmp_path):
    job = job_name("status")
    cfg = write_config(tmp_path, world=1)
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "sh", "-c",
                          f"test \"$SHMFEED_JOB\" = {job} && test -n \"$SHMFEED_CONTROL\" "
                          "&& exit 7"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 7, out.stderr
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          "/nonexistent/command"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 127
    assert "/nonexistent/command: command not found (nothing was started)" in out.stderr
    assert not shm_of(job)



def test_a_launcher_started_with_sigchld_ignored_sees_its_children_end(rt, tmp_path):
    """SIG_IGN for SIGCHLD survives execve, and with it the kernel reaps children itself:
    a launcher started by a program that ignores SIGCHLD never saw its command (or a
    producer) end, and ran on for ever after the command exited (a review)."""
    job = job_name("ignchld")
    cfg = write_config(tmp_path, world=1)
    start = ("import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
             "os.execv(sys.argv[1], sys.argv[1:])")
    out = subprocess.run([sys.executable, "-c", start, FAKE, "run", cfg, "--set", f"job={job}",
                          "--", "sh", "-c", "exit 3"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 3, out.stderr
    assert not shm_of(job)


def test_a_command_that_is_not_executable_is_126(rt, tmp_path):
    """A file that is there but may not be run was "command not found" (127): the
    shell's convention, and what the user needs to hear, is "permission denied" (126)."""
    job = job_name("noexec")
    cfg = write_config(tmp_path, world=1)
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", str(script)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 126, out.stderr
    assert f"{script}: permission denied (nothing was started)" in out.stderr
    assert not shm_of(job)


def test_a_file_named_like_the_discovery_file_is_kept(rt, tmp_path):
    """The runtime directory only has to be private (SHMFEED_RUNTIME_DIR=$HOME
    qualifies): a job named `package` replaced package.json there with its discovery file
    and removed it at the end (a review). A file that is not this job's discovery file is
    left alone and the job refused; one a killed launcher of the job left is replaced,
    and removed at the end."""
    job = job_name("jsonkeep")
    cfg = write_config(tmp_path, world=1)
    mine = os.path.join(rt, f"{job}.json")
    with open(mine, "w") as f:
        f.write('{"important": true}\n')
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "true"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert f"{mine} is there and is not a discovery file of job {job}" in out.stderr, out.stderr
    # check refuses it too (it said valid; a review).
    out = subprocess.run([SHMFEED, "check", cfg, "--set", f"job={job}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1, out.stdout
    assert f"{mine} is there and is not a discovery file of job {job}" in out.stderr, out.stderr
    with open(mine) as f:
        assert f.read() == '{"important": true}\n'
    assert not shm_of(job)
    assert sorted(os.listdir(rt)) == [f"{job}.json"]
    # What a launcher killed outright leaves: its discovery file, its pid gone.
    with open(mine, "w") as f:
        json.dump({"v": 1, "job": job, "pid": 2 ** 22 + 1, "control": "ipc:///nowhere",
                   "stats": "ipc:///nowhere.pub", "curve_server_public": None}, f)
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "sh", "-c",
                          f"grep -q '\"pid\":'$PPID {mine}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert os.listdir(rt) == []

def test_producer_killed_mid_run_changes_nothing(rt, tmp_path):
    cfg = write_config(tmp_path)
    ref_dir, kill_dir = tmp_path / "ref", tmp_path / "kill"
    ref_dir.mkdir()
    kill_dir.mkdir()
    job = job_name("ref")
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          *ranks_command(2, 300, ref_dir)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # Producer 0 dies at its 5th claim. Each batch takes 0.5 ms more, so that the other
    # producer cannot fill all 600 steps before producer 0 runs at all (a loaded
    # machine may start it tens of milliseconds late; at full speed the job takes less).
    env = dict(os.environ, SHMFEED_TEST_CRASH_AT="5", SHMFEED_TEST_SLOW_US="500")
    job = job_name("kill")
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          *ranks_command(2, 300, kill_dir)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert "producer 0 died (killed by signal 9" in out.stderr
    assert "producer 0 restarted" in out.stderr
    assert "producer restarts 1" in out.stderr
    for r in (0, 1):
        assert read_lines(kill_dir / f"r{r}.txt") == read_lines(ref_dir / f"r{r}.txt")
    assert not shm_of(job)


def test_stalled_producer_is_killed_repaired_and_replaced(rt, tmp_path):
    """SIGSTOP of one producer of a 2-rank job: it is reported stalled (log and status)
    after half the stall timeout, killed at the stall timeout, its slot repaired, and it
    is restarted; both ranks get their batches, byte-identical to an uninterrupted run,
    within the stall timeout plus a margin."""
    # Reported at 1.5 s: three checks fit on a loaded machine. 1,200 steps: with the
    # victim stopped between fills (it holds no slot), the other producer alone still
    # fills for longer than the stall timeout (2,400 fills of 2 ms); with 300 the job
    # could end first, and nothing was reported (once in CI).
    steps, stall_s = 1200, 3.0
    cfg = write_config(tmp_path, f"producers: {{count: 2, stall_timeout: {stall_s}s}}\n")
    ref_dir, stop_dir = tmp_path / "ref", tmp_path / "stop"
    ref_dir.mkdir()
    stop_dir.mkdir()
    env = dict(os.environ, SHMFEED_TEST_SLOW_US="2000")  # fills take 2 ms: a slot is held
    job = job_name("stallref")
    t0 = time.monotonic()
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          *ranks_command(2, steps, ref_dir)],
                         capture_output=True, text=True, timeout=60, env=env)
    ref_wall = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert "producer stalls 0" in out.stderr, out.stderr

    job = job_name("stall")
    t0 = time.monotonic()
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          *ranks_command(2, steps, stop_dir, extra="--sleep-us 2000")],
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                               capture_output=True).returncode == 0)
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"stats"}')["batches"] >= 20)
        victim = ctl(job, '{"v":1,"op":"stats"}')["producers"][0]["pid"]
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        # Before the kill, status and stats show it stalled.
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"status"}')["producers_stalled"] == 1,
                        stall_s)
        st = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                            timeout=10)
        assert "2/2 producers alive (1 stalled)" in st.stdout, st.stdout
        assert "stalled" in [q["state"] for q in ctl(job, '{"v":1,"op":"stats"}')["producers"]]
        # Then it is killed and replaced.
        assert wait_for(lambda: not os.path.exists(f"/proc/{victim}"), stall_s + 5)
        killed = time.monotonic()
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:  # a failed check: end the job cleanly, leave nothing
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "true"],
                               capture_output=True, timeout=30)
    wall = time.monotonic() - t0
    assert p.returncode == 0, err
    assert stall_s * 0.9 <= killed - stopped < stall_s + 3, killed - stopped
    assert f"producer 0 (pid {victim}) looks stalled" in err, err
    assert f"producer 0 (pid {victim}) stalled: no heartbeat for" in err, err
    assert "killing it (SIGKILL)" in err
    assert "producer 0 died (killed after stalling)" in err, err
    assert "producer 0 restarted" in err
    assert "producer stalls 1" in err, err
    for r in (0, 1):
        assert read_lines(stop_dir / f"r{r}.txt") == read_lines(ref_dir / f"r{r}.txt")
    assert len(read_lines(stop_dir / "r0.txt")) == steps
    assert wall < ref_wall + steps * 0.002 + stall_s + 10, (wall, ref_wall)
    assert not shm_of(job)


def test_a_stall_in_the_first_fill_says_no_fill_has_ended(rt, tmp_path):
    """A producer stalled in the job's first fill was said to hold its slot against "this
    job's fills take 0.00 ms on average" (a review): there is no average yet."""
    cfg = write_config(tmp_path, "producers: {count: 1, max_restarts: 0, stall_timeout: 1s}\n",
                       world=1)
    env = dict(os.environ, SHMFEED_TEST_SLOW_US="30000000")  # the first fill hangs
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job_name('stall1')}", "--",
                          *ranks_command(1, 1, tmp_path)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0, out.stderr
    assert "stalled: no heartbeat for" in out.stderr, out.stderr
    assert "holding rank 0 step 0 for" in out.stderr, out.stderr
    assert "(no fill of this job has ended yet)" in out.stderr, out.stderr
    assert "ms on average" not in out.stderr, out.stderr


def test_idle_producers_are_not_stalled(rt, tmp_path):
    """Producers waiting for free slots (no consumer takes batches, every ring is full)
    and producers of a paused job are not stalled, however long that lasts."""
    cfg = write_config(tmp_path, "producers: {count: 2, stall_timeout: 1s}\n")
    job = job_name("idle")
    p = start_serving(cfg, job)
    try:
        assert wait_for(lambda: all(r["ready"] == 4 for r in
                                    ctl(job, '{"v":1,"op":"stats"}')["ranks"]))
        pids = [q["pid"] for q in ctl(job, '{"v":1,"op":"stats"}')["producers"]]
        time.sleep(2.5)
        assert ctl(job, '{"v":1,"op":"pause"}')["state"] == "paused"
        time.sleep(2.5)
        assert ctl(job, '{"v":1,"op":"resume"}')["state"] == "running"
        time.sleep(1.5)
        st = ctl(job, '{"v":1,"op":"stats"}')
        assert st["stalls"] == 0 and st["restarts"] == 0, st
        assert [q["pid"] for q in st["producers"]] == pids
        assert all(q["state"] == "running" for q in st["producers"]), st
        assert ctl(job, '{"v":1,"op":"status"}')["producers_stalled"] == 0
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=10)
    assert p.returncode == 0
    assert "stalled" not in err, err
    assert not shm_of(job)


def test_producer_that_keeps_dying_stops_the_job(rt, tmp_path):
    job = job_name("fail")
    cfg = write_config(tmp_path, "producers: {count: 2, max_restarts: 3}\n")
    env = dict(os.environ, SHMFEED_TEST_FAIL="io")
    t0 = time.monotonic()
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "sleep", "30"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1
    assert time.monotonic() - t0 < 15
    assert "died 4 times in a row" in out.stderr
    assert "bad.bin: cannot read" in out.stderr
    assert not shm_of(job)


def test_data_error_stops_the_job_at_once(rt, tmp_path):
    """A data error is deterministic: no restart, the job stops with the message."""
    job = job_name("dataerr")
    cfg = write_config(tmp_path, "producers: {count: 2, max_restarts: 3}\n")
    env = dict(os.environ, SHMFEED_TEST_FAIL="1")
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "sleep", "30"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1
    assert "data error: bad.bin: byte 0: not a token file" in out.stderr
    assert "restarted" not in out.stderr
    assert "times in a row" not in out.stderr
    assert not shm_of(job)


def test_sigterm_and_sigint_shut_down_cleanly(rt, tmp_path):
    cfg = write_config(tmp_path)
    for sig in (signal.SIGTERM, signal.SIGINT):
        job = job_name("term")
        p = start_serving(cfg, job)
        pids = [q["pid"] for q in ctl(job, '{"v":1,"op":"stats"}')["producers"]]
        assert all(pid > 0 for pid in pids)
        p.send_signal(sig)
        # Stopped by SIGINT (Ctrl-C), the launcher ends by it once clean, as a program
        # interrupted should, so that a script running it stops too.
        assert p.wait(timeout=10) == (-signal.SIGINT if sig == signal.SIGINT else 0)
        assert not shm_of(job)
        for pid in pids:
            assert not os.path.exists(f"/proc/{pid}")
    # With a command, the signal goes to the command and its status comes back.
    job = job_name("termcmd")
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", "--", "sleep", "30"],
                         stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: os.path.exists(os.path.join(rt, f"{job}.json")))
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 128 + signal.SIGTERM
    assert not shm_of(job)


def test_a_launcher_under_nohup_ignores_sighup(rt, tmp_path):
    """With SIGHUP ignored (nohup), a hangup does not stop the job; SIGTERM still does."""
    cfg = write_config(tmp_path)
    job = job_name("nohup")
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}"], stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGHUP,
                                                                     signal.SIG_IGN))
    assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                           capture_output=True).returncode == 0)
    p.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert p.poll() is None
    assert ctl(job, '{"v":1,"op":"status"}')["state"] == "running"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=10)
    assert p.returncode == 0
    assert "SIGTERM from pid" in err and "SIGHUP" not in err, err
    assert not shm_of(job)


def test_sigkill_of_the_launcher(rt, tmp_path):
    cfg = write_config(tmp_path)
    job = job_name("kill9")
    p = start_serving(cfg, job)
    pids = [q["pid"] for q in ctl(job, '{"v":1,"op":"stats"}')["producers"]]
    p.kill()
    p.wait()
    # PR_SET_PDEATHSIG: the producers go with their launcher.
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), 5)
    assert shm_of(job)  # stale, until the next run of the job
    # status says the job is dead and what cleans it up, not that nothing is there.
    out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1
    assert f"job '{job}' is dead: its launcher (pid {p.pid}) is gone" in out.stderr, out.stderr
    assert f"/dev/shm/shmfeed.{job} and {rt}/{job}.json with its control sockets" \
        in out.stderr, out.stderr
    assert "the next `shmfeed run` of this job reclaims them" in out.stderr, out.stderr
    out = subprocess.run([SHMFEED, "status"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and f"dead (their launcher crashed" in out.stderr, out.stderr
    assert job in out.stderr
    os.unlink(os.path.join(rt, f"{job}.json"))  # the arena alone says the same
    out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "is dead" in out.stderr and "reclaims it" in out.stderr
    # Unnamed too: `status` listed dead jobs by their discovery files alone, and an
    # arena without one (a launcher killed between the two) was nowhere (a review).
    out = subprocess.run([SHMFEED, "status"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "dead (their launcher crashed" in out.stderr, out.stderr
    assert f"{job} (its arena)" in out.stderr, out.stderr
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--",
                          *ranks_command(2, 20, tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "reclaimed the stale arena" in out.stderr
    assert not shm_of(job)
    assert len(read_lines(tmp_path / "r1.txt")) == 20


def test_a_seek_past_a_finite_runs_end_is_refused(rt, tmp_path):
    """Seek took any step below the ring's limit: past a finite run's end marker the rank
    served nothing and the job said it had ended (0 batches delivered)."""
    cfg = write_config(tmp_path, "sampling: {epochs: 1}\n")
    job = job_name("seekend")
    p = start_serving(cfg, job)
    try:
        # The fake producers' epoch: 64 samples of B x W = 4, the end marker at step 16.
        bad = ctl(job, '{"v":1,"op":"seek","rank":0,"step":17}')
        assert not bad["ok"] and bad["code"] == -1010, bad
        assert "step 17 is past this run's end: its last step is 15, its end marker " \
            "step 16" in bad["error"], bad
        assert ctl(job, '{"v":1,"op":"seek","rank":0,"step":16}')["ok"]
        assert ctl(job, '{"v":1,"op":"seek","rank":1,"step":5}')["ok"]
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    assert not shm_of(job)


def test_control_requests(rt, tmp_path):
    cfg = write_config(tmp_path)
    job = job_name("ctl")
    p = start_serving(cfg, job)
    try:
        hello = ctl(job, '{"v":1,"op":"hello","id":42}')
        assert hello["ok"] and hello["id"] == 42 and hello["job"] == job
        assert hello["ranks"] == 2 and hello["batch"] == 2 and hello["seq_len"] == 16
        assert ctl(job, '{"v":1,"op":"status"}')["state"] == "running"
        # Without consumers the rings fill up: all K slots READY, steps 0..3.
        assert wait_for(lambda: all(r["ready"] == 4 for r in
                                    ctl(job, '{"v":1,"op":"stats"}')["ranks"]))
        # Seek rank 1 to step 100: its ring now serves steps 100..103.
        seek = ctl(job, '{"v":1,"op":"seek","rank":1,"step":100}')
        assert seek["ok"], seek
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"stats"}')["ranks"][1]["next_step"]
                        == 100)
        bad = ctl(job, '{"v":1,"op":"seek","rank":9,"step":1}')
        assert not bad["ok"] and "rank 9 is not a local rank" in bad["error"]
        assert "0..1" in bad["error"]
        # Steps the slot words' 48-bit lap cannot hold are refused, naming the value and
        # the range (before, 2^52 was reported done while rank 0 kept serving step 0,
        # and 2^64-1 wedged rank 0).
        limit = 4 * (2**48 - 1)  # K = 4
        for step in (2**52, limit):
            bad = ctl(job, f'{{"v":1,"op":"seek","rank":0,"step":{step}}}')
            assert not bad["ok"] and bad["code"] == -1010, bad
            assert f"step {step} is out of range" in bad["error"], bad
            assert f"0..{limit - 1}" in bad["error"], bad
        bad = ctl(job, '{"v":1,"op":"seek","rank":0,"step":18446744073709551615}')
        assert not bad["ok"] and bad["code"] == -1017 and "below" in bad["error"], bad
        assert ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["next_step"] == 0
        assert ctl(job, f'{{"v":1,"op":"seek","rank":0,"step":{limit - 1}}}')["ok"]
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["next_step"]
                        == limit - 1)
        assert ctl(job, '{"v":1,"op":"seek","rank":0,"step":0}')["ok"]
        # Pause stops the producers: a consumer that takes batches gets at most the K
        # already READY, then nothing until resume.
        assert ctl(job, '{"v":1,"op":"pause"}')["state"] == "paused"
        # Its producers are said to be paused (they were listed as running).
        assert {q["state"] for q in ctl(job, '{"v":1,"op":"stats"}')["producers"]} \
            == {"paused"}
        before = ctl(job, '{"v":1,"op":"stats"}')["produced"]
        c = subprocess.Popen([CONSUME, "--fake", "--steps", "10", "--out",
                              str(tmp_path / "p.txt")],
                             env=dict(os.environ, SHMFEED_JOB=job, LOCAL_RANK="0"))
        time.sleep(0.5)
        assert c.poll() is None
        assert ctl(job, '{"v":1,"op":"stats"}')["produced"] == before
        assert ctl(job, '{"v":1,"op":"resume"}')["state"] == "running"
        assert c.wait(timeout=10) == 0
        assert len(read_lines(tmp_path / "p.txt")) == 10
        # The consumer's waits reach the stats through the arena's telemetry.
        st = ctl(job, '{"v":1,"op":"stats"}')
        assert st["wait_samples"] == 10, st
        assert 0 < st["wait_p50_ns"] <= st["wait_p99_ns"], st
        stop = ctl(job, '{"v":1,"op":"stop"}')
        assert stop["ok"]
        assert p.wait(timeout=10) == 0
        assert not shm_of(job)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            subprocess.run([SHMFEED, "inspect", job], capture_output=True)
            os.system(f"rm -f /dev/shm/shmfeed.{job}")


def test_a_seek_held_up_by_a_stalled_producer_blocks_nothing(rt, tmp_path):
    """A control seek waited for the slot a producer was filling inside the supervisor's
    only loop: with that producer stopped, the control socket, signals and the stall
    watchdog that would end it all froze. Now the seek's reply waits, everything else is
    served, and the watchdog's kill lets the seek finish."""
    # The stall timeout leaves the checks below seconds on a loaded machine.
    cfg = write_config(tmp_path, "producers: {count: 1, stall_timeout: 5s}\n", world=1)
    job = job_name("seekstall")
    p = start_serving(cfg, job, env=dict(os.environ, SHMFEED_TEST_SLOW_US="300000"))
    try:
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["filling"] == 1)
        victim = ctl(job, '{"v":1,"op":"stats"}')["producers"][0]["pid"]
        os.kill(victim, signal.SIGSTOP)
        seek = subprocess.Popen([CTL, job, '{"v":1,"op":"seek","rank":0,"step":100,"id":7}'],
                                stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, SF_CTL_TIMEOUT_MS="20000"))
        time.sleep(0.3)
        assert seek.poll() is None  # waits for the slot...
        t0 = time.monotonic()
        st = ctl(job, '{"v":1,"op":"status"}')  # ...while status is answered at once
        assert time.monotonic() - t0 < 4.0 and st["state"] == "running"
        busy = ctl(job, '{"v":1,"op":"seek","rank":0,"step":5}')
        assert not busy["ok"] and "waits for a producer" in busy["error"], busy
        # A pause is refused too: the paused producer would hold the slot the seek waits
        # for, and the watchdog that ends a stall sleeps while the job is paused (a pause
        # was taken, and held the seek and the rank until a resume).
        busy = ctl(job, '{"v":1,"op":"pause","id":3}')
        assert not busy["ok"] and busy["id"] == 3 and busy["code"] == -1005, busy
        assert "waits for a producer" in busy["error"], busy
        assert ctl(job, '{"v":1,"op":"status"}')["state"] == "running"
        # The seek's hold of the rank is no consumer (its pid read as the launcher's,
        # negated).
        assert ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["consumer_pid"] == 0
        out = json.loads(seek.communicate(timeout=20)[0])
        assert out["ok"] and out["id"] == 7, out
        assert ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["next_step"] == 100
        assert ctl(job, '{"v":1,"op":"stop"}')["ok"]
        err = p.communicate(timeout=30)[1]
        assert "stalled" in err and "rank 0 repositioned to step 100" in err, err
        assert p.returncode == 0, err
        assert not shm_of(job)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            os.system(f"rm -f /dev/shm/shmfeed.{job}")


def test_the_seek_command_says_a_seek_it_stopped_waiting_for_is_still_pending(rt, tmp_path):
    """`shmfeed seek` gave up after its timeout saying the job "did not answer", exit 1,
    while the seek stayed pending in the job and took effect once the producer went on
    (a review)."""
    cfg = write_config(tmp_path, "producers: {count: 1, stall_timeout: 0}\n", world=1)
    job = job_name("seekpend")
    p = start_serving(cfg, job, env=dict(os.environ, SHMFEED_TEST_SLOW_US="300000"))
    victim = None
    try:
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["filling"] == 1)
        victim = ctl(job, '{"v":1,"op":"stats"}')["producers"][0]["pid"]
        os.kill(victim, signal.SIGSTOP)
        out = subprocess.run([SHMFEED, "seek", job, "--rank", "0", "--step", "100", "--timeout",
                              "1"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and out.stdout == "", out
        assert f"job '{job}' has not repositioned rank 0 within 1 s" in out.stderr, out.stderr
        assert "The seek stays pending in the job and takes effect once the slot is done" \
            in out.stderr, out.stderr
        os.kill(victim, signal.SIGCONT)
        assert wait_for(lambda: ctl(job, '{"v":1,"op":"stats"}')["ranks"][0]["next_step"]
                        == 100)
        assert ctl(job, '{"v":1,"op":"stop"}')["ok"]
        err = p.communicate(timeout=30)[1]
        assert "rank 0 repositioned to step 100" in err, err
        assert p.returncode == 0, err
        assert not shm_of(job)
    finally:
        if victim:
            os.kill(victim, signal.SIGCONT) if p.poll() is None else None
        if p.poll() is None:
            p.kill()
            p.wait()
            os.system(f"rm -f /dev/shm/shmfeed.{job}")


def test_top_shows_a_producer_that_stalls_while_it_runs(rt, tmp_path):
    """top read the job's status once: every frame's header kept "2/2 producers alive"
    with no "(1 stalled)" while its own producer rows said stalled."""
    cfg = write_config(tmp_path, "producers: {count: 2, stall_timeout: 4s}\n", world=1)
    job = job_name("topstall")
    env = dict(os.environ, SHMFEED_TEST_SLOW_US="2000")
    p = start_serving(cfg, job, env=env)
    rank = subprocess.Popen([CONSUME, "--steps", "100000", "--sleep-us", "2000"],
                            env=dict(env, SHMFEED_JOB=job, LOCAL_RANK="0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        top = subprocess.Popen([SHMFEED, "top", job, "--count", "60"], stdout=subprocess.PIPE,
                               text=True)
        time.sleep(0.5)
        os.kill(ctl(job, '{"v":1,"op":"stats"}')["producers"][0]["pid"], signal.SIGSTOP)
        out = top.communicate(timeout=30)[0]
        assert top.returncode == 0
        headers = [l for l in out.splitlines() if l.startswith("job ")]
        assert len(headers) == 60 and "(1 stalled)" not in headers[0], headers[0]
        assert any("2/2 producers alive (1 stalled)" in h for h in headers), out
        assert ctl(job, '{"v":1,"op":"stop"}')["ok"]
        p.communicate(timeout=30)
    finally:
        rank.kill()
        rank.wait()
        if p.poll() is None:
            p.kill()
            p.wait()
            os.system(f"rm -f /dev/shm/shmfeed.{job}")


def test_batches_count_what_ranks_read_after_they_seek(rt, tmp_path):
    """A rank resumed with sf_consumer_seek() moved its ring without the supervisor
    knowing: 5 batches read from step 1000000 were counted as 1000005."""
    cfg = write_config(tmp_path, world=1)
    job = job_name("seekcount")
    p = start_serving(cfg, job)
    try:
        r = subprocess.run([CONSUME, "--fake", "--seek", "1000000", "--steps", "5", "--out",
                            str(tmp_path / "r0.txt")],
                           env=dict(os.environ, SHMFEED_JOB=job, LOCAL_RANK="0"),
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert [int(l[1]) for l in read_lines(tmp_path / "r0.txt")] == \
            list(range(1000000, 1000005))
        assert ctl(job, '{"v":1,"op":"stats"}')["batches"] == 5
        assert ctl(job, '{"v":1,"op":"stop"}')["ok"]
        err = p.communicate(timeout=30)[1]
        assert "5 batches, 160 tokens delivered" in err, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            os.system(f"rm -f /dev/shm/shmfeed.{job}")


MALFORMED = [
    ("not json", "malformed JSON"),
    ("", "malformed JSON"),
    ("[1,2]", "must be a JSON object"),
    ('{"v":2,"op":"status"}', "unsupported protocol version"),
    ('{"op":"status"}', 'missing \\"v\\"'),
    ('{"v":1}', 'missing \\"op\\"'),
    ('{"v":1,"op":"explode"}', "unknown op"),
    ('{"v":1,"op":"status","extra":1}', "unknown key"),
    ('{"v":1,"op":"status","op":"stop"}', "duplicate key"),
    ('{"v":1,"op":"seek","rank":0}', "seek needs"),
    ('{"v":1,"op":"stop","rank":0}', "belong to seek only"),
    ('{"v":1,"op":"seek","rank":-1,"step":0}', "rank"),
    ('{"v":1,"op":"status"} trailing', "trailing bytes"),
    ('{"v":1,"op":"st\\u00"}', "malformed JSON"),
    ('{"a":' * 20 + "1" + "}" * 20, "nested too deeply"),
]


def test_malformed_requests_get_errors_and_change_nothing(rt, tmp_path):
    cfg = write_config(tmp_path)
    job = job_name("bad")
    p = start_serving(cfg, job)
    try:
        for raw, why in MALFORMED:
            rep = ctl(job, raw)
            assert rep["ok"] is False and rep["code"] == -1017, (raw, rep)
            assert why in json.dumps(rep["error"]) or why in rep["error"], (raw, rep)
        # The reply to a refused request echoes its "id" wherever it stands (it had none
        # where the refusal came before the id was read).
        for raw in ('{"v":2,"op":"status","id":4}', '{"v":1,"op":"bogus","id":4}',
                    '{"op":"status","id":4}', '{"v":1,"op":"status","x":1,"id":4}',
                    '{"id":4,"v":1,"op":"seek","rank":0}'):
            rep = ctl(job, raw)
            assert rep["ok"] is False and rep.get("id") == 4, (raw, rep)
        rep = ctl(job, '{"v":1,"op":"bogus","id":-4}')
        assert rep["ok"] is False and "id" not in rep, rep
        rep = ctl(job, "--size", "5000")
        assert rep["ok"] is False and "limit" in rep["error"]
        # Far past the limit, libzmq drops the connection: no reply, no harm.
        out = subprocess.run([CTL, job, "--size", "1000000"], capture_output=True, timeout=10)
        assert out.returncode == 1
        rep = ctl(job, '{"v":1,"op":"status"}', "second frame")
        assert rep["ok"] is False and "one frame" in rep["error"]
        st = ctl(job, '{"v":1,"op":"status"}')
        assert st["state"] == "running" and st["producers_alive"] == 2
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    assert not shm_of(job)


def test_status_and_top(rt, tmp_path):
    cfg = write_config(tmp_path)
    job = job_name("top")
    p = start_serving(cfg, job)
    try:
        out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                             timeout=10)
        assert out.returncode == 0, out.stderr
        assert f"job {job}: running" in out.stdout
        assert "2/2 producers alive" in out.stdout
        # The words of run's summary ("skipped records" here, "records skipped" there).
        assert "restarts 0, stalls 0, repairs 0, records skipped 0" in out.stdout, out.stdout
        out = subprocess.run([SHMFEED, "status", "--json"], capture_output=True, text=True,
                             timeout=10)
        doc = json.loads(out.stdout)
        assert doc["status"]["job"] == job and len(doc["stats"]["ranks"]) == 2
        out = subprocess.run([SHMFEED, "top", job, "--count", "2"], capture_output=True,
                             text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count(f"job {job}:") == 2
        assert "producer      pid" in out.stdout
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True)
    assert out.returncode == 1 and "no running shmfeed job" in out.stderr



def test_status_says_how_many_ranks_and_producers_it_leaves_out(rt, tmp_path):
    """The stats carry 64 ranks and 64 producers: a job of 70 ranks and 66 producers
    showed 64 of each without a word, so a starved rank 64 could be seen nowhere (a
    review). status says which are shown, and the JSON gives the totals."""
    cfg = write_config(tmp_path, "producers: {count: 66}\narena: {slots_per_rank: 1}\n",
                       world=70)
    job = job_name("many")
    p = start_serving(cfg, job)
    try:
        out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                             timeout=10)
        assert out.returncode == 0, out.stderr
        assert "ranks 0..63 of 70 shown" in out.stdout, out.stdout
        assert "producers 0..63 of 66 shown" in out.stdout, out.stdout
        out = subprocess.run([SHMFEED, "status", job, "--json"], capture_output=True,
                             text=True, timeout=10)
        doc = json.loads(out.stdout)
        assert len(doc["stats"]["ranks"]) == 64 and doc["stats"]["ranks_total"] == 70
        assert len(doc["stats"]["producers"]) == 64 and doc["stats"]["producers_total"] == 66
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)

def test_status_and_inspect_show_the_nodes_ranks(rt, tmp_path):
    """A node of 2 ranks in a world of 4 takes its ranks from its first rank (rank_base:
    auto, the default); a later group of ranks with other global ranks re-bases it once
    the first group has exited."""
    cfg = write_config(tmp_path, world=4)
    job = job_name("nr")
    p = start_serving(cfg, job, extra=["--set", "consumers.local_ranks=2"])

    def status():
        out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                             timeout=10)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def inspect():
        out = subprocess.run([SHMFEED, "inspect", job, "--json"], capture_output=True,
                             text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["node_ranks"]

    def rank(global_rank, local_rank, path):
        env = dict(os.environ, SHMFEED_JOB=job, RANK=str(global_rank),
                   LOCAL_RANK=str(local_rank), WORLD_SIZE="4", LOCAL_WORLD_SIZE="2",
                   GROUP_RANK=str(global_rank // 2))
        out = subprocess.run([CONSUME, "--fake", "--steps", "3", "--out", str(path)],
                             env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return [int(line[0]) for line in read_lines(path)]

    try:
        assert "node ranks auto, not yet known" in status()
        assert inspect() == {"auto": True, "generation": 0, "base": None}
        assert rank(3, 1, tmp_path / "a.txt") == [3, 3, 3]
        assert "node ranks 2..3 (auto)" in status()
        assert inspect() == {"auto": True, "generation": 1, "base": 2}
        # The rank of the first group exited: the node re-bases to 0..1, and the ring
        # of local rank 1 serves global rank 1 from the step it had reached.
        assert rank(1, 1, tmp_path / "b.txt") == [1, 1, 1]
        assert "node ranks 0..1 (auto)" in status()
        assert inspect() == {"auto": True, "generation": 2, "base": 0}
        assert [int(line[1]) for line in read_lines(tmp_path / "b.txt")] == [3, 4, 5]
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)


def test_top_shows_which_rank_is_starved(rt, tmp_path):
    """Rank 0's consumer waits on a paused job, rank 1 has none: top's bars tell them
    apart at a glance."""
    cfg = write_config(tmp_path)
    job = job_name("starved")
    p = start_serving(cfg, job)
    rank0 = subprocess.Popen([CONSUME, "--fake", "--steps", "1000000", "--out",
                              str(tmp_path / "r0.txt")],
                             env={**os.environ, "SHMFEED_JOB": job, "LOCAL_RANK": "0"})
    try:
        assert wait_for(lambda: os.path.exists(tmp_path / "r0.txt") and
                        os.path.getsize(tmp_path / "r0.txt") > 0)
        assert ctl(job, '{"v":1,"op":"pause"}')["state"] == "paused"
        time.sleep(0.5)  # five stats intervals, the last all waiting
        # The consumer wakes every 100 ms to look around (for microseconds); a sample
        # taken just then counts that interval as unknown, hence up to three looks.
        for _ in range(3):
            out = subprocess.run([SHMFEED, "top", job, "--count", "1"], capture_output=True,
                                 text=True, timeout=10)
            assert out.returncode == 0, out.stderr
            rows = {int(line.split()[0]): line for line in out.stdout.splitlines()
                    if line[:5].strip().isdigit() and "[" in line}
            if "[################] 100%" in rows[0]:
                break
        assert "waiting (last interval)   stalls  consumer" in out.stdout
        assert "[################] 100%" in rows[0], out.stdout
        assert "[................]   0%" in rows[1], out.stdout
        # The percentiles are the tops of power-of-two buckets, said as bounds (a new
        # user's trial: "p50 4.1 us" read up to twice the waits it stood for).
        assert re.search(r"consumer wait p50 <[\d.]+ [num]?s, p99 <[\d.]+ [num]?s",
                         out.stdout), out.stdout
    finally:
        rank0.kill()
        rank0.wait(timeout=10)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    assert not shm_of(job)


def test_a_stopping_job_says_so_in_its_stats(rt, tmp_path):
    """From `stop` on, the stats (what status, top and the metrics show) say stopping: they
    said running for as long as the command took to exit, up to the grace period."""
    cfg = write_config(tmp_path)
    job = job_name("stopping")
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", "--grace-ms", "5000", "--",
                          "sh", "-c", "trap '' TERM; sleep 3"],
                         stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                               capture_output=True).returncode == 0)
        assert ctl(job, '{"v":1,"op":"stats"}')["state"] == "running"
        assert ctl(job, '{"v":1,"op":"stop"}')["state"] == "stopping"
        stats = ctl(job, '{"v":1,"op":"stats"}')
        assert stats["state"] == "stopping", stats
        assert stats["repairs"] == 0 and stats["slots_repaired"] == 0, stats
    finally:
        p.communicate(timeout=20)
    assert not shm_of(job)


def stop_then_crash(tmp_path, job, producers, grace_ms):
    """Run a one-rank job whose command ignores SIGTERM and reads 100 batches, 20 ms
    each; stop it, then have producer 0 die at its next claim. Returns the launcher's
    status and stderr."""
    cfg = write_config(tmp_path, f"producers: {producers}\n", world=1)
    crash = tmp_path / "crash-now"
    env = dict(os.environ, SHMFEED_TEST_CRASH_ONCE=str(crash), SHMFEED_TEST_SLOW_US="20000")
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", "--grace-ms", str(grace_ms),
                          "--", "sh", "-c", f"trap '' TERM; LOCAL_RANK=0 {CONSUME} --fake "
                          f"--steps 100 --out {tmp_path}/r0.txt"],
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                               capture_output=True).returncode == 0)
        assert ctl(job, '{"v":1,"op":"stop"}')["state"] == "stopping"
        crash.touch()  # the producer dies at its next claim: after the stop
        err = p.communicate(timeout=60)[1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, err


def test_producers_keep_serving_a_command_that_finishes_after_a_stop(rt, tmp_path):
    """After a stop the command may read its last batches (a trainer completing its step
    or saving a checkpoint on SIGTERM), and the producers serve it until it exits. One
    that died meanwhile was not restarted (nor a stalled one replaced): the command waited
    for batches that never came, and was killed after the grace period (status 137)."""
    job = job_name("stopserve")
    rc, err = stop_then_crash(tmp_path, job, "{count: 1}", 15000)
    assert rc == 0, err
    assert "producer 0 restarted" in err, err
    assert [int(l[1]) for l in read_lines(tmp_path / "r0.txt")] == list(range(100))
    assert not shm_of(job)


def test_a_producer_failing_for_good_while_stopping_fails_the_job(rt, tmp_path):
    """A producer that died once too often (or met a data error) while a stopping job's
    command read its last batches: begin_stop() did nothing for a job stopping already,
    so the job ended as a clean stop and logged the stop's reason as the error."""
    job = job_name("stopfail")
    rc, err = stop_then_crash(tmp_path, job, "{count: 1, max_restarts: 0}", 3000)
    assert rc != 0, err
    assert "producer 0 died 1 times in a row" in err, err
    assert "error: stop requested" not in err and "restarted" not in err, err
    assert not shm_of(job)


def test_status_from_another_runtime_directory(rt, tmp_path):
    """A job asked for from a shell without the runtime directory it was started with: it
    said "no running job" (or a raw "No such file or directory" where the directory did
    not exist), while a second run of it said the job was in use."""
    cfg = write_config(tmp_path)
    job = job_name("otherdir")
    p = start_serving(cfg, job)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    try:
        for d in (str(other), str(tmp_path / "missing")):
            out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                                 timeout=10, env={**os.environ, "SHMFEED_RUNTIME_DIR": d})
            assert out.returncode == 1, out
            assert (f"job '{job}' runs (launcher pid {p.pid}) but its control files are not "
                    f"in {d}: it was started with another SHMFEED_RUNTIME_DIR") in out.stderr
        out = subprocess.run([SHMFEED, "status", "nosuchjob"], capture_output=True, text=True,
                             timeout=10, env={**os.environ,
                                              "SHMFEED_RUNTIME_DIR": str(tmp_path / "missing")})
        assert out.returncode == 1 and "no running shmfeed job 'nosuchjob'" in out.stderr, out
        # Another user's directory (as one can take /tmp/shmfeed-UID first): the way out.
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        if os.geteuid() == 0:
            os.chown(theirs, 65534, 65534)
            out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                                 timeout=10, env={**os.environ,
                                                  "SHMFEED_RUNTIME_DIR": str(theirs)})
            assert out.returncode == 1 and "belongs to uid 65534, not 0: set " \
                "SHMFEED_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a directory of your own" \
                in out.stderr, out
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)
    assert not shm_of(job)


def test_a_dead_rank_is_named_once(rt, tmp_path):
    """A consumer killed outright: its slot is repaired and the launcher says so, once. The
    message was never given: the launcher noted the live pid at every tick, and so took
    the dead one for one it had already reported."""
    cfg = write_config(tmp_path)
    job = job_name("deadrank")
    p = start_serving(cfg, job)
    rank0 = subprocess.Popen([CONSUME, "--fake", "--steps", "1000000", "--sleep-us", "1000",
                              "--out", str(tmp_path / "r0.txt")],
                             env={**os.environ, "SHMFEED_JOB": job, "LOCAL_RANK": "0"})
    try:
        assert wait_for(lambda: os.path.exists(tmp_path / "r0.txt") and
                        os.path.getsize(tmp_path / "r0.txt") > 0)
        time.sleep(0.3)  # a few stats intervals with the rank alive
        rank0.kill()
        rank0.wait(timeout=10)
        time.sleep(0.5)
    finally:
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=10)[1]
    assert err.count(f"rank 0: consumer pid {rank0.pid} is gone") == 1, err
    assert not shm_of(job)


PROMETHEUS_PARSE = r"""
import json, sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
        for f in text_string_to_metric_families(sys.stdin.read())}
print(json.dumps(fams))
"""


def prometheus_python():
    """The torch venv of scripts/deps, which has prometheus_client; None without it."""
    venv = os.environ.get("SHMFEED_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shmfeed",
        "venv-torch")
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import prometheus_client"],
                                             capture_output=True).returncode == 0:
        return py
    return None


def parse_prometheus(py, text):
    out = subprocess.run([py, "-c", PROMETHEUS_PARSE], input=text, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def check_metrics(fams, job, batches_per_rank):
    def samples(name):
        return {tuple(sorted(labels.items())): (n, v)
                for n, labels, v in fams[name]["samples"]}

    assert fams["shmfeed_batches"]["type"] == "counter"
    (_, _, total), = fams["shmfeed_batches"]["samples"]
    assert total == 2 * batches_per_rank
    assert fams["shmfeed_batches"]["samples"][0][1] == {"shmfeed_job": job}
    assert fams["shmfeed_tokens"]["samples"][0][2] == 2 * batches_per_rank * 2 * 16
    assert fams["shmfeed_consumer_wait_seconds"]["type"] == "histogram"
    for rank in ("0", "1"):
        rows = [(labels, v) for n, labels, v in fams["shmfeed_consumer_wait_seconds"]["samples"]
                if labels["rank"] == rank and n.endswith("_bucket")]
        counts = [v for _, v in rows]
        assert counts == sorted(counts) and rows[-1][0]["le"] == "+Inf"
        # The bounds are powers of two in ns, written exactly in seconds (rounded to 9
        # digits, 2^30 ns was 1.07374182 and 2^34 ns 17.1798692, above it).
        assert [labels["le"] for labels, _ in rows[:-1]] == \
            [f"{2 ** e // 10 ** 9}.{2 ** e % 10 ** 9:09d}".rstrip("0")
             for e in range(10, 35, 2)]
        assert counts[-1] == batches_per_rank
    for name in ("shmfeed_producer_batches", "shmfeed_producer_utilization_ratio",
                 "shmfeed_producer_restarts", "shmfeed_producer_stalls"):
        assert {labels["producer"] for _, labels, _ in fams[name]["samples"]} == {"0", "1"}
    assert all(v == 0 for _, _, v in fams["shmfeed_producer_restarts"]["samples"])
    assert sum(v for _, _, v in fams["shmfeed_producer_batches"]["samples"]) >= total
    for name in ("shmfeed_skipped_records", "shmfeed_repairs", "shmfeed_slots_repaired",
                 "shmfeed_tokens_encoded",
                 "shmfeed_tokens_per_second", "shmfeed_rank_waiting_ratio",
                 "shmfeed_rank_stalls"):
        assert name in fams, name


def test_prometheus_metrics_file_and_http(rt, tmp_path):
    """The metrics file is replaced every interval and the same text is served on
    loopback; both parse with prometheus_client's parser. Bounded: a handful of
    requests to 127.0.0.1, each with a 5 s timeout."""
    import urllib.error
    import urllib.request

    py = prometheus_python()
    if not py:
        pytest.skip("prometheus_client is installed into the torch venv by scripts/deps "
                    "(~/.cache/shmfeed/venv-torch, or $SHMFEED_VENV)")
    mdir = tmp_path / "textfile"
    mdir.mkdir()
    prom = mdir / "shmfeed.prom"
    cfg = tmp_path / "job.yaml"
    cfg.write_text("sources: [/dev/null]\nbatch: {size: 2, seq_len: 16}\n"
                   "consumers: {world_size: 2}\n"
                   f"control: {{stats_interval_ms: 100, metrics_file: {prom}, "
                   "metrics: '127.0.0.1:0'}\n")
    job = job_name("prom")
    p = subprocess.Popen([FAKE, "run", str(cfg), "--set", f"job={job}"],
                         stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in p.stderr:
            if "without libmicrohttpd" in line:
                pytest.skip("built without libmicrohttpd: " + line.strip())
            if "metrics on http://127.0.0.1:" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
                break
        assert port, "the job never said where it serves its metrics"
        ranks = [subprocess.Popen([CONSUME, "--fake", "--steps", "50", "--out",
                                   str(tmp_path / f"r{r}.txt")],
                                  env={**os.environ, "SHMFEED_JOB": job, "LOCAL_RANK": str(r)})
                 for r in (0, 1)]
        assert [r.wait(timeout=30) for r in ranks] == [0, 0]
        assert wait_for(lambda: prom.exists() and
                        "shmfeed_batches_total{" + f'shmfeed_job="{job}"}} 100' in prom.read_text())
        # No temporary file left beside it; the lock is held while the job runs.
        assert sorted(os.listdir(mdir)) == ["shmfeed.prom", "shmfeed.prom.lock"]
        check_metrics(parse_prometheus(py, prom.read_text()), job, 50)

        url = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            check_metrics(parse_prometheus(py, resp.read().decode()), job, 50)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + "/", timeout=5)
        assert err.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + "/metrics", data=b"x", timeout=5)
        assert err.value.code == 405
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        p.stderr.close()
    assert os.listdir(mdir) == [], "the metrics file outlived its job"
    assert not shm_of(job)


def test_an_unwritable_metrics_file_refuses_the_start(rt, tmp_path):
    cfg = tmp_path / "job.yaml"
    cfg.write_text("sources: [/dev/null]\nbatch: {size: 2, seq_len: 16}\n"
                   f"control: {{metrics_file: {tmp_path}/missing/shmfeed.prom}}\n")
    job = job_name("promdir")
    out = subprocess.run([FAKE, "run", str(cfg), "--set", f"job={job}", "--", "true"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "cannot write the metrics file" in out.stderr and "No such file" in out.stderr
    assert not shm_of(job) and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("addr", ["0.0.0.0:9100", "192.168.1.1:9100", "localhost:9100",
                                  "127.0.0.1:65536", "[::]:9100"])
def test_metrics_are_served_on_loopback_only(tmp_path, addr):
    cfg = tmp_path / "job.yaml"
    cfg.write_text("sources: [/dev/null]\nbatch: {size: 2, seq_len: 16}\n"
                   f"control: {{metrics: '{addr}'}}\n")
    out = subprocess.run([SHMFEED, "check", str(cfg)], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode != 0
    assert "loopback only" in out.stderr and addr in out.stderr


def test_two_jobs_side_by_side(rt, tmp_path):
    cfg = write_config(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ja, jb = job_name("a"), job_name("b")
    # 300 steps of at least 5 ms: both jobs run while status looks (at 0.2 ms a step, a
    # loaded machine once let one end first, and status saw one job).
    pa = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={ja}", "--",
                           *ranks_command(2, 300, tmp_path / "a", "--sleep-us 5000")],
                          stderr=subprocess.PIPE, text=True)
    pb = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={jb}", "--set", "batch.size=3",
                           "--", *ranks_command(2, 300, tmp_path / "b", "--sleep-us 5000")],
                          stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: os.path.exists(os.path.join(rt, f"{ja}.json")) and
                    os.path.exists(os.path.join(rt, f"{jb}.json")))
    out = subprocess.run([SHMFEED, "status"], capture_output=True, text=True)
    assert out.returncode == 1 and "2 jobs are running" in out.stderr
    assert pa.wait(timeout=60) == 0 and pb.wait(timeout=60) == 0
    for r in (0, 1):
        a = read_lines(tmp_path / "a" / f"r{r}.txt")
        b = read_lines(tmp_path / "b" / f"r{r}.txt")
        assert len(a) == len(b) == 300
        assert int(a[5][2]) == 5 * 4 + r * 2 and int(b[5][2]) == 5 * 6 + r * 3
    assert not shm_of(ja) and not shm_of(jb)


def test_two_simulated_nodes_match_one_node(rt, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    cfg = write_config(tmp_path, world=4)
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job_name('n')}", "--",
                          *ranks_command(4, 50, one)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    nodes = []
    for node in (0, 1):
        nodes.append(subprocess.Popen(
            [FAKE, "run", cfg, "--set", f"job={job_name('node%d' % node)}",
             "--set", "consumers.local_ranks=2", "--set", f"consumers.rank_base={2 * node}",
             "--", *ranks_command(2, 50, two, base=2 * node)],
            stderr=subprocess.PIPE, text=True))
    for p in nodes:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    for g in range(4):
        a, b = read_lines(one / f"r{g}.txt"), read_lines(two / f"r{g}.txt")
        assert len(a) == 50 and a == b
        assert all(int(l[0]) == g for l in b)


def test_a_stop_resumes_a_paused_job_so_the_command_can_finish(rt, tmp_path):
    """A stop (over control, or SIGTERM) sends the command SIGTERM and lets it finish, but
    paused producers stayed stopped until the command was gone: a trainer that reads its
    last batches or saves a checkpoint on SIGTERM waited until it was SIGKILLed (137)."""
    for how in ("control", "signal"):
        job = job_name(f"pausestop-{how}")
        cfg = write_config(tmp_path, world=1)
        out = tmp_path / f"{how}.txt"
        script = tmp_path / "cmd.sh"
        script.write_text("#!/bin/sh\n"
                          f"trap 'LOCAL_RANK=0 {CONSUME} --fake --steps 10 --out {out}; "
                          "exit 0' TERM\n"
                          "touch " + str(tmp_path / "ready") + "\n"
                          "while :; do sleep 0.05; done\n")
        script.chmod(0o755)
        (tmp_path / "ready").unlink(missing_ok=True)
        p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", "--grace-ms",
                              "20000", "--", str(script)], stderr=subprocess.PIPE,
                             text=True)
        try:
            assert wait_for(lambda: (tmp_path / "ready").exists())
            assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                                   capture_output=True).returncode == 0)
            assert ctl(job, '{"v":1,"op":"pause"}')["state"] == "paused"
            if how == "control":
                assert ctl(job, '{"v":1,"op":"stop"}')["ok"]
            else:
                p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=15)
            assert p.returncode == 0, err
            assert len(read_lines(out)) == 10, err
            assert "killing it" not in err, err
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert not shm_of(job)


def test_a_dead_job_says_where_its_control_sockets_are(rt, tmp_path):
    """A job with its own ipc:// endpoint, its launcher killed: status said its sockets
    were beside the discovery file, in the runtime directory, where nothing was."""
    cfg = write_config(tmp_path)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    text = open(cfg).read().replace("control: {stats_interval_ms: 100}",
                                    f"control: {{stats_interval_ms: 100, endpoint: "
                                    f"'ipc://{sock_dir}/c'}}")
    open(cfg, "w").write(text)
    job = job_name("deadsock")
    p = start_serving(cfg, job)
    p.kill()
    p.wait()
    out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "is dead" in out.stderr, out.stderr
    assert f"{rt}/{job}.json and its control sockets in {sock_dir}" in out.stderr, out.stderr
    # The next run reclaims all of it.
    out = subprocess.run([FAKE, "run", cfg, "--set", f"job={job}", "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert not shm_of(job) and not os.listdir(sock_dir)


def test_a_launcher_started_with_stderr_closed_or_unread(rt, tmp_path):
    """Found by review: started with stderr closed (`2>&-`), the launcher's log lines went
    into the arena (its file took descriptor 2): the rank was refused, "not a shmfeed
    arena". With stderr a pipe nobody reads (`run ... 2>&1 | true`), the first log line
    killed it by SIGPIPE, the command never ran and the arena stayed in /dev/shm. The
    real CLI and producers: the descriptors are set up in its main()."""
    cfg = write_config(tmp_path, world=1)
    out = tmp_path / "r0.txt"
    job = job_name("nostderr")
    p = subprocess.run([SHMFEED, "run", cfg, "--set", f"job={job}", "--", CONSUME,
                        "--steps", "5", "--out", str(out)], stdout=subprocess.DEVNULL,
                       preexec_fn=lambda: os.close(2), timeout=60,
                       env=dict(os.environ, LOCAL_RANK="0"))
    assert p.returncode == 0 and len(read_lines(out)) == 5, p.returncode
    assert not shm_of(job)
    job = job_name("unread")
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([SHMFEED, "run", cfg, "--set", f"job={job}", "--", "sh", "-c",
                            "exit 3"], stdout=subprocess.DEVNULL, stderr=w, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 3, p.returncode
    assert not shm_of(job)


def big_arena_config(tmp_path):
    """A job of an arena of 0.5 GB, so that making it takes a while."""
    tokens = tmp_path / "tokens.bin"
    tokens.write_bytes(bytes(range(256)) * 40000)
    cfg = tmp_path / "big.yaml"
    cfg.write_text(f"sources: [{tokens}]\nbatch: {{size: 64, seq_len: 8192}}\n"
                   "consumers: {world_size: 1}\narena: {slots_per_rank: 512}\n"
                   "sampling: {mode: random}\n")
    return cfg


def test_status_names_the_file_of_a_launcher_killed_while_it_made_the_arena(rt, tmp_path):
    """Found by review: a launcher killed (SIGKILL, the OOM killer) while it made the
    arena left /dev/shm/shmfeed.JOB.new.PID, reserved at the arena's full size, and
    `status JOB` said only "no running shmfeed job": nothing told where /dev/shm had gone
    until the next run of the same job removed it."""
    cfg = big_arena_config(tmp_path)
    for attempt in range(10):
        job = job_name("killed-making")
        p = subprocess.Popen([SHMFEED, "run", str(cfg), "--set", f"job={job}", "--", "true"],
                             stderr=subprocess.DEVNULL)
        left = f"/dev/shm/shmfeed.{job}.new.{p.pid}"
        caught = wait_for(lambda: os.path.exists(left) or p.poll() is not None, timeout=20)
        p.kill()
        p.wait()
        if not caught or not os.path.exists(left):
            subprocess.run([SHMFEED, "run", str(cfg), "--set", f"job={job}", "--", "true"],
                           capture_output=True, timeout=60)
            continue
        out = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                             timeout=10)
        assert out.returncode == 1, out
        assert (f"no running shmfeed job '{job}'; a launcher of it was killed while it made "
                f"the arena and left {left} (") in out.stderr, out.stderr
        assert "the next `shmfeed run` of this job removes it" in out.stderr, out.stderr
        out = subprocess.run([SHMFEED, "status"], capture_output=True, text=True, timeout=10)
        assert out.returncode == 1 and f"{job} (the temporary of its arena)" in out.stderr, \
            out.stderr
        out = subprocess.run([SHMFEED, "run", str(cfg), "--set", f"job={job}", "--", "true"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert not os.path.exists(left) and not shm_of(job)
        return
    pytest.skip("the arena was made before the launcher could be caught making it")


def test_status_names_every_dead_temporary_and_says_how_many_it_cut(rt, tmp_path):
    """The unnamed status listed dead jobs by their discovery files only; then (this
    session) it also named this user's dead arena files in /dev/shm, but a job called
    `of` was taken as listed once "x (the temporary of its arena)" was, a job ending in
    `.new` was read as another job's, and a long list was cut mid-name without a word
    (a review)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    tag = f"{os.getpid()}"
    short = [f"x{tag}", "of", f"r{tag}.new"]
    long = [f"long-name-of-a-training-run-{tag}-number-{i}" for i in range(8)]
    made = []

    def dead_list(names, env=None):
        for n in names:
            made.append(f"/dev/shm/shmfeed.{n}.new.{gone.pid}")
            with open(made[-1], "wb") as f:
                f.write(b"\0" * 4096)
        out = subprocess.run([SHMFEED, "status"], capture_output=True, text=True, timeout=10,
                             env=env)
        assert out.returncode == 1 and "dead (their launcher crashed" in out.stderr, out
        assert len(out.stderr) < 512, out.stderr  # what a message holds
        return out.stderr.split("reclaims what it left): ")[1].strip()

    try:
        listed = dead_list(short)
        assert all(f"{n} (the temporary of its arena)" in listed for n in short), listed
        # Two temporaries of one job: named once (a review of this session's diff).
        made.append(f"/dev/shm/shmfeed.x{tag}.new.{gone.pid + 1}")
        with open(made[-1], "wb") as f:
            f.write(b"\0")
        listed = dead_list([])
        assert listed.count(f"x{tag} (the temporary") == 1, listed
        # A discovery file the listing does not take (not a job file) hides nothing.
        (tmp_path / "rt2").mkdir(mode=0o700)
        (tmp_path / "rt2" / f"x{tag}.json").write_text("not json")
        listed = dead_list([], env=dict(os.environ, SHMFEED_RUNTIME_DIR=str(tmp_path / "rt2")))
        assert f"x{tag} (the temporary of its arena)" in listed, listed
        # Past what a message holds, those not named are counted (other tests' dead
        # jobs may be listed too: at least as many as are not named here).
        listed = dead_list(long)
        shown = [n for n in short + long if f"{n} (the temporary of its arena)" in listed]
        more = re.search(r"and (\d+) more$", listed)
        assert more and int(more.group(1)) >= len(short + long) - len(shown), listed
        # Under a long runtime directory too (the count was cut off the message).
        deep = tmp_path / ("d" * 100) / ("e" * 60)
        deep.mkdir(parents=True, mode=0o700)
        listed = dead_list([], env=dict(os.environ, SHMFEED_RUNTIME_DIR=str(deep)))
        assert re.search(r"and \d+ more$", listed), listed
    finally:
        for path in made:
            if os.path.exists(path):
                os.unlink(path)


def full_pipe():
    """A pipe whose buffer is full: the read end, and the write end to give a process as
    its stderr (blocking again)."""
    import fcntl
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(w, fcntl.F_SETFL, flags)
    return r, w


def test_status_of_a_job_starting_up_says_so(rt, tmp_path):
    """Found by review: between the arena's link and the control socket, `status JOB`
    said the job ran with another SHMFEED_RUNTIME_DIR, "set the same here". The gap is
    held open: the launcher's stderr is a full pipe, so its log line about the arena
    made waits (100 ms) before the socket is opened, and it is stopped there."""
    cfg = write_config(tmp_path, world=1)
    for attempt in range(5):
        job = job_name("starting")
        r, w = full_pipe()
        try:
            p = subprocess.Popen([SHMFEED, "run", cfg, "--set", f"job={job}", "--", "true"],
                                 stderr=w)
        finally:
            os.close(w)
        try:
            assert wait_for(lambda: shm_of(job) or p.poll() is not None, timeout=30)
            p.send_signal(signal.SIGSTOP)
            # Stopped past the gap (a loaded machine): another try.
            if not os.path.exists(os.path.join(rt, f"{job}.json")):
                out = subprocess.run([SHMFEED, "status", job], capture_output=True,
                                     text=True, timeout=10)
                assert out.returncode == 1, out
                assert f"job '{job}' (launcher pid {p.pid}) is starting: its control " \
                    "socket is not up yet; try again in a moment" in out.stderr, out.stderr
                return
        finally:
            p.send_signal(signal.SIGCONT)
            # Its last lines wait for their reader.
            while os.read(r, 65536):
                pass
            assert p.wait(timeout=60) == 0
            os.close(r)
            assert not shm_of(job)
    pytest.skip("the launcher was never stopped before its control socket was up")


def test_a_stderr_nobody_reads_does_not_stop_supervision(rt, tmp_path):
    """Found by review: the launcher wrote its log and progress lines to stderr with a
    blocking write. A pipe whose reader had stopped reading (a pager left waiting, a
    stopped `tee`) froze it in write(): no control answers, no stall kills, no restarts.
    Its stderr here is a pipe filled to the brim before it starts: it must serve anyway,
    and once the pipe is read again say how many lines it dropped."""
    cfg = write_config(tmp_path)
    job = job_name("fullpipe")
    r, w = full_pipe()
    try:
        p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}"], stderr=w)
    finally:
        os.close(w)
    try:
        assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                               capture_output=True).returncode == 0), \
            "the launcher never answered: blocked writing to its stderr"
        status = ctl(job, '{"v":1,"op":"status"}')
        assert status["ok"], status
        # Read the pipe again: the next progress line (every second here) comes after the
        # count of what could not be written.
        seen = b""
        end = time.monotonic() + 10
        while b"dropped" not in seen and time.monotonic() < end:
            seen += os.read(r, 65536)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(r)
    assert re.search(rb"shmfeed: [0-9]+ log lines? dropped: stderr was not being read\n",
                     seen), seen[-2000:]
    assert not shm_of(job)


def test_the_last_lines_wait_for_a_stderr_read_late(rt, tmp_path):
    """A review of the bounded stderr: after one line dropped, every later line went
    without waiting, the job's summary and its failure line too, and the count of the
    dropped was said only before a later line, which never came. The pipe is full while
    the job runs and read from the moment its command ends: the summary is there, and the
    count."""
    import threading
    cfg = write_config(tmp_path, world=1)
    job = job_name("lastlines")
    marker = tmp_path / "ended"
    r, w = full_pipe()
    try:
        p = subprocess.Popen([SHMFEED, "run", cfg, "--set", f"job={job}", "--", "sh", "-c",
                              f"sleep 1; touch {marker}; exit 3"], stderr=w)
    finally:
        os.close(w)
    seen = []
    try:
        assert wait_for(marker.exists, timeout=30)
        reader = threading.Thread(target=lambda: seen.extend(iter(lambda: os.read(r, 65536),
                                                                  b"")))
        reader.start()
        assert p.wait(timeout=60) == 3
        reader.join(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(r)
    text = b"".join(seen).replace(b"x", b"")
    assert re.search(rb"shmfeed: job " + job.encode() + rb": [0-9]+ batches", text), text
    assert re.search(rb"shmfeed: [0-9]+ log lines? dropped: stderr was not being read\n",
                     text), text
    assert not shm_of(job)


def test_a_stop_before_the_command_started_is_no_success(rt, tmp_path):
    """Found by review: SIGTERM while the job was made (scancel, systemd at start-up)
    stopped it before the command started, and the launcher exited 0, as if training had
    run and finished. It exits 128 + the signal. The launcher is caught while its arena
    is made (its `.new` file is there), stopped with SIGSTOP, sent SIGTERM, continued:
    the signal waits, blocked, for the check before the command starts."""
    cfg = big_arena_config(tmp_path)
    marker = tmp_path / "ran"
    for attempt in range(10):
        job = job_name("early-stop")
        p = subprocess.Popen([SHMFEED, "run", str(cfg), "--set", f"job={job}", "--", "sh",
                              "-c", f"touch {marker}"], stderr=subprocess.PIPE, text=True)
        caught = wait_for(lambda: any(n.startswith(f"shmfeed.{job}.new")
                                      for n in os.listdir("/dev/shm")), timeout=20)
        if caught:
            p.send_signal(signal.SIGSTOP)
            caught = any(n.startswith(f"shmfeed.{job}.new") for n in os.listdir("/dev/shm"))
            p.send_signal(signal.SIGTERM)
            p.send_signal(signal.SIGCONT)
        _, err = p.communicate(timeout=60)
        assert not shm_of(job)
        if caught:
            assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
            assert not marker.exists(), err
            return
        marker.unlink(missing_ok=True)
    pytest.fail("the launcher was never caught making its arena")


def test_status_answers_while_a_failed_job_ends_what_its_command_left(rt, tmp_path):
    """Found by review: a failed job closed its control socket and removed its discovery
    file before it ended what its command left behind (up to the grace period): `status`
    and `stop` said its control files were missing ("started with another
    SHMFEED_RUNTIME_DIR"), and `run` of the name said to ask them. The job answers until
    it is gone."""
    import threading
    job = job_name("leftover")
    cfg = write_config(tmp_path, "producers: {count: 1, max_restarts: 0}\n", world=1)
    crash = tmp_path / "crash-now"
    env = dict(os.environ, SHMFEED_TEST_CRASH_ONCE=str(crash), SHMFEED_TEST_SLOW_US="2000")
    # A rank, and beside it a process of its own session that ignores SIGTERM.
    p = subprocess.Popen([FAKE, "run", cfg, "--set", f"job={job}", "--grace-ms", "4000",
                          "--", "sh", "-c", "setsid sh -c \"trap '' TERM; exec sleep 30\" & "
                          f"LOCAL_RANK=0 exec {CONSUME} --fake --steps 100000 "
                          f"--out {tmp_path}/r0.txt"],
                         stderr=subprocess.PIPE, text=True, env=env)
    assert wait_for(lambda: subprocess.run([CTL, job, '{"v":1,"op":"hello"}'],
                                           capture_output=True).returncode == 0)
    crash.touch()  # producer 0 dies at its next claim, and the job fails
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    try:
        assert wait_for(lambda: any("left behind: SIGTERM" in l for l in lines), 20), lines
        st = subprocess.run([SHMFEED, "status", job], capture_output=True, text=True,
                            timeout=30)
        assert "control files are not in" not in st.stderr, st.stderr
        assert st.returncode == 0 and f"job {job}:" in st.stdout, (st.stdout, st.stderr)
    finally:
        p.wait(timeout=30)
        reader.join(timeout=10)
    assert p.returncode != 0
    assert not shm_of(job)
