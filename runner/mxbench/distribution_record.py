"""The data-parallel part of the result record (:mod:`mxbench.records.record`): how a cell of
``devices`` > 1 was spread over its devices (:mod:`mxbench.bench.parallel.distribute`)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from mxbench.records.part import Doc, Part, Positive


class Replica(Part, kw_only=True):
    """One independent replica (``scaling: independent``): its device, timed on its own."""

    device: Annotated[str, Doc("the device, as the framework names it (cpu:1, GPU:0)")]
    variables_on: Annotated[
        str | None, Doc("the device the replica's first variable was found on after training")
    ] = None
    images_per_s: Annotated[
        Positive | None, Doc("its examples per second over its own timed window")
    ] = None
    step_ms: Annotated[
        list[Positive], Doc("its timed steps (ms), in order: the health sweep judges them")
    ] = []


class Interconnect(Part, kw_only=True):
    """How the devices are linked, where it can be read (``nvidia-smi topo -m``, NCCL)."""

    topology: Annotated[
        str | None,
        Doc("where the links were read (nvidia-smi topo -m); None: not readable here"),
    ] = None
    links: Annotated[
        dict[str, str],
        Doc("the link between each pair of the GPUs used, as nvidia-smi names it (GPU0-GPU1: "
            "NV18, PIX, PXB, PHB, NODE, SYS)"),
    ] = {}  # fmt: skip
    slowest: Annotated[
        str | None, Doc("the slowest of those links (what an all-reduce ring waits on)")
    ] = None
    nccl: Annotated[str | None, Doc("the NCCL version, where a framework exposes it")] = None
    nccl_from: Annotated[str | None, Doc("what told the NCCL version")] = None
    unreadable: Annotated[
        list[str], Doc("what could not be read, and why (a CPU host: no GPU links, no NCCL)")
    ] = []


class Distribution(Part, kw_only=True):
    """Data parallel over several devices: what was asked, and what the trained model's
    variables were found on."""

    devices: Annotated[
        int,
        Meta(ge=1),
        Doc(
            "devices the cell asked for in each process (params.devices; torch: on one "
            "host, each a process of its own)"
        ),
    ]
    processes: Annotated[
        int,
        Meta(ge=1),
        Doc(
            "processes the cell trained in (params.nodes: Slurm tasks; jax.distributed, "
            "TensorFlow's workers or a torch.distributed group; torch on one host: one per "
            "device, started by the bench)"
        ),
    ] = 1
    nodes: Annotated[
        str | None, Doc("the Slurm job's node list (SLURM_JOB_NODELIST), several Slurm tasks")
    ] = None
    replicas: Annotated[
        int | None,
        Doc("devices the model's variables were found replicated on after the timed steps"),
    ] = None
    scaling: Annotated[
        Literal["weak", "strong", "independent"],
        Doc("weak: per-device batch held; strong: global held; independent: weak's batches, "
            "one replica per device, no all-reduce"),
    ] = "weak"  # fmt: skip
    global_batch: Annotated[int, Meta(ge=1), Doc("examples per step over every device")]
    per_device_batch: Annotated[int, Meta(ge=1), Doc("examples per step on each device")]
    device_names: Annotated[list[str], Doc("the devices, as the framework names them")] = []
    mechanism: Annotated[
        str | None, Doc("keras.distribution.DataParallel, tf.distribute.MirroredStrategy")
    ] = None
    versions: Annotated[
        dict[str, str], Doc("the versions of what distributes (keras, jax, tensorflow)")
    ] = {}
    shared_cores: Annotated[
        bool,
        Doc("the devices are slices of one CPU and share its cores: the timings are "
            "plumbing, not scaling"),
    ] = False  # fmt: skip
    design: Annotated[
        Literal["paired", "process"] | None,
        Doc("the design that measured it: paired (arms interleaved in one process) or one "
            "policy per process"),
    ] = None  # fmt: skip
    allreduce_dtype: Annotated[
        str | None,
        Doc("the dtype the gradients are all-reduced in: their variables' (float32 under "
            "the mixed policies), or on the torch backend across processes the one params."
            "allreduce chose (bfloat16, float16: cast for the all-reduce and back)"),
    ] = None  # fmt: skip
    loss_scale_replicas: Annotated[
        list[float],
        Doc("the dynamic loss scale as each replica holds it after the timed steps (one "
            "value when they agree; several: the replicas disagreed)"),
    ] = []  # fmt: skip
    weight_checksums: Annotated[
        list[float],
        Doc("PyTorch across processes: each process's sum of its trainable weights after "
            "the timed steps, in rank order (equal: the replicas stayed in step)"),
    ] = []  # fmt: skip
    notes: Annotated[
        list[str], Doc("what data parallel changed (TensorFlow: jit_compile turned off)")
    ] = []
    replica_timings: Annotated[
        list[Replica],
        Doc("independent replicas (scaling: independent): each one's device and timed steps"),
    ] = []
    interconnect: Annotated[
        Interconnect | None, Doc("how the devices are linked, where it can be read")
    ] = None
