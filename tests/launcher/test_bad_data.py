"""Bad data under the real `shmfeed run` (issue 12): a data error stops the job at once
with the file named, never a crash retried five times, and never wrong batches delivered
in silence. Each test uses its own job name and runtime directory and leaves nothing in
/dev/shm."""

import os
import re
import struct
import subprocess
import tempfile
import time

import pytest

SHMFEED = os.environ.get("SF_SHMFEED")
CONSUME = os.environ.get("SF_CONSUME")

if not (SHMFEED and CONSUME):
    pytest.skip("set by `meson test` (SF_SHMFEED, SF_CONSUME)", allow_module_level=True)

_count = [0]


def job_name(tag):
    _count[0] += 1
    return f"tbd-{tag}-{os.getpid()}-{_count[0]}"


@pytest.fixture
def rt(monkeypatch, tmp_path):
    d = tempfile.mkdtemp(prefix="sf-rt-")
    os.chmod(d, 0o700)
    monkeypatch.setenv("SHMFEED_RUNTIME_DIR", d)
    monkeypatch.setenv("SHMFEED_CACHE_DIR", str(tmp_path / "cache"))
    yield d
    left = os.listdir(d)
    os.rmdir(d) if not left else None
    assert not left, f"left in the runtime directory: {left}"


def write_config(tmp_path, sources, text=""):
    p = tmp_path / "job.yaml"
    p.write_text(f"sources: {sources}\n"
                 "batch: {size: 4, seq_len: 64}\n"
                 "consumers: {world_size: 1}\n"
                 "producers: {count: 2, max_restarts: 4}\n" + text)
    return str(p)


def put_tokens(path, n, fmt="<H", modulo=50000):
    with open(path, "wb") as f:
        f.write(b"".join(struct.pack(fmt, i % modulo) for i in range(n)))


def consume_cmd(out, steps, sleep_us=0):
    return [CONSUME, "--steps", str(steps), "--out", str(out), "--sleep-us", str(sleep_us)]


def run_job(cfg, job, cmd, timeout=60, env=None, sets=()):
    sets = [a for s in sets for a in ("--set", s)]
    return subprocess.run([SHMFEED, "run", cfg, "--set", f"job={job}", *sets, "--", *cmd],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, LOCAL_RANK="0", **(env or {})))


def assert_stopped_at_once(out, needle):
    assert out.returncode != 0, out.stderr
    assert "data error: " in out.stderr, out.stderr
    assert needle in out.stderr, out.stderr
    assert "restarted" not in out.stderr, out.stderr
    # No producer died of a signal (the command, ended by the stop, may have).
    assert not re.search(r"producer \d+ died \(killed by signal", out.stderr), out.stderr


def start_and_change(tmp_path, data, change):
    """Run a slow rank over the job; once it has taken batches, change the data."""
    cfg = write_config(tmp_path, f"[{data}]")
    job = job_name("change")
    out0 = tmp_path / "r0.txt"
    p = subprocess.Popen([SHMFEED, "run", cfg, "--set", f"job={job}", "--",
                          *consume_cmd(out0, 10**7, 200)],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, LOCAL_RANK="0"))
    end = time.monotonic() + 20
    while time.monotonic() < end and (not out0.exists() or out0.stat().st_size < 1000):
        time.sleep(0.05)
    t0 = time.monotonic()
    change()
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.terminate()
        p.communicate(timeout=30)
        raise
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")
    return subprocess.CompletedProcess(p.args, p.returncode, "", err), time.monotonic() - t0


def test_truncated_source_names_itself_and_stops_at_once(rt, tmp_path):
    data = tmp_path / "a.bin"
    put_tokens(data, 1 << 20)
    out, _ = start_and_change(tmp_path, data, lambda: os.truncate(data, 4096))
    assert_stopped_at_once(out, str(data))


def test_source_rewritten_in_place_stops_the_job(rt, tmp_path):
    data = tmp_path / "a.bin"
    put_tokens(data, 1 << 20)

    def zero():
        with open(data, "r+b") as f:
            f.write(bytes(2 << 20))

    out, took = start_and_change(tmp_path, data, zero)
    assert_stopped_at_once(out, f"{data}: changed under the running job")
    assert took < 10, out.stderr


