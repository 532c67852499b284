"""Does the policy still train like float32? Checked cheaply in every cell, after the timed
steps (nothing here runs inside them).

Two answers go into the record's ``convergence``:

- **skipped steps**: how many of the warm-up and timed steps the dynamic loss scaler skipped
  because their gradients overflowed (:func:`mxbench.bench.model.loss_scale.skipped_steps`).
- **one-step check** (policies other than float32): the gradient of one training step of the
  cell's model, from the initial weights the cell started with and the batch it trained on
  (loss scaled as the cell's first step scaled it, then divided out), against the gradient of
  a float32 build of the same model with the same weights, on the same batch. The cosine
  similarity of the two (every trainable weight, flattened) is scored; below
  :data:`THRESHOLD` (TorchBench's for mixed precision) the report flags it. A step with
  non-finite gradients is not scored: ``skipped`` where a dynamic scaler would skip it, ``not
  finite`` where nothing would (the step writes NaN / Inf into the weights). Dropout is off
  for both passes (its masks would differ); other random layers are named in the note.
  Below the threshold a control tells the precision from the model: float32's gradient with
  only its input rounded to the policy's 16-bit type (``float32_rounded_input_cosine``). A
  deep network at initialization can be so sensitive that this alone turns its gradient
  (ResNet-50 at 32 px: a relative change of 1e-4 in the input gives a cosine of 0.89).

Cost: one more build of the model under float32 (a paired process's float32 arm, its work
over, instead) and two eager forward and backward passes on the first :data:`CHECK_BATCH`
examples of the cell's batch, fewer where a timed step is slow (:func:`examples_for`; ``batch``
in the record: a float32 pass at a large batch would need more memory than the cell's own
training, and an emulated bfloat16 pass of 32 examples takes seconds); the
record says how long (``check_s``). It runs after the peak memory was read and after the
bench printed the measured record, so it can neither raise the cell's peak nor, killed,
take the timed figures with it. Whatever fails here is written in the record's note; it
never turns a measured cell into an error.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np

from mxbench.bench.model import loss_scale
from mxbench.matrix.params import BASELINE, Params
from mxbench.records.codec import tail
from mxbench.records.record import Convergence

THRESHOLD = 0.99
CHECK_BATCH = 32  # examples the check's passes run on, at most
CHECK_S = 0.5  # fewer where a step is slow: about this long a pass of the policy's, at least
CHECK_MIN = 8  # ... this many examples (or the whole batch, where it has fewer)


def examples_for(batch: int, step_ms: float | None) -> int:
    """How many examples the check's passes run on: :data:`CHECK_BATCH` at most, fewer where
    the cell's timed step (``step_ms``, at ``batch`` examples) is slow, so that the policy's
    pass takes about :data:`CHECK_S` at the timed pace (an emulated bfloat16 step of 1.7 s at
    batch 32: 10 examples, not 32), never under :data:`CHECK_MIN`, never more than the batch has."""
    if step_ms is None or not step_ms > 0 or batch < 1:
        return CHECK_BATCH
    pace = round(batch * CHECK_S * 1000 / step_ms)
    return min(batch, max(CHECK_MIN, min(CHECK_BATCH, pace)))


class Initial:
    """The weights a cell's model starts from, kept on disk for the check (a copy in memory
    would be in the cell's peak: the check must not weigh on the memory answer)."""

    def __init__(self, model: Any) -> None:
        import tempfile

        fd, self.path = tempfile.mkstemp(prefix="mxbench-initial-", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, *model.get_weights())

    def load(self) -> list[Any]:
        with np.load(self.path) as found:
            return [found[f"arr_{i}"] for i in range(len(found.files))]

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def skipped(model: Any, steps: int) -> Convergence:
    """The record's convergence part as far as the training steps tell it."""
    return Convergence(steps=steps, skipped_steps=loss_scale.skipped_steps(model, steps))


