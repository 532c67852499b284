"""Results as a pandas DataFrame (``mxbench.load_results``), and the CSV written from it.

One tidy row per record: the winning record of each cell by default (what the tables show),
or every attempt with ``latest=False``. Flat columns: where it ran, what it measured (every
parameter of :class:`mxbench.matrix.params.Params`), the outcome, the speedup over float32 and the
loss parity, what changes the numbers (input device, TF32 and the matmul setting, throttling),
memory, warm-up, versions as people write them (CUDA 13.0, cuDNN 9.19.0).

The DataFrame is typed: times are UTC datetimes, counts nullable integers (``Int64``: a
missing value stays missing, not a float NaN), flags nullable booleans, text pandas'
``string`` (missing: ``pd.NA``), numbers float64. The CSV keeps the
same columns as text (ISO-8601 times). Text from records (names, labels, the error's last
line) is cut to :data:`mxbench.report.tables.MAX_RECORD_TEXT` characters ending '…', as in
every format of the report: the same host and device names; ``cell`` tells cells apart.
"""

from __future__ import annotations

import math
import os
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mxbench.matrix import params
from mxbench.records.record import Record
from mxbench.report import load, tables
from mxbench.report.devices import cuda_text, cudnn_text
from mxbench.report.diagnosis.busy import busy
from mxbench.report.sections import capacity, inference, scaling, why

if TYPE_CHECKING:
    import pandas as pd

    from mxbench.report.document import Document

_BEFORE = (
    "host",
    "engine",
    "image",
    "image_id",
    "device_kind",
    "device",
    "compute_capability",
    "cpu_model",
)
_AFTER = (
    "status",
    "step_ms_median",
    "step_ms_p25",
    "step_ms_p75",
    "step_ms_n",
    "images_per_s",
    "speedup_vs_float32",
    "speedup_low",
    "speedup_high",
    "verdict",
    "loss_mean",
    "loss_vs_float32",
    "loss_parity",
    "first_step_ms",
    "warmup_ms",
    "peak_memory_bytes",
    "peak_memory_kind",
    "gpu_util_pct",
    "achieved_tflops",
    "energy_j_per_image",
    "energy_source",
    "cost_per_hour",
    "cost_per_million_images",
    "convergence_check",
    "gradient_cosine",
    "skipped_steps",
    "others_cores",
    "rounds",
    "rounds_disturbed",
    "train_target",
    "time_to_target_s",
    "final_val_metric",
    "largest_batch",
    *(f"{c}_ms" for c in why.CATEGORIES),
    "kernels",
    "throttle_reasons",
    "input_device",
    "tf32",
    "matmul_precision",
    "tensorflow",
    "jax",
    "torch",
    "keras",
    "cuda",
    "cudnn",
    "label",
    "attempts",
    "search_trial",
    "time",
    "started_at",
    "finished_at",
    "cell",
    "source",
    "error",
    "profile_error",
    *scaling.CSV_COLUMNS,
    *inference.COLUMNS,  # serving cells (report/sections/inference.py)
)
COLUMNS = (*_BEFORE, *params.names(), *_AFTER)
# The frame's types (everything else: text or float)
TIMES = ("time", "started_at", "finished_at")


