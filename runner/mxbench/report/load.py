"""Read result records from any number of sources and pick one record per cell.

Several attempts of one cell (a retry after an OOM, a resumed run, the same directory
copied twice): the latest ``ok`` wins; a cell that never succeeded keeps its latest
attempt, so the report can say OOM / error / timeout / unsupported. "Latest" is the
record's ``time`` (ISO-8601, any offset), then the order in which records were read.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxbench.errors import UsageError
from mxbench.results import MIN_FIELDS, STATUSES, BadLine, ResultStore

try:  # optional: a much faster JSON decoder; the standard library gives the same result
    import msgspec
except ImportError:  # pragma: no cover
    msgspec = None  # type: ignore[assignment]

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
    params = rec.get("params")
    status = rec.get("status")
    if (
        isinstance(params, dict)
        and status in STATUSES
        and rec.get("schema")
        and rec.get("cell")
        and rec.get("host")
        and params.get("policy")
        and type(params.get("batch_size")) is int
    ):
        return None  # the fast path: a well-formed record
    missing = [k for k in MIN_FIELDS if rec.get(k) in (None, "")]
    if missing:
        return f"missing contract field(s): {', '.join(missing)}"
    if status not in STATUSES:
        return f"unknown status {status!r}"
    if not isinstance(params, dict):
        return "params is not an object"
    if not params.get("policy"):
        return "params.policy missing"
    return "params.batch_size missing or not an integer"


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


def load(sources: Iterable[Path | str], *, full: bool = False) -> Loaded:
    """Read and merge. ``full=False`` skips the bulky per-record fields (cpu, software, run)
    that only a table's heading needs: :func:`detail` reads them back for that one record."""
    files = source_files(sources)
    out = Loaded(winners=[], attempts={}, files=files)
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        for lineno, offset, rec in _read(path, out.bad, full):
            out.records += 1
            why = problem(rec)
            if why:
                out.bad.append(BadLine(path, lineno, why))
                continue
            if not full:
                rec[_AT] = (path, offset)
            by_cell.setdefault(str(rec["cell"]), []).append(rec)
    out.winners = [pick(attempts) for attempts in by_cell.values()]
    out.attempts = {cell: len(attempts) for cell, attempts in by_cell.items()}
    return out


_AT = "__mxbench_at__"  # (file, byte offset) of a record read without its bulky fields


def detail(rec: dict[str, Any]) -> dict[str, Any]:
    """The whole record, re-read from its file when :func:`load` skipped fields of it."""
    at = rec.get(_AT)
    if at is None:
        return rec
    try:
        with open(at[0], "rb") as fh:
            fh.seek(at[1])
            full = _decode_full(fh.readline())
    except (OSError, ValueError):
        full = None
    return full if isinstance(full, dict) else {k: v for k, v in rec.items() if k != _AT}


def _read(path: Path, bad: list[BadLine], full: bool) -> Iterator[tuple[int, int, dict]]:
    """(line number, byte offset, record) for each readable line of one JSONL file.

    Same rules and messages as :func:`mxbench.results.read_jsonl`, but decoded with msgspec
    when it is installed (several times faster on 100,000 records); a line it rejects goes
    through the standard json module, so the verdict and message never depend on it.
    """
    fast = _decode_full if full else _decode_light
    data = path.read_bytes()
    offset = 0
    for lineno, line in enumerate(data.split(b"\n"), 1):
        start, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        try:
            rec = fast(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            rec = _decode_slow(line, path, lineno, bad)
            if rec is None:
                continue
        yield lineno, start, rec


def _decode_slow(line: bytes, path: Path, lineno: int, bad: list[BadLine]) -> dict | None:
    try:
        obj = json.loads(line.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        bad.append(BadLine(path, lineno, f"not JSON ({exc.msg})"))
        return None
    if not isinstance(obj, dict):
        bad.append(BadLine(path, lineno, "not a JSON object"))
        return None
    return obj


if msgspec is not None:

    class _Light(msgspec.Struct):
        """The fields tables and diagnosis use for every record; the rest is skipped."""

        schema: Any = None
        cell: Any = None
        time: Any = None
        host: Any = None
        engine: Any = None
        image: Any = None
        params: Any = None
        status: Any = None
        metrics: Any = None
        device: Any = None
        settings: Any = None
        source: Any = None
        error: Any = None

    _light_decoder = msgspec.json.Decoder(_Light)
    _full_decoder = msgspec.json.Decoder()

    def _decode_light(line: bytes) -> dict[str, Any]:
        try:
            obj = _light_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from None
        return msgspec.structs.asdict(obj)

    def _decode_full(line: bytes) -> Any:
        try:
            return _full_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from None

else:  # pragma: no cover - exercised where msgspec is not installed

    def _decode_full(line: bytes) -> Any:
        try:
            return json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(exc.msg) from None

    _decode_light = _decode_full
