"""The result record (one type, defined once) and the append-only JSONL store.

A record is one attempt at one cell. :class:`Record` is the contract: the bench fills it
(params, metrics, device, cpu, software, settings, status), the engines stamp who ran it
(cell key, host, engine, image) or make one for a failure (timeout, kill, garbage), the
store writes it as one JSON line, and the report and ``--resume`` decode the same type.
``docs/record.md`` is generated from it (``python -m mxbench.results``).

Schema ``mxbench.result/2``. Records evolve by versions: within one version fields are only
added (with defaults; a field a line does not have takes its default, unknown fields from a
newer mxbench are ignored); a change that is not an addition (a rename, a null that the type
no longer takes) makes a new version, with a step in :data:`UPGRADES` that rewrites a line of
the previous version before it is decoded (pyperf's version map, asv's ``update_to_2``).
Every line written by any version of mxbench, or allowed by a published contract, loads:
``tests/records/`` holds one file per shape ever written.

Layout on disk: ``<results>/<host>.jsonl``, one file per host (asv-style), so that
directories from many machines can be merged by copying them side by side.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import functools
import json
import os
import re
import signal
import socket
import stat
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

import msgspec
from msgspec import Meta

from mxbench.errors import MxbenchError, UsageError
from mxbench.params import MAX_INT, Params
from mxbench.search import BatchSearch

SCHEMA = "mxbench.result/2"  # the version this mxbench writes (HISTORY: every version)
Status = Literal["ok", "oom", "error", "timeout", "unsupported"]
STATUSES: tuple[str, ...] = ("ok", "oom", "error", "timeout", "unsupported")
# A cell whose latest record has one of these is done: --resume skips it.
# An OOM is a real, final answer about that device and batch size.
FINAL_STATUSES = frozenset({"ok", "oom"})

# A measured time or rate: positive and finite (JSON has no NaN; 1e999 decodes as inf).
Positive = Annotated[float, Meta(gt=0, lt=1e15)]
Count = Annotated[int, Meta(ge=0, le=MAX_INT)]


def Doc(text: str) -> Meta:
    """A field's description: it goes into docs/record.md (:mod:`mxbench.record_doc`)."""
    return Meta(description=text)


class _Part(msgspec.Struct, kw_only=True, gc=False):
    """A sub-object of the record. Every field is written (null when unknown); a line that
    lacks one (an older mxbench, a hand-made record) reads it back as its default.

    ``gc=False`` (here and on :class:`Record`): a record is a tree, never a cycle, so the
    garbage collector need not track its structs; a report holding 100,000 of them otherwise
    spends much of its time in collections that find nothing (msgspec's documented option)."""


class StepStats(_Part):
    """Milliseconds per timed step (warm-up excluded)."""

    median: Positive | None = None
    p25: Positive | None = None
    p75: Positive | None = None
    mean: Positive | None = None
    min: Positive | None = None
    max: Positive | None = None
    n: Count | None = None
    samples: Annotated[list[Positive], Doc("every timed step, in order (ms): the raw samples")] = []


class GpuHealth(_Part):
    """NVML readings of the GPU that ran the timed steps, over those steps."""

    sm_clock_mhz: Annotated[float | None, Doc("median SM clock")] = None
    memory_clock_mhz: Annotated[float | None, Doc("median memory clock")] = None
    power_w: Annotated[float | None, Doc("median power draw")] = None
    power_limit_w: Annotated[float | None, Doc("the enforced power limit")] = None
    temperature_c: Annotated[float | None, Doc("median GPU temperature")] = None
    temperature_max_c: float | None = None
    throttle_reasons: Annotated[
        list[str],
        Doc("every clock-throttle reason NVML reported during the timed steps "
            "(sw_power_cap, hw_slowdown, sw_thermal_slowdown, hw_thermal_slowdown, ...)"),
    ] = []  # fmt: skip
    samples: Annotated[int, Doc("NVML polls inside the timed steps")] = 0


class Metrics(_Part):
    step_ms: StepStats | None = None
    images_per_s: Positive | None = None
    first_step_ms: Annotated[float | None, Doc("the first warm-up step (tracing, compilation)")] = (
        None
    )
    warmup_ms: Annotated[float | None, Doc("all warm-up steps together")] = None
    startup_s: Annotated[float | None, Doc("process start -> first timed step")] = None
    import_s: Annotated[float | None, Doc("importing the framework")] = None
    loss_first: Annotated[float | None, Doc("training loss at the first / last timed step")] = None
    loss_last: float | None = None
    losses: Annotated[
        list[float | None],
        Doc("training loss of every timed step (same seed, same data for every policy); "
            "null where it was not finite"),
    ] = []  # fmt: skip
    loss_scale: Annotated[
        float | None, Doc("final dynamic loss scale (mixed_float16), else null")
    ] = None
    peak_memory_bytes: Annotated[
        Count | None,
        Doc("the most memory the training held, read right after the timed steps (the "
            "profiled window and the one-step check come later and are not in it); see "
            "peak_memory_kind for what it counts"),
    ] = None  # fmt: skip
    peak_memory_kind: Annotated[
        Literal["gpu", "cgroup", "rss"] | None,
        Doc("gpu: the framework's peak on the device; cgroup: the memory cgroup's peak (a "
            "memory limit: what the limit counts, page cache included); rss: the process's "
            "peak resident set (the framework's libraries included, about 0.5-1 GB for "
            "TensorFlow)"),
    ] = None  # fmt: skip
    gpu_util_pct: Annotated[
        Annotated[float, Meta(ge=0, le=100)] | None, Doc("NVML median, timed steps")
    ] = None
    gpu_health: Annotated[
        GpuHealth | None, Doc("clocks, power, temperature, throttling (GPU runs, NVML)")
    ] = None
    train_flops_per_image: Annotated[
        float | None, Doc("training FLOPs per example (model.flops_per_example)")
    ] = None
    achieved_tflops: float | None = None
    energy_j_per_step: Annotated[
        float | None,
        Doc("energy over the timed window per step: NVML's cumulative counter (the GPU) or "
            "RAPL's (the CPU package), see energy_source"),
    ] = None  # fmt: skip
    energy_j_per_image: float | None = None
    energy_source: Annotated[
        str | None, Doc("nvml (GPU board) or rapl (CPU packages): what the joules cover")
    ] = None
    phases_s: Annotated[
        dict[str, float],
        Doc("where the process's time went (s), phase by phase: start (interpreter, mxbench "
            "import), import (framework), build, data, facts, first_step, warmup, timed, "
            "fit_other, probe, check (mxbench.bench.timing.PHASES)"),
    ] = {}  # fmt: skip


