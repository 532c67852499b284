"""Where the time goes, per table: the profiled windows of float32 and each policy side by
side, and the energy and cost columns.

Each profiled window (``record.profile``, :mod:`mxbench.bench.evidence.profile`) splits a step into
categories: convolutions/matmuls, memory-bound work (elementwise, normalization), casts,
layout changes, the optimizer, input waiting, other operations, and the host gap (nothing
ran: Python, launches, waits). The bar's length is the timed median step of the table; its
parts are the operations' milliseconds per step as profiled, and the gap is the rest:
timed step - busy time (:func:`split`). The profiler's own cost (its window ran slower than
the timed steps) lands in no category: a profiled step's *shares* applied to the timed step
would count that cost as launch overhead (an H200's JAX step, 2.88 ms of kernels in a 2.90
ms timed step, read "nothing ran 44%" that way). Where the profiled operations alone take
longer than the timed step, they are scaled down into it and the gap is zero.

Which kernels did the convolutions: on a GPU the share of their time in Tensor Core kernels
(judged from kernel names: a heuristic), on a CPU the share of 16-bit work on kernels with
native 16-bit instructions (oneDNN's verbose log).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from mxbench.bench.evidence import onednn
from mxbench.records.record import CATEGORY_NAMES, OneDnnEvidence, Profile, Record
from mxbench.report.tables import Table, last_line

CATEGORIES: tuple[str, ...] = tuple(CATEGORY_NAMES)


@dataclass(frozen=True)
class Bar:
    """One profiled slot: its timed step split by the profiled window's shares."""

    policy: str
    batch: int
    step_ms: float  # the timed median
    parts: dict[str, float]  # category -> ms of the timed step
    kernels: str  # "Tensor Cores 87% (by name)", "avx512_core_amx 100% (AMX tiles), native …"
    cost_s: float | None  # what the profiled window cost
    profiled_ms: float | None = None  # a profiled step, the profiler on
    busy_ms: float = 0.0  # the profiled operations' time per step (some operation ran)
    thread_ms: float | None = None  # their own times summed over threads (Profile.ops_ms)

    def share(self, category: str) -> float:
        return self.parts.get(category, 0.0) / self.step_ms if self.step_ms else 0.0

    @property
    def profiler_cost(self) -> float | None:
        """How much slower the profiled step ran than the timed one (0.78: +78%)."""
        if not self.profiled_ms or not self.step_ms:
            return None
        return self.profiled_ms / self.step_ms - 1.0

    def largest_besides_conv(self) -> str | None:
        """The largest category of work that is not conv/matmul (the gap is no work)."""
        work = {c: v for c, v in self.parts.items() if c not in ("conv_matmul", GAP) and v > 0}
        return max(work, key=work.__getitem__) if work else None

    @property
    def side_by_side(self) -> float | None:
        """How many operations ran at once on average: their own times over threads / the
        busy wall time (1.0: one at a time)."""
        if not self.thread_ms or not self.busy_ms:
            return None
        return self.thread_ms / self.busy_ms


# Why a paired TensorFlow record's oneDNN figures are not read: one written before each arm's
# evidence came from its own turns (OneDnnEvidence.scope null) gave every arm the whole
# process's log (float32 "ran bf16", the 16-bit arm's share diluted by float32's kernels).
MIXED_LOG = (
    "a paired process's oneDNN figures from before mxbench kept each arm's log apart: they "
    "mixed every arm's kernels, so which ones this arm ran is not known"
)


def profile_of(records: list[Record]) -> Profile | None:
    """The first usable profile among a slot's ok records; its oneDNN figures replaced by
    "not known" (:data:`MIXED_LOG`) where they were not the record's own arm's."""
    for r in records:
        p = r.profile
        if r.status == "ok" and p is not None and p.error is None and p.breakdown_ms:
            return _own_kernels(r, p)
    return None


def _own_kernels(r: Record, p: Profile) -> Profile:
    d = p.onednn
    if d is None or not d.gemm_isas or d.scope is not None:  # no figures, or its own
        return p
    if r.pairing is None or r.params.backend != "tensorflow":  # one policy's process
        return p
    return msgspec.structs.replace(p, onednn=OneDnnEvidence(ran=None, isa=d.isa, why=MIXED_LOG))


