#!/bin/bash
# Issue 33's Measure series: quiet reference, 5 quiet + 5 bursty runs of both designs
# (alternated), A/A under load and quiet. Nothing else may run meanwhile.
set -u
cd /work/main
PY=/work/main/.venv/bin/python
OUT=/work/notes/series
mkdir -p $OUT
export PATH=/work/main/.venv/bin:$PATH
date > $OUT/started
uptime >> $OUT/started
$PY benchmarks/reference_loop.py --rounds 6 > $OUT/reference.txt 2>$OUT/reference.err
REF=$(grep '^reference batch' $OUT/reference.txt | sed -E 's/^reference batch ([0-9]+): [a-z_0-9]+ ([0-9.]+)x.*/\1=\2/' | paste -sd, -)
echo "reference: $REF" >> $OUT/started
$PY benchmarks/paired_vs_process.py --runs 5 --load none --reference "$REF" --keep $OUT/quiet > $OUT/quiet.txt 2>$OUT/quiet.err
$PY benchmarks/paired_vs_process.py --runs 10 --load bursty --designs aa --keep $OUT/aa-bursty > $OUT/aa-bursty.txt 2>$OUT/aa-bursty.err
$PY benchmarks/paired_vs_process.py --runs 5 --load bursty --reference "$REF" --keep $OUT/bursty > $OUT/bursty.txt 2>$OUT/bursty.err
$PY benchmarks/paired_vs_process.py --runs 6 --load none --designs aa --keep $OUT/aa-quiet > $OUT/aa-quiet.txt 2>$OUT/aa-quiet.err
date > $OUT/finished