class Interference(_Part):
    """What else the machine did during a timed window, per second of its wall time
    (mxbench.bench.interference): cores' worth of CPU."""

    own_cores: Annotated[float | None, Doc("CPU this process got (1.0: one core busy)")] = None
    waited_cores: Annotated[
        float | None, Doc("time its threads were runnable but waited for a CPU (run delay)")
    ] = None
    others_cores: Annotated[float | None, Doc("CPU every other process used")] = None
    steal_cores: Annotated[float | None, Doc("CPU time the hypervisor stole")] = None
    pressure: Annotated[
        float | None, Doc("share of the time some task waited for a CPU (PSI cpu some)")
    ] = None
    gpu_others: Annotated[int | None, Doc("other processes on the GPU (NVML)")] = None
    throttle_reasons: Annotated[list[str], Doc("NVML clock-throttle reasons seen")] = []
    disturbed: Annotated[
        bool, Doc("past a threshold: another process, steal, run delay, throttling")
    ] = False


class Window(_Part):
    """One timed window of a paired process: ``steps`` steps of one arm, alone on the
    process, between two device syncs."""

    round: Annotated[int, Meta(ge=0)]
    position: Annotated[int, Meta(ge=0), Doc("its place in the round's (random) order")]
    steps: Annotated[int, Meta(ge=1)]
    ms: Annotated[Positive, Doc("the window's wall time per step (ms)")]
    start_s: Annotated[float, Doc("when it began, seconds after the first window began")]
    interference: Interference = msgspec.field(default_factory=Interference)


class Pairing(_Part):
    """How a paired process measured this arm: the arms of one comparison in one process,
    in short windows in a randomised balanced order (mxbench.bench.paired)."""

    design: Literal["paired"] = "paired"
    group: Annotated[str, Doc("the process's id: the records of its arms share it")] = ""
    arms: Annotated[list[str], Doc("the policies measured in the process, base first")] = []
    base: str = "float32"
    window_steps: Annotated[int, Doc("timed steps per window")] = 0
    order: Annotated[str, Doc("the windows' order, one letter an arm (A: arms[0])")] = ""
    ratios: Annotated[
        list[Positive],
        Doc("per round: the base's time per step / this arm's in the same round (its speedup); "
            "empty for the base"),
    ] = []  # fmt: skip
    clean: Annotated[list[bool], Doc("per round: no window of the round was disturbed")] = []
    windows: Annotated[list[Window], Doc("this arm's timed windows, in order")] = []
    interference: Annotated[
        Interference | None, Doc("over every window of the process: medians; disturbed share")
    ] = None
    disturbed_share: Annotated[float | None, Doc("share of the process's windows disturbed")] = None


# The profiled window's categories (record.profile.breakdown_ms keys), with their headings.
CATEGORY_NAMES: dict[str, str] = {
    "conv_matmul": "conv/matmul",
    "elementwise_norm": "memory-bound",
    "cast": "casts",
    "layout": "layout",
    "optimizer": "optimizer",
    "input": "input",
    "other": "other",
    "host_gap": "host gap",
}


class TopOp(_Part):
    """One of the operations that took the most time in the profiled window."""

    name: str | None = None
    category: str | None = None
    ms_per_step: float | None = None
    calls: Count | None = None


class OneDnnEvidence(_Part):
    """Which oneDNN kernels ran the CPU's convolutions and matmuls (its verbose log)."""

    weight: Annotated[
        Literal["time", "flops"] | None,
        Doc("time: measured executions in the profiled window (PyTorch); flops: the "
            "primitives created, weighed by their arithmetic (TensorFlow: oneDNN logs at "
            "creation, in the warm-up, so that the timed steps are not logged)"),
    ] = None  # fmt: skip
    gemm_isas: Annotated[
        dict[str, float], Doc("ISA of the convolution/matmul kernels -> share (avx512_core_bf16, "
                              "avx512_core_amx, avx2, ref, gemm: ISA not named)")
    ] = {}  # fmt: skip
    native16_share: Annotated[
        float | None,
        Doc("share of the 16-bit convolutions/matmuls on kernels that compute in 16 bits "
            "natively; null: none had a 16-bit source"),
    ] = None  # fmt: skip
    sixteen_bit_share: Annotated[
        float | None, Doc("share of convolution/matmul work whose source was bf16 / f16")
    ] = None
    reorder_ms: Annotated[float | None, Doc("oneDNN reorders (layout/type), window total")] = None
    gemm_ms: Annotated[float | None, Doc("oneDNN convolutions/matmuls, window total")] = None
    primitives: Count | None = None
    kernels: Annotated[list[str], Doc('"convolution brg_conv_fwd:avx512_core_bf16 bf16"')] = []


