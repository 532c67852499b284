"""Every cell against its roof, and the speedup against its bound.

Achieved TFLOP/s = training FLOP per example x examples/s, an FMA counted as 2 FLOP (the
convention of the roofs, :mod:`mxbench.roofs`). Each cell is judged against the roofs of its
compute dtype (float32, TF32 where the device has it and it was on, bfloat16, float16 by
policy; :func:`mxbench.roofs.recorded.compute_dtype`) that the record's device has, each
with its provenance: the datasheet's (MFU, GPUs), the measured ceiling, the formula peak. A
dtype with no path of its own on the device (float16 on a Maxwell GPU, bfloat16 on an
AVX2-only CPU) is judged against float32's roof. A figure above 100% of its dtype's roof is
flagged (:func:`mxbench.roofs.model.judge`): another path ran, or a unit is wrong. A 16-bit
cell is also set against float32's roof: what that says of where its arithmetic ran.

The bound: from the float32 arm's profiled share f of conv/matmul time and the ratio R of
the two dtypes' ceilings (measured, else formula: :func:`mxbench.roofs.recorded.ceiling_ratio`),
the most mixed precision can give here (Amdahl, :func:`mxbench.roofs.model.amdahl_bound`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from mxbench.matrix.params import BASELINE
from mxbench.report.sections.why import profile_of, split
from mxbench.report.tables import Table
from mxbench.roofs import recorded
from mxbench.roofs.model import ABOVE, ABOVE_MEASURED, Roof, amdahl_bound, judge

CONVENTION = "training FLOP per example x examples/s, an FMA counted as 2 FLOP"
PROVENANCES = ("datasheet", "measured", "formula")
SIXTEEN = frozenset({"bfloat16", "float16"})
DISAGREE = 0.10  # FLOP sources further apart than this are shown
FAR_BELOW = 0.25  # a 16-bit cell's best share of its own roof below this: the path is unused


class Against(msgspec.Struct, frozen=True):
    """A roof the cells of one dtype are set against (the same for each of a table's cells
    of that dtype: found once per dtype and table), and how it is named."""

    roof: Roof
    own: bool  # the roof of the cells' dtype (or float32's standing in for it): judged
    stand_in: str = ""  # why float32's roof stands in for the dtype's
    label: str = ""

    @classmethod
    def of(cls, roof: Roof, own: bool, stand_in: str = "") -> Against:
        mfu = " (MFU)" if roof.provenance == "datasheet" and own else ""
        label = f"{roof.text()} {roof.dtype} {roof.provenance} roof{mfu}"
        return cls(roof, own, stand_in, label)


class Share(msgspec.Struct, frozen=True):
    """A cell's achieved figure as a share of one roof."""

    roof: Roof
    share: float
    flag: str | None  # above the roof (own roofs only)
    own: bool  # the roof of the cell's dtype (or float32's standing in for it): judged
    stand_in: str = ""  # why float32's roof stands in for the dtype's
    label: str = ""  # the roof as the notes name it (:meth:`Against.of`)


class Cell(msgspec.Struct, frozen=True):
    policy: str
    batch: int
    dtype: str
    tflops: float
    flops: float  # training FLOP per example
    source: str  # where that count comes from
    shares: list[Share]

    @property
    def flagged(self) -> list[Share]:
        return [s for s in self.shares if s.flag]


def _against(dtype: str, find: Callable[[str, str], Roof | None]) -> list[Against]:
    """The roofs a cell of ``dtype`` is judged against, per provenance: its dtype's own
    (and float32's beside a 16-bit dtype's), or float32's standing in where the dtype has
    no path of its own."""
    out = []
    for provenance in PROVENANCES:
        own = find(dtype, provenance)
        base = find("float32", provenance)
        base = base if base is not None and base.value else None
        if own is not None and own.value:
            out.append(Against.of(own, True))
            if dtype in SIXTEEN and base is not None:
                out.append(Against.of(base, False))
            continue
        # no path of its own: a roof without a value, or a known GPU's datasheet without it
        no_path = own is not None or (provenance == "datasheet" and dtype in SIXTEEN)
        if no_path and base is not None and dtype != "float32":
            why = own.note if own is not None and own.note else f"no {dtype} path"
            out.append(Against.of(base, True, why.split(":")[0]))
    return out


