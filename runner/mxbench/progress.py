"""Progress display for long work: live lines on a terminal, one plain line per event otherwise.

A terminal gets a total bar (cells done / total, ETA) and, for a fleet of several hosts,
one live line per host: its cells done / total, the cell it runs, the engine's state (Slurm
queue counts) and its last result. CI logs (not a terminal) get the same events as plain
lines: ``[3/12] host policy bs=32: ok 41.2 ms/step (7.1 s)``. Hosts run in threads: every
method may be called from any of them.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mxbench.matrix.params import control
from mxbench.records.record import Record

# What a record, a bench or a build could send to the terminal in a name, an error or a log
# line: C0 and C1 control characters (ESC and CSI start colour, cursor and window-title
# sequences). A newline stays.
_CONTROL = control(keep="\n")


def plain(value: str, style: str = "") -> Text:
    """``value`` as it reads: no markup, no control sequence."""
    return Text(_CONTROL.sub(" ", value), style=style)


STATUS_STYLE = {
    "ok": "green",
    "oom": "yellow",
    "unsupported": "cyan",
    "error": "red",
    "timeout": "red",
}


def summarize(record: Record) -> str:
    """One short phrase for a finished cell: the median, or why there is none."""
    if record.status == "ok":
        step = record.step
        return f"ok {step.median:.1f} ms/step" if step and step.median else "ok"
    err = (record.error or "").strip().splitlines()
    return f"{record.status}: {err[0][:100]}" if err else record.status


class _Host:
    """One host's line: what it runs now and how its last cell ended."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.label = ""
        self.note = ""
        self.last = ""

    def description(self) -> str:
        now = " ".join(x for x in (self.label, self.note) if x)
        line = " · ".join(x for x in (now, f"last: {self.last}" if self.last else "") if x)
        return _CONTROL.sub(" ", line)


class CellProgress:
    def __init__(self, total: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.total = total
        self.done = 0
        self.live = self.console.is_terminal
        self._progress: Progress | None = None
        self._task: Any = None
        self._hosts: dict[str, _Host] = {}
        self._single = ""  # the current cell when there is no per-host line
        self._lock = threading.Lock()

    def __enter__(self) -> CellProgress:
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.fields[name]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.description}", markup=False),  # a record's error as it is
                console=self.console,
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("", total=self.total, name="cells")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)

    def hosts(self, planned: dict[str, int]) -> None:
        """One line per host (cells planned on it), shown when there is more than one."""
        if self._progress is None or len(planned) < 2:
            return
        for name, cells in planned.items():
            task = self._progress.add_task("waiting", total=cells, name=f"  {name}")
            self._hosts[name] = _Host(task)

    def add(self, cells: int, host: str | None = None) -> None:
        """More cells than planned (a batch-size search's trials are known one at a time)."""
        with self._lock:
            self.total += cells
        if self._progress is not None:
            self._progress.update(self._task, total=self.total)
            if host in self._hosts:
                line = self._hosts[host]
                total = self._progress.tasks[line.task].total or 0
                self._progress.update(line.task, total=total + cells)

    def start(self, host: str, label: str, note: str = "") -> None:
        """``host`` begins ``label`` (a cell, or "(preparing)")."""
        if host in self._hosts:
            self._hosts[host].label = label
        else:
            self._single = label
        self.set_note(host, note)

    def set_note(self, host: str, note: str) -> None:
        """Refresh the engine's state beside the host's current cell (Slurm queue counts)."""
        if self._progress is None:
            return
        line = self._hosts.get(host)
        if line is not None:
            line.note = note
            self._progress.update(line.task, description=line.description())
        else:
            self._progress.update(self._task, description=f"{self._single} {note}".rstrip())

    def finish(self, host: str, label: str, record: Record) -> None:
        with self._lock:
            self.done += 1
            done = self.done
        wall = record.run.get("wall_s")
        secs = f" ({wall:.1f} s)" if isinstance(wall, (int, float)) else ""
        line = _CONTROL.sub(" ", f"[{done}/{self.total}] {label}: {summarize(record)}{secs}")
        if self._progress is None:
            print(line, file=sys.stderr, flush=True)
            return
        style = STATUS_STYLE.get(record.status, "white")
        self._progress.console.print(plain(line, style=style), highlight=False)
        self._progress.advance(self._task)
        host_line = self._hosts.get(host)
        if host_line is not None:
            host_line.last, host_line.label, host_line.note = summarize(record)[:60], "", ""
            self._progress.advance(host_line.task)
            self._progress.update(host_line.task, description=host_line.description())

    def host_done(self, host: str, text: str) -> None:
        """The host has nothing left to run."""
        line = self._hosts.get(host)
        if self._progress is not None and line is not None:
            line.label, line.note = text, ""
            self._progress.update(line.task, description=line.description())

    def message(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
        else:
            print(text, file=sys.stderr, flush=True)
