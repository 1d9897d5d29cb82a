"""`shmfeed tokenize --shard I/N` and `--merge`: parts that merge into the one-shot dataset.

The parts of each N run as parallel processes, as the tasks of a job array do; the merged
pair must equal, byte for byte, what one `shmfeed tokenize` of the whole corpus writes.
The corpus mixes every kind of file a part may cut: JSONL (split at any line), text with a
one-byte and with a multi-byte separator that cannot overlap itself (split at any
separator), and files a part takes whole (text with "\\n\\n", gzip, an empty file).
"""
import gzip
import hashlib
import json
import os
import random
import resource
import re
import shutil
import signal
import struct
import subprocess
import time

import pytest

SHMFEED = os.environ.get("SHMFEED_EXE")
DATA = os.environ.get("SHMFEED_DATA", "")
VOCAB = os.path.join(DATA, "vocab")

pytestmark = pytest.mark.skipif(not SHMFEED, reason="SHMFEED_EXE not set")

WORDS = ["alpha", "beta", "gamma", "delta", "caf\u00e9", "\u4e2d\u6587", "\U0001F600", "x" * 40,
         "line\nbreak", "tab\there", "quote\"", "0123456789"]


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def make_corpus(d, seed=7):
    """Write the corpus into directory d; return the job's YAML text."""
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    for name, n in (("a.jsonl", 2500), ("b.jsonl", 700)):
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            for i in range(n):
                if i % 97 == 5:
                    f.write("\n")  # blank lines are no documents
                f.write(json.dumps({"id": i, "text": f"{name} {i} " + words(rng, 0, 60)},
                                   ensure_ascii=bool(i % 2)) + "\n")
    open(os.path.join(d, "c.jsonl"), "w").close()
    with gzip.open(os.path.join(d, "z.jsonl.gz"), "wt", encoding="utf-8") as f:
        for i in range(300):
            f.write(json.dumps({"text": "gzipped " + words(rng, 1, 30)}) + "\n")
    with open(os.path.join(d, "lines.txt"), "w", encoding="utf-8") as f:
        for i in range(1500):
            f.write(words(rng, 0, 20).replace("\n", " ") + "\n")
    with open(os.path.join(d, "paras.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(words(rng, 1, 40) + "\n" * rng.randint(0, 2) for _ in range(400)))
    with open(os.path.join(d, "tagged.txt"), "w", encoding="utf-8") as f:
        f.write("<doc>".join(words(rng, 0, 50) for _ in range(600)))
    return f"""
job: parts-test
sources:
  - paths: ["{d}/*.jsonl", "{d}/*.jsonl.gz"]
  - paths: ["{d}/lines.txt"]
    format: text
    separator: "\\n"
  - paths: ["{d}/paras.txt"]
    format: text
    separator: "\\n\\n"
  - paths: ["{d}/tagged.txt"]
    format: text
    separator: "<doc>"
tokenizer:
  encoding: r50k_base
  vocab_dir: {VOCAB}
producers:
  count: 1
"""


def env_for(tmp_path):
    return dict(os.environ, SHMFEED_CACHE_DIR=str(tmp_path / "cache"))


def run(tmp_path, *args, check=True):
    r = subprocess.run([SHMFEED, "tokenize", *args], capture_output=True, text=True,
                       timeout=300, env=env_for(tmp_path))
    if check:
        assert r.returncode == 0, r.stderr
    return r


def run_parts(tmp_path, cfg, prefix, n):
    """Every part of n at once, as separate processes; returns the part prefixes."""
    procs = [subprocess.Popen([SHMFEED, "tokenize", str(cfg), "-o", prefix, "--shard",
                               f"{i}/{n}", "-q"], stderr=subprocess.PIPE, text=True,
                              env=env_for(tmp_path)) for i in range(n)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return [f"{prefix}_{i:05d}-of-{n:05d}" for i in range(n)]


def bytes_job(d, extra=""):
    """A job over d/*.jsonl with the byte encoding, whose ids are computable here."""
    cfg = d / "job.yaml"
    cfg.write_text(f"""
sources:
  - paths: ["{d}/*.jsonl"]
tokenizer:
  encoding: bytes
producers:
  count: 1
{extra}""")
    return cfg


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not os.path.isdir(VOCAB):
        pytest.skip("shared data not found")
    tmp = tmp_path_factory.mktemp("parts")
    cfg = tmp / "job.yaml"
    cfg.write_text(make_corpus(str(tmp / "corpus")))
    run(tmp, str(cfg), "-o", str(tmp / "whole"), "-q")
    return tmp, cfg


@pytest.mark.parametrize("n", [1, 3, 7])
def test_merged_parts_equal_one_shot(corpus, n):
    tmp, cfg = corpus
    out = tmp / f"n{n}"
    out.mkdir()
    parts = run_parts(tmp, cfg, str(out / "part"), n)
    manifests = [json.loads(read(p + ".json")) for p in parts]
    for i, (p, m) in enumerate(zip(parts, manifests)):
        assert (m["format"], m["version"], m["part"], m["parts"]) == \
            ("shmfeed-tokenize-part", 1, i, n)
        assert m["bin_sha256"] == sha256(p + ".bin")
        assert m["idx_sha256"] == sha256(p + ".idx")
        assert m["bin_bytes"] == os.path.getsize(p + ".bin") == 2 * m["tokens"]
        assert m["dtype"] == "uint16"
    assert len({m["config_digest"] for m in manifests}) == 1
    # The merge takes the shell's expansion of PREFIX_*: .bin, .idx and .json of each part.
    names = sorted(str(x) for x in out.iterdir())
    # One part named twice by different paths still counts once.
    names.append(os.path.join(str(out), ".", os.path.basename(parts[0]) + ".bin"))
    r = run(tmp, "--merge", *names, "-o", str(out / "merged"))
    assert f"merged {n} parts" in r.stderr
    for ext in (".bin", ".idx"):
        assert read(str(out / "merged") + ext) == read(str(tmp / "whole") + ext)
        assert sha256(str(out / "merged") + ext) == sha256(str(tmp / "whole") + ext)
    whole_docs = (os.path.getsize(str(tmp / "whole.idx")) - 34 - 8) // 20
    assert sum(m["documents"] for m in manifests) == whole_docs
    if n == 7:
        # Balanced by bytes: no part is empty, and none holds twice its share of text.
        total = sum(m["text_bytes"] for m in manifests)
        assert all(0 < m["text_bytes"] < 2 * total / n for m in manifests), \
            [m["text_bytes"] for m in manifests]


def test_rerun_gives_same_bytes(corpus):
    tmp, cfg = corpus
    out = tmp / "rerun"
    out.mkdir()
    first = run_parts(tmp, cfg, str(out / "p"), 3)
    before = {p + ext: read(p + ext) for p in first for ext in (".bin", ".idx", ".json")}
    # Part 1 fails half-way (its files cut short, its manifest gone), then runs again.
    os.unlink(first[1] + ".json")
    with open(first[1] + ".bin", "r+b") as f:
        f.truncate(10)
    run(tmp, str(cfg), "-o", str(out / "p"), "--shard", "1/3", "-q")
    for path, data in before.items():
        assert read(path) == data, path


def expected_jsonl_docs(paths, n):
    """Documents per part by the documented rule, computed here independently: files end to
    end in listing order, part I takes the documents whose first byte lies in
    [I*S//n, (I+1)*S//n)."""
    sizes = [os.path.getsize(p) for p in paths]
    total = sum(sizes)
    counts = [0] * n
    base = 0
    for p, size in zip(paths, sizes):
        off = 0
        for line in read(p).split(b"\n")[:-1]:
            if line.strip():
                g = base + off
                counts[next(i for i in reversed(range(n)) if i * total // n <= g)] += 1
            off += len(line) + 1
        base += size
    return counts


def test_parts_follow_the_documented_rule(tmp_path):
    if not os.path.isdir(VOCAB):
        pytest.skip("shared data not found")
    rng = random.Random(3)
    paths = []
    for name, n in (("a.jsonl", 400), ("b.jsonl", 5), ("c.jsonl", 900)):
        p = tmp_path / name
        p.write_text("".join(json.dumps({"text": words(rng, 0, 80)}) + "\n"
                             + ("\n" if i % 50 == 1 else "") for i in range(n)))
        paths.append(str(p))
    cfg = bytes_job(tmp_path)
    for n in (2, 5, 13):
        parts = run_parts(tmp_path, cfg, str(tmp_path / f"r{n}"), n)
        got = [json.loads(read(p + ".json"))["documents"] for p in parts]
        assert got == expected_jsonl_docs(paths, n)


def refused(tmp, args, words_in_message):
    out = tmp / "refused"
    r = run(tmp, "--merge", *args, "-o", str(out), check=False)
    assert r.returncode == 1, r.stderr
    for w in words_in_message:
        assert w in r.stderr, r.stderr
    assert not os.path.exists(str(out) + ".bin") and not os.path.exists(str(out) + ".idx")
    assert not [x for x in os.listdir(tmp) if x.startswith("refused")]


def test_bad_sets_of_parts_are_refused(corpus):
    tmp, cfg = corpus
    out = tmp / "bad"
    out.mkdir()
    parts = run_parts(tmp, cfg, str(out / "p"), 3)
    refused(tmp, parts[:1] + parts[2:], ["part 1 of 3 is missing"])
    # The same part under a second name.
    for ext in (".bin", ".idx", ".json"):
        shutil.copy(parts[1] + ext, str(out / "copy") + ext)
    refused(tmp, parts + [str(out / "copy")], ["both part 1 of 3"])
    refused(tmp, parts[:1] + [str(out / "copy")] + parts[2:] + parts[1:2],
            ["both part 1 of 3"])
    # A part of another tokenization: same corpus, another encoding.
    other = tmp / "other.yaml"
    other.write_text(cfg.read_text().replace("r50k_base", "cl100k_base"))
    foreign = run_parts(tmp, other, str(out / "f"), 3)
    refused(tmp, parts[:2] + foreign[2:], ["not parts of one tokenization"])
    # A part of another count.
    refused(tmp, parts + run_parts(tmp, cfg, str(out / "q"), 4)[3:], ["not parts of one"])
    # Two manifests whose part numbers were swapped (found by review): the merge went by
    # them alone and wrote the parts in another order, exit 0.
    swapped = []
    for i, src in enumerate(parts):
        dst = str(out / f"s_{i:05d}-of-00003")
        for ext in (".bin", ".idx", ".json"):
            shutil.copy(src + ext, dst + ext)
        swapped.append(dst)
    for i, j in ((1, 2), (2, 1)):
        m = open(swapped[i] + ".json").read()
        open(swapped[i] + ".json", "w").write(m.replace(f'"part": {i}', f'"part": {j}'))
    refused(tmp, swapped, [swapped[1], "its manifest says part 2 of 3, its name part 1 of 3"])
    # A manifest of another token width named the digests, alike, as the difference.
    m = open(swapped[0] + ".json").read()
    assert '"dtype": "uint16"' in m, m
    open(swapped[0] + ".json", "w").write(m.replace('"dtype": "uint16"', '"dtype": "int32"'))
    refused(tmp, [swapped[0], parts[1], parts[2]],
            [swapped[0] + " holds int32 tokens and", "uint16: not parts of one"])
    # A refused merge removed PREFIX.bin.tmp and .idx.tmp it had not made (found by
    # review): here a link to a part's .bin, and another's symbolic link.
    os.link(parts[1] + ".bin", out / "m2.bin.tmp")
    os.symlink("elsewhere", out / "m2.idx.tmp")
    r = run(tmp, "--merge", *parts, "-o", str(out / "m2"), check=False)
    assert r.returncode == 1, r.stderr
    assert (out / "m2.bin.tmp").exists() and os.path.islink(out / "m2.idx.tmp"), r.stderr
    os.unlink(out / "m2.bin.tmp")
    os.unlink(out / "m2.idx.tmp")
    # A part whose file changed after its manifest was written.
    with open(parts[2] + ".bin", "r+b") as f:
        f.seek(5)
        b = f.read(1)
        f.seek(5)
        f.write(bytes([b[0] ^ 1]))
    refused(tmp, parts, [parts[2] + ".bin", "SHA-256", "its manifest says"])
    # A part that never finished: no manifest.
    os.unlink(parts[0] + ".json")
    refused(tmp, parts, [parts[0] + ".json", "no manifest"])
    r = run(tmp, "--merge", "-o", str(tmp / "x"), check=False)
    assert r.returncode == 2 and "usage" in r.stderr


def test_a_job_over_parts_checks_the_set(corpus):
    """A job that reads parts as its sources (docs: "Using the parts without merging")
    read what was there: a part missing, a part's .idx missing (its .bin then read as
    nanoGPT tokens) or a part of another count caught by the glob gave another corpus,
    without a word (a review). The set is held to what the merge requires."""
    tmp, cfg = corpus
    out = tmp / "asjob"
    out.mkdir()
    parts = run_parts(tmp, cfg, str(out / "c"), 3)

    def check(glob):
        job = tmp / "parts.yaml"
        job.write_text(f'sources:\n  - paths: ["{out}/{glob}"]\nbatch: {{size: 1, '
                       "seq_len: 8}\n")
        return subprocess.run([SHMFEED, "check", str(job)], capture_output=True, text=True,
                              timeout=60, env=env_for(tmp))

    r = check("c_*-of-00003.bin")
    assert r.returncode == 0, r.stderr
    # A part of another count beside them, caught by the glob.
    run_parts(tmp, cfg, str(out / "c"), 2)
    r = check("c_*-of-*.bin")
    assert r.returncode != 0 and "not parts of one tokenization" in r.stderr, r
    for f in out.glob("c_*-of-00002.*"):
        f.unlink()
    # A part's .idx gone: its .bin was read as nanoGPT tokens.
    os.rename(parts[1] + ".idx", parts[1] + ".idx.away")
    r = check("c_*-of-00003.bin")
    assert r.returncode != 0 and parts[1] + ".idx" in r.stderr and "missing" in r.stderr, r
    os.rename(parts[1] + ".idx.away", parts[1] + ".idx")
    # A whole part gone.
    for ext in (".bin", ".idx", ".json"):
        os.rename(parts[2] + ext, parts[2] + ext + ".away")
    r = check("c_*-of-00003.bin")
    assert r.returncode != 0 and "part 2 of 3 is missing" in r.stderr, r
    for ext in (".bin", ".idx", ".json"):
        os.rename(parts[2] + ext + ".away", parts[2] + ext)
    assert check("c_*-of-00003.bin").returncode == 0
    # An older pair beside the parts, and a set under a longer name, caught by `c_*`:
    # the job read them with the parts (twice the corpus), where a merge of the same
    # names refuses (a review). A source of parts holds one set, as a merge does.
    for ext in (".bin", ".idx"):
        shutil.copy(parts[0] + ext, str(out / "c_old") + ext)
    r = check("c_*")
    assert r.returncode != 0 and f"{out}/c_old.bin, which is no part" in r.stderr, r
    for ext in (".bin", ".idx"):
        os.unlink(str(out / "c_old") + ext)
    run_parts(tmp, cfg, str(out / "c_v2"), 2)
    r = check("c_*")
    assert r.returncode != 0 and "the 2 parts of" in r.stderr and "c_v2" in r.stderr, r
    assert check("c_*-of-00003.bin").returncode == 0
    for f in out.glob("c_v2_*"):
        f.unlink()
    assert check("c_*").returncode == 0
    # What a part killed after its manifest (its lock) or while it wrote (its
    # temporaries) leaves beside the parts: the merge of `c_*` skips them, and a source
    # of the same glob refused them as "no part" (a review); it skips them too.
    leftovers = [parts[1] + ".lock", parts[1] + ".lock.123.tmp", parts[1] + ".bin.tmp",
                 parts[1] + ".json.tmp"]
    for f in leftovers:
        with open(f, "wb") as w:
            w.write(b"x" * 10)
    r = check("c_*")
    assert r.returncode == 0, r.stderr
    assert ": 6 files," in r.stdout, r.stdout  # the three pairs, no leftover
    for f in leftovers:
        os.unlink(f)
    # A .lock of no part's is no leftover: refused as no part, not dropped unsaid.
    with open(out / "c_notes.lock", "w") as w:
        w.write("notes\n")
    r = check("c_*")
    assert r.returncode != 0 and "c_notes.lock, which is no part" in r.stderr, r
    os.unlink(out / "c_notes.lock")



def test_a_job_over_a_directory_of_parts_reads_their_pairs(corpus):
    """The natural way to name parts, their directory or `PREFIX_*`, lists each part's
    manifest beside its pair: it was counted as a second copy of the part ("X and X are
    both part 0 of 3", one path named twice). The manifests belong to their parts; the
    job reads the pairs. And `check` listed each part named on its own as "0 files, 0
    bytes" (each path expanded alone failed the whole set's check, unsaid)."""
    tmp, cfg = corpus
    out = tmp / "asdir"
    out.mkdir()
    parts = run_parts(tmp, cfg, str(out / "c"), 3)
    size = sum(os.path.getsize(p + ext) for p in parts for ext in (".bin", ".idx"))

    def check(paths):
        job = tmp / "dir.yaml"
        job.write_text(f"sources:\n  - paths: {json.dumps(paths)}\nbatch: {{size: 1, "
                       "seq_len: 8}\n")
        return subprocess.run([SHMFEED, "check", str(job)], capture_output=True, text=True,
                              timeout=60, env=env_for(tmp))

    for paths in ([str(out)], [f"{out}/c_*"]):
        r = check(paths)
        assert r.returncode == 0, r.stderr
        assert f": 6 files, {size} bytes, megatron\n" in r.stdout, r.stdout
    r = check(parts)
    assert r.returncode == 0, r.stderr
    for p in parts:
        one = sum(os.path.getsize(p + ext) for ext in (".bin", ".idx"))
        assert f"{p}: 2 files, {one} bytes, megatron\n" in r.stdout, r.stdout
    # Each part named by its manifest, as --merge takes them: it was read as data ("format
    # auto goes by the name").
    r = check([p + ".json" for p in parts])
    assert r.returncode == 0, r.stderr
    for p in parts:
        one = sum(os.path.getsize(p + ext) for ext in (".bin", ".idx"))
        assert f"{p}.json: 2 files, {one} bytes, megatron\n" in r.stdout, r.stdout
    # A part still missing is refused, by the set's message.
    r = check(parts[:2])
    assert r.returncode != 0 and "part 2 of 3 is missing" in r.stderr, r

def test_empty_parts(tmp_path):
    # More parts than documents: some parts hold none, and still merge.
    (tmp_path / "d.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    cfg = bytes_job(tmp_path, "batch:\n  seq_len: 4\n")
    parts = run_parts(tmp_path, cfg, str(tmp_path / "p"), 9)
    docs = [json.loads(read(p + ".json"))["documents"] for p in parts]
    assert sum(docs) == 2 and docs.count(0) == 7
    run(tmp_path, str(cfg), "-o", str(tmp_path / "whole"), "-q")
    run(tmp_path, "--merge", *parts, "-o", str(tmp_path / "merged"), "-q")
    for ext in (".bin", ".idx"):
        assert read(str(tmp_path / "merged") + ext) == read(str(tmp_path / "whole") + ext)


def test_a_merge_says_which_parts_skipped(tmp_path):
    """A part that skipped records or files (on_error: skip) merged without a word: a
    file one node could not read (its permissions there) made a merged dataset other
    than the one-shot one, and nothing said so but that part's own log (a review). The
    manifest counts the skips and keeps the first one's message, and the merge repeats
    them for each part."""
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": f"a {i}"}) + "\n"
                                              for i in range(40)))
    (tmp_path / "b.jsonl").write_text('{"text": "b 0"}\n{"text": 7}\n{"text": "b 2"}\n'
                                      "not json\n")
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f'sources:\n  - paths: ["{tmp_path}/*.jsonl"]\n    on_error: skip\n'
                   "tokenizer:\n  encoding: bytes\nproducers:\n  count: 1\n")
    parts = run_parts(tmp_path, cfg, str(tmp_path / "p"), 2)
    manifests = [json.loads(read(p + ".json")) for p in parts]
    assert [m["skipped"] for m in manifests] == [0, 2], manifests
    assert "b.jsonl:2" in manifests[1]["first_skip"], manifests[1]
    r = run(tmp_path, "--merge", *parts, "-o", str(tmp_path / "merged"))
    said = [ln for ln in r.stderr.splitlines() if "skipped" in ln]
    assert len(said) == 1 and "part 1 of 2 skipped 2 records or files" in said[0] \
        and "b.jsonl:2" in said[0], r.stderr
    run(tmp_path, str(cfg), "-o", str(tmp_path / "whole"), "-q")
    for ext in (".bin", ".idx"):
        assert read(str(tmp_path / "merged") + ext) == read(str(tmp_path / "whole") + ext)


def test_a_file_skipped_whole_counts_once_over_the_parts_it_spans(tmp_path):
    """A .txt file of UTF-16 text (refused whole, skipped under on_error: skip) that
    spans parts was skipped by each part that maps it: the manifests counted it once a
    part, where the one-shot tokenize counts it once (a review). The part holding its
    first byte counts it."""
    text = "".join(f"line {i} of a licence text\n" for i in range(3000))
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "u16.txt").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    (tmp_path / "z.txt").write_text(text)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f'sources:\n  - paths: ["{tmp_path}/*.txt"]\n    format: text\n'
                   '    separator: "\\n"\n    on_error: skip\n'
                   "tokenizer:\n  encoding: bytes\nproducers:\n  count: 1\n")
    parts = run_parts(tmp_path, cfg, str(tmp_path / "p"), 5)
    manifests = [json.loads(read(p + ".json")) for p in parts]
    assert sum(m["skipped"] for m in manifests) == 1, [m["skipped"] for m in manifests]
    r = run(tmp_path, "--merge", *parts, "-o", str(tmp_path / "merged"))
    assert len([ln for ln in r.stderr.splitlines() if "warning: part" in ln]) == 1, r.stderr
    run(tmp_path, str(cfg), "-o", str(tmp_path / "whole"), "-q")
    for ext in (".bin", ".idx"):
        assert read(str(tmp_path / "merged") + ext) == read(str(tmp_path / "whole") + ext)


def test_parts_that_get_no_file(tmp_path):
    """A file a part must take whole (gzip; text cut at "\\n\\n") goes to one part, and the
    other part then has no file at all: it is an empty part, as one with files but no
    documents is (it crashed, leaving its .bin.tmp behind). A leftover temporary file of
    an unfinished part is not taken for a part by --merge PREFIX_*."""
    with gzip.open(tmp_path / "big.jsonl.gz", "wt", encoding="utf-8") as f:
        for i in range(100):
            f.write(json.dumps({"text": f"doc {i}"}) + "\n")
    (tmp_path / "paras.txt").write_text("\n\n".join(f"paragraph {i}" for i in range(50)))
    for name, source in (("gz", f'paths: ["{tmp_path}/big.jsonl.gz"]'),
                         ("paras", f'paths: ["{tmp_path}/paras.txt"]\n    format: text\n'
                                   '    separator: "\\n\\n"')):
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(f"sources:\n  - {source}\ntokenizer:\n  encoding: bytes\n"
                       "batch: {seq_len: 8, size: 1}\n")
        parts = run_parts(tmp_path, cfg, str(tmp_path / name), 2)
        docs = [json.loads(read(p + ".json"))["documents"] for p in parts]
        assert sorted(docs) == [0, 100 if name == "gz" else 50], docs
        assert not [f for f in os.listdir(tmp_path)
                    if f.startswith(name + "_") and f.endswith(".tmp")]
        run(tmp_path, str(cfg), "-o", str(tmp_path / f"{name}-whole"), "-q")
        # What a part killed while writing leaves: it must not pass for a part.
        (tmp_path / f"{name}_00001-of-00002.bin.tmp").write_bytes(b"partial")
        run(tmp_path, "--merge", *[str(tmp_path / f) for f in sorted(os.listdir(tmp_path))
                                   if f.startswith(name + "_")],
            "-o", str(tmp_path / f"{name}-merged"), "-q")
        for ext in (".bin", ".idx"):
            assert read(str(tmp_path / f"{name}-merged") + ext) == \
                read(str(tmp_path / f"{name}-whole") + ext)


def test_the_byte_encoding_needs_no_vocabulary_directory(tmp_path):
    """`encoding: bytes` (the default) has no vocabulary file: a SHMFEED_VOCAB_DIR in the
    environment must not make the loader look for bytes.tiktoken there."""
    (tmp_path / "d.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    cfg = bytes_job(tmp_path, "batch:\n  seq_len: 4\n")
    r = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(tmp_path / "x"), "-q"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(env_for(tmp_path), SHMFEED_VOCAB_DIR=str(tmp_path / "none")))
    assert r.returncode == 0, r.stderr
    ids = [*b"one", 256, *b"two", 256]  # each document's bytes, then end of text
    assert read(str(tmp_path / "x.bin")) == b"".join(t.to_bytes(2, "little") for t in ids)


def test_a_corpus_of_no_document_is_an_error(tmp_path):
    """Sources that hold no token (every record bad under on_error: skip, or files that
    are empty) wrote an empty dataset and exited 0."""
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources:\n  - {{paths: [\"{tmp_path}/*.jsonl\"], on_error: skip}}\n")
    (tmp_path / "a.jsonl").write_text('{"text": broken}\n{"body": "no text"}\n')
    r = run(tmp_path, str(cfg), "-o", str(tmp_path / "out"), check=False)
    assert r.returncode == 1, r
    assert "the sources hold no token" in r.stderr and "a.jsonl:1" in r.stderr, r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out")], os.listdir(tmp_path)
    # In parts, each part may be empty, but their merge may not.
    run(tmp_path, str(cfg), "-o", str(tmp_path / "p"), "--shard", "0/1")
    r = run(tmp_path, "--merge", str(tmp_path / "p_00000-of-00001"), "-o",
            str(tmp_path / "m"), check=False)
    assert r.returncode == 1 and "hold no token" in r.stderr, r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith("m.")], os.listdir(tmp_path)


def killed_run_leaves_its_lock(tmp_path, args, prefix):
    """Replace the file PREFIX.lock by the one a run killed while writing leaves: a run
    of a large input, SIGKILLed once its lock is there and marked."""
    os.unlink(f"{prefix}.lock")
    big = tmp_path / "big"
    big.mkdir(exist_ok=True)
    (big / "b.jsonl").write_text('{"text": "%s"}\n' % ("y" * (1 << 20)) * 64)
    p = subprocess.Popen([SHMFEED, "tokenize", str(bytes_job(big)), *args],
                         env=env_for(tmp_path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                os.path.exists(f"{prefix}.lock") and os.path.getsize(f"{prefix}.lock")):
            time.sleep(0.001)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -9 and os.path.getsize(f"{prefix}.lock") > 0, p.returncode
    for leftover in (f"{prefix}.bin.tmp", f"{prefix}.idx.tmp"):
        if os.path.exists(leftover):
            os.unlink(leftover)


def test_a_second_run_into_the_same_prefix_is_refused(tmp_path):
    """Two runs into one prefix (a job array given the same index twice) truncated each
    other's temporary files: one exited 0 over a .bin of zeros, or deleted the other's
    finished .idx. The writer holds PREFIX.lock; a second is refused at once, and the lock
    goes with the run."""
    import fcntl
    cfg = bytes_job(tmp_path)
    (tmp_path / "a.jsonl").write_text('{"text": "some text"}\n{"text": "and more"}\n')
    for args, prefix in ((("-o", str(tmp_path / "out")), tmp_path / "out"),
                         (("-o", str(tmp_path / "p"), "--shard", "0/2"),
                          tmp_path / "p_00000-of-00002")):
        with open(f"{prefix}.lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # as a run still writing holds it
            r = run(tmp_path, str(cfg), *args, check=False)
            assert r.returncode == 1, r
            assert f"{prefix}: another `shmfeed tokenize` is writing it" in r.stderr, r.stderr
            assert not os.path.exists(f"{prefix}.bin") and not os.path.exists(f"{prefix}.idx")
        # An empty file of that name is someone's own: refused, and left there (it was
        # taken as a stale lock and removed at the end).
        r = run(tmp_path, str(cfg), *args, check=False)
        assert r.returncode == 1 and "is not a lock file of shmfeed's" in r.stderr, r.stderr
        assert os.path.exists(f"{prefix}.lock") and not os.path.exists(f"{prefix}.bin")
        # A lock file left by a run that died (the run's own, which it marked) is no lock.
        killed_run_leaves_its_lock(tmp_path, args, prefix)
        run(tmp_path, str(cfg), *args)
        assert os.path.exists(f"{prefix}.bin") and not os.path.exists(f"{prefix}.lock")
    with open(tmp_path / "m.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = run(tmp_path, "--merge", str(tmp_path / "p_00000-of-00002"),
                "-o", str(tmp_path / "m"), check=False)
        assert r.returncode == 1 and "another `shmfeed tokenize`" in r.stderr, r.stderr


def test_a_manifest_whose_counts_its_files_do_not_hold_is_refused_before_writing(tmp_path):
    """The merge sized and wrote the merged index from the manifests' document counts
    before it looked at any part: a manifest that said 3,000,000 documents had it write
    24 MB first (80 GB for 10^10) and then blame the part's index. The counts are now
    held to the parts' files first, and nothing is written."""
    cfg = bytes_job(tmp_path)
    (tmp_path / "a.jsonl").write_text("".join('{"text": "doc %d"}\n' % i for i in range(200)))
    (tmp_path / "out").mkdir()
    parts = run_parts(tmp_path, cfg, str(tmp_path / "out" / "p"), 3)
    manifest = json.loads(open(parts[1] + ".json").read())
    for key, value in (("documents", 3_000_000), ("tokens", 10**12)):
        bad = dict(manifest, **{key: value})
        with open(parts[1] + ".json", "w") as f:
            json.dump(bad, f)
        # Under a file size limit of 1 MiB: no part of the merge may need more.
        r = subprocess.run([SHMFEED, "tokenize", "--merge", *parts, "-o", str(tmp_path / "m")],
                           capture_output=True, text=True, timeout=120, env=env_for(tmp_path),
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                                 (1 << 20, 1 << 20)))
        assert r.returncode == 1, r.stderr
        assert parts[1] in r.stderr and f"{value} {key}" in r.stderr, r.stderr
        assert "File too large" not in r.stderr, r.stderr
        assert not [p for p in os.listdir(tmp_path) if p.startswith("m")], \
            os.listdir(tmp_path)


def test_a_file_size_limit_is_an_error_not_a_kill(tmp_path):
    """Past RLIMIT_FSIZE, SIGXFSZ killed tokenize (status -25) and left PREFIX.bin.tmp;
    now the write fails and is said, and nothing is left."""
    import resource
    cfg = bytes_job(tmp_path)
    (tmp_path / "a.jsonl").write_text("".join('{"text": "%s"}\n' % ("x" * 200)
                                              for _ in range(100)))
    lim = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # noqa: E731
    r = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120, env=env_for(tmp_path),
                       preexec_fn=lim)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "out.bin.tmp" in r.stderr and "File too large" in r.stderr, r.stderr
    # The limit is named, as the arena's message names it (a review).
    assert "(the file size limit, ulimit -f)" in r.stderr, r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out")], os.listdir(tmp_path)


def test_an_index_write_failure_says_why(tmp_path):
    """The .idx writer reported any failure as "cannot write", without its cause."""
    cfg = bytes_job(tmp_path)
    (tmp_path / "a.jsonl").write_text('{"text": ""}\n' * 2000)  # a 4 KB .bin, a 40 KB .idx
    lim = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (20480, 20480))  # noqa: E731
    r = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120, env=env_for(tmp_path),
                       preexec_fn=lim)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "out.idx.tmp" in r.stderr and "File too large" in r.stderr, r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out")], os.listdir(tmp_path)