def check(
    p: Params,
    found: Convergence,
    model: Any,
    initial: Initial,
    source: Any,
    reference: Any = None,
    examples: int = CHECK_BATCH,
) -> Convergence:
    """``found`` with the one-step check of ``model`` (the cell's, which started from the
    weights ``initial``) against float32, on the batch ``(x, y)`` it trained on, or the next
    batch of its input ``source`` (a tf.data dataset starts again: its first batch).
    ``reference``: a float32 build of the same model whose own work is over (a paired
    process's float32 arm: its weights are set to ``initial``), else one is built.
    ``examples``: the check's passes run on the batch's first that many (:func:`examples_for`)."""
    if p.policy == BASELINE:
        return found
    t0 = time.perf_counter()
    out = msgspec.structs.replace(found, check="error")
    try:
        batch = _numpy(source if isinstance(source, tuple) else first_batch(source))
        batch = _head(batch, min(examples, CHECK_BATCH))
        out = _compare(p, out, model, initial.load(), batch, reference)
    except Exception as exc:  # the check is a diagnosis: it never fails the cell
        out.note = tail(f"{type(exc).__name__}: {exc}")
    finally:
        initial.drop()
    out.check_s = round(time.perf_counter() - t0, 3)
    return out


def first_batch(ds: Any) -> tuple[Any, Any]:
    """The first ``(x, y)`` of a cell's input (a tf.data dataset, a PyDataset, a generator)."""
    indexed = hasattr(ds, "__getitem__") and hasattr(ds, "__len__")  # a PyDataset
    item = ds[0] if indexed else next(iter(ds))
    return item[0], item[1]


def _head(batch: tuple[Any, Any], n: int = CHECK_BATCH) -> tuple[Any, Any]:
    """The first ``n`` examples of every array of the batch."""
    import keras

    x, y = keras.tree.map_structure(lambda a: a[:n] if getattr(a, "ndim", 0) else a, batch)
    return x, y


def _numpy(batch: Any) -> Any:
    import keras

    def one(t: Any) -> Any:
        if hasattr(t, "cpu"):  # a torch tensor, maybe on a GPU
            t = t.detach().cpu()
        return np.asarray(t)

    return keras.tree.map_structure(one, batch)


def _compare(
    p: Params, out: Convergence, model: Any, initial: list[Any], batch: tuple[Any, Any],
    ref_model: Any = None,
) -> Convergence:  # fmt: skip
    from mxbench.bench.model import harness
    from mxbench.bench.model.harness import set_policy

    model.set_weights(initial)
    scale = loss_scale.first_scale(model)
    if ref_model is None:
        reference = harness.prepare(msgspec.structs.replace(p, policy=BASELINE), set_policy)
        harness.compile_model(reference, "off")
        ref_model = reference.model
    ref_model.set_weights([np.asarray(w, np.float32) for w in initial])
    random = _no_dropout(model) | _no_dropout(ref_model)
    grads = _gradients(model, batch, scale)
    ref = _gradients(ref_model, batch, 1.0)
    out.loss_scale = scale
    out.batch = len(keras_first(batch[0]))
    if random:
        out.note = f"random layers left on (their noise is in the cosine): {sorted(random)}"
    if not all(np.isfinite(g).all() for g in grads):
        out.check = "skipped" if loss_scale.scaler(model) is not None else "not finite"
        return out
    flat, base = np.concatenate(grads), np.concatenate(ref)
    norm, base_norm = float(np.linalg.norm(flat)), float(np.linalg.norm(base))
    if base_norm == 0.0:
        out.check = "no gradient"
        return out
    out.check = "scored"
    out.cosine = _cosine(flat, base)
    out.norm_ratio = round(norm / base_norm, 6)
    live = base != 0
    out.underflow_share = round(float(np.mean(flat[live] == 0)), 6)
    if out.cosine < THRESHOLD:  # is it the precision, or the model's own sensitivity?
        rounded = _rounded_input(batch[0], model)
        if rounded is not None:
            again = np.concatenate(_gradients(ref_model, (rounded, batch[1]), 1.0))
            out.float32_rounded_input_cosine = _cosine(again, base)
    return out


