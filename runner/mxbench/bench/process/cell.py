"""One cell, end to end: import, probe, build, warm up, time, and fill the record.

Failure is data: an out-of-memory condition gives status ``oom``, anything else ``error``
with the message's tail; the caller still prints the record and exits 0. Only bad
arguments (:class:`mxbench.errors.UsageError`) escape.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import msgspec

from mxbench.bench.evidence import energy, probe, roofline
from mxbench.bench.evidence import profile as profiler
from mxbench.bench.evidence.gpu_health import HealthSampler
from mxbench.bench.model import convergence
from mxbench.bench.model.served import NO_FILES, WeightFiles, save
from mxbench.bench.parallel import distribute, independent, torch_launch
from mxbench.bench.process.state import (
    CheckInputs,
    Emit,
    Process,
    dtype_settings,
    fill_metrics,
    first_process,
    is_oom,
    runs_check,
    runs_profile,
)
from mxbench.bench.process.timing import Phases, StepLog, split, step_timer, window_figures
from mxbench.errors import UsageError
from mxbench.matrix import scale
from mxbench.matrix.params import Params
from mxbench.records.codec import new_record, now_iso, tail
from mxbench.records.inference import Gate
from mxbench.records.record import Cpu, Profile, Record, Settings, Software
from mxbench.version import __version__


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
    state = Process(phases)
    phases.mark("probe")
    state.roofs = roofline.find(p)  # before the framework: a cold cache's probe has the device
    phases.mark("roofs")
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
        state.probe_device(rec)
        phases.mark("probe")
    for c in filter(None, state.checks):  # after the timed steps, the memory probe, the profile
        # the one-step check against float32: once per cell, not per repeat
        rec.convergence = c.check(p, rec.metrics.step_ms) if runs_check(p) else c.found
    state.drop_initial()
    phases.mark("check")
    rec.metrics.phases_s = phases.done()
    rec.time = now_iso()
    return rec


def _measure(
    p: Params,
    rec: Record,
    state: Process,
    started_at: float,
    on_step: Callable[[int], None] | None,
    emit: Emit | None = None,
    files: WeightFiles = NO_FILES,
) -> None:
    import_s = state.load_backend(p, rec)
    if p.mode == "infer":  # a serving cell: inference calls only (bench/process/infer.py)
        _serve(p, rec, state, import_s, emit, files)
        return
    if p.scaling == scale.INDEPENDENT and state.dist is not None:
        _independent(p, rec, state, import_s, started_at)
        return
    arm = state.build_arm(p, rec)
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
    joules = state.start_energy(p)
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
    state.probe_device(rec)
    state.probed = True
    phases.mark("probe")
    pending = [name for name, on in (("profile", runs_profile(p)), ("check", runs_check(p))) if on]
    state.emit_pending(emit, rec, pending)
    if runs_profile(p):  # after the timed window, never inside it
        gpu = state.backend is not None and state.backend.model_on_gpu(model)
        timed = rec.metrics.step_ms
        rec.profile = profiler.run(p.backend, model, ds, gpu=gpu, steps=profiler.steps_for(timed),
                                   lead=profiler.lead_for(timed))  # fmt: skip
        phases.mark("profile")
        state.emit_pending(emit, rec, pending[1:])


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


def _independent(p: Params, rec: Record, state: Process, import_s: float,
                 started_at: float) -> None:  # fmt: skip
    """Independent replicas (bench/parallel/independent.py): one arm per device, fitted at once,
    their record as one (the slowest replica's steps) with each replica's own figures; the
    one-step check on the first replica, and the GPU utilisation of its device. No
    profiled window (which replica's?), no energy (one device's counter for N devices'
    examples would say a wrong figure per image)."""
    plan = state.dist
    one = msgspec.structs.replace(p, devices=1)  # what each replica is: batch_size its own
    arms = independent.build(plan, lambda: state.build_arm(one, rec))
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
    state.probe_device(rec)
    state.probed = True
    state.phases.mark("probe")


def _serve(
    p: Params,
    rec: Record,
    state: Process,
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
    dtype_settings(rec.settings, served.model, p.policy)
    state.phases.mark("fit_other")
    state.probe_device(rec)  # the memory answer: before the gate builds float32's model
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
        state.emit_pending(emit, rec, ["gate"])
        rec.inference.gate = infer.gate(p, served, state.backend.name)
        state.phases.mark("check")
