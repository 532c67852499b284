"""Several devices per cell: the batch arithmetic of weak and strong scaling, and which cells
can be measured data parallel, defined once for the matrix, the bench and the report.

Weak scaling (the default) holds the per-device batch: ``batch_size`` is what each device
gets and the global batch is ``devices x batch_size``. Strong scaling holds the global batch:
``batch_size`` is the global batch and each device gets ``batch_size / devices``.
Independent replicas (``scaling: independent``, tf_cnn_benchmarks' ``independent``) have weak
scaling's batches, but each device trains a replica of its own with no gradient all-reduce:
the no-communication reference (:mod:`mxbench.bench.parallel.independent`; torch: one process per
replica, as its data parallel's).

Light on purpose (the bench imports it inside images): params only.
"""

from __future__ import annotations

from typing import Any

# The backend's own data-parallel mechanism, by Keras backend, in one process and across
# several (``nodes``). torch: always across processes, one device each (Keras 3 has no
# distribution for it; ours is mxbench.bench.parallel.torch_workers): ``devices: N`` on one host is
# N processes started by the bench (mxbench.bench.parallel.torch_launch), ``nodes: N`` Slurm's tasks.
MECHANISMS = {
    "jax": "keras.distribution.DataParallel",
    "tensorflow": "tf.distribute.MirroredStrategy",
}
ONE_DEVICE_PER_PROCESS = ("torch",)
ACROSS_PROCESSES = {
    "jax": "keras.distribution.DataParallel",  # its mesh spans jax.distributed's processes
    "tensorflow": "tf.distribute.MultiWorkerMirroredStrategy",
    "torch": "torch.distributed gradient all_reduce",  # the process group's backend added
}
INDEPENDENT = "independent"  # the scaling of replicas with no all-reduce
INDEPENDENT_MECHANISM = "independent replicas (no gradient all-reduce)"


def batches(batch_size: int, devices: int, scaling: str) -> tuple[int, int]:
    """(global batch, per-device batch) of a cell's ``batch_size`` on ``devices``."""
    if scaling != "strong":  # weak, and independent replicas: the per-device batch held
        return batch_size * devices, batch_size
    return batch_size, batch_size // devices


def total_devices(p: Any) -> int:
    """Devices one cell trains on over all its processes (``p``: a cell's params)."""
    return int(p.devices) * int(getattr(p, "nodes", 1))


def global_batch(p: Any) -> int:
    """Examples per training step over every device of every process."""
    return batches(p.batch_size, total_devices(p), p.scaling)[0]


def per_device_batch(p: Any) -> int:
    """Examples each device gets per step."""
    return batches(p.batch_size, total_devices(p), p.scaling)[1]


def processes(p: Any) -> int:
    """Processes one cell trains in: Slurm's tasks (``nodes``), and on a backend that drives
    one device per process (torch) one per device."""
    per_task = int(p.devices) if p.backend in ONE_DEVICE_PER_PROCESS else 1
    return int(getattr(p, "nodes", 1)) * per_task


def process_batch(p: Any) -> int:
    """Examples one process feeds per step (its devices' share of the global batch)."""
    return per_device_batch(p) * (total_devices(p) // processes(p))


def problem(
    backend: str, devices: int, scaling: str, batch_size: Any, epochs: Any = None,
    nodes: int = 1, allreduce: str = "native",
) -> tuple[str, str] | None:  # fmt: skip
    """Why a cell of these values cannot be measured on ``devices`` devices in each of
    ``nodes`` processes: (the parameter to name, why), or None when it can. ``batch_size``
    may be a search's ``max`` (a word)."""
    if nodes > 1 and backend not in ACROSS_PROCESSES:
        known = ", ".join(sorted(ACROSS_PROCESSES))
        return ("nodes", f"{nodes}: several processes run on the {known} backends only; "
                         f"use nodes: 1 on {backend}")  # fmt: skip
    if allreduce != "native" and (backend != "torch" or nodes * devices <= 1):
        return ("allreduce", f"{allreduce}: the all-reduce's dtype is chosen only where "
                             "mxbench all-reduces: the torch backend on several devices "
                             "(devices or nodes > 1); JAX's and TensorFlow's mechanisms "
                             "reduce in the gradients' own dtype")  # fmt: skip
    if allreduce != "native" and scaling == INDEPENDENT:
        return ("allreduce", f"{allreduce}: independent replicas all-reduce nothing; "
                             "use allreduce: native with scaling: independent")  # fmt: skip
    if nodes > 1 and scaling == INDEPENDENT:
        return ("scaling", f"{scaling}: independent replicas run on one host (nodes 1)")
    if scaling == INDEPENDENT and isinstance(batch_size, str):
        return ("batch_size", f"{batch_size}: independent replicas need a fixed batch size")
    if nodes > 1 and isinstance(batch_size, str):
        return ("batch_size", f"{batch_size}: a batch-size search runs in one process")
    devices *= nodes
    if devices <= 1:
        return None
    if epochs:
        return ("devices", f"{devices}: training runs (epochs) measure one device (only 1)")
    if scaling == "strong" and isinstance(batch_size, int) and batch_size % devices:
        return (
            "batch_size",
            f"{batch_size}: strong scaling splits the global batch over {devices} devices, "
            f"so it must be a multiple of {devices}",
        )
    if scaling == "strong" and isinstance(batch_size, str):
        return ("batch_size", f"{batch_size}: a batch-size search runs weak scaling only")
    return None
