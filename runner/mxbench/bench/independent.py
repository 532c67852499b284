"""Independent replicas (``scaling: independent``): the no-communication reference.

One replica of the model per device, each built on its device and trained on a batch of its
own (``batch_size`` each, weak scaling's batches) with no gradient all-reduce, all at once:
tf_cnn_benchmarks' ``independent`` variable update. Each replica is ``model.fit`` in a
thread of its own, inside ``keras.device`` (JAX: ``jax.default_device``; TensorFlow:
``tf.device``), so the frameworks run the replicas side by side (both release the GIL while
a step runs). The timed windows start together (a barrier once every replica's warm-up
steps have finished) and each replica is timed on its own clock (:mod:`mxbench.bench.process.timing`).

What the record says (:class:`mxbench.records.record.Distribution`):

- ``replica_timings``: each replica's device, the device its variables were found on after
  training (that it really ran there), its images/s over its own window and its timed steps:
  what the report's per-device health sweep judges (:mod:`mxbench.report.sections.scaling_reference`).
- ``metrics``: the replicas as one: a step is the slowest replica's k-th step (what a data
  parallel step would take if its all-reduce cost nothing), images/s is every replica's
  examples over the common window (the first timed start to the last timed end). The map
  compares data parallel with it at the same N: what the all-reduce costs.

The devices are those data parallel would use (:mod:`mxbench.bench.parallel.distribute`): JAX's first
N GPUs or forced host devices, TensorFlow's first N GPUs or logical CPUs (``jit_compile``
off there too, so the two compare like with like); no mechanism is set over them.

PyTorch drives one device per process, so its replicas are the N processes the bench starts
as for data parallel (:mod:`mxbench.bench.parallel.torch_launch`; rank k on GPU k, or the host's CPU
cores shared), with no process group: each trains its one replica here, its warm-up's end
met with the others' through the launcher (:func:`mxbench.bench.parallel.torch_launch.meet`, the
barrier), and sends its step log; the launcher makes the record as one (:func:`merge`, the
same arithmetic as :func:`combined` over one process's threads).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from mxbench.bench.parallel import distribute, torch_launch, torch_workers
from mxbench.bench.process.timing import StepLog, callback_base, split, step_timer, window_figures
from mxbench.matrix import scale
from mxbench.matrix.params import Params
from mxbench.records.record import Record, Replica, StepStats

BARRIER_S = 3600.0  # a replica's warm-up that takes longer than this has failed


def setup(p: Params) -> distribute.Plan | None:
    """The N devices, with no mechanism over them (RuntimeError: the host has fewer); None:
    one device (a replica alone: as a one-device cell)."""
    if p.devices <= 1:
        return None
    import keras

    versions = {"keras": keras.__version__}
    if p.backend == "torch":
        return _torch(p, versions)
    if p.backend == "jax":
        jax: Any = importlib.import_module("jax")
        versions["jax"] = jax.__version__
        local = jax.local_devices()
        gpus = [d for d in local if d.platform == "gpu"]
        distribute.enough_devices(gpus or local, p)
        names = [f"{d.platform}:{d.id}" for d in (gpus or local)[: p.devices]]
        return distribute.Plan(p, scale.INDEPENDENT_MECHANISM, names, not gpus, versions)
    plan = distribute.tensorflow_plan(p, versions)  # the devices split as data parallel's are
    plan.strategy, plan.mechanism = None, scale.INDEPENDENT_MECHANISM
    if distribute.JIT_OFF in plan.notes:
        plan.notes.append("independent replicas: jit_compile off as data parallel's is on "
                          "these devices, so the two compare like with like")  # fmt: skip
    return plan


def _torch(p: Params, versions: dict[str, str]) -> distribute.Plan:
    """This process as one of the N the bench started, its replica on its own device (GPU
    k for rank k; on a CPU the host's cores, shared), in no process group."""
    torch: Any = importlib.import_module("torch")
    versions["torch"] = str(torch.__version__)
    found = torch_launch.rendezvous(os.environ)
    gpu = torch_workers.own_gpu(torch, found, launched_here=True)
    world = int(found["WORLD_SIZE"])
    names = [f"rank{k}:cpu" if gpu is None else f"rank{k}:cuda:{k}" for k in range(world)]
    notes = [
        f"{world} processes started by the bench, one replica each, no process group; "
        "their timed windows start together",
        distribute.threads_note(torch, world),
    ]
    return distribute.Plan(p, scale.INDEPENDENT_MECHANISM, names, gpu is None, versions, world,
                           notes=notes)  # fmt: skip


def _mine(plan: distribute.Plan) -> list[str]:
    """The devices this process trains a replica on: every one, but PyTorch's its own."""
    if plan.p.backend == "torch":
        return [plan.device_names[torch_launch.rank()]]
    return plan.device_names


def _on(plan: distribute.Plan, name: str) -> Any:
    """Where a replica is built and trained: inside ``keras.device`` (PyTorch's process:
    its device is torch's current one already)."""
    if plan.p.backend == "torch":
        return contextlib.nullcontext()
    import keras

    return keras.device(name)


def build(plan: distribute.Plan, build_one: Callable[[], Any]) -> list[Any]:
    """One arm per device of this process: ``build_one()`` (the cell's model, compiled,
    with its input) inside ``keras.device`` of each device in turn."""
    arms = []
    for name in _mine(plan):
        with _on(plan, name):
            arms.append(build_one())
    return arms


def _aligned(meet: Callable[[], Any], warmup_steps: int) -> Any:
    """A callback that holds a replica's first timed step until every replica has finished
    its warm-up (``meet``: the barrier; the timed windows start together)."""
    warmed = threading.Event()
    if warmup_steps <= 0:
        warmed.set()

    class Aligned(callback_base()):  # type: ignore[misc]
        async_safe = True  # as the step timer: no device sync per step

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if batch == warmup_steps:
                warmed.wait()
                meet()

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if batch == warmup_steps - 1:
                warmed.set()

    return Aligned()


def train(p: Params, plan: distribute.Plan, arms: Sequence[Any]) -> list[StepLog]:
    """Fit every replica of this process at once, one thread each inside its device; each
    one's step log (PyTorch's process: its one replica's, sent to the launcher too). The
    first replica's exception is raised again (the others stop at the barrier)."""
    spe = p.steps_per_execution
    total, warmup = (p.warmup_steps + p.steps) // spe, p.warmup_steps // spe
    barrier = threading.Barrier(len(arms))
    torch_ = p.backend == "torch"  # the barrier is across processes: the launcher's
    meet = torch_launch.meet if torch_ else lambda: barrier.wait(timeout=BARRIER_S)
    logs = [StepLog() for _ in arms]
    errors: list[BaseException] = []

    def fit(k: int) -> None:
        try:
            with _on(plan, _mine(plan)[k]):
                arms[k].model.fit(
                    arms[k].ds, epochs=1, steps_per_epoch=total * spe, verbose=0,
                    shuffle=False, callbacks=[_aligned(meet, warmup),
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
    if torch_:
        torch_launch.share_log(logs[0])
    return logs


def combined(p: Params, logs: Sequence[StepLog]) -> dict[str, Any]:
    """The replicas as one fit's parts (:func:`mxbench.bench.process.timing.split`): each timed step
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
    name = str(getattr(value, "device", "") or "")  # /job:localhost/.../device:CPU:1; cuda:1
    return name.rsplit("device:", 1)[-1] or None


def fill(p: Params, rec: Record, plan: distribute.Plan, arms: Sequence[Any],
         parts: dict[str, Any]) -> None:  # fmt: skip
    """The record's replicas, once :func:`mxbench.bench.parallel.distribute.fill` has written the
    rest: no all-reduce, and each replica's own figures."""
    dist = rec.distribution
    assert dist is not None, "distribute.fill ran first"
    spe = p.steps_per_execution
    mine = _mine(plan)
    found = [device_of(a.model) for a in arms]
    if p.backend == "torch":  # the process's rank before the device torch names: rank1:cpu
        ranks = [name.split(":")[0] for name in mine]
        found = [f"{r}:{f}" if f else None for r, f in zip(ranks, found, strict=True)]
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
        for name, where, part in zip(mine, found, parts["each"], strict=True)
    ]


def merge(p: Params, records: list[Record], logs: list[StepLog], started_at: float) -> Record:
    """The cell's record from its processes' (PyTorch: one replica each, in rank order, all
    ok): rank 0's, its timings the replicas' as one (:func:`combined`, the windows on one
    host's monotonic clock), its replicas every process's."""
    rec = records[0]
    parts = combined(p, logs)
    flops = rec.model.flops_per_example if rec.model else None
    spe = p.steps_per_execution
    found = window_figures(parts, scale.global_batch(p), p.steps, spe, started_at, flops)
    found["step_ms"] = msgspec.convert(found["step_ms"], StepStats)
    rec.metrics = msgspec.structs.replace(rec.metrics, **found)
    dist = rec.distribution
    assert dist is not None, "each process filled its distribution"
    dist.replica_timings = [
        t for r in records if r.distribution for t in r.distribution.replica_timings
    ]
    dist.replicas = len({t.variables_on for t in dist.replica_timings if t.variables_on}) or None
    return rec
