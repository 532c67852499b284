"""Progress display for long work: a rich bar on a terminal, one plain line per event otherwise.

CI logs (not a terminal) get ``[3/12] host policy bs=32: ok 41.2 ms/step (7.1 s)`` lines, so
they stay readable; a terminal gets cells done / total, ETA and the current cell.
"""

from __future__ import annotations

import sys
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

from mxbench.results import Record

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


class CellProgress:
    def __init__(self, total: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.total = total
        self.done = 0
        self.live = self.console.is_terminal
        self._progress: Progress | None = None
        self._task: Any = None
        self._label = ""

    def __enter__(self) -> CellProgress:
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]cells"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self.console,
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("", total=self.total)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)

    def add(self, cells: int) -> None:
        """More cells than planned (a batch-size search's trials are known one at a time)."""
        self.total += cells
        if self._progress is not None:
            self._progress.update(self._task, total=self.total)

    def start(self, label: str, note: str = "") -> None:
        self._label = label
        self.set_note(note)

    def set_note(self, note: str) -> None:
        """Refresh the engine's state beside the current cell (e.g. Slurm queue counts)."""
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._label} {note}".rstrip())

    def finish(self, label: str, record: Record) -> None:
        self.done += 1
        status = record.status
        wall = record.run.get("wall_s")
        secs = f" ({wall:.1f} s)" if isinstance(wall, (int, float)) else ""
        line = f"[{self.done}/{self.total}] {label}: {summarize(record)}{secs}"
        if self._progress is not None:
            style = STATUS_STYLE.get(status, "white")
            self._progress.console.print(Text(line, style=style), highlight=False)
            self._progress.advance(self._task)
        else:
            print(line, file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
        else:
            print(text, file=sys.stderr, flush=True)
