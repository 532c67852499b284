"""Matrix efficiency of `mxbench run`: time spent in timed steps / wall time of the whole run.

Runs the embedded default matrix (or --matrix FILE) with the local engine into a fresh
results directory, then breaks the wall time down from the records:

  timed steps      sum over cells of step_ms.mean * n          (what we came to measure)
  warm-up          sum of metrics.warmup_ms                     (tracing, compilation)
  to first step    sum of metrics.startup_s minus warm-up        (interpreter + TF import,
                                                                 model build, data)
  orchestration    wall - sum of per-cell process wall times    (matrix load, planning,
                                                                 record writing)

Usage: python benchmarks/matrix_efficiency.py [--matrix FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--matrix", help="matrix file (default: the embedded local default)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mxbench", "run", "--results", tmp]
        if args.matrix:
            cmd += ["--matrix", args.matrix]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"mxbench run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        records = [
            json.loads(line)
            for path in Path(tmp).glob("*.jsonl")
            for line in path.read_text().splitlines()
        ]

    ok = [r for r in records if r["status"] == "ok"]
    timed = sum(r["metrics"]["step_ms"]["mean"] * r["metrics"]["step_ms"]["n"] for r in ok) / 1e3
    warmup = sum(r["metrics"].get("warmup_ms") or 0 for r in ok) / 1e3
    startup = sum(r["metrics"].get("startup_s") or 0 for r in ok)
    cell_wall = sum(r["run"]["wall_s"] for r in records)
    rows = [
        ("cells (ok / all)", f"{len(ok)} / {len(records)}"),
        ("wall time of mxbench run", f"{wall:8.1f} s"),
        ("timed steps", f"{timed:8.1f} s  {100 * timed / wall:5.1f} %"),
        ("warm-up steps", f"{warmup:8.1f} s  {100 * warmup / wall:5.1f} %"),
        ("process start -> first step", f"{startup - warmup:8.1f} s  "
         f"{100 * (startup - warmup) / wall:5.1f} %"),
        ("after last step (probe, exit)", f"{cell_wall - startup - timed:8.1f} s  "
         f"{100 * (cell_wall - startup - timed) / wall:5.1f} %"),
        ("orchestration outside cells", f"{wall - cell_wall:8.1f} s  "
         f"{100 * (wall - cell_wall) / wall:5.1f} %"),
    ]  # fmt: skip
    for name, value in rows:
        print(f"{name:32s} {value}")
    print(f"\nmatrix efficiency = {timed / wall:.3f}")


if __name__ == "__main__":
    main()