def write_wide_shard(tmp_path):
    # An llm.c llama-3 shard (uint32 tokens, version 7), ids above 65535.
    data = tmp_path / "wide.bin"
    n = 4096
    header = struct.pack("<256i", 20240801, 7, n, *([0] * 253))
    with open(data, "wb") as f:
        f.write(header + b"".join(struct.pack("<I", 70000 + i) for i in range(n)))
    return data


def test_wide_source_in_a_uint16_job_is_refused_before_it_starts(rt, tmp_path):
    data = write_wide_shard(tmp_path)
    cfg = write_config(tmp_path, f"[{data}]")
    job = job_name("wide")
    out = run_job(cfg, job, consume_cmd(tmp_path / "r0.txt", 10), sets=["batch.dtype=uint16"])
    assert out.returncode != 0, out.stderr
    assert f"batch.dtype uint16 cannot hold the 4-byte tokens of {data}" in out.stderr, out.stderr
    assert "restarted" not in out.stderr, out.stderr
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")


def test_wide_source_with_dtype_auto_runs_int32(rt, tmp_path):
    data = write_wide_shard(tmp_path)
    cfg = write_config(tmp_path, f"[{data}]")
    job = job_name("wideauto")
    out = run_job(cfg, job, consume_cmd(tmp_path / "r0.txt", 3))
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")


def test_skipped_records_are_counted_by_run(rt, tmp_path):
    data = tmp_path / "docs.jsonl"
    good = "".join(f'{{"text": "document number {i} with some words in it"}}\n'
                   for i in range(200))
    data.write_text(good + '{"text": broken}\n' + good)
    cfg = write_config(tmp_path, f"[{{paths: [{data}], on_error: skip}}]")
    out = run_job(cfg, job_name("skip"), consume_cmd(tmp_path / "r0.txt", 5))
    assert out.returncode == 0, out.stderr
    assert "records skipped 1" in out.stderr, out.stderr
    # Which one, said as the job starts, as tokenize says it.
    assert f"1 bad records skipped; the first: {data}:201: column 10: invalid JSON" \
        in out.stderr, out.stderr
    # A whole file skipped is named the same way.
    put_tokens(tmp_path / "a.bin", 4096)
    (tmp_path / "odd.bin").write_bytes(b"\0" * 8191)
    cfg = write_config(tmp_path, f"[{{paths: [{tmp_path}/a.bin, {tmp_path}/odd.bin], "
                       "on_error: skip}]")
    out = run_job(cfg, job_name("skip"), consume_cmd(tmp_path / "r0.txt", 5))
    assert out.returncode == 0, out.stderr
    assert f"1 bad records skipped; the first: {tmp_path}/odd.bin: byte 8190: truncated" \
        in out.stderr, out.stderr


def check(cfg, *sets):
    args = [a for s in sets for a in ("--set", s)]
    return subprocess.run([SHMFEED, "check", cfg, *args], capture_output=True, text=True,
                          timeout=20)


def test_check_loads_the_vocabulary(tmp_path):
    (tmp_path / "a.txt").write_text("some text\n")
    cfg = tmp_path / "job.yaml"
    cfg.write_text("sources: [a.txt]\ntokenizer: {encoding: r50k_base}\n")
    env_vocab = os.environ.pop("SHMFEED_VOCAB_DIR", None)
    try:
        out = check(str(cfg), f"tokenizer.vocab={tmp_path}/missing.tiktoken")
        assert out.returncode == 1 and "missing.tiktoken" in out.stderr, out
        for dev in ("/dev/zero", "/dev/urandom"):
            out = check(str(cfg), f"tokenizer.vocab={dev}")
            assert out.returncode == 1 and f"{dev}: not a regular file" in out.stderr, out
        out = check(str(cfg), "tokenizer.encoding=char:/dev/zero")
        assert out.returncode == 1 and "/dev/zero: not a regular file" in out.stderr, out
        (tmp_path / "bad.tiktoken").write_text("not base64 at all\n")
        out = check(str(cfg), f"tokenizer.vocab={tmp_path}/bad.tiktoken")
        assert out.returncode == 1 and "bad.tiktoken" in out.stderr, out
        shared = os.environ.get("SF_SHARED_DATA", "")
        vocab = os.path.join(shared, "vocab", "r50k_base.tiktoken")
        if os.path.exists(vocab):
            out = check(str(cfg), f"tokenizer.vocab={vocab}")
            assert out.returncode == 0, out.stderr
    finally:
        if env_vocab is not None:
            os.environ["SHMFEED_VOCAB_DIR"] = env_vocab


