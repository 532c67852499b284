# Fourth lease (2026-11-29): the fixes of what the third found. The CPU clock by a chain of
# register adds (immediate adds read 7.15 GHz on this Xeon), the GPU stream over 1 GiB (JAX
# read 998 GB/s over 128 MiB); then the newcomer's question again, --fast, on JAX.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/runner PYTHONUNBUFFERED=1
grep -m1 "model name" /proc/cpuinfo; cat /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq 2>/dev/null
python3 - <<'PY'
import ctypes, mmap, time
from mxbench.roofs import clock
def ghz(code):
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    loop = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    loop(1000); best = 0.0
    for _ in range(7):
        t0 = time.perf_counter(); n = loop(200_000); best = max(best, n / (time.perf_counter() - t0))
    return best / 1e9
# the loop as it was: (add rdx, 1) x 100
body = b"\x48\x83\xc2\x01" * 100 + b"\x48\xff\xc8"
imm = b"\x48\x89\xf8\x48\x31\xd2" + body + b"\x0f\x85" + (-(len(body) + 6)).to_bytes(4, "little", signed=True) + b"\x48\x89\xd0\xc3"
print(f"clock: add rdx, 1 chain {ghz(imm):.2f} GHz; add rdx, rcx chain (mxbench now) {clock.measured_ghz():.2f} GHz")
PY
T0=$(date +%s)
timeout 130 python3 -m mxbench roofs -b jax -b torch --refresh > $OUT/roofs.txt 2>&1
echo "== roofs: exit $? in $(( $(date +%s) - T0 )) s"; head -14 $OUT/roofs.txt; grep -E "^formula float32 matmul|bandwidth" $OUT/roofs.txt | head -6
T1=$(date +%s)
timeout 150 python3 -m mxbench run --model resnet50 --policy float32,mixed_bfloat16 --batch-size 128,256 \
  --backend jax --fast --set benchmark.image_size=128 -r /tmp/fast > $OUT/run-fast.log 2>&1
echo "== run (jax, --fast): exit $? in $(( $(date +%s) - T1 )) s"; tail -9 $OUT/run-fast.log
cat /tmp/fast/*.jsonl > $OUT/records-fast.jsonl 2>/dev/null
python3 -m mxbench report -r /tmp/fast --markdown > $OUT/report-fast.md 2>&1; ls -la $OUT