def test_pre_tokenized_sources_are_refused(tmp_path):
    (tmp_path / "t.bin").write_bytes(bytes(range(64)))
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"""
sources:
  - paths: ["{tmp_path}/t.bin"]
""")
    r = run(tmp_path, str(cfg), "-o", str(tmp_path / "p"), "--shard", "0/1", check=False)
    assert r.returncode == 1 and "raw text" in r.stderr, r.stderr
    assert not [x for x in os.listdir(tmp_path) if x.startswith("p_")]
    # One-shot too, before any index line ("1 files, 0.0 MB of text, ... built" came first).
    r = run(tmp_path, str(cfg), "-o", str(tmp_path / "o"), check=False)
    assert r.returncode == 1 and "t.bin: tokenize reads raw text" in r.stderr, r.stderr
    assert "chunk index" not in r.stderr, r.stderr
    # Beside raw text, every part refuses it, not only the part the file falls in: the
    # others wrote their parts and exited 0, and only the merge refused them.
    (tmp_path / "a.txt").write_text("one document\n\nand another\n" * 400)
    (tmp_path / "b.txt").write_text("a third\n\nand a fourth\n" * 400)
    cfg.write_text(f"""
sources:
  - paths: ["{tmp_path}/a.txt", "{tmp_path}/b.txt"]
  - paths: ["{tmp_path}/t.bin"]
tokenizer:
  encoding: bytes
""")
    for n in (2, 3):
        for i in range(n):
            r = run(tmp_path, str(cfg), "-o", str(tmp_path / "p"), "--shard", f"{i}/{n}",
                    check=False)
            assert r.returncode == 1 and "t.bin: tokenize parts are cut from raw text" \
                in r.stderr, (i, n, r.stderr)
    assert not [x for x in os.listdir(tmp_path) if x.startswith("p_")]