def _integer(tp: Any, kind: type = int) -> bool:
    """int (``kind``), Annotated[int, ...], or either of them | None; with ``kind`` str, a
    Literal of strings too."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return all(_integer(a, kind) for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is typing.Annotated:
        return _integer(typing.get_args(tp)[0], kind)
    if typing.get_origin(tp) is typing.Literal:
        return all(type(a) is kind for a in typing.get_args(tp))
    return tp is kind


INTEGERS = (
    *(f.name for f in params.fields() if _integer(f.type)),
    "step_ms_n",
    "peak_memory_bytes",
    "skipped_steps",
    "rounds",
    "rounds_disturbed",
    "largest_batch",
    "attempts",
    *scaling.CSV_INTEGERS,
    *inference.INTEGERS,
)
# float64 even where every value is missing (a frame of failures), never object
FLOATS = (
    *(f.name for f in params.fields() if _integer(f.type, float)),
    "step_ms_median",
    "step_ms_p25",
    "step_ms_p75",
    "images_per_s",
    "speedup_vs_float32",
    "speedup_low",
    "speedup_high",
    "loss_mean",
    "loss_vs_float32",
    "first_step_ms",
    "warmup_ms",
    "gpu_util_pct",
    "achieved_tflops",
    "energy_j_per_image",
    "cost_per_hour",
    "cost_per_million_images",
    "gradient_cosine",
    *inference.FLOATS,
    "others_cores",
    "train_target",
    "time_to_target_s",
    "final_val_metric",
    *(f"{c}_ms" for c in why.CATEGORIES),
    *scaling.CSV_FLOATS,
)
FLAGS = ("tf32", "search_trial", *scaling.CSV_FLAGS)
# text, missing as pd.NA like the integers and flags (and not object where every value is)
TEXTS = (
    *_BEFORE,
    *(f.name for f in params.fields() if _integer(f.type, str)),
    "status",
    "verdict",
    "loss_parity",
    *scaling.CSV_TEXTS,
    "peak_memory_kind",
    "energy_source",
    "convergence_check",
    "kernels",
    "throttle_reasons",
    "input_device",
    "matmul_precision",
    "tensorflow",
    "jax",
    "torch",
    "keras",
    "cuda",
    "cudnn",
    "label",
    "cell",
    "source",
    "error",
    *inference.TEXTS,
)
# OWASP: a cell a spreadsheet would read as a formula gets a leading apostrophe.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_CONTROL = params.control()


def row(
    t: tables.Table | None, rec: Record, attempts: int, largest: int | None = None
) -> dict[str, Any]:
    """``largest``: for a trial of a batch-size search, the largest batch its search found."""
    p, m, step = rec.params, rec.metrics, rec.metrics.step_ms
    slot = (p.policy, p.batch_size)
    ratio = t.ratios.get(slot) if t is not None and rec.status == "ok" else None
    loss = t.parity.get(slot) if t is not None and rec.status == "ok" else None
    health = m.gpu_health
    error = tables.last_line(rec.error)
    peak, peak_kind = capacity.peak_bytes(rec)
    out: dict[str, Any] = {
        "host": rec.host,
        "engine": rec.engine,
        "image": rec.image.name,
        "image_id": rec.image.id,
        "device_kind": rec.device.kind,
        "device": rec.device.name,
        "compute_capability": rec.device.compute_capability,
        "cpu_model": rec.cpu.model,
    }
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
        loss_mean=None if loss is None or loss.loss is None else loss.loss,
        loss_vs_float32=None if loss is None or loss.diff is None else round(loss.diff, 4),
        loss_parity=None if loss is None else loss.state,
        first_step_ms=m.first_step_ms,
        warmup_ms=m.warmup_ms,
        # what counts against the memory limit, as the largest-batch table reads it
        peak_memory_bytes=peak,
        peak_memory_kind=peak_kind,
        gpu_util_pct=m.gpu_util_pct,
        achieved_tflops=m.achieved_tflops,
        **_beside(rec),
        largest_batch=largest,
        throttle_reasons=",".join(health.throttle_reasons) if health is not None else None,
        input_device=rec.settings.input_device,
        tf32=rec.settings.tf32,
        matmul_precision=rec.settings.matmul_precision,
        tensorflow=rec.software.tensorflow,
        jax=rec.software.jax,
        torch=rec.software.torch,
        keras=rec.software.keras,
        cuda=cuda_text(rec.software.cuda),
        cudnn=cudnn_text(rec.software.cudnn),
        label=rec.label,
        attempts=attempts,
        search_trial=rec.search is not None,  # a trial of a largest-batch search
        time=rec.time,
        started_at=rec.started_at,
        finished_at=rec.finished_at,
        cell=rec.cell,
        source=rec.source,
        error=error,
        profile_error=tables.last_line(rec.profile.error) if rec.profile is not None else None,
    )
    return out


def _beside(rec: Record) -> dict[str, Any]:
    """What the report shows beside the step times, per record: energy and cost, the
    convergence check, the interference during paired windows, the training run."""
    m, c, train = rec.metrics, rec.convergence, rec.train
    found = busy([rec])
    finals = [p.val_metric for p in train.points if p.val_metric is not None] if train else []
    return {
        "energy_j_per_image": m.energy_j_per_image,
        "energy_source": m.energy_source if m.energy_j_per_image else None,
        "cost_per_hour": rec.cost_per_hour,
        "cost_per_million_images": why.dollars_per_million([rec], m.images_per_s),
        "convergence_check": None if c is None else c.check,
        "gradient_cosine": None if c is None else c.cosine,
        "skipped_steps": None if c is None else c.skipped_steps,
        "others_cores": None if found is None else found.others_cores,
        "rounds": None if found is None else found.rounds,
        "rounds_disturbed": None if found is None else found.disturbed,
        "train_target": None if train is None else train.target,
        "time_to_target_s": None if train is None else train.time_to_target_s,
        "final_val_metric": finals[-1] if finals else None,
        **_breakdown(rec),
    }


def _breakdown(rec: Record) -> dict[str, Any]:
    """Where the time goes, as the report shows it: each category's share of the profiled
    window applied to the timed median step (:mod:`mxbench.report.sections.why`), and the kernels."""
    p, step = why.profile_of([rec]), rec.metrics.step_ms
    parts = why.split(step.median, p) if p is not None and step is not None else None
    if p is None or parts is None:
        return {f"{c}_ms": None for c in why.CATEGORIES} | {"kernels": None}
    return {f"{c}_ms": ms for c, ms in parts.items()} | {"kernels": why.kernels_text(p) or None}


def rows(
    loaded: load.Loaded, built: list[tables.Table], latest: bool = True
) -> list[dict[str, Any]]:
    """The rows of the frame, in table order: every cell of each slot, the speedup and the
    loss parity on those its entry counts (ok, of the slot's latest run); then the trials
    of batch-size searches (``search_trial``)."""
    out = []
    mapped = scaling.columns(scaling.build(built))
    for t in built:
        for b in t.batches:
            for p in t.policies:
                e = t.entries.get((p, b))
                counted = {id(r) for r in e.records} if e is not None else set()
                for rec in t.cells.get((p, b), ()):
                    where = t if id(rec) in counted else None
                    said = row(where, rec, loaded.attempts.get(str(rec.cell), 1))
                    out.append(said | mapped.get(id(rec), {}))
    # the trials of largest-batch searches: no table of their own here (report.capacity)
    found = {
        id(r): fit.batch
        for c in capacity.build(loaded.winners)
        for fit in c.fits.values()
        for r in fit.trials
    }
    out += [
        row(None, rec, loaded.attempts.get(str(rec.cell), 1), found.get(id(rec)))
        for rec in loaded.winners
        if rec.search is not None
    ]
    served = inference.columns(loaded.winners)  # serving cells: a section of their own
    out += [
        row(None, rec, loaded.attempts.get(str(rec.cell), 1)) | served[id(rec)]
        for rec in loaded.winners
        if inference.serving(rec)
    ]
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


PATHS = "mxbench.paths"  # the frame's attrs key: the result paths it was read from


def load_results(*paths: str | Path, latest: bool = True, label: str | None = None) -> pd.DataFrame:
    """Result records as a DataFrame, one row per cell (``latest=False``: per attempt).

    ``paths``: result folders (every JSONL file in the tree below) or JSONL files (default
    ``results``). Unreadable lines are skipped with a warning (``warnings.warn``), as in the
    report, and so is a ``label`` that no record carries. A path that does not exist raises
    :class:`FileNotFoundError`; arguments of the wrong kind :class:`TypeError`.
    """
    import warnings

    import pandas as pd

    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"load_results: a path is a str or a Path, not {type(p).__name__}")
        if not os.path.lexists(p):
            raise FileNotFoundError(2, "no result file or folder", str(p))
    if label is not None and not isinstance(label, str):
        raise TypeError(f"load_results: label is a str, not {type(label).__name__}")
    if not paths and not os.path.lexists("results"):
        raise FileNotFoundError(
            2, "no result folder here (name result folders or files)", "results"
        )
    where = paths or ("results",)
    with load.collector_paused():
        loaded = load.load(where, label=label, keep_all=not latest)
        built = tables.build(loaded.winners)
        found = rows(loaded, built, latest)
    for bad in loaded.bad:
        warnings.warn(f"{bad.path}:{bad.lineno}: {bad.reason} (skipped)", stacklevel=2)
    if label is not None and not loaded.winners and loaded.read:
        known = ", ".join(sorted(repr(x) for x in loaded.labels if x is not None)) or "none"
        warnings.warn(
            f"label {label!r} matches none of the {loaded.read} records read "
            f"(their labels: {known})",
            stacklevel=2,
        )
    frame = typed(pd.DataFrame(found, columns=list(COLUMNS)))
    frame.attrs[PATHS] = [str(p) for p in where]  # mxbench.render_report(frame) reads them again
    return frame


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Times as UTC datetimes, counts as nullable integers, flags as nullable booleans, text
    as pandas' string type."""
    import pandas as pd

    for col in TIMES:
        when = pd.to_datetime(frame[col], utc=True, format="ISO8601", errors="coerce")
        frame[col] = when.dt.as_unit("us")  # one unit, whatever the values happen to be
    for col in INTEGERS:
        frame[col] = frame[col].astype("Int64")
    for col in FLOATS:
        frame[col] = frame[col].astype("float64")
    for col in FLAGS:
        frame[col] = frame[col].astype("boolean")
    for col in TEXTS:
        frame[col] = text = frame[col].astype("string")
        long = (text.str.len() > tables.MAX_RECORD_TEXT).fillna(False)
        if long.any():
            frame.loc[long, col] = text[long].map(tables.bounded)
    return frame


def render(doc: Document) -> str:
    """The CSV format of the report: one row per cell (the frame's columns)."""
    return to_csv(doc.loaded, list(doc.tables))


def to_csv(loaded: load.Loaded, built: list[tables.Table]) -> str:
    import pandas as pd

    frame = pd.DataFrame(rows(loaded, built), columns=list(COLUMNS))
    for col in inference.INTEGERS:  # counts of serving cells only: not 368.0 elsewhere
        frame[col] = frame[col].astype("Int64")
    text_columns = frame.select_dtypes(include=["object", "string"]).columns
    for col in text_columns:
        frame[col] = frame[col].map(_neutralise)
    return str(frame.to_csv(index=False, lineterminator="\n"))


def _neutralise(value: Any) -> Any:
    if isinstance(value, str):
        value = tables.bounded(_CONTROL.sub(" ", value))  # one physical line per row
        return "'" + value if value.startswith(_FORMULA) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
