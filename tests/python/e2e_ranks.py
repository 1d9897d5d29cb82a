"""Run by `shmfeed run ... -- python3 e2e_ranks.py`: starts two ranks with torchrun's
environment; each reads 6 batches with shmfeed.Loader and the script prints their digests,
provenance and batch shape as one JSON line."""
import os, subprocess, sys, json
code = '''
import json, shmfeed
with shmfeed.Loader() as L:
    ds = [L.next().digest for _ in range(6)]
    print(json.dumps({"rank": L.rank, "d": ds, "prov": L.counters()["provenance"], "shape": list(L.next().tokens.shape)}))
'''
ps = []
for r in range(2):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    ps.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True))
print(json.dumps([json.loads(p.communicate()[0]) for p in ps]))