class Profile(_Part):
    """The profiled window: a few training steps after the timed ones under the backend's
    own profiler (mxbench.bench.profile), and where their time went."""

    tool: Annotated[str | None, Doc("tf.profiler, jax.profiler or torch.profiler")] = None
    device: Literal["gpu", "cpu"] | None = None
    steps: Count | None = None
    step_ms: Annotated[float | None, Doc("wall-clock ms per profiled step (profiler on)")] = None
    cost_s: Annotated[
        float | None, Doc("what the window cost: its steps, the profiler, reading the trace")
    ] = None
    breakdown_ms: Annotated[
        dict[str, float],
        Doc("ms per step by category: conv_matmul, elementwise_norm (memory-bound), cast, "
            "layout, optimizer, input, other, host_gap (nothing ran: Python, launches, "
            "waits); the sum is step_ms"),
    ] = {}  # fmt: skip
    busy_share: Annotated[float | None, Doc("share of the window in which some operation ran")] = (
        None
    )
    tensor_core_share: Annotated[
        float | None,
        Doc("GPU: share of convolution/matmul kernel time in Tensor Core kernels, judged from "
            "kernel names (a heuristic)"),
    ] = None  # fmt: skip
    cast_share: Annotated[float | None, Doc("casts' share of the operations' time")] = None
    top_ops: Annotated[list[TopOp], Doc("the operations that took the most time")] = []
    onednn: Annotated[
        OneDnnEvidence | None, Doc("CPU: the oneDNN kernels that ran (verbose log)")
    ] = None
    trace: Annotated[str | None, Doc("where the raw trace was kept (MXBENCH_PROFILE_DIR)")] = None
    error: Annotated[str | None, Doc("why the window gave no breakdown")] = None


class Convergence(_Part):
    """Whether the policy still trains like float32 (mxbench.bench.convergence): the steps its
    loss scaler skipped, and a one-step check of its gradient against float32's from the same
    initial weights and batch, done after the timed steps."""

    steps: Annotated[Count | None, Doc("training steps run (warm-up and timed)")] = None
    skipped_steps: Annotated[
        Count | None,
        Doc("of those, the steps the dynamic loss scaler skipped (non-finite gradients: an "
            "overflow); null: no dynamic scaler"),
    ] = None  # fmt: skip
    check: Annotated[
        Literal["scored", "skipped", "not finite", "no gradient", "error"] | None,
        Doc("the one-step check: scored (see cosine), skipped (non-finite gradients the "
            "dynamic scaler would skip), not finite (no scaler to skip them: the step writes "
            "NaN/Inf), no gradient (float32's is zero), error (note says why); null: not "
            "checked (float32 cells)"),
    ] = None  # fmt: skip
    cosine: Annotated[
        float | None,
        Doc("cosine similarity of the first step's gradient (every trainable weight, loss "
            "scale divided out) with float32's; below 0.99 is flagged (TorchBench's threshold "
            "for mixed precision)"),
    ] = None  # fmt: skip
    norm_ratio: Annotated[float | None, Doc("its norm / float32's gradient norm")] = None
    batch: Annotated[
        Count | None,
        Doc("examples the checked gradient was taken on: the first of the cell's batch, at "
            "most 32 (the check's memory stays small beside the training's)"),
    ] = None  # fmt: skip
    float32_rounded_input_cosine: Annotated[
        float | None,
        Doc("where the cosine is low: float32's own gradient with only its input rounded to "
            "the policy's 16-bit type, against float32's; low too: the model's gradient is "
            "that sensitive by itself (at initialization), not the policy's fault"),
    ] = None  # fmt: skip
    underflow_share: Annotated[
        float | None,
        Doc("share of the gradient's elements that are zero where float32's are not"),
    ] = None
    loss_scale: Annotated[float | None, Doc("the factor the checked step scaled the loss by")] = (
        None
    )
    check_s: Annotated[
        float | None,
        Doc("seconds the check took (a float32 build, two forward and backward passes)"),
    ] = None
    note: Annotated[str | None, Doc("why the check could not score; what it left out")] = None


class PresentGpu(_Part):
    name: str | None = None
    compute_capability: str | None = None
    uuid: str | None = None


class Device(_Part):
    """What the timed steps ran on, as the framework used it (not just what was present)."""

    kind: Literal["gpu", "cpu"] | None = None
    name: str | None = None
    compute_capability: Annotated[str | None, Doc('"7.0"; null for CPUs')] = None
    memory_bytes: Count | None = None
    driver: str | None = None
    uuid: str | None = None
    framework: Annotated[str | None, Doc("the Keras backend that ran the model")] = None
    used_gpu: Annotated[
        bool | None,
        Doc("whether `framework` ran the model on the GPU (false: a GPU is present, the "
            "framework ran on the CPU; null: no GPU). mxbench.result/1 called it used_by_tf"),
    ] = None  # fmt: skip
    present_gpus: list[PresentGpu] = []
    cc_source: Annotated[str | None, Doc("nvml, or the framework that told it")] = None
    cc_framework: Annotated[
        str | None, Doc("the framework's own CC when it disagrees with NVML")
    ] = None


class Cpu(_Part):
    model: str | None = None
    arch: Annotated[str | None, Doc("platform.machine(): x86_64, aarch64, ...")] = None
    cores: Annotated[Count | None, Doc("usable by this process")] = None
    logical_cpus: Count | None = None
    flags: Annotated[
        list[str], Doc("The ISA extensions that matter for training speed (probe.ISA_FLAGS).")
    ] = []
    tf_not_compiled_for: Annotated[
        list[str] | None,
        Doc("What TF's cpu_feature_guard says the binary was not compiled for; null: unknown."),
    ] = None


class Software(_Part):
    python: str | None = None
    backend: Annotated[str | None, Doc("Keras backend")] = None
    mxbench: str | None = None
    tensorflow: str | None = None
    tf_git_version: str | None = None
    jax: str | None = None
    jaxlib: str | None = None
    torch: str | None = None
    keras: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    cuda_compute_capabilities: Annotated[
        list[str] | None, Doc("what the TF binary was built for")
    ] = None
    is_cuda_build: bool | None = None


class Settings(_Part):
    """What changes the numbers besides the params."""

    policy: str | None = None
    jit_compile: Annotated[bool | None, Doc("whether Keras really compiled with XLA")] = None
    tf32: Annotated[
        bool | None, Doc("float32 matmuls/convolutions may use TF32 (the backend's setting)")
    ] = None
    matmul_precision: Annotated[
        str | None, Doc("the backend's own float32 matmul setting, as it names it")
    ] = None
    onednn: Annotated[str | None, Doc("TF_ENABLE_ONEDNN_OPTS")] = None
    xla_flags: str | None = None
    tf32_override: Annotated[str | None, Doc("NVIDIA_TF32_OVERRIDE")] = None
    compute_dtype: str | None = None
    variable_dtype: str | None = None
    loss_scaling: bool | None = None
    pure_float16: bool | None = None
    input_device: Annotated[
        str | None,
        Doc("where the training batch waits between steps: host (copied every step) or a device"),
    ] = None


