"""`mxbench bench`: measure one cell in this process and print one JSON record on stdout.

Everything else (TensorFlow's logs, Keras' prints, progress) goes to stderr. Exit 0 with
a record whatever the measurement's outcome (``ok``, ``oom``, ``error``); exit 2 with one
line for bad arguments. Never imports docker, pandas or matplotlib; TensorFlow/Keras only
inside.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from mxbench.bench.params import BenchParams, validate
from mxbench.bench.stdio import stdout_to_stderr, write_line

_IMPORTED_AT = time.time()


def bench(
    model: str = typer.Option("blog-cnn", help="Benchmark model (blog-cnn: the published CNN)."),
    policy: str = typer.Option(
        "float32", help="Dtype policy: float32, mixed_float16, mixed_bfloat16, float16 (pure)."
    ),
    batch_size: int = typer.Option(32, "--batch-size", help="Images per training step."),
    image_size: int = typer.Option(256, "--image-size", help="Input side in pixels (>= 16)."),
    steps: int = typer.Option(50, help="Timed training steps."),
    warmup_steps: int = typer.Option(5, "--warmup-steps", help="Untimed steps first."),
    data: str = typer.Option(
        "synthetic", help="'synthetic', or a directory in Imagenette layout (train/<class>/)."
    ),
    jit_compile: str = typer.Option("auto", "--jit-compile", help="XLA: auto, on or off."),
) -> None:
    """Measure one cell (one fresh process) and print one JSON result record on stdout."""
    params = validate(
        BenchParams(
            model=model,
            policy=policy,
            batch_size=batch_size,
            image_size=image_size,
            data=data,
            warmup_steps=warmup_steps,
            steps=steps,
            jit_compile=jit_compile,
        )
    )
    from mxbench.bench.cell import run_cell
    from mxbench.bench.probe import process_start_time

    started = process_start_time() or _IMPORTED_AT
    with stdout_to_stderr() as real_stdout, _progress(params) as on_step:
        record = run_cell(params, started_at=started, on_step=on_step)
        write_line(real_stdout, json.dumps(record, default=str))
    status = record["status"]
    median = record.get("metrics", {}).get("step_ms", {}).get("median")
    summary = f"{params.policy} bs={params.batch_size} {params.image_size}px: {status}"
    typer.echo(summary + (f", median {median:.2f} ms/step" if median else ""), err=True)


@contextmanager
def _progress(params: BenchParams) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on an interactive stderr; nothing (and no cost) otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    total = params.warmup_steps + params.steps
    with Progress(
        TextColumn(f"{params.policy} bs={params.batch_size}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        auto_refresh=False,
    ) as bar:
        task = bar.add_task("warm-up", total=total)

        def on_step(done: int) -> None:
            phase = "warm-up" if done < params.warmup_steps else "timed"
            bar.update(task, completed=done, description=phase, refresh=True)

        yield on_step
