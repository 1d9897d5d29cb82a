"""`shmfeed tokenize` refuses a document too long for a Megatron index (stress suite).

Megatron's .idx holds each document's length as an int32: a document of 2^31 tokens or
more would be written with a negative (or wrapped) length. The document here is 2^31
bytes under the `bytes` encoding (one token per byte), so it holds 2^31 + 1 tokens with
its <|endoftext|>. It needs about 2 GiB of disk and 20 GiB of memory.
"""
import os
import subprocess

import pytest

SHMFEED = os.environ.get("SHMFEED_EXE")


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.skipif(mem_available() < 20 << 30, reason="needs 20 GiB of memory")
def test_document_over_int32_tokens_refused(tmp_path):
    text = tmp_path / "huge.txt"
    block = b"shmfeed " * (1 << 17)
    with open(text, "wb") as f:
        for _ in range((1 << 31) // len(block)):
            f.write(block)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"job: tok-huge\nsources:\n  - paths: [\"{text}\"]\n    format: text\n"
                   "tokenizer:\n  encoding: bytes\nproducers:\n  count: 1\n")
    prefix = tmp_path / "out"
    run = subprocess.run([SHMFEED, "tokenize", str(cfg), "-o", str(prefix)],
                         capture_output=True, text=True, timeout=1800,
                         env=dict(os.environ, SHMFEED_CACHE_DIR=str(tmp_path / "cache")))
    assert run.returncode != 0
    assert "a document of 2147483649 tokens; a Megatron index holds at most " \
        "2147483647 per document" in run.stderr, run.stderr
    assert not os.path.exists(str(prefix) + ".idx")
    assert not os.path.exists(str(prefix) + ".bin")