def failures(t: Table) -> list[str]:
    """One line per cell whose profiled window failed (``profile.error``): where, and why.
    Its timed figures stand; its slot has no breakdown unless another repeat's worked."""
    if "profile" not in t.carries:
        return []  # no record was profiled
    out = []
    for (policy, b), e in t.by_batch:
        for r in e.records:
            p = r.profile
            if r.status != "ok" or p is None or not p.error:
                continue
            which = f" repeat {r.params.repeat}" if r.params.repeat is not None else ""
            reason = last_line(p.error) or ""
            out.append(f"batch {b} {policy}{which}: profiled window failed: {reason}")
    return out


def kernels_text(p: Profile) -> str:
    if p.tensor_core_share is not None:
        return f"Tensor Cores {p.tensor_core_share:.0%} (by kernel name)"
    d = p.onednn
    if d is not None and d.ran is False:  # oneDNN ran none of them: the path that did
        return f"no oneDNN: {d.path or 'other'} kernels"
    if d is None or not d.gemm_isas:
        return ""
    isa, share = next(iter(d.gemm_isas.items()))
    text = f"{isa} {share:.0%}" + (" (AMX tiles)" if onednn.amx(isa) else "")
    if d.native16_share is not None:
        text += f", native 16-bit {d.native16_share:.0%}"
    return text


def bars(t: Table) -> list[Bar]:
    """Per batch size, float32 then each policy, where the slot has a profile."""
    if "profile" not in t.carries:
        return []  # no record was profiled
    out = []
    for b in t.batches:
        for policy in t.policies:
            e = t.entries.get((policy, b))
            p = profile_of(e.records) if e is not None else None
            parts = split(e.median, p) if e is not None and p is not None else None
            if e is None or e.median is None or p is None or parts is None:
                continue
            busy = busy_ms(p)
            out.append(
                Bar(policy, b, e.median, parts, kernels_text(p), p.cost_s, p.step_ms, busy,
                    p.ops_ms)
            )  # fmt: skip
    return out


GAP = "host_gap"


def busy_ms(p: Profile) -> float:
    """The profiled operations' time per step: every category but the gap (wall-clock time
    in which some operation ran; operations side by side on several threads count once)."""
    return sum(v for c, v in p.breakdown_ms.items() if c != GAP)


def split(step_ms: float | None, p: Profile) -> dict[str, float] | None:
    """The timed step in milliseconds per category: the operations' profiled times, and
    the gap = timed step - busy time; where the operations took longer than the timed step
    (the profiler slowed them), they are scaled into it and the gap is 0 (None: nothing to
    split)."""
    busy = busy_ms(p)
    if not step_ms or busy <= 0:
        return None
    scale = min(1.0, step_ms / busy)
    parts = {c: p.breakdown_ms.get(c, 0.0) * scale for c in CATEGORIES if c != GAP}
    parts[GAP] = max(step_ms - busy, 0.0)
    return {c: parts[c] for c in CATEGORIES}


# The profiler's own cost the table's note names: a profiled step this much slower than
# the timed one (its trace hooks, the extra syncs), which no category of the bar contains.
PROFILER_COST_SAID = 0.25


NOTE = (
    "Where the time goes (ms per step): the timed median step, split into the operations' "
    "own times per step in a profiled window (a few steps after the timed ones, under the "
    "backend's profiler); nothing ran = the timed step less those times (where they exceed "
    "it, they are scaled into it). Operations count by their own time (what ran inside them "
    "excluded; step functions, executors and other wrappers are no operations). "
    "Categories come from operation and kernel names; Tensor Core shares from kernel names "
    "(a heuristic); CPU kernels from oneDNN's verbose log."
)


def headers() -> list[str]:
    return ["batch", "policy", "ms/step", *(CATEGORY_NAMES[c] for c in CATEGORIES), "kernels"]


def rows(found: list[Bar]) -> list[list[str]]:
    return [
        [str(b.batch), b.policy, f"{b.step_ms:.2f}",
         *(f"{b.parts[c]:.2f}" for c in CATEGORIES), b.kernels]
        for b in found
    ]  # fmt: skip