def _shares(tflops: float, against: list[Against]) -> list[Share]:
    """``tflops`` as a share of each roof, judged against its dtype's own."""
    out = []
    for a in against:
        if not a.own:
            out.append(Share(a.roof, tflops / (a.roof.value or 1.0), None, False, "", a.label))
        elif (j := judge(tflops, a.roof)) is not None:
            out.append(Share(a.roof, j.share, j.flag, True, a.stand_in, a.label))
    return out


# The last table's cells: the rules "above" and "against" and the JSON read the same table
# one after another (computing them was 28% of a published fleet's report, twice over).
_last: tuple[Table, list[Cell]] | None = None


def cells(t: Table) -> list[Cell]:
    """Every ok cell of the table with a FLOP count and a rate, against its roofs (found
    once per table: the last table's are kept, by identity)."""
    global _last
    last = _last
    if last is not None and last[0] is t:
        return last[1]
    found = _cells(t)
    _last = (t, found)
    return found


# What each dtype is set against, per roofs and backend (the roofs held, so that their id
# stays theirs): the tables of one GPU share its datasheet's roofs (recorded.roofs_of), and
# finding them again was a twelfth of a published fleet's JSON sections.
_AGAINST: dict[tuple[int, str | None, str], tuple[Sequence[Roof], list[Against]]] = {}
_AGAINST_HELD = 64


def _against_roofs(roofs: Sequence[Roof], backend: str | None, dtype: str) -> list[Against]:
    key = (id(roofs), backend, dtype)
    held = _AGAINST.get(key)
    if held is not None and held[0] is roofs:
        return held[1]
    found = _against(dtype, lambda d, p: recorded.find(roofs, d, p, backend))
    if len(_AGAINST) >= _AGAINST_HELD:
        _AGAINST.clear()
    _AGAINST[key] = (roofs, found)
    return found


def _cells(t: Table) -> list[Cell]:
    timed = [
        (p, b, e, rate)
        for (p, b), e in t.by_batch
        if e.status == "ok" and e.records and (rate := e.images_per_s(b))
    ]
    if not timed:
        return []  # (no rate: nothing to set against a roof, no roofs to find)
    roofs = t.roofs
    backend = t.info.params.backend
    tf32 = recorded.has_tf32(roofs)
    by_dtype: dict[str, list[Against]] = {}  # a table's cells have a dtype or two
    out = []
    for policy, batch, e, rate in timed:
        rec = e.records[0]
        counted = recorded.flops(rec) or recorded.flops(t.info)
        dtype = recorded.compute_dtype(rec, roofs, tf32)
        if counted is None or dtype is None:
            continue
        against = by_dtype.get(dtype)
        if against is None:
            against = by_dtype[dtype] = _against_roofs(roofs, backend, dtype)
        tflops = counted[0] * rate / 1e12
        shares = _shares(tflops, against)
        out.append(Cell(policy, batch, dtype, tflops, counted[0], counted[1], shares))
    return out


def _span(values: list[float], fmt: str = "{:.0f}", unit: str = "") -> str:
    lo, hi = min(values), max(values)
    if fmt.format(lo) == fmt.format(hi):
        return fmt.format(lo) + unit
    return f"{fmt.format(lo)}–{fmt.format(hi)}{unit}"


def _rate(values: list[float]) -> str:
    if max(values) < 1:
        return _span([v * 1000 for v in values], "{:.3g}", " GFLOP/s")
    return _span(values, "{:.3g}", " TFLOP/s")


def _pct(values: list[float]) -> str:
    return _span([v * 100 for v in values], "{:.0f}", "%")


def _by_policy(t: Table, found: list[Cell]) -> list[list[Cell]]:
    return [g for p in t.policies if (g := [c for c in found if c.policy == p])]


def _grouped(group: list[Cell]) -> dict[tuple[str, bool, str], list[Share]]:
    """The shares of a policy's cells by (roof label, own, stand-in), in first-seen order."""
    out: dict[tuple[str, bool, str], list[Share]] = {}
    for c in group:
        for s in c.shares:
            out.setdefault((s.label, s.own, s.stand_in), []).append(s)
    return out


def flops_text(found: list[Cell], t: Table) -> str:
    """The FLOP count the figures use, and its sources' disagreement where over 10%."""
    first = found[0]
    said = f"{first.flops / 1e9:.3g} GFLOP per example ({first.source})"
    apart = disagreement(recorded.flops_of(t.info))
    return f"{said}; {apart}" if apart else said


