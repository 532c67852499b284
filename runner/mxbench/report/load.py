"""Read result records from any number of sources and pick one record per cell.

Several attempts of one cell (a retry after an OOM, a resumed run, the same directory
copied twice): the latest ``ok`` wins; a cell that never succeeded keeps its latest
attempt, so the report can say OOM / error / timeout / unsupported. "Latest" is the
record's ``time`` (ISO-8601, any offset), then the order in which records were read.
"""

from __future__ import annotations

import datetime as _dt
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

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
    attempts: dict[str, int]  # cell -> number of attempts, for cells tried more than once
    records: int = 0  # JSON objects read, those that break the contract included
    cells: int = 0  # distinct cells: len(winners) once merged
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


def well_formed(rec: dict[str, Any]) -> bool:
    """The common case, checked fast: every field a table needs is there, of the right type."""
    params = rec.get("params")
    return (
        type(params) is dict
        and rec.get("status") in STATUSES
        and bool(rec.get("schema"))
        and bool(rec.get("cell"))
        and type(rec.get("host")) is str
        and bool(rec["host"])
        and bool(params.get("policy"))
        and type(params.get("batch_size")) is int
    )


def problem(rec: dict[str, Any]) -> str | None:
    """Why a parsed record cannot be placed in a table, or None when it can."""
    if well_formed(rec):
        return None
    params = rec.get("params")
    status = rec.get("status")
    missing = [k for k in MIN_FIELDS if rec.get(k) in (None, "")]
    if missing:
        return f"missing contract field(s): {', '.join(missing)}"
    if status not in STATUSES:
        return f"unknown status {status!r}"
    if not isinstance(rec["host"], str):
        return "host is not a string"
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


def _uniform_utc(times: list[Any]) -> bool:
    """Whether the times are ISO-8601 strings of one layout in UTC (as mxbench writes
    them), which order as strings exactly as the instants they name."""
    first = times[0]
    if type(first) is not str or not first.endswith("+00:00") or first[10:11] != "T":
        return False
    size = len(first)
    return all(
        type(t) is str and len(t) == size and t.endswith("+00:00") and t[10:11] == "T"
        for t in times
    )


