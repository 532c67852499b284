"""What a cell's container is made of (engine: docker): its name, command, environment, GPUs,
mounts, /dev/shm, labels and memory limit, as ``containers.create`` keyword arguments
(:func:`create_args`). Pure functions of the host entry and the cell: no daemon needed."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any

from mxbench import models
from mxbench.engines import stale
from mxbench.matrix import scale

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell
    from mxbench.matrix.hosts import DockerHost


def create_args(host: DockerHost, cell: Cell, tag: str) -> dict[str, Any]:
    """The keyword arguments that create ``cell``'s container of image ``tag`` on ``host``.

    Its name is new for every call (one per cell attempt): a create the daemon carried out
    before the link to it dropped is then found by its name when asked again (409), not made
    a second time beside an orphan."""
    volumes, env = model_mount(cell.params.model)
    return {
        "image": tag,
        "name": f"mxbench-{cell.key or 'cell'}-{uuid.uuid4().hex[:12]}",
        "command": cell.bench_args(),
        "environment": {**env, ROOFS_ENV: ROOFS_DIR, **host.env},
        "device_requests": device_requests(host.gpus, cell.params.devices),
        "shm_size": shm_size(host.gpus, cell.params),
        "volumes": {
            **data_mount(cell.params.data),
            **volumes,
            **weights_mounts(cell),
            **ROOFS_MOUNT,
        },
        "labels": {
            "io.mxbench.cell": cell.key,
            "io.mxbench.host": cell.host,
            stale.LABEL: stale.owner(),
        },
        # memory_limit: the container's limit, with no swap beyond it
        "mem_limit": host.memory_limit,
        "memswap_limit": host.memory_limit,
        "detach": True,
    }


def device_requests(gpus: str | list[str], devices: int | None = None) -> list[Any] | None:
    """The GPUs a container gets of its host's ``gpus``: the ``devices`` a cell asks for (the
    first ones of the host's list, or that many under ``all``: a cell of one device sees one
    GPU, never the others), every one of them when ``devices`` is None (doctor's probe).
    Cells of one machine run one at a time, so two cells never hold one device."""
    from docker.types import DeviceRequest

    if gpus == "none":
        return None
    if gpus == "all":
        return [DeviceRequest(count=-1 if devices is None else devices, capabilities=[["gpu"]])]
    ids = list(gpus) if devices is None else list(gpus)[:devices]
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


NCCL_SHM = "2g"  # Docker's default /dev/shm is 64 MB; NCCL's shared-memory transport needs more


def shm_size(gpus: str | list[str], p: Any) -> str | None:
    """/dev/shm of a container whose cell runs several processes on its GPUs (PyTorch's
    devices: NCCL between them through shared memory, which crashes in ``ncclShmOpen`` under
    Docker's 64 MB); None: Docker's default."""
    return NCCL_SHM if gpus != "none" and scale.processes(p) > 1 else None


# The roofs cache (mxbench.roofs.cache) of the docker host: a named volume, so that the
# bench's measured roofs outlive a cell's container and its host measures them once per stack
ROOFS_ENV = "MXBENCH_ROOFS_CACHE"
ROOFS_DIR = "/var/cache/mxbench/roofs"
ROOFS_MOUNT = {"mxbench-roofs": {"bind": ROOFS_DIR, "mode": "rw"}}


def data_mount(data: str) -> dict[str, dict[str, str]]:
    """A real data directory, bind-mounted read-only at the same path (on the docker host)."""
    if data == "synthetic":
        return {}
    return {data: {"bind": data, "mode": "ro"}}


def weights_mounts(cell: Cell) -> dict[str, dict[str, str]]:
    """The folders of a cell's weights files at the same path (on the docker host): where a
    training run saves its final weights (read-write), where a serving cell reads them, or
    the user's weights file (read-only; a folder, not the file, so a file not there yet is
    not made a directory by the daemon)."""
    out: dict[str, dict[str, str]] = {}
    if cell.save_weights:
        folder = os.path.dirname(cell.save_weights)
        out[folder] = {"bind": folder, "mode": "rw"}
    for path in (cell.weights_file, cell.params.weights):
        if path and path.endswith(".weights.h5"):
            folder = os.path.dirname(os.path.abspath(path))
            out.setdefault(folder, {"bind": folder, "mode": "ro"})
    return out


def model_mount(model: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """A user model's folder, bind-mounted read-only at the same path (on the docker host),
    and the environment that puts a module entry point's package on the Python path."""
    found = models.source_dir(model)
    if found is None:
        return {}, {}
    folder, on_path = found
    return {folder: {"bind": folder, "mode": "ro"}}, ({"PYTHONPATH": folder} if on_path else {})
