"""One training rank for the Python tests, started with the environment torchrun gives
(RANK, LOCAL_RANK, WORLD_SIZE, ...). It reads batches with shmfeed.Loader and prints one
JSON line: the digests it saw, and (with --dist) the digests of every rank, gathered with
torch.distributed over gloo.

  --steps N        batches to read
  --numpy          hide torch: the Loader returns NumPy arrays
  --dist           init the gloo process group and all_gather the digests
  --state-dir DIR  resume from the newest state in DIR, and after each batch save
                   DIR/step_S.json (digest and state_dict) atomically
  --pause S        sleep S seconds after each batch (lets a test kill the rank mid-run)
"""

import argparse
import glob
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--numpy", action="store_true")
ap.add_argument("--dist", action="store_true")
ap.add_argument("--state-dir")
ap.add_argument("--pause", type=float, default=0.0)
args = ap.parse_args()

if args.numpy:
    sys.modules["torch"] = None  # makes `import torch` fail: the torch-less path

import shmfeed  # noqa: E402


def newest_state(d):
    files = glob.glob(os.path.join(d, "step_*.json"))
    if not files:
        return None
    best = max(files, key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]))
    with open(best) as f:
        return json.load(f)["state"]


loader = shmfeed.Loader(timeout=30)
if args.state_dir:
    st = newest_state(args.state_dir)
    if st is not None:
        loader.load_state_dict(st)
digests, steps = [], []
start = loader.state_dict()["step"]
for _ in range(args.steps - start if args.state_dir else args.steps):
    b = loader.next()
    digests.append(b.digest)
    steps.append(b.step)
    if args.state_dir:
        rec = {"step": b.step, "digest": b.digest, "state": loader.state_dict()}
        tmp = os.path.join(args.state_dir, f".tmp.{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(rec, f)
        os.rename(tmp, os.path.join(args.state_dir, f"step_{b.step}.json"))
    if args.pause:
        time.sleep(args.pause)

result = {"rank": loader.rank, "local_rank": loader.local_rank, "steps": steps,
          "digests": digests, "state": loader.state_dict(), "stats": loader.counters()}
if args.dist:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    mine = torch.tensor([d - (1 << 64) if d >= (1 << 63) else d for d in digests],
                        dtype=torch.int64)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    result["all"] = [[int(v) % (1 << 64) for v in g.tolist()] for g in gathered]
    dist.destroy_process_group()
loader.close()
print(json.dumps(result))
