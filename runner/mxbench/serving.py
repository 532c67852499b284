"""What a serving cell (``mode: infer``) may be asked, checked once for the matrix and for
``mxbench bench``; and which combinations of the axes are not cells of their own.

``call`` and ``quantize`` describe an inference call: a training cell with either set would
measure the same training as without it, so a matrix that sweeps them beside ``mode: [train,
infer]`` gets them on its infer cells only (:func:`applies`). A training run (``epochs``) and
a batch-size search (``batch_size: max``) answer training questions: refused with infer, as
are several devices or processes (data parallel is training's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mxbench.params import SYNTHETIC, field
from mxbench.search import SEARCH

INFER = "infer"
TRAIN = "train"
SERVING_ONLY = ("call", "quantize")  # parameters an infer cell alone uses


def applies(combo: Mapping[str, Any]) -> bool:
    """Whether one combination of parameter values is a cell: a training cell only with
    ``call`` and ``quantize`` at their defaults."""
    if combo.get("mode", TRAIN) == INFER:
        return True
    return all(combo.get(name, field(name).default) == field(name).default for name in SERVING_ONLY)


def problem(values: Mapping[str, Sequence[Any]]) -> tuple[str, str] | None:
    """(parameter, why) when the values each parameter takes (a matrix's sweep, or one
    cell's) ask for something a serving cell cannot be; None when they are fine."""
    modes = set(values.get("mode", [TRAIN]))
    if INFER not in modes:
        for name in SERVING_ONLY:
            other = [v for v in values.get(name, []) if v != field(name).default]
            if other:
                return name, f"{other[0]}: applies to infer cells only (set mode: infer)"
        return None
    if any(v is not None for v in values.get("epochs", [])):
        return "epochs", "a training run: infer cells time inference only (mode: train)"
    if any(d != SYNTHETIC for d in values.get("data", [])):
        return "data", "infer cells call the model on synthetic inputs (data: synthetic)"
    if SEARCH in values.get("batch_size", []):
        return "batch_size", "max searches the training's largest batch: not with mode infer"
    for name in ("devices", "nodes"):  # serving is one model on one device here
        more = [v for v in values.get(name, []) if v != 1]
        if more:
            return name, f"{more[0]}: infer cells run on one device in one process (only 1)"
    return None
