"""Serving: the report's answer for infer cells (``params.mode: infer``), beside training's.

Records of serving cells are grouped by everything but the precision (policy and
``quantize``) and the repeat: one section per host, device, model, backend, call path,
input and batch size. Each precision is one row: its latency percentiles (p50, p90, p99:
each process's own, its calls' dependence counted, and across processes their geometric
mean with Student's t interval over them at 95 %; with one process the interval of its calls
alone; "needs N queries" where a process's calls cannot support one:
:func:`mxbench.stats.latency.across`), its throughput, its speedup over float32 (float32's p50 as
printed / its own: each process's p50 with the variance of its log its calls give, judged as
step times are, :func:`mxbench.stats.judge`: a verdict with two or more processes per side,
else an interval over the calls of one without a verdict), and its gate: the top-1
agreement and cosine of its outputs against float32's on the same weights and inputs
(:mod:`mxbench.bench.process.infer`). A speedup whose gate did not pass, or that has no gate, is
struck from the summary sentences with the reason, as the compiler dashboards drop a model
that fails its accuracy check.

Training's tables, grids and answer lines never see these records
(:func:`mxbench.report.tables.build` leaves them out): a serving verdict is said here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as default
from pathlib import Path
from typing import Any

import msgspec

from mxbench import stats
from mxbench.matrix.params import (
    BASELINE,
    POLICIES,
    WEIGHTS_NONE,
    WEIGHTS_TRAINED,
    Params,
    control,
    field,
    names,
)
from mxbench.records.inference import GATE_AGREEMENT, GATE_COSINE, GATE_RELATIVE_TOP1, Gate
from mxbench.records.record import Record
from mxbench.report.diagnosis import serving as serving_rules
from mxbench.report.rung import Rung, summarise
from mxbench.report.tables import image_input, last_line
from mxbench.stats import latency

INFER = "infer"
DASH = "–"
_CONTROL = control()
HEADERS = [
    "precision",
    "p50 ms [95% CI] (n)",
    "p90 ms [95% CI] (n)",
    "p99 ms [95% CI] (n)",
    "images/s",
    "speedup vs float32 [95% CI]",
    "top-1 (float32's)",
    "top-1 agreement",
    "output cosine",
    "gate",
    "kernels",
]
PARTS = ("ms", "low_ms", "high_ms", "needs")  # of each percentile, in the CSV
# The CSV's columns for serving cells (one row per record: mxbench.report.frame).
COLUMNS = (  # (params.call has its own column, as every parameter)
    *(f"{latency.name(q)}_{part}" for q in latency.QUANTILES for part in PARTS),
    "top1",
    "float32_top1",
    "top1_agreement",
    "output_cosine",
    "gate",
    "gate_kind",
    "speedup_struck",
)


INTEGERS = tuple(c for c in COLUMNS if c.endswith("_needs"))
FLOATS = (
    *(c for c in COLUMNS if c.endswith("_ms")),
    "top1",
    "float32_top1",
    "top1_agreement",
    "output_cosine",
)
TEXTS = ("gate", "gate_kind", "speedup_struck")


def serving(r: Record) -> bool:
    """A serving cell's record."""
    return r.params.mode == INFER


@dataclass
class Section:
    title: str
    headers: list[str]
    rows: list[list[str]]
    sentences: list[str] = default(default_factory=list)
    rungs: list[Rung] = default(default_factory=list)


def _group_key(r: Record) -> tuple[str, str, bytes]:
    """Host, device and the parameters but the precision, the repeat and how precisely a
    cell is measured (its calls: each percentile says how many it rests on)."""
    return (r.host or "", r.device.name or "", _group_key_of(r.params))


def _group_key_of(params: Params) -> bytes:
    loose = {name: field(name).default for name in names("precision", "repeat")}
    return msgspec.json.encode(
        msgspec.structs.replace(params, policy=BASELINE, quantize="none", **loose)
    )


def _rank(rung: Rung) -> tuple[int, int, str]:
    order = POLICIES.index(rung.policy) if rung.policy in POLICIES else len(POLICIES)
    return (order, rung.quantize != "none", rung.quantize)


def struck(rung: Rung) -> str | None:
    """Why a precision's speedup is not an answer (its outputs are not float32's), or None."""
    if rung.baseline:
        return None
    g = rung.gate
    if g is None or not g.ran:
        why = g.note if g is not None and g.note else "no gate record"
        return f"no quality figure against float32 ({why})"
    if g.kind == "data":
        if g.top1_relative is None or g.top1_relative < GATE_RELATIVE_TOP1:
            return (
                f"top-1 {_share(g.top1)} against float32's {_share(g.float32_top1)} with the "
                f"same weights (below {GATE_RELATIVE_TOP1:.0%} of it)"
            )
        return None
    if g.top1_agreement is None or g.top1_agreement < GATE_AGREEMENT:
        return (
            f"top-1 agreement with float32 {_share(g.top1_agreement)} (below {GATE_AGREEMENT:.0%})"
        )
    if g.cosine is None or g.cosine < GATE_COSINE:
        return f"output cosine with float32 {_num(g.cosine, 4)} (below {GATE_COSINE})"
    return None


