"""Trained weights from a training run to a serving cell (``weights: trained``).

The first seed of every training run (``epochs``, repeat None or 0) saves its final weights
to ``<results>/weights/<its cell key>.weights.h5`` (Keras' ``save_weights``). A serving cell
with ``weights: trained`` loads the file of *its* training run, found in the same plan: the
training cell of the same host, image and setup (model, backend, input, data, epochs, and
every other parameter a training run reads) under ``train_policy`` (unset: the serving
cell's own policy), at the serving cell's batch size when such a training run exists, else
the one training run of that setup. None, or several at other batch sizes: exit 2, naming
``weights``. The serving cells run after every training cell of their host (the plan's order;
a batch engine's jobs may run at once: a serving cell whose file is not there yet ends as an
error record saying so, and ``--resume`` measures it again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from mxbench.cells import Cell
from mxbench.errors import UsageError
from mxbench.params import WEIGHTS_TRAINED, Params

FOLDER = "weights"  # under the results directory
# What tells a training run's setup apart from a serving cell's: set alike on both sides.
_NEUTRAL: dict[str, Any] = {
    "policy": "float32",
    "batch_size": 1,
    "repeat": None,
    "mode": "train",
    "call": "direct",
    "quantize": "none",
    "weights": "none",
    "train_policy": None,
}


def weights_path(results: Path, key: str) -> Path:
    """Where the training cell ``key`` leaves its final weights."""
    return results / FOLDER / f"{key}.weights.h5"


def _setup(c: Cell) -> tuple[Any, ...]:
    return (c.host, c.image, c.model_source, msgspec.structs.replace(c.params, **_NEUTRAL))


def saves(p: Params) -> bool:
    """Whether a cell leaves its final weights: a training run's first seed."""
    return p.training_run and not p.repeat


def link(cells: Sequence[Cell], results: Path) -> list[Cell]:
    """``cells`` with the weights files filled in (absolute paths), serving cells of
    ``weights: trained`` after every other cell (stable otherwise); UsageError when a
    serving cell has no training run to serve, or several."""
    root = results.resolve()
    runs: dict[tuple[Any, ...], list[Cell]] = {}
    out: list[Cell] = []
    for c in cells:
        if saves(c.params):
            c = replace(c, save_weights=str(weights_path(root, c.key)))
            runs.setdefault((*_setup(c), c.params.policy), []).append(c)
        out.append(c)
    served = [c for c in out if c.params.weights == WEIGHTS_TRAINED and c.params.mode == "infer"]
    rest = [c for c in out if c not in served]
    return rest + [replace(c, weights_file=_source(c, runs)) for c in served]


def _source(c: Cell, runs: dict[tuple[Any, ...], list[Cell]]) -> str:
    p = c.params
    policy = p.train_policy or p.policy
    found = runs.get((*_setup(c), policy), [])
    same = [t for t in found if t.params.batch_size == p.batch_size]
    chosen = same or found
    if len(chosen) != 1:
        what = (
            f"several training runs of this setup under {policy} (batch sizes "
            f"{', '.join(str(t.params.batch_size) for t in chosen)}), none at batch "
            f"{p.batch_size}: serve at one of them, or train at one batch size"
            if chosen
            else f"no training run of this setup under {policy} in the matrix (mode: train "
            f"with epochs {p.epochs} on {p.data}, policy {policy})"
        )
        raise UsageError(f"weights: trained: {c.label()}: {what}")
    path = chosen[0].save_weights
    assert path is not None
    return path
