"""TensorFlow across processes: ``MultiWorkerMirroredStrategy`` over a Slurm job's tasks.

Each task (one process, started by srun) learns the whole cluster from Slurm's own variables
and writes it as ``TF_CONFIG`` before the strategy is made:

- the step's node list (``SLURM_STEP_NODELIST``, ``n[01-03],gpu7``) expanded as Slurm
  does (:func:`expand_nodelist`), with its tasks per node (``SLURM_STEP_TASKS_PER_NODE``,
  ``2(x3),1``);
- rank ``r`` (``SLURM_PROCID``) on the node that holds it under srun's block distribution
  (mxbench's srun asks for ``--distribution=block``; the task checks it is where the
  arithmetic puts it, ``SLURMD_NODENAME`` and ``SLURM_LOCALID``);
- ports from the job id, so that two jobs on one node do not collide: the job's block of
  :data:`PORT_SPAN` ports starts at ``PORT_BASE + (SLURM_JOB_ID mod PORT_BLOCKS) x
  PORT_SPAN``, below Linux's ephemeral range (32768 on); each task listens on its block's
  port number ``SLURM_LOCALID``. Two jobs collide only when their ids differ by a multiple
  of :data:`PORT_BLOCKS` and they share a node at once.

The node list and the job's port block serve PyTorch's rendezvous too
(:mod:`mxbench.bench.parallel.torch_workers`).

TensorFlow's own ``SlurmClusterResolver`` is not used: on a host without GPUs it divides by
a GPU count of 0 (``range`` with step 0), and it orders nodes by name (``n10`` before
``n9``) where Slurm ranks tasks in node-list order.

Keras 3 (3.15) calls ``strategy.reduce`` in two ways this strategy does not take across
workers (tensorflow#72388): on the first batch as a tuple (a nest; only MirroredStrategy
maps over nests) and on scalar logs with ``axis=0``. :func:`strategy` mends exactly these
on the strategy it makes (and says so in the record's notes); the gradients' all-reduce is
TensorFlow's own, untouched.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

PORT_BASE = 10000
PORT_SPAN = 32  # ports per job: tasks on one node
PORT_BLOCKS = 700  # 10000 + 700 x 32 = 32400: below the ephemeral ports
REDUCE_MENDED = (
    "Keras 3's strategy.reduce of a batch (a nest) and of scalar logs (axis 0) mended on "
    "this MultiWorkerMirroredStrategy (tensorflow#72388)"
)


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list in its order: ``n[01-02],m5`` -> n01, n02, m5 (ranges
    keep their zero padding; several bracket groups in one name multiply out)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    hosts: list[str] = []
    for part in filter(None, (p.strip() for p in parts)):
        hosts.extend(_expand_one(part))
    if not hosts or any(c in h for h in hosts for c in "[],"):
        raise RuntimeError(f"node list {text!r}: not a Slurm host list")
    return hosts


def _expand_one(name: str) -> list[str]:
    found = re.search(r"\[([^\[\]]*)\]", name)
    if found is None:
        return [name]
    head, tail = name[: found.start()], name[found.end() :]
    out: list[str] = []
    for item in found.group(1).split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise RuntimeError(f"node list: {item!r} in {name!r} is not a range")
        for n in range(int(low), int(high or low) + 1):
            out.extend(_expand_one(f"{head}{str(n).zfill(len(low))}{tail}"))
    return out


def task_counts(text: str) -> list[int]:
    """Slurm's tasks per node, one per node: ``2(x3),1`` -> 2, 2, 2, 1."""
    counts: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            raise RuntimeError(f"tasks per node {text!r}: not Slurm's form")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def slurm_var(env: Mapping[str, str], *names: str) -> str:
    for name in names:
        if env.get(name):
            return env[name]
    raise RuntimeError(f"{names[0]} is not set: this process is not a task of a Slurm step")


def port_block(env: Mapping[str, str]) -> int:
    """The first of this job's :data:`PORT_SPAN` ports (from ``SLURM_JOB_ID``)."""
    return PORT_BASE + int(slurm_var(env, "SLURM_JOB_ID")) % PORT_BLOCKS * PORT_SPAN