def _share(value: float | None) -> str:
    return DASH if value is None else f"{value:.2%}"


def _num(value: float | None, places: int = 2) -> str:
    return DASH if value is None else stats.figure(value, places)


def groups(winners: list[Record]) -> list[list[Rung]]:
    """The serving records' groups, each its precisions in ladder order, with the speedups
    over float32 and what struck them."""
    found: dict[tuple[str, str, bytes], dict[tuple[str, str], list[Record]]] = {}
    for r in winners:
        if serving(r):
            slots = found.setdefault(_group_key(r), {})
            slots.setdefault((r.params.policy, r.params.quantize), []).append(r)
    out = [
        sorted((Rung(p, q, recs) for (p, q), recs in found[key].items()), key=_rank)
        for key in sorted(found)
    ]
    summarise([rung for rungs in out for rung in rungs])  # every rung's processes at once
    where, pairs = [], []
    for rungs in out:
        base = next((g for g in rungs if g.baseline), None)
        for rung in rungs:
            if base is not None and not rung.baseline and base.processes and rung.processes:
                where.append(rung)
                pairs.append((base.processes, rung.processes))
    for rung, ratio in zip(where, stats.judge(pairs), strict=True):  # (:func:`speedup`, at once)
        rung.ratio = ratio
    for rungs in out:
        for rung in rungs:
            rung.struck = struck(rung)
    return out


def speedup(base: Rung, other: Rung) -> stats.Ratio | None:
    """``base``'s p50 over ``other``'s (above 1: ``other`` is faster), the ratio of the
    figures the table prints, with its interval over processes (None: a side has no
    calls)."""
    if not base.processes or not other.processes:
        return None
    return stats.judge([(base.processes, other.processes)])[0]


def title(r: Record) -> str:
    p = r.params
    hw = image_input(r)
    size = f"{hw[0]}x{hw[1]}" if hw else "its own input"
    device = _CONTROL.sub(" ", r.device.name or r.host or "?")
    return (
        f"{p.model} at {size}, batch {p.batch_size}, call {p.call}{weights_text(p)} "
        f"({_CONTROL.sub(' ', str(r.host))}, {device}, {p.backend})"
    )


def weights_text(p: Params) -> str:
    """``, weights trained under float32 (3 epochs on digits)``: what the cells served."""
    if p.weights == WEIGHTS_NONE:
        return ""
    if p.weights != WEIGHTS_TRAINED:
        return f", weights {_CONTROL.sub(' ', Path(p.weights).name)}"
    under = f"under {p.train_policy}" if p.train_policy else "under the served policy"
    data = _CONTROL.sub(" ", Path(p.data).name)
    return f", weights trained {under} ({p.epochs} epochs on {data})"


def _speedup_cell(rung: Rung) -> str:
    if rung.baseline:
        return "1 (baseline)"
    if rung.ratio is None:
        return DASH
    said = rung.ratio.text()
    verdict = stats.SHORT[rung.ratio.verdict]
    said = f"{said} {verdict}" if verdict else said
    return f"struck: {said}" if rung.struck else said


def _gate_cell(rung: Rung) -> str:
    if rung.baseline:
        return "float32 (reference)"
    g = rung.gate
    which = " (top-1 on data)" if g is not None and g.kind == "data" else " (synthetic agreement)"
    return f"struck: {rung.struck}" if rung.struck else "pass" + which


def _top1_cell(g: Gate | None) -> str:
    if g is None or g.kind != "data":
        return DASH
    return f"{_share(g.top1)} ({_share(g.float32_top1)})"


def _row(rung: Rung) -> list[str]:
    if not rung.ok:  # the reason: in the section's sentences (failure)
        said = ", ".join(sorted({r.status for r in rung.records}))
        return [rung.name, said, *[DASH] * (len(HEADERS) - 2)]
    g = rung.gate
    return [
        rung.name,
        *(p.text() for p in rung.percentiles),
        _num(rung.images_per_s, 1),
        _speedup_cell(rung),
        _top1_cell(g),
        DASH if rung.baseline or g is None else _share(g.top1_agreement),
        DASH if rung.baseline or g is None else _num(g.cosine, 4),
        _gate_cell(rung),
        rung.kernels or DASH,
    ]


