#!/usr/bin/env bash
# Issue 48 item 2: the embedded default, 5 quiet + 5 bursty runs against a quiet alternating
# reference, on this CPU's kind and on the AVX2-only kind. Usage: run.sh KIND (native|avx2)
set -uo pipefail
kind=$1
out=/work/series/$kind
mkdir -p $out
cd /work/main
py=/work/main/.venv/bin/python
if [ "$kind" = avx2 ]; then export TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2; steps=8; else steps=60; fi
echo "== $(date -u +%T) reference ($kind)" | tee $out/log
$py benchmarks/reference_loop.py --rounds 6 --steps $steps > $out/reference.txt 2>&1
cat $out/reference.txt | tee -a $out/log
r8=$(grep "reference batch 8:" $out/reference.txt | sed -E 's/.*mixed_bfloat16 ([0-9.]+)x.*/\1/')
r32=$(grep "reference batch 32:" $out/reference.txt | sed -E 's/.*mixed_bfloat16 ([0-9.]+)x.*/\1/')
echo "== $(date -u +%T) quiet ($kind) reference 8=$r8,32=$r32" | tee -a $out/log
$py benchmarks/paired_vs_process.py --runs 5 --load none --designs paired --reference 8=$r8,32=$r32 --keep $out/quiet > $out/quiet.txt 2>&1
cat $out/quiet.txt | tee -a $out/log
echo "== $(date -u +%T) bursty ($kind)" | tee -a $out/log
$py benchmarks/paired_vs_process.py --runs 5 --load bursty --designs paired --reference 8=$r8,32=$r32 --keep $out/bursty > $out/bursty.txt 2>&1
cat $out/bursty.txt | tee -a $out/log
echo "== $(date -u +%T) done" | tee -a $out/log
