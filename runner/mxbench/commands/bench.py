"""`mxbench bench`: measure one cell in this process and print one JSON record on stdout.

Everything else (TensorFlow's logs, Keras' prints, progress) goes to stderr. Exit 0 with
a record whatever the measurement's outcome (``ok``, ``oom``, ``error``); exit 2 with one
line for bad arguments. Never imports docker, pandas or matplotlib; TensorFlow/Keras only
inside.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import msgspec
import typer

from mxbench.matrix import params, scale
from mxbench.matrix.params import Params

if TYPE_CHECKING:
    from mxbench.records.record import Record

if TYPE_CHECKING:
    from mxbench.bench.model.served import WeightFiles

_IMPORTED_AT = time.time()


def bench(
    pair_with: str = "",
    with_batch_sizes: str = "",
    save_weights: str = "",
    weights_file: str = "",
    **options: Any,
) -> None:
    """Measure one cell (one fresh process) and print one JSON result record on stdout;
    with --pair-with, the cell and the cells of those policies, interleaved (one record
    each, this cell's first); with --with-batch-sizes too, the same at those batch sizes."""
    # imported here: every other command starts without the bench's modules
    from mxbench.bench.parallel import distribute
    from mxbench.bench.params import validate
    from mxbench.bench.process.stdio import stdout_to_stderr, write_line
    from mxbench.records.codec import encode

    params = validate(Params(**options))
    others = _pair_with(pair_with, params)
    sizes = _with_batch_sizes(with_batch_sizes, params, others)
    files = _weight_files(params, save_weights, weights_file)
    from mxbench.bench.evidence.probe import process_start_time
    from mxbench.bench.process.cell import run_cell
    from mxbench.bench.process.paired import run_paired

    started = process_start_time() or _IMPORTED_AT
    with stdout_to_stderr() as real_stdout, _progress(params) as on_step:
        speaks = distribute.first_process(params)  # one record for a cell of processes

        def emit(record: Record) -> None:  # the last record printed is the one that counts
            if speaks:
                write_line(real_stdout, encode(record).decode().rstrip("\n"))

        if others:
            records = run_paired(params, others, started, emit, sizes)
        else:
            records = [
                run_cell(params, started_at=started, on_step=on_step, emit=emit, files=files)
            ]
        for record in records:
            emit(record)
    for record in records:
        step = record.step
        summary = (
            f"{record.params.policy} bs={record.params.batch_size} {params.image_size}px: "
            f"{record.status}"
        )
        typer.echo(summary + (f", median {step.median:.2f} ms/step" if step else ""), err=True)
    # The record is out: skip the interpreter's teardown (the framework's threads and
    # destructors), seconds per process that a run's time to answer paid for nothing
    # (the teardown of `mxbench run`'s closing line). Compilation caches are written at
    # compile time, not at exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _pair_with(text: str, p: Params) -> list[str]:
    """The policies of ``--pair-with a,b``: known, not the cell's own, each once."""
    from mxbench.errors import UsageError

    others = [x.strip() for x in text.split(",") if x.strip()]
    for x in others:
        if x not in params.POLICIES:
            raise UsageError(
                f"--pair-with {x!r}: expected policies among {', '.join(params.POLICIES)}"
            )
    aa = others == [p.policy]  # an A/A check: the same policy as both arms (doctor --noise)
    if (p.policy in others and not aa) or len(set(others)) != len(others):
        raise UsageError(
            f"--pair-with {text!r}: each policy once, not --policy {p.policy} "
            "(except alone: an A/A check)"
        )
    if others and (p.epochs or p.steps_per_execution > 1 or scale.processes(p) > 1
                   or p.mode != "train" or p.scaling == "independent"):  # fmt: skip
        raise UsageError(
            "--pair-with: training runs, --steps-per-execution > 1, --nodes > 1, torch's "
            "--devices > 1, --scaling "
            "independent and --mode infer run one policy per process"
        )
    return others


def _with_batch_sizes(text: str, p: Params, others: list[str]) -> list[int]:
    """The batch sizes of ``--with-batch-sizes 32,64``: whole numbers, each once, not the
    cell's own, and only with ``--pair-with`` (each is a paired pass of this process)."""
    from mxbench.bench.params import validate
    from mxbench.errors import UsageError

    words = [x.strip() for x in text.split(",") if x.strip()]
    if words and not others:
        raise UsageError("--with-batch-sizes: goes with --pair-with (a paired process)")
    if not all(w.isdigit() and int(w) > 0 for w in words):
        raise UsageError(f"--with-batch-sizes {text!r}: expected whole numbers, e.g. 32,64")
    sizes = [int(w) for w in words]
    if p.batch_size in sizes or len(set(sizes)) != len(sizes):
        raise UsageError(
            f"--with-batch-sizes {text!r}: each batch size once, not --batch-size {p.batch_size}"
        )
    for size in sizes:  # every pass's parameters hold as the cell's own do
        validate(msgspec.structs.replace(p, batch_size=size))
    return sizes


def _weight_files(p: Params, save: str, load: str) -> WeightFiles:
    """``--save-weights`` (a training run's first seed) and ``--weights-file`` (the file of
    ``--weights trained``; a weights file given as ``--weights`` is its own)."""
    from mxbench.bench.model.served import WeightFiles
    from mxbench.errors import UsageError
    from mxbench.matrix.params import WEIGHTS_NONE, WEIGHTS_TRAINED

    if save and not p.training_run:
        raise UsageError("--save-weights: a training run's (--epochs) final weights only")
    if p.weights == WEIGHTS_TRAINED and not load:
        raise UsageError(
            "--weights trained: give the training run's file as --weights-file (mxbench run "
            "does: docs/serving.md)"
        )
    if load and p.weights != WEIGHTS_TRAINED:
        raise UsageError("--weights-file: goes with --weights trained")
    own = p.weights if p.weights not in (WEIGHTS_NONE, WEIGHTS_TRAINED) else None
    return WeightFiles(save=save or None, load=load or own)


def _option(f: params.Field) -> inspect.Parameter:
    """The typer option of one parameter, from its declaration in :class:`Params`."""
    assert f.spec.flag is not None
    help = f.spec.help
    if f.choices:
        help += f" One of: {', '.join(f.choices)}."
    # Plain str / int: the values are checked by validate(), which names the option in one
    # line (typer's own check would print a multi-line box).
    return inspect.Parameter(
        f.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(f.default, f.spec.flag, help=help),
        annotation=int if f.is_int else float if f.is_float else str,
    )


def _text_option(name: str, flag: str, help: str) -> inspect.Parameter:
    """A string option of the bench's own (not a :class:`Params` field), empty by default."""
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option("", flag, help=help),
        annotation=str,
    )


PAIR_WITH = _text_option(
    "pair_with",
    "--pair-with",
    "Comma-separated policies measured in this process with --policy, in interleaved "
    "windows (paired design): one record per policy, --policy's first.",
)
WITH_BATCH_SIZES = _text_option(
    "with_batch_sizes",
    "--with-batch-sizes",
    "Comma-separated batch sizes also measured in this process (with --pair-with): one "
    "paired pass each, the passes in a random order; the records pass by pass, "
    "--batch-size's first.",
)
WEIGHT_OPTIONS = [
    _text_option(
        "save_weights",
        "--save-weights",
        "A training run: save its final weights here "
        "(.weights.h5; mxbench run gives the first seed's a file under RESULTS/weights/).",
    ),
    _text_option(
        "weights_file",
        "--weights-file",
        "With --weights trained: the training run's weights file to serve.",
    ),
]

# typer reads the options from the signature: one per parameter that has a bench flag.
bench.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        PAIR_WITH,
        WITH_BATCH_SIZES,
        *WEIGHT_OPTIONS,
        *(_option(f) for f in params.fields() if f.spec.flag),
    ],
    return_annotation=None,
)


@contextmanager
def _progress(params: Params) -> Iterator[Callable[[int], None] | None]:
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
