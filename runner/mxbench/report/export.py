"""The merged tables as one JSON document (``mxbench report --json``), for dashboards.

Same tables, numbers, intervals, verdicts, loss parity and diagnosis as the other formats,
as data: one object per table with a row per (batch size, policy). Numbers are numbers
(never formatted text); what was not measured is null. The document names its schema
(``mxbench.report/1``) so a consumer can check what it reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from mxbench.report import annotate, text
from mxbench.report.diagnose import diagnose
from mxbench.report.load import Loaded
from mxbench.report.tables import LOSS_TOLERANCE, Table

SCHEMA = "mxbench.report/1"


def _num(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _rows(t: Table) -> list[dict[str, Any]]:
    out = []
    for b in t.batches:
        for p in t.policies:
            e = t.entries.get((p, b))
            if e is None:
                continue
            r = t.ratios.get((p, b))
            loss = t.parity.get((p, b))
            out.append(
                {
                    "batch_size": b,
                    "policy": p,
                    "status": e.status,
                    "step_ms": {"median": _num(e.median), "p25": _num(e.p25),
                                "p75": _num(e.p75), "n": e.n},
                    "images_per_s": _num(e.images_per_s(b), 2),
                    "repeats": len(e.records) if e.status == "ok" else 0,
                    "speedup": None if r is None else {
                        "value": _num(r.value), "low": _num(r.low), "high": _num(r.high),
                        "over": r.over, "n": r.n, "verdict": r.verdict,
                        "trusted": t.trusted((p, b)),
                    },
                    "loss": None if loss is None else {
                        "state": loss.state, "mean": _num(loss.loss),
                        "float32_mean": _num(loss.base), "relative_diff": _num(loss.diff),
                    },
                    "error": (e.records[-1].error or None) if e.status != "ok" else None,
                }
            )  # fmt: skip
    return out


def _table(t: Table) -> dict[str, Any]:
    cap, inferred = t.capability
    return {
        "title": t.title,
        "host": t.host,
        "device": msgspec.to_builtins(t.device),
        "capability": None if cap is None else {
            "compute_capability": cap.label, "architecture": cap.arch,
            "fp16_tensor_cores": cap.fp16_tensor_cores, "bf16_tensor_cores": cap.bf16_tensor_cores,
            "tf32": cap.tf32, "inferred_from_name": inferred,
        },
        "image": {"name": t.image.name, "id": t.image.id},
        "setup": t.setup,
        "annotations": annotate.lines(t),
        "rows": _rows(t),
        "interval_note": text.interval_note(t),
        "diagnosis": [{"rule": n.rule, "text": n.text} for n in diagnose(t)],
    }  # fmt: skip


def render(loaded: Loaded, tables: Sequence[Table]) -> str:
    doc = {
        "schema": SCHEMA,
        "records": loaded.read,
        "files": [str(f) for f in loaded.files],
        "cells": len(loaded.winners),
        "older_attempts": sum(n - 1 for n in loaded.attempts.values()),
        "unreadable": len(loaded.bad),
        "loss_tolerance": LOSS_TOLERANCE,
        "tables": [_table(t) for t in tables],
    }
    return msgspec.json.format(msgspec.json.encode(doc), indent=1).decode("utf-8")
