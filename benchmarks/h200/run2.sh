# Second lease: serving on the GPU (issue 37), paired energy + fixed kernel categories (34), the A/A floor (33).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/runner:$PWD/tests PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 200 python3 -m mxbench run -m benchmarks/h200/infer.yaml -r /tmp/inf > $OUT/infer.log 2>&1
echo "== infer: exit $? in $(( $(date +%s) - T0 )) s"; tail -16 $OUT/infer.log
cat /tmp/inf/*.jsonl > $OUT/infer-records.jsonl
python3 -m mxbench report -r /tmp/inf --markdown > $OUT/infer-report.md 2>&1
T1=$(date +%s)
timeout 110 python3 -m mxbench run -m benchmarks/h200/gpu.yaml -r /tmp/res > $OUT/run.log 2>&1
echo "== paired: exit $? in $(( $(date +%s) - T1 )) s"; tail -6 $OUT/run.log
cat /tmp/res/*.jsonl > $OUT/paired-records.jsonl
python3 -m mxbench report -r /tmp/res --markdown > $OUT/paired-report.md 2>&1
python3 -c "
import json
for l in open('$OUT/paired-records.jsonl'):
    r = json.loads(l); m = r['metrics']
    print(r['params']['backend'], r['params']['policy'], m.get('energy_source'), m.get('energy_j_per_image'), r['device'].get('uuid'))
"
T2=$(date +%s)
timeout 100 python3 -m mxbench doctor -m benchmarks/h200/noise.yaml --noise 4 -r /tmp/noise > $OUT/noise.log 2>&1
echo "== noise: exit $? in $(( $(date +%s) - T2 )) s"; tail -12 $OUT/noise.log
cd /tmp/noise && tar -czf $OUT/noise.tgz . 2>/dev/null; ls -la $OUT
