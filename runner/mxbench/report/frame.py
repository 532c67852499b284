"""Results as a pandas DataFrame (``mxbench.load_results``), and the CSV written from it.

One tidy row per record: the winning record of each cell by default (what the tables show),
or every attempt with ``latest=False``. Flat columns: where it ran, what it measured (every
parameter of :class:`mxbench.params.Params`), the outcome and the speedup over float32.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mxbench import params
from mxbench.report import load, tables
from mxbench.results import Record

if TYPE_CHECKING:
    import pandas as pd

_BEFORE = ("host", "engine", "image", "image_id", "device_kind", "device",
           "compute_capability", "cpu_model")  # fmt: skip
_AFTER = ("status", "step_ms_median", "step_ms_p25", "step_ms_p75", "step_ms_n",
          "images_per_s", "speedup_vs_float32", "speedup_low", "speedup_high", "verdict",
          "gpu_util_pct", "achieved_tflops", "tensorflow", "jax", "torch", "keras", "cuda",
          "cudnn", "label", "attempts", "time", "cell", "source", "error")  # fmt: skip
COLUMNS = (*_BEFORE, *params.names(), *_AFTER)
# OWASP: a cell a spreadsheet would read as a formula gets a leading apostrophe.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_CONTROL = re.compile(f"[{params.CONTROL_CHARS}]")


def row(t: tables.Table | None, rec: Record, attempts: int) -> dict[str, Any]:
    p, m, step = rec.params, rec.metrics, rec.metrics.step_ms
    ratio = t.ratios.get((p.policy, p.batch_size)) if t is not None and rec.status == "ok" else None
    error = rec.error.strip().splitlines()[-1][:300] if rec.error and rec.error.strip() else None
    out: dict[str, Any] = {
        "host": rec.host, "engine": rec.engine, "image": rec.image.name, "image_id": rec.image.id,
        "device_kind": rec.device.kind, "device": rec.device.name,
        "compute_capability": rec.device.compute_capability, "cpu_model": rec.cpu.model,
    }  # fmt: skip
    out.update({name: getattr(p, name) for name in params.names()})
    out.update(
        status=rec.status,
        step_ms_median=step.median if step else None,
        step_ms_p25=step.p25 if step else None,
        step_ms_p75=step.p75 if step else None,
        step_ms_n=step.n if step else None,
        images_per_s=m.images_per_s,
        speedup_vs_float32=None if ratio is None else round(ratio.value, 4),
        speedup_low=None if ratio is None or not ratio.judged else round(ratio.low, 4),
        speedup_high=None if ratio is None or not ratio.judged else round(ratio.high, 4),
        verdict=None if ratio is None else ratio.verdict,  # one of mxbench.stats.VERDICTS
        gpu_util_pct=m.gpu_util_pct, achieved_tflops=m.achieved_tflops,
        tensorflow=rec.software.tensorflow, jax=rec.software.jax, torch=rec.software.torch,
        keras=rec.software.keras, cuda=rec.software.cuda, cudnn=rec.software.cudnn,
        label=rec.label, attempts=attempts, time=rec.time, cell=rec.cell, source=rec.source,
        error=error,
    )  # fmt: skip
    return out


def rows(
    loaded: load.Loaded, built: list[tables.Table], latest: bool = True
) -> list[dict[str, Any]]:
    """The rows of the frame, in table order."""
    out = []
    for t in built:
        for b in t.batches:
            for p in t.policies:
                e = t.entries.get((p, b))
                recs = e.records if e is not None else []
                for rec in recs:
                    out.append(row(t, rec, loaded.attempts.get(str(rec.cell), 1)))
    if not latest:  # every attempt: the winners' tables give the speedups
        index = {(r["cell"]): r for r in out}
        out = []
        for cell, attempts in loaded.everything.items():
            for rec in attempts:
                base = index.get(cell)
                r = row(None, rec, len(attempts))
                if base is not None and rec.status == "ok" and base["time"] == rec.time:
                    for k in ("speedup_vs_float32", "speedup_low", "speedup_high", "verdict"):
                        r[k] = base[k]
                out.append(r)
    return out


def load_results(*paths: str | Path, latest: bool = True, label: str | None = None) -> pd.DataFrame:
    """Result records as a DataFrame, one row per cell (``latest=False``: per attempt).

    ``paths``: result directories or JSONL files (default ``results``). Unreadable lines are
    skipped with a warning (``warnings.warn``), as in the report.
    """
    import warnings

    import pandas as pd

    loaded = load.load(paths or ("results",), label=label, keep_all=not latest)
    for bad in loaded.bad:
        warnings.warn(f"{bad.path}:{bad.lineno}: {bad.reason} (skipped)", stacklevel=2)
    built = tables.build(loaded.winners)
    frame: pd.DataFrame = pd.DataFrame(rows(loaded, built, latest), columns=list(COLUMNS))
    return frame


def to_csv(loaded: load.Loaded, built: list[tables.Table]) -> str:
    import pandas as pd

    frame = pd.DataFrame(rows(loaded, built), columns=list(COLUMNS))
    text_columns = frame.select_dtypes(include=["object", "string"]).columns
    for col in text_columns:
        frame[col] = frame[col].map(_neutralise)
    return str(frame.to_csv(index=False, lineterminator="\n"))


def _neutralise(value: Any) -> Any:
    if isinstance(value, str):
        value = _CONTROL.sub(" ", value)  # one physical line per row
        return "'" + value if value.startswith(_FORMULA) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
