"""The noise floor of a host, measured: A/A processes of the paired design.

An A/A process builds the same policy twice and times the two copies exactly as a paired
process times float32 and a policy (:mod:`mxbench.bench.process.windows`). Their true ratio is 1, so
what the ratios show is the floor of the measurement on that host, at each level:

- **window**: how far one round's ratio strays from 1 (the robust spread of the rounds' log
  ratios, as a share: ``±8%`` means a single pair of windows can say 1.08 by chance);
- **process**: how far a process's ratio (the median of its rounds) strays, between
  processes (their spread) or, with one process, from its rounds alone;
- **run**: the half-width of the 95% interval a run of this many processes gets
  (:func:`mxbench.stats.judge_paired`), and its verdict, which should be "no clear
  difference": a verdict of faster or slower here is a false one.

``mxbench doctor --noise`` measures it and writes ``<results>/noise/<host>.json``;
``mxbench compare`` reads it and says when a difference is below the floor.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from mxbench import stats
from mxbench.records.record import Record


class Floor(msgspec.Struct, kw_only=True):
    """A host's measured noise floor (shares: 0.05 is ±5%)."""

    host: str
    processes: int
    window: float | None  # one round's ratio
    process: float | None  # one process's ratio
    run: float | None  # the run's interval half-width
    verdict: str  # the A/A run's verdict (anything but "no clear difference" is false)
    ratio: float | None  # the A/A run's estimate (true: 1)
    others_cores: float | None  # other processes' CPU during the windows (median)
    disturbed_share: float | None  # share of rounds disturbed
    params: dict[str, Any] = {}


def _spread(logs: Sequence[float]) -> float | None:
    """Robust standard deviation (IQR / 1.349) of log ratios, as a share."""
    if len(logs) < 4:
        return None
    q1, _, q3 = statistics.quantiles(logs, n=4, method="inclusive")
    return math.expm1((q3 - q1) / 1.349)


def floor(host: str, records: Sequence[Record]) -> Floor:
    """The floor from the second arms of A/A processes (each carries its rounds' ratios)."""
    arms = [r for r in records if r.pairing is not None and r.pairing.ratios]
    window = [
        s
        for r in arms
        if r.pairing and (s := _spread([math.log(x) for x in r.pairing.speedups])) is not None
    ]
    procs = [
        p
        for r in arms
        if r.pairing
        and (p := stats.paired_process(r.pairing.speedups, r.pairing.clean)) is not None
    ]
    if len(procs) >= 2:
        process: float | None = math.expm1(statistics.stdev(math.log(p[0]) for p in procs))
    else:
        process = math.expm1(math.sqrt(procs[0][1])) if procs else None
    ratio = stats.judge_paired([procs])[0] if procs else None
    parts = [r.pairing.interference for r in arms if r.pairing and r.pairing.interference]
    others = [x.others_cores for x in parts if x.others_cores is not None]
    disturbed = [
        r.pairing.disturbed_share
        for r in arms
        if r.pairing and r.pairing.disturbed_share is not None
    ]
    return Floor(
        host=host,
        processes=len(procs),
        window=round(statistics.median(window), 4) if window else None,
        process=round(process, 4) if process is not None else None,
        run=round(math.sqrt(ratio.high / ratio.low) - 1, 4) if ratio and ratio.low > 0 else None,
        verdict=ratio.verdict if ratio else "no A/A process ran",
        ratio=round(ratio.value, 4) if ratio else None,
        others_cores=round(statistics.median(others), 4) if others else None,
        disturbed_share=round(statistics.fmean(disturbed), 4) if disturbed else None,
        params=msgspec.to_builtins(arms[0].params) if arms else {},
    )


def path(results: Path, host: str) -> Path:
    return results / "noise" / f"{host}.json"


def save(results: Path, found: Floor) -> Path:
    out = path(results, found.host)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(found))
    tmp.replace(out)
    return out


def load(results: Path, host: str) -> Floor | None:
    """The host's stored floor, None when none was measured (or it cannot be read)."""
    try:
        return msgspec.json.decode(path(results, host).read_bytes(), type=Floor)
    except (OSError, msgspec.DecodeError, json.JSONDecodeError):
        return None


def text(found: Floor) -> str:
    """One paragraph for the terminal."""

    def pct(x: float | None) -> str:
        return f"±{x:.1%}" if x is not None else "n/a"

    busy = (
        f"; other processes held {found.others_cores:.0%} of a CPU"
        if found.others_cores is not None
        else ""
    )
    return (
        f"{found.host}: noise floor from {found.processes} A/A process(es): "
        f"window {pct(found.window)}, "
        f"process {pct(found.process)}, run {pct(found.run)} (A/A verdict: {found.verdict}"
        + (f", {found.ratio:.3f}×" if found.ratio else "")
        + f"){busy}"
    )
