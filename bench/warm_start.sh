#!/bin/sh
# Cold and warm start of a raw text job over one JSONL file of each size: the dataset
# opened and the first batch built (bench_warm_start), with a fresh index cache for the
# cold start and the same one for the warm start. The corpus is dropped from the page
# cache (posix_fadvise DONTNEED) before each start, so a start that read it would show.
# The corpora are generated under $TMPDIR (default /tmp) and deleted afterwards.
#
#   bench/warm_start.sh [BUILD_DIR] [SIZES_MB...]     (default: build, 10 1024 10240)
#
# Encoding: `bytes` (a cold start of 10 GB with a BPE encoding takes hours on 2 cores; a
# warm start does not tokenize, so the encoding changes it little) unless
# SF_ENCODING and SF_VOCAB_DIR say otherwise.
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
sizes=${*:-10 1024 10240}
bin="$build/bench/bench_warm_start"
enc=${SF_ENCODING:-bytes}
producers=${SF_PRODUCERS:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/sf-warm-XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

drop_cache() {
	python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$1"
}

echo "# $(uname -srm), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), encoding $enc, $producers index workers"
for mb in $sizes; do
	corpus="$work/corpus-${mb}MB.jsonl"
	python3 - "$corpus" "$mb" <<'PY'
import sys
path, mb = sys.argv[1], int(sys.argv[2])
words = ("the quick brown fox jumps over the lazy dog while seven wizards quietly "
         "box jumping frogs near a misty harbour at dawn").split()
lines = []
for i in range(4096):
    n = 20 + (i * 37) % 400
    text = " ".join(words[(i + k * 7) % len(words)] for k in range(n))
    lines.append('{"id": %d, "text": "%s"}\n' % (i, text))
block = "".join(lines).encode()
with open(path, "wb") as f:
    left = mb << 20
    while left > 0:  # whole lines: the size rounds up to the next block
        f.write(block)
        left -= len(block)
PY
	export SHMFEED_CACHE_DIR="$work/cache-$mb"
	for run in cold warm; do
		drop_cache "$corpus"
		printf '%s %sMB %s ' "$enc" "$mb" "$run"
		"$bin" "$corpus" "$enc" "$producers" ${SF_VOCAB_DIR:+"$SF_VOCAB_DIR"}
	done
	rm -f "$corpus"
done
