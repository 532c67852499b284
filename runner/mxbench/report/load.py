"""Read result records from any number of sources and pick one record per cell.

Records are decoded as :class:`mxbench.results.Record`, streamed line by line. A line that
is not a record, and a path that cannot be read (a directory named ``*.jsonl``, a FIFO, a
device, a symlink loop, no permission), is skipped with one ``file:line: reason`` warning.

Several attempts of one cell (a retry after an OOM, a resumed run, the same directory
copied twice): the latest ``ok`` wins; a cell that never succeeded keeps its latest
attempt, so the report can say OOM / error / timeout / unsupported. "Latest" is the
record's ``time`` (ISO-8601, any offset), then the order in which records were read.
"""

from __future__ import annotations

import datetime as _dt
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mxbench.errors import UsageError
from mxbench.results import BadLine, Record, read_records

_EPOCH = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


@dataclass
class Loaded:
    """The merge: one winning record per cell key, plus what was skipped and why."""

    winners: list[Record]
    attempts: dict[str, int]  # cell -> number of attempts, for cells tried more than once
    read: int = 0  # lines that held a JSON object (records, and those that broke the contract)
    files: list[Path] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    everything: dict[str, list[Record]] = field(default_factory=dict)  # keep_all=True only


def source_files(sources: Iterable[Path | str], bad: list[BadLine]) -> list[Path]:
    """Result files named by --results: a directory means its ``*.jsonl`` entries. A path
    that does not exist is a usage error; one that exists but cannot be read is a warning."""
    files: list[Path] = []
    for src in sources:
        path = Path(src)
        try:
            st = path.stat()
        except FileNotFoundError:
            if path.is_symlink():
                bad.append(BadLine(path, 0, "a dangling symbolic link"))
                continue
            raise UsageError(f"--results {src}: no such file or directory") from None
        except OSError as exc:
            bad.append(BadLine(path, 0, f"cannot read ({exc.strerror})"))
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                entries = sorted(path.glob("*.jsonl"))
            except OSError as exc:
                bad.append(BadLine(path, 0, f"cannot list ({exc.strerror})"))
                continue
            files.extend(f for f in entries if _readable(f, bad))
        elif _readable(path, bad):
            files.append(path)
    return files


def _readable(path: Path, bad: list[BadLine]) -> bool:
    """A regular file we may read (never opened here: a FIFO would block)."""
    try:
        st = path.stat()
    except OSError as exc:
        bad.append(BadLine(path, 0, f"cannot read ({exc.strerror})"))
        return False
    if stat.S_ISDIR(st.st_mode):
        bad.append(BadLine(path, 0, "a directory, not a result file"))
        return False
    if not stat.S_ISREG(st.st_mode):
        bad.append(BadLine(path, 0, "not a regular file (a FIFO, device or socket)"))
        return False
    if not os.access(path, os.R_OK):
        bad.append(BadLine(path, 0, "cannot read (permission denied)"))
        return False
    return True


def when(rec: Record) -> _dt.datetime:
    if rec.time is None:
        return _EPOCH
    try:
        t = _dt.datetime.fromisoformat(rec.time.replace("Z", "+00:00"))
    except ValueError:
        return _EPOCH
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def latest(records: list[Record]) -> Record:
    """The latest record by ``time``; among equal (or missing) times the last one read."""
    best = records[0]
    best_t = when(best)
    for rec in records[1:]:
        t = when(rec)
        if t >= best_t:
            best, best_t = rec, t
    return best


def pick(attempts: list[Record]) -> Record:
    """The record that stands for one cell: the latest ok, else the latest attempt."""
    if len(attempts) == 1:
        return attempts[0]
    ok = [r for r in attempts if r.status == "ok"]
    return latest(ok or attempts)


def load(sources: Iterable[Path | str], label: str | None = None, keep_all: bool = False) -> Loaded:
    """Read and merge; ``label``: only the records of ``mxbench run --label LABEL``;
    ``keep_all``: keep every attempt in :attr:`Loaded.everything` too."""
    bad: list[BadLine] = []
    files = source_files(sources, bad)
    out = Loaded(winners=[], attempts={}, files=files, bad=bad)
    by_cell: dict[str, list[Record]] = {}
    for path in files:
        try:
            for lineno, rec in read_records(path, out.bad):
                out.read += 1
                why = rec.problem()
                if why:
                    out.bad.append(BadLine(path, lineno, why))
                    continue
                if label is not None and rec.label != label:
                    continue
                by_cell.setdefault(str(rec.cell), []).append(rec)
        except OSError as exc:  # vanished or became unreadable while reading
            out.bad.append(BadLine(path, 0, f"cannot read ({exc.strerror})"))
    out.winners = [pick(attempts) for attempts in by_cell.values()]
    out.attempts = {c: len(a) for c, a in by_cell.items() if len(a) > 1}
    if keep_all:
        out.everything = by_cell
    return out
