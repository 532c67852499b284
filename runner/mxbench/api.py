"""mxbench's Python API: what a notebook or a script calls (docs/api.md).

    import mxbench
    frame = mxbench.load_results("results")              # a DataFrame, one row per cell
    text = mxbench.render_report(frame[frame.batch_size == 32])  # the report of those rows
    r = mxbench.speedup([[101, 99, 100], [98, 102]], [[80, 81, 79], [82, 80]])
    r.value, r.low, r.high, r.verdict                    # 1.24, its 95% interval, "faster"

These names, and the types they return, are the package's declared surface: the command
line is a thin wrapper over them, and they keep their meaning across versions (a change is
said in the changelog). Every other module is private by convention, whatever its names
look like.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mxbench import stats
from mxbench.records.record import Record

if TYPE_CHECKING:
    import pandas as pd

    from mxbench.report.load import Loaded

__all__ = ["Ratio", "Record", "load_records", "render_report", "speedup"]

Ratio = stats.Ratio  # a speedup with its interval and verdict (``value``, ``low``, ``high``)

Source = str | Path | Sequence[str | Path] | Iterable[Record]


def load_records(*paths: str | Path, label: str | None = None) -> list[Record]:
    """The latest record of every cell in these result folders or JSONL files (default
    ``results``), as the report picks them; unreadable lines are skipped, as in the report.
    A path that does not exist raises :class:`FileNotFoundError`."""
    return _loaded(paths or ("results",), label).winners


def render_report(source: Source | pd.DataFrame = "results", *, format: str = "markdown",
           label: str | None = None) -> str:  # fmt: skip
    """The report, as ``mxbench report`` writes it, of ``source``: result folders or files,
    records (:func:`load_records`), or a frame from :func:`mxbench.load_results` (the cells
    of its rows: filter the frame to report a part). ``format``: markdown, html, json, csv
    or terminal (plain text)."""
    from mxbench.report import document, tables

    if format not in document.FORMATS:
        raise ValueError(f"format {format!r}: one of {', '.join(document.FORMATS)}")
    loaded = _source(source, label)
    if not loaded.winners:
        raise ValueError("no result records to report")
    return document.render(document.build(loaded, tables.build(loaded.winners)), format)


def speedup(base: Sequence[Sequence[float]], other: Sequence[Sequence[float]], *,
            level: float = stats.LEVEL) -> Ratio:  # fmt: skip
    """How much faster ``other`` is than ``base``, from each side's step times (any unit,
    the same on both sides), one list per fresh process: base's time over other's, with its
    ``level`` interval over the processes (docs/measuring.md) and a verdict. With one process
    on a side the interval is over its steps only and there is no verdict
    (``Ratio.judged`` is False). ValueError where a side has no positive time."""
    if not 0 < level < 1:
        raise ValueError(f"level {level}: between 0 and 1 (0.95)")
    for name, side in (("base", base), ("other", other)):
        given: object = side  # a caller's, whatever its type
        if isinstance(given, str) or not all(isinstance(p, Sequence) for p in side):
            raise TypeError(f"{name}: one list of step times per process")
    found = stats.speedups([(base, other)], level)[0]
    if found is None:
        raise ValueError("a side has no positive step time")
    return found


def _loaded(paths: Iterable[str | Path], label: str | None) -> Loaded:
    from mxbench.report import load

    where = [Path(p) for p in paths]
    for p in where:
        if not p.exists():
            raise FileNotFoundError(2, "no result file or folder", str(p))
    with load.collector_paused():
        return load.load(where, label=label)


def _source(source: Any, label: str | None) -> Loaded:
    """Records to report from whatever :func:`render_report` was given."""
    from mxbench.report.frame import PATHS
    from mxbench.report.load import Loaded

    if isinstance(source, (str, Path)):
        return _loaded([source], label)
    if hasattr(source, "columns"):  # a frame from load_results, perhaps filtered
        if PATHS not in source.attrs or "cell" not in source.columns:
            raise TypeError("render_report: a frame from mxbench.load_results (its attrs name the "
                            "result paths it was read from)")  # fmt: skip
        keys = {str(c) for c in source["cell"].dropna()}
        loaded = _loaded(source.attrs[PATHS], label)
        loaded.winners = [r for r in loaded.winners if str(r.cell) in keys]
        return loaded
    items = list(source)
    if all(isinstance(x, (str, Path)) for x in items):
        return _loaded(items, label)
    if not all(isinstance(x, Record) for x in items):
        raise TypeError("render_report: result paths, Records, or a frame from load_results")
    chosen = [r for r in items if label is None or r.label == label]
    return Loaded(winners=chosen, attempts={}, read=len(chosen))
