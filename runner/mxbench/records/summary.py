"""The per-process summary of a record, beside the record: what a comparison judges.

A process's timed steps become its median and the variance of its log
(:func:`mxbench.stats.summarise`); a paired record's rounds become its speedup over the base
of its own process (:func:`mxbench.stats.paired_process`). The report's reader decodes
records as :class:`Read`, with these summaries made once and the bulky samples dropped; the
rule of ``repeats: auto`` (:mod:`mxbench.cells.repeats`) judges the same summaries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import msgspec

from mxbench import stats
from mxbench.records.record import Cpu, Device, Image, Metrics, Record, Settings, Software

# The parts a line leaves out, one of each for every record read (:class:`Read`): a record
# read is never written to (its summaries go into its own fields), and a fleet of small
# records read faster, in under half the memory, than with a default of each part per record
# (benchmarks/report_speed.py --minimal).
_ABSENT = (Image(), Metrics(), Device(), Cpu(), Software(), Settings())
_IMAGE, _METRICS, _DEVICE, _CPU, _SOFTWARE, _SETTINGS = _ABSENT
_RUN: dict[str, Any] = {}
_PENDING: list[str] = []
T = TypeVar("T")


def _always(part: T) -> Callable[[], T]:
    """A default factory that returns ``part`` itself, called in C (a lambda was a
    Python call per absent part of every record decoded)."""
    return itertools.repeat(part).__next__


class Read(Record, kw_only=True, gc=False):
    """A record as the report reads it (every field of :class:`Record`, new ones included):
    its step samples and losses are left out (empty lists) once summarised into
    ``process`` and ``loss``. A part the line leaves out is a default shared by every
    record read (never written to)."""

    image: Image = msgspec.field(default_factory=_always(_IMAGE))
    metrics: Metrics = msgspec.field(default_factory=_always(_METRICS))
    device: Device = msgspec.field(default_factory=_always(_DEVICE))
    cpu: Cpu = msgspec.field(default_factory=_always(_CPU))
    software: Software = msgspec.field(default_factory=_always(_SOFTWARE))
    settings: Settings = msgspec.field(default_factory=_always(_SETTINGS))
    run: dict[str, Any] = msgspec.field(default_factory=_always(_RUN))
    pending: list[str] = msgspec.field(default_factory=_always(_PENDING))

    # the timed steps as :func:`mxbench.stats.summarise` makes them: (median ms, the
    # variance of its log); None: not an ok record with a median
    process: stats.Process | None = msgspec.field(default=None, name="~process")
    # (sum, count) of the losses of its timed steps (the sum NaN when one was not finite);
    # None: no loss recorded
    loss: tuple[float, int] | None = msgspec.field(default=None, name="~loss")


def process(rec: Record) -> stats.Process | None:
    """The process summary of an ok record with step times (None: none)."""
    if isinstance(rec, Read):
        return rec.process
    step = rec.step
    if step is None or step.median is None:
        return None
    med, var = stats.summarise([list(step.samples) or [step.median]])
    return float(med[0]), float(var[0])


def arm(rec: Record, measured: bool = False) -> stats.Process | None:
    """The speedup summary of an ok record measured by the paired design, as an arm against
    its process's base (:func:`mxbench.stats.paired_process`): from the rounds its verdict
    is judged from (``pairing.speedups``), or, ``measured``, from its rounds as they ran;
    None otherwise."""
    pair = rec.pairing
    if rec.status != "ok" or pair is None or not pair.ratios:
        return None
    return stats.paired_process(pair.ratios if measured else pair.speedups, pair.clean)


def loss(rec: Record) -> tuple[float, int] | None:
    """(sum, count) of a record's training losses over its timed steps (the first and last
    alone for records written before per-step losses); None: no loss recorded."""
    if isinstance(rec, Read):
        return rec.loss
    return loss_total(rec.metrics.losses, rec.metrics)


def metrics_left_out(rec: Read) -> bool:
    """Whether the line of ``rec`` left out its metrics: its ``metrics`` is then the default
    every such record read shares (nothing to summarise, never to be written to)."""
    return rec.metrics is _METRICS


def loss_total(losses: list[float | None], m: Metrics) -> tuple[float, int] | None:
    """(sum, count) of ``losses``, a record's per-step losses (``m`` its metrics: when
    ``losses`` is empty, its first and last loss stand for them); the sum is NaN when a loss
    is None (not finite); None: no loss recorded."""
    if not losses:
        if m.loss_first is None and m.loss_last is None:
            return None
        losses = [m.loss_first, m.loss_last]
    if None in losses:
        return math.nan, len(losses)
    return sum(losses), len(losses)  # type: ignore[arg-type]  # no None left


def processes(records: Iterable[Record]) -> list[stats.Process]:
    """Each ok record's timed steps as a process summary (its raw samples, else its median
    alone: :func:`process`), what :func:`mxbench.stats.judge` takes."""
    return [p for r in records if (p := process(r)) is not None]


def paired(records: Iterable[Record], measured: bool = False) -> list[stats.Process] | None:
    """The paired processes of a slot's ok records (each one's speedup over the base of its
    own process: :func:`arm`, ``measured`` as there), when every ok record was measured by
    the paired design; None when any was not (the slot is judged as separate processes)."""
    out = []
    for r in records:
        if r.status != "ok":
            continue
        p = arm(r, measured)
        if p is None:
            return None
        out.append(p)
    return out or None
