"""Read result records from any number of sources and pick one record per cell.

Several attempts of one cell (a retry after an OOM, a resumed run, the same directory
copied twice): the latest ``ok`` wins; a cell that never succeeded keeps its latest
attempt, so the report can say OOM / error / timeout / unsupported. "Latest" is the
record's ``time`` (ISO-8601, any offset), then the order in which records were read.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxbench.errors import UsageError
from mxbench.results import MIN_FIELDS, STATUSES, BadLine, ResultStore, read_jsonl

_EPOCH = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


@dataclass
class Loaded:
    """The merge: one winning record per cell key, plus what was skipped and why."""

    winners: list[dict[str, Any]]
    attempts: dict[str, int]
    records: int = 0
    files: list[Path] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)


def source_files(sources: Iterable[Path | str]) -> list[Path]:
    """Result files named by --results: a directory means its ``*.jsonl`` files."""
    files: list[Path] = []
    for src in sources:
        path = Path(src)
        if path.is_dir():
            files.extend(ResultStore(path).files())
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"--results {src}: no such file or directory")
    return files


def problem(rec: dict[str, Any]) -> str | None:
    """Why a parsed record cannot be placed in a table, or None when it can."""
    missing = [k for k in MIN_FIELDS if rec.get(k) in (None, "")]
    if missing:
        return f"missing contract field(s): {', '.join(missing)}"
    if rec["status"] not in STATUSES:
        return f"unknown status {rec['status']!r}"
    params = rec["params"]
    if not isinstance(params, dict):
        return "params is not an object"
    if not params.get("policy"):
        return "params.policy missing"
    if not isinstance(params.get("batch_size"), int) or isinstance(params["batch_size"], bool):
        return "params.batch_size missing or not an integer"
    return None


def when(rec: dict[str, Any]) -> _dt.datetime:
    text = rec.get("time")
    if not isinstance(text, str):
        return _EPOCH
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return _EPOCH
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def pick(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The record that stands for one cell: the latest ok, else the latest attempt.

    ``attempts`` are in read order, which breaks ties between equal (or missing) times.
    """
    if len(attempts) == 1:
        return attempts[0]
    order = sorted(range(len(attempts)), key=lambda i: (when(attempts[i]), i))
    ok = [i for i in order if attempts[i]["status"] == "ok"]
    return attempts[(ok or order)[-1]]


def load(sources: Iterable[Path | str]) -> Loaded:
    files = source_files(sources)
    out = Loaded(winners=[], attempts={}, files=files)
    by_cell: dict[str, list[dict[str, Any]]] = {}
    unusable: list[BadLine] = []  # kept apart: _numbered counts the entries of out.bad
    for path in files:
        for rec in _numbered(path, out.bad):
            lineno = rec.pop("__line__")
            out.records += 1
            why = problem(rec)
            if why:
                unusable.append(BadLine(path, lineno, why))
                continue
            by_cell.setdefault(str(rec["cell"]), []).append(rec)
    rank = {path: i for i, path in enumerate(files)}
    out.bad = sorted([*out.bad, *unusable], key=lambda b: (rank.get(b.path, 0), b.lineno))
    out.winners = [pick(attempts) for attempts in by_cell.values()]
    out.attempts = {cell: len(attempts) for cell, attempts in by_cell.items()}
    return out


def _numbered(path: Path, bad: list[BadLine]) -> Iterable[dict[str, Any]]:
    """Records of one file, each tagged with its line number (for warnings).

    ``read_jsonl`` skips blank lines and reports unreadable ones into ``bad`` before it
    yields the next record, so the n-th record sits on the non-blank line numbered
    (records yielded so far + bad lines reported so far).
    """
    with open(path, encoding="utf-8", errors="replace") as fh:
        nonblank = [i for i, line in enumerate(fh, 1) if line.strip()]
    before = len(bad)
    for yielded, rec in enumerate(read_jsonl(path, bad)):
        index = yielded + len(bad) - before
        rec["__line__"] = nonblank[index] if index < len(nonblank) else 0
        yield rec