def test_bad_shard_arguments(corpus):
    tmp, cfg = corpus
    for bad in ("3/3", "1", "-1/3", "1/0", "a/b", "1/3x", "0/100000"):
        r = run(tmp, str(cfg), "-o", str(tmp / "never"), "--shard", bad, check=False)
        assert r.returncode == 2 and "--shard" in r.stderr, (bad, r.stderr)
    assert not [x for x in os.listdir(tmp) if x.startswith("never")]


def megatron_read(prefix):
    """The pair as Megatron-LM's IndexedDataset reads it (megatron_read.py in the venv of
    scripts/deps); skips when that venv or its megatron-core is missing."""
    venv = os.environ.get("SHMFEED_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shmfeed",
        "venv-torch")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        pytest.skip(f"no venv at {venv} (scripts/deps makes it)")
    r = subprocess.run([python, os.path.join(os.path.dirname(__file__), "megatron_read.py"),
                        prefix], capture_output=True, text=True, timeout=300)
    if r.returncode == 77:
        pytest.skip("megatron-core is not installed in the venv (scripts/deps installs it)")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def shmfeed_encode(text, encoding):
    r = subprocess.run([SHMFEED, "encode", "-e", encoding, "--vocab",
                        os.path.join(VOCAB, encoding + ".tiktoken")],
                       input=text.encode("utf-8"), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int.from_bytes(r.stdout[i:i + 4], "little") for i in range(0, len(r.stdout), 4)]


