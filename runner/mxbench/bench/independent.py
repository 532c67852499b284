"""Independent replicas (``scaling: independent``): the no-communication reference.

One replica of the model per device, each built on its device and trained on a batch of its
own (``batch_size`` each, weak scaling's batches) with no gradient all-reduce, all at once:
tf_cnn_benchmarks' ``independent`` variable update. Each replica is ``model.fit`` in a
thread of its own, inside ``keras.device`` (JAX: ``jax.default_device``; TensorFlow:
``tf.device``), so the frameworks run the replicas side by side (both release the GIL while
a step runs). The timed windows start together (a barrier once every replica's warm-up
steps have finished) and each replica is timed on its own clock (:mod:`mxbench.bench.timing`).

What the record says (:class:`mxbench.results.Distribution`):

- ``replica_timings``: each replica's device, the device its variables were found on after
  training (that it really ran there), its images/s over its own window and its timed steps:
  what the report's per-device health sweep judges (:mod:`mxbench.report.scaling_reference`).
- ``metrics``: the replicas as one: a step is the slowest replica's k-th step (what a data
  parallel step would take if its all-reduce cost nothing), images/s is every replica's
  examples over the common window (the first timed start to the last timed end). The map
  compares data parallel with it at the same N: what the all-reduce costs.

The devices are those data parallel would use (:mod:`mxbench.bench.distribute`): JAX's first
N GPUs or forced host devices, TensorFlow's first N GPUs or logical CPUs (``jit_compile``
off there too, so the two compare like with like); no mechanism is set over them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from mxbench import scale
from mxbench.bench import distribute
from mxbench.bench.timing import StepLog, _callback_base, split, step_timer
from mxbench.params import Params
from mxbench.results import Record, Replica

BARRIER_S = 3600.0  # a replica's warm-up that takes longer than this has failed


def setup(p: Params) -> distribute.Plan | None:
    """The N devices, with no mechanism over them (RuntimeError: the host has fewer); None:
    one device (a replica alone: as a one-device cell)."""
    if p.devices <= 1:
        return None
    import keras

    versions = {"keras": keras.__version__}
    if p.backend == "jax":
        jax: Any = importlib.import_module("jax")
        versions["jax"] = jax.__version__
        local = jax.local_devices()
        gpus = [d for d in local if d.platform == "gpu"]
        distribute._enough(gpus or local, p)
        names = [f"{d.platform}:{d.id}" for d in (gpus or local)[: p.devices]]
        return distribute.Plan(p, scale.INDEPENDENT_MECHANISM, names, not gpus, versions)
    plan = distribute._tensorflow(p, versions)  # the devices split as data parallel's are
    plan.strategy, plan.mechanism = None, scale.INDEPENDENT_MECHANISM
    if distribute.JIT_OFF in plan.notes:
        plan.notes.append("independent replicas: jit_compile off as data parallel's is on "
                          "these devices, so the two compare like with like")  # fmt: skip
    return plan


def build(plan: distribute.Plan, build_one: Callable[[], Any]) -> list[Any]:
    """One arm per device: ``build_one()`` (the cell's model, compiled, with its input)
    inside ``keras.device`` of each device in turn."""
    import keras

    arms = []
    for name in plan.device_names:
        with keras.device(name):
            arms.append(build_one())
    return arms


def _aligned(barrier: threading.Barrier, warmup_steps: int) -> Any:
    """A callback that holds a replica's first timed step until every replica has finished
    its warm-up (the timed windows start together)."""
    warmed = threading.Event()
    if warmup_steps <= 0:
        warmed.set()

    class Aligned(_callback_base()):  # type: ignore[misc]
        async_safe = True  # as the step timer: no device sync per step

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if batch == warmup_steps:
                warmed.wait()
                barrier.wait(timeout=BARRIER_S)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if batch == warmup_steps - 1:
                warmed.set()

    return Aligned()


def train(p: Params, plan: distribute.Plan, arms: Sequence[Any]) -> list[StepLog]:
    """Fit every replica at once, one thread each inside its device; each one's step log.
    The first replica's exception is raised again (the others stop at the barrier)."""
    import keras

    spe = p.steps_per_execution
    total, warmup = (p.warmup_steps + p.steps) // spe, p.warmup_steps // spe
    barrier = threading.Barrier(len(arms))
    logs = [StepLog() for _ in arms]
    errors: list[BaseException] = []

    def fit(k: int) -> None:
        try:
            with keras.device(plan.device_names[k]):
                arms[k].model.fit(
                    arms[k].ds, epochs=1, steps_per_epoch=total * spe, verbose=0,
                    shuffle=False, callbacks=[_aligned(barrier, warmup),
                                              step_timer(logs[k], None, warmup)],
                )  # fmt: skip
        except BaseException as exc:  # handed to the main thread; the others stop waiting
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=fit, args=(k,), name=f"replica-{k}") for k in
               range(len(arms))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        first = next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                     errors[0])  # fmt: skip
        raise first
    return logs


