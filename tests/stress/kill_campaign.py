#!/usr/bin/env python3
"""The kill campaign: SIGKILL and SIGSTOP/SIGCONT every role of real `shmfeed run` jobs
while two ranks read them, and compare every batch with an uninterrupted run.

For each job (a pre-tokenized nanoGPT .bin, and raw text tokenized on the fly), the
campaign first runs it once without interference (the reference), then again and again
with interference until the kill budget of that job is spent (or its time is up). Every
run serves the job with `shmfeed run JOB.yaml` (no command) and starts two
campaign_rank processes (LOCAL_RANK 0 and 1) that read --steps batches each and record
every batch's step and digest. Meanwhile, every --interval seconds, one action:

  - SIGKILL of a producer (the launcher restarts it and repairs its slot),
  - SIGKILL of a rank (the campaign starts it again; it goes on from the ring),
  - SIGKILL of the launcher (its producers die with it; the ranks get SF_E_JOB_GONE; the
    campaign runs `shmfeed run` again, which reclaims the stale arena, and starts the
    ranks again, which resume from their last state: samples and provenance, as a
    Python rank would from state_dict()),
  - SIGSTOP of a producer, a rank or the launcher, and SIGCONT after 10-300 ms; one
    producer stop in ten lasts past the job's stall_timeout (1 s), so the launcher kills
    it as stalled.

A run passes when each rank's record holds every step 0..N-1 with the reference's
digest (a step recorded twice, with the same digest, is a re-delivery: the batch a
killed rank held), the launcher ends with status 0 when stopped, and nothing of the job
is left: no /dev/shm object, no file in the runtime directory, no process. 0 lost, 0
changed, 0 left behind is the only pass.

Counts (kills and stops per role, repairs, stall kills, stale arenas reclaimed,
re-deliveries) and wall time go to the report (--report, Markdown).
"""

import argparse
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROLES = ("producer", "rank", "launcher")