def test_megatron_reads_merged_bytes_exactly(tmp_path):
    # The byte encoding makes every id computable here: UTF-8 bytes, then 256.
    rng = random.Random(11)
    texts = [words(rng, 0, 70) for _ in range(900)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = bytes_job(tmp_path)
    parts = run_parts(tmp_path, cfg, str(tmp_path / "p"), 3)
    run(tmp_path, "--merge", *parts, "-o", str(tmp_path / "merged"), "-q")
    got = megatron_read(str(tmp_path / "merged"))
    assert got["dtype"] == "uint16"
    assert got["document_indices"] == list(range(len(texts) + 1))
    assert got["documents"] == [list(t.encode("utf-8")) + [256] for t in texts]


@pytest.mark.parametrize("encoding,dtype", [("r50k_base", "uint16"), ("o200k_base", "int32")])
def test_megatron_reads_merged_real_tokenizer(corpus, encoding, dtype):
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    from test_tokenize import read_mmidx

    tmp, cfg = corpus
    out = tmp / f"meg-{encoding}"
    out.mkdir()
    job = out / "job.yaml"
    job.write_text(cfg.read_text().replace("r50k_base", encoding))
    run(tmp, str(job), "-o", str(out / "whole"), "-q")
    parts = run_parts(tmp, job, str(out / "p"), 7)
    run(tmp, "--merge", *parts, "-o", str(out / "merged"), "-q")
    got = megatron_read(str(out / "merged"))
    _, seqs, doc_idx = read_mmidx(str(out / "whole"))
    assert got["dtype"] == dtype
    assert got["document_indices"] == doc_idx.tolist()
    assert got["documents"] == [s.tolist() for s in seqs]
    # The first documents are a.jsonl's first records: shmfeed's tokenizer on their text.
    eot = 50256 if encoding == "r50k_base" else 199999
    with open(os.path.join(str(tmp), "corpus", "a.jsonl"), encoding="utf-8") as f:
        first = [json.loads(line)["text"] for line in f.readlines()[:5] if line.strip()]
    for text, doc in zip(first, got["documents"]):
        assert doc == shmfeed_encode(text, encoding) + [eot]


# A stand-in for Slurm's sbatch, enough for docs/slurm/: --parsable, --array=A-B or I,
# --dependency=afterok:ID. It runs a job at once: an array's tasks as parallel processes
# with SLURM_ARRAY_TASK_ID / _COUNT / _MIN / _MAX set, and a job whose afterok dependency
# failed not at all (Slurm leaves it pending: DependencyNeverSatisfied). Tasks listed in
# $FAKE_SBATCH_FAIL_TASKS fail without running, as on a node lost before they started.
FAKE_SBATCH = r'''#!/usr/bin/env python3
import os, subprocess, sys
state = os.environ["FAKE_SBATCH_STATE"]
args, opts = sys.argv[1:], {}
while args and args[0].startswith("--"):
    k, _, v = args.pop(0)[2:].partition("=")
    opts[k] = v
script, script_args = args[0], args[1:]
ids = [int(f) for f in os.listdir(state) if f.isdigit()]
job = max(ids, default=1000) + 1
def status(j):
    with open(os.path.join(state, str(j))) as f:
        return f.read()
def finish(s):
    with open(os.path.join(state, str(job)), "w") as f:
        f.write(s)
    print(job if "parsable" in opts else f"Submitted batch job {job}")
    sys.exit(0)
dep = opts.get("dependency", "")
if dep:
    kind, *deps = dep.split(":")
    assert kind == "afterok", dep
    if any(status(d) != "ok" for d in deps):
        finish("never")
tasks = []
if "array" in opts:
    for r in opts["array"].split(","):
        a, _, b = r.partition("-")
        tasks += range(int(a), int(b or a) + 1)
fail = {int(t) for t in os.environ.get("FAKE_SBATCH_FAIL_TASKS", "").split(",") if t}
procs = []
for t in tasks or [None]:
    env = dict(os.environ, SLURM_JOB_ID=str(job), SLURM_CPUS_PER_TASK="1")
    if t is not None:
        env.update(SLURM_ARRAY_JOB_ID=str(job), SLURM_ARRAY_TASK_ID=str(t),
                   SLURM_ARRAY_TASK_COUNT=str(len(tasks)),
                   SLURM_ARRAY_TASK_MIN=str(min(tasks)), SLURM_ARRAY_TASK_MAX=str(max(tasks)))
    if t in fail:
        continue
    out = open(os.path.join(state, f"{job}_{t}.out"), "w")
    procs.append(subprocess.Popen(["bash", script, *script_args], env=env, stdout=out,
                                  stderr=subprocess.STDOUT))
codes = [p.wait() for p in procs]
finish("ok" if all(c == 0 for c in codes) and not (fail & set(tasks)) else "failed")
'''

SLURM_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "slurm")


