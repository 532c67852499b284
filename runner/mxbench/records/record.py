"""The result record: one type, defined once.

A record is one attempt at one cell. :class:`Record` is the contract: the bench fills it
(params, metrics, device, cpu, software, settings, status), the engines stamp who ran it
(cell key, host, engine, image) or make one for a failure (timeout, kill, garbage), the
store (:mod:`mxbench.records.store`) writes it as one JSON line
(:mod:`mxbench.records.codec`), and the report and ``--resume`` decode the same type.
``docs/record.md`` is generated from it (``python -m mxbench.records.doc``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from mxbench.matrix.params import Params
from mxbench.matrix.search import BatchSearch
from mxbench.records.distribution import Distribution, Interconnect, Replica
from mxbench.records.inference import Inference
from mxbench.records.pairing import Interference, Pairing, Window
from mxbench.records.part import Count, Doc, Part, Positive
from mxbench.records.profile import CATEGORY_NAMES, OneDnnEvidence, Profile, TopOp
from mxbench.roofs.model import Roof

__all__ = [
    "CATEGORY_NAMES",
    "Count",
    "Distribution",
    "Doc",
    "Interconnect",
    "Interference",
    "OneDnnEvidence",
    "Pairing",
    "Part",
    "Positive",
    "Profile",
    "Replica",
    "Roof",
    "TopOp",
    "Window",
]

SCHEMA = "mxbench.result/2"  # the version this mxbench writes (HISTORY: every version)
Status = Literal["ok", "oom", "error", "timeout", "unsupported"]
STATUSES: tuple[str, ...] = ("ok", "oom", "error", "timeout", "unsupported")
# A cell whose latest record has one of these is done: --resume skips it.
# An OOM is a real, final answer about that device and batch size.
FINAL_STATUSES = frozenset({"ok", "oom"})


class StepStats(Part):
    """Milliseconds per timed step (warm-up excluded)."""

    median: Positive | None = None
    p25: Positive | None = None
    p75: Positive | None = None
    mean: Positive | None = None
    min: Positive | None = None
    max: Positive | None = None
    n: Count | None = None
    samples: Annotated[list[Positive], Doc("every timed step, in order (ms): the raw samples")] = []


class GpuHealth(Part):
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


class Metrics(Part):
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
        Doc("energy over the timed window per step (a paired arm: its own windows): NVML's "
            "cumulative counter (the GPU) or RAPL's (the CPU package), see energy_source"),
    ] = None  # fmt: skip
    energy_j_per_image: float | None = None
    energy_source: Annotated[
        str | None, Doc("nvml (GPU board) or rapl (CPU packages): what the joules cover")
    ] = None
    phases_s: Annotated[
        dict[str, float],
        Doc("where the process's time went (s), phase by phase: start (interpreter, mxbench "
            "import), roofs, import (framework), build, data, facts, first_step, warmup, "
            "timed, fit_other, probe, profile, check (mxbench.bench.process.timing.PHASES)"),
    ] = {}  # fmt: skip


class Convergence(Part):
    """Whether the policy still trains like float32 (mxbench.bench.model.convergence): the steps its
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


class PresentGpu(Part):
    name: str | None = None
    compute_capability: str | None = None
    uuid: str | None = None


class Device(Part):
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


class Cpu(Part):
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


class Software(Part):
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


class Settings(Part):
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
    onednn_max_cpu_isa: Annotated[
        str | None,
        Doc("ONEDNN_MAX_CPU_ISA: the highest instruction set oneDNN may use (AVX2, "
            "AVX512_CORE_BF16...), a cap below the CPU's own"),
    ] = None  # fmt: skip
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


class Image(Part):
    name: Annotated[str | None, Doc("the matrix's image name (or a Slurm container image)")] = None
    id: Annotated[str | None, Doc("the Docker image id")] = None
    labels: Annotated[dict[str, str], Doc("io.mxbench.* provenance labels")] = {}
    runtime: Annotated[str | None, Doc("Slurm container runtime (pyxis, apptainer)")] = None


class OffMultipleOf8(Part):
    """A GEMM dimension of one layer that is not a multiple of 8."""

    layer: str | None = None
    kind: Annotated[str | None, Doc("the layer's class: Conv2D, Dense, Embedding, ...")] = None
    attribute: Annotated[
        str | None, Doc("input channels, filters, units, vocabulary, heads x key dim, ...")
    ] = None
    value: int | None = None


class PolicyOverride(Part):
    """A layer whose dtype policy is not the global one (an output head kept in float32)."""

    layer: str | None = None
    policy: str | None = None


class ModelInfo(Part):
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
    image_input: Annotated[
        list[int] | None,
        Doc("[height, width] of the image the model took: its own where its input is fixed "
            "(whatever image_size asked), else the cell's; null for inputs other than images"),
    ] = None  # fmt: skip
    layers: Annotated[dict[str, int], Doc("leaf layers by class (nested models expanded)")] = {}
    flops_per_example: Annotated[
        float | None, Doc("training FLOPs per example: forward x 3 (forward + backward)")
    ] = None
    flops_source: Annotated[
        Literal["xla", "formula", "analytic"] | None,
        Doc("xla: XLA's cost analysis of the forward pass; formula: the model's own; analytic: "
            "a walk of the layers (convolutions, dense, attention; elementwise ignored)"),
    ] = None  # fmt: skip
    flops_by_source: Annotated[
        dict[str, float],
        Doc("training FLOPs per example (forward x 3, an FMA = 2 FLOP) from every source that "
            "gave one: formula, xla, analytic (flops_source names the one used), so that "
            "their disagreement shows; xla as XLA's cost analysis answered: a value <= 0 "
            "(-1: it could not count) is its own answer, recorded and never used"),
    ] = {}  # fmt: skip
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


class TrainPoint(Part):
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


class Training(Part):
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
    distribution: Annotated[
        Distribution | None,
        Doc("data parallel over params.devices > 1 devices (null: one device)"),
    ] = None
    inference: Annotated[
        Inference | None,
        Doc("a serving cell's timed calls, latency percentiles and gate (params.mode infer)"),
    ] = None
    roofs: Annotated[
        list[Roof],
        Doc("how fast the device that ran the cell can go, per dtype, each figure with its "
            "provenance: the backend's measured matmul ceilings and memory bandwidth (the "
            "roofs cache of this device and stack, else a quick probe in the bench process), "
            "the formula peaks (a CPU's ISA flags x cores x clock; a GPU's SMs x clock x "
            "rate) and a known GPU's dense datasheet figures; empty: not found (an older "
            "record)"),
    ] = []  # fmt: skip
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
        if self.cell and self.host:
            return None  # every record read (this runs once per line)
        missing = [k for k in ("cell", "host") if not getattr(self, k)]
        return f"missing contract field(s): {', '.join(missing)}"

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
