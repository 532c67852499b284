"""One cell, end to end: import, probe, build, warm up, time, and fill the record.

Failure is data: an out-of-memory condition gives status ``oom``, anything else ``error``
with the message's tail; the caller still prints the record and exits 0. Only bad
arguments (:class:`mxbench.errors.UsageError`) escape.
"""

from __future__ import annotations

import gc
import math
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec

from mxbench.bench import (
    backends,
    convergence,
    distribute,
    energy,
    independent,
    probe,
    torch_launch,
)
from mxbench.bench.evidence import profile as profiler
from mxbench.bench.evidence.gpu_health import HealthSampler
from mxbench.bench.model.served import NO_FILES, WeightFiles, save
from mxbench.bench.process.timing import Phases, StepLog, split, step_timer, window_figures
from mxbench.errors import UsageError, pip_install
from mxbench.matrix import scale
from mxbench.matrix.params import BASELINE, Params
from mxbench.records.codec import new_record, now_iso, tail
from mxbench.records.inference import Gate
from mxbench.records.record import (
    Convergence,
    Cpu,
    Device,
    Metrics,
    ModelInfo,
    Profile,
    Record,
    Settings,
    Software,
    StepStats,
)
from mxbench.version import __version__

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


@dataclass
class CellState:
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
    dist: Any = None  # the devices of data parallel (bench.distribute.Plan; None: one)


def run_cell(
    p: Params,
    started_at: float | None = None,
    on_step: Callable[[int], None] | None = None,
    emit: Emit | None = None,
    files: WeightFiles = NO_FILES,
) -> Record:
    """Measure the cell described by ``p`` (already validated) into a result record.

    ``emit``: called with the record as measured before each extra phase (the profiled
    window, the one-step check) with ``pending`` naming what is still to run, so that a
    process killed in one of them (out of memory under a limit) leaves its timed figures.
    ``files``: the weights a training run saves, or a serving cell serves."""
    started_at = started_at or probe.process_start_time() or time.time()
    if torch_launch.launches(p):  # PyTorch on N devices: N processes, started here
        merge = independent.merge if p.scaling == scale.INDEPENDENT else None
        return torch_launch.run(p, run_cell, started_at, emit or (lambda _rec: None), merge)
    phases = Phases(started_at)
    rec = new_record(params=p, status="ok")
    rec.cpu = msgspec.convert(probe.cpu_info(), Cpu)
    rec.software = Software(python=sys.version.split()[0], backend=p.backend, mxbench=__version__)
    rec.settings = msgspec.convert({**probe.number_settings(), "policy": p.policy}, Settings)
    state = CellState(phases)
    phases.mark("probe")
    # the profiled window answers "where does the time go": once per cell, not per repeat
    profiled = p if runs_profile(p) else msgspec.structs.replace(p, profile="off")
    try:
        profiler.around(
            profiled, rec, lambda: _measure(p, rec, state, started_at, on_step, emit, files)
        )
    except UsageError:
        raise
    except Exception as exc:  # failure is data
        traceback.print_exc(file=sys.stderr)
        rec.status = "oom" if is_oom(exc) else "error"
        rec.error = tail(f"{type(exc).__name__}: {exc}")
    if not state.probed:  # a failure before the timed steps ended
        phases.mark("fit_other")
        probe_device(rec, state)
        phases.mark("probe")
    for c in filter(None, state.checks):  # after the timed steps, the memory probe, the profile
        # the one-step check against float32: once per cell, not per repeat
        rec.convergence = check(p, c) if runs_check(p) else c.found
    drop_initial(state)
    phases.mark("check")
    rec.metrics.phases_s = phases.done()
    rec.time = now_iso()
    return rec