def test_slurm_scripts_of_the_docs(corpus):
    tmp, cfg = corpus
    out = tmp / "slurm"
    state = out / "state"
    bindir = out / "bin"
    state.mkdir(parents=True)
    bindir.mkdir()
    (bindir / "sbatch").write_text(FAKE_SBATCH)
    (bindir / "sbatch").chmod(0o755)
    env = dict(env_for(tmp), FAKE_SBATCH_STATE=str(state),
               PATH=os.pathsep.join([str(bindir), os.path.dirname(SHMFEED),
                                     os.environ.get("PATH", "")]))
    whole = {ext: read(str(tmp / "whole") + ext) for ext in (".bin", ".idx")}

    def sh(*args, **extra):
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=300,
                           env=dict(env, **extra))
        assert r.returncode == 0, r.stderr
        return r.stdout

    # The whole pipeline as docs/slurm/submit.sh submits it.
    prefix = str(out / "ok")
    said = sh(os.path.join(SLURM_DIR, "submit.sh"), str(cfg), prefix, "3")
    assert "parts: job" in said and "merge: job" in said
    for ext in (".bin", ".idx"):
        assert read(prefix + ext) == whole[ext]

    # Task 1 fails: the merge never runs; task 1 run again alone, then the merge.
    prefix = str(out / "retry")
    said = sh(os.path.join(SLURM_DIR, "submit.sh"), str(cfg), prefix, "3",
              FAKE_SBATCH_FAIL_TASKS="1")
    array, merge = re.match(r"parts: job (\d+) .*; merge: job (\d+)", said).groups()
    assert read(str(state / array)) == b"failed" and read(str(state / merge)) == b"never"
    assert not os.path.exists(prefix + ".bin")
    assert os.path.exists(prefix + "_00000-of-00003.json")
    assert not os.path.exists(prefix + "_00001-of-00003.json")
    job = sh("sbatch", "--parsable", "--array=1", os.path.join(SLURM_DIR, "tokenize-part.sbatch"),
             str(cfg), prefix, "3").strip()
    sh("sbatch", f"--dependency=afterok:{job}",
       os.path.join(SLURM_DIR, "tokenize-merge.sbatch"), prefix, "3")
    for ext in (".bin", ".idx"):
        assert read(prefix + ext) == whole[ext]

    # A prefix holding glob characters: the merge script's pattern escapes them.
    odd = out / "run[1] *"
    odd.mkdir()
    prefix = str(odd / "c")
    said = sh(os.path.join(SLURM_DIR, "submit.sh"), str(cfg), prefix, "3")
    for ext in (".bin", ".idx"):
        assert read(prefix + ext) == whole[ext]
    # Parts of another prefix starting with this one, of the same N, beside them: the
    # script's pattern took them (refused as two part 0s; merged as this prefix where
    # they alone were there: a review of this session's diff).
    run_parts(tmp, cfg, prefix + "_v2", 3)
    for ext in (".bin", ".idx"):
        os.unlink(prefix + ext)
    sh("bash", os.path.join(SLURM_DIR, "tokenize-merge.sbatch"), prefix, "3")
    for ext in (".bin", ".idx"):
        assert read(prefix + ext) == whole[ext]
        os.unlink(prefix + ext)
    for f in odd.glob("c_0*"):
        f.unlink()
    r = subprocess.run(["bash", os.path.join(SLURM_DIR, "tokenize-merge.sbatch"), prefix, "3"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0 and not os.path.exists(prefix + ".bin"), r


def test_a_merge_expands_a_quoted_glob(corpus):
    """The merge script passed one name a part, and the README's `--merge out/corpus_*`
    three paths a part, through the shell: past about 30,000 parts the command line
    passed the kernel's limit ("Argument list too long", exit 126; a review). A pattern
    that names no file is expanded by shmfeed, with no such limit."""
    tmp, cfg = corpus
    out = tmp / "quoted"
    out.mkdir()
    parts = run_parts(tmp, cfg, str(out / "c"), 3)
    run(tmp, "--merge", str(out / "c_*"), "-o", str(out / "m"), "-q")
    for ext in (".bin", ".idx"):
        assert read(str(out / "m") + ext) == read(str(tmp / "whole") + ext)
    os.unlink(str(out / "m.bin"))
    os.unlink(str(out / "m.idx"))
    # A part missing from the pattern's matches is named, as from a list.
    for ext in (".bin", ".idx", ".json"):
        os.rename(parts[1] + ext, parts[1] + ext + ".away")
    r = run(tmp, "--merge", str(out / "c_*-of-00003.json"), "-o", str(out / "m"), check=False)
    assert r.returncode != 0 and "part 1 of 3 is missing" in r.stderr, r.stderr
    r = run(tmp, "--merge", str(out / "nothing_*"), "-o", str(out / "m"), check=False)
    assert r.returncode != 0 and "names no file and matches none" in r.stderr, r.stderr
    assert not os.path.exists(str(out / "m.bin"))
    for ext in (".bin", ".idx", ".json"):
        os.rename(parts[1] + ext + ".away", parts[1] + ext)
    # Parts named by their prefixes, which hold a glob character: taken as named (they
    # were expanded as patterns, which match no file, by the first version of this).
    odd = out / "odd[1]"
    odd.mkdir()
    for p in parts:
        for ext in (".bin", ".idx", ".json"):
            shutil.copy(p + ext, str(odd / os.path.basename(p)) + ext)
    run(tmp, "--merge", *[str(odd / os.path.basename(p)) for p in parts], "-o",
        str(out / "m"), "-q")
    for ext in (".bin", ".idx"):
        assert read(str(out / "m") + ext) == read(str(tmp / "whole") + ext)


def test_a_directory_at_an_output_name_is_refused_before_tokenizing(tmp_path):
    """A directory at PREFIX.bin or PREFIX.idx was moved aside as the output took its name
    (hidden as .NAME.replaced) and the run exited 0: a source directory named corpus.bin
    vanished from its own job, and the next run read the new .bin as its source (a
    review). Refused now, before any tokenizing, by tokenize, --shard and --merge alike."""
    d = tmp_path / "d"
    (d / "corpus.bin").mkdir(parents=True)
    (d / "corpus.bin" / "a.jsonl").write_text('{"text": "hello"}\n{"text": "world"}\n')
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f'{{"sources": [{{"paths": "{d}/corpus.bin"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    listing = sorted(str(p.relative_to(d)) for p in d.rglob("*"))
    r = run(tmp_path, str(cfg), "-o", str(d / "corpus"), check=False)
    assert r.returncode == 1, r.stderr
    assert f"{d}/corpus.bin is a directory, which the output would replace" in r.stderr, \
        r.stderr
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*")) == listing
    (d / "m.idx").mkdir()
    r = run(tmp_path, str(cfg), "-o", str(d / "m"), "--shard", "0/1", check=False)
    assert r.returncode == 0, r.stderr
    r = run(tmp_path, "--merge", str(d / "m_00000-of-00001"), "-o", str(d / "m"),
            check=False)
    assert r.returncode == 1 and f"{d}/m.idx is a directory" in r.stderr, r.stderr
    assert (d / "m.idx").is_dir() and not (d / "m.bin").exists()
    (d / "s_00000-of-00001.json").mkdir()
    r = run(tmp_path, str(cfg), "-o", str(d / "s"), "--shard", "0/1", check=False)
    assert r.returncode == 1 and f"{d}/s_00000-of-00001.json is a directory" in r.stderr, \
        r.stderr
    assert not [p for p in d.iterdir() if p.name.endswith(".replaced") or
                p.name.startswith("s_") and not p.is_dir()]


def test_the_output_never_replaces_an_input(tmp_path):
    """-o naming an input: one-shot tokenize replaced its source `t.idx` (and the job file)
    with the index it wrote; --merge took another spelling of a part's prefix
    (./d/p_00000-of-00002) for the output and wrote over that part. A non-empty
    PREFIX.lock (a user's file, not a lock left by a killed run) was taken and removed."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "t.idx").write_text("a document\n")
    cfg = d / "t.yaml"
    cfg.write_text(f'{{"sources": [{{"paths": "{d}/t.idx", "format": "text"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    r = run(tmp_path, str(cfg), "-o", str(d / "t"), check=False)
    assert r.returncode == 1 and "t.idx is an input of this job" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    # The job file itself.
    (d / "k.bin").write_text(cfg.read_text())
    r = run(tmp_path, str(d / "k.bin"), "-o", str(d / "k"), check=False)
    assert r.returncode == 1 and "k.bin is an input of this job" in r.stderr, r.stderr
    # --shard writes t_00000-of-00001: make that name an input too.
    (d / "t_00000-of-00001.bin").write_text("another document\n")
    cfg.write_text(f'{{"sources": [{{"paths": "{d}/t_*.bin", "format": "text"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    r = run(tmp_path, str(cfg), "-o", str(d / "t"), "--shard", "0/1", check=False)
    assert r.returncode == 1 and "is an input of this job" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    # A file of another part's range (found by review): part 1 of 2 looked only at the
    # files of its own range, and replaced A_00001-of-00002.json, which part 0 reads,
    # with its manifest.
    e = tmp_path / "e"
    e.mkdir()
    (e / "A_00001-of-00002.json").write_text('{"text": "the victim"}\n')
    (e / "b.json").write_text("".join(f'{{"text": "document {i}"}}\n' for i in range(300)))
    ecfg = tmp_path / "e.yaml"
    ecfg.write_text(f'{{"sources": [{{"paths": "{e}/*.json", "format": "jsonl"}}], '
                    '"tokenizer": {"encoding": "bytes"}}')
    before = {p.name: p.read_bytes() for p in e.iterdir()}
    r = run(tmp_path, str(ecfg), "-o", str(e / "A"), "--shard", "1/2", check=False)
    assert r.returncode == 1 and "A_00001-of-00002.json is an input of this job" in r.stderr, \
        r.stderr
    assert {p.name: p.read_bytes() for p in e.iterdir()} == before
    # A lock file that holds something is no lock of shmfeed's.
    (d / "u.lock").write_text("my notes\n")
    cfg.write_text(f'{{"sources": [{{"paths": "{d}/t.idx", "format": "text"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    r = run(tmp_path, str(cfg), "-o", str(d / "u"), check=False)
    assert r.returncode == 1 and "u.lock" in r.stderr and "not a lock" in r.stderr, r.stderr
    assert (d / "u.lock").read_text() == "my notes\n" and not (d / "u.bin").exists()
    # Nor is an empty file: an empty source named v.lock was taken as a stale lock, and
    # removed at the end of the run into v. (A source: the output's lock among the inputs.)
    (d / "v.lock").write_bytes(b"")
    cfg.write_text(f'{{"sources": [{{"paths": "{d}/v.lock", "format": "text"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    r = run(tmp_path, str(cfg), "-o", str(d / "v"), check=False)
    assert r.returncode == 1 and "v.lock is an input of this job" in r.stderr, r.stderr
    # Not a source: not a lock either.
    cfg.write_text(f'{{"sources": [{{"paths": "{d}/t.idx", "format": "text"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    r = run(tmp_path, str(cfg), "-o", str(d / "v"), check=False)
    assert r.returncode == 1 and "v.lock" in r.stderr and "not a lock" in r.stderr, r.stderr
    assert (d / "v.lock").exists() and not (d / "v.bin").exists()


def test_a_link_at_a_temporary_name_is_never_written_through(tmp_path):
    """A link planted at PREFIX.bin.tmp (or .idx.tmp, .json.tmp) had the tokens written
    into the file it named, and was renamed into place as the output: tokenize, a part
    and a merge opened their temporaries through links (a review). Each is created new;
    what is at the name is removed, the file a link names left alone."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("alpha beta\n\ngamma\n")
    cfg = tmp_path / "t.yaml"
    cfg.write_text(f'{{"sources": [{{"paths": "{src}/a.txt", "format": "text", '
                   '"separator": "\\n\\n"}], "tokenizer": {"encoding": "bytes"}}')
    out = tmp_path / "out"
    out.mkdir()
    run(tmp_path, str(cfg), "-o", str(tmp_path / "ref"))
    ref = {ext: read(str(tmp_path / "ref") + ext) for ext in (".bin", ".idx")}

    def plant(prefix, exts):
        victims = {}
        for ext in exts:
            victim = tmp_path / f"victim{len(list(tmp_path.glob('victim*')))}"
            victim.write_text("precious\n")
            os.symlink(victim, prefix + ext + ".tmp")
            victims[victim] = "precious\n"
        return victims

    def intact(victims):
        for v, text in victims.items():
            assert v.read_text() == text, v

    prefix = str(out / "one")
    victims = plant(prefix, (".bin", ".idx"))
    run(tmp_path, str(cfg), "-o", prefix)
    intact(victims)
    for ext in (".bin", ".idx"):
        assert not os.path.islink(prefix + ext) and read(prefix + ext) == ref[ext]

    part = str(out / "p_00000-of-00001")
    victims = plant(part, (".bin", ".idx", ".json"))
    run(tmp_path, str(cfg), "-o", str(out / "p"), "--shard", "0/1")
    intact(victims)
    assert not os.path.islink(part + ".json") and json.loads(read(part + ".json"))

    merged = str(out / "m")
    victims = plant(merged, (".bin", ".idx"))
    run(tmp_path, "--merge", part, "-o", merged)
    intact(victims)
    for ext in (".bin", ".idx"):
        assert not os.path.islink(merged + ext) and read(merged + ext) == ref[ext]


@pytest.mark.parametrize("shard", [[], ["--shard", "0/1"]])
@pytest.mark.parametrize("fmt", ["text", "auto"])
def test_the_outputs_lock_is_never_read_as_an_input(tmp_path, fmt, shard):
    """-o into a directory the job reads: the run's own lock, PREFIX.lock, was made before
    the sources were listed, and with format text written into the dataset as a fourth
    document ("shmfeed lock: held by ..."); with format auto the run was refused for a
    file of unknown format. The sources are listed first now; a lock a killed run left
    there is refused as the output among the inputs."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_text("alpha\nbeta\n")
    (d / "b.txt").write_text("gamma\n")
    cfg = tmp_path / "t.yaml"
    source = f'"paths": "{d}"' + (', "format": "text"' if fmt == "text" else "")
    cfg.write_text(f'{{"sources": [{{{source}, "separator": "\\n"}}], '
                   '"tokenizer": {"encoding": "bytes"}}')
    prefix = str(d / "corpus") + ("_00000-of-00001" if shard else "")
    run(tmp_path, str(cfg), "-o", str(d / "corpus"), *shard)
    tokens = open(prefix + ".bin", "rb").read()
    text = bytes(t for t in struct.unpack(f"<{len(tokens) // 2}H", tokens) if t < 256)
    assert text == b"alphabetagamma", text
    assert not os.path.exists(prefix + ".lock")
    # A lock a killed run left among the sources.
    for f in d.iterdir():
        if f.name.startswith("corpus"):
            f.unlink()
    (d / os.path.basename(prefix + ".lock")).write_text(
        "shmfeed lock: held by the process with an flock on it\n")
    before = sorted(p.name for p in d.iterdir())
    r = run(tmp_path, str(cfg), "-o", str(d / "corpus"), *shard, check=False)
    want = "is an input of this job" if fmt == "text" else "format auto"
    assert r.returncode == 1 and ".lock" in r.stderr and want in r.stderr, r.stderr
    assert sorted(p.name for p in d.iterdir()) == before


def test_a_mixture_is_tokenized_whole_and_said_so(tmp_path):
    """A job of weighted sources: tokenize wrote every source's documents once, as it
    must, and said nothing of the weights it did not apply."""
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    (tmp_path / "b.txt").write_text("gamma\n")
    cfg = tmp_path / "m.yaml"
    cfg.write_text("sources:\n"
                   f"  - {{name: a, paths: {tmp_path}/a.txt, separator: \"\\n\", weight: 0.9}}\n"
                   f"  - {{name: b, paths: {tmp_path}/b.txt, separator: \"\\n\", weight: 0.1}}\n"
                   "tokenizer: {encoding: bytes}\n")
    r = run(tmp_path, str(cfg), "-o", str(tmp_path / "m"))
    assert "a mixture's weights and schedule" in r.stderr, r.stderr
    tokens = (tmp_path / "m.bin").read_bytes()
    text = bytes(t for t in struct.unpack(f"<{len(tokens) // 2}H", tokens) if t < 256)
    assert text == b"alphabetagamma", text
    # Said once for an array of parts: by the first.
    for i in range(2):
        r = run(tmp_path, str(cfg), "-o", str(tmp_path / "p"), "--shard", f"{i}/2")
        assert ("a mixture's weights" in r.stderr) == (i == 0), r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_run_stopped_by_a_signal_leaves_no_temporary_file(tmp_path, sig):
    """Ctrl-C (or scancel's SIGTERM) while tokenize writes: PREFIX.bin.tmp, of the
    corpus's size, and PREFIX.lock were left behind (from a new user's trial). The run
    now removes them and ends by the signal."""
    stop_while_writing(tmp_path, [sig], sig)


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """`nohup shmfeed tokenize ...`: the run caught SIGHUP to clean up, ignored or not,
    so the terminal closing ended it and removed its output (found by review); so did
    SIGINT for a run a script started with `&`. Started ignoring both, it lets them pass
    and still ends by a SIGTERM."""
    stop_while_writing(tmp_path, [signal.SIGHUP, signal.SIGINT, signal.SIGTERM],
                       signal.SIGTERM, ignored=(signal.SIGHUP, signal.SIGINT))


def stop_while_writing(tmp_path, sigs, ends_by, ignored=()):
    """Start a run of a large corpus, send `sigs` once its .bin.tmp is there, expect it
    to end by `ends_by` with nothing left in its output directory."""
    def ignore():
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)

    line = "the quick brown fox jumps over the lazy dog, again and again\n"
    (tmp_path / "big.txt").write_text(line * (150_000_000 // len(line)))
    cfg = tmp_path / "big.yaml"
    cfg.write_text(f"sources: [{{paths: {tmp_path}/big.txt, separator: \"\\n\"}}]\n"
                   f"tokenizer: {{encoding: r50k_base, vocab_dir: {VOCAB}}}\n"
                   "producers: {count: 1}\n")
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen([SHMFEED, "tokenize", str(cfg), "-o", str(out / "big"), "-q"],
                         stderr=subprocess.PIPE, text=True, env=env_for(tmp_path),
                         preexec_fn=ignore)
    deadline = time.monotonic() + 120
    while not (out / "big.bin.tmp").exists() and p.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.005)
    assert p.poll() is None, "the run ended before it could be stopped: " + p.stderr.read()
    for sig in sigs:
        p.send_signal(sig)
        time.sleep(0.2)
    assert p.wait(timeout=60) == -ends_by, p.stderr.read()
    assert sorted(f.name for f in out.iterdir()) == []
