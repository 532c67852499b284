# Third lease (2026-11-29): the front door on a GPU (issue 49: one command, no file; the API),
# and the roofs on a GPU (issue 50: per-dtype ceilings per backend, the pre-flight, MFU, the bound).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/runner PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import jax, torch, keras; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__, 'keras', keras.__version__)"
T0=$(date +%s)
timeout 120 python3 -m mxbench roofs -b jax -b torch > $OUT/roofs.txt 2>&1
echo "== roofs: exit $? in $(( $(date +%s) - T0 )) s"; cat $OUT/roofs.txt | tail -30
python3 -m mxbench roofs -b jax -b torch --json > $OUT/roofs.json 2>/dev/null
T1=$(date +%s)
timeout 45 python3 -m mxbench doctor --roofs > $OUT/doctor.txt 2>&1
echo "== doctor --roofs: exit $? in $(( $(date +%s) - T1 )) s"; tail -20 $OUT/doctor.txt
T2=$(date +%s)
# The newcomer's question, no file: ResNet-50, two policies, two batch sizes, on JAX.
timeout 280 python3 -m mxbench run --model resnet50 --policy float32,mixed_bfloat16 --batch-size 64,128 \
  --backend jax --set benchmark.image_size=128 -r /tmp/new > $OUT/run.log 2>&1
echo "== run (jax, default measure): exit $? in $(( $(date +%s) - T2 )) s"; tail -14 $OUT/run.log
T3=$(date +%s)
timeout 100 python3 -m mxbench run --model resnet50 --policy float32,mixed_bfloat16 --batch-size 64,128 \
  --backend torch --fast --set benchmark.image_size=128 -r /tmp/new > $OUT/run-torch.log 2>&1
echo "== run (torch, --fast): exit $? in $(( $(date +%s) - T3 )) s"; tail -8 $OUT/run-torch.log
cat /tmp/new/*.jsonl > $OUT/records.jsonl
python3 -m mxbench report -r /tmp/new --markdown > $OUT/report.md 2>&1
python3 - <<'PY' > $OUT/api.txt 2>&1
import mxbench
text = mxbench.render_report("/tmp/new", format="json")
print(len(text), "chars of JSON from mxbench.render_report")
frame = mxbench.load_results("/tmp/new")
print(frame[["backend", "policy", "batch_size", "step_ms_median", "speedup_vs_float32"]].to_string())
PY
cat $OUT/api.txt; ls -la $OUT
