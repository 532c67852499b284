"""The merged tables as one JSON document (``mxbench report --json``), for dashboards.

Same tables, numbers, intervals, verdicts, loss parity and diagnosis as the other formats,
as data: one object per table with a row per (batch size, policy). Numbers are numbers
(never formatted text); what was not measured is null. Beside the data, each table as the
other formats show it (``columns`` and ``cells``: the same headers and texts, the energy,
cost and convergence columns included), and every other part of the document: the
largest-batch searches, the training runs, the A/B sentences, the counts and definitions.
The document names its schema (``mxbench.report/1``) so a consumer can check what it
reads.
"""

from __future__ import annotations

import math
from typing import Any, TextIO

import msgspec

from mxbench.report.compare_document import CompareDocument
from mxbench.report.document import Document, Grid, Section
from mxbench.report.load import folders
from mxbench.report.sections import (
    answers,
    capacity,
    inference,
    roofline,
    scaling,
    training,
    why,
)
from mxbench.report.tables import LOSS_TOLERANCE, Table
from mxbench.stats import LEVEL

SCHEMA = "mxbench.report/1"


def _num(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


# A table's rows as structs (their fields encoded in this order; null where not measured):
# 10,000 tables are about 100,000 rows, encoded faster than dicts of the same keys.


class StepMs(msgspec.Struct):
    median: float | None
    p25: float | None
    p75: float | None
    n: int | None


class Speedup(msgspec.Struct):
    value: float | None
    low: float | None
    high: float | None
    over: str
    n: int
    verdict: str
    trusted: bool


class Loss(msgspec.Struct):
    state: str
    mean: float | None
    float32_mean: float | None
    relative_diff: float | None


class Row(msgspec.Struct):
    batch_size: int
    policy: str
    status: str
    step_ms: StepMs
    images_per_s: float | None
    j_per_image: float | None
    cost_per_million_images: float | None
    repeats: int
    speedup: Speedup | None
    loss: Loss | None
    error: str | None


def _rows(t: Table) -> list[Row]:
    # (most tables carry no energy and no cost figure: nothing to look for in their records)
    energy, cost = "energy" in t.carries, "cost" in t.carries
    entries, ratios, parity = t.entries, t.ratios, t.parity
    out = []
    for b in t.batches:
        for p in t.policies:
            e = entries.get((p, b))
            if e is None:
                continue
            r = ratios.get((p, b))
            loss = parity.get((p, b))
            rate = e.images_per_s(b)
            ok = e.status == "ok"
            out.append(
                Row(
                    b,
                    p,
                    e.status,
                    StepMs(_num(e.median), _num(e.p25), _num(e.p75), e.n),
                    _num(rate, 2),
                    _num(why.joules_per_image(e.records)) if energy else None,
                    _num(why.dollars_per_million(e.records, rate)) if cost else None,
                    len(e.records) if ok else 0,
                    None
                    if r is None
                    else Speedup(
                        _num(r.value),
                        _num(r.low),
                        _num(r.high),
                        r.over,
                        r.n,
                        r.verdict,
                        t.trusted((p, b)),
                    ),
                    None
                    if loss is None
                    else Loss(loss.state, _num(loss.loss), _num(loss.base), _num(loss.diff)),
                    None if ok else (e.records[-1].error or None),
                )
            )
    return out


def _table(s: Section) -> dict[str, Any]:
    t = s.table
    cap, inferred = t.capability
    return {
        "title": t.title,
        "host": t.host,
        "device": msgspec.to_builtins(t.device),
        "capability": None
        if cap is None
        else {
            "compute_capability": cap.label,
            "architecture": cap.arch,
            "fp16_tensor_cores": cap.fp16_tensor_cores,
            "bf16_tensor_cores": cap.bf16_tensor_cores,
            "tf32": cap.tf32,
            "inferred_from_name": inferred,
        },
        "image": {"name": t.image.name, "id": t.image.id},
        "setup": t.setup,
        "annotations": s.lines,
        "rows": _rows(t),
        "columns": s.headers,  # the table as every format shows it
        "cells": _cells(s),
        "interval_note": s.note,
        "failures": s.failures,
        "diagnosis": [{"rule": rule, "text": text} for rule, text in s.diagnosis_rules],
        # every cell against the roofs of its dtype, with their provenance (roofline)
        "roofs": roofline.as_json(t),
        "where_the_time_goes": [
            {
                "policy": b.policy,
                "batch_size": b.batch,
                "step_ms": _num(b.step_ms),
                "ms": {c: _num(v) for c, v in b.parts.items()},
                "kernels": b.kernels,
            }
            for b in s.breakdown
        ],
    }


INDENT = 1  # the document's indent (msgspec.json.format's)


def _encoded(part: Any) -> Any:
    """A section's part of the document as a worker hands it back: encoded already (one
    string pickles faster than a table's dicts; the document takes it as it is)."""

    def encode(s: Section) -> msgspec.Raw:
        return msgspec.Raw(msgspec.json.encode(part(s)))

    return encode


def _indented(part: Any) -> Any:
    """A table's part of the document as a worker hands it back: encoded and indented as
    an item of the document's ``tables`` (two levels down), so the document is spliced
    together rather than indented as a whole at the end (0.2 s of 160 MB, in one process).
    A JSON text holds no raw newline inside a string: every newline is layout."""
    pad = b"\n" + b" " * (2 * INDENT)

    def encode(s: Section) -> bytes:
        return msgspec.json.format(msgspec.json.encode(part(s)), indent=INDENT).replace(b"\n", pad)

    return encode


def _spliced(doc: bytes, key: str, items: list[bytes]) -> bytes:
    """``doc`` (formatted, ``key`` an empty list at its top level) with ``items`` (each
    indented as an item of that list, :func:`_indented`) as that list: what
    ``msgspec.json.format`` of the whole document would have made."""
    if not items:
        return doc
    empty = b"\n" + b" " * INDENT + msgspec.json.encode(key) + b": []"
    at = doc.index(empty) + len(empty) - 2  # the first top-level occurrence: keys nested
    # deeper are indented further
    pad, sep = b"\n" + b" " * (2 * INDENT), b",\n" + b" " * (2 * INDENT)
    pieces = [doc[:at], b"[", pad]
    for item in items:
        pieces += (item, sep)
    pieces[-1] = b"\n" + b" " * INDENT + b"]"
    return b"".join([*pieces, doc[at + 2 :]])  # (one copy of 160 MB, not three)


def _cells(s: Section) -> list[dict[str, str]]:
    return [dict(zip(s.headers, row, strict=True)) for row in s.rows]


def _largest(s: Section) -> dict[str, Any]:
    """A largest-batch search: per policy the largest batch that fit, and the diagnosis."""
    c = s.capacity
    return {
        "title": s.title,
        "annotations": s.lines,
        "columns": s.headers,
        "cells": _cells(s),
        "largest_batch": {}
        if c is None
        else {
            p: {"batch_size": f.batch, "peak_memory_bytes": f.peak_bytes, "peak_kind": f.peak_kind}
            for p, f in c.fits.items()
        },
        "diagnosis": s.note,
        "counted": None if c is None else capacity.counted(c),
    }


def _grid(g: Grid) -> dict[str, Any]:
    return {
        "policy": g.policy,
        "batch_sizes": g.batches,
        "devices": [
            {
                "title": r.title,
                "table": r.anchor,
                "cells": [
                    {"value": c.value or None, "verdict": c.verdict, "detail": c.detail or None}
                    for c in r.cells
                ],
            }
            for r in g.rows
        ],
    }


def render(doc: Document) -> str:
    return encode(doc).decode("utf-8")


def encode(doc: Document) -> bytes:
    """The JSON export as UTF-8 bytes, as msgspec makes it (``mxbench report --json`` writes
    these: 160 MB for 10,000 tables need no round trip through a str)."""
    loaded = doc.loaded
    head: dict[str, Any] = {}
    rest: dict[str, Any] = {}

    def parts() -> None:  # made here while worker processes make the sections
        judged = answers.judged_count(doc.tables)
        head.update(
            {
                "schema": SCHEMA,
                "counts": doc.counts,
                "definitions": doc.definitions,
                "records": loaded.read,
                "files": [str(f) for f in loaded.files],
                "folders": [str(d) for d in folders(loaded.files)],
                "cells": len(loaded.winners),
                "older_attempts": sum(n - 1 for n in loaded.attempts.values()),
                "unreadable": len(loaded.bad),
                "loss_tolerance": LOSS_TOLERANCE,
                # the answer: per policy, the speedup's verdict per device and batch size
                "summary": [_grid(g) for g in doc.grids],
                # how many answers are verdicts, and how many false ones their level expects
                "judged": {
                    "comparisons": judged,
                    "level": LEVEL,
                    "false_expected": judged * (1 - LEVEL),
                    "text": doc.judged,
                },
                "notices": doc.notices,  # older attempts hidden, lines skipped, why no summary
            }
        )
        rest.update(
            {
                # training runs to an accuracy, and the input pipeline's share
                # (report/sections/training.py)
                "training": [training.as_dict(s) for s in doc.training],
                "shares": doc.shares,
                "scaling": [scaling.as_dict(m) for m in doc.scaling],  # the speedup x scale map
                # serving cells: latency percentiles, throughput, the gate
                # (report/sections/inference.py)
                "inference": [inference.as_dict(s) for s in doc.inference],
            }
        )

    tables = doc.each(_indented(_table), "speed", meanwhile=parts)
    out = {
        **head,
        "tables": [],  # spliced in below, indented already
        "largest_batch": doc.each(_encoded(_largest), "largest"),  # the batch-size searches
        **rest,
    }
    return _spliced(msgspec.json.format(msgspec.json.encode(out), indent=INDENT), "tables", tables)


COMPARE_SCHEMA = "mxbench.compare/1"
# after "cells" (the changes shown), each table part of the comparison under its key
COMPARE_KEYS = {
    "broke": "broke",
    "fixed": "fixed",
    "speedups": "speedups",
    "only_base": "only_in_base",
    "only_new": "only_in_new",
    "failed_both": "failed_in_both",
}


def write_compare(doc: CompareDocument, out: TextIO, chunk: int = 10_000) -> None:
    """``mxbench compare --json``: one object, the cells shown (encoded a chunk at a time:
    a million cells never become one string), those that ran on one side only, the speedups
    in both runs with what they gained, the cells one side has alone."""
    cells = doc.changes.items
    out.write('{"schema":"' + COMPARE_SCHEMA + '","cells":[')
    for start in range(0, len(cells), chunk):
        part = msgspec.json.encode(cells[start : start + chunk])[1:-1].decode()
        out.write(("," if start else "") + part)
    out.write("]")
    for name, key in COMPARE_KEYS.items():
        items: Any = getattr(doc, name).items
        if name == "speedups":  # with what each gained
            items = [{**msgspec.structs.asdict(s), "gained": s.gained} for s in items]
        out.write(f',"{key}":' + msgspec.json.encode(items).decode())
    out.write("}\n")
