"""Per-cell overhead of `engine: docker` against `engine: local`, on the same tiny cell.

Runs the same cell (blog CNN, 32x32, batch 4, 1 warm-up + 3 timed steps) N times through
each engine, alternating, and prints the median wall time per cell (orchestrator's view:
create/start/wait/logs/remove for docker, spawn/wait for local), the bench's own
startup (process start -> first timed step) and the timed median step, so the overhead
is the container lifecycle, not the measurement. Optionally also through ssh.

    .venv/bin/python benchmarks/docker_overhead.py [--repeats 5] [--ssh ssh://root@127.0.0.1]

Needs the Docker engine and base image from .ci/setup-docker.sh; builds the cpu image
(with the host CA bundle) if its content tag is missing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from mxbench.cells.cell import expand
from mxbench.matrix.file import parse_matrix
from rich.console import Console
from rich.table import Table

from mxbench import images
from mxbench.engines import engine_class, to_record
from mxbench.engines.docker import connect

ROOT = Path(__file__).resolve().parents[1]

MATRIX = """
version: 1
benchmark: {{image_size: 32, warmup_steps: 1, steps: 3, timeout_s: 600}}
axes: {{policy: [float32], batch_size: [4]}}
images:
  cpu:
    dockerfile: Dockerfile
    target: cpu
    context: "{context}"
    allow_outside: true
    build_args: {{BASE_IMAGE: "{base}"}}
hosts:
  - {{name: local, engine: local}}
  - {{name: docker, engine: docker, images: [cpu]}}
{ssh}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--base-image", default="mxbench-base:bookworm")
    ap.add_argument("--ssh", default=None, help="also run through this ssh:// docker host")
    ap.add_argument("--ca-bundle", type=Path, default=Path("/etc/ssl/certs/ca-certificates.crt"))
    args = ap.parse_args()
    console = Console(stderr=True)

    ssh = f"  - {{name: docker-ssh, engine: docker, docker_host: '{args.ssh}', images: [cpu]}}"
    # A frozen copy of the context: the tag cannot drift while the working tree changes.
    context = Path(tempfile.mkdtemp(prefix="mxbench-ctx-"))
    images.ImageSpec("cpu", ROOT, "Dockerfile", "cpu").snapshot(context)
    text = MATRIX.format(base=args.base_image, context=context, ssh=ssh if args.ssh else "")
    m = parse_matrix(text)
    spec = images.resolve("cpu", m.images["cpu"], [ROOT])
    with console.status("building / finding the cpu image"):
        built = images.build(
            connect(m.host("docker")), spec, where="local socket", ca_bundle=args.ca_bundle
        )
    console.print(f"image {built.tag} ({'reused' if built.reused else 'built'})")

    cells = {c.host: c for c in expand(m)}
    engines = {}
    for name, cell in cells.items():
        host = m.host(name)
        engines[name] = engine_class(host.engine_name)(host, m)
        engines[name].prepare([cell])

    samples: dict[str, dict[str, list[float]]] = {n: {} for n in cells}
    with console.status("running") as status:
        for i in range(args.repeats):
            for name, cell in cells.items():
                status.update(f"repeat {i + 1}/{args.repeats}: {name}")
                t0 = time.monotonic()
                outcome = engines[name].run_one(cell)
                wall = time.monotonic() - t0
                rec = to_record(cell, outcome)
                step = rec.step
                if step is None or step.median is None or rec.metrics.startup_s is None:
                    raise SystemExit(f"{name}: {rec.status}: {rec.error}")
                s = samples[name]
                s.setdefault("wall_s", []).append(wall)
                s.setdefault("startup_s", []).append(rec.metrics.startup_s)
                s.setdefault("step_ms", []).append(step.median)

    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    table = Table(
        "engine",
        "wall per cell (s)",
        "bench startup (s)",
        "median step (ms)",
        "overhead vs local (s)",
        title=f"per-cell overhead, median of {args.repeats} (blog CNN 32x32, bs 4, 1+3 steps)",
    )
    for name, v in med.items():
        over = v["wall_s"] - med["local"]["wall_s"]
        table.add_row(
            name,
            f"{v['wall_s']:.2f}",
            f"{v['startup_s']:.2f}",
            f"{v['step_ms']:.1f}",
            "-" if name == "local" else f"{over:+.2f}",
        )
    Console().print(table)
    shutil.rmtree(context, ignore_errors=True)


if __name__ == "__main__":
    main()