class Image(_Part):
    name: Annotated[str | None, Doc("the matrix's image name (or a Slurm container image)")] = None
    id: Annotated[str | None, Doc("the Docker image id")] = None
    labels: Annotated[dict[str, str], Doc("io.mxbench.* provenance labels")] = {}
    runtime: Annotated[str | None, Doc("Slurm container runtime (pyxis, apptainer)")] = None


class OffMultipleOf8(_Part):
    """A GEMM dimension of one layer that is not a multiple of 8."""

    layer: str | None = None
    kind: Annotated[str | None, Doc("the layer's class: Conv2D, Dense, Embedding, ...")] = None
    attribute: Annotated[
        str | None, Doc("input channels, filters, units, vocabulary, heads x key dim, ...")
    ] = None
    value: int | None = None


class PolicyOverride(_Part):
    """A layer whose dtype policy is not the global one (an output head kept in float32)."""

    layer: str | None = None
    policy: str | None = None


class ModelInfo(_Part):
    """What the bench found out about the model (any model: the zoo's or the user's)."""

    name: Annotated[str | None, Doc("the model parameter: a zoo name or an entry point")] = None
    parameters: Count | None = None
    source: Annotated[
        Literal["zoo", "file", "module"] | None, Doc("a built-in model, or the user's")
    ] = None
    source_sha256: Annotated[
        str | None, Doc("hash of the user's model source (file, or the package's .py files)")
    ] = None
    build_s: Annotated[
        float | None, Doc("building the model (with the float32 build whose weights it copies)")
    ] = None
    init: Annotated[
        str | None,
        Doc("float32-copy: initial weights copied from a float32 build (every policy starts "
            "from the same weights); seeded: built under the policy from the same seed"),
    ] = None  # fmt: skip
    inputs: Annotated[list[str], Doc('each input: "224x336x3 float32"')] = []
    layers: Annotated[dict[str, int], Doc("leaf layers by class (nested models expanded)")] = {}
    flops_per_example: Annotated[
        float | None, Doc("training FLOPs per example: forward x 3 (forward + backward)")
    ] = None
    flops_source: Annotated[
        Literal["xla", "formula", "analytic"] | None,
        Doc("xla: XLA's cost analysis of the forward pass; formula: the model's own; analytic: "
            "a walk of the layers (convolutions, dense, attention; elementwise ignored)"),
    ] = None  # fmt: skip
    flops_unknown_layers: Annotated[
        list[str], Doc("layer classes with weights the analytic walk does not count")
    ] = []
    off_multiple_of_8: Annotated[
        list[OffMultipleOf8], Doc("GEMM dimensions that are not multiples of 8 (first 64)")
    ] = []
    off_multiple_of_8_count: Count | None = None
    output_dtype: Annotated[str | None, Doc("the dtype of the model's output")] = None
    policy_overrides: Annotated[
        list[PolicyOverride], Doc("layers that do not follow the global dtype policy")
    ] = []
    memory_bound_layers: Annotated[
        Count | None, Doc("normalization, activation, depthwise, pooling, elementwise layers")
    ] = None
    memory_bound_share: Annotated[
        float | None,
        Doc("share of the activations (elements written per example) that memory-bound layers "
            "write: their speedup from 16-bit types is at most the bandwidth ratio"),
    ] = None  # fmt: skip
    warnings: Annotated[
        list[str], Doc("what the model does that mixed precision cares about (a float16 "
                       "output, its own LossScaleOptimizer, ...)")
    ] = []  # fmt: skip


class TrainPoint(_Part):
    """One evaluation of a training run (after ``epoch`` epochs)."""

    epoch: int = 0
    train_s: Annotated[
        float | None, Doc("training time so far (s): the epochs' steps, evaluations excluded")
    ] = None
    wall_s: Annotated[float | None, Doc("since training began (s), evaluations included")] = None
    train_loss: Annotated[float | None, Doc("mean training loss over this epoch")] = None
    train_metric: Annotated[float | None, Doc("the metric on this epoch's training batches")] = None
    val_loss: float | None = None
    val_metric: Annotated[float | None, Doc("the metric on the validation split")] = None


class Training(_Part):
    """A training run (``epochs`` set): its curve, and when it reached the target."""

    metric: Annotated[str, Doc("what val_metric measures (accuracy)")] = "accuracy"
    seed: Annotated[int | None, Doc("weights, data order and flips (the repeat index)")] = None
    target: Annotated[float | None, Doc("the validation metric to reach")] = None
    train_images: Count | None = None
    val_images: Count | None = None
    val_split: Annotated[str | None, Doc("the folder validated on: val, validation or test")] = None
    steps_per_epoch: Count | None = None
    points: Annotated[list[TrainPoint], Doc("one per evaluation, in order")] = []
    time_to_target_s: Annotated[
        float | None,
        Doc("training time at which the validation metric crossed the target, interpolated "
            "between the last evaluation below it and the first at or above it (null: not "
            "reached)"),
    ] = None  # fmt: skip
    target_resolution_s: Annotated[
        float | None,
        Doc("the training time between those two evaluations: how finely time_to_target_s "
            "is known (eval_every epochs)"),
    ] = None  # fmt: skip
    epochs_to_target: Annotated[
        Count | None, Doc("the epoch of the first evaluation at or above the target")
    ] = None
    classes: Annotated[
        Count | None, Doc("the dataset's classes: chance accuracy is 1 / classes")
    ] = None


