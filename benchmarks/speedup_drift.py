"""Where the paired speedup's variance lives: between processes, between rebuilt model pairs
in one process, or between stretches of time with the same built pair.

Each of ``--processes`` fresh processes measures float32 against ``--policy`` at one batch
size with mxbench's paired windows (``bench/process/paired``), ``--blocks`` times:

- ``--rebuild``: each block is a whole paired pass (both models built again, traced again,
  then ``--timed-s`` seconds of interleaved windows);
- otherwise: the pair is built once and each block is another ``--timed-s`` seconds of
  interleaved windows on the same two models.

It prints each block's median paired ratio (with the standard error of its windows' ratios),
the pooled SD between blocks of one process, the SD of the processes' means and the F ratio
of the two (about 1 when the blocks of one process are as independent as blocks of
different processes). Issue 33's note reads it: blocks inside one process are not
independent replicates, so the processes stay the interval's outer level.

    python benchmarks/speedup_drift.py [--processes 3] [--blocks 5] [--batch 8] [--rebuild]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, statistics as st, sys, time
import msgspec
from mxbench.bench.process import paired as cell_paired
from mxbench.bench.process import windows as paired
from mxbench.bench.evidence import probe
from mxbench.bench.process.cell import CellState, build_arm, load_backend
from mxbench.bench.process.timing import Phases
from mxbench.records.codec import new_record
from mxbench.matrix.params import Params
from mxbench.records.record import Cpu

blocks, batch, timed_s, policy, rebuild = (int(sys.argv[1]), int(sys.argv[2]),
                                           float(sys.argv[3]), sys.argv[4], sys.argv[5] == "1")
p = Params(model="blog-cnn", policy="float32", batch_size=batch, image_size=64,
           warmup_steps=2, steps=2000, timed_s=timed_s, profile="off", check="off")
started = time.time()
phases = Phases(started)
out = []
if rebuild:
    cpu = msgspec.convert(probe.cpu_info(), Cpu)
    for _ in range(blocks):
        recs = cell_paired._pass(p, [policy], cpu, phases, "drift", started, None)
        r = recs[1].pairing.ratios
        out.append((st.median(r), st.stdev(r) / len(r) ** 0.5))
else:
    ps = [p, msgspec.structs.replace(p, policy=policy)]
    recs = [new_record(params=q, status="ok") for q in ps]
    state = CellState(phases)
    load_backend(p, recs[0], state)
    arms = [build_arm(q, rec, state) for q, rec in zip(ps, recs)]
    for _ in range(blocks):
        plan = paired.Plan(warmup=2, max_steps=2000, timed_s=timed_s)
        got, _ = cell_paired._windows(arms, plan, state)
        base = {w.round: (w.end - w.start) / w.steps for w in got.logs[0].windows}
        own = {w.round: (w.end - w.start) / w.steps for w in got.logs[1].windows}
        r = [base[k] / own[k] for k in base if k in own]
        out.append((st.median(r), st.stdev(r) / len(r) ** 0.5))
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--timed-s", type=float, default=6.0)
    ap.add_argument("--policy", default="mixed_bfloat16")
    ap.add_argument("--rebuild", action="store_true", help="build the pair again per block")
    a = ap.parse_args()
    means, within = [], []
    for i in range(a.processes):
        t0 = time.monotonic()
        args = [str(a.blocks), str(a.batch), str(a.timed_s), a.policy, "1" if a.rebuild else "0"]
        run = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True,
                             text=True, check=True)  # fmt: skip
        blocks = json.loads(run.stdout.strip().splitlines()[-1])
        ratios = [b[0] for b in blocks]
        means.append(statistics.mean(ratios))
        within.append(statistics.variance(ratios))
        shown = ", ".join(f"{r:.3f} (±{se:.3f})" for r, se in blocks)
        print(f"process {i + 1} ({time.monotonic() - t0:.0f} s): {shown}", flush=True)
    pooled = statistics.mean(within)
    between = statistics.variance(means) if len(means) > 1 else float("nan")
    print(f"SD between blocks of one process (pooled): {pooled**0.5:.3f}")
    print(f"SD of the processes' means: {between**0.5:.3f} "
          f"(independent blocks would give {(pooled / a.blocks) ** 0.5:.3f})")  # fmt: skip
    print(f"F = {a.blocks * between / pooled:.2f} on ({a.processes - 1}, "
          f"{a.processes * (a.blocks - 1)}) degrees of freedom")  # fmt: skip


if __name__ == "__main__":
    main()
