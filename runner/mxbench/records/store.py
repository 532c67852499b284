"""The append-only JSONL store: reading result files (bad lines become warnings, not
errors), atomic writes, the run's lock, and :class:`ResultStore`.

Layout on disk: ``<results>/<host>.jsonl``, one file per host (asv-style), so that
directories from many machines can be merged by copying them side by side.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mxbench.errors import MxbenchError, UsageError
from mxbench.records.codec import MAX_LINE_BYTES, BadRecord, decode, encode, now_iso
from mxbench.records.record import FINAL_STATUSES, Record


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM are held (delivered right after) while the block runs."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _safe_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"


@dataclass(frozen=True)
class BadLine:
    path: Path
    lineno: int
    reason: str


MAX_WARNINGS = 50  # warnings about unreadable lines a command prints, then how many more


def bad_line_warnings(bad: list[BadLine]) -> list[str]:
    """What a command says about the lines and files it could not read: one warning each
    (``file:line: reason``), at most :data:`MAX_WARNINGS`, then how many more."""
    out = []
    for b in bad[:MAX_WARNINGS]:
        where = f"{b.path}:{b.lineno}" if b.lineno else str(b.path)
        out.append(f"mxbench: warning: {where}: {b.reason} (skipped)")
    if len(bad) > MAX_WARNINGS:
        out.append(f"mxbench: warning: {len(bad) - MAX_WARNINGS} more unreadable line(s) skipped")
    return out


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor on ``path`` that is a regular file, never through a symbolic link (a
    results file that is a link would write into, or read from, whatever it points at) and
    never blocking on a FIFO; OSError saying why not."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_regular(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link (not followed)"
    return f"cannot read ({exc.strerror})"


def read_records(path: Path, bad: list[BadLine] | None = None) -> Iterator[tuple[int, Record]]:
    """(line number, record) for each record of one JSONL file, streamed line by line;
    lines that are not records (or longer than :data:`MAX_LINE_BYTES`) and a file that is
    not a regular file (a symbolic link is not followed) are reported into ``bad``."""
    bad = bad if bad is not None else []
    for lineno, line in read_lines(path, bad):
        try:
            rec = decode(line)
        except BadRecord as exc:
            bad.append(BadLine(path, lineno, str(exc)))
            continue
        yield lineno, rec


READ_CHUNK = 2**20  # bytes read at a time (a line may span chunks)


def read_small(path: Path, bad: list[BadLine], limit: int) -> bytes | None:
    """The whole of one JSONL file no larger than ``limit`` (at most
    :data:`MAX_LINE_BYTES`), for a reader that decodes every line at once; None for a
    larger file (:func:`read_lines` streams it); ``b""`` for a file that cannot be read or
    is not a regular file, said into ``bad`` as :func:`read_lines` says it."""
    try:
        fd = open_regular(path)
    except OSError as exc:
        bad.append(BadLine(path, 0, _not_regular(exc)))
        return b""
    limit = min(limit, MAX_LINE_BYTES)
    try:
        data = _read_upto(fd, limit + 1)
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _read_upto(fd: int, most: int) -> bytes:
    """A descriptor's bytes up to its end or ``most`` of them, read in pieces of the
    file's size (plus one, to see its end): one read of ``most`` allocated that much for
    every file, 1 MiB for a file of 4 KB (reading 5,000 small files took 0.17 s, now
    0.05 s)."""
    piece = max(1, min(os.fstat(fd).st_size + 1, most))
    parts: list[bytes] = []
    got = 0
    while got < most:
        part = os.read(fd, min(piece, most - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def read_lines(path: Path, bad: list[BadLine]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for each line of one JSONL file that is not blank, streamed a
    chunk at a time (no line is held longer than :data:`MAX_LINE_BYTES`); lines longer
    than that and a file that is not a regular file (a symbolic link is not followed) are
    reported into ``bad``. A line comes without its newline."""
    try:
        fh = os.fdopen(open_regular(path), "rb")
    except OSError as exc:
        bad.append(BadLine(path, 0, _not_regular(exc)))
        return
    with fh:
        for lineno, line in enumerate(_split(fh), 1):
            if line is None:
                bad.append(BadLine(path, lineno, f"longer than {MAX_LINE_BYTES} bytes"))
                continue
            if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # a byte-order mark (a file saved by a Windows editor)
            if line and not line.isspace():  # not blank (no copy of the line made)
                yield lineno, line


def _split(fh: BinaryIO) -> Iterator[bytes | None]:
    """The lines of a binary file, read :data:`READ_CHUNK` bytes at a time; None for a line
    longer than :data:`MAX_LINE_BYTES` (dropped as it is read, never held whole)."""
    begun: list[bytes] = []  # the start of a line, read in earlier chunks
    size = 0  # its length; -1: longer than MAX_LINE_BYTES
    while chunk := fh.read(READ_CHUNK):
        *ended, rest = chunk.split(b"\n")
        if ended:
            head = ended[0]
            if size < 0 or size + len(head) > MAX_LINE_BYTES:
                yield None
            else:
                yield b"".join([*begun, head]) if begun else head
            for line in ended[1:]:
                yield None if len(line) > MAX_LINE_BYTES else line
            begun, size = [], 0
        if size >= 0:
            size += len(rest)
            begun.append(rest)
            if size > MAX_LINE_BYTES:
                begun, size = [], -1
    if size < 0:
        yield None
    elif size:
        yield b"".join(begun)


