"""A mixture job end to end with the real launcher, producers and shmfeed.Loader: three
nanoGPT sources whose tokens name their source, a schedule with a constant phase, a ramp
and an open phase. A run resumed with load_state_dict() (2 producers) before the phase
boundary and inside the ramp gets exactly the batches (SHA-256 of their token bytes) of
the uninterrupted run (1 producer); G = 8 as W=4 B=2 with 4 producers is the global
sample sequence of W=2 B=4; `batch.sources` names each row's source."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import HERE, unique_job

CLI = os.environ.get("SHMFEED_CLI")
TAG = 20000  # source s holds tokens s * TAG + (position % TAG)

CONFIG = """
sources:
  - {{name: web, paths: {d}/web.bin, format: nanogpt}}
  - {{name: code, paths: {d}/code.bin, format: nanogpt}}
  - {{name: math, paths: {d}/math.bin, format: nanogpt}}
batch: {{size: {B}, seq_len: 32}}
consumers: {{world_size: {W}, device: cpu}}
producers: {{count: {P}}}
mixture:
  schedule:
    - {{until_step: 6, weights: {{web: 0.5, code: 0.5}}}}
    - {{until_step: 12, weights: {{web: 0.5, code: 0.5}}, ramp_to: {{math: 1}}, stages: 3}}
    - {{weights: {{web: 1, code: 1, math: 2}}}}
"""

STEPS = 18


@pytest.fixture
def corpus(tmp_path):
    for s, (name, n) in enumerate([("web", 40000), ("code", 9000), ("math", 2000)]):
        (s * TAG + np.arange(n) % TAG).astype(np.uint16).tofile(tmp_path / f"{name}.bin")
    return tmp_path


def run(corpus, B, W, P, steps=STEPS, states=None):
    cfg = corpus / f"mix-{B}-{W}-{P}.yaml"
    cfg.write_text(CONFIG.format(d=corpus, B=B, W=W, P=P))
    args = [str(steps)]
    if states is not None:
        path = corpus / "states.json"
        path.write_text(json.dumps(states))
        args.append(str(path))
    out = subprocess.run([CLI, "run", str(cfg), "--set", f"job={unique_job('mix')}", "--quiet",
                          "--", sys.executable, os.path.join(HERE, "mix_ranks.py"), *args],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, MIX_WORLD_SIZE=str(W)))
    assert out.returncode == 0, out.stderr
    return {r["rank"]: r["batches"] for r in json.loads(out.stdout.strip().splitlines()[-1])}


def shas(ranks, since=0):
    return {r: [b["sha"] for b in bs if b["step"] >= since] for r, bs in ranks.items()}


@pytest.mark.skipif(not CLI, reason="SHMFEED_CLI is set by `meson test`")
def test_a_scheduled_mixture_is_deterministic_resumable_and_elastic(corpus):
    base = run(corpus, B=4, W=2, P=1)
    for r, bs in base.items():
        for b in bs:
            assert [h // TAG for h in b["heads"]] == b["sources"]
            if b["step"] < 6:
                assert set(b["sources"]) <= {0, 1}
    # Resume before the phase boundary (step 4) and inside the ramp (step 8).
    for at in (4, 8):
        states = {str(r): base[r][at]["state"] for r in base}
        resumed = run(corpus, B=4, W=2, P=2, steps=STEPS - at, states=states)
        assert shas(resumed) == shas(base, since=at)
    # G = 8 as W=4 B=2, with 4 producers: the same global samples.
    wide = run(corpus, B=2, W=4, P=4)

    def global_rows(ranks):
        g = {}
        for bs in ranks.values():
            for b in bs:
                for i, (row, src) in enumerate(zip(b["rows"], b["sources"])):
                    g[b["first"] + i] = (row, src)
        return g
    assert global_rows(wide) == global_rows(base)
    counts = np.bincount([s for b in base[0] + base[1] for s in b["sources"]], minlength=3)
    assert counts.min() > 0