def step_hosts(env: Mapping[str, str]) -> list[str]:
    """The step's nodes in Slurm's order (the job's where the step's are not set)."""
    return expand_nodelist(slurm_var(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"))


def tf_config(env: Mapping[str, str]) -> dict[str, Any]:
    """``TF_CONFIG`` of this task: every task's ``host:port`` in rank order, and its own
    index. RuntimeError where Slurm's variables are missing, disagree, or put this task
    elsewhere than the block distribution says."""
    hosts = step_hosts(env)
    counts = task_counts(slurm_var(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"))
    total = int(slurm_var(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"))
    rank = int(slurm_var(env, "SLURM_PROCID"))
    if len(counts) != len(hosts) or sum(counts) != total:
        raise RuntimeError(f"Slurm's {len(hosts)} node(s) and tasks {counts} disagree with "
                           f"its {total} task(s)")  # fmt: skip
    if max(counts) > PORT_SPAN:
        raise RuntimeError(f"{max(counts)} tasks on one node: at most {PORT_SPAN} here")
    block = port_block(env)
    where = [(h, local) for h, n in zip(hosts, counts, strict=True) for local in range(n)]
    if not 0 <= rank < total:
        raise RuntimeError(f"SLURM_PROCID {rank}: not one of the step's {total} tasks")
    mine = where[rank]
    node, local = env.get("SLURMD_NODENAME"), env.get("SLURM_LOCALID")
    if (node and node != mine[0]) or (local and int(local) != mine[1]):
        raise RuntimeError(
            f"task {rank} runs as {node}:{local}, not {mine[0]}:{mine[1]} as srun's block "
            f"distribution puts it; start the tasks with srun --distribution=block"
        )
    workers = [f"{h}:{block + i}" for h, i in where]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}


def gpu_slice(visible: int, local: int, devices: int) -> slice:
    """This task's GPUs among those it sees: all it sees when they are its own (Slurm bound
    them per task), else its block by local rank (the tasks of a node share its GPUs)."""
    if visible <= devices:
        return slice(0, devices)
    return slice(local * devices, (local + 1) * devices)


def strategy(tf: Any, devices: int, env: Mapping[str, str]) -> tuple[Any, list[str], str]:
    """Make this task's ``MultiWorkerMirroredStrategy`` (before TensorFlow's runtime starts):
    ``TF_CONFIG`` written, the task's GPUs made the visible ones. The strategy, every
    worker's device names, and where the workers listen."""
    config = tf_config(env)
    os.environ["TF_CONFIG"] = json.dumps(config)
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        mine = gpus[gpu_slice(len(gpus), int(env.get("SLURM_LOCALID", "0")), devices)]
        if len(mine) < devices:
            raise RuntimeError(f"devices {devices}: this task has {len(mine)} GPU(s)")
        tf.config.set_visible_devices(mine, "GPU")
    elif devices > 1:
        raise RuntimeError(
            f"devices {devices} in several processes on TensorFlow without GPUs: "
            "MultiWorkerMirroredStrategy drives one CPU per worker; use devices: 1"
        )
    made = tf.distribute.MultiWorkerMirroredStrategy()
    _mend_reduce(tf, made)
    workers = config["cluster"]["worker"]
    kind = "GPU" if gpus else "CPU"
    names = [f"worker{i}:{kind}:{d}" for i in range(len(workers)) for d in range(devices)]
    return made, names, ", ".join(workers)


def _mend_reduce(tf: Any, made: Any) -> None:
    """``made.reduce`` over each leaf of a nest, scalars reduced across replicas only."""
    plain = made.reduce

    def rank(value: Any) -> int | None:
        local = made.experimental_local_results(value)[0]
        return getattr(getattr(local, "shape", None), "rank", None)

    def reduce(op: Any, value: Any, axis: int | None = None) -> Any:
        def one(v: Any) -> Any:
            return plain(op, v, axis=None if axis == 0 and rank(v) == 0 else axis)

        return tf.nest.map_structure(one, value)

    made.reduce = reduce


def per_worker(made: Any, ds: Any, devices: int, per_device: int) -> Any:
    """Each worker's own input: its dataset (its devices' share of the global batch), cut
    into per-device batches for its replicas."""
    own = ds.rebatch(per_device) if devices > 1 else ds
    return made.distribute_datasets_from_function(lambda _context: own)


def replicas_in_sync(tf: Any, made: Any, local: int) -> int:
    """Replicas holding the variables over every worker: each worker's local copies, summed
    by an all-reduce (every worker calls it)."""
    here = len(made.extended.worker_devices)
    total = made.reduce("SUM", made.run(lambda: tf.constant(local / here)), axis=None)
    return round(float(total))
