"""What a bench process keeps between its phases, and the phases both kinds of process run:
a cell of one policy (:mod:`mxbench.bench.process.cell`) and the arms of one comparison
(:mod:`mxbench.bench.process.paired`).

:class:`Process` is the one object both pass through their phases: it loads the backend,
builds an arm, starts the energy counter, probes the device and prints the record as
measured so far. The rest is what both decide the same way: which process runs the profiled
window and the one-step check, what an out-of-memory failure looks like, and the record's
metrics from one measurement's figures.
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec

from mxbench.bench import backends
from mxbench.bench.evidence import energy, probe, roofline
from mxbench.bench.evidence.gpu_health import HealthSampler
from mxbench.bench.model import convergence
from mxbench.bench.parallel import distribute, independent
from mxbench.bench.process.timing import Phases
from mxbench.errors import UsageError, pip_install
from mxbench.matrix import scale
from mxbench.matrix.params import BASELINE, Params
from mxbench.records.codec import now_iso
from mxbench.records.record import (
    Convergence,
    Device,
    Metrics,
    ModelInfo,
    Record,
    Settings,
    StepStats,
)
from mxbench.roofs.collect import Roofs

_OOM_NAMES = ("ResourceExhaustedError", "OutOfMemoryError", "MemoryError")
_OOM_TEXT = ("resource_exhausted", "out of memory", "oom when allocating", "failed to allocate")


def is_oom(exc: BaseException) -> bool:
    """TensorFlow's ResourceExhaustedError, Python's MemoryError, jax/torch equivalents."""
    if isinstance(exc, MemoryError) or type(exc).__name__ in _OOM_NAMES:
        return True
    text = str(exc).lower()
    return any(t in text for t in _OOM_TEXT)


Emit = Callable[[Record], None]


@dataclass
class CheckInputs:
    """What the one-step check needs once the timed work is over: the arm's convergence
    figures so far, its model, the initial weights it started from and the batch it saw."""

    found: Convergence
    model: Any
    initial: convergence.Initial | None
    batch: Any
    reference: Any = None  # a float32 build of the same model, done with (a paired float32 arm)

    def check(self, p: Params, timed: StepStats | None = None) -> Convergence:
        """The one-step check of one arm (``p``), from what its timed work left (``timed``:
        its timed steps, whose pace bounds the check's examples)."""
        assert self.initial is not None
        median = timed.median if timed is not None else None
        examples = convergence.examples_for(scale.process_batch(p), median)
        return convergence.check(p, self.found, self.model, self.initial, self.batch,
                                 reference=self.reference, examples=examples)  # fmt: skip


@dataclass
class Arm:
    """One policy's model, built and compiled, with its input."""

    p: Params
    prepared: Any
    ds: Any
    x: Any = None  # the synthetic batch (None: a dataset)
    y: Any = None

    @property
    def model(self) -> Any:
        return self.prepared.model


@dataclass
class Process:
    """What one bench process keeps between its phases: a cell, or the arms of a paired
    process. Filled as the phases run; a failure leaves what was reached."""

    phases: Phases
    backend: backends.Backend | None = None
    model: Any = None  # the last model built
    initial: list[convergence.Initial | None] = field(default_factory=list)
    util: HealthSampler | None = None
    gpu: dict[str, Any] | None = None  # the NVML GPU the timed steps ran on
    gpu_known: bool = False  # ``gpu`` was looked up (None then means: not a GPU's)
    checks: list[CheckInputs | None] = field(default_factory=list)  # one per arm
    timed_window: tuple[float, float] | None = None
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # per policy
    probed: bool = False
    dist: Any = None  # the devices of data parallel (bench.parallel.distribute.Plan; None: one)
    roofs: Roofs | None = None  # this host's, for the backend (bench.evidence.roofline.find)

    def load_backend(self, p: Params, rec: Record) -> float:
        """Import the backend and Keras (seconds it took); the first import's objects are
        frozen out of the garbage collector's sight: each model build's collection (Keras'
        ``clear_session``) and tracing would otherwise rescan some 450k of them."""
        t0 = time.perf_counter()
        backend = backends.select(p.backend)
        distribute.before_import(p)
        try:
            backend.load(rec)
        except ImportError as exc:
            extra = backends.EXTRAS[p.backend]
            raise UsageError(
                f"--backend {p.backend}: {exc.name or 'the framework'} is not installed here "
                f"({pip_install(extra)})"
            ) from None
        self.backend = backend
        spread = independent.setup if p.scaling == scale.INDEPENDENT else distribute.setup
        self.dist = spread(p)
        import keras

        rec.software.keras = keras.__version__
        if not gc.get_freeze_count():  # the first import of this process, not a later pass's
            gc.freeze()  # the framework's import-time objects: never rescanned by the collector
        self.phases.mark("import")
        return time.perf_counter() - t0

    def build_arm(self, p: Params, rec: Record) -> Arm:
        """Build, compile and feed the model of ``p`` (its policy); the record's model facts."""
        from mxbench.bench.model import data, facts, harness

        phases = self.phases
        rec.model = ModelInfo(name=p.model)
        in_scope = partial(distribute.scope, self.dist)
        prepared = harness.prepare(p, harness.set_policy, p.seed, in_scope)
        model = self.model = prepared.model
        with in_scope():
            jit = distribute.jit_compile(self.dist, p.jit_compile)
            harness.compile_model(prepared, jit, p.loss_scale, p.steps_per_execution)
        distribute.replicate(self.dist, model)  # PyTorch's processes: rank 0's weights, averaging
        dtype_settings(rec.settings, model, p.policy)
        phases.mark("build")
        if p.epochs:  # a training run: no input pipeline of ours
            rec.model = facts.model_info(p, prepared, None)
            return Arm(p, prepared, None)
        x = y = None
        fed = distribute.batch_params(p)  # the input: the global batch, split over the devices
        if prepared.dataset is not None:
            ds = _user_dataset(prepared, fed)
            rec.settings.input_device = "model's dataset"
        elif p.synthetic:
            x, y = harness.synthetic_batch(prepared, fed, distribute.rank(p))  # each its own
            assert self.backend is not None
            ds, rec.settings.input_device = self.backend.dataset(x, y)
        else:
            binary = harness.label_kind(model, prepared.labels) == "binary"
            size = prepared.image or p.image_hw
            ds = data.image_folder(p.data, fed.batch_size, size, flip=p.flip, binary=binary)
            rec.settings.input_device = "host"
        ds = distribute.feed(self.dist, ds)  # TensorFlow's workers: each its own input
        phases.mark("data")
        rec.model = facts.model_info(p, prepared, x)
        phases.mark("facts")
        return Arm(p, prepared, ds, x, y)

    def emit_pending(self, emit: Emit | None, rec: Record, pending: list[str]) -> None:
        """Print the record as measured so far, naming the phases still to run (none: nothing
        to print, the final record follows)."""
        if emit is None or not pending:
            return
        metrics = msgspec.structs.replace(rec.metrics, phases_s=self.phases.done())
        emit(msgspec.structs.replace(rec, pending=list(pending), metrics=metrics, time=now_iso()))

    def probe_device(self, rec: Record) -> None:
        """Device, GPU utilisation and peak memory; never turns a measured record into a
        failure."""
        try:
            nvml, driver = probe.nvml_gpus()
            backend, model = self.backend, self.model
            fw_gpus: list[dict[str, Any]] = []
            used = False
            if backend is not None:
                fw_gpus = backend.accepted_gpus()
                used = backend.model_on_gpu(model) if model is not None else bool(fw_gpus)
            found = self._used_gpus(1) if used and not self.gpu_known else None
            gpu = self.gpu if self.gpu_known else found[0] if found else None
            rec.device = msgspec.convert(
                probe.device_record(
                    nvml=nvml,
                    driver=driver,
                    framework_gpus=fw_gpus,
                    used_gpu=used,
                    cpu_model=rec.cpu.model,
                    framework=rec.params.backend,
                    gpu=gpu,
                ),
                Device,
            )
            self.gpu_util(rec)
            rec.device.framework = rec.params.backend
            rec.roofs = roofline.for_record(self.roofs, rec)
            peak = backend.peak_gpu_memory_bytes() if used and backend is not None else None
            limited = probe.cgroup_peak_bytes()
            if peak is not None:
                rec.metrics.peak_memory_bytes, rec.metrics.peak_memory_kind = peak, "gpu"
            elif limited is not None:
                rec.metrics.peak_memory_bytes, rec.metrics.peak_memory_kind = limited, "cgroup"
            else:
                rec.metrics.peak_memory_bytes = probe.peak_rss_bytes()
                rec.metrics.peak_memory_kind = "rss"
        except Exception as exc:
            print(f"mxbench bench: device probe failed: {exc!r}", file=sys.stderr)

    def gpu_util(self, rec: Record) -> None:
        """NVML utilisation and health of the GPU that ran the timed steps (GPU runs only)."""
        sampler, window = self.util, self.timed_window
        if sampler is not None and window is not None and rec.device.kind == "gpu":
            rec.metrics.gpu_util_pct = sampler.median_pct(*window, uuid=rec.device.uuid)
            rec.metrics.gpu_health = sampler.health(*window, uuid=rec.device.uuid)

    def start_energy(self, p: Params) -> energy.Counter | None:
        """A running energy counter of the devices this process trains on (every GPU it was
        matched to, summed, else the CPU package), before the timed steps; ``gpu`` says
        which GPU is the first. Its joules are charged to this process's examples
        (:func:`mxbench.matrix.scale.process_batch`)."""
        gpus = self._used_gpus(scale.total_devices(p) // scale.processes(p))
        self.gpu, self.gpu_known = (gpus[0] if gpus else None), True  # whose energy is charged
        uuids = [str(g.get("uuid")) for g in gpus] if gpus else None
        return energy.start(gpu=self._on_gpu(), uuid=uuids)

    def _used_gpus(self, count: int) -> list[dict[str, Any]] | None:
        """The NVML GPUs the model trains on (None: on the CPU, or not all to be told apart)."""
        if not self._on_gpu():
            return None
        nvml, _ = probe.nvml_gpus()
        assert self.backend is not None
        return probe.used_gpus(nvml, count, probe.framework_gpu(self.backend.name))

    def _on_gpu(self) -> bool:
        backend, model = self.backend, self.model
        return bool(backend is not None and model is not None and backend.model_on_gpu(model))

    def drop_initial(self) -> None:
        """The one-step check's initial weights on disk are not needed past the check (or a
        failure)."""
        for initial in self.initial:
            if initial is not None:
                initial.drop()


def fill_metrics(
    rec: Record, model: Any, found: dict[str, Any], import_s: float, losses: list[float]
) -> None:
    """The record's metrics (and its jit setting) from one measurement's figures
    (:func:`mxbench.bench.process.timing.figures`) and each timed step's loss: a cell's or
    one arm's of a paired process."""
    finite = [_finite(x) for x in losses]
    rec.settings.jit_compile = bool(model.jit_compile)
    rec.metrics = Metrics(
        **{**found, "step_ms": msgspec.convert(found["step_ms"], StepStats)},
        import_s=round(import_s, 3),
        loss_first=finite[0] if finite else None,
        loss_last=finite[-1] if finite else None,
        losses=finite,
        loss_scale=_loss_scale(model),
        train_flops_per_image=rec.model.flops_per_example if rec.model else None,
    )


def dtype_settings(settings: Settings, model: Any, policy: str) -> None:
    """The record's dtype settings from the model as built: its first layer's compute and
    variable dtypes, whether its optimizer scales the loss."""
    import keras

    from mxbench.bench.model.facts import leaves

    first = next((x for x in leaves(model) if x.weights), None)
    if first is not None:
        settings.compute_dtype = str(first.compute_dtype)
        settings.variable_dtype = str(first.weights[0].dtype)
    optimizer = getattr(model, "optimizer", None)  # a serving cell's model has none
    settings.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    settings.pure_float16 = policy == "float16"


def _user_dataset(prepared: Any, p: Params) -> Any:
    from mxbench.bench.model.harness import ModelError

    assert prepared.dataset is not None
    try:
        return prepared.dataset(p.batch_size, 0)
    except (Exception, SystemExit) as exc:
        raise ModelError(
            f"model {p.model!r}: dataset() raised {type(exc).__name__}: {exc}"
        ) from exc


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _loss_scale(model: Any) -> float | None:
    import keras

    opt = model.optimizer
    if not isinstance(opt, keras.optimizers.LossScaleOptimizer):
        return None
    return float(keras.ops.convert_to_numpy(opt.dynamic_scale))


def first_process(p: Params) -> bool:
    """The first process of a cell (repeat None or 0): it alone runs the phases that answer
    other questions than the step time (the profiled window, the one-step check), which a
    cell needs once, not in every repeat."""
    return not p.repeat


def runs_profile(p: Params) -> bool:
    """Whether this process runs the profiled window (``profile: on``, first process); a
    serving cell's is a window of its calls (TensorFlow on a CPU: oneDNN's creation log
    of its warm-up calls instead)."""
    return p.profile == "on" and first_process(p)


def runs_check(p: Params) -> bool:
    """Whether this process runs the one-step check (``check: on``, a policy other than
    float32, first process; independent replicas in several processes: the first's)."""
    ran = p.check == "on" and p.policy != BASELINE and first_process(p) and p.mode == "train"
    return ran and (p.scaling != scale.INDEPENDENT or distribute.rank(p) == 0)  # on replica 0
