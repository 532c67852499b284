#!/usr/bin/env bash
# Issue 48 Deliver 2 (timed share per process): 5 runs of the embedded default on one CPU kind
# and load, against the quiet references of ../cpu-issue48-series (6 rounds each, reused).
# Usage: run.sh SNAPSHOT KIND LOAD OUT  (SNAPSHOT: a copy of runner/ at the commit measured,
# so that edits meanwhile do not reach the runs; KIND: native|avx2; LOAD: none|bursty)
set -uo pipefail
snap=$1 kind=$2 load=$3 out=$4
mkdir -p "$out"
py=/work/main/.venv/bin/python
here=$(cd "$(dirname "$0")/../../.." && pwd)
if [ "$kind" = avx2 ]; then
  export TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2; ref=8=0.090,32=0.081
else
  ref=8=1.316,32=1.473
fi
export PYTHONPATH=$snap
echo "== $(date -u +%T) $kind load=$load reference $ref, code $(cat "$snap/COMMIT")" | tee -a "$out/log"
$py "$here/benchmarks/paired_vs_process.py" --runs 5 --load "$load" --designs paired \
  --reference "$ref" --keep "$out/$load-runs" > "$out/$load.txt" 2>&1
cat "$out/$load.txt" | tee -a "$out/log"
echo "== $(date -u +%T) done" | tee -a "$out/log"
