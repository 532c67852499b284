"""A paired process: the arms of one comparison in one process, in interleaved windows
(:mod:`mxbench.bench.process.windows` runs the windows; this fills one record per arm).
Its phases go through the same :class:`mxbench.bench.process.state.Process` as a cell's.

Failure is data as in :func:`mxbench.bench.process.cell.run_cell`: every arm's record says
it. What must stay one policy per process (peak memory) is left out of these records.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from mxbench.bench.evidence import energy, interference, probe, roofline
from mxbench.bench.evidence import profile as profiler
from mxbench.bench.evidence.gpu_health import HealthSampler
from mxbench.bench.model import convergence
from mxbench.bench.parallel import distribute
from mxbench.bench.process import windows
from mxbench.bench.process.state import (
    Arm,
    CheckInputs,
    Emit,
    Process,
    fill_metrics,
    is_oom,
    runs_check,
    runs_profile,
)
from mxbench.bench.process.timing import Phases, StepLog, figures
from mxbench.errors import UsageError
from mxbench.matrix import scale
from mxbench.matrix.params import BASELINE, Params
from mxbench.records.codec import new_record, now_iso, tail
from mxbench.records.record import (
    Cpu,
    Interference,
    Pairing,
    Profile,
    Record,
    Settings,
    Software,
    Window,
)
from mxbench.roofs.collect import Roofs
from mxbench.stats import load
from mxbench.version import __version__


def run_paired(
    p: Params,
    others: list[str],
    started_at: float | None = None,
    emit: Emit | None = None,
    batch_sizes: Sequence[int] = (),
) -> list[Record]:
    """Measure ``p`` (the base arm, float32) and the policies ``others`` in this process,
    in interleaved windows (:mod:`mxbench.bench.process.windows`): one record per arm, base
    first.
    ``batch_sizes``: the same comparison at each of those batch sizes too, one pass each
    after ``p``'s, all passes in a random order (the framework's start paid once); records
    pass by pass in the given order, ``p``'s first. A pass that ends before the last prints
    its records at once (a later pass's failure keeps them). Failure is data as in
    :func:`run_cell`: every arm's record says it."""
    started_at = started_at or probe.process_start_time() or time.time()
    phases = Phases(started_at)
    group = f"{os.getpid()}-{time.time_ns():x}"  # the process's: every pass's records share it
    cpu = msgspec.convert(probe.cpu_info(), Cpu)
    phases.mark("probe")
    roofs = roofline.find(p)  # once per process, before the framework (cell.py's reasons)
    phases.mark("roofs")
    sizes = [p.batch_size, *batch_sizes]
    passes: dict[int, list[Record]] = {}
    for n, size in enumerate(random.sample(sizes, len(sizes)), start=1):
        q = msgspec.structs.replace(p, batch_size=size)
        passes[size] = _pass(q, others, cpu, phases, group, started_at, emit, roofs)
        if n < len(sizes) and emit is not None:
            for rec in passes[size]:
                emit(rec)
    done = phases.done()
    out = [rec for size in sizes for rec in passes[size]]
    for rec in out:
        rec.metrics.phases_s = done
    return out


def _pass(
    p: Params, others: list[str], cpu: Cpu, phases: Phases, group: str, started_at: float,
    emit: Emit | None, roofs: Roofs | None = None,
) -> list[Record]:  # fmt: skip
    """One comparison (one batch size) of a paired process: a record per arm."""
    ps = [p, *(msgspec.structs.replace(p, policy=x) for x in others)]
    recs = [new_record(params=q, status="ok") for q in ps]
    for q, rec in zip(ps, recs, strict=True):
        rec.cpu = cpu
        rec.software = Software(python=sys.version.split()[0], backend=p.backend,
                                mxbench=__version__)  # fmt: skip
        rec.settings = msgspec.convert({**probe.number_settings(), "policy": q.policy}, Settings)
    state = Process(phases, roofs=roofs)
    phases.mark("probe")
    profiled = runs_profile(p)
    try:
        if profiled:
            profiler.prepare(p.backend)
            with profiler.whole_run(p.backend, True) as lines:
                _measure_paired(ps, recs, state, started_at, profiled, group, emit)
            for rec in recs:  # each arm's own turns (and its policy's: the same model's)
                same = [i for i, q in enumerate(ps) if q.policy == rec.params.policy]
                profiler.add_log(rec.profile, lines, p.backend, arms=same)
        else:
            _measure_paired(ps, recs, state, started_at, profiled, group, emit)
    except UsageError:
        raise
    except Exception as exc:  # failure is data: every arm's record says it
        traceback.print_exc(file=sys.stderr)
        for rec in recs:
            rec.status = "oom" if is_oom(exc) else "error"
            rec.error = tail(f"{type(exc).__name__}: {exc}")
    if not state.probed:  # a failure before the windows ended
        _settle_paired(recs, state)
    for rec, c in zip(recs, state.checks, strict=False):
        if c is not None:
            rec.convergence = c.check(rec.params, rec.metrics.step_ms)
    state.drop_initial()
    phases.mark("check")
    done = phases.done()
    for rec in recs:
        rec.metrics.phases_s = done
        rec.time = now_iso()
    return recs


def _measure_paired(
    ps: list[Params], recs: list[Record], state: Process, started_at: float,
    profiled: bool, group: str, emit: Emit | None = None,
) -> None:  # fmt: skip
    """Load, build every arm, run the interleaved windows, fill each arm's record; then the
    profiled windows, after every timed one."""
    import_s = state.load_backend(ps[0], recs[0])
    arms = [state.build_arm(q, rec) for q, rec in zip(ps, recs, strict=True)]
    for rec in recs[1:]:  # what loading the framework found holds for every arm
        rec.software = msgspec.structs.replace(recs[0].software)
        rec.settings.tf32 = recs[0].settings.tf32
        rec.settings.matmul_precision = recs[0].settings.matmul_precision
    state.initial = [convergence.Initial(a.model) if runs_check(a.p) else None for a in arms]
    state.phases.mark("check")
    in_fit = profiled and ps[0].backend in profiler.IN_FIT  # the profile: each fit's last steps
    plan = windows.Plan(
        warmup=max(1, ps[0].warmup_steps), max_steps=ps[0].steps, timed_s=ps[0].timed_s,
        tail=profiler.STEPS if in_fit else 0,
    )  # fmt: skip
    joules = state.start_energy(ps[0])
    turn = profiler.turn_marks(ps[0].backend, profiled)  # whose turn oneDNN's lines are in
    out, fit_s = _windows(arms, plan, state, joules.mark if joules is not None else None, turn)
    try:  # an arm's loop kept for its profiled steps ends however this ends
        first_window = min(w.start for log_ in out.logs for w in log_.windows)
        overall = _overall([w.interference for log_ in out.logs for w in log_.windows])
        started_perf = started_at - (time.time() - time.perf_counter())  # on the windows' clock
        totals = {"timed": 0.0, "first_step": 0.0, "warmup": 0.0}
        # the check's float32 reference: the float32 arm (the same build), once its work is over
        base = next((a for a in arms if a.p.policy == BASELINE), None)
        for i, (arm, rec, log_) in enumerate(zip(arms, recs, out.logs, strict=True)):
            steps = _fill_arm(arm, rec, log_, plan, started_perf, import_s, totals)
            spans = [(w.start, w.end) for w in log_.windows]  # the arm's own windows only
            energy.fill(rec.metrics, joules, spans, steps, scale.process_batch(arm.p))
            distribute.fill(state.dist, rec, arm.model, "paired")
            rec.pairing = _pairing(arms, out, i, first_window, group, overall)
            init = state.initial[i]
            batch = (arm.x, arm.y) if arm.x is not None else arm.ds
            found = convergence.skipped(arm.model, plan.warmup + steps)
            ref = base.model if base is not None and base is not arm else None
            state.checks.append(CheckInputs(found, arm.model, init, batch, ref) if init else None)
        state.spans = {
            a.p.policy: [(w.start, w.end) for w in lg.windows]
            for a, lg in zip(arms, out.logs, strict=True)
        }
        state.timed_window = (first_window, max(w.end for lg in out.logs for w in lg.windows))
        phases = state.phases
        for name, spent in (*totals.items(), ("fit_other", max(0.0, fit_s - sum(totals.values())))):
            phases.out[name] = phases.out.get(name, 0.0) + spent  # a family: every pass's
        phases.last = time.perf_counter()
        # what the pass made so far (its models, their traced functions) out of the collector's
        # sight: a full collection over them took 2-9 s of the profile or of the next pass's
        # build (Keras' clear_session; benchmarks/records/cpu-issue48-share/phases.py); their
        # garbage is left to the process's exit. Not on a GPU: device buffers kept alive that
        # way would crowd the next, larger batch size's pass (a false "oom")
        if state.backend is None or not any(state.backend.model_on_gpu(a.model) for a in arms):
            gc.freeze()
        _settle_paired(recs, state)
        checked = any(x is not None for x in state.checks)
        pending = [name for name, on in (("profile", profiled), ("check", checked)) if on]
        for rec in recs:
            state.emit_pending(emit, rec, pending)
        if profiled:  # after every timed window, never inside one; each in its arm's turn
            for i, (arm, rec) in enumerate(zip(arms, recs, strict=True)):
                rec.profile = _profile(i, arm, rec, state, out if in_fit else None, turn)
            out.finish()
            phases.mark("profile")
            for rec in recs:
                state.emit_pending(emit, rec, pending[1:])
    finally:
        out.finish()


def _profile(
    i: int, arm: Arm, rec: Record, state: Process, kept: windows.Outcome | None,
    turn: Callable[[int | None], None],
) -> Profile:  # fmt: skip
    """Arm ``i``'s profiled window: the next steps of its own fit where its loop was ``kept``
    (the spare step that would end it is the first of them: no new fit call, no lead step),
    else a new fit call's (:func:`profiler.run`); in its turn either way."""
    gpu = state.backend is not None and state.backend.model_on_gpu(arm.model)
    timed = rec.metrics.step_ms
    steps = profiler.steps_for(timed)
    if kept is not None:  # the arm's gate marks its turn
        window = functools.partial(kept.tail, i, steps)
        return profiler.run(arm.p.backend, arm.model, arm.ds, gpu=gpu, steps=steps,
                            window=window)  # fmt: skip
    turn(i)
    try:
        return profiler.run(arm.p.backend, arm.model, arm.ds, gpu=gpu, steps=steps,
                            lead=profiler.lead_for(timed))  # fmt: skip
    finally:
        turn(None)


def _windows(
    arms: list[Arm],
    plan: windows.Plan,
    state: Process,
    handoff: Callable[[], None] | None,
    turn: Callable[[int | None], None] | None = None,
) -> tuple[windows.Outcome, float]:
    """The interleaved windows of every arm (each a ``fit()`` call of a few steps, with the
    arm's callback), under the health sampler; what they measured and the seconds they
    took in all. ``handoff``: called at each window's start and end (the energy reading);
    ``turn``: where each arm's turn begins and ends (:func:`windows.run`)."""

    def fitter(arm: Arm) -> Callable[[Any, int], None]:
        def fit(callback: Any, steps: int) -> None:
            arm.model.fit(arm.ds, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False,
                          callbacks=[callback])  # fmt: skip

        return fit

    sampler = state.util = HealthSampler()
    sampler.start()
    began = time.perf_counter()
    try:
        out = windows.run([fitter(a) for a in arms], plan, random.Random(), handoff, turn)
    finally:
        sampler.stop()
    return out, time.perf_counter() - began


def _fill_arm(
    arm: Arm,
    rec: Record,
    log_: windows.ArmLog,
    plan: windows.Plan,
    started_perf: float,
    import_s: float,
    totals: dict[str, float],
) -> int:
    """One arm's metrics from its windows (``started_perf``: the process's start on the
    windows' clock; ``totals``: the process's timed, first-step and warm-up seconds, added
    to); the number of timed steps."""
    q, mine = arm.p, log_.windows
    durations = []
    for w in mine:
        marks = [w.start, *w.ends]
        durations += [b - a for a, b in itertools.pairwise(marks)]
    window_s = sum(w.end - w.start for w in mine)
    steps = sum(w.steps for w in mine)
    assert log_.begin is not None
    warm = [log_.begin, *log_.warm_ends]
    first_s = warm[1] - warm[0]
    totals["timed"] += window_s
    totals["first_step"] += first_s
    totals["warmup"] += warm[-1] - warm[0] - first_s
    # the arm's timed steps follow its warm-up back to back (windows of k steps each)
    means = StepLog(mean_losses=[log_.losses[k] for k in sorted(log_.losses)])
    flops = rec.model.flops_per_example if rec.model else None
    found = figures(durations, scale.global_batch(q) * steps, window_s, first_s,
                    warm[-1] - warm[0], mine[0].start - started_perf, flops)  # fmt: skip
    losses = [means.step_loss(k) for k in range(plan.warmup, plan.warmup + steps)]
    fill_metrics(rec, arm.model, found, import_s, losses)
    return steps


def _pairing(
    arms: list[Arm],
    out: windows.Outcome,
    i: int,
    first_window: float,
    group: str,
    overall: Interference,
) -> Pairing:
    """Arm ``i``'s pairing: its windows, and its ratios to the base arm's adjacent windows
    (none for the base arm itself; an A/A check's second arm has the base's policy)."""
    base_ms = {w.round: (w.end - w.start) / w.steps for w in out.logs[0].windows}
    mine = out.logs[i].windows
    own = {w.round: (w.end - w.start) / w.steps for w in mine}
    rounds = sorted(r for r in own if r in base_ms)
    return Pairing(
        group=group,
        arms=[a.p.policy for a in arms],
        base=arms[0].p.policy,
        window_steps=out.k,
        order=out.order,
        ratios=[] if i == 0 else [round(base_ms[r] / own[r], 6) for r in rounds],
        clean=[],  # _mark_rounds: once every window's interference is known
        windows=[
            Window(
                round=w.round,
                position=w.position,
                steps=w.steps,
                ms=round((w.end - w.start) * 1000.0 / w.steps, 4),
                start_s=round(w.start - first_window, 4),
                interference=w.interference,
            )
            for w in mine
        ],
        interference=overall,
    )


def _settle_paired(recs: list[Record], state: Process) -> None:
    """Device, GPU windows and clean rounds of a paired process, once its windows are over
    (or it failed)."""
    state.phases.mark("fit_other")
    for rec in recs:
        state.probe_device(rec)
        _gpu_windows(rec, state)
        # one process held every arm: its peak is theirs together, not one policy's (the
        # memory answer comes from a process of one policy: pairing: process, the search)
        rec.metrics.peak_memory_bytes = rec.metrics.peak_memory_kind = None
    _mark_rounds(recs)
    _idle_rounds(recs)
    state.probed = True
    state.phases.mark("probe")


def _mark_rounds(recs: list[Record]) -> None:
    """A round is clean when no window of it, of any arm, was disturbed: each arm's
    ``pairing.clean`` and the process's share of disturbed rounds, from the windows."""
    pairs = [r.pairing for r in recs if r.pairing is not None]
    hit = {w.round for pair in pairs for w in pair.windows if w.interference.disturbed}
    rounds = {w.round for pair in pairs for w in pair.windows}
    for pair in pairs:
        if pair.ratios:
            pair.clean = [w.round not in hit for w in pair.windows]
        pair.disturbed_share = round(len(hit) / max(1, len(rounds)), 4)
        if pair.interference is not None:
            pair.interference.disturbed = bool(hit)
            pair.interference.throttle_reasons = sorted(
                {x for p in pairs for w in p.windows for x in w.interference.throttle_reasons}
            )


def _idle_rounds(recs: list[Record]) -> None:
    """On a CPU device, each arm's rounds with every window given back the CPU other
    processes took (:mod:`mxbench.stats.load`): ``pairing.idle_ratios``. Not where this
    process may use fewer CPUs than the machine has (whose CPUs the others took is unknown)."""
    ncpu = interference.cores()
    base = recs[0].pairing if recs else None
    if base is None or ncpu != (os.cpu_count() or ncpu):
        return
    for rec in recs[1:]:
        if rec.pairing is not None and rec.device.kind == "cpu":
            rec.pairing.idle_ratios = load.idle_ratios(base.windows, rec.pairing.windows, ncpu)


def _gpu_windows(rec: Record, state: Process) -> None:
    """On a GPU, each paired window's other processes on the device and throttle reasons
    (NVML, from the sampler's polls); either marks the window disturbed."""
    sampler, spans = state.util, state.spans.get(rec.params.policy)
    if sampler is None or not spans or rec.pairing is None or rec.device.kind != "gpu":
        return
    for w, (start, end) in zip(rec.pairing.windows, spans, strict=False):
        others, reasons = sampler.window(start, end, rec.device.uuid)
        w.interference.gpu_others = others
        w.interference.throttle_reasons = reasons
        w.interference.disturbed = w.interference.disturbed or bool(others) or bool(reasons)


def _overall(parts: list[Interference]) -> Interference:
    """Medians over windows of each figure; disturbed when any window was; every throttle
    reason seen."""

    def med(name: str) -> float | None:
        values = [v for x in parts if (v := getattr(x, name)) is not None]
        return round(statistics.median(values), 4) if values else None

    return Interference(
        own_cores=med("own_cores"), waited_cores=med("waited_cores"),
        others_cores=med("others_cores"), steal_cores=med("steal_cores"),
        pressure=med("pressure"), disturbed=any(x.disturbed for x in parts),
        throttle_reasons=sorted({r for x in parts for r in x.throttle_reasons}),
    )  # fmt: skip
