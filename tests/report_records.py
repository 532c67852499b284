"""Small synthetic result records for the report tests (written by the tests, not measured)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.records.codec import decode
from mxbench.records.record import SCHEMA, Record


def rec(
    host: str = "h1",
    policy: str = "float32",
    batch: int = 32,
    status: str = "ok",
    median: float | None = 100.0,
    time: str | None = "2026-01-01T00:00:00+00:00",
    device: dict[str, Any] | None = None,
    minimal: bool = False,
    backend: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A record; ``minimal``: only the contract minimum (schema, cell, host, status, params)."""
    params = {"model": "blog-cnn", "policy": policy, "batch_size": batch, "image_size": 256}
    if backend is not None:
        params["backend"] = backend
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "cell": cell_key(host, None, None, Params(**params)),
        "host": host,
        "status": status,
        "params": params,
    }
    if minimal:
        return out
    out["time"] = time
    if status == "ok" and median is not None:
        out["metrics"] = {
            "step_ms": {"median": median, "p25": median * 0.98, "p75": median * 1.03, "n": 50}
        }
    out["device"] = (
        device
        if device is not None
        else {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}
    )
    out.update(extra)
    return out


def write(path: Path, records: list[dict[str, Any]], extra_lines: tuple[str, ...] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def typed(record: dict[str, Any]) -> Record:
    """The dict as the Record the report reads (what decoding its JSON line gives)."""
    return decode(json.dumps(record))


def typed_all(records: list[dict[str, Any]]) -> list[Record]:
    return [typed(r) for r in records]
