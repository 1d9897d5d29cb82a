"""A training rank for test_long_and_pinned.py: takes two batches with the C rank given as
argv[1] (so that the producers have run), then writes one line per child of the launcher,
"producer CPUS" or "rank CPUS", and "launcher CPUS", CPUS being Cpus_allowed_list, to
argv[2]."""

import os
import subprocess
import sys


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


subprocess.run([sys.argv[1], "--steps", "2", "--out", os.devnull], check=True)
me, launcher = os.getpid(), os.getppid()
rows = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        st = status(pid)
    except OSError:
        continue
    if int(st.get("PPid", "0")) == launcher:
        role = "rank" if int(pid) == me else "producer"
        rows.append(f"{role} {st['Cpus_allowed_list'].strip()}")
rows.append(f"launcher {status(launcher)['Cpus_allowed_list'].strip()}")
with open(sys.argv[2], "w") as f:
    f.write("\n".join(rows) + "\n")
