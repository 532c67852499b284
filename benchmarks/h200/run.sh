# The GPU checks of issue 34 (and 33): one lease. Writes under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/runner:$PWD/tests PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,power.draw --format=csv > $OUT/smi.txt 2>&1
python3 -c "import jax, keras, torch; print(jax.__version__, jax.devices(), keras.__version__, torch.__version__, torch.cuda.is_available())" >> $OUT/smi.txt 2>&1
cat $OUT/smi.txt
T0=$(date +%s)
# Part B: the product path on the GPU (paired, profile, check, energy), then the report
python3 -m mxbench run -m benchmarks/h200/gpu.yaml -r /tmp/res > $OUT/run.log 2>&1
echo "== run: exit $? in $(( $(date +%s) - T0 )) s"; tail -25 $OUT/run.log
cat /tmp/res/*.jsonl > $OUT/gpu-records.jsonl
python3 -m mxbench report -r /tmp/res --markdown > $OUT/report.md 2>&1; echo "report exit $?"
T1=$(date +%s)
# Part A: breakdowns against the raw traces (kept, brought back to count here)
mkdir -p /tmp/keep
timeout 300 python3 benchmarks/profile_count_check.py --backend jax torch --model blog-cnn resnet50 \
  --image-size 128 --batch-size 64 --keep /tmp/keep 2>&1 | tee $OUT/profile_count.txt
echo "== profile cells: $(( $(date +%s) - T1 )) s"
cd /tmp/keep && tar -czf $OUT/traces-jax.tgz jax-* ; tar -czf $OUT/traces-torch.tgz torch-* ; ls -la $OUT
