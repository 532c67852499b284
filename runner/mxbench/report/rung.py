"""One precision of a serving group (:mod:`mxbench.report.sections.inference`): its processes'
records and what the report reads off them (latency percentiles, the p50s a speedup judges,
throughput, the kernels that ran, the gate). Its own room so that the serving report and
its diagnosis (:mod:`mxbench.report.diagnosis.serving`) both read it, neither importing the
other for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from mxbench import stats
from mxbench.matrix.params import BASELINE
from mxbench.records.inference import Gate
from mxbench.records.record import Record
from mxbench.report.sections import why
from mxbench.stats import latency


@dataclass
class Rung:
    """One precision of a serving group: its processes' records."""

    policy: str
    quantize: str
    records: list[Record]
    ratio: stats.Ratio | None = None
    struck: str | None = None  # why its speedup is not an answer

    @property
    def name(self) -> str:
        return self.policy if self.quantize == "none" else f"{self.policy} + {self.quantize}"

    @property
    def baseline(self) -> bool:
        return self.policy == BASELINE and self.quantize == "none"

    @property
    def ok(self) -> list[Record]:
        return [r for r in self.records if r.status == "ok" and r.inference is not None]

    @property
    def samples(self) -> list[list[float]]:
        """Each process's call times (ms)."""
        return [list(r.metrics.step_ms.samples) for r in self.ok if r.metrics.step_ms is not None]

    @cached_property
    def percentiles(self) -> list[latency.Percentile]:
        """p50, p90, p99 over its processes (:func:`mxbench.stats.latency.across`)."""
        samples = self.samples
        ordered = [sorted(s) for s in samples]  # (once for the three quantiles)
        return [latency.across(samples, q, ordered=ordered) for q in latency.QUANTILES]

    @cached_property
    def processes(self) -> list[stats.Process]:
        """Each process's p50 (nearest rank, as the table's) and the variance of its
        median's log that its calls give (:func:`mxbench.stats.summarise`: their spread and
        autocorrelation): what a speedup judges. :func:`summarise` finds many rungs' at once."""
        summarise([self])  # (fills this rung's entry)
        found: list[stats.Process] = self.__dict__["processes"]
        return found

    def _rows(self) -> list[list[float]]:
        return [s for s in self.samples if s and min(s) > 0]

    @property
    def images_per_s(self) -> float | None:
        rates = [
            r.inference.images_per_s for r in self.ok if r.inference and r.inference.images_per_s
        ]
        return statistics.median(rates) if rates else None

    @property
    def kernels(self) -> str:
        """What ran the convolutions and matmuls: oneDNN's ISA on a CPU, the Tensor Cores'
        share on a GPU, else the profiled window's busiest operation."""
        found = [r.profile for r in self.ok if r.profile and not r.profile.error]
        said = next((t for f in found if (t := why.kernels_text(f))), "")
        if said or not found:
            return said
        top = next((f.top_ops[0] for f in found if f.top_ops), None)
        if top is None:
            return ""
        return f"busiest: {(top.name or '')[:80]} ({top.category})"

    @property
    def gate(self) -> Gate | None:
        """The first process's gate (a cell's is measured once)."""
        return next((r.inference.gate for r in self.ok if r.inference and r.inference.gate), None)


def summarise(rungs: Sequence[Rung]) -> None:
    """:attr:`Rung.processes` of every rung, in one :func:`mxbench.stats.summarise` over all
    their processes (rung by rung, numpy's cost per call was most of a serving fleet's
    report: 18,846 rungs)."""
    todo = [(rung, rung._rows()) for rung in rungs if "processes" not in rung.__dict__]
    if not todo:
        return  # (no numpy to import for a report without serving cells)
    _, var = stats.summarise([row for _, rows in todo for row in rows])
    at = 0
    for rung, rows in todo:
        found = var[at : at + len(rows)].tolist()
        at += len(rows)
        rung.__dict__["processes"] = [
            (latency.nearest(s, 0.5), v) for s, v in zip(rows, found, strict=True)
        ]
