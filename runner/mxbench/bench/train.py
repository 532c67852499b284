"""A training run: the cell's model trained for ``epochs`` over an image folder's train
split and evaluated on its validation split, every ``eval_every`` epochs.

A speedup per step means nothing if the model no longer learns; this is what answers "to the
same accuracy". Each evaluation point records the epoch's mean training loss and metric, the
validation loss and metric (accuracy), the training time so far and the wall time. Training
time counts the epochs' steps only (from an epoch's start to the end of its last step,
synchronised by Keras' epoch logs), not the evaluations, whose frequency is the user's choice
of measuring resolution; the first epoch includes tracing and compilation, as it does in a
real run. The time to target is interpolated between the last evaluation below the target
and the first at or above it (linear in training time), and the record keeps the time between
those two evaluations as its resolution (``eval_every`` epochs: MLPerf's time-to-train takes
the later one; that is the upper end here).

Repeat k of a training run trains from seed k (initial weights, data order, flips), and every
policy of one seed starts from the same weights (float32's, copied). The step statistics of
the record are per-epoch means (ms per step of each epoch after the first), so the speed
tables show training runs next to timing cells.
"""

from __future__ import annotations

import math
import time
from typing import Any

import msgspec

from mxbench.bench.process.timing import summarize
from mxbench.matrix.params import Params
from mxbench.records.record import Metrics, Record, StepStats, Training, TrainPoint


def _curve_callback(points: list[TrainPoint], epoch_s: list[float]) -> Any:
    import keras

    class Curve(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
        """No batch hooks: Keras keeps its asynchronous dispatch within an epoch."""

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            self.begin = time.perf_counter()
            self.train_s = 0.0

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch_begin = time.perf_counter()
            self.test_begin: float | None = None

        def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
            self.test_begin = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            now = time.perf_counter()
            spent = (self.test_begin or now) - self.epoch_begin
            epoch_s.append(spent)
            self.train_s += spent
            logs = logs or {}
            if "val_loss" not in logs:
                return
            points.append(
                TrainPoint(
                    epoch=epoch + 1,
                    train_s=round(self.train_s, 4),
                    wall_s=round(now - self.begin, 4),
                    train_loss=_number(logs.get("loss")),
                    train_metric=_number(logs.get("accuracy")),
                    val_loss=_number(logs.get("val_loss")),
                    val_metric=_number(logs.get("val_accuracy")),
                )
            )

    return Curve()


def _number(value: Any) -> float | None:
    if value is None:
        return None
    x = float(value)
    return round(x, 6) if math.isfinite(x) else None


def crossing(points: list[TrainPoint], target: float | None) -> tuple[float, float, int] | None:
    """When the validation metric crossed ``target``: the training time interpolated between
    the last evaluation below it and the first at or above it, the time between those two
    (the resolution), and the epoch of the latter. None: never reached. Reached at the first
    evaluation: from the start of training (time 0, metric 0)."""
    if target is None:
        return None
    before = TrainPoint(epoch=0, train_s=0.0, val_metric=0.0)
    for x in points:
        value, t = x.val_metric, x.train_s
        if value is None or t is None:
            continue
        if value >= target:
            t0, v0 = before.train_s or 0.0, before.val_metric or 0.0
            share = (target - v0) / (value - v0) if value > v0 else 1.0
            return round(t0 + share * (t - t0), 4), round(t - t0, 4), x.epoch
        before = x
    return None


def run(p: Params, prepared: Any, rec: Record) -> None:
    """Train ``prepared.model`` (compiled) as ``p`` says; fill ``rec.train`` and the step
    statistics of ``rec.metrics``."""
    from mxbench.bench.model import data, harness

    assert p.epochs is not None
    model = prepared.model
    size = prepared.image or p.image_hw
    binary = harness.label_kind(model, prepared.labels) == "binary"
    val_split = data.validation_split(p.data) or "val"
    train_ds = data.image_folder(
        p.data, p.batch_size, size, seed=p.seed, flip=p.flip, binary=binary, endless=False
    )
    val_ds = data.image_folder(
        p.data, p.batch_size, size, split=val_split, binary=binary, endless=False, shuffle=False
    )
    points: list[TrainPoint] = []
    epoch_s: list[float] = []
    model.fit(
        train_ds,
        epochs=p.epochs,
        validation_data=val_ds,
        validation_freq=p.eval_every,
        verbose=0,
        callbacks=[_curve_callback(points, epoch_s)],
    )
    crossed = crossing(points, p.target)
    rec.train = Training(
        seed=p.seed,
        target=p.target,
        train_images=len(train_ds.spec.files),
        val_images=len(val_ds.spec.files),
        val_split=val_split,
        steps_per_epoch=len(train_ds),
        points=points,
        time_to_target_s=crossed[0] if crossed else None,
        target_resolution_s=crossed[1] if crossed else None,
        epochs_to_target=crossed[2] if crossed else None,
        classes=2 if binary else len(data.list_images(p.data)[2]),
    )
    steps = len(train_ds)
    later = epoch_s[1:] or epoch_s  # the first epoch includes tracing and compilation
    rec.metrics = Metrics(
        step_ms=msgspec.convert(summarize([s / steps for s in later]), StepStats),
        images_per_s=round(p.batch_size * steps * len(later) / sum(later), 3),
        warmup_ms=round(epoch_s[0] * 1000.0, 3),
        loss_first=points[0].train_loss if points else None,
        loss_last=points[-1].train_loss if points else None,
    )
    rec.settings.input_device = "host"
    rec.settings.jit_compile = bool(model.jit_compile)