class Record(msgspec.Struct, kw_only=True, gc=False):
    """One attempt at one cell: the line ``results/<host>.jsonl`` gets."""

    schema: str = SCHEMA
    cell: Annotated[str | None, Doc("the stable cell key (stamped by the orchestrator)")] = None
    time: Annotated[str | None, Doc("ISO-8601, when the attempt ended")] = None
    host: str | None = None
    engine: str | None = None
    image: Image = msgspec.field(default_factory=Image)
    params: Params
    status: Status
    metrics: Metrics = msgspec.field(default_factory=Metrics)
    device: Device = msgspec.field(default_factory=Device)
    cpu: Cpu = msgspec.field(default_factory=Cpu)
    software: Software = msgspec.field(default_factory=Software)
    settings: Settings = msgspec.field(default_factory=Settings)
    model: ModelInfo | None = None
    run: Annotated[
        dict[str, Any],
        Doc(
            "wall_s and engine details (container, Slurm job, pid); repeats: why "
            "`repeats: auto` added this process; auto_repeats: that run's settings (the "
            "report says from them where each comparison stopped)"
        ),
    ] = {}
    label: Annotated[
        str | None,
        Doc("`mxbench run --label NAME`: which run (e.g. a driver upgrade) it belongs to"),
    ] = None
    error: Annotated[str | None, Doc("the message's tail when status is not ok")] = None
    source: Annotated[str | None, Doc("where a record not measured by mxbench comes from")] = None
    started_at: Annotated[
        str | None, Doc("ISO-8601 (UTC), when the attempt started on its host")
    ] = None
    finished_at: Annotated[
        str | None,
        Doc("ISO-8601 (UTC), when it ended there: which cells of a fleet overlapped"),
    ] = None
    profile: Annotated[
        Profile | None, Doc("where the time went: the profiled window after the timed one")
    ] = None
    cost_per_hour: Annotated[
        float | None, Doc("the host's cost_per_hour (matrix hosts:), stamped by the engine")
    ] = None
    search: Annotated[
        BatchSearch | None,
        Doc("the batch-size search (axes.batch_size: max) this attempt is a trial of"),
    ] = None
    convergence: Annotated[
        Convergence | None,
        Doc("skipped steps and the one-step check against float32 (mixed policies)"),
    ] = None
    train: Annotated[
        Training | None, Doc("a training run's curve and time to target (params.epochs)")
    ] = None
    pairing: Annotated[
        Pairing | None,
        Doc("the paired design (arms interleaved in one process) that measured the step "
            "times; null: one policy per process (pairing: process, or an older record)"),
    ] = None  # fmt: skip
    pending: Annotated[
        list[str],
        Doc("what had not run yet when the bench printed this record (profile, check): the "
            "bench prints the measured record before its extra phases and again after each; "
            "non-empty only where the process died in one of them (the engine says which "
            "in convergence.note / profile.error); the timed figures stand"),
    ] = []  # fmt: skip

    def problem(self) -> str | None:
        """Why this record cannot stand for a cell in a table, or None when it can."""
        if self.schema != SCHEMA:
            return unknown_schema(self.schema)
        missing = [k for k in ("cell", "host") if not getattr(self, k)]
        if missing:
            return f"missing contract field(s): {', '.join(missing)}"
        return None

    @property
    def step(self) -> StepStats | None:
        """The step times of an ok record, when it has them."""
        step = self.metrics.step_ms
        return step if self.status == "ok" and step is not None and step.median else None


def _short(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def unknown_schema(schema: str) -> str:
    """Why a line of another version than this one (a newer mxbench, another tool) is not
    read: the same words whether the type took its fields or not."""
    return f"unknown schema {_short(schema)} (this mxbench reads {SCHEMA})"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_record(
    *,
    params: Params,
    status: Status,
    error: str | None = None,
    cell: str | None = None,
    host: str | None = None,
    engine: str | None = None,
    image: Image | None = None,
) -> Record:
    """A record of an attempt, stamped with the current time."""
    return Record(
        cell=cell,
        time=now_iso(),
        host=host,
        engine=engine,
        image=image or Image(),
        params=params,
        status=status,
        error=error,
    )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Record)


def encode(record: Record) -> bytes:
    """One JSON line (with its newline). Non-finite floats are written as null."""
    return _encoder.encode(record) + b"\n"


class BadRecord(ValueError):
    """A line that is not a record; ``str()`` is the reason, in one line."""


def decode(line: bytes | str) -> Record:
    """The record on one line, upgraded to this version, or :class:`BadRecord` saying why
    not. A line of the current version is decoded straight into the type; any other line
    (an older version, or one the type rejects) is read as JSON, upgraded (:func:`upgrade`)
    and then converted. Lines over :data:`MAX_LINE_BYTES` and nesting beyond what a record
    can be are refused, never a crash of the reader."""
    if len(line) > MAX_LINE_BYTES:
        raise BadRecord(f"line of {len(line)} bytes (at most {MAX_LINE_BYTES} are read)")
    try:
        rec = _decoder.decode(line)
        if rec.schema == SCHEMA:
            return _bounded(rec)
        obj = _json_decoder.decode(line)
    except msgspec.ValidationError:
        try:
            obj = _json_decoder.decode(line)
        except msgspec.DecodeError as exc:
            obj = _old_non_finite(line, exc)
        except RecursionError:
            raise BadRecord("nested too deeply to be a record") from None
        except UnicodeDecodeError as exc:
            raise _not_utf8(exc) from None
    except RecursionError:
        raise BadRecord("nested too deeply to be a record") from None
    except msgspec.DecodeError as exc:
        obj = _old_non_finite(line, exc)
    except UnicodeDecodeError as exc:  # msgspec's, for a string that is not UTF-8
        raise _not_utf8(exc) from None
    try:
        if isinstance(obj, dict):
            obj = upgrade(obj)
            if obj.get("schema", SCHEMA) == SCHEMA:  # hand-written lines: nulls read as in /1
                _drop_nulls(obj)
        rec = msgspec.convert(obj, Record)
    except msgspec.ValidationError as exc:
        schema = obj.get("schema") if isinstance(obj, dict) else None
        if isinstance(schema, str) and schema != SCHEMA:  # upgrade() knows no step for it
            raise BadRecord(unknown_schema(schema)) from None
        raise BadRecord(_reason(str(exc))) from None
    except RecursionError:
        raise BadRecord("nested too deeply to be a record") from None
    return _bounded(rec)


