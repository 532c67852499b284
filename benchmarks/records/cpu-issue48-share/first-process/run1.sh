#!/usr/bin/env bash
# One run of the embedded default (paired_vs_process.py --runs 1 --designs paired, quiet),
# holding the machine-wide lock for the run.
# Usage: run1.sh SNAPSHOT KIND NAME OUT  (SNAPSHOT: a copy of runner/ at the commit measured,
# its COMMIT file names it; KIND: native|avx2; NAME: the run's folder under OUT)
set -uo pipefail
snap=$1 kind=$2 name=$3 out=$4
mkdir -p "$out"
py=/work/main/.venv/bin/python
here=$(cd "$(dirname "$0")/../../../.." && pwd)
if [ "$kind" = avx2 ]; then
  export TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2; ref=8=0.090,32=0.081
else
  ref=8=1.316,32=1.473
fi
export PYTHONPATH=$snap
flock /tmp/mxbench-heavy.lock bash -c '
  echo "== $(date -u +%T) $2 $3, code $(cat "$1/COMMIT")"
  "$4" "$5/benchmarks/paired_vs_process.py" --runs 1 --load none --designs paired \
    --reference "$6" --keep "$7/$3"
  echo "== $(date -u +%T) done"' _ "$snap" "$kind" "$name" "$py" "$here" "$ref" "$out" \
  2>&1 | tee -a "$out/log"