def proc_starttime(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def proc_running(pid, starttime):
    """The process (pid, start time) still runs: it exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == starttime and fields[0] not in ("Z", "X")


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class Failure(Exception):
    pass


class Job:
    """One job file and its reference digests."""

    def __init__(self, kind, workdir, vocab_dir):
        self.kind = kind
        self.dir = os.path.join(workdir, kind)
        os.makedirs(self.dir)
        rng = random.Random(20261201)
        if kind == "tokens":
            path = os.path.join(self.dir, "train.bin")
            # uint16 ids below 256, so they fit the default (bytes) vocabulary.
            with open(path, "wb") as f:
                f.write(bytes(b for _ in range(1_000_000) for b in (rng.getrandbits(8), 0)))
            source = f"  - paths: [{path}]\n    format: nanogpt\n"
            tokenizer = ""
            batch = "batch: {size: 4, seq_len: 64}\n"
        else:
            path = os.path.join(self.dir, "corpus.txt")
            words = ["the", "of", "and", "shmfeed", "token", "batch", "slot", "ring",
                     "producer", "consumer", "launcher", "kill", "repair", "résumé",
                     "naïve", "日本", "42", "3.14", "\n", ",", "."]
            with open(path, "w") as f:
                for d in range(6000):
                    n = rng.randint(20, 400)
                    f.write(" ".join(rng.choice(words) for _ in range(n)))
                    f.write("\n<|doc|>\n")
            source = (f"  - paths: [{path}]\n    format: text\n"
                      "    separator: \"<|doc|>\"\n")
            tokenizer = ("tokenizer: {encoding: r50k_base, vocab_dir: %s}\n" % vocab_dir
                         if vocab_dir else "tokenizer: {encoding: bytes}\n")
            self.encoding = "r50k_base" if vocab_dir else "bytes"
            batch = "batch: {size: 4, seq_len: 128}\n"
        if kind == "tokens":
            self.encoding = "pre-tokenized uint16"
        self.config = os.path.join(self.dir, "job.yaml")
        with open(self.config, "w") as f:
            f.write("sources:\n" + source + tokenizer + batch +
                    "sampling: {mode: windows, seed: 7}\n"
                    "arena: {slots_per_rank: 4}\n"
                    "producers: {count: 3, max_restarts: 1000, stall_timeout: 1s}\n"
                    "consumers: {world_size: 2}\n"
                    "control: {stats_interval_ms: 1000}\n")


class Run:
    """One `shmfeed run` session (restarted after launcher kills) with its two ranks."""

    def __init__(self, c, job, name, steps):
        self.c, self.job, self.name, self.steps = c, job, name, steps
        self.dir = os.path.join(job.dir, name)
        os.makedirs(self.dir)
        self.launcher = None
        self.launchers = 0
        self.ranks = [None, None]
        self.done = [False, False]
        self.logs = []
        self.jobname = f"kc-{job.kind}-{os.getpid()}-{name}"
        self.stopped = []  # (pid, starttime, cont_at)
        self.long_stopped = None  # a producer stopped past the stall timeout

    # Processes.

    def start_launcher(self):
        log = open(os.path.join(self.dir, f"launcher{self.launchers}.log"), "w")
        self.logs.append(log.name)
        self.launcher = subprocess.Popen(
            [self.c.shmfeed, "run", self.job.config, "--set", f"job={self.jobname}"],
            stdout=subprocess.DEVNULL, stderr=log, env=self.c.env)
        log.close()
        self.launchers += 1
        info = os.path.join(self.c.rt, f"{self.jobname}.json")
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.launcher.poll() is not None:
                raise Failure(f"{self.name}: the launcher exited with "
                              f"{self.launcher.returncode} at start; see {log.name}")
            try:
                with open(info) as f:
                    if f'"pid":{self.launcher.pid},' in f.read():
                        return
            except OSError:
                pass
            time.sleep(0.005)
        raise Failure(f"{self.name}: the launcher did not come up")

    def start_rank(self, r):
        env = dict(self.c.env, SHMFEED_JOB=self.jobname, LOCAL_RANK=str(r))
        err = open(os.path.join(self.dir, f"rank{r}.err"), "a")
        self.ranks[r] = subprocess.Popen(
            [self.c.rank, "--steps", str(self.steps), "--out",
             os.path.join(self.dir, f"r{r}.txt"), "--sleep-us", str(self.c.sleep_us)],
            env=env, stdout=subprocess.DEVNULL, stderr=err)
        err.close()

    def poll_ranks(self):
        """Reap ranks; restart the ones that must go on. True when both are done."""
        for r, p in enumerate(self.ranks):
            if self.done[r] or p is None or p.poll() is None:
                continue
            rc = p.returncode
            self.ranks[r] = None
            if rc == 0:
                self.done[r] = True
            elif rc in (75, -signal.SIGKILL):
                if self.launcher is not None and self.launcher.poll() is None:
                    self.start_rank(r)
            else:
                with open(os.path.join(self.dir, f"rank{r}.err")) as f:
                    raise Failure(f"{self.name}: rank {r} failed ({rc}): "
                                  f"{f.read()[-2000:]}")
        return all(self.done)

    # Interference.

    def pick(self, role):
        if role == "producer":
            if self.launcher is None or self.launcher.poll() is not None:
                return None
            kids = children_of(self.launcher.pid)
            self.c.seen_producers.update((k, proc_starttime(k)) for k in kids)
            return rng_choice(self.c.rng, [k for k in kids if k != self.long_stopped])
        if role == "rank":
            live = [p.pid for p in self.ranks if p is not None and p.poll() is None]
            return rng_choice(self.c.rng, live)
        # While a producer is stopped past the stall timeout, its launcher lives on, so
        # that it is the launcher's stall watch that kills it.
        if self.launcher is not None and self.launcher.poll() is None and \
                not self.long_stopped:
            return self.launcher.pid
        return None

    def act(self):
        c = self.c
        roll = c.rng.random()
        if roll < c.p_stop:
            role = c.rng.choice(ROLES)
            pid = self.pick(role)
            if pid is None:
                return
            st = proc_starttime(pid)
            long_stop = role == "producer" and c.rng.random() < 0.1 and \
                not self.long_stopped
            pause = 1.6 if long_stop else c.rng.uniform(0.01, 0.3)
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return
            c.count("stops", role)
            if long_stop:
                c.count("long_stops", role)
                self.long_stopped = pid
            self.stopped.append((pid, st, time.monotonic() + pause))
            return
        weights = c.kill_weights
        role = c.rng.choices(ROLES, weights=[weights[x] for x in ROLES])[0]
        pid = self.pick(role)
        if pid is None:
            return
        if role == "launcher":
            self.launcher.kill()
            self.launcher.wait()
            self.launcher = None
            c.count("kills", role)
            # Its producers die with it (PR_SET_PDEATHSIG); the ranks fail with
            # SF_E_JOB_GONE within a second and exit 75. A new launcher reclaims the
            # stale arena; the ranks resume from their records.
            self.start_launcher()
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        c.count("kills", role)

    def continue_stopped(self, everything=False):
        now = time.monotonic()
        keep = []
        for pid, st, at in self.stopped:
            if everything or now >= at:
                if pid == self.long_stopped:
                    self.long_stopped = None
                if proc_starttime(pid) == st:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            else:
                keep.append((pid, st, at))
        self.stopped = keep

    # The run.

    def go(self, interfere):
        t0 = time.monotonic()
        self.start_launcher()
        for r in (0, 1):
            self.start_rank(r)
        next_act = time.monotonic() + self.c.interval
        while True:
            self.continue_stopped()
            if self.launcher.poll() is not None:
                raise Failure(f"{self.name}: the launcher died on its own "
                              f"({self.launcher.returncode}); see {self.logs[-1]}")
            if self.poll_ranks():
                break
            for r in (0, 1):  # ranks that exited while no launcher ran
                if not self.done[r] and self.ranks[r] is None:
                    self.start_rank(r)
            if interfere and time.monotonic() >= next_act and not self.c.budget_spent():
                self.act()
                next_act = time.monotonic() + self.c.interval
            if time.monotonic() - t0 > self.c.run_timeout:
                raise Failure(f"{self.name}: not finished after {self.c.run_timeout} s")
            time.sleep(0.002)
        self.continue_stopped(everything=True)
        self.launcher.send_signal(signal.SIGTERM)
        rc = self.launcher.wait(timeout=30)
        if rc != 0:
            raise Failure(f"{self.name}: the launcher ended with {rc}; see {self.logs[-1]}")
        self.wall = time.monotonic() - t0
        self.check_left_behind()

    def check_left_behind(self):
        left = glob.glob(f"/dev/shm/shmfeed.{self.jobname}*")
        left += glob.glob(os.path.join(self.c.rt, f"{self.jobname}.*"))
        if left:
            raise Failure(f"{self.name}: left behind: {left}")

    def records(self):
        out = []
        for r in (0, 1):
            steps = {}
            redelivered = 0
            with open(os.path.join(self.dir, f"r{r}.txt")) as f:
                for line in f:
                    step, digest = line.split()[:2]
                    step = int(step)
                    if step in steps:
                        redelivered += 1
                        if steps[step] != digest:
                            raise Failure(f"{self.name}: rank {r} step {step} delivered "
                                          f"twice with different digests")
                    steps[step] = digest
            out.append((steps, redelivered))
        return out

    def log_counts(self):
        counts = {"producer_deaths": 0, "slots_repaired": 0, "consumer_repairs": 0,
                  "claims_repaired": 0, "stall_kills": 0, "reclaimed": 0}
        for path in self.logs:
            with open(path) as f:
                for line in f:
                    if " died (" in line and "slot" in line:
                        counts["producer_deaths"] += 1
                        counts["slots_repaired"] += int(line.rsplit("; ", 1)[1].split()[0])
                    elif "claimed slot" in line and "is gone" in line:
                        counts["consumer_repairs"] += 1
                        counts["claims_repaired"] += int(line.rsplit("; ", 1)[1].split()[0])
                    elif "stalled: no heartbeat" in line:
                        counts["stall_kills"] += 1
                    if "reclaimed the stale arena" in line:
                        counts["reclaimed"] += 1
        return counts


def rng_choice(rng, seq):
    return rng.choice(seq) if seq else None


class Campaign:
    def __init__(self, a):
        self.shmfeed, self.rank = a.shmfeed, a.rank
        self.rng = random.Random(a.seed)
        self.interval = a.interval
        self.sleep_us = a.sleep_us
        self.p_stop = a.stop_fraction
        self.kill_weights = {"producer": a.w_producer, "rank": a.w_rank,
                             "launcher": a.w_launcher}
        self.run_timeout = a.run_timeout
        self.tally = {}
        self.seen_producers = set()  # (pid, start time) of every producer seen
        self.budget = 0
        self.deadline = 0
        self.work = tempfile.mkdtemp(prefix="sf-kc-")
        self.rt = os.path.join(self.work, "rt")
        os.mkdir(self.rt, 0o700)
        self.env = dict(os.environ, SHMFEED_RUNTIME_DIR=self.rt,
                        SHMFEED_CACHE_DIR=os.path.join(self.work, "cache"))

    def count(self, what, role):
        key = (what, role)
        self.tally[key] = self.tally.get(key, 0) + 1

    def kills(self):
        return sum(v for (what, _), v in self.tally.items() if what == "kills")

    def budget_spent(self):
        return self.kills() >= self.budget or time.monotonic() >= self.deadline


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shmfeed", required=True)
    ap.add_argument("--rank", required=True)
    ap.add_argument("--kills", type=int, default=10000, help="SIGKILLs over both jobs")
    ap.add_argument("--minutes", type=float, default=120, help="time budget")
    ap.add_argument("--steps", type=int, default=3000, help="steps per rank per run")
    ap.add_argument("--interval", type=float, default=0.015, help="seconds between actions")
    ap.add_argument("--sleep-us", type=int, default=200, help="a rank's work per batch")
    ap.add_argument("--stop-fraction", type=float, default=0.1)
    ap.add_argument("--w-producer", type=float, default=0.45)
    ap.add_argument("--w-rank", type=float, default=0.45)
    ap.add_argument("--w-launcher", type=float, default=0.10)
    ap.add_argument("--run-timeout", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", default="tokens,text")
    ap.add_argument("--vocab-dir", default=None)
    ap.add_argument("--report", default=None, help="write the Markdown report here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()

    if a.vocab_dir and not os.path.isfile(os.path.join(a.vocab_dir, "r50k_base.tiktoken")):
        a.vocab_dir = None  # the raw text job then uses the bytes tokenizer
    c = Campaign(a)
    t_start = time.monotonic()
    kinds = a.jobs.split(",")
    results = []
    ok = True
    try:
        for n, kind in enumerate(kinds):
            job = Job(kind, c.work, a.vocab_dir)
            ref = Run(c, job, "ref", a.steps)
            ref.go(interfere=False)
            want = ref.records()
            for r in (0, 1):
                if sorted(want[r][0]) != list(range(a.steps)) or want[r][1]:
                    raise Failure(f"{kind}: the reference run is incomplete")
            # This job's share of what is left of the budget.
            c.budget = c.kills() + (a.kills - c.kills()) // (len(kinds) - n)
            left = a.minutes * 60 - (time.monotonic() - t_start)
            c.deadline = time.monotonic() + left / (len(kinds) - n)
            before = dict(c.tally)
            stats = {"runs": 0, "lost": 0, "changed": 0, "redelivered": 0, "wall": 0.0,
                     "steps": 0, "launchers": 0}
            logc = {}
            i = 0
            while not c.budget_spent():
                run = Run(c, job, f"run{i}", a.steps)
                i += 1
                run.go(interfere=True)
                got = run.records()
                for r in (0, 1):
                    steps, redelivered = got[r]
                    lost = [s for s in range(a.steps) if s not in steps]
                    changed = [s for s in steps if s < a.steps and steps[s] != want[r][0][s]]
                    extra = [s for s in steps if s >= a.steps]
                    stats["lost"] += len(lost)
                    stats["changed"] += len(changed) + len(extra)
                    stats["redelivered"] += redelivered
                    stats["steps"] += len(steps)
                    if lost or changed or extra:
                        raise Failure(f"{kind} {run.name} rank {r}: lost {lost[:10]}, "
                                      f"changed {changed[:10]}, beyond the end {extra[:10]}")
                for k, v in run.log_counts().items():
                    logc[k] = logc.get(k, 0) + v
                stats["runs"] += 1
                stats["wall"] += run.wall
                stats["launchers"] += run.launchers
                if not a.keep:
                    shutil.rmtree(run.dir)
                print(f"{kind} {run.name}: {run.wall:.1f} s, kills so far {c.kills()}",
                      file=sys.stderr, flush=True)
            tally = {k: v - before.get(k, 0) for k, v in c.tally.items()}
            results.append((job, stats, logc, tally))
    except Failure as e:
        ok = False
        print(f"kill campaign: FAIL: {e}", file=sys.stderr)
        results.append(("failure", str(e)))
    finally:
        total = time.monotonic() - t_start
        leftovers = glob.glob("/dev/shm/shmfeed.kc-*-%d-*" % os.getpid())
        # Producers of a killed launcher die with it (PR_SET_PDEATHSIG); give init a
        # moment to reap them.
        end = time.monotonic() + 10
        while True:
            running = [f"producer pid {pid}" for pid, st in c.seen_producers
                       if st is not None and proc_running(pid, st)]
            if not running or time.monotonic() > end:
                break
            time.sleep(0.1)
        leftovers += running
        if leftovers:
            ok = False
            print(f"kill campaign: FAIL: left behind: {leftovers}", file=sys.stderr)
        report = render(a, c, results, total, ok, leftovers)
        print(report)
        if a.report:
            with open(a.report, "w") as f:
                f.write(report)
        if not a.keep and ok:
            shutil.rmtree(c.work, ignore_errors=True)
        else:
            print(f"kill campaign: work directory kept: {c.work}", file=sys.stderr)
    return 0 if ok else 1


def render(a, c, results, total, ok, leftovers):
    out = ["# Kill campaign", ""]
    out.append(f"Result: **{'PASS' if ok else 'FAIL'}** in {total / 60:.1f} minutes "
               f"(wall time of the whole campaign, references included). "
               f"SIGKILLs: {c.kills()} of {a.kills} asked.")
    out.append("")
    out.append(f"Command: `tests/stress/kill_campaign.py --kills {a.kills} --minutes "
               f"{a.minutes:g} --steps {a.steps} --interval {a.interval:g} --sleep-us "
               f"{a.sleep_us} --seed {a.seed}` (one action every {a.interval * 1000:g} ms: "
               f"{a.stop_fraction:.0%} SIGSTOP/SIGCONT of a random role, else a SIGKILL of a "
               f"producer / rank / launcher with weights {a.w_producer:g} / {a.w_rank:g} / "
               f"{a.w_launcher:g}; 2 ranks of {a.steps} steps per run, 3 producers, 4 slots "
               "per rank, stall_timeout 1 s).")
    out.append("")
    for item in results:
        if item[0] == "failure":
            out.append(f"Failure: {item[1]}")
            continue
        job, s, logc, tally = item
        out.append(f"## {job.kind} job ({job.encoding})")
        out.append("")
        out.append("| | producer | rank | launcher | total |")
        out.append("| --- | --- | --- | --- | --- |")
        for what in ("kills", "stops", "long_stops"):
            row = [tally.get((what, r), 0) for r in ROLES]
            label = {"kills": "SIGKILL", "stops": "SIGSTOP/SIGCONT",
                     "long_stops": "of which stops past stall_timeout"}[what]
            out.append(f"| {label} | " + " | ".join(str(x) for x in row) +
                       f" | {sum(row)} |")
        out.append("")
        out.append(f"- runs: {s['runs']} (each compared batch by batch with the "
                   f"uninterrupted reference), wall time {s['wall']:.0f} s, "
                   f"launcher sessions {s['launchers']}")
        out.append(f"- steps checked: {s['steps']}; lost {s['lost']}, changed "
                   f"{s['changed']}; re-delivered (the batch a killed rank held) "
                   f"{s['redelivered']}")
        out.append(f"- launcher repairs: {logc.get('producer_deaths', 0)} dead producers "
                   f"({logc.get('slots_repaired', 0)} FILLING slots back to FREE), "
                   f"{logc.get('consumer_repairs', 0)} dead ranks "
                   f"({logc.get('claims_repaired', 0)} CLAIMED slots back to READY; a "
                   "restarted rank also repairs its predecessor at registration), "
                   f"{logc.get('stall_kills', 0)} stalled producers killed, "
                   f"{logc.get('reclaimed', 0)} stale arenas reclaimed")
        out.append("")
    out.append(f"Left behind (objects in /dev/shm, files in the runtime directory, "
               f"producer processes among the {len(c.seen_producers)} seen): "
               f"{len(leftovers)}.")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
