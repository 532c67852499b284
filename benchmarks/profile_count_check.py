"""The profiled window's breakdown against an independent count of its raw trace, per
backend x model x policy (issue 34's check, on models the test suite does not run).

Each cell runs ``mxbench bench --profile on`` in a fresh process with its raw trace kept
(``MXBENCH_PROFILE_DIR``; for JAX also XLA's text dump of the compiled step), then
tests/profile_count.py (another reader, another rule for what an operation is, another
own-time algorithm) counts the trace. Printed per cell, in ms per step:

- step: the profiled window's wall-clock step; busy: the record's step less host_gap;
- ops: the record's operations' own times and the count's; thread-busy: the count's time
  each thread was busy, summed (own times add up to it when no wrapper is counted);
  union: the time at least one operation ran; side by side = ops / union (2 threads
  running ops at once: 2.0);
- conv: conv/matmul's share of the busy time (record) and of the operations (count);
  other: the record's "other" as a share of the step.

    python benchmarks/profile_count_check.py [--backend tensorflow jax torch]
        [--model blog-cnn resnet50] [--policy float32 mixed_bfloat16] [--image-size 64]
        [--batch-size 8] [--keep DIR]
    python benchmarks/profile_count_check.py --recount DIR   # cells kept by --keep, again
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from mxbench.bench.evidence import profile
from mxbench.bench.evidence.profile_ops import Op, category

import profile_count


def cell(args: argparse.Namespace, backend: str, model: str, policy: str) -> str:
    with tempfile.TemporaryDirectory(prefix="mxbench-profile-check-") as keep:
        try:
            return _count(args, backend, model, policy, Path(keep))
        finally:
            if args.keep:  # the raw traces and the record, to read again elsewhere
                shutil.copytree(keep, args.keep / f"{backend}-{model}-{policy}")


def _count(args: argparse.Namespace, backend: str, model: str, policy: str, keep: Path) -> str:
    env = {**os.environ, "MXBENCH_PROFILE_DIR": str(keep)}
    if backend == "jax":
        env["XLA_FLAGS"] = profile_count.xla_dump_flags(keep)
    argv = [
        sys.executable,
        "-m",
        "mxbench",
        "bench",
        "--backend",
        backend,
        "--model",
        model,
        "--policy",
        policy,
        "--image-size",
        str(args.image_size),
        "--batch-size",
        str(args.batch_size),
        "--steps",
        "4",
        "--warmup-steps",
        "2",
        "--check",
        "off",
    ]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    except subprocess.TimeoutExpired:
        return f"{backend} {model} {policy}: no record in 30 min"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return f"{backend} {model} {policy}: exit {out.returncode} ({out.stderr.strip()[-300:]})"
    (keep / "record.json").write_text(lines[-1])
    prof = json.loads(lines[-1]).get("profile") or {}
    if not prof or prof.get("error"):
        return f"{backend} {model} {policy}: no profile ({prof.get('error')})"
    n, step, bd = prof["steps"], prof["step_ms"], prof["breakdown_ms"]
    busy = step - bd["host_gap"]
    try:
        c = profile_count.COUNTERS[backend](keep)
    except Exception as exc:  # the count cannot read this trace (a GPU's, say)
        return (f"{backend:10} {model:9} {policy:14} step {step:8.1f}  busy {busy:8.1f}  "
                f"ops {prof['ops_ms']:8.1f}  conv {bd['conv_matmul'] / busy:4.0%}  "
                f"other {bd['other'] / step:4.0%}  (no count: {exc!r})")  # fmt: skip
    ms = 1000 / n
    return (
        f"{backend:10} {model:9} {policy:14} step {step:8.1f}  busy {busy:8.1f}  "
        f"ops {prof['ops_ms']:8.1f} / count {c.ops_s * ms:8.1f}  "
        f"thread-busy {c.thread_busy_s * ms:8.1f}  union {c.busy_s * ms:8.1f}  "
        f"side by side {c.ops_s / c.busy_s:4.2f}  conv {bd['conv_matmul'] / busy:4.0%} / "
        f"{c.conv_s / c.ops_s:4.0%}  other {bd['other'] / step:4.0%}"
    )


def recount(cell_dir: Path) -> str:
    """A kept cell (``--keep``, from this machine or another: a GPU's) read again with this
    checkout's rules: mxbench's categories of the trace's operations against the count."""
    rec = json.loads((cell_dir / "record.json").read_text())
    backend, prof = rec["params"]["backend"], rec["profile"]
    if backend == "jax":
        planes = profile.jax_planes(profile._xplane(cell_dir))
        gpu = any(name.startswith("/device:GPU") for name, _ in planes)
        ops = profile._xspace_ops(planes, gpu)
    else:  # the kernels of a GPU's trace (the bench reads the same events in process)
        events = profile_count._chrome(profile_count._one(cell_dir, "torch-trace.json"))
        gpu_cats = ("kernel", "gpu_memcpy", "gpu_memset")
        ops = [Op((str(e["name"]),), e["ts"] / 1e6, e["dur"] / 1e6, str(e["tid"]))
               for e in events if e.get("cat") in gpu_cats]  # fmt: skip
    shares: dict[str, float] = {}
    for o in ops:
        shares[category(o.names)] = shares.get(category(o.names), 0.0) + o.own
    total = sum(shares.values())
    c = profile_count.COUNTERS[backend](cell_dir)
    step_s = prof["step_ms"] / 1000 * prof["steps"]  # the profiled window
    return (
        f"{backend:6} {rec['params']['model']:9} {rec['params']['policy']:14} "
        f"ops {total * 1000:8.1f} ms / count {c.ops_s * 1000:8.1f}  conv "
        f"{shares.get('conv_matmul', 0) / total:4.0%} / {c.conv_s / c.ops_s:4.0%}  other "
        f"{shares.get('other', 0) / step_s:4.0%} of the step  "
        + " ".join(f"{k} {v / total:.0%}" for k, v in sorted(shares.items()) if k != "other")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", nargs="+", default=["tensorflow", "jax", "torch"])
    ap.add_argument("--model", nargs="+", default=["blog-cnn", "resnet50"])
    ap.add_argument("--policy", nargs="+", default=["float32", "mixed_bfloat16"])
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--keep", type=Path, help="copy each cell's raw traces and record here")
    ap.add_argument("--recount", type=Path, help="read the cells kept under DIR again")
    args = ap.parse_args()
    if args.recount:
        for cell_dir in sorted(d for d in args.recount.iterdir() if (d / "record.json").exists()):
            print(recount(cell_dir), flush=True)
        return
    for model in args.model:
        for backend in args.backend:
            for policy in args.policy:
                print(cell(args, backend, model, policy), flush=True)


if __name__ == "__main__":
    main()
