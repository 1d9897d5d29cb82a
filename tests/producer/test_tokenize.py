"""`shmfeed tokenize` writes Megatron .bin/.idx that a Megatron reader accepts.

`read_mmidx` below is an independent reader written from the published format (Megatron-LM's
own reader, megatron/core/datasets/indexed_dataset.py, opens the output in
test_tokenize_parts.py when the venv of scripts/deps has megatron-core):
magic b"MMIDIDX\\x00\\x00", version <Q 1, dtype code <B, sequence count <Q, document
count <Q, then int32 sequence lengths, int64 byte pointers, int64 document indices. It
reads the arrays at their unaligned offsets with numpy, as Megatron's reader does.
"""
import json
import glob
import os
import struct
import subprocess

import numpy as np
import pytest

SHMFEED = os.environ.get("SHMFEED_EXE")
DATA = os.environ.get("SHMFEED_DATA", "")
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
          6: np.float64, 7: np.float32, 8: np.uint16}


def read_mmidx(prefix):
    """Return (dtype, sequences as a list of arrays, document indices)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1
    (code,) = struct.unpack_from("<B", idx, 17)
    n_seq, n_doc = struct.unpack_from("<QQ", idx, 18)
    off = 34
    lengths = np.frombuffer(idx, dtype=np.int32, count=n_seq, offset=off)
    off += lengths.nbytes
    pointers = np.frombuffer(idx, dtype=np.int64, count=n_seq, offset=off)
    off += pointers.nbytes
    doc_idx = np.frombuffer(idx, dtype=np.int64, count=n_doc, offset=off)
    off += doc_idx.nbytes
    assert off == len(idx), "trailing bytes in the index"
    dtype = DTYPES[code]
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    item = np.dtype(dtype).itemsize
    seqs = [np.asarray(data[p // item:p // item + n]) for p, n in zip(pointers, lengths)]
    assert sum(len(s) for s in seqs) == len(data)
    return dtype, seqs, doc_idx


def tokenize(tmp_path, yaml_text):
    cfg = tmp_path / "job.yaml"
    cfg.write_text(yaml_text)
    prefix = str(tmp_path / "out")
    run = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", prefix],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SHMFEED_CACHE_DIR=str(tmp_path / "cache")))
    assert run.returncode == 0, run.stderr
    return prefix, run.stderr


pytestmark = pytest.mark.skipif(not SHMFEED, reason="SHMFEED_EXE not set")


def test_tinyshakespeare_round_trip(tmp_path):
    corpus = os.path.join(DATA, "corpus", "tinyshakespeare.txt")
    ref_path = os.path.join(DATA, "tokref", "tinyshakespeare.r50k_base.u32")
    if not os.path.exists(corpus) or not os.path.exists(ref_path):
        pytest.skip("shared data not found")
    # A copy: the chunk index cache is written beside the corpus, never into shared data.
    copy = tmp_path / "tinyshakespeare.txt"
    with open(corpus, "rb") as f:
        copy.write_bytes(f.read())
    corpus = str(copy)
    prefix, stderr = tokenize(tmp_path, f"""
job: tok-test
sources:
  - paths: ["{corpus}"]
    format: text
tokenizer:
  encoding: r50k_base
  vocab_dir: {os.path.join(DATA, "vocab")}
producers:
  count: 2
""")
    dtype, seqs, doc_idx = read_mmidx(prefix)
    ref = np.fromfile(ref_path, dtype=np.uint32)
    assert dtype is np.uint16
    assert len(seqs) == 1 and list(doc_idx) == [0, 1]
    # One document: tiktoken's ids, then <|endoftext|> as Megatron's --append-eod.
    assert np.array_equal(seqs[0][:-1].astype(np.uint32), ref)
    assert seqs[0][-1] == 50256
    # The index cache goes to the cache directory, never beside the corpus.
    assert glob.glob(str(tmp_path / "cache" / "index" / "*.sfidx")), "no index cache"
    assert not glob.glob(str(tmp_path / "*.sfidx")), "an index cache beside the corpus"
    assert "tokens/s" in stderr and "docs" in stderr and ("ETA" in stderr or "took" in stderr)


def test_many_documents_exact_ids(tmp_path):
    # The byte tokenizer makes the expected ids computable here: the UTF-8 bytes of
    # each document, then 256 (<|endoftext|>).
    docs = ["plain", "quote \" backslash \\ newline \n tab \t", "caf\u00e9 \u4e2d\u6587",
            "emoji \U0001F600 via a surrogate pair", "x" * 100000, "last"]
    lines = []
    for i, d in enumerate(docs):
        lines.append(json.dumps({"id": i, "text": d}, ensure_ascii=(i % 2 == 1)))
        if i == 2:
            lines.append("")  # blank lines are not documents
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    prefix, _ = tokenize(tmp_path, f"""
job: tok-test-bytes
sources:
  - paths: ["{path}"]
tokenizer:
  encoding: bytes
producers:
  count: 3
""")
    dtype, seqs, doc_idx = read_mmidx(prefix)
    assert dtype is np.uint16
    assert list(doc_idx) == list(range(len(docs) + 1))
    for d, s in zip(docs, seqs):
        assert list(s) == list(d.encode("utf-8")) + [256]


def test_an_index_that_cannot_be_cached_is_said(tmp_path):
    """A cache directory that cannot be written (full, read-only, here a file in its
    place): the job ran and said nothing, so every start built the chunk index again
    without a word, and tokenize printed "chunk index built (0 bytes)" (a review)."""
    (tmp_path / "a.txt").write_text("alpha beta\n\ngamma delta\n")
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f'sources:\n  - {{paths: "{tmp_path}/a.txt", format: text, '
                   'separator: "\\n\\n"}\ntokenizer: {encoding: bytes}\n')
    (tmp_path / "notadir").write_text("")
    run = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SHMFEED_CACHE_DIR=str(tmp_path / "notadir")))
    assert run.returncode == 0, run.stderr
    assert "warning: the chunk index could not be written to the cache" in run.stderr, \
        run.stderr
    # Said with its reason: the file in the directory's place is not a directory (it
    # said "Cannot allocate memory", and a full disk "Input/output error": a review).
    assert "(Not a directory)" in run.stderr, run.stderr
    # Naming the directory (a review).
    assert f"could not be written to the cache {tmp_path}/notadir/index (Not a " \
        "directory)" in run.stderr, run.stderr
    # A cache directory's name too long for a path: that, not out of memory.
    run = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(tmp_path / "out2")],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SHMFEED_CACHE_DIR="/tmp/" + "d" * 4100))
    assert run.returncode == 0, run.stderr
    assert "(File name too long)" in run.stderr, run.stderr
    # Beside a note said before it (a text not UTF-8), both are said: the encoding note
    # hid this one (a review).
    (tmp_path / "b.txt").write_bytes(b"caf\xe9\n\nna\xefve\n")
    cfg.write_text(f'sources:\n  - {{paths: ["{tmp_path}/a.txt", "{tmp_path}/b.txt"], '
                   'format: text, separator: "\\n\\n"}\ntokenizer: {encoding: bytes}\n')
    run = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(tmp_path / "out3")],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SHMFEED_CACHE_DIR=str(tmp_path / "notadir")))
    assert run.returncode == 0, run.stderr
    assert "b.txt: 2 of its first 12 bytes are not UTF-8, the first at offset 3" in \
        run.stderr, run.stderr
    assert f"; the chunk index could not be written to the cache {tmp_path}/notadir/index " \
        "(Not a directory)" in run.stderr, run.stderr
