"""Read result records from any number of sources and pick one record per cell.

Records are streamed line by line and decoded as :class:`~mxbench.records.summary.Read`, a
:class:`Record` whose bulky parts (a record's raw step samples and per-step losses) are
validated as the record type validates them and then summarised, a batch of records at a
time, into what the tables need: the process's median and its uncertainty
(:func:`mxbench.stats.summarise`) and the sum and count of its losses. A reader's memory
grows with the cells, never with the steps; the winning record of a cell is chosen as
records arrive. A line that is not a record, and a path that cannot be read (a directory
named ``*.jsonl``, a FIFO, a device, a symlink loop, no permission), is skipped with one
``file:line: reason`` warning: the same lines as :func:`mxbench.records.codec.decode` refuses, with
its reasons (a line the fast path cannot vouch for is decoded by it).

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mxbench import stats
from mxbench.errors import UsageError
from mxbench.records import codec, store
from mxbench.records import record as results
from mxbench.records.codec import BadRecord
from mxbench.records.record import (
    SCHEMA,
    Device,
    Image,
    Metrics,
    Pairing,
    Record,
    Settings,
    StepStats,
)
from mxbench.records.store import BadLine
from mxbench.records.summary import Read, loss_total, metrics_left_out

_EPOCH = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


_read = msgspec.json.Decoder(Read)
# Records are summarised together once this many wait, or once their samples reach
# SAMPLES (a few MB, however many steps a record has).
BATCH, SAMPLES = 4096, 2**18


def _lean_pairing(pair: Pairing | None) -> Pairing | None:
    """What the speedup of a paired record needs: its rounds' ratios, measured and on an idle
    machine (no windows)."""
    if pair is None:
        return None
    return Pairing(
        group=pair.group, arms=pair.arms, ratios=pair.ratios, clean=pair.clean,
        idle_ratios=pair.idle_ratios,
    )  # fmt: skip


def _nested(run: dict[str, Any]) -> bool:
    """Whether the free-form ``run`` part nests deeper than a record may (most are flat:
    measured only when a value is a dict or a list)."""
    for v in run.values():
        if type(v) in (dict, list):
            return codec.too_deep(run)
    return False


_objects = msgspec.json.Decoder()
_TAKEN = ("~process", "~loss")  # (what no line may set: the reader's summaries)
_CURRENT = results.SCHEMA.encode()


def _older(data: bytes) -> list[Read] | None:
    """Every line of a file of an older version, as :func:`mxbench.records.codec.decode` reads each
    (JSON, upgraded, converted) and the reader then decoded its encoding again: the lines
    read as JSON at once, upgraded one by one, converted together (reading the published
    tables, schema /1, was three quarters decoding). None when any line is not a JSON object
    of a version :func:`mxbench.records.codec.upgrade` upgrades, or does not convert (the lines are
    then read one by one, and say why). The nulls the upgrade drops are dropped only when
    the lines do not convert with them (:func:`mxbench.records.codec.nulls_refused`)."""
    try:
        if codec.nulls_refused():
            straight = _straight(data)
            if straight is not None:
                return straight
            try:
                return msgspec.convert(_upgraded(data, nulls=False), list[Read])
            except msgspec.ValidationError:
                pass  # a null where the type holds a default: read again, nulls dropped
        return msgspec.convert(_upgraded(data, nulls=True), list[Read])
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
        return None


def _straight(data: bytes) -> list[Read] | None:
    """The lines of a /1 file decoded straight into the record type, where each reads as
    its upgrade would (:func:`mxbench.records.codec.same_as_upgraded_1`; its nulls kept,
    see :func:`_older`): the published tables read in 0.9 s instead of 1.3 s (100,000
    records). None where any line needs the upgrade, or sets what only the reader may."""
    if codec.renames_in_1(data):
        return None
    try:
        recs = _read.decode_lines(data)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    if not codec.same_as_upgraded_1(recs) or any(r.process or r.loss for r in recs):
        return None  # (a line that set the reader's summaries: read through the upgrade)
    for rec in recs:
        rec.schema = SCHEMA
    return recs


def _upgraded(data: bytes, nulls: bool) -> list[Any]:
    """The lines of ``data`` as JSON objects of the current version (ValueError: a line
    that is not an object of a version :func:`mxbench.records.codec.upgrade` upgrades)."""
    objs = _objects.decode_lines(data)
    for obj in objs:
        schema = obj.get("schema") if type(obj) is dict else None
        if not isinstance(schema, str) or schema not in codec.UPGRADES:
            raise ValueError
        codec.upgraded(obj, nulls)
        for name in _TAKEN:
            obj.pop(name, None)
    return objs


class Reader:
    """Lines -> :class:`Read` records, summarised a batch at a time (:data:`BATCH`,
    :data:`SAMPLES`)."""

    def __init__(self, lean: bool = False) -> None:
        self.lean = lean
        self._rows: list[list[float]] = []
        self._waiting: list[Read] = []
        self._shared: dict[Any, Any] = {}
        self._held = 0  # samples waiting
        self._before: Read | None = None  # the record taken last (:meth:`_share`)

    def decode(self, line: bytes) -> Read:
        """One line as a :class:`Read` record, or :class:`BadRecord` (the reason
        :func:`mxbench.records.codec.decode` gives)."""
        try:
            rec = _read.decode(line)
            if rec.schema != SCHEMA or (rec.run and _nested(rec.run)):
                raise ValueError
        except (msgspec.MsgspecError, ValueError, RecursionError):
            full = codec.decode(line)  # an older version upgraded, or BadRecord saying why not
            try:
                rec = _read.decode(msgspec.json.encode(full))
            except msgspec.MsgspecError as exc:  # not expected: the record type took it
                raise BadRecord(str(exc)) from None
        return self._take(rec)

    def decode_all(self, data: bytes) -> list[Read] | None:
        """Every line of a file's bytes as :meth:`decode` makes it, decoded at once (the
        per-line work was a third of reading 100,000 small records); None, with nothing
        taken, when any line needs more than that (not a record of this version, a record
        that cannot stand for a cell): :meth:`decode`, line by line, then says which."""
        # a file of an older version (its first line names none other): upgraded at once
        recs = _older(data) if _CURRENT not in data[:512] else None
        if recs is None:
            try:
                recs = _read.decode_lines(data)
            except (msgspec.MsgspecError, ValueError, RecursionError):  # (not UTF-8)
                return None
        for rec in recs:
            if rec.problem() is not None or (rec.run and _nested(rec.run)):
                return None
        return [self._take(rec) for rec in recs]

    def _take(self, rec: Read) -> Read:
        """A decoded record summarised as the report keeps it."""
        m = rec.metrics
        if metrics_left_out(rec) and not self.lean:
            return rec  # no metrics in its line (the shared default): nothing to summarise
        step_ms = m.step_ms
        samples = step_ms.samples if step_ms is not None else []
        rec.loss = loss_total(m.losses, m)
        if self.lean:
            rec = self._lean(rec)
        else:
            self._share(rec)
        step = rec.step
        if step is not None and step.median is not None:
            if samples:
                self._rows.append(samples)
                self._waiting.append(rec)
                self._held += len(samples)
            else:
                rec.process = (step.median, 0.0)  # as summarise makes one step
        m = rec.metrics  # the lean copy's, when lean
        if m.losses:
            m.losses = []
        if m.step_ms is not None and m.step_ms.samples and rec.params.mode == "train":
            # (a serving cell keeps its calls: report.inference pools them into percentiles)
            m.step_ms.samples = []
        if len(self._waiting) >= BATCH or self._held >= SAMPLES:
            self.flush()
        return rec

    def _share(self, rec: Read) -> None:
        """The parts of ``rec`` equal to those of the record taken before it become that
        record's: a host's records (one file, one after another) mostly share their
        device, CPU, software and image (about 3.6 KB of each full record of
        benchmarks/report_speed.py). A record read is never written to but its metrics."""
        before, self._before = self._before, rec
        if before is None:
            return
        if rec.device == before.device:
            rec.device = before.device
        if rec.cpu == before.cpu:
            rec.cpu = before.cpu
        if rec.software == before.software:
            rec.software = before.software
        if rec.image == before.image:
            rec.image = before.image
        if rec.settings == before.settings:
            rec.settings = before.settings

    def _lean(self, rec: Read) -> Read:
        """Only what a table's numbers and a comparison read (no cpu, software, model, run,
        labels, health), the parts many records share held once: memory per cell, not per
        field of every record."""
        m, d, s, i, step = rec.metrics, rec.device, rec.settings, rec.image, rec.metrics.step_ms
        if step is not None:
            step = StepStats(median=step.median, p25=step.p25, p75=step.p75, n=step.n)
        return Read(
            cell=rec.cell,
            time=self._one(rec.time),
            host=self._one(rec.host),
            engine=self._one(rec.engine),
            params=self._one(rec.params),
            status=rec.status,
            image=self._one((Image, i.name, i.id), lambda: Image(name=i.name, id=i.id)),
            device=self._one(
                (Device, d.kind, d.name, d.compute_capability),
                lambda: Device(kind=d.kind, name=d.name, compute_capability=d.compute_capability),
            ),
            settings=self._one(
                (Settings, s.tf32, s.pure_float16),
                lambda: Settings(tf32=s.tf32, pure_float16=s.pure_float16),
            ),
            metrics=Metrics(step_ms=step, images_per_s=m.images_per_s),
            label=self._one(rec.label),
            error=rec.error,
            source=rec.source,
            search=rec.search,
            loss=rec.loss,
            pairing=_lean_pairing(rec.pairing),
        )

    def _one(self, key: Any, make: Callable[[], Any] | None = None) -> Any:
        """One object for every equal ``key`` (made by ``make``, else the key itself)."""
        found = self._shared.get(key)
        if found is None:
            found = self._shared[key] = key if make is None else make()
        return found

    def flush(self) -> None:
        """Summarise the records waiting (before any of them is used)."""
        if self._waiting:
            med, var = stats.summarise(self._rows)
            for rec, m, v in zip(self._waiting, med.tolist(), var.tolist(), strict=True):
                rec.process = (m, v)
            self._rows, self._waiting, self._held = [], [], 0


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
    return _once(files)


def _once(files: list[Path]) -> list[Path]:
    """Each file once, however often it was named or reached (``--results A --results
    A/sub``, a link named beside its target): read twice, its records would count twice."""
    seen: set[tuple[int, int]] = set()
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            out.append(f)  # reading it will say why
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(f)
    return out


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
            try:  # one look at the name itself: a link is not followed, so it is not stat'ed
                st = os.lstat(f)
            except OSError as exc:
                bad.append(BadLine(f, 0, f"cannot read ({exc.strerror})"))
                continue
            if stat.S_ISLNK(st.st_mode):
                bad.append(BadLine(f, 0, "a symbolic link (not followed; name it to read it)"))
            elif _readable(f, bad, st):
                if len(out) >= room:
                    bad.append(BadLine(top, 0, f"more than {MAX_FILES} result files (stopped)"))
                    return out
                out.append(f)
    return out


def folders(files: Iterable[Path]) -> list[Path]:
    """The folders the files were read in, in reading order."""
    return list(dict.fromkeys(f.parent for f in files))


def _readable(path: Path, bad: list[BadLine], st: os.stat_result | None = None) -> bool:
    """A regular file we may read (never opened here: a FIFO would block); ``st``: its
    status, when taken already."""
    try:
        st = path.stat() if st is None else st
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


def later(rec: Record, best: Record) -> bool:
    """Whether ``rec``, read after ``best``, stands for their cell instead: an ok beats a
    failure; otherwise the later ``time`` wins, and an equal (or missing) one the later
    read."""
    if (rec.status == "ok") != (best.status == "ok"):
        return rec.status == "ok"
    return rec.time == best.time or when(rec) >= when(best)


def latest(records: list[Record]) -> Record:
    """The latest record by ``time``; among equal (or missing) times the last one read."""
    best = records[0]
    if len(records) == 1:
        return best
    best_t = when(best)
    for rec in records[1:]:
        t = when(rec)
        if t >= best_t:
            best, best_t = rec, t
    return best


def pick(attempts: list[Record]) -> Record:
    """The record that stands for one cell: the latest ok, else the latest attempt."""
    best = attempts[0]
    for rec in attempts[1:]:
        if later(rec, best):
            best = rec
    return best


# A file up to this size is decoded at once (its records' step samples held together: a few
# MB at most, as the reader's batches); a larger one line by line.
WHOLE_BYTES = store.READ_CHUNK


def _records(reader: Reader, path: Path, bad: list[BadLine]) -> Iterator[tuple[int, Read]]:
    """(line number, record) of one file: a small file's lines decoded at once when every
    one is a record of this version that can stand for a cell (line numbers then matter to
    nobody: 0), else line by line, lines that are not records said into ``bad``."""
    data = store.read_small(path, bad, WHOLE_BYTES)
    if data is not None:
        fast = reader.decode_all(data)
        if fast is not None:
            for rec in fast:
                yield 0, rec
            return
    for lineno, line in store.read_lines(path, bad):
        try:
            yield lineno, reader.decode(line)
        except BadRecord as exc:
            bad.append(BadLine(path, lineno, str(exc)))


def load(
    sources: Iterable[Path | str],
    label: str | None = None,
    keep_all: bool = False,
    lean: bool = False,
) -> Loaded:
    """Read and merge; ``label``: only the records of ``mxbench run --label LABEL``;
    ``keep_all``: keep every attempt in :attr:`Loaded.everything` too; ``lean``: keep only
    what the tables' numbers and ``compare`` read (:meth:`Reader._lean`)."""
    bad: list[BadLine] = []
    files = source_files(sources, bad)
    out = Loaded(winners=[], attempts={}, files=files, bad=bad)
    reader = Reader(lean)
    best: dict[str, Record] = {}
    tries: dict[str, int] = {}
    for path in files:
        try:
            for lineno, rec in _records(reader, path, out.bad):
                out.read += 1
                why = rec.problem() if lineno else None  # (line 0: checked in decode_all)
                if why:
                    out.bad.append(BadLine(path, lineno, why))
                    continue
                if label is not None and rec.label != label:
                    out.labels.add(rec.label)
                    continue
                cell = str(rec.cell)
                held = best.get(cell)
                if held is None:
                    best[cell] = rec
                else:
                    tries[cell] = tries.get(cell, 1) + 1
                    if later(rec, held):
                        best[cell] = rec
                if keep_all:
                    out.everything.setdefault(cell, []).append(rec)
        except OSError as exc:  # vanished or became unreadable while reading
            out.bad.append(BadLine(path, 0, f"cannot read ({exc.strerror})"))
    reader.flush()
    out.winners = list(best.values())
    out.attempts = {c: tries[c] for c in best if c in tries}  # in the order cells were met
    return out