def keras_first(x: Any) -> Any:
    """The first array of an input structure (a dict or list of inputs: any one)."""
    import keras

    return keras.tree.flatten(x)[0]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return round(float(a @ b) / norms, 6) if norms else 0.0


def _rounded_input(x: Any, model: Any) -> Any:
    """``x`` rounded to the model's 16-bit compute type and back to float32 (None: no float
    input, or no 16-bit compute type)."""
    import keras

    from mxbench.bench.model.facts import leaves

    dtype = next((str(lay.compute_dtype) for lay in leaves(model) if lay.weights), None)
    if dtype not in ("float16", "bfloat16") or not isinstance(x, np.ndarray):
        return None
    if not np.issubdtype(x.dtype, np.floating):
        return None
    cast = keras.ops.cast(keras.ops.cast(x, dtype), "float32")
    return np.asarray(keras.ops.convert_to_numpy(cast))


def _no_dropout(model: Any) -> set[str]:
    """Turn dropout off (rate 0) in every layer; the classes of other random layers."""
    from mxbench.bench.model.facts import leaves

    kept = set()
    for layer in leaves(model):
        if getattr(layer, "seed_generator", None) is None:
            continue
        if isinstance(getattr(layer, "rate", None), float | int):
            layer.rate = 0.0
        else:
            kept.add(type(layer).__name__)
    return kept


def _gradients(model: Any, batch: tuple[Any, Any], scale: float) -> list[np.ndarray]:
    """The gradient of ``scale`` x the training loss on ``batch`` over the trainable weights,
    divided by ``scale``, flattened float64 per weight (as the backend's train step does)."""
    import keras

    x, y = batch
    name = keras.backend.backend()
    if name == "jax":
        grads = _jax(model, x, y, scale)
    elif name == "torch":
        grads = _torch(model, x, y, scale)
    else:
        grads = _tensorflow(model, x, y, scale)
    return [
        np.zeros(int(np.prod(v.shape)), np.float64)
        if g is None
        else np.ravel(np.asarray(keras.ops.convert_to_numpy(g), np.float64)) / scale
        for g, v in zip(grads, model.trainable_variables, strict=True)
    ]


def _tensorflow(model: Any, x: Any, y: Any, scale: float) -> list[Any]:
    import tensorflow as tf

    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = model.compute_loss(x=x, y=y, y_pred=pred, training=True)
        scaled = loss * tf.cast(scale, loss.dtype)
    return list(tape.gradient(scaled, model.trainable_variables))


def _torch(model: Any, x: Any, y: Any, scale: float) -> list[Any]:
    import keras

    x, y = keras.tree.map_structure(keras.ops.convert_to_tensor, (x, y))
    model.zero_grad()
    pred = model(x, training=True)
    loss = model.compute_loss(x=x, y=y, y_pred=pred, training=True)
    (loss * scale).backward()
    return [v.value.grad for v in model.trainable_variables]


def _jax(model: Any, x: Any, y: Any, scale: float) -> list[Any]:
    import jax

    trainable = [v.value for v in model.trainable_variables]
    others = [v.value for v in model.non_trainable_variables]
    metrics = [v.value for v in model.metrics_variables]

    def loss(weights: list[Any]) -> Any:
        value, _ = model.compute_loss_and_updates(
            weights, others, metrics, x, y, None, training=True
        )
        return value * scale

    with _without_optimizer(model):  # compiled: op by op, JAX's backward pass is slow
        return list(jax.jit(jax.grad(loss))(trainable))


@contextlib.contextmanager
def _without_optimizer(model: Any) -> Iterator[None]:
    """JAX's stateless loss scales by the optimizer's current scale when it has one: the
    check scales by its own."""
    optimizer = model.optimizer
    model.optimizer = None
    try:
        yield
    finally:
        model.optimizer = optimizer
