#!/usr/bin/env bash
set -uo pipefail
out=/work/series/avx2
cd /work/main
export TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2
py=/work/main/.venv/bin/python
echo "== $(date -u +%T) quiet run 5 (avx2)" | tee -a $out/log
$py benchmarks/paired_vs_process.py --runs 1 --load none --designs paired --reference 8=0.090,32=0.081 --keep $out/quiet5 > $out/quiet5.txt 2>&1
echo "== $(date -u +%T) bursty (avx2)" | tee -a $out/log
$py benchmarks/paired_vs_process.py --runs 5 --load bursty --designs paired --reference 8=0.090,32=0.081 --keep $out/bursty2 > $out/bursty2.txt 2>&1
echo "== $(date -u +%T) done" | tee -a $out/log