def test_gpt2_vocab_dir_names_tiktoken_file(tmp_path, monkeypatch):
    # tiktoken's file for gpt2 is r50k_base.tiktoken; check, --strict or not, finds it in
    # vocab_dir, and fails naming it when vocab_dir lacks it.
    shared = os.environ.get("SF_SHARED_DATA", "")
    vocab_dir = os.path.join(shared, "vocab")
    if not os.path.exists(os.path.join(vocab_dir, "r50k_base.tiktoken")):
        pytest.skip(f"no shared test data at {vocab_dir}")
    monkeypatch.delenv("SHMFEED_VOCAB_DIR", raising=False)
    (tmp_path / "a.txt").write_text("some text\n")
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [a.txt]\ntokenizer: {{encoding: gpt2, vocab_dir: {vocab_dir}}}\n")
    for strict in ([], ["--strict"]):
        out = subprocess.run([SHMFEED, "check", str(cfg), *strict], capture_output=True,
                             text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        empty = tmp_path / "empty"
        empty.mkdir(exist_ok=True)
        out = subprocess.run([SHMFEED, "check", str(cfg), *strict, "--set",
                              f"tokenizer.vocab_dir={empty}"], capture_output=True, text=True,
                             timeout=20)
        assert out.returncode == 1, out
        assert f"{empty}/r50k_base.tiktoken" in out.stderr, out.stderr


def test_a_tokenizer_file_with_no_end_token_is_refused_for_text(tmp_path):
    """`eos: auto` on a .tiktoken file of no known family found no end-of-document token,
    and check passed a raw text job (or document starts) that needs one."""
    vocab = os.path.join(os.environ.get("SF_SHARED_DATA", ""), "vocab", "r50k_base.tiktoken")
    if not os.path.exists(vocab):
        pytest.skip("no shared test data")
    (tmp_path / "a.txt").write_text("some text\n")
    put_tokens(tmp_path / "t.bin", 4096)
    tok = f"tokenizer: {{file: {vocab}, pattern: '\\S+|\\s+'}}\n"
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [{tmp_path}/a.txt]\n" + tok)
    out = check(str(cfg))
    assert out.returncode == 1 and "no end-of-document token" in out.stderr, out
    assert "tokenizer.eos" in out.stderr, out.stderr
    cfg.write_text(f"sources: [{tmp_path}/t.bin]\n" + tok)
    assert check(str(cfg)).returncode == 0  # tokens only: nothing needs it
    out = check(str(cfg), "sampling.doc_starts=4")
    assert out.returncode == 1 and "no end-of-document token" in out.stderr, out


def test_check_names_the_job_file_once(tmp_path):
    """Errors found once the sources were open read "job.yaml: job.yaml: ..."."""
    put_tokens(tmp_path / "t.bin", 4096)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"sources: [{tmp_path}/t.bin]\n")
    out = check(str(cfg), "sampling.doc_starts=1")
    assert out.returncode == 1 and f"{cfg}: sampling.doc_starts needs" in out.stderr, out
    assert f"{cfg}: {cfg}:" not in out.stderr, out.stderr


def megatron_pair(prefix, n=4096, wide=False):
    # Megatron's MMIDIDX: one document of n tokens, uint16 (code 8) or int32 (code 4).
    with open(f"{prefix}.bin", "wb") as f:
        f.write(b"".join(struct.pack("<i" if wide else "<H", (i * 37) % (1 << 17 if wide
                                                                    else 50000))
                         for i in range(n)))
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4 if wide else 8, 1, 2) +
                struct.pack("<i", n) + struct.pack("<Q", 0) + struct.pack("<QQ", 0, 1))