def failure(rung: Rung) -> str | None:
    """Why a precision has no figures: its status and its error's last line."""
    if rung.ok:
        return None
    error = next((r.error for r in rung.records if r.error), None)
    statuses = ", ".join(sorted({r.status for r in rung.records}))
    return f"{rung.name}: {statuses}" + (f": {last_line(error)}" if error else "")


def sentence(rung: Rung, where: str) -> str | None:
    """The answer line of one precision against float32 (None: nothing to say)."""
    if rung.baseline or rung.ratio is None:
        return None
    if rung.struck:
        return f"serving {rung.name} {where}: speedup struck, {rung.struck}"
    return "serving " + rung.ratio.sentence(rung.name, BASELINE, where)


def sections(winners: list[Record]) -> list[Section]:
    """One section per serving group: its rows, its answer lines (:func:`lines`), the
    precisions that failed and the diagnosis (:mod:`mxbench.report.diagnosis.serving`); the note
    on how to read them under the last."""
    out = []
    answered = _answers(winners)
    found = serving_rules.peers([rungs for rungs, _, _ in answered])
    for rungs, head, said in answered:
        said += [f for rung in rungs if (f := failure(rung)) is not None]
        said += serving_rules.diagnose(rungs, found)  # why, after what
        out.append(Section(head, list(HEADERS), [_row(g) for g in rungs], said, rungs))
    out += cross_sections([rungs for rungs, _, _ in answered])
    if out:
        out[-1].sentences.append(NOTE)
    return out


def cross_sections(found: list[list[Rung]]) -> list[Section]:
    """Trained in one precision, served in another: per setup served with ``weights:
    trained`` (its groups but the training policy), rows the policy the weights were trained
    under, columns the precision served; each cell its top-1 on the validation split and its
    speed against float32 serving the same weights (struck where its gate failed)."""
    tables: dict[bytes, dict[tuple[str, str], Rung]] = {}
    for rungs in found:
        for rung in rungs:
            p = rung.records[0].params
            if p.weights == WEIGHTS_TRAINED:
                key = _group_key_of(msgspec.structs.replace(p, train_policy=None))
                tables.setdefault(key, {})[(p.train_policy or rung.policy, rung.name)] = rung
    out = []
    for cells in tables.values():
        trained = sorted({t for t, _ in cells}, key=POLICIES.index)
        ladder = sorted({(_rank(r), r.name) for r in cells.values()})
        served = [name for _, name in ladder]
        if len(trained) < 2 and not any(t not in n for t, n in cells):
            continue  # each policy served as trained, under one policy: no cross
        rows = [[t, *(_cross_cell(cells.get((t, n))) for n in served)] for t in trained]
        first = next(iter(cells.values())).records[0]
        head = title(first).replace(weights_text(first.params), "")
        said = [
            f"trained under {t}, served under {n}: speedup struck, {r.struck}"
            for (t, n), r in cells.items()
            if r.struck
        ]
        said.append(
            "Rows: the policy the weights were trained under; columns: the precision served. "
            f"Each cell: top-1 on the validation split of {Path(first.params.data).name} "
            "(float32's with the same weights in brackets) and the speed against float32 "
            "serving the same weights."
        )
        headers = ["trained under / served under", *served]
        out.append(Section(f"trained x served: {head}", headers, rows, said))
    return out


def _cross_cell(rung: Rung | None) -> str:
    if rung is None:
        return DASH
    if not rung.ok:
        return ", ".join(sorted({r.status for r in rung.records}))
    return f"{_top1_cell(rung.gate)} · {_speedup_cell(rung)}"


def _answers(winners: list[Record]) -> list[tuple[list[Rung], str, list[str]]]:
    """Per serving group: its precisions, its title, its answer lines (each precision
    against float32, each call path against the direct call)."""
    found = groups(winners)
    against = _against_direct(found)
    out = []
    for rungs in found:
        first = next(r for rung in rungs for r in rung.records)
        head = title(first)
        where = f"on {head}"
        said = [s for rung in rungs if (s := sentence(rung, where)) is not None]
        said += [
            ratio.sentence(f"call {first.params.call} ({rung.name})", f"call {DIRECT}", where)
            for rung in rungs
            if (ratio := against.get(id(rung))) is not None
        ]
        out.append((rungs, head, said))
    return out


DIRECT = "direct"


