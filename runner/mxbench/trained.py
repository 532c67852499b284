"""Trained weights from a training run to a serving cell (``weights: trained``).

The first seed of every training run (``epochs``, repeat None or 0) saves its final weights
to ``<results>/weights/<its cell key>.weights.h5`` (Keras' ``save_weights``). A serving cell
with ``weights: trained`` loads the file of *its* training run, found in the same plan: the
training cell of the same host and setup (model, backend, input, data, epochs, and every
other parameter a training run reads) under ``train_policy`` (unset: the serving cell's own
policy), at the serving cell's batch size when such a training run exists, else the one
training run of that setup; where the plan has none, a training run an earlier ``mxbench
run`` left in the same results directory (its record ok, its file there): train with one
matrix, serve at other batch sizes with another. None, or several at other batch sizes:
exit 2, naming ``weights``. The serving cells run after every training cell of their host
(the plan's order; a batch engine's jobs may run at once: a serving cell whose file is not
there yet ends as an error record saying so, and ``--resume`` measures it again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from mxbench.cells.cell import Cell
from mxbench.errors import UsageError
from mxbench.matrix.params import WEIGHTS_TRAINED, Params, field, names
from mxbench.records.record import Record

FOLDER = "weights"  # under the results directory
# What tells a training run's setup apart from a serving cell's: set alike on both sides
# (and how precisely either is measured: steps, evaluations, the checks).
_NEUTRAL: dict[str, Any] = {
    **{name: field(name).default for name in names("precision", "repeat")},
    "policy": "float32",
    "batch_size": 1,
    "mode": "train",
    "call": "direct",
    "quantize": "none",
    "weights": "none",
    "train_policy": None,
}


def weights_path(results: Path, key: str) -> Path:
    """Where the training cell ``key`` leaves its final weights."""
    return results / FOLDER / f"{key}.weights.h5"


def saves(p: Params) -> bool:
    """Whether a cell leaves its final weights: a training run's first seed."""
    return p.training_run and not p.repeat


def link(
    cells: Sequence[Cell], results: Path, stored: Callable[[], Mapping[str, Record]] = dict
) -> list[Cell]:
    """``cells`` with the weights files filled in (absolute paths), serving cells of
    ``weights: trained`` after every other cell (stable otherwise); ``stored``: the results
    directory's latest record per cell, asked only where the plan has no training run for a
    serving cell (an earlier run of another matrix into the same directory). UsageError when
    a serving cell has no training run to serve, or several."""
    root = results.resolve()
    runs: dict[tuple[Any, ...], list[Source]] = {}
    out: list[Cell] = []
    for c in cells:
        if saves(c.params):
            c = replace(c, save_weights=str(weights_path(root, c.key)))
            key = (c.host, _setup(c.params), c.params.policy)
            runs.setdefault(key, []).append(Source(c.params, str(c.save_weights)))
        out.append(c)
    served = [c for c in out if c.params.weights == WEIGHTS_TRAINED and c.params.mode == "infer"]
    if any(_wanted(c) not in runs for c in served):
        for r in stored().values():
            path = weights_path(root, r.cell or "")
            if r.status == "ok" and saves(r.params) and r.host and path.is_file():
                key = (r.host, _setup(r.params), r.params.policy)
                if key not in runs:  # the plan's own training run comes first
                    runs.setdefault(key, []).append(Source(r.params, str(path)))
    rest = [c for c in out if c not in served]
    return rest + [replace(c, weights_file=_source(c, runs.get(_wanted(c), []))) for c in served]


@dataclass(frozen=True)
class Source:
    """A training run whose weights a serving cell may load: its params and its file."""

    params: Params
    path: str


def _setup(p: Params) -> Params:
    return msgspec.structs.replace(p, **_NEUTRAL)


def _wanted(c: Cell) -> tuple[Any, ...]:
    p = c.params
    return (c.host, _setup(p), p.train_policy or p.policy)


def _source(c: Cell, found: list[Source]) -> str:
    p = c.params
    policy = p.train_policy or p.policy
    same = [t for t in found if t.params.batch_size == p.batch_size]
    chosen = same or found
    if len(chosen) != 1:
        what = (
            f"several training runs of this setup under {policy} (batch sizes "
            f"{', '.join(str(t.params.batch_size) for t in chosen)}), none at batch "
            f"{p.batch_size}: serve at one of them, or train at one batch size"
            if chosen
            else f"no training run of this setup under {policy} in the matrix or in the results "
            f"directory (mode: train with epochs {p.epochs} on {p.data}, policy {policy})"
        )
        raise UsageError(f"weights: trained: {c.label()}: {what}")
    return chosen[0].path
