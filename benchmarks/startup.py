"""Time from process start to the first timed step of ``mxbench bench``.

Runs the real command in fresh processes and prints, per run, ``startup_s`` from the record
(process creation -> start of the first timed step) with its parts: ``import_s``
(TensorFlow + Keras), ``warmup_ms`` (tracing/compilation + warm-up steps), and the
process's whole wall time seen from outside.

    .venv/bin/python benchmarks/startup.py --runs 3 -- --image-size 128 --batch-size 16 \
        --steps 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("bench_args", nargs="*", help="arguments for mxbench bench (after --)")
    a = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "mxbench", "bench", *a.bench_args]
    print("command:", " ".join(cmd[1:]))
    print(f"{'run':>3} {'startup_s':>9} {'import_s':>8} {'warmup_s':>8} {'1st step_s':>10} "
          f"{'wall_s':>7}")  # fmt: skip
    startups = []
    for i in range(a.runs):
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        rec = json.loads(p.stdout)
        if rec["status"] != "ok":
            print(f"bench failed: {rec['error']}", file=sys.stderr)
            return 1
        m = rec["metrics"]
        startups.append(m["startup_s"])
        warm, first = m["warmup_ms"] / 1000, m["first_step_ms"] / 1000
        print(f"{i:>3} {m['startup_s']:>9.2f} {m['import_s']:>8.2f} {warm:>8.2f} {first:>10.2f} "
              f"{wall:>7.2f}")  # fmt: skip
    print(
        f"median startup (process start -> first timed step): {statistics.median(startups):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