def test_check_fails_where_run_fails(rt, tmp_path):
    # Each config that run refuses, check refuses with the same message.
    put_tokens(tmp_path / "a.bin", 4096)
    cases = {
        "a glob that matches nothing": (f"[{tmp_path}/none*.bin]", "no file matches"),
        "a missing file": (f"[{tmp_path}/none.bin]", "none.bin: no such file"),
        "a missing file under on_error: skip": (
            f"[{{paths: [{tmp_path}/a.bin, {tmp_path}/none.bin], on_error: skip}}]",
            "none.bin: no such file"),
        "an empty directory": (f"[{tmp_path}/empty]", "the directory holds no regular file"),
        "an empty token file beside a good one": (
            f"[{tmp_path}/a.bin, {tmp_path}/zero.bin]",
            "zero.bin: the file is empty (no tokens)"),
        "a glob that matches only a directory of none": (
            f"[{tmp_path}/g/s*]", "g/s*: no file matches (only directories of none)"),
        "a Megatron prefix whose .idx is missing": (
            f"[{tmp_path}/m]", f"{tmp_path}/m: no such file, and {tmp_path}/m.bin has no .idx"),
        "an llm.c file of no tokens beside a good one": (
            f"[{tmp_path}/a.bin, {tmp_path}/hdr.bin]",
            "hdr.bin: byte 8: the header announces 0 tokens"),
        "doc_starts without an end-of-text id": (f"[{tmp_path}/a.bin]",
                                                 "needs the end-of-text id"),
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "zero.bin").write_bytes(b"")
    (tmp_path / "g" / "sub").mkdir(parents=True)
    put_tokens(tmp_path / "g" / "a.bin", 4096)
    put_tokens(tmp_path / "m.bin", 4096)
    (tmp_path / "hdr.bin").write_bytes(struct.pack("<3i", 20240520, 1, 0) + bytes(1012))
    for what, (sources, needle) in cases.items():
        cfg = write_config(tmp_path, sources, "sampling: {doc_starts: 4}\n"
                           if "doc_starts" in what else "")
        out = check(cfg)
        assert out.returncode == 1 and needle in out.stderr, (what, out)
        job = job_name("parity")
        ran = run_job(cfg, job, consume_cmd(tmp_path / "r0.txt", 3))
        assert ran.returncode != 0 and needle in ran.stderr, (what, ran.stderr)
        assert not os.path.exists(f"/dev/shm/shmfeed.{job}")


