"""A two-host fleet on this machine: hosts in parallel (different `machine:`) against hosts
of one machine (the default: one Docker daemon), alternating, repeated.

Both hosts reach the local Docker daemon, one through the socket and one through ssh on
loopback, each running the same 4 tiny cells (blog CNN 32x32, float32 and
mixed_bfloat16, batch 4 and 8, 1 + 5 steps). Per configuration it prints the median and
range over the repeats of: the run's wall time, the sum of the cells' own times (from the
records' started_at / finished_at), how long cells of the two hosts overlapped, and the
median step time — on one 2-core machine overlapping hosts slow each other, which is the
reason `machine:` exists.

    .venv/bin/python benchmarks/fleet.py [--repeats 3] [--ssh ssh://root@127.0.0.1]

Needs the Docker engine, the base image and sshd from .ci/setup; builds the cpu image (with
the host CA bundle) if its content tag is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mxbench import images

ROOT = Path(__file__).resolve().parents[1]

MATRIX = """
version: 1
benchmark: {{image_size: 32, warmup_steps: 1, steps: 5, timeout_s: 600}}
axes: {{policy: [float32, mixed_bfloat16], batch_size: [4, 8]}}
images:
  cpu: {{dockerfile: Dockerfile, target: cpu, build_args: {{BASE_IMAGE: "{base}"}}}}
hosts:
  - {{name: sock, engine: docker, images: [cpu]{m1}}}
  - {{name: viassh, engine: docker, docker_host: "{ssh}", images: [cpu]{m2}}}
"""
CONFIGS = {"one machine (default)": ("", ""), "two machines": ("m1", "m2")}


def _span(rec: dict) -> tuple[float, float]:
    return tuple(
        dt.datetime.fromisoformat(rec[k]).timestamp() for k in ("started_at", "finished_at")
    )  # type: ignore[return-value]


def _one(matrix: Path, results: Path, cwd: Path) -> dict[str, float]:
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", str(matrix), "-r", str(results)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    recs = [
        json.loads(line) for f in results.glob("*.jsonl") for line in f.read_text().splitlines()
    ]
    spans = {r["host"]: [] for r in recs}  # type: dict[str, list[tuple[float, float]]]
    for r in recs:
        spans[r["host"]].append(_span(r))
    overlap = sum(
        max(0.0, min(e1, e2) - max(s1, s2))
        for s1, e1 in spans["sock"]
        for s2, e2 in spans["viassh"]
    )
    return {
        "wall_s": wall,
        "cells_s": sum(e - s for v in spans.values() for s, e in v),
        "overlap_s": overlap,
        "step_ms": statistics.median(r["metrics"]["step_ms"]["median"] for r in recs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--base-image", default="mxbench-base:bookworm")
    ap.add_argument("--ssh", default="ssh://root@127.0.0.1")
    ap.add_argument("--ca-bundle", type=Path, default=Path("/etc/ssl/certs/ca-certificates.crt"))
    args = ap.parse_args()
    console = Console(stderr=True)
    work = Path(tempfile.mkdtemp(prefix="mxbench-fleet-"))
    images.ImageSpec("cpu", ROOT, "Dockerfile", "cpu").snapshot(work)
    matrices = {}
    for name, (m1, m2) in CONFIGS.items():
        path = work / f"{m1 or 'default'}.yaml"
        path.write_text(MATRIX.format(
            base=args.base_image, ssh=args.ssh,
            m1=f", machine: {m1}" if m1 else "", m2=f", machine: {m2}" if m2 else "",
        ))  # fmt: skip
        matrices[name] = path
    build = subprocess.run(
        [sys.executable, "-m", "mxbench", "build", "-m", str(matrices["two machines"]),
         "--host", "sock", "--ca-bundle", str(args.ca_bundle)],
        cwd=work, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if build.returncode != 0:
        raise SystemExit(build.stderr[-2000:])

    samples: dict[str, list[dict[str, float]]] = {n: [] for n in CONFIGS}
    for i in range(args.repeats):
        for name, path in matrices.items():  # alternating: drift hits both
            console.print(f"repeat {i + 1}/{args.repeats}: {name}")
            samples[name].append(_one(path, work / f"r{i}-{path.stem}", work))

    table = Table(
        "configuration", "wall (s)", "cells' time summed (s)", "overlap (s)", "median step (ms)",
        title=f"two docker hosts, 4 cells each; median (min-max) of {args.repeats}",
    )  # fmt: skip
    for name, runs in samples.items():

        def cell(key: str, runs: list[dict[str, float]] = runs) -> str:
            v = [r[key] for r in runs]
            return f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"

        table.add_row(name, cell("wall_s"), cell("cells_s"), cell("overlap_s"), cell("step_ms"))
    Console().print(table)


if __name__ == "__main__":
    main()
