#!/usr/bin/env bash
# Issue 48: the embedded default with windows given back their CPU (stats.load), live.
# AVX2-only kind: a fresh quiet reference (10 rounds), 5 runs quiet, 5 under the bursty load;
# then the native kind 5 under the bursty load; then A/A under the bursty load, 5 a kind.
# Usage: run.sh SNAPSHOT OUT  (SNAPSHOT: a copy of runner/ with a COMMIT file)
set -uo pipefail
snap=$1 out=$2
mkdir -p "$out"
py=/work/main/.venv/bin/python
here=$(cd "$(dirname "$0")/../../../.." && pwd)
export PYTHONPATH=$snap
log() { echo "== $(date -u +%T) $*" | tee -a "$out/log"; }
log "code $(cat "$snap/COMMIT")"
(
  export TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2
  log "avx2 reference, 10 rounds"
  $py "$here/benchmarks/reference_loop.py" --rounds 10 --steps 8 > "$out/avx2-reference.txt" 2>&1
  tail -2 "$out/avx2-reference.txt" | tee -a "$out/log"
  for load in none bursty; do
    log "avx2 $load"
    $py "$here/benchmarks/paired_vs_process.py" --runs 5 --load $load --designs paired \
      --reference 8=0.090,32=0.081 --keep "$out/avx2-$load-runs" > "$out/avx2-$load.txt" 2>&1
    grep -v "^run " "$out/avx2-$load.txt" | tee -a "$out/log"
  done
  log "avx2 aa bursty"
  $py "$here/benchmarks/paired_vs_process.py" --runs 5 --load bursty --designs aa \
    --keep "$out/avx2-aa-runs" > "$out/avx2-aa.txt" 2>&1
  tail -3 "$out/avx2-aa.txt" | tee -a "$out/log"
)
log "native bursty"
$py "$here/benchmarks/paired_vs_process.py" --runs 5 --load bursty --designs paired \
  --reference 8=1.316,32=1.473 --keep "$out/native-bursty-runs" > "$out/native-bursty.txt" 2>&1
grep -v "^run " "$out/native-bursty.txt" | tee -a "$out/log"
log "native aa bursty"
$py "$here/benchmarks/paired_vs_process.py" --runs 5 --load bursty --designs aa \
  --keep "$out/native-aa-runs" > "$out/native-aa.txt" 2>&1
tail -3 "$out/native-aa.txt" | tee -a "$out/log"
log done
