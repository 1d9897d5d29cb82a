"""Run by `shmfeed run MIXTURE.yaml -- python3 mix_ranks.py STEPS [STATES.json]`: starts
WORLD_SIZE ranks with torchrun's environment; each (after load_state_dict() of its entry
in STATES.json, when given) reads STEPS batches and records, per batch, the SHA-256 of its
token bytes, the SHA-256 of each row, `batch.sources`, the first token of each row, and
`batch.state`. Prints all ranks' records as one JSON line."""
import json
import os
import subprocess
import sys

code = r'''
import hashlib, json, sys, shmfeed
steps, states = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else ""
with shmfeed.Loader(timeout=30) as L:
    if states:
        with open(states) as f:
            L.load_state_dict(json.load(f)[str(L.rank)])
    out = []
    for _ in range(steps):
        b = L.next()
        t = b.tokens.numpy()
        out.append({"step": b.step, "first": b.first_sample,
                    "sha": hashlib.sha256(t.tobytes()).hexdigest(),
                    "rows": [hashlib.sha256(r.tobytes()).hexdigest() for r in t],
                    "sources": [int(s) for s in b.sources], "heads": [int(x) for x in t[:, 0]],
                    "state": b.state})
    print(json.dumps({"rank": L.rank, "batches": out}))
'''
W = int(os.environ.get("MIX_WORLD_SIZE", "2"))
ps = []
for r in range(W):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(W),
               LOCAL_WORLD_SIZE=str(W))
    ps.append(subprocess.Popen([sys.executable, "-c", code, *sys.argv[1:]], env=env,
                               stdout=subprocess.PIPE, text=True))
print(json.dumps([json.loads(p.communicate()[0]) for p in ps]))
