"""Data parallel over ``devices`` > 1, through each backend's own mechanism.

- **JAX**: ``keras.distribution.DataParallel`` over the first N devices. On a host without
  GPUs the process gets N host devices from XLA (``--xla_force_host_platform_device_count``
  in ``XLA_FLAGS``, set by :func:`before_import` before JAX is imported, beside any flags
  the user set).
- **TensorFlow**: ``tf.distribute.MirroredStrategy`` over the first N GPUs, or, on a host
  without GPUs, over N logical CPUs (the CPU split by ``set_logical_device_configuration``
  before TensorFlow's runtime starts). The model is built and compiled in the strategy's
  scope; ``jit_compile`` is turned off there on CPUs (as Keras's own CI does: XLA breaks
  under MirroredStrategy on CPU), and the record says so.

The batch a cell feeds is the global one (:func:`mxbench.scale.global_batch`); each backend
splits it over the devices. Devices cut from one CPU share its cores: their timings are
plumbing, not scaling, and the record says that too (``distribution.shared_cores``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mxbench import scale
from mxbench.params import Params
from mxbench.results import Distribution, Record

FORCE_HOST_DEVICES = "--xla_force_host_platform_device_count"
JIT_OFF = "jit_compile turned off: XLA breaks under MirroredStrategy on CPU devices"


@dataclass
class Plan:
    """The devices of one process's cells, and how they are driven."""

    p: Params
    mechanism: str
    device_names: list[str]
    shared_cores: bool
    versions: dict[str, str] = field(default_factory=dict)
    strategy: Any = None  # TensorFlow's MirroredStrategy
    distribution: Any = None  # Keras's DataParallel (JAX)
    notes: list[str] = field(default_factory=list)


def xla_flags(current: str | None, devices: int) -> str:
    """``XLA_FLAGS`` with N host devices, the user's other flags kept (an earlier device
    count of theirs replaced)."""
    kept = [f for f in (current or "").split() if not f.startswith(FORCE_HOST_DEVICES + "=")]
    return " ".join([*kept, f"{FORCE_HOST_DEVICES}={devices}"])


def before_import(p: Params) -> None:
    """What must happen before the backend is imported: JAX's host devices."""
    if p.devices > 1 and p.backend == "jax":
        os.environ["XLA_FLAGS"] = xla_flags(os.environ.get("XLA_FLAGS"), p.devices)


def setup(p: Params) -> Plan | None:
    """After the backend is imported and before anything runs on it: the N devices and the
    mechanism over them (None: one device, nothing to do). RuntimeError when the host has
    fewer devices than asked (an error record, not a usage error: it is the host's)."""
    if p.devices <= 1:
        return None
    import keras

    versions = {"keras": keras.__version__}
    if p.backend == "jax":
        return _jax(p, versions)
    return _tensorflow(p, versions)


def _jax(p: Params, versions: dict[str, str]) -> Plan:
    import keras

    jax: Any = importlib.import_module("jax")
    versions["jax"] = jax.__version__
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    found = gpus or jax.devices("cpu")
    _enough(found, p)
    chosen = found[: p.devices]
    spread = keras.distribution.DataParallel(devices=chosen)
    keras.distribution.set_distribution(spread)
    names = [f"{d.platform}:{d.id}" for d in chosen]
    return Plan(p, scale.MECHANISMS["jax"], names, not gpus, versions, distribution=spread)


def _tensorflow(p: Params, versions: dict[str, str]) -> Plan:
    tf: Any = importlib.import_module("tensorflow")
    versions["tensorflow"] = tf.__version__
    gpus = tf.config.list_physical_devices("GPU")
    notes: list[str] = []
    if not gpus:
        cpus = tf.config.list_physical_devices("CPU")
        config = tf.config.LogicalDeviceConfiguration
        try:
            tf.config.set_logical_device_configuration(cpus[0], [config()] * p.devices)
        except RuntimeError as exc:  # the runtime started before (another cell's process?)
            raise RuntimeError(f"devices {p.devices}: cannot split the CPU: {exc}") from None
        notes.append(JIT_OFF)
    kind = "GPU" if gpus else "CPU"
    found = tf.config.list_logical_devices(kind)
    _enough(found, p)
    names = [f"{kind}:{i}" for i in range(p.devices)]
    strategy = tf.distribute.MirroredStrategy(names)
    mechanism = scale.MECHANISMS["tensorflow"]
    return Plan(p, mechanism, names, not gpus, versions, strategy=strategy, notes=notes)


def _enough(found: list[Any], p: Params) -> None:
    if len(found) < p.devices:
        raise RuntimeError(
            f"devices {p.devices}: this host has {len(found)} device(s) the backend can use"
        )


@contextlib.contextmanager
def scope(plan: Plan | None) -> Iterator[None]:
    """Where models are built and compiled: the strategy's scope (TensorFlow); Keras's
    distribution set again (JAX: ``keras.backend.clear_session``, which the float32
    reference build ends with, clears it; it stays set for the training)."""
    if plan is not None and plan.distribution is not None:
        import keras

        keras.distribution.set_distribution(plan.distribution)
    if plan is None or plan.strategy is None:
        yield
        return
    with plan.strategy.scope():
        yield


def jit_compile(plan: Plan | None, asked: str) -> str:
    """The jit_compile a model is compiled with: off under MirroredStrategy on CPUs."""
    return "off" if plan is not None and JIT_OFF in plan.notes else asked


def batch_params(p: Params) -> Params:
    """``p`` with the global batch as its batch size: what the input is made of."""
    import msgspec

    return msgspec.structs.replace(p, batch_size=scale.global_batch(p))


def replicas(model: Any) -> int | None:
    """The devices the model's first variable is found on: JAX's sharding's device set,
    TensorFlow's mirrored values (None: not to be told)."""
    if not model.weights:
        return None
    value = getattr(model.weights[0], "value", model.weights[0])
    sharding = getattr(value, "sharding", None)
    if sharding is not None and hasattr(sharding, "device_set"):
        return len(sharding.device_set)
    mirrored = getattr(value, "values", None)
    if isinstance(mirrored, (tuple, list)):
        return len(mirrored)
    return 1


def fill(plan: Plan | None, rec: Record, model: Any, design: str) -> None:
    """The record's ``distribution`` (one device: left out)."""
    if plan is None:
        return
    p = plan.p
    if p.backend == "jax":  # the flags this process ran with: the host devices added
        rec.settings.xla_flags = os.environ.get("XLA_FLAGS")
    rec.distribution = Distribution(
        devices=p.devices,
        replicas=replicas(model),
        scaling=p.scaling,
        global_batch=scale.global_batch(p),
        per_device_batch=scale.per_device_batch(p),
        device_names=list(plan.device_names),
        mechanism=plan.mechanism,
        versions=dict(plan.versions),
        shared_cores=plan.shared_cores,
        design=design,  # type: ignore[arg-type]
        notes=list(plan.notes),
    )
