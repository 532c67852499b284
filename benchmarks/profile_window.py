"""What the profiled window shows, and what it costs (Step 15).

For each backend x model x policy it runs ``mxbench bench`` in fresh processes, with
``--profile on`` and ``--profile off`` alternating (A B A B ...), and prints:

- the cell's wall time with and without the window (median and spread over --repeats
  processes) and the window's own ``cost_s`` as recorded: what the default-on profile adds
  to every cell;
- the timed median step with the profile on and off (the window is after the timed steps:
  they should agree within the machine's noise; for TensorFlow oneDNN logs primitive
  creation from the start, see mxbench.bench.evidence.onednn);
- where the time goes (ms per step by category, scaled to the timed median) and the oneDNN
  kernels that ran the convolutions/matmuls.

    python benchmarks/profile_window.py [--backend tensorflow torch] [--model blog-cnn resnet50]
        [--image-size 64] [--batch-size 8] [--steps 10] [--repeats 3]

Figures from a shared, loaded machine vary: run it twice before reading a difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from mxbench.records.record import CATEGORY_NAMES


def bench(args: argparse.Namespace, backend: str, model: str, policy: str, profile: str) -> dict:
    argv = [sys.executable, "-m", "mxbench", "bench", "--backend", backend, "--model", model,
            "--policy", policy, "--image-size", str(args.image_size), "--batch-size",
            str(args.batch_size), "--steps", str(args.steps), "--warmup-steps",
            str(args.warmup_steps), "--profile", profile]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=os.environ, check=False)
    wall = time.perf_counter() - t0
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines:
        raise SystemExit(f"no record from {' '.join(argv)}:\n{out.stderr[-2000:]}")
    rec: dict = json.loads(lines[-1])
    rec["_wall"] = wall
    return rec


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    q = statistics.quantiles(values, n=4, method="inclusive")
    return f"{statistics.median(values):.2f} [{q[0]:.2f}–{q[2]:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", nargs="+", default=["tensorflow", "torch"])
    ap.add_argument("--model", nargs="+", default=["blog-cnn", "resnet50"])
    ap.add_argument("--policy", nargs="+", default=["float32", "mixed_bfloat16"])
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for backend in args.backend:
        for model in args.model:
            for policy in args.policy:
                runs: dict[str, list[dict]] = {"on": [], "off": []}
                for _ in range(args.repeats):
                    for profile in ("on", "off"):
                        runs[profile].append(bench(args, backend, model, policy, profile))
                report(backend, model, policy, runs)


def report(backend: str, model: str, policy: str, runs: dict[str, list[dict]]) -> None:
    on, off = runs["on"], runs["off"]
    ok = [r for r in on if r["status"] == "ok" and r.get("profile")]
    print(f"\n== {backend} {model} {policy} ({len(on)} processes each way)")
    if not ok:
        print("   no ok record with a profile:", [r.get("error") for r in on][:1])
        return
    med = lambda rs: [r["metrics"]["step_ms"]["median"] for r in rs if r["status"] == "ok"]  # noqa: E731
    print(f"   cell wall s: profile on {spread([r['_wall'] for r in on])}, "
          f"off {spread([r['_wall'] for r in off])}; window cost_s "
          f"{spread([r['profile']['cost_s'] for r in ok])}")  # fmt: skip
    print(f"   timed median ms/step: profile on {spread(med(on))}, off {spread(med(off))}")
    p = ok[0]["profile"]
    if p.get("error"):
        print("   profile error:", p["error"])
        return
    step = ok[0]["metrics"]["step_ms"]["median"]
    total = sum(p["breakdown_ms"].values()) or 1.0
    parts = ", ".join(f"{CATEGORY_NAMES[c]} {step * v / total:.1f}"
                      for c, v in p["breakdown_ms"].items() if v / total >= 0.005)  # fmt: skip
    print(f"   where the time goes (ms of the {step:.1f} ms step): {parts}")
    print(
        f"   profiled step {p['step_ms']:.1f} ms; busy {p['busy_share']:.0%}; top: "
        + ", ".join(f"{o['name']} {o['ms_per_step']:.1f}" for o in p["top_ops"][:4])
    )
    d = p.get("onednn")
    if d:
        print(f"   oneDNN ({d['weight']}): ISAs {d['gemm_isas']}; native 16-bit "
              f"{d['native16_share']}; 16-bit source {d['sixteen_bit_share']}; "
              f"kernels {d['kernels'][:4]}")  # fmt: skip


if __name__ == "__main__":
    main()