def combined(p: Params, logs: Sequence[StepLog]) -> dict[str, Any]:
    """The replicas as one fit's parts (:func:`mxbench.bench.timing.split`): each timed step
    the slowest replica's, the window from the first timed start to the last end (``each``:
    every replica's own parts, its first timed step counted from the barrier)."""
    warmup = p.warmup_steps // p.steps_per_execution
    parts = [split(log, warmup) for log in logs]
    starts = [log.window_start if log.window_start is not None else part["first_timed_start"]
              for log, part in zip(logs, parts, strict=True)]  # fmt: skip
    for log, part, start in zip(logs, parts, starts, strict=True):
        # the first timed step from the barrier on, not from the warm-up's end (the wait)
        part["timed"][0] = log.ends[warmup] - start
    return {
        "first_step_s": max(x["first_step_s"] for x in parts),
        "warmup_s": max(x["warmup_s"] for x in parts),
        "timed": [max(steps) for steps in zip(*(x["timed"] for x in parts), strict=True)],
        "first_timed_start": min(x["first_timed_start"] for x in parts),
        "window_s": max(log.ends[-1] for log in logs) - min(starts),
        "each": parts,
    }


def device_of(model: Any) -> str | None:
    """The device a model's first variable lives on, named as the plan names devices
    (JAX: ``cpu:1``; TensorFlow: ``CPU:1``); None: not to be told."""
    if not model.weights:
        return None
    value = getattr(model.weights[0], "value", model.weights[0])
    devices = getattr(value, "devices", None)
    if callable(devices):  # a JAX array
        found = sorted(devices(), key=lambda d: d.id)
        return ",".join(f"{d.platform}:{d.id}" for d in found) or None
    name = str(getattr(value, "device", "") or "")  # /job:localhost/.../device:CPU:1
    return name.rsplit("device:", 1)[-1] or None


def fill(p: Params, rec: Record, plan: distribute.Plan, arms: Sequence[Any],
         parts: dict[str, Any]) -> None:  # fmt: skip
    """The record's replicas, once :func:`mxbench.bench.distribute.fill` has written the
    rest: no all-reduce, and each replica's own figures."""
    dist = rec.distribution
    assert dist is not None, "distribute.fill ran first"
    spe = p.steps_per_execution
    found = [device_of(a.model) for a in arms]
    dist.replicas = len({f for f in found if f}) or None  # devices holding a replica each
    dist.allreduce_dtype = None  # nothing is reduced
    dist.loss_scale_replicas = []  # each replica scales its own loss: no agreement to check
    dist.replica_timings = [
        Replica(
            device=name,
            variables_on=where,
            images_per_s=round(p.batch_size * p.steps / part["window_s"], 3),
            step_ms=[round(d / spe * 1000.0, 4) for d in part["timed"]],
        )
        for name, where, part in zip(plan.device_names, found, parts["each"], strict=True)
    ]