def disagreement(sources: dict[str, float]) -> str | None:
    """``its sources disagree by 50%: formula 1, xla 1.5 GFLOP`` where the FLOP counts by
    source lie more than :data:`DISAGREE` apart; None where they agree (or there is one)."""
    found = {k: v for k, v in sources.items() if v > 0}
    if len(found) < 2 or max(found.values()) <= min(found.values()) * (1 + DISAGREE):
        return None
    each = ", ".join(f"{k} {v / 1e9:.3g}" for k, v in found.items())
    apart = max(found.values()) / min(found.values()) - 1
    return f"its sources disagree by {apart:.0%}: {each} GFLOP"


def against(t: Table) -> str | None:
    """Each policy's cells against the roofs of their dtype (ranges over batch sizes)."""
    found = cells(t)
    if not any(c.shares for c in found):
        return None
    parts = []
    for group in _by_policy(t, found):
        batches = _span([float(c.batch) for c in group])
        policy, dtype = group[0].policy, group[0].dtype
        named = policy if policy == dtype else f"{policy} ({dtype})"
        head = f"{named} at batch {batches}: "
        said = []
        for (label, own, stand_in), shares in _grouped(group).items():
            values = [s.share for s in shares]
            if not own and max(values) > 1:  # a 16-bit path beyond float32's: no share
                said.append(f"up to {max(values):.3g}x the {label}: a fast {dtype} path ran")
                continue
            text = f"{_pct(values)} of the {label}"
            if stand_in:
                text += f" ({stand_in}: float32's roof stands in)"
            if any(s.flag for s in shares):
                above = "measured ceiling" if shares[0].roof.provenance == "measured" else "roof"
                text += f", above the {above}: flagged"
            elif own and dtype in SIXTEEN and not stand_in and max(values) < FAR_BELOW:
                text += ", far below: the fast path is largely unused"
            said.append(text)
        rate = _rate([c.tflops for c in group])
        parts.append(head + rate + (", " + "; ".join(said) if said else ""))
    return f"Against the roofs ({CONVENTION}; {flops_text(found, t)}): " + "; ".join(parts) + "."


def above(t: Table) -> str | None:
    """The cells above their dtype's roof, and what their float32 share implies."""
    found = [c for c in cells(t) if c.flagged]
    if not found:
        return None
    parts, kinds = [], set()
    for group in _by_policy(t, found):
        policy, dtype = group[0].policy, group[0].dtype
        for (label, own, stand_in), shares in _grouped(group).items():
            flagged = [s for s in shares if s.flag]
            if not own or not flagged:
                continue
            kinds.add(flagged[0].roof.provenance == "measured")
            reach = _pct([s.share for s in flagged])
            where = _span([float(c.batch) for c in group if any(s in c.shares for s in flagged)])
            text = f"{policy} at batch {where} reaches {reach} of the {label}"
            if stand_in:
                text += f" ({stand_in}: float32's roof stands in)"
            base = [s for c in group for s in c.shares if not s.own
                    and s.roof.provenance == flagged[0].roof.provenance]  # fmt: skip
            if dtype in SIXTEEN and base and max(s.share for s in base) <= 1:
                text += (
                    f"; at {_pct([s.share for s in base])} of the {base[0].label}, that "
                    f"arithmetic cannot have run in {dtype}: it ran on the float32 path, or "
                    "the FLOP count is wrong"
                )
            parts.append(text)
    # Above a physical roof (formula, datasheet): impossible as counted. Above only a
    # measured ceiling: the probe's shapes or the count fall short, said as such.
    said = ABOVE_MEASURED if kinds == {True} else ABOVE
    return f"{said[0].upper()}{said[1:]}. " + "; ".join(parts) + "."


BYTES = 2.0  # memory-bound work in 16 bits moves half float32's bytes: at most 2x faster


def _shares_of_time(t: Table, batch: int) -> tuple[float, float] | None:
    """The float32 arm's shares of conv/matmul and of memory-bound time at a batch size: its
    profiled operations' times in its timed median step (:func:`why.split`: the profiler's
    own cost is in no category)."""
    base = t.entries.get((BASELINE, batch))
    profile = profile_of(base.records) if base is not None else None
    if base is None or profile is None or not base.median:
        return None
    parts = split(base.median, profile)
    if parts is None:
        return None
    f = min(1.0, max(0.0, parts["conv_matmul"] / base.median))
    m = min(1.0 - f, max(0.0, parts["elementwise_norm"] / base.median))
    return f, m


def most(f: float, r: float, m: float = 0.0, b: float = BYTES) -> float:
    """The most a step can gain whose share ``f`` speeds up by ``r`` (the ceilings' ratio)
    and share ``m`` by at most ``b`` (the bandwidth side), the rest not at all (Amdahl)."""
    if m <= 0:
        return amdahl_bound(f, r)
    return 1.0 / ((1.0 - f - m) + f / r + m / b)


