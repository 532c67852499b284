"""Ctrl-C at random moments: does `mxbench run` always stop within seconds?

Starts `mxbench run` on a small local matrix (a 2-step cell, then one of 100,000 steps) N
times; each time waits for "cell(s) to run", sleeps a random 0..--max-delay s (so the
SIGINT lands while the run plans, prepares, starts the first bench, measures its roofs on
a cold cache, or times), sends SIGINT and times the exit. A run still there after 12 s gets
SIGABRT (PYTHONFAULTHANDLER: every thread's stack is printed). Prints one line per try,
then the slowest stop and what was left running (found by the owner label every engine
stamps). Run it beside benchmarks/bursty_load.py, or under a CPU mask
(TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2), to load the race.

    python benchmarks/sigint_stress.py [--tries 50] [--max-delay 4] [--code runner/]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import owned_processes  # noqa: E402

MATRIX = {
    "benchmark": {"image_size": 32, "warmup_steps": 1, "repeats": 1, "timeout_s": 900},
    "axes": {"policy": ["float32"], "batch_size": [4], "steps": [2, 100000]},
    "hosts": [{"name": "here", "engine": "local"}],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=50)
    ap.add_argument("--max-delay", type=float, default=4.0)
    ap.add_argument("--code", default=str(ROOT / "runner"), help="runner/ to put on the path")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mxbench-sigint-"))
    matrix = work / "m.yaml"
    matrix.write_text(json.dumps(MATRIX))
    env = {**os.environ, "PYTHONPATH": args.code, "PYTHONFAULTHANDLER": "1"}
    stops, hung, left_over = [], 0, 0
    for i in range(args.tries):
        env["MXBENCH_ROOFS_CACHE"] = str(work / f"roofs{i}")  # cold every time
        cmd = [sys.executable, "-m", "mxbench", "run", "-m", str(matrix), "-r", str(work / f"r{i}")]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=env)  # fmt: skip
        err: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        reader = threading.Thread(target=err.extend, args=(stream,), daemon=True)
        reader.start()
        deadline = time.monotonic() + 120
        while not any("cell(s) to run" in line for line in err) and time.monotonic() < deadline:
            time.sleep(0.01)
        delay = random.uniform(0, args.max_delay)
        time.sleep(delay)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=12)
            stops.append(time.monotonic() - t0)
            print(f"{i} SIGINT {delay:.2f} s after the announcement: stopped in "
                  f"{stops[-1]:.2f} s, exit {proc.returncode}", flush=True)  # fmt: skip
        except subprocess.TimeoutExpired:
            hung += 1
            proc.send_signal(signal.SIGABRT)
            time.sleep(2)
            proc.kill()
            reader.join(3)
            print(f"{i} SIGINT {delay:.2f} s after: HUNG; stderr:\n{''.join(err)[-6000:]}")
        time.sleep(0.5)
        left = owned_processes(proc.pid)
        if left:
            left_over += 1
            print(f"{i} left running: {left}")
            for line in left:
                os.kill(int(line.split()[0]), signal.SIGKILL)
    slowest = f"{max(stops):.2f} s" if stops else "-"
    print(f"\n{args.tries} tries: {len(stops)} stopped (slowest {slowest}), {hung} hung, "
          f"{left_over} left work running")  # fmt: skip


if __name__ == "__main__":
    main()