def latest(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The latest record by ``time``; among equal (or missing) times the last one read."""
    if len(records) == 1:
        return records[0]
    times = [r.get("time") for r in records]
    if _uniform_utc(times):
        keys: list[Any] = times
    else:
        keys = [when(r) for r in records]
    best = 0
    for i in range(1, len(records)):
        if keys[i] >= keys[best]:
            best = i
    return records[best]


def pick(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The record that stands for one cell: the latest ok, else the latest attempt.

    ``attempts`` are in read order, which breaks ties between equal (or missing) times.
    """
    if len(attempts) == 1:
        return attempts[0]
    ok = [r for r in attempts if r["status"] == "ok"]
    return latest(ok or attempts)


Piece = tuple[Path, int, int]  # (file, first byte, end byte): whole lines of one file


def load(
    sources: Iterable[Path | str],
    *,
    full: bool = False,
    shard: tuple[int, int] | None = None,
    pieces: list[Piece] | None = None,
) -> Loaded:
    """Read and merge. ``full=False`` skips the bulky per-record fields (cpu, software, run)
    that only a table's heading needs: :func:`detail` reads them back for that one record.

    ``shard=(k, n)``: only the records of the hosts in shard ``k`` of ``n`` (see
    :func:`shard_of`), to split one report between processes; a line whose host cannot be
    read belongs to shard 0, so each line is read, and warned about, exactly once.

    ``pieces``: read these byte ranges instead of whole files (``sources`` is then unused).
    """
    if pieces is None:
        files = source_files(sources)
        pieces = [(f, 0, -1) for f in files]
    else:
        files = list(dict.fromkeys(path for path, _, _ in pieces))
    out = Loaded(winners=[], attempts={}, files=files)
    first: dict[str, dict[str, Any]] = {}  # cell -> its first record (most cells have one)
    more: dict[str, list[dict[str, Any]]] = {}  # cell -> every attempt, for cells with several
    for path, begin, end in pieces:
        for lineno, data, offset, rec in _read(path, out.bad, full, shard, begin, end):
            out.records += 1
            why = problem(rec)
            if why:
                out.bad.append(BadLine(path, lineno, why))
                continue
            if not full:
                rec[_AT] = (data, offset)
            cell = rec["cell"]
            if type(cell) is not str:
                cell = str(cell)
            seen = first.get(cell)
            if seen is None:
                first[cell] = rec
            elif cell in more:
                more[cell].append(rec)
            else:
                more[cell] = [seen, rec]
    out.winners = [pick(more[cell]) if cell in more else rec for cell, rec in first.items()]
    out.attempts = {cell: len(attempts) for cell, attempts in more.items()}
    out.cells = len(out.winners)
    return out


# Where a record read without its bulky fields came from: (the file's bytes, line start).
# The bytes are the ones read once for parsing, kept (not copied) until the report is done.
_AT = "__mxbench_at__"


def detail(rec: dict[str, Any]) -> dict[str, Any]:
    """The whole record, decoded again from its line when :func:`load` skipped fields."""
    at = rec.get(_AT)
    if at is None:
        return rec
    data, start = at
    end = data.find(b"\n", start)
    try:
        full = _decode_full(data[start : end if end >= 0 else len(data)])
    except ValueError:
        full = None
    return full if isinstance(full, dict) else {k: v for k, v in rec.items() if k != _AT}


def shard_of(host: object, n: int) -> int:
    """The shard of a host: a stable hash of its name (the same in every process and run)."""
    return zlib.crc32(host.encode()) % n if isinstance(host, str) else 0


def _read(
    path: Path,
    bad: list[BadLine],
    full: bool,
    shard: tuple[int, int] | None = None,
    begin: int = 0,
    end: int = -1,
) -> Iterator[tuple[int, bytes, int, dict[str, Any]]]:
    """(line number, the bytes read, line start in them, record) for each readable line of
    one file, or of bytes ``begin`` to ``end`` of it (a line start; -1: the end of the file).

    Same rules and messages as :func:`mxbench.results.read_jsonl`, but decoded with msgspec
    when it is installed (several times faster on 100,000 records); a line it rejects goes
    through the standard json module, so the verdict and message never depend on it.
    """
    fast = _decode_full if full else _decode_light
    first_line = 1
    with open(path, "rb") as fh:
        if begin:
            first_line += _newlines(fh, begin)
            fh.seek(begin)
        data = fh.read() if end < 0 else fh.read(end - begin)
    offset = 0
    for lineno, line in enumerate(data.split(b"\n"), first_line):
        start, offset = offset, offset + len(line) + 1
        if not line or line.isspace():
            continue
        if shard is not None and shard_of(host_of(line), shard[1]) != shard[0]:
            continue
        try:
            rec = fast(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            rec = _decode_slow(line, path, lineno, bad)
            if rec is None:
                continue
        yield lineno, data, start, rec


def _newlines(fh: BinaryIO, end: int) -> int:
    """How many lines end before byte ``end`` (for the line numbers of a later piece)."""
    fh.seek(0)
    count, left = 0, end
    while left > 0:
        chunk = fh.read(min(left, 1 << 22))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


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

    class _Part(msgspec.Struct, omit_defaults=True):
        """Missing fields stay missing in the dict (not None), as with the json module."""

    class _Step(_Part):
        median: Any = None
        p25: Any = None
        p75: Any = None
        n: Any = None

    class _Metrics(_Part):
        step_ms: _Step | None = None
        gpu_util_pct: Any = None
        achieved_tflops: Any = None

    class _Settings(_Part):
        tf32: Any = None
        pure_float16: Any = None

    class _Device(_Part):
        kind: Any = None
        name: Any = None

    class _Image(_Part):
        name: Any = None
        id: Any = None

    class _Light(_Part):
        """What tables and diagnosis read from every record; everything else (cpu flags,
        software, the device's details, image labels) is skipped by the parser and read
        back by :func:`detail` for the one record behind each table's heading.

        A record whose parts have unexpected shapes (metrics a string, say) fails this
        typed decode and goes through the standard json module instead, whole.
        """

        schema: Any = None
        cell: Any = None
        time: Any = None
        host: Any = None
        image: _Image | None = None
        params: dict[str, Any] | None = None
        status: Any = None
        metrics: _Metrics | None = None
        device: _Device | None = None
        settings: _Settings | None = None

    class _Host(msgspec.Struct):
        host: Any = None

    _light_decoder = msgspec.json.Decoder(_Light)
    _host_decoder = msgspec.json.Decoder(_Host)

    def host_of(line: bytes) -> object:
        """The ``host`` of one JSONL line, read without parsing the rest; None if unreadable."""
        try:
            return _host_decoder.decode(line).host
        except msgspec.DecodeError:
            return None

    _full_decoder = msgspec.json.Decoder()
    _to_builtins = msgspec.to_builtins

    def _decode_light(line: bytes) -> dict[str, Any]:
        try:
            return _to_builtins(_light_decoder.decode(line))  # type: ignore[no-any-return]
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from None

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

    def host_of(line: bytes) -> object:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return None
        return rec.get("host") if isinstance(rec, dict) else None
