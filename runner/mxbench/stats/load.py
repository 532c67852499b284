"""A paired window's time on an idle machine: the CPU other processes took, given back.

On a CPU device the step runs on the cores other processes compete for. A window in which
they held ``x`` cores' worth of CPU (``others_cores`` + ``steal_cores``, measured per window
by :mod:`mxbench.bench.evidence.interference`) left this process ``C - x`` of its ``C``
cores. An arm that keeps ``p`` cores busy on an idle machine (its *parallelism*: its own CPU
per second of wall time in its undisturbed windows) is slowed only when ``C - x < p``, and
then by ``p / (C - x)``: its threads did the same CPU work on fewer cores. So the window's
time on an idle machine is its time times ``min(1, max(C - x, own) / p)`` (``own``: the CPU
it did get, a floor on what was left to it). A window with room to spare is unchanged.

Why it matters: load does not slow both arms alike. A window of short steps lands either in
a busy spell (twice as slow on two cores) or in an idle one, while a window of long steps
averages the spells; the two arms' ratio then moves with the load itself, not only its
noise (measured: benchmarks/load_adjustment.py over the committed series, and
docs/measuring.md, "A busy machine"). The ratios of the windows given back their CPU are
the record's ``pairing.idle_ratios``; the measured ones stay in ``pairing.ratios``.

Not applied where it would not hold: on a GPU (the CPU others take is not the device's), and
where this process may use fewer CPUs than the machine has (the others' CPU may be on CPUs
it could not use).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mxbench.records.pairing import Window


def _taken(w: Window) -> float:
    """The cores' worth of CPU others took during ``w`` (other processes and the hypervisor)."""
    i = w.interference
    return (i.others_cores or 0.0) + (i.steal_cores or 0.0)


def parallelism(windows: Sequence[Window], cores: int) -> float | None:
    """The cores an arm keeps busy on an idle machine: the median of its own CPU in its
    undisturbed windows; where every window was disturbed, the median of what it got and
    others took together (at most ``cores``: the machine was full). None: no CPU measured."""
    quiet = [w.interference.own_cores for w in windows if not w.interference.disturbed]
    own = [x for x in quiet if x]
    if own:
        return statistics.median(own)
    full = [
        min(float(cores), w.interference.own_cores + _taken(w))
        for w in windows
        if w.interference.own_cores
    ]
    return statistics.median(full) if full else None


def idle_share(w: Window, cores: int, p: float) -> float:
    """The share of ``w``'s time an idle machine would have taken (at most 1)."""
    left = max(cores - _taken(w), w.interference.own_cores or 0.0)
    return min(1.0, left / p) if left > 0 else 1.0


def idle_ms(windows: Sequence[Window], cores: int) -> dict[int, float]:
    """Per round, an arm's time per step on an idle machine (its windows' ``ms`` where its
    parallelism is unknown)."""
    p = parallelism(windows, cores)
    if p is None or p <= 0:
        return {w.round: w.ms for w in windows}
    return {w.round: w.ms * idle_share(w, cores, p) for w in windows}


def idle_ratios(base: Sequence[Window], arm: Sequence[Window], cores: int) -> list[float]:
    """Per round both arms ran, the base's time per step over the arm's, each on an idle
    machine; empty when no window of either changed (the measured ratios hold)."""
    b, a = idle_ms(base, cores), idle_ms(arm, cores)
    measured_b = {w.round: w.ms for w in base}
    measured_a = {w.round: w.ms for w in arm}
    if b == measured_b and a == measured_a:
        return []
    return [round(b[r] / a[r], 6) for r in sorted(b.keys() & a.keys())]