def bound(t: Table, policy: str, batch: int) -> str | None:
    """The measured speedup against the most mixed precision can give here: ``1.26x of at
    most 1.80x here: ...``; ``1.54x, at its bound of 1.51x here ...`` where the estimate is
    just over the bound and its interval holds it; ``..., above its bound ...`` where it is
    clearly past it. None without a profiled float32 arm or a ceiling ratio."""
    r = t.ratios.get((policy, batch))
    other, base = t.entries.get((policy, batch)), t.entries.get((BASELINE, batch))
    if r is None or not t.trusted((policy, batch)) or other is None or base is None:
        return None
    shares = _shares_of_time(t, batch)
    if shares is None or not other.records or not base.records:
        return None
    f, m = shares
    roofs = t.roofs
    fast = recorded.compute_dtype(other.records[0], roofs)
    slow = recorded.compute_dtype(base.records[0], roofs)
    if fast is None or slow is None or fast == slow:
        return None
    ratio = recorded.ceiling_ratio(t.info, fast, slow, roofs)
    if ratio is None:
        return None
    top = most(f, ratio.value, m)
    # above the bound: by more than the bound's own slack, or clearly (the whole interval);
    # a point estimate just over it whose interval holds it is at the bound, not past it
    above = r.value > top * 1.05 or (r.judged and r.low > top)
    if r.value <= top:
        head = f"{r.value:.2f}x of at most {top:.2f}x here"
    elif above:
        head = f"{r.value:.2f}x, above its bound of {top:.2f}x here"
    else:
        head = f"{r.value:.2f}x, at its bound of {top:.2f}x here (within the estimate's interval)"
    where = f"R = {ratio.value:.2f}, {ratio.provenance} {fast}/{slow} ceilings"
    if not ratio.native:
        if ratio.value < 1:
            why = f"no fast {fast} path, its ceiling {ratio.value:.2f}x {slow}'s"
        else:
            why = (ratio.why or f"no native {fast} path").split(", at best")[0]
            where = f"R at most 1, {ratio.provenance}"
        return f"{head}: {why} ({where})"
    if above:
        why = "the profile's shares or the ceilings do not describe this run"
        return f"{head}: {why} ({where})"
    time = f"conv/matmul {f:.0%} of float32's step, memory-bound {m:.0%} (at most {BYTES:g}x)"
    rest = f", the rest {1 - f - m:.0%} gains nothing" if 1 - f - m >= 0.005 else ""
    return f"{head}: {time}{rest} ({where})"


def bounds(t: Table) -> str | None:
    """Every comparison's bound, as a diagnosis note."""
    if "profile" not in t.carries:
        return None  # no record was profiled: no float32 arm's shares of time
    said = [
        f"{p} at batch {b}: {text}"
        for b in t.batches
        for p in t.reduced
        if (text := bound(t, p, b)) is not None
    ]
    if not said:
        return None
    return (
        "The speedup's bound (Amdahl: 1 / ((1 - f - m) + f / R + m / 2), f and m the float32 "
        "arm's profiled shares of conv/matmul and memory-bound time, R the ratio of the two "
        "dtypes' matmul ceilings, 2 the bytes saved by 16-bit activations): "
        + "; ".join(said)
        + "."
    )


class AgainstJson(msgspec.Struct):
    """A cell against one roof, as the JSON report has it (fields in this order)."""

    dtype: str
    provenance: str
    roof_tflops: float | None
    share: float
    own_dtype: bool
    stand_in: str | None
    flag: str | None
    source: str


class CellJson(msgspec.Struct):
    """A cell against its roofs, as the JSON report has it (fields in this order)."""

    policy: str
    batch_size: int
    dtype: str
    achieved_tflops: float
    flops_per_example: float
    flops_source: str
    against: list[AgainstJson]


def as_json(t: Table) -> list[CellJson]:
    """Every cell against its roofs, for the JSON report."""
    return [
        CellJson(
            c.policy,
            c.batch,
            c.dtype,
            round(c.tflops, 6),
            c.flops,
            c.source,
            [
                AgainstJson(
                    s.roof.dtype,
                    s.roof.provenance,
                    s.roof.value,
                    round(s.share, 4),
                    s.own,
                    s.stand_in or None,
                    s.flag,
                    s.roof.source,
                )
                for s in c.shares
            ],
        )
        for c in cells(t)
    ]
