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


TEXT_CONFIG = """
sources:
  - {{name: prose, paths: {d}/prose.txt, format: text, separator: "\\n\\n", weight: 0.4}}
  - {{name: digits, paths: {d}/digits.jsonl, format: jsonl, weight: 0.35}}
  - {{name: ids, paths: {d}/ids.bin, format: nanogpt, weight: 0.25}}
tokenizer: {{encoding: bytes}}
batch: {{size: {B}, seq_len: 32}}
consumers: {{world_size: {W}, device: cpu}}
producers: {{count: {P}}}
"""


@pytest.mark.skipif(not CLI, reason="SHMFEED_CLI is set by `meson test`")
def test_a_mixture_with_raw_text_sources_labels_each_row(tmp_path):
    """Two raw text sources (letters as .txt paragraphs, digits as .jsonl) and a
    pre-tokenized one (ids 130-249) under `bytes`: every row's tokens say its source
    (letters and spaces, digits, or 130-249, with <|endoftext|> = 256 between documents),
    and `batch.sources` names the same one; a run resumed at step 5 with 2 producers gets
    the batches of the uninterrupted run with 1."""
    rng = np.random.default_rng(7)
    letters = np.frombuffer(b"abcdefghij ", dtype=np.uint8)
    digits = np.frombuffer(b"0123456789", dtype=np.uint8)
    (tmp_path / "prose.txt").write_bytes(b"\n\n".join(
        rng.choice(letters, rng.integers(20, 400)).tobytes() for _ in range(300)))
    (tmp_path / "digits.jsonl").write_text("".join(
        json.dumps({"text": rng.choice(digits, rng.integers(5, 300)).tobytes().decode()}) + "\n"
        for _ in range(200)))
    (130 + np.arange(4001) % 120).astype(np.uint16).tofile(tmp_path / "ids.bin")
    kinds = [set(letters.tolist()), set(digits.tolist()), set(range(130, 250))]

    def run_text(B, W, P, steps, states=None):
        cfg = tmp_path / f"text-{B}-{W}-{P}.yaml"
        cfg.write_text(TEXT_CONFIG.format(d=tmp_path, B=B, W=W, P=P))
        args = [str(steps)]
        if states is not None:
            (tmp_path / "states.json").write_text(json.dumps(states))
            args.append(str(tmp_path / "states.json"))
        out = subprocess.run([CLI, "run", str(cfg), "--set", f"job={unique_job('mixt')}",
                              "--quiet", "--", sys.executable, os.path.join(HERE, "mix_ranks.py"),
                              *args], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, MIX_WORLD_SIZE=str(W)))
        assert out.returncode == 0, out.stderr
        return {r["rank"]: r["batches"] for r in json.loads(out.stdout.strip().splitlines()[-1])}

    base = run_text(B=4, W=2, P=1, steps=12)
    seen = np.zeros(3, dtype=int)
    for bs in base.values():
        for b in bs:
            for head, src in zip(b["heads"], b["sources"]):
                seen[src] += 1
                assert head in kinds[src] | {256}, (head, src)
    assert seen.min() > 0, seen
    states = {str(r): base[r][5]["state"] for r in base}
    resumed = run_text(B=4, W=2, P=2, steps=7, states=states)
    assert shas(resumed) == shas(base, since=5)


_CLOSE_THEN_ATTACH = """
import shmfeed
L = shmfeed.Loader(numpy=True, dtype="native", rank=0, world_size=1)
b = next(L)
assert b.sources is not None
del b
L.close()
with shmfeed.Loader(numpy=True, dtype="native", rank=0, world_size=1) as M:
    print(next(M).step)
"""


@pytest.mark.skipif(not CLI, reason="SHMFEED_CLI is set by `meson test`")
def test_close_lets_go_of_the_rank_of_a_mixture_job(corpus):
    """close() kept the slots' source arrays of a mixture job in native mode, which hold
    the attachment: the rank stayed held (another Loader got SF_E_BUSY) until the closed
    Loader was collected (a review)."""
    cfg = corpus / "close.yaml"
    cfg.write_text(CONFIG.format(d=corpus, B=2, W=1, P=1))
    out = subprocess.run([CLI, "run", str(cfg), "--set", f"job={unique_job('mixc')}", "--quiet",
                          "--", sys.executable, "-c", _CLOSE_THEN_ATTACH],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1"]
