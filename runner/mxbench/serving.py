"""What a serving cell (``mode: infer``) may be asked, checked once for the matrix and for
``mxbench bench``; and which combinations of the axes are not cells of their own.

``call``, ``quantize``, ``weights`` and ``train_policy`` describe an inference call: a
training cell with one set would measure the same training as without it, so a matrix that
sweeps them beside ``mode: [train, infer]`` gets them on its infer cells only
(:func:`cell_values`). A batch-size search (``batch_size: max``) answers a training
question: refused with infer, as are several devices or processes (data parallel is
training's). ``epochs`` and a data folder go with ``weights: trained`` (they
name the training run whose weights are served; the folder's validation split is the gate's)
or a weights file (the data folder only), never with the build's own weights.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mxbench.matrix.params import SYNTHETIC, WEIGHTS_NONE, WEIGHTS_TRAINED, field
from mxbench.matrix.search import SEARCH

INFER = "infer"
TRAIN = "train"
SERVING_ONLY = ("call", "quantize", "weights", "train_policy")  # infer cells' alone
WEIGHTS_SUFFIX = ".weights.h5"  # Keras' save_weights format


def cell_values(combo: Mapping[str, Any]) -> dict[str, Any]:
    """One combination of parameter values as a cell measures it: a training cell with the
    serving-only parameters at their defaults (several combinations may then be one cell)."""
    if combo.get("mode", TRAIN) == INFER:
        return dict(combo)
    return {**combo, **{name: field(name).default for name in SERVING_ONLY if name in combo}}


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
    if found := weights_problem(values):
        return found
    if SEARCH in values.get("batch_size", []):
        return "batch_size", "max searches the training's largest batch: not with mode infer"
    for name in ("devices", "nodes"):  # serving is one model on one device here
        more = [v for v in values.get(name, []) if v != 1]
        if more:
            return name, f"{more[0]}: infer cells run on one device in one process (only 1)"
    return None


def weights_problem(values: Mapping[str, Sequence[Any]]) -> tuple[str, str] | None:
    """What infer cells' weights ask that cannot be: a file that is not there or not a
    Keras weights file, ``trained`` without the training run it names (``epochs``, a data
    folder), ``epochs`` or a data folder with the build's own weights, ``train_policy``
    without ``trained``."""
    weights = list(values.get("weights", [WEIGHTS_NONE]))
    for w in weights:
        if w in (WEIGHTS_NONE, WEIGHTS_TRAINED):
            continue
        if not w.endswith(WEIGHTS_SUFFIX):
            return "weights", f"{w}: none, trained, or a Keras {WEIGHTS_SUFFIX} file"
        if not Path(w).is_file() or not os.access(w, os.R_OK):
            return "weights", f"{w}: no such file, or not readable"
    epochs = [v for v in values.get("epochs", []) if v is not None]
    if epochs and WEIGHTS_TRAINED not in weights:
        return "epochs", "a training run: infer cells serve its weights with weights: trained"
    if WEIGHTS_TRAINED in weights and not epochs:
        return "weights", "trained: serves a training run's weights: set epochs (and data)"
    if weights == [WEIGHTS_NONE] and any(d != SYNTHETIC for d in values.get("data", [])):
        return "data", (
            "infer cells with their build's weights take synthetic inputs (data: synthetic); "
            "a data folder is the gate's with weights: trained or a weights file"
        )
    policies = [v for v in values.get("train_policy", []) if v is not None]
    if policies and WEIGHTS_TRAINED not in weights:
        return "train_policy", f"{policies[0]}: names the training of weights: trained"
    return None
