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

import contextlib
import datetime as _dt
import gc
import os
import stat
from collections.abc import Iterable, Iterator
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
    labels: set[str | None] = field(default_factory=set)  # every label read (with --label)


# How far below a named folder result files are looked for, and how many are read at most.
MAX_DEPTH = 8
MAX_FILES = 100_000


def source_files(sources: Iterable[Path | str], bad: list[BadLine]) -> list[Path]:
    """Result files named by --results: a folder means every ``*.jsonl`` file in the tree
    below it (at most :data:`MAX_DEPTH` levels down, hidden folders and symbolic links not
    followed, at most :data:`MAX_FILES` files). A path that does not exist is a usage error;
    one that exists but cannot be read is a warning."""
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
            files.extend(_tree(path, bad, MAX_FILES - len(files)))
        elif _readable(path, bad):
            files.append(path)
    return files


def _tree(top: Path, bad: list[BadLine], room: int) -> list[Path]:
    """The ``*.jsonl`` files below ``top``, sorted, walked without following links."""
    out: list[Path] = []

    def failed(exc: OSError) -> None:
        bad.append(BadLine(Path(exc.filename or top), 0, f"cannot list ({exc.strerror})"))

    for root, dirs, names in os.walk(top, onerror=failed, followlinks=False):
        here = Path(root)
        depth = len(here.relative_to(top).parts)
        links = [d for d in dirs if (here / d).is_symlink()]
        for d in links:
            bad.append(BadLine(here / d, 0, "a symbolic link to a folder (not followed)"))
        keep = sorted(d for d in dirs if not d.startswith(".") and d not in links)
        if depth >= MAX_DEPTH and keep:
            bad.append(BadLine(here, 0, f"more than {MAX_DEPTH} folders deep (not read)"))
            keep = []
        dirs[:] = keep
        for name in sorted(n for n in names if n.endswith(".jsonl")):
            f = here / name
            if f.is_symlink():
                bad.append(BadLine(f, 0, "a symbolic link (not followed; name it to read it)"))
            elif _readable(f, bad):
                if len(out) >= room:
                    bad.append(BadLine(top, 0, f"more than {MAX_FILES} result files (stopped)"))
                    return out
                out.append(f)
    return out


def folders(files: Iterable[Path]) -> list[Path]:
    """The folders the files were read in, in reading order."""
    return list(dict.fromkeys(f.parent for f in files))


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


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a report is made, back as it was after.

    A report builds millions of small objects that form no cycle (records are trees, tables
    and documents refer downwards), so every collection walks them all and frees nothing:
    with 100,000 records that was about 45% of the report's time (benchmarks/report_speed.py).
    Reference counting still frees everything as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
                    out.labels.add(rec.label)
                    continue
                by_cell.setdefault(str(rec.cell), []).append(rec)
        except OSError as exc:  # vanished or became unreadable while reading
            out.bad.append(BadLine(path, 0, f"cannot read ({exc.strerror})"))
    out.winners = [pick(attempts) for attempts in by_cell.values()]
    out.attempts = {c: len(a) for c, a in by_cell.items() if len(a) > 1}
    if keep_all:
        out.everything = by_cell
    return out