def test_check_and_run_take_a_directory_and_a_megatron_prefix(rt, tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    for name in ("b.bin", "a.bin", ".hidden.bin"):
        put_tokens(d / name, 4096)
    (d / "sub").mkdir()
    put_tokens(d / "sub" / "c.bin", 4096)
    megatron_pair(tmp_path / "mega")
    for sources, files, nbytes, fmt in ((f"[{d}/]", 2, 2 * 8192, "nanogpt"),
                                        (f"[{{paths: {tmp_path}/mega, format: megatron}}]", 2,
                                         8192 + 34 + 12 + 16, "megatron"),
                                        (f"[{tmp_path}/mega]", 2, 8192 + 34 + 12 + 16,
                                         "megatron")):
        cfg = write_config(tmp_path, sources)
        for strict in ([], ["--strict"]):
            out = subprocess.run([SHMFEED, "check", cfg, *strict], capture_output=True,
                                 text=True, timeout=20)
            assert out.returncode == 0, out.stderr
            assert f": {files} files, {nbytes} bytes, {fmt}\n" in out.stdout, out.stdout
            assert "# batch.dtype auto: the arena holds uint16 tokens\n" in out.stdout
        job = job_name("dir")
        ran = run_job(cfg, job, consume_cmd(tmp_path / "r0.txt", 3))
        assert ran.returncode == 0, ran.stderr
    out = check(write_config(tmp_path, f"[{d}]"), "batch.dtype=int32")
    assert "# batch.dtype int32: the arena holds int32 tokens\n" in out.stdout, out


def test_int32_megatron_data_without_a_tokenizer_gets_an_int32_arena(rt, tmp_path):
    # dtype auto follows the data: ids up to 131071 need int32, whatever the encoding.
    megatron_pair(tmp_path / "wide", wide=True)
    cfg = write_config(tmp_path, f"[{tmp_path}/wide]")
    out = check(cfg)
    assert out.returncode == 0, out.stderr
    assert "# batch.dtype auto: the arena holds int32 tokens\n" in out.stdout, out.stdout
    out = check(cfg, "batch.dtype=uint16")
    assert out.returncode == 1 and "cannot hold the 4-byte tokens" in out.stderr, out
    job = job_name("mega32")
    ran = run_job(cfg, job, consume_cmd(tmp_path / "r0.txt", 20))
    assert ran.returncode == 0, ran.stderr
    assert not os.path.exists(f"/dev/shm/shmfeed.{job}")


def test_check_names_the_format_auto_finds(tmp_path):
    # A headerless .bin is nanoGPT's; one with llm.c's magic is llm.c's: check says
    # which, per file, so that a .bin read in a way not meant is seen before run.
    tokens = struct.pack("<4000H", *range(4000))
    (tmp_path / "a.bin").write_bytes(tokens)
    (tmp_path / "b.bin").write_bytes(struct.pack("<256i", 20240520, 1, 4000, *[0] * 253) +
                                     tokens)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f'sources: ["{tmp_path}/*.bin", "{tmp_path}/a.bin"]\n'
                   "batch: {size: 2, seq_len: 16}\n")
    out = check(str(cfg))
    assert out.returncode == 0, out.stderr
    assert f"# source 0: {tmp_path}/*.bin: 2 files, 17024 bytes, nanogpt 1, llmc 1\n" \
        in out.stdout, out.stdout
    assert f"# source 1: {tmp_path}/a.bin: 1 file, 8000 bytes, nanogpt\n" in out.stdout, \
        out.stdout