LOCK_NAME = ".mxbench-run.lock"


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once (a temporary file beside it, fsync'd, then
    renamed over it): a failure, a full disk included, leaves the old file as it was and no
    fragment; a symbolic link at ``path`` is replaced, not written through. OSError on
    failure. ``durable=False``: no fsync, for what can be made again from the records (a
    report: its fsync was 0.2-0.4 s of a 160 MB one); a reader still sees the old file or
    the new one, never a part, but a power cut soon after may leave neither."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fh.fileno(), 0o666 & ~umask)  # what open() would have made
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class StoreError(MxbenchError):
    """A record could not be written (full disk, a results file that is not a regular
    file): the run stops, saying which record is not saved."""


def _write_all(fd: int, data: bytes, size: int, path: Path, record: Record) -> None:
    """Write and fsync the whole line at the end of a file of ``size`` bytes; when the disk
    is full (or a quota, or the file size limit is reached), cut what was written back to
    ``size`` (no torn line is left) and raise :class:`StoreError`."""
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise StoreError(
            f"cannot write {path}: {exc.strerror}; the {record.status} record of cell "
            f"{record.cell} (host {record.host}) is not saved (the file is as it was); make "
            "room, then run again with --resume"
        ) from None


class ResultStore:
    """Append-only JSONL files under one directory, one file per host.

    Appends take an exclusive ``flock`` and write the whole line with one ``write`` on an
    ``O_APPEND`` descriptor, then fsync: two runs writing at once never interleave, and a
    crash loses at most the record being written.
    """

    def __init__(self, root: Path | str, label: str | None = None) -> None:
        self.root = Path(root)
        self.label = label  # stamped on every record appended (mxbench run --label)

    def path_for(self, host: str) -> Path:
        return self.root / f"{_safe_name(host)}.jsonl"

    def append(self, record: Record) -> Path:
        """Append one line. A torn last line (a crash mid-write) is ended first, so this
        record stays whole (the report still warns about the torn one); SIGINT / SIGTERM
        wait until the line is written, so an interrupt never leaves half a record."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path_for(record.host or "unknown")
        if self.label is not None and record.label is None:
            record.label = self.label
        data = encode(record)
        with _signals_held():
            try:
                fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            except OSError as exc:
                raise StoreError(f"cannot write {path}: {_not_regular(exc)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        data = b"\n" + data
                    _write_all(fd, data, size, path, record)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        return path

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the results directory for one ``mxbench run``: a second run on the same
        directory (which would measure the same cells at the same time) stops with exit 2,
        saying which process holds it. The lock is the kernel's (``flock``): it goes with
        its process, ``kill -9`` included, so it is never stale."""
        path = self.root / LOCK_NAME
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise UsageError(
                f"--results {self.root}: cannot lock {path.name}: {_not_regular(exc)}"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
                raise UsageError(
                    f"--results {self.root} is in use by another mxbench run ({holder}); "
                    "wait for it to end, or give this run another --results"
                ) from None
            me = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": now_iso(),
                "argv": sys.argv[1:],
            }
            with contextlib.suppress(OSError):  # who holds it: a courtesy (a full disk...)
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(me).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def check_writable(self, hosts: Iterable[str]) -> None:
        """Before anything is measured: the directory exists or can be made, is writable,
        and each host's file, where it exists, is a regular file. UsageError says why."""
        where = f"--results {self.root}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise UsageError(f"{where}: exists and is not a directory") from None
        except OSError as exc:
            raise UsageError(f"{where}: cannot create the directory ({exc.strerror})") from None
        if not self.root.is_dir():
            raise UsageError(f"{where}: exists and is not a directory")
        try:
            with tempfile.TemporaryFile(dir=self.root):
                pass
        except OSError as exc:
            raise UsageError(f"{where}: cannot write there ({exc.strerror})") from None
        for host in sorted(set(hosts)):
            path = self.path_for(host)
            if path.is_symlink():
                raise UsageError(f"{where}: {path.name} is a symbolic link (not followed)")
            if os.path.lexists(path) and not path.is_file():
                raise UsageError(f"{where}: {path.name} exists and is not a regular file")
            if path.is_file() and not os.access(path, os.W_OK):
                raise UsageError(f"{where}: {path.name} is not writable")

    def files(self) -> list[Path]:
        return sorted(self.root.glob("*.jsonl")) if self.root.is_dir() else []

    def latest_by_cell(self, bad: list[BadLine] | None = None) -> dict[str, Record]:
        """Latest record per cell key (file order is append order, so last wins); with a
        label, among that label's records only (a new label measures everything again);
        lines that are not records are reported into ``bad``."""
        latest: dict[str, Record] = {}
        for path in self.files():
            for _, rec in read_records(path, bad):
                if rec.cell and (self.label is None or rec.label == self.label):
                    latest[rec.cell] = rec
        return latest

    def done_cells(self) -> set[str]:
        return {k for k, r in self.latest_by_cell().items() if r.status in FINAL_STATUSES}
