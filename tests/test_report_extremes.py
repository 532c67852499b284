"""Every value the record type admits renders, in every format: each float field of the
record (every part of it, at every depth) set to an extreme it admits (the largest and
smallest finite doubles, zero, negative, the smallest subnormal; clamped into a field's
bounds where it has them; a line with a number beyond a double's range is not a record),
through `mxbench report` as markdown, HTML, CSV, JSON and the terminal's text. Records of a
timing comparison, a training run and a largest-batch search are written, so that every
section of the report reads them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec.inspect as mi
import pytest
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.records.record import SCHEMA, Record
from typer.testing import CliRunner

from mxbench.cli import app

EXTREMES = [1e308, -1e308, 1.7976931348623157e308, 0.0, -0.0, 5e-324, -5e-324, -1.0, 1e-300]


def _float(t: mi.FloatType, v: float) -> float:
    """``v``, or the nearest value the field's bounds admit."""
    x = v
    if t.gt is not None and x <= t.gt:
        x = math.nextafter(t.gt, math.inf) if t.gt else 5e-324
    if t.ge is not None and x < t.ge:
        x = t.ge
    if t.lt is not None and x >= t.lt:
        x = math.nextafter(t.lt, -math.inf)
    if t.le is not None and x > t.le:
        x = t.le
    return x


def fill(t: Any, v: float, depth: int = 0) -> Any:
    """A JSON value of type ``t`` with every float in it as near to ``v`` as admitted;
    every optional part present."""
    if isinstance(t, mi.Metadata):
        return fill(t.type, v, depth)
    if isinstance(t, mi.UnionType):
        kinds = [u for u in t.types if not isinstance(u, mi.NoneType)]
        return fill(kinds[0], v, depth) if kinds else None
    if isinstance(t, mi.FloatType):
        return _float(t, v)
    if isinstance(t, mi.IntType):
        return t.ge if t.ge is not None else 3
    if isinstance(t, mi.BoolType):
        return True
    if isinstance(t, mi.StrType):
        return "x"
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return [fill(t.item_type, v, depth + 1)] * 3 if depth < 8 else []
    if isinstance(t, mi.TupleType):
        return [fill(x, v, depth + 1) for x in t.item_types]
    if isinstance(t, mi.DictType):
        if isinstance(t.key_type, mi.StrType) and isinstance(t.value_type, mi.FloatType):
            keys = ["conv_matmul", "elementwise_norm", "cast", "host_gap", "x"]
            return {k: fill(t.value_type, v, depth + 1) for k in keys}
        return {str(fill(t.key_type, v, depth + 1)): fill(t.value_type, v, depth + 1)}
    if isinstance(t, mi.StructType):
        return {f.encode_name: fill(f.type, v, depth + 1) for f in t.fields}
    return None


def _records(v: float) -> list[dict[str, Any]]:
    full = fill(mi.type_info(Record), v)
    out = []

    def one(params: dict[str, Any], status: str = "ok", **over: Any) -> None:
        rec = json.loads(json.dumps(full))
        rec.update(schema=SCHEMA, cell=cell_key("h1", None, None, Params(**params)),
                   host="h1", engine="local", status=status, params=params, error=None,
                   time="2026-01-01T00:00:00+00:00", label=None, source=None, run={},
                   **over)  # fmt: skip
        rec["device"]["kind"] = "gpu"
        rec["device"]["compute_capability"] = "7.0"
        out.append(rec)

    base = {"model": "blog-cnn", "image_size": 256}
    for policy in ("float32", "mixed_float16"):
        for repeat in (0, 1):  # two processes a side: an interval, not one number
            one({**base, "policy": policy, "batch_size": 32, "repeat": repeat},
                search=None, train=None)  # fmt: skip
        # a training run (its curve, time to target)
        one({**base, "policy": policy, "batch_size": 32, "epochs": 2, "target": 0.5},
            search=None)  # fmt: skip
        # a largest-batch search: 8 fits, 16 does not (its precision, every float extreme)
        search = {"start": 8, "cap": 4096, "max_trials": 16, "precision": v}
        one({**base, "policy": policy, "batch_size": 8}, search=search, train=None)
        one({**base, "policy": policy, "batch_size": 16}, status="oom", search=search,
            train=None)  # fmt: skip
    return out


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def test_the_records_decode_as_written() -> None:
    """Known truth for the rest: the records are legal (the reader keeps every one) and
    carry the extremes (a float field of each part holds the value)."""
    from mxbench.records.codec import decode

    for v in (1e308, -1.0):
        lines = [decode(json.dumps(r)) for r in _records(v)]
        rec = lines[0]
        want = v
        assert rec.metrics.loss_last == want and rec.profile is not None
        assert rec.pairing is not None and rec.convergence is not None
        step = rec.metrics.step_ms
        assert step is not None and step.median is not None
        # a positive bounded field: the largest admitted (below 1e15), or the least above 0
        assert step.median == (pytest.approx(1e15, rel=1e-9) if v > 0 else 5e-324)
        assert lines[-1].search is not None
        assert lines[-1].search.precision == want


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
def test_every_format_renders_extreme_values(tmp_path: Path, value: float) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _write(results / "h1.jsonl", _records(value))
    runner = CliRunner()
    for fmt in ("--markdown", "--html", "--csv", "--json"):
        res = runner.invoke(app, ["report", "-r", str(results), fmt])
        assert res.exit_code == 0, (fmt, res.output, res.exception)
        assert res.stdout.strip(), fmt
        assert "warning" not in res.stderr, (fmt, res.stderr)  # every record was read
    out = tmp_path / "report.txt"  # the terminal's rendering, as text
    res = runner.invoke(app, ["report", "-r", str(results), "--output", str(out)])
    assert res.exit_code == 0, ("terminal", res.output, res.exception)
    assert out.read_text().strip()