def test_check_prints_absolute_paths_and_literal_names(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x[1].txt").write_text("a document\n")
    cfg = tmp_path / "sub" / "job.yaml"
    cfg.write_text('sources: ["./x[1].txt", "./*.txt"]\n')
    monkeypatch.chdir(tmp_path)
    out = check("sub/job.yaml")
    assert out.returncode == 0, out.stderr
    where = os.path.realpath(tmp_path / "sub")
    assert f'paths: ["{where}/x[1].txt"]' in out.stdout, out.stdout
    assert f'paths: ["{where}/*.txt"]' in out.stdout, out.stdout
    assert f"# source 0: {where}/x[1].txt: 1 file, 11 bytes, text\n" in out.stdout, out.stdout
    assert f"# source 1: {where}/*.txt: 1 file, 11 bytes" in out.stdout, out.stdout


def test_check_prints_odd_paths_so_they_read_back(tmp_path):
    # A newline in a path broke check's "# source" comment in two; U+0085 (NEL) and
    # U+2028 were printed raw in the config, where YAML reads them as line breaks.
    names = ["a\nb.txt", "c\u0085d.txt", "e\u2028f.txt"]
    for n in names:
        (tmp_path / n).write_text("a document\n")
    cfg = tmp_path / "job.yaml"
    quoted = ", ".join('"' + n.replace("\n", "\\n").replace("\u0085", "\\N")
                       .replace("\u2028", "\\L") + '"' for n in names)
    cfg.write_text(f"sources: [{quoted}]\n", encoding="utf-8")
    out = check(cfg)
    assert out.returncode == 0, out.stderr
    assert "\x85" not in out.stdout and "\u2028" not in out.stdout, out.stdout
    lines = out.stdout.split("\n")
    assert not any(ln.startswith("b.txt") for ln in lines), out.stdout
    assert f'# source 0: "{tmp_path}/a\\x0ab.txt": 1 file, 11 bytes' in out.stdout, out.stdout
    printed = tmp_path / "printed.yaml"
    printed.write_text("\n".join(ln for ln in lines if not ln.startswith("#")),
                       encoding="utf-8")
    again = check(printed)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count(": 1 file, 11 bytes") == 3, again.stdout


def test_ids_outside_the_vocabulary_stop_the_job(rt, tmp_path):
    vocab = os.path.join(os.environ.get("SF_SHARED_DATA", ""), "vocab", "r50k_base.tiktoken")
    if not os.path.exists(vocab):
        pytest.skip("no shared test data")
    data = tmp_path / "a.bin"
    put_tokens(data, 1 << 16, modulo=1)  # all zeros
    with open(data, "r+b") as f:  # and one 60000, past r50k_base's 50257 ids
        f.seek(2 * 40000)
        f.write(struct.pack("<H", 60000))
    cfg = write_config(tmp_path, f"[{data}]",
                       f"tokenizer: {{encoding: r50k_base, vocab: {vocab}}}\n"
                       "sampling: {epochs: 1}\n")
    # check reads the first 65,536 ids of each file, so it refuses this one as run does.
    refused = check(cfg)
    assert refused.returncode == 1, refused
    assert f"{data}: byte 80000: token 60000 is outside the vocabulary" in refused.stderr
    out = run_job(cfg, job_name("vocab"), consume_cmd(tmp_path / "r0.txt", 10**6))
    assert_stopped_at_once(out, f"{data}: byte 80000: token 60000 is outside the vocabulary")


def test_check_refuses_token_files_of_another_tokenizer_beside_raw_text(tmp_path):
    # Under the default `bytes`, raw text beside GPT-2 token files: run would stop at its
    # first batch, so check says so and which setting to give.
    (tmp_path / "a.txt").write_text("hello world, a paragraph of raw text\n\n" * 20)
    put_tokens(tmp_path / "t.bin", 4096, modulo=50000)
    cfg = write_config(tmp_path, f"[{{paths: {tmp_path}/a.txt, weight: 1}}, "
                                 f"{{paths: {tmp_path}/t.bin, format: nanogpt, weight: 1}}]")
    out = check(cfg)
    assert out.returncode == 1, out
    assert (f"{tmp_path}/t.bin: byte 514: token 257 is outside the vocabulary of 257 ids "
            "(tokenizer bytes): set tokenizer.encoding") in out.stderr, out.stderr
    # Token files made with `bytes` itself pass.
    put_tokens(tmp_path / "t.bin", 4096, modulo=257)
    out = check(cfg)
    assert out.returncode == 0, out.stderr


def test_a_large_compressed_shard_is_not_taken_for_a_stall(rt, tmp_path):
    """A producer decompresses a .gz or .zst shard whole at its first read; a large one
    took longer than the stall timeout without a heartbeat, so the producer was killed as
    stalled, again after each restart, until the job stopped without a batch (a review:
    906 MB of JSONL, 8 s to inflate, the default 5 s timeout). Here 100 MB of gzip (one
    1 MiB member a hundred times), about 1 s to inflate, under a 500 ms timeout. (Only a
    kill counts: a loaded machine may delay an idle producer's heartbeat, every 200 ms,
    past the warning at half the timeout.)"""
    import base64
    import gzip
    member = gzip.compress(b"".join(base64.b64encode(os.urandom(3 << 15)) + b"\n\n"
                                    for _ in range(8)), 1)
    data = tmp_path / "big.txt.gz"
    data.write_bytes(member * 100)
    cfg = write_config(tmp_path, f"[{{paths: [{data}], format: text, separator: \"\\n\\n\"}}]",
                       "sampling: {mode: windows, epochs: 0}\n")
    out = run_job(cfg, job_name("gz"), consume_cmd(tmp_path / "r0.txt", 20), timeout=120,
                  sets=["producers.stall_timeout=500ms"])
    assert out.returncode == 0, out.stderr
    assert "producer stalls 0" in out.stderr and "stalled: no heartbeat" not in out.stderr, \
        out.stderr