def _against_direct(found: list[list[Rung]]) -> dict[int, stats.Ratio]:
    """Which call path is faster (the call is itself a variable): each precision of a
    ``predict`` / ``predict_on_batch`` group against the same precision called directly
    (the same group but the call), by id of its rung."""
    direct: dict[tuple[str, str, bytes, str, str], Rung] = {}
    others: list[tuple[tuple[str, str, bytes, str, str], Rung]] = []
    for rungs in found:
        for rung in rungs:
            r = rung.records[0]
            same = _group_key_of(msgspec.structs.replace(r.params, call=DIRECT))
            key = (r.host or "", r.device.name or "", same, rung.policy, rung.quantize)
            if r.params.call == DIRECT:
                direct[key] = rung
            else:
                others.append((key, rung))
    out = {}
    for key, rung in others:
        base = direct.get(key)
        if base is not None and (ratio := speedup(base, rung)) is not None:
            out[id(rung)] = ratio
    return out


NOTE = (
    "Latency: each call timed until its output is on the host; warm-up calls excluded. A "
    "percentile is each process's own: with one process its interval is the order "
    f"statistics that hold it at {latency.LEVEL:.0%} over the calls' effective number "
    "(distribution-free; neighbouring calls that are slow together count as fewer); with "
    "several (n=k×calls) the geometric mean of the processes' percentiles and Student's t "
    "over processes, each floored at its own calls' interval; with too few calls it reads "
    "'needs N queries' (a process) "
    f"(MLPerf Inference's stricter rule asks {latency.mlperf_queries(0.9):,} for p90 and "
    f"{latency.mlperf_queries(0.99):,} for p99 at 99%). The speedup is float32's p50 over "
    "the precision's, with its interval over processes; faster or slower only where that "
    "interval excludes 1 (≈ same where it holds 1; no verdict with one process a side). "
    "A speedup stands only where the "
    f"gate passed: with trained (or given) weights and a data folder, top-1 on its validation "
    f"split at least {GATE_RELATIVE_TOP1:.0%} of float32's with the same weights (MLPerf's "
    f"rule); else top-1 agreement >= {GATE_AGREEMENT:.0%} and output cosine >= {GATE_COSINE} "
    "against float32 with the same weights, on synthetic inputs. The gate column says which "
    "ran."
)


def lines(winners: list[Record]) -> list[str]:
    """The serving answer lines (``mxbench run`` ends with them, after training's)."""
    return [s for _, _, said in _answers(winners) for s in said]


def as_dict(s: Section) -> dict[str, Any]:
    """A section for the JSON report: the rows as named cells, the sentences, and per
    precision the figures behind them."""
    return {
        "title": s.title,
        "sentences": s.sentences,
        "rows": [dict(zip(s.headers, row, strict=True)) for row in s.rows],
        "precisions": [_figures(g) for g in s.rungs],
    }


def _figures(rung: Rung) -> dict[str, Any]:
    r = rung.ratio
    return {
        "precision": rung.name,
        "percentiles": [
            {"q": p.q, "n": p.n, "processes": p.processes, "over": p.over, **_parts(p)}
            for p in (rung.percentiles if rung.ok else [])
        ],
        "images_per_s": rung.images_per_s,
        "speedup": None
        if r is None
        else {"value": r.value, "low": r.low, "high": r.high, "verdict": r.verdict},
        "struck": rung.struck,
    }


def columns(winners: list[Record]) -> dict[int, dict[str, Any]]:
    """The CSV's serving columns per record (by id), speedups included."""
    out: dict[int, dict[str, Any]] = {}
    for rungs in groups(winners):
        for rung in rungs:
            figures = {f"{p.name}_{k}": v for p in rung.percentiles for k, v in _parts(p).items()}
            g = rung.gate
            for r in rung.records:
                ratio = rung.ratio if r.status == "ok" else None
                out[id(r)] = {
                    **(figures if r.status == "ok" else {}),
                    "top1": None if g is None else g.top1,
                    "float32_top1": None if g is None else g.float32_top1,
                    "top1_agreement": None if g is None else g.top1_agreement,
                    "output_cosine": None if g is None else g.cosine,
                    "gate": None if rung.baseline else "struck" if rung.struck else "pass",
                    "gate_kind": None if g is None else g.kind,
                    "speedup_struck": rung.struck,
                    "kernels": rung.kernels or None,
                    **_ratio_columns(ratio),
                }
    return out


def _ratio_columns(ratio: stats.Ratio | None) -> dict[str, Any]:
    """The speedup columns the CSV's training rows have too (mxbench.report.frame.row)."""
    judged = ratio is not None and ratio.judged
    return {
        "speedup_vs_float32": None if ratio is None else round(ratio.value, 4),
        "speedup_low": round(ratio.low, 4) if ratio is not None and judged else None,
        "speedup_high": round(ratio.high, 4) if ratio is not None and judged else None,
        "verdict": None if ratio is None else ratio.verdict,
    }


def _parts(p: latency.Percentile) -> dict[str, Any]:
    return {"ms": p.value, "low_ms": p.low, "high_ms": p.high, "needs": p.needs}