def _bounded(rec: Record) -> Record:
    if _depth(rec.run) > MAX_DEPTH:  # the one free-form part: readers copy and render it
        raise BadRecord(f"'run' nested deeper than {MAX_DEPTH} levels")
    return rec


def _not_utf8(exc: UnicodeDecodeError) -> BadRecord:
    return BadRecord(f"not UTF-8 text ({exc.reason})")


def _old_non_finite(line: bytes | str, exc: msgspec.DecodeError) -> Any:
    """A line of an earlier version with NaN / Infinity in it, those read as null (what the
    current writer writes for a value that is not finite): the bench before the typed record
    wrote its line with ``json.dumps`` (a loss that was not finite as NaN), and that mxbench
    read it back. Any other line that is not JSON: :class:`BadRecord` saying why."""
    raw = line.encode("utf-8", "replace") if isinstance(line, str) else line
    if _NON_FINITE.search(raw):
        try:
            obj = json.loads(raw, parse_constant=lambda _: None)
        except (ValueError, RecursionError):
            obj = None
        schema = obj.get("schema") if isinstance(obj, dict) else None
        if isinstance(schema, str) and schema in UPGRADES:
            return obj
    raise _not_json(line, exc) from None


def _not_json(line: bytes | str, exc: msgspec.DecodeError) -> BadRecord:
    if isinstance(line, str):
        line = line.encode("utf-8", "replace")
    if _NON_FINITE.search(line):
        return BadRecord("not JSON (NaN / Infinity are not JSON numbers)")
    return BadRecord(f"not JSON ({_reason(str(exc))})")


# ---- Versions: every record shape ever written keeps loading -------------------------------

HISTORY: dict[str, str] = {
    "mxbench.result/1": "2026-11-21 to Step 16: the first contract. Its minimum (schema, cell, "
    "host, status, params) let any other part be null (`metrics: null` on an oom or error); "
    "the first report read a compute capability written as a number (7.0), a pair ([7, 0]) "
    "or a CUDA target ('sm_70'); "
    "device.used_by_tf said whether the framework used the GPU, whatever the backend; the bench "
    "before the typed record wrote a loss that was not finite as NaN or Infinity (json.dumps).",
    SCHEMA: "Step 17: written with no nulls where the type holds an object, a list or a "
    "default (read leniently: such a null is the default, as in /1); "
    "compute capabilities are text ('7.0'); device.used_by_tf is device.used_gpu.",
}
_json_decoder = msgspec.json.Decoder()


def _part_of(hint: Any) -> tuple[type[_Part], bool] | None:
    """The record part a field holds (through Annotated and ``| None``), and whether a list
    of them; None: not a part."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [_part_of(a) for a in typing.get_args(hint) if a is not type(None)]
        return found[0] if len(found) == 1 else None
    if typing.get_origin(hint) is list:
        inner = _part_of(typing.get_args(hint)[0])
        return (inner[0], True) if inner is not None and not inner[1] else None
    return (hint, False) if isinstance(hint, type) and issubclass(hint, _Part) else None


@functools.cache
def _null_shape(
    kind: type[msgspec.Struct],
) -> tuple[tuple[str, ...], tuple[tuple[str, type[_Part], bool], ...]]:
    """Of a record part's fields: those whose default is not None (a null there means "not
    recorded"), and those that hold parts (a part, or a list of them), to walk into."""
    fields = msgspec.structs.fields(kind)
    defaulted = tuple(
        f.encode_name for f in fields
        if (f.default is not None and f.default is not msgspec.NODEFAULT)
        or f.default_factory is not msgspec.NODEFAULT
    )  # fmt: skip
    parts = tuple((f.encode_name, *p) for f in fields if (p := _part_of(f.type)) is not None)
    return defaulted, parts


def _nulls_to_defaults(obj: dict[str, Any], kind: type[msgspec.Struct]) -> None:
    """Every null in ``obj`` (a ``kind``) and in the parts below it where the type holds a
    default other than null, removed (read as that default)."""
    defaulted, parts = _null_shape(kind)
    for name in defaulted:
        if name in obj and obj[name] is None:
            del obj[name]
    for name, part, many in parts:
        value = obj.get(name)
        if many and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _nulls_to_defaults(item, part)
        elif not many and isinstance(value, dict):
            _nulls_to_defaults(value, part)