def note(found: list[Bar]) -> str:
    costs = [b.cost_s for b in found if b.cost_s is not None]
    said = NOTE
    if costs:
        said += f" The profiled windows cost {min(costs):.1f}–{max(costs):.1f} s per cell."
    slowed = [b for b in found if (b.profiler_cost or 0.0) >= PROFILER_COST_SAID]
    if slowed:
        shown = "; ".join(
            f"{b.policy} at batch {b.batch} {b.profiled_ms:.2f} ms against {b.step_ms:.2f} "
            f"ms timed (+{b.profiler_cost:.0%})"
            for b in slowed[:4]
        )
        more = ", …" if len(slowed) > 4 else ""
        said += (
            f" The profiler's own cost: a profiled step ran slower ({shown}{more}); that "
            "time is in no category, the gap included."
        )
    return said + _besides_conv(found) + _threads(found)


# Operations whose own times add up to this much more than the busy wall time ran side by
# side on several threads (TensorFlow's executor, XLA:CPU's thunks on 2 cores: 1.4-1.8x)
SIDE_BY_SIDE = 1.1


def _besides_conv(found: list[Bar]) -> str:
    """The largest work that is not conv/matmul, per profiled slot: what mixed precision's
    faster arithmetic does not shrink."""
    named = [(b, c) for b in found if (c := b.largest_besides_conv()) is not None]
    if not named:
        return ""
    shown = "; ".join(
        f"{b.policy} at batch {b.batch}: {CATEGORY_NAMES[c]} {b.share(c):.0%}" for b, c in named[:6]
    )
    return f" Besides convolutions/matmuls the largest part of the step: {shown}."


def _threads(found: list[Bar]) -> str:
    """Where operations ran side by side: the bars' times are wall-clock busy time (each
    instant once), the operations' own times summed over threads are more."""
    wide = [b for b in found if (b.side_by_side or 0.0) >= SIDE_BY_SIDE]
    if not wide:
        return ""
    low = min(b.side_by_side or 0.0 for b in wide)
    high = max(b.side_by_side or 0.0 for b in wide)
    span = f"{low:.1f}x" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}x"
    return (
        f" Operations ran side by side on several threads here: their own times add up to "
        f"{span} the busy time; the bars count wall-clock time (each instant once, split by "
        "the categories' thread time)."
    )


# ---- energy and cost columns -----------------------------------------------------------


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def joules_per_image(records: list[Record]) -> float | None:
    return _median([r.metrics.energy_j_per_image for r in records
                    if r.status == "ok" and r.metrics.energy_j_per_image])  # fmt: skip


def dollars_per_million(records: list[Record], images_per_s: float | None) -> float | None:
    """Cost of a million training images: the host's cost per hour over its throughput."""
    cost = _median([r.cost_per_hour for r in records if r.cost_per_hour])
    if cost is None or not images_per_s:
        return None
    return cost / 3600.0 / images_per_s * 1e6


# What each energy source counts (Metrics.energy_source), for the J/image column's header.
ENERGY_SOURCES = {"nvml": "GPU board, NVML", "rapl": "CPU package, RAPL"}


def energy_sources(records: list[Record]) -> str:
    """The sources of the J/image figures of ``records``, in words (``GPU board, NVML``)."""
    found = sorted(
        {r.metrics.energy_source or "?" for r in records if r.metrics.energy_j_per_image}
    )
    return "; ".join(ENERGY_SOURCES.get(x, x) for x in found)


def add_columns(t: Table, headers: list[str], rows: list[list[str]]) -> None:
    """Per policy a J/image and a cost-per-million-images column, where any record of the
    table has them (tables without stay as they were)."""
    energy, cost = "energy" in t.carries, "cost" in t.carries
    if not energy and not cost:
        return
    every = [r for e in t.entries.values() for r in e.records]
    joules = f" ({energy_sources(every)})" if energy else ""
    rates = sorted({r.cost_per_hour for r in every if r.cost_per_hour})
    dollars = f" (at {', '.join(f'${x:g}' for x in rates)}/h)" if cost else ""
    for p in t.policies:
        if energy:
            headers.append(f"{p} J/image{joules}")
        if cost:
            headers.append(f"{p} cost/M images{dollars}")
    for row, b in zip(rows, t.batches, strict=True):
        for p in t.policies:
            e = t.entries.get((p, b))
            recs = e.records if e is not None else []
            if energy:
                j = joules_per_image(recs)
                row.append("" if j is None else f"{j:.3g}")
            if cost:
                rate = e.images_per_s(b) if e is not None else None
                d = dollars_per_million(recs, rate)
                row.append("" if d is None else f"{d:.3g}")
