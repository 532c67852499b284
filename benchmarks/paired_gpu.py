"""Paired windows against one policy per process on a GPU, JAX and PyTorch (Keras 3).

Two ``mxbench run`` of the same matrix (blog-cnn at --size px, float32 against
--policy, batch sizes --batches, backends jax and torch, --repeats processes per cell,
the profiled window off), one per design: ``pairing: paired`` (--timed-s seconds of windows
per process) and ``pairing: process`` (--steps timed steps per process, the design before
Step 18). It prints each run's verdict lines and wall time, and the time to answer's line,
and copies the records to --out (one JSONL file per design) for ``mxbench report``.

    python benchmarks/paired_gpu.py --out DIR [--batches 32 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MATRIX = """\
version: 1
benchmark:
  model: blog-cnn
  image_size: {size}
  warmup_steps: 5
  steps: {steps}
  timed_s: {timed_s}
  pairing: {design}
  repeats: {repeats}
  profile: "off"
  timeout_s: 300
axes:
  policy: [float32, {policy}]
  batch_size: [{batches}]
  backend: [{backends}]
hosts:
  - name: gpu
    engine: local
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--backends", default="jax, torch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--policy", default="mixed_bfloat16")
    ap.add_argument("--timed-s", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=50, help="timed steps, pairing: process")
    ap.add_argument("--designs", default="paired,process")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="mxbench-gpu-"))
    for design in args.designs.split(","):
        steps = 20000 if design == "paired" else args.steps
        batches = ", ".join(map(str, args.batches))
        text = MATRIX.format(size=args.size, steps=steps, timed_s=args.timed_s, design=design,
                             repeats=args.repeats, policy=args.policy, batches=batches,
                             backends=args.backends)  # fmt: skip
        path = root / f"{design}.yaml"
        path.write_text(text)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "mxbench", "run", "-m", str(path), "-r",
                               str(root / design)], capture_output=True, text=True)  # fmt: skip
        wall = time.monotonic() - t0
        print(f"== {design}: {wall:.0f} s, exit {proc.returncode}", flush=True)
        for line in proc.stdout.splitlines():
            if "float32" in line:
                print("  " + line)
        for line in proc.stderr.splitlines():
            if "time to answer" in line or "error" in line.lower():
                print("  " + line[:400])
        for f in (root / design).glob("*.jsonl"):
            shutil.copy(f, args.out / f"{design}-{f.name}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