def cc_pair(value: object) -> tuple[int, int] | None:
    """(major, minor) of a compute capability as any writer put it: '7.0', 7.0, 7, [7, 0],
    ['7', '0'], 'sm_70', 'compute_70' (what the first report read); anything else: None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None
    text = f"{float(value):.1f}" if isinstance(value, (int, float)) else str(value)
    text = text.strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)(\d{1,2})(\d)", text) or re.fullmatch(
        r"(\d{1,2})\.(\d)", text
    )
    return (int(m.group(1)), int(m.group(2))) if m else None


def _cc_text(value: Any) -> Any:
    """A compute capability of an older line as text: 7.0, [8, 6], 'sm_86' -> '7.0', '8.6';
    what :func:`cc_pair` cannot read, unchanged."""
    pair = cc_pair(value)
    return value if pair is None else f"{pair[0]}.{pair[1]}"


def _drop_nulls(obj: dict[str, Any]) -> dict[str, Any]:
    """A null where the type holds an object, a list or a default is read as "not recorded"
    (the default), in every part of the record: the first contract allowed it (`metrics:
    null` on an oom), and a reader that is lenient here loses nothing a writer meant."""
    _nulls_to_defaults(obj, Record)
    return obj


def _upgrade_1_to_2(obj: dict[str, Any]) -> dict[str, Any]:
    _drop_nulls(obj)
    device = obj.get("device")
    if isinstance(device, dict):
        if "used_by_tf" in device:
            device.setdefault("used_gpu", device.pop("used_by_tf"))
        if "compute_capability" in device:
            device["compute_capability"] = _cc_text(device["compute_capability"])
        gpus = device.get("present_gpus")
        for gpu in gpus if isinstance(gpus, list) else ():
            if isinstance(gpu, dict) and "compute_capability" in gpu:
                gpu["compute_capability"] = _cc_text(gpu["compute_capability"])
    obj["schema"] = "mxbench.result/2"
    return obj


# schema -> the step that rewrites a line of it as the next version (applied until current).
UPGRADES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "mxbench.result/1": _upgrade_1_to_2,
}


def upgrade(obj: dict[str, Any]) -> dict[str, Any]:
    """A decoded JSON line of any known version, rewritten (in place) as the current one;
    an unknown schema (a newer mxbench, another tool) is returned as it is."""
    while True:
        schema = obj.get("schema")
        step = UPGRADES.get(schema) if isinstance(schema, str) else None
        if step is None:
            return obj
        obj = step(obj)


# Bounds on what a line may be (a bench's output, a file from anywhere): a record with a
# million timed steps (params.MAX_STEPS) and their losses is about 40 MB.
MAX_LINE_BYTES = 64 * 2**20
MAX_DEPTH = 16


def _depth(value: Any, level: int = 0) -> int:
    """How deeply ``value`` nests (0: a scalar), looking no further than :data:`MAX_DEPTH`."""
    if level > MAX_DEPTH or not isinstance(value, dict | list):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level + 1)


_NON_FINITE = re.compile(rb"[:\[,]\s*-?(NaN|Infinity)\s*[,}\]]")


def _reason(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


_JSON_LINE = re.compile(rb"^\s*\{.*\}\s*$")


def parse_bench_output(stdout: str | bytes) -> Record | None:
    """The record a bench printed: the last stdout line that decodes as one."""
    return bench_output(stdout)[0]


def bench_output(stdout: str | bytes) -> tuple[Record | None, str | None]:
    """The record a bench printed (the last stdout line that decodes as one), or None and
    why the last line that looked like one is not (None: nothing looked like one).

    Searching from the end tolerates stray prints (a library writing to stdout) before it.
    The output is untrusted: bytes that are not UTF-8 are replaced, lines past
    :data:`MAX_LINE_BYTES` and nesting past :data:`MAX_DEPTH` are not records (engines
    bound how much output they keep).
    """
    if isinstance(stdout, str):
        stdout = stdout.encode("utf-8", "replace")
    why = None
    for line in reversed(stdout.splitlines()):
        if not _JSON_LINE.match(line):
            continue
        try:
            rec = decode(line.decode("utf-8", "replace").encode())
        except BadRecord as exc:
            why = why or str(exc)
            continue
        if rec.schema == SCHEMA:
            return rec, None
        why = why or unknown_schema(rec.schema)
    return None, why


def bench_records(stdout: str | bytes) -> list[Record]:
    """Every record a bench printed, in order (a paired process prints one per arm)."""
    if isinstance(stdout, str):
        stdout = stdout.encode("utf-8", "replace")
    out = []
    for line in stdout.splitlines():
        if _JSON_LINE.match(line):
            with contextlib.suppress(BadRecord):
                rec = decode(line.decode("utf-8", "replace").encode())
                if rec.schema == SCHEMA:
                    out.append(rec)
    return out


def tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    """The first line (the reason: an exception's type and message, the engine's account of
    a kill) and the last lines of a log, for error fields: enough to see why, small enough
    to store. What is left out between them is marked."""
    every = text.strip().splitlines()
    if len(every) <= lines and len(text.strip()) <= chars:
        return text.strip()
    head = every[0][: chars // 4] if every else ""
    room = chars - len(head) - 2
    rest = "\n".join(every[1:][-(lines - 2) :])[-room:] if lines > 2 and room > 0 else ""
    return f"{head}\n…\n{rest}" if rest else head


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM are held (delivered right after) while the block runs."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _safe_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"


@dataclass(frozen=True)
class BadLine:
    path: Path
    lineno: int
    reason: str


MAX_WARNINGS = 50  # warnings about unreadable lines a command prints, then how many more


def bad_line_warnings(bad: list[BadLine]) -> list[str]:
    """What a command says about the lines and files it could not read: one warning each
    (``file:line: reason``), at most :data:`MAX_WARNINGS`, then how many more."""
    out = []
    for b in bad[:MAX_WARNINGS]:
        where = f"{b.path}:{b.lineno}" if b.lineno else str(b.path)
        out.append(f"mxbench: warning: {where}: {b.reason} (skipped)")
    if len(bad) > MAX_WARNINGS:
        out.append(f"mxbench: warning: {len(bad) - MAX_WARNINGS} more unreadable line(s) skipped")
    return out


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor on ``path`` that is a regular file, never through a symbolic link (a
    results file that is a link would write into, or read from, whatever it points at) and
    never blocking on a FIFO; OSError saying why not."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_regular(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link (not followed)"
    return f"cannot read ({exc.strerror})"


def read_records(path: Path, bad: list[BadLine] | None = None) -> Iterator[tuple[int, Record]]:
    """(line number, record) for each record of one JSONL file, streamed line by line;
    lines that are not records (or longer than :data:`MAX_LINE_BYTES`) and a file that is
    not a regular file (a symbolic link is not followed) are reported into ``bad``."""
    bad = bad if bad is not None else []
    for lineno, line in read_lines(path, bad):
        try:
            rec = decode(line)
        except BadRecord as exc:
            bad.append(BadLine(path, lineno, str(exc)))
            continue
        yield lineno, rec


READ_CHUNK = 2**20  # bytes read at a time (a line may span chunks)


def read_lines(path: Path, bad: list[BadLine]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for each line of one JSONL file that is not blank, streamed a
    chunk at a time (no line is held longer than :data:`MAX_LINE_BYTES`); lines longer
    than that and a file that is not a regular file (a symbolic link is not followed) are
    reported into ``bad``. A line comes without its newline."""
    try:
        fh = os.fdopen(open_regular(path), "rb")
    except OSError as exc:
        bad.append(BadLine(path, 0, _not_regular(exc)))
        return
    with fh:
        for lineno, line in enumerate(_split(fh), 1):
            if line is None:
                bad.append(BadLine(path, lineno, f"longer than {MAX_LINE_BYTES} bytes"))
                continue
            if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # a byte-order mark (a file saved by a Windows editor)
            if line.strip():
                yield lineno, line


