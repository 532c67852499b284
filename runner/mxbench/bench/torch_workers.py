"""PyTorch across processes: ``torch.distributed`` over a Slurm job's tasks, or over the
processes the bench starts on one host (:mod:`mxbench.bench.parallel.torch_launch`), the gradients
averaged inside Keras's own fit.

Keras 3 (3.15) has no distribution for its torch backend, so this is ours, kept thin:

- **Rendezvous** as torchrun's, from Slurm's own variables (:func:`rendezvous`):
  ``MASTER_ADDR`` the step's first node (:func:`mxbench.bench.parallel.workers.step_hosts`),
  ``MASTER_PORT`` the first port of the job's block (:func:`mxbench.bench.parallel.workers.port_block`:
  from the job id, as TensorFlow's workers get theirs), ``RANK`` = ``SLURM_PROCID``,
  ``WORLD_SIZE`` = ``SLURM_NTASKS``, ``LOCAL_RANK`` = ``SLURM_LOCALID``. Each task then calls
  ``torch.distributed.init_process_group``: gloo on CPUs, NCCL on GPUs (each task its own
  GPU: by local rank, unless Slurm bound one per task).
- **The replicas start equal**: every weight is broadcast from rank 0 once the model is
  built (:func:`replicate`).
- **The gradients are averaged** before the optimizer applies them: the model's own
  optimizer object (nothing global is patched) has its ``apply``, which Keras's torch
  ``train_step`` calls with the step's gradients, wrapped to all-reduce them (a sum over
  one flat buffer per dtype, then divided by the world size). Under a loss-scale optimizer
  the scaled gradients are averaged, so every process sees the same finite or non-finite
  step and keeps one loss scale.
- **The proof** (:func:`checksums`): after the timed steps every process's sum of its
  trainable weights, gathered; equal when the replicas stayed in step. Each process feeds
  its own examples (its rank seeds its synthetic batch), so replicas without the all-reduce
  would part (tried: 210.5 against 229.4 after 5 steps of blog-cnn).

Non-trainable state (batch normalization's moving mean and variance) stays each process's
own, from its own examples: no buffer is broadcast each step (DDP's default would), which
the training step's time does not depend on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mxbench.bench.parallel import workers


def rendezvous(env: Mapping[str, str]) -> dict[str, str]:
    """torchrun's variables of this task, from Slurm's."""
    hosts = workers.step_hosts(env)
    size = workers.slurm_var(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    return {
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": str(workers.port_block(env)),
        "RANK": workers.slurm_var(env, "SLURM_PROCID"),
        "WORLD_SIZE": size,
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
    }


def join(torch: Any, found: Mapping[str, str], launched_here: bool = False) -> tuple[str, str]:
    """Meet the cell's other processes: the process group made from torchrun's variables
    (``found``: :func:`rendezvous` from Slurm's, or those of mxbench's own launch on one
    host), this process's GPU chosen where there are GPUs (``launched_here``: the processes
    share the host's GPUs, each that of its local rank; Slurm's tasks: by local rank too,
    unless Slurm bound one to each). The group's backend and where rank 0 listens."""
    os.environ.update(found)
    group = "nccl" if own_gpu(torch, found, launched_here) is not None else "gloo"
    dist = torch.distributed
    dist.init_process_group(group, rank=int(found["RANK"]), world_size=int(found["WORLD_SIZE"]))
    return group, f"{found['MASTER_ADDR']}:{found['MASTER_PORT']}"


def own_gpu(torch: Any, found: Mapping[str, str], launched_here: bool) -> int | None:
    """This process's GPU, made torch's current device (None: torch sees no GPU): that of
    its local rank (``launched_here``: the processes share the host's GPUs; Slurm's tasks:
    by local rank too, unless Slurm bound one to each). RuntimeError: fewer GPUs than that."""
    if not torch.cuda.is_available():
        return None
    count, local = torch.cuda.device_count(), int(found["LOCAL_RANK"])
    mine = local if launched_here else workers.gpu_slice(count, local, 1).start
    if mine >= count:
        raise RuntimeError(f"rank {found['RANK']}: GPU {mine} of the {count} it sees")
    torch.cuda.set_device(mine)
    return int(mine)


def replicate(torch: Any, model: Any, dtype: str = "native") -> None:
    """Rank 0's weights on every process, and the model's optimizer averaging gradients
    (all-reduced in ``dtype``: ``native``, their own)."""
    dist = torch.distributed
    with torch.no_grad():
        for weight in model.weights:
            dist.broadcast(weight.value.data, src=0)
    optimizer = model.optimizer
    apply = optimizer.apply

    def averaged_apply(grads: list[Any], trainable_variables: Any = None) -> Any:
        return apply(average(torch, grads, dtype), trainable_variables)

    optimizer.apply = averaged_apply


def average(torch: Any, grads: list[Any], dtype: str = "native") -> list[Any]:
    """The gradients' mean over every process: one all-reduce (sum) per dtype over a flat
    buffer, divided by the world size; a missing gradient stays missing. ``dtype``
    (``bfloat16``, ``float16``): the buffer is cast to it for the all-reduce and back, as
    16-bit gradient compression does (horovod's fp16 compression): half the bytes, rounded
    once per step, the sum overflowing to inf in float16 past 65504."""
    dist = torch.distributed
    world = dist.get_world_size()
    out = list(grads)
    by_dtype: dict[Any, list[int]] = {}
    for i, g in enumerate(grads):
        if g is not None:
            by_dtype.setdefault(g.dtype, []).append(i)
    for indices in by_dtype.values():
        flat = torch.cat([grads[i].reshape(-1) for i in indices])
        wire = flat if dtype == "native" else flat.to(getattr(torch, dtype))
        dist.all_reduce(wire, op=dist.ReduceOp.SUM)
        flat = wire.to(flat.dtype).div_(world)
        parts = torch.split(flat, [grads[i].numel() for i in indices])
        for i, part in zip(indices, parts, strict=True):
            out[i] = part.view_as(grads[i])
    return out


def gathered(torch: Any, number: float) -> list[float]:
    """A number from every process, in rank order (a collective: every process calls it)."""
    dist = torch.distributed
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else "cpu"
    mine = torch.tensor([number], dtype=torch.float64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [float(g.item()) for g in every]


def checksums(torch: Any, model: Any) -> list[float]:
    """Every process's sum of its model's trainable weights (in float64), in rank order
    (a collective)."""
    with torch.no_grad():
        total = sum(float(w.value.detach().double().sum()) for w in model.trainable_weights)
    return gathered(torch, total)


def loss_scales(torch: Any, model: Any) -> list[float]:
    """The dynamic loss scale each process holds, in rank order (a collective; empty
    without a loss-scale optimizer, on every process alike)."""
    found = getattr(getattr(model, "optimizer", None), "dynamic_scale", None)
    if found is None:
        return []
    return gathered(torch, float(found.value.detach().reshape(-1)[0]))
