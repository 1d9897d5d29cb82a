#!/bin/bash
# Tokenize CONFIG's corpus in N parts on Slurm, then merge them into PREFIX.bin/.idx:
#   docs/slurm/submit.sh CONFIG PREFIX N
# Submits the job array (tokenize-part.sbatch, tasks 0..N-1) and the merge
# (tokenize-merge.sbatch), which starts only when every task has succeeded
# (--dependency=afterok). Prints both job ids.
set -euo pipefail

if [ $# -ne 3 ]; then
	echo "usage: $0 CONFIG PREFIX N" >&2
	exit 2
fi
config=$1
prefix=$2
parts=$3
here=$(cd "$(dirname "$0")" && pwd)

array=$(sbatch --parsable --array="0-$((parts - 1))" "$here/tokenize-part.sbatch" \
	"$config" "$prefix" "$parts")
array=${array%%;*} # --parsable prints "id" or "id;cluster"
merge=$(sbatch --parsable --dependency="afterok:$array" "$here/tokenize-merge.sbatch" \
	"$prefix" "$parts")
echo "parts: job $array (tasks 0-$((parts - 1))); merge: job ${merge%%;*}"
