"""Weights a serving cell serves, and its quality on real data against float32's.

A training run's first seed saves its final weights (``--save-weights``: Keras'
``save_weights``, written to a temporary name and renamed, so a reader never sees half a
file). A serving cell loads a weights file (``weights: trained``: the training run's, given
by ``mxbench run`` as ``--weights-file``; or the user's ``.weights.h5``) into the model it
built under its policy, before any quantization, so every precision serves the same trained
weights.

With loaded weights and a data folder, the gate is **top-1 on the folder's validation
split** (:func:`data_gate`): the served model's and a float32 build's loaded from the same
file, on the same images; the served precision passes at 99 % of float32's top-1 or more
(MLPerf's rule for ResNet-50). Every precision measures it, float32 too (its own top-1 is
the reference then), so the report can show the top-1 of every trained x served pair.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from mxbench.bench.model import harness
from mxbench.matrix.params import BASELINE, WEIGHTS_NONE, Params
from mxbench.records.inference import GATE_RELATIVE_TOP1, Gate

BATCH = 64  # validation images per call
GATE_CHUNK = 32  # examples per call of the synthetic gate: its memory stays small


@dataclass(frozen=True)
class WeightFiles:
    """The files of one bench process: where a training run saves its final weights, and
    what a serving cell loads (None: neither)."""

    save: str | None = None
    load: str | None = None


NO_FILES = WeightFiles()


def save(model: Any, path: str) -> None:
    """The model's weights to ``path`` (a ``.weights.h5`` name), atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{os.getpid()}.{target.name}")
    model.save_weights(str(partial))
    os.replace(partial, target)


def load(model: Any, path: str, p: Params) -> None:
    """``path``'s weights into ``model``; a clear error when the file is not there or does not
    fit the model."""
    where = "the training run's weights" if p.weights != path else "weights"
    if not Path(path).is_file():
        raise harness.ModelError(
            f"{where} {path}: not there (the training run failed, or has not run yet: "
            "mxbench run --resume measures this cell again)"
        )
    try:
        model.load_weights(path)
    except Exception as exc:  # a file of another model: Keras names the layer
        raise harness.ModelError(
            f"{where} {path}: do not fit {p.model}: {type(exc).__name__}: {exc}"
        ) from exc


def gates_on_data(p: Params, files: WeightFiles) -> bool:
    """Whether the cell's gate is top-1 on real data: loaded weights and a data folder."""
    return files.load is not None and not p.synthetic and p.weights != WEIGHTS_NONE


def top1(model: Any, p: Params, prepared: harness.Prepared, backend: str) -> tuple[float, int]:
    """The model's top-1 accuracy on the data folder's validation split, and its images."""
    from mxbench.bench.model import data

    binary = harness.label_kind(model, prepared.labels) == "binary"
    split = data.validation_split(p.data) or "val"
    size = prepared.image or p.image_hw
    ds = data.image_folder(
        p.data, BATCH, size, split=split, binary=binary, endless=False, shuffle=False
    )
    right = seen = 0
    for i in range(len(ds)):
        x, y = ds[i]
        out = outputs(model, x, backend)
        guess = out.argmax(axis=-1) if out.shape[-1] > 1 else (out[..., 0] > 0.5)
        truth = y.reshape(len(y), -1)[:, 0] if binary else y
        right += int(np.sum(guess.astype(np.int64) == truth.astype(np.int64)))
        seen += len(y)
    return (right / seen if seen else 0.0), seen


def data_gate(p: Params, served: Any, prepared: harness.Prepared, backend: str, path: str) -> Gate:
    """The served model's top-1 on the validation split against a float32 build's loaded
    from the same file."""
    t0 = time.perf_counter()
    ours, n = top1(served, p, prepared, backend)
    if p.policy == BASELINE and p.quantize == "none":
        theirs = ours  # the cell is float32 itself
        note = "float32 itself"
    else:
        base = harness.prepare(
            msgspec.structs.replace(p, policy=BASELINE, quantize="none"), harness.set_policy
        )
        load(base.model, path, p)
        theirs, _ = top1(base.model, p, base, backend)
        note = "float32 loaded from the same weights file"
    relative = ours / theirs if theirs > 0 else None
    return Gate(
        ran=True,
        kind="data",
        examples=n,
        top1=round(ours, 6),
        float32_top1=round(theirs, 6),
        top1_relative=round(relative, 6) if relative is not None else None,
        passed=relative is not None and relative >= GATE_RELATIVE_TOP1,
        gate_s=round(time.perf_counter() - t0, 3),
        note=f"{note}; the validation split of {p.data}; after the timed calls and the memory "
        "reading",
    )


@contextlib.contextmanager
def no_grad(backend: str) -> Iterator[None]:
    """PyTorch records no autograd graph for an inference call (as Keras' predict does)."""
    if backend != "torch":
        yield
        return
    import torch

    with torch.no_grad():
        yield


def outputs(model: Any, x: Any, backend: str) -> np.ndarray:
    """The model's first output on ``x``, in chunks, as float32 on the host."""
    import keras

    parts = []
    n = len(x[0] if isinstance(x, list) else x)
    for start in range(0, n, GATE_CHUNK):
        part = slice(start, start + GATE_CHUNK)
        chunk = keras.tree.map_structure(lambda a, part=part: a[part], x)
        with no_grad(backend):
            out = model(
                keras.tree.map_structure(keras.ops.convert_to_tensor, chunk), training=False
            )
        first = out[0] if isinstance(out, (list, tuple)) else out
        if isinstance(first, dict):
            first = next(iter(first.values()))
        parts.append(np.asarray(keras.ops.convert_to_numpy(first), dtype=np.float32))
    return np.concatenate(parts)