def _split(fh: BinaryIO) -> Iterator[bytes | None]:
    """The lines of a binary file, read :data:`READ_CHUNK` bytes at a time; None for a line
    longer than :data:`MAX_LINE_BYTES` (dropped as it is read, never held whole)."""
    begun: list[bytes] = []  # the start of a line, read in earlier chunks
    size = 0  # its length; -1: longer than MAX_LINE_BYTES
    while chunk := fh.read(READ_CHUNK):
        *ended, rest = chunk.split(b"\n")
        if ended:
            head = ended[0]
            if size < 0 or size + len(head) > MAX_LINE_BYTES:
                yield None
            else:
                yield b"".join([*begun, head]) if begun else head
            for line in ended[1:]:
                yield None if len(line) > MAX_LINE_BYTES else line
            begun, size = [], 0
        if size >= 0:
            size += len(rest)
            begun.append(rest)
            if size > MAX_LINE_BYTES:
                begun, size = [], -1
    if size < 0:
        yield None
    elif size:
        yield b"".join(begun)


LOCK_NAME = ".mxbench-run.lock"


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once (a temporary file beside it, fsync'd, then
    renamed over it): a failure, a full disk included, leaves the old file as it was and no
    fragment; a symbolic link at ``path`` is replaced, not written through. OSError on
    failure."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fh.fileno(), 0o666 & ~umask)  # what open() would have made
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class StoreError(MxbenchError):
    """A record could not be written (full disk, a results file that is not a regular
    file): the run stops, saying which record is not saved."""


def _write_all(fd: int, data: bytes, size: int, path: Path, record: Record) -> None:
    """Write and fsync the whole line at the end of a file of ``size`` bytes; when the disk
    is full (or a quota, or the file size limit is reached), cut what was written back to
    ``size`` (no torn line is left) and raise :class:`StoreError`."""
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise StoreError(
            f"cannot write {path}: {exc.strerror}; the {record.status} record of cell "
            f"{record.cell} (host {record.host}) is not saved (the file is as it was); make "
            "room, then run again with --resume"
        ) from None


class ResultStore:
    """Append-only JSONL files under one directory, one file per host.

    Appends take an exclusive ``flock`` and write the whole line with one ``write`` on an
    ``O_APPEND`` descriptor, then fsync: two runs writing at once never interleave, and a
    crash loses at most the record being written.
    """

    def __init__(self, root: Path | str, label: str | None = None) -> None:
        self.root = Path(root)
        self.label = label  # stamped on every record appended (mxbench run --label)

    def path_for(self, host: str) -> Path:
        return self.root / f"{_safe_name(host)}.jsonl"

    def append(self, record: Record) -> Path:
        """Append one line. A torn last line (a crash mid-write) is ended first, so this
        record stays whole (the report still warns about the torn one); SIGINT / SIGTERM
        wait until the line is written, so an interrupt never leaves half a record."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path_for(record.host or "unknown")
        if self.label is not None and record.label is None:
            record.label = self.label
        data = encode(record)
        with _signals_held():
            try:
                fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            except OSError as exc:
                raise StoreError(f"cannot write {path}: {_not_regular(exc)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        data = b"\n" + data
                    _write_all(fd, data, size, path, record)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        return path

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the results directory for one ``mxbench run``: a second run on the same
        directory (which would measure the same cells at the same time) stops with exit 2,
        saying which process holds it. The lock is the kernel's (``flock``): it goes with
        its process, ``kill -9`` included, so it is never stale."""
        path = self.root / LOCK_NAME
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise UsageError(f"--results {self.root}: cannot lock {path.name}: "
                             f"{_not_regular(exc)}") from None  # fmt: skip
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
                raise UsageError(
                    f"--results {self.root} is in use by another mxbench run ({holder}); "
                    "wait for it to end, or give this run another --results"
                ) from None
            me = {"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso(),
                  "argv": sys.argv[1:]}  # fmt: skip
            with contextlib.suppress(OSError):  # who holds it: a courtesy (a full disk...)
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(me).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def check_writable(self, hosts: Iterable[str]) -> None:
        """Before anything is measured: the directory exists or can be made, is writable,
        and each host's file, where it exists, is a regular file. UsageError says why."""
        where = f"--results {self.root}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise UsageError(f"{where}: exists and is not a directory") from None
        except OSError as exc:
            raise UsageError(f"{where}: cannot create the directory ({exc.strerror})") from None
        if not self.root.is_dir():
            raise UsageError(f"{where}: exists and is not a directory")
        try:
            with tempfile.TemporaryFile(dir=self.root):
                pass
        except OSError as exc:
            raise UsageError(f"{where}: cannot write there ({exc.strerror})") from None
        for host in sorted(set(hosts)):
            path = self.path_for(host)
            if path.is_symlink():
                raise UsageError(f"{where}: {path.name} is a symbolic link (not followed)")
            if os.path.lexists(path) and not path.is_file():
                raise UsageError(f"{where}: {path.name} exists and is not a regular file")
            if path.is_file() and not os.access(path, os.W_OK):
                raise UsageError(f"{where}: {path.name} is not writable")

    def files(self) -> list[Path]:
        return sorted(self.root.glob("*.jsonl")) if self.root.is_dir() else []

    def latest_by_cell(self, bad: list[BadLine] | None = None) -> dict[str, Record]:
        """Latest record per cell key (file order is append order, so last wins); with a
        label, among that label's records only (a new label measures everything again);
        lines that are not records are reported into ``bad``."""
        latest: dict[str, Record] = {}
        for path in self.files():
            for _, rec in read_records(path, bad):
                if rec.cell and (self.label is None or rec.label == self.label):
                    latest[rec.cell] = rec
        return latest

    def done_cells(self) -> set[str]:
        return {k for k, r in self.latest_by_cell().items() if r.status in FINAL_STATUSES}
