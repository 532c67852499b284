"""Result records (the contract) and the append-only JSONL store.

A record is one attempt at one cell. The bench writes the measurement part (params,
metrics, device, cpu, software, status); the orchestrator stamps who ran it (cell key,
host, engine, image) and turns engine failures (timeout, killed, unparsable output) into
records too, so that every attempt leaves exactly one line behind.

Layout on disk: ``<results>/<host>.jsonl``, one file per host (asv-style), so that
directories from many machines can be merged by copying them side by side.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "mxbench.result/1"
STATUSES = ("ok", "oom", "error", "timeout", "unsupported")
# A cell whose latest record has one of these is done: --resume skips it.
# An OOM is a real, final answer about that device and batch size.
FINAL_STATUSES = frozenset({"ok", "oom"})
MIN_FIELDS = ("schema", "cell", "host", "status", "params")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_record(
    *,
    params: dict[str, Any],
    status: str,
    error: str | None = None,
    cell: str | None = None,
    host: str | None = None,
    engine: str | None = None,
    image: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A record with every contract field present (metrics etc. may stay empty)."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return {
        "schema": SCHEMA,
        "cell": cell,
        "time": now_iso(),
        "host": host,
        "engine": engine,
        "image": image or {"name": None, "id": None},
        "params": dict(params),
        "status": status,
        "metrics": {},
        "device": {},
        "cpu": {},
        "software": {},
        "error": error,
    }


_JSON_LINE = re.compile(r"^\s*\{.*\}\s*$")


def parse_bench_output(stdout: str) -> dict[str, Any] | None:
    """The record a bench printed: the last stdout line that is a JSON object with our schema.

    Searching from the end tolerates stray prints (a library writing to stdout) before it.
    """
    for line in reversed(stdout.splitlines()):
        if not _JSON_LINE.match(line):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("schema") == SCHEMA:
            return obj
    return None


def tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    """The last lines of a log, for error fields: enough to see why, small enough to store."""
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out[-chars:]


def _safe_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"


@dataclass(frozen=True)
class BadLine:
    path: Path
    lineno: int
    reason: str


class ResultStore:
    """Append-only JSONL files under one directory, one file per host.

    Appends take an exclusive ``flock`` and write the whole line with one ``write`` on an
    ``O_APPEND`` descriptor, then fsync: two runs writing at once never interleave, and a
    crash loses at most the record being written.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path_for(self, host: str) -> Path:
        return self.root / f"{_safe_name(host)}.jsonl"

    def append(self, record: dict[str, Any]) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path_for(record.get("host") or "unknown")
        data = (json.dumps(record, sort_keys=False, default=str) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return path

    def files(self) -> list[Path]:
        return sorted(self.root.glob("*.jsonl")) if self.root.is_dir() else []

    def records(self, bad: list[BadLine] | None = None) -> Iterator[dict[str, Any]]:
        for path in self.files():
            yield from read_jsonl(path, bad)

    def latest_by_cell(self) -> dict[str, dict[str, Any]]:
        """Latest record per cell key (file order is append order, so last wins)."""
        latest: dict[str, dict[str, Any]] = {}
        for rec in self.records():
            key = rec.get("cell")
            if key:
                latest[key] = rec
        return latest

    def done_cells(self) -> set[str]:
        return {k for k, r in self.latest_by_cell().items() if r.get("status") in FINAL_STATUSES}


def read_jsonl(path: Path, bad: list[BadLine] | None = None) -> Iterator[dict[str, Any]]:
    """Records of one JSONL file; unreadable lines are reported into ``bad`` and skipped."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if bad is not None:
                    bad.append(BadLine(path, lineno, f"not JSON ({exc.msg})"))
                continue
            if not isinstance(obj, dict):
                if bad is not None:
                    bad.append(BadLine(path, lineno, "not a JSON object"))
                continue
            yield obj


def iter_sources(sources: Iterable[Path], bad: list[BadLine] | None = None) -> Iterator[dict]:
    """Records from any mix of result directories and JSONL files."""
    for src in sources:
        src = Path(src)
        if src.is_dir():
            yield from ResultStore(src).records(bad)
        else:
            yield from read_jsonl(src, bad)