def load_backend(p: Params, rec: Record, state: CellState) -> float:
    """Import the backend and Keras (seconds it took); the first import's objects are frozen
    out of the garbage collector's sight: each model build's collection (Keras'
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
    state.backend = backend
    spread = independent.setup if p.scaling == scale.INDEPENDENT else distribute.setup
    state.dist = spread(p)
    import keras

    rec.software.keras = keras.__version__
    if not gc.get_freeze_count():  # the first import of this process, not a later pass's
        gc.freeze()  # the framework's import-time objects: never rescanned by the collector
    state.phases.mark("import")
    return time.perf_counter() - t0


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


def build_arm(p: Params, rec: Record, state: CellState) -> Arm:
    """Build, compile and feed the model of ``p`` (its policy); the record's model facts."""
    from mxbench.bench.model import data, facts, harness

    phases = state.phases
    rec.model = ModelInfo(name=p.model)
    in_scope = partial(distribute.scope, state.dist)
    prepared = harness.prepare(p, harness.set_policy, p.seed, in_scope)
    model = state.model = prepared.model
    with in_scope():
        jit = distribute.jit_compile(state.dist, p.jit_compile)
        harness.compile_model(prepared, jit, p.loss_scale, p.steps_per_execution)
    distribute.replicate(state.dist, model)  # PyTorch's processes: rank 0's weights, averaging
    _dtype_settings(rec.settings, model, p.policy)
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
        assert state.backend is not None
        ds, rec.settings.input_device = state.backend.dataset(x, y)
    else:
        binary = harness.label_kind(model, prepared.labels) == "binary"
        size = prepared.image or p.image_hw
        ds = data.image_folder(p.data, fed.batch_size, size, flip=p.flip, binary=binary)
        rec.settings.input_device = "host"
    ds = distribute.feed(state.dist, ds)  # TensorFlow's workers: each its own input
    phases.mark("data")
    rec.model = facts.model_info(p, prepared, x)
    phases.mark("facts")
    return Arm(p, prepared, ds, x, y)


