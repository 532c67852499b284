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

- **Several processes** (``nodes`` > 1): one per Slurm task, launched by srun. JAX:
  ``jax.distributed.initialize`` finds its peers from Slurm's own variables (the first
  node of the job coordinates), the CPU's collectives over gloo; ``DataParallel`` spans
  every process's devices. TensorFlow: ``MultiWorkerMirroredStrategy`` from a
  ``TF_CONFIG`` each task writes from Slurm's variables (:mod:`mxbench.bench.parallel.workers`).
  PyTorch (Keras 3 has no torch distribution): ``torch.distributed`` from torchrun's
  variables each task derives from Slurm's, the weights broadcast from rank 0 and the
  gradients all-reduced before the model's own optimizer applies them
  (:mod:`mxbench.bench.parallel.torch_workers`; one device per process). PyTorch's ``devices``
  on one host are processes too, one per device, which the bench starts itself
  (:mod:`mxbench.bench.parallel.torch_launch`).
  Each process feeds its own devices' share of the global batch (JAX: Keras's
  auto-sharding off; TensorFlow: each worker's dataset, distributed from a function;
  synthetic examples seeded by the process's rank, so each feeds its own), and only the
  first process prints the record.

The batch a process feeds is its devices' share of the global one
(:func:`mxbench.matrix.scale.process_batch`: the global batch in one process); each backend splits
it over the devices. Devices cut from one CPU share its cores: their timings are
plumbing, not scaling, and the record says that too (``distribution.shared_cores``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mxbench.bench.parallel import interconnect, torch_launch, torch_workers, workers
from mxbench.matrix import scale
from mxbench.matrix.params import Params
from mxbench.records.record import Distribution, Record

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
    processes: int = 1
    strategy: Any = None  # TensorFlow's MirroredStrategy
    distribution: Any = None  # Keras's DataParallel (JAX)
    notes: list[str] = field(default_factory=list)

    @property
    def torch_group(self) -> bool:
        """PyTorch's processes in one ``torch.distributed`` group (independent replicas'
        processes have none: nothing is broadcast, averaged or gathered)."""
        return (self.p.backend == "torch" and self.processes > 1
                and self.mechanism != scale.INDEPENDENT_MECHANISM)  # fmt: skip


def xla_flags(current: str | None, devices: int) -> str:
    """``XLA_FLAGS`` with N host devices, the user's other flags kept (an earlier device
    count of theirs replaced)."""
    kept = [f for f in (current or "").split() if not f.startswith(FORCE_HOST_DEVICES + "=")]
    return " ".join([*kept, f"{FORCE_HOST_DEVICES}={devices}"])


def before_import(p: Params) -> None:
    """What must happen before the backend is imported: JAX's host devices, and meeting
    the cell's other processes (before anything asks JAX for a device)."""
    if p.devices > 1 and p.backend == "jax":
        os.environ["XLA_FLAGS"] = xla_flags(os.environ.get("XLA_FLAGS"), p.devices)
    if p.nodes > 1 and p.backend == "jax":
        _join(importlib.import_module("jax"), p)


def rank(p: Params) -> int:
    """This process's place among its cell's (Slurm's task id, or the rank the torch launch
    gave it; 0 in a cell of one)."""
    if p.nodes > 1:
        return int(os.environ.get("SLURM_PROCID", "0"))
    return torch_launch.rank() if scale.processes(p) > 1 else 0


def first_process(p: Params) -> bool:
    """Whether this process speaks for its cell: always, but in a cell of several processes
    only the first (Slurm's task 0); the others train and keep quiet."""
    return rank(p) == 0


def setup(p: Params) -> Plan | None:
    """After the backend is imported and before anything runs on it: the N devices and the
    mechanism over them (None: one device, nothing to do). RuntimeError when the host has
    fewer devices than asked (an error record, not a usage error: it is the host's)."""
    if scale.total_devices(p) <= 1:
        return None
    import keras

    versions = {"keras": keras.__version__}
    if p.backend == "jax":
        return _jax(p, versions)
    if p.backend == "torch":
        return _torch(p, versions)
    return tensorflow_plan(p, versions)


def _jax(p: Params, versions: dict[str, str]) -> Plan:
    import keras

    jax: Any = importlib.import_module("jax")
    versions["jax"] = jax.__version__
    local = jax.local_devices()
    gpus = [d for d in local if d.platform == "gpu"]
    enough_devices(gpus or local, p)
    mine = {d.id for d in (gpus or local)[: p.devices]}
    chosen = [d for d in jax.devices() if d.id in mine or d.process_index != jax.process_index()]
    chosen = chosen if p.nodes > 1 else chosen[: p.devices]
    spread = keras.distribution.DataParallel(devices=chosen)
    spread.auto_shard_dataset = p.nodes <= 1  # several processes: each feeds its own shard
    keras.distribution.set_distribution(spread)
    names = [f"{d.platform}:{d.id}" for d in chosen]
    shared = not gpus and (p.devices > 1 or (p.nodes > 1 and _tasks_share_a_node()))
    return Plan(p, scale.MECHANISMS["jax"], names, shared, versions, distribution=spread,
                processes=p.nodes)  # fmt: skip


def _tasks_share_a_node() -> bool:
    """Whether Slurm put two of the job's tasks on one node (``SLURM_TASKS_PER_NODE``:
    ``2``, ``1(x2)``, ``2,1``): their CPUs are then one host's cores."""
    counts = re.findall(r"(\d+)(?:\(x\d+\))?", os.environ.get("SLURM_TASKS_PER_NODE", ""))
    return any(int(c) > 1 for c in counts)


def _one_of_the_tasks(p: Params) -> None:
    """RuntimeError outside a Slurm job of the cell's processes (``nodes`` tasks; torch:
    ``nodes`` x ``devices``, one per device)."""
    tasks, want = (
        os.environ.get("SLURM_NTASKS") or os.environ.get("SLURM_NPROCS"),
        scale.processes(p),
    )
    if tasks != str(want):
        raise RuntimeError(
            f"nodes {p.nodes}: this process is not one of a Slurm job's {want} tasks "
            f"(SLURM_NTASKS={tasks}); several processes run through a Slurm host"
        )


def _join(jax: Any, p: Params) -> None:
    """Meet the cell's other processes (Slurm's tasks): ``jax.distributed`` reads the job's
    node list, task count and rank from Slurm's variables; on CPUs the collectives go over
    gloo. RuntimeError outside a Slurm job of ``nodes`` tasks."""
    _one_of_the_tasks(p)
    # before any device is touched; a GPU's collectives are NCCL's whatever this says
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize()


def tensorflow_plan(p: Params, versions: dict[str, str]) -> Plan:
    """The TensorFlow plan of ``p``'s devices: ``MirroredStrategy`` over this host's GPUs, or
    over its CPU split into ``devices`` logical devices (jit_compile off); a Slurm worker of
    ``MultiWorkerMirroredStrategy`` when ``nodes`` > 1. Records the version in ``versions``."""
    tf: Any = importlib.import_module("tensorflow")
    versions["tensorflow"] = tf.__version__
    if p.nodes > 1:
        return _tf_workers(tf, p, versions)
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
    enough_devices(found, p)
    names = [f"{kind}:{i}" for i in range(p.devices)]
    strategy = tf.distribute.MirroredStrategy(names)
    mechanism = scale.MECHANISMS["tensorflow"]
    return Plan(p, mechanism, names, not gpus, versions, strategy=strategy, notes=notes)


def _tf_workers(tf: Any, p: Params, versions: dict[str, str]) -> Plan:
    """This Slurm task as one worker of ``MultiWorkerMirroredStrategy``."""
    _one_of_the_tasks(p)
    strategy, names, listen = workers.strategy(tf, p.devices, os.environ)
    gpus = bool(tf.config.list_physical_devices("GPU"))
    notes = [f"TF_CONFIG from Slurm: workers at {listen}", workers.REDUCE_MENDED]
    notes += [] if gpus else [JIT_OFF]
    mechanism = scale.ACROSS_PROCESSES["tensorflow"]
    shared = not gpus and _tasks_share_a_node()
    return Plan(p, mechanism, names, shared, versions, p.nodes, strategy, notes=notes)


def _torch(p: Params, versions: dict[str, str]) -> Plan:
    """This process as one of a ``torch.distributed`` group, one device each: a Slurm task
    (``nodes``), or one of the processes the bench started on this host (``devices``)."""
    here = p.nodes == 1
    if here:
        found, source = torch_launch.rendezvous(os.environ), "processes started by the bench"
    else:
        _one_of_the_tasks(p)
        found, source = torch_workers.rendezvous(os.environ), "from Slurm's variables"
    torch: Any = importlib.import_module("torch")
    versions["torch"] = str(torch.__version__)
    group, master = torch_workers.join(torch, found, launched_here=here)
    world = torch.distributed.get_world_size()
    kind = "cuda" if group == "nccl" else "cpu"
    names = [f"rank{r}:{kind}" for r in range(world)]
    notes = [f"process group {group}, rendezvous at {master} ({source})",
             "weights broadcast from rank 0; gradients averaged by all_reduce before the "
             "optimizer applies them"]  # fmt: skip
    notes += [threads_note(torch, world)] if here else []
    shared = group == "gloo" and (here or _tasks_share_a_node())
    mechanism = f"{scale.ACROSS_PROCESSES['torch']} ({group})"
    return Plan(p, mechanism, names, shared, versions, world, notes=notes)


def threads_note(torch: Any, world: int) -> str:
    """What the record says of the CPU threads of the bench's ``world`` torch processes."""
    each = f"{world} processes, {torch.get_num_threads()} CPU thread(s) each"
    return f"{each} (OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS')})"


def replicate(plan: Plan | None, model: Any) -> None:
    """After the model is compiled: what the mechanism needs of it (PyTorch's processes:
    rank 0's weights everywhere, the optimizer averaging gradients; the others: nothing)."""
    if plan is not None and plan.torch_group:
        torch_workers.replicate(importlib.import_module("torch"), model, plan.p.allreduce)


def enough_devices(found: list[Any], p: Params) -> None:
    """RuntimeError when ``found``, the devices the backend can use, are fewer than the cell's
    ``devices`` (an error record: the host's, not the matrix's)."""
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


def feed(plan: Plan | None, ds: Any) -> Any:
    """The input as the mechanism takes it: TensorFlow's workers each their own dataset (the
    others: ``ds`` itself, the backend splits it)."""
    if plan is None or plan.strategy is None or plan.processes <= 1:
        return ds
    return workers.per_worker(plan.strategy, ds, plan.p.devices, scale.per_device_batch(plan.p))


def batch_params(p: Params) -> Params:
    """``p`` with this process's batch as its batch size (the global batch in a cell of one
    process): what its input is made of."""
    import msgspec

    return msgspec.structs.replace(p, batch_size=scale.process_batch(p))


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


def _per_replica(variable: Any) -> list[float]:
    """A scalar variable's value on each replica: JAX's addressable shards, TensorFlow's
    mirrored values (one value where it is not spread)."""
    import numpy as np

    value = getattr(variable, "value", variable)
    shards = getattr(value, "addressable_shards", None)
    parts = [s.data for s in shards] if shards else getattr(value, "values", None) or [value]
    return [float(np.asarray(part).reshape(-1)[0]) for part in parts]


def _loss_scales(plan: Plan, model: Any) -> list[float]:
    """The dynamic loss scale per replica, each distinct value once (agreeing replicas:
    one); empty without a loss-scale optimizer. PyTorch's processes: each one's, gathered."""
    if plan.torch_group:
        return sorted(set(torch_workers.loss_scales(importlib.import_module("torch"), model)))
    scale_var = getattr(getattr(model, "optimizer", None), "dynamic_scale", None)
    if scale_var is None:
        return []
    try:
        return sorted(set(_per_replica(scale_var)))
    except Exception:  # not to be read on this backend: say nothing rather than guess
        return []


def _allreduce_dtype(model: Any) -> str | None:
    weights = getattr(model, "trainable_weights", None) or []
    return str(getattr(weights[0], "dtype", None) or "") or None if weights else None


def _checksums(plan: Plan, model: Any) -> list[float]:
    """Each PyTorch process's sum of its weights (every process gathers; others: none)."""
    if not plan.torch_group:
        return []
    return torch_workers.checksums(importlib.import_module("torch"), model)


def _replicas(plan: Plan, model: Any, sums: list[float]) -> int | None:
    """Replicas holding the variables: TensorFlow's workers each find their own, summed;
    PyTorch's processes each one, counted by the weights they sent."""
    if sums:
        return len(sums)
    found = replicas(model)
    if plan.strategy is None or plan.processes <= 1 or found is None:
        return found
    return workers.replicas_in_sync(importlib.import_module("tensorflow"), plan.strategy, found)


def fill(plan: Plan | None, rec: Record, model: Any, design: str) -> None:
    """The record's ``distribution`` (one device: left out)."""
    if plan is None:
        return
    p = plan.p
    if p.backend == "jax":  # the flags this process ran with: the host devices added
        rec.settings.xla_flags = os.environ.get("XLA_FLAGS")
    sums = _checksums(plan, model)  # a collective: before anything may differ by process
    rec.distribution = Distribution(
        devices=p.devices,
        processes=plan.processes,
        nodes=os.environ.get("SLURM_JOB_NODELIST") if p.nodes > 1 else None,
        replicas=_replicas(plan, model, sums),
        scaling=p.scaling,
        global_batch=scale.global_batch(p),
        per_device_batch=scale.per_device_batch(p),
        device_names=list(plan.device_names),
        mechanism=plan.mechanism,
        versions=dict(plan.versions),
        shared_cores=plan.shared_cores,
        design=design,  # type: ignore[arg-type]
        allreduce_dtype=_allreduce_dtype(model) if p.allreduce == "native" else p.allreduce,
        loss_scale_replicas=_loss_scales(plan, model),
        weight_checksums=sums,
        notes=list(plan.notes),
        interconnect=interconnect.read(plan.device_names),  # nvidia-smi topo -m, NCCL
    )