def _measure(
    p: Params,
    rec: Record,
    state: CellState,
    started_at: float,
    on_step: Callable[[int], None] | None,
    emit: Emit | None = None,
    files: WeightFiles = NO_FILES,
) -> None:
    import_s = load_backend(p, rec, state)
    if p.mode == "infer":  # a serving cell: inference calls only (bench/process/infer.py)
        _serve(p, rec, state, import_s, emit, files)
        return
    if p.scaling == scale.INDEPENDENT and state.dist is not None:
        _independent(p, rec, state, import_s, started_at)
        return
    arm = build_arm(p, rec, state)
    model, ds, x, y = arm.model, arm.ds, arm.x, arm.y
    phases = state.phases
    if p.epochs:  # a training run to an accuracy, not a timing cell (bench/process/train.py)
        from mxbench.bench.process import train

        train.run(p, arm.prepared, rec)
        if files.save is not None:  # its final weights, for serving cells (mxbench.cells.trained)
            save(model, files.save)
        return

    initial = convergence.Initial(model) if runs_check(p) else None  # for the one-step check
    state.initial = [initial]
    phases.mark("check")
    log_ = StepLog()
    total = p.warmup_steps + p.steps
    timer = step_timer(log_, on_step, p.warmup_steps)
    sampler = state.util = HealthSampler()
    sampler.start()
    joules = start_energy(state, p)
    try:
        model.fit(ds, epochs=1, steps_per_epoch=total, verbose=0, shuffle=False, callbacks=[timer])
    finally:
        sampler.stop()
    spe = p.steps_per_execution  # Keras reports once per call of spe steps: a sample per call
    parts = split(log_, p.warmup_steps // spe)
    phases.fit(parts)
    found = convergence.skipped(model, total)
    state.checks = [CheckInputs(found, model, initial, (x, y) if x is not None else ds)]
    state.timed_window = (parts["first_timed_start"], log_.ends[-1])
    _metrics(p, rec, model, log_, parts, import_s, started_at)
    batch = scale.process_batch(p)  # the examples of the devices whose joules were read
    energy.fill(rec.metrics, joules, [state.timed_window], p.steps, batch)
    distribute.fill(state.dist, rec, model, "process")
    # the device and the peak memory now: the training's, before anything else runs
    phases.mark("fit_other")
    probe_device(rec, state)
    state.probed = True
    phases.mark("probe")
    pending = [name for name, on in (("profile", runs_profile(p)), ("check", runs_check(p))) if on]
    emit_pending(emit, rec, pending, phases)
    if runs_profile(p):  # after the timed window, never inside it
        gpu = state.backend is not None and state.backend.model_on_gpu(model)
        steps = profiler.steps_for(rec.metrics.step_ms)
        rec.profile = profiler.run(p.backend, model, ds, gpu=gpu, steps=steps)
        phases.mark("profile")
        emit_pending(emit, rec, pending[1:], phases)


def _metrics(
    p: Params, rec: Record, model: Any, log_: StepLog, parts: dict[str, Any], import_s: float,
    started_at: float,
) -> None:  # fmt: skip
    """The record's metrics from a fit's parts (:func:`mxbench.bench.process.timing.split`) and its
    log (the losses)."""
    spe = p.steps_per_execution
    total = p.warmup_steps + p.steps
    flops = rec.model.flops_per_example if rec.model else None
    found = window_figures(parts, scale.global_batch(p), p.steps, spe, started_at, flops)
    losses = [log_.step_loss(k) for k in range(p.warmup_steps // spe, total // spe)]
    fill_metrics(rec, model, found, import_s, losses)


def fill_metrics(
    rec: Record, model: Any, found: dict[str, Any], import_s: float, losses: list[float]
) -> None:
    """The record's metrics (and its jit setting) from one measurement's figures
    (:func:`mxbench.bench.process.timing.figures`) and each timed step's loss: a cell's or one arm's
    of a paired process."""
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


def _independent(p: Params, rec: Record, state: CellState, import_s: float,
                 started_at: float) -> None:  # fmt: skip
    """Independent replicas (bench/parallel/independent.py): one arm per device, fitted at once,
    their record as one (the slowest replica's steps) with each replica's own figures; the
    one-step check on the first replica, and the GPU utilisation of its device. No
    profiled window (which replica's?), no energy (one device's counter for N devices'
    examples would say a wrong figure per image)."""
    plan = state.dist
    one = msgspec.structs.replace(p, devices=1)  # what each replica is: batch_size its own
    arms = independent.build(plan, lambda: build_arm(one, rec, state))
    model = state.model = arms[0].model
    initial = convergence.Initial(model) if runs_check(p) else None
    state.initial = [initial]
    state.phases.mark("check")
    sampler = state.util = HealthSampler()
    sampler.start()
    try:
        logs = independent.train(p, plan, arms)
    finally:
        sampler.stop()
    parts = independent.combined(p, logs)
    state.timed_window = (parts["first_timed_start"], max(log.ends[-1] for log in logs))
    state.phases.fit(parts)
    found = convergence.skipped(model, p.warmup_steps + p.steps)
    batch = (arms[0].x, arms[0].y) if arms[0].x is not None else arms[0].ds
    state.checks = [CheckInputs(found, model, initial, batch)]
    _metrics(p, rec, model, logs[0], parts, import_s, started_at)
    distribute.fill(plan, rec, model, "process")
    independent.fill(p, rec, plan, arms, parts)
    state.phases.mark("fit_other")
    probe_device(rec, state)
    state.probed = True
    state.phases.mark("probe")


def _serve(
    p: Params,
    rec: Record,
    state: CellState,
    import_s: float,
    emit: Emit | None,
    files: WeightFiles,
) -> None:
    """Time a serving cell's calls, read the device and its memory, then (policies but
    float32, first process) compare its outputs with float32's."""
    from mxbench.bench.process import infer

    assert state.backend is not None
    served = infer.measure(p, rec, state.backend, state.phases, import_s, files)
    state.model = served.model
    _dtype_settings(rec.settings, served.model, p.policy)
    state.phases.mark("fit_other")
    probe_device(rec, state)  # the memory answer: before the gate builds float32's model
    state.probed = True
    state.phases.mark("probe")
    if runs_profile(p) and p.backend == "tensorflow" and rec.device.kind == "cpu":
        # which oneDNN kernels ran: their creation log (warm-up calls), filled by
        # profile.around once the cell is measured
        rec.profile = Profile(tool="oneDNN creation log (warm-up calls)", device="cpu")
    elif runs_profile(p) and served.call is not None:  # the kernels of a window of calls
        gpu = rec.device.kind == "gpu"
        rec.profile = profiler.run(p.backend, served.model, None, gpu=gpu, calls=served.call)
        state.phases.mark("profile")
    if rec.inference is not None and first_process(p) and infer.needs_gate(p, files):
        if rec.profile is not None:
            profiler.end_log()  # float32's kernels are not the cell's
        rec.inference.gate = Gate(note="the process ended before the comparison finished")
        emit_pending(emit, rec, ["gate"], state.phases)
        rec.inference.gate = infer.gate(p, served, state.backend.name)
        state.phases.mark("check")


def check(p: Params, c: CheckInputs) -> Convergence:
    """The one-step check of one arm (``p``), from what its timed work left."""
    assert c.initial is not None
    return convergence.check(p, c.found, c.model, c.initial, c.batch)


def emit_pending(emit: Emit | None, rec: Record, pending: list[str], phases: Phases) -> None:
    """Print the record as measured so far, naming the phases still to run (none: nothing
    to print, the final record follows)."""
    if emit is None or not pending:
        return
    metrics = msgspec.structs.replace(rec.metrics, phases_s=phases.done())
    emit(msgspec.structs.replace(rec, pending=list(pending), metrics=metrics, time=now_iso()))


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


def _dtype_settings(settings: Settings, model: Any, policy: str) -> None:
    import keras

    from mxbench.bench.model.facts import leaves

    first = next((x for x in leaves(model) if x.weights), None)
    if first is not None:
        settings.compute_dtype = str(first.compute_dtype)
        settings.variable_dtype = str(first.weights[0].dtype)
    optimizer = getattr(model, "optimizer", None)  # a serving cell's model has none
    settings.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    settings.pure_float16 = policy == "float16"


def _loss_scale(model: Any) -> float | None:
    import keras

    opt = model.optimizer
    if not isinstance(opt, keras.optimizers.LossScaleOptimizer):
        return None
    return float(keras.ops.convert_to_numpy(opt.dynamic_scale))


def _gpu_util(rec: Record, state: CellState) -> None:
    """NVML utilisation and health of the GPU that ran the timed steps (GPU runs only)."""
    sampler, window = state.util, state.timed_window
    if sampler is not None and window is not None and rec.device.kind == "gpu":
        rec.metrics.gpu_util_pct = sampler.median_pct(*window, uuid=rec.device.uuid)
        rec.metrics.gpu_health = sampler.health(*window, uuid=rec.device.uuid)


def probe_device(rec: Record, state: CellState) -> None:
    """Device, GPU utilisation and peak memory; never turns a measured record into a failure."""
    try:
        nvml, driver = probe.nvml_gpus()
        backend, model = state.backend, state.model
        fw_gpus: list[dict[str, Any]] = []
        used = False
        if backend is not None:
            fw_gpus = backend.accepted_gpus()
            used = backend.model_on_gpu(model) if model is not None else bool(fw_gpus)
        found = _used_gpus(state, 1) if used and not state.gpu_known else None
        gpu = state.gpu if state.gpu_known else found[0] if found else None
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
        _gpu_util(rec, state)
        rec.device.framework = rec.params.backend
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


def start_energy(state: CellState, p: Params) -> energy.Counter | None:
    """A running energy counter of the devices this process trains on (every GPU it was
    matched to, summed, else the CPU package), before the timed steps; ``state.gpu`` says
    which GPU is the first. Its joules are charged to this process's examples
    (:func:`mxbench.matrix.scale.process_batch`)."""
    gpus = _used_gpus(state, scale.total_devices(p) // scale.processes(p))
    state.gpu, state.gpu_known = (gpus[0] if gpus else None), True  # whose energy is charged
    uuids = [str(g.get("uuid")) for g in gpus] if gpus else None
    return energy.start(gpu=_on_gpu(state), uuid=uuids)


def _used_gpus(state: CellState, count: int) -> list[dict[str, Any]] | None:
    """The NVML GPUs the model trains on (None: on the CPU, or not all to be told apart)."""
    if not _on_gpu(state):
        return None
    nvml, _ = probe.nvml_gpus()
    assert state.backend is not None
    return probe.used_gpus(nvml, count, probe.framework_gpu(state.backend.name))


def _on_gpu(state: CellState) -> bool:
    backend, model = state.backend, state.model
    return bool(backend is not None and model is not None and backend.model_on_gpu(model))


def drop_initial(state: CellState) -> None:
    """The one-step check's initial weights on disk are not needed past the check (or a
    failure)."""
    for initial in state.initial:
        if initial is not None:
            initial.drop()


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
