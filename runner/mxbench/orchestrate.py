"""Run planned cells through their hosts' engines, appending one record per attempt.

Hosts run one after another, cells in plan order; every record is appended to the store the
moment it exists, so a crash or Ctrl-C loses nothing already measured. On Ctrl-C (or
SIGTERM) the running engine is cancelled, the interrupted cell is *not* recorded (it was not
measured), and :class:`Interrupted` tells the caller how many cells were saved.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mxbench.cells import Cell, Search
from mxbench.engines import Engine, EngineUnavailable, Outcome, engine_class, to_record
from mxbench.matrix import Matrix
from mxbench.progress import CellProgress
from mxbench.results import FINAL_STATUSES, Record, ResultStore
from mxbench.search import Found, walk

FAILED_STATUSES = frozenset({"error", "timeout"})


@dataclass
class RunSummary:
    counts: Counter[str] = field(default_factory=Counter)
    paths: set[str] = field(default_factory=set)
    interrupted: bool = False
    searches: list[tuple[Search, Found]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.counts.items() if s in FAILED_STATUSES)

    @property
    def done(self) -> int:
        return sum(self.counts.values())


def group_by_host(cells: Sequence[Cell]) -> dict[str, list[Cell]]:
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.host, []).append(cell)
    return groups


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_cells(
    matrix: Matrix,
    cells: Sequence[Cell],
    store: ResultStore,
    progress: CellProgress,
    searches: Sequence[Search] = (),
    known: dict[str, Record] | None = None,
) -> RunSummary:
    """Every cell, then every search of each host (``known``: the records a search may reuse,
    the store's latest per cell under ``--resume``)."""
    summary = RunSummary()

    def save(record: Record) -> None:
        summary.paths.add(str(store.append(record)))
        summary.counts[record.status] += 1

    by_host = group_by_host([*cells, *(s.template for s in searches)])
    engines: dict[str, Engine] = {}
    for host_name, host_cells in by_host.items():  # every host's usage, before any cell runs
        host = matrix.host(host_name)
        engines[host_name] = engine_class(host.engine_name)(host, matrix)
        engines[host_name].check(host_cells)
    with _sigterm_as_interrupt():
        for host_name, planned in by_host.items():
            engine = engines[host_name]
            host_cells = [c for c in planned if c.search is None]
            host_searches = [s for s in searches if s.template.host == host_name]
            engine.on_progress = lambda *_, e=engine: progress.set_note(e.progress_note())
            try:
                progress.start(host_name, "(preparing)")
                engine.prepare(planned)
            except EngineUnavailable as exc:
                progress.message(f"{host_name}: {exc.status}: {exc.reason}")
                for cell in planned:  # the same record-making function as any outcome
                    record = to_record(cell, Outcome(None, status=exc.status, reason=exc.reason))
                    save(record)
                    progress.finish(cell.label(), record)
                continue
            except KeyboardInterrupt:
                summary.interrupted = True
                return summary

            try:
                if host_cells:
                    progress.start(host_cells[0].label())
                for i, (cell, outcome) in enumerate(engine.run(host_cells)):
                    record = to_record(cell, outcome)
                    save(record)
                    progress.finish(cell.label(), record)
                    if i + 1 < len(host_cells):
                        progress.start(host_cells[i + 1].label(), engine.progress_note())
                for search in host_searches:
                    found = _search(engine, search, known or {}, save, progress)
                    summary.searches.append((search, found))
                    progress.message(f"{search.label()}: {found.sentence()}")
            except KeyboardInterrupt:
                summary.interrupted = True
                _cancel_quietly(engine)
                return summary
    return summary


def _search(
    engine: Engine,
    search: Search,
    known: dict[str, Record],
    save: Callable[[Record], None],
    progress: CellProgress,
) -> Found:
    """Walk one batch-size search: each trial a cell of its own, run when its outcome is not
    known yet (a finished trial in ``known`` is reused, never repeated)."""
    seen: dict[int, tuple[str, str | None]] = {}

    def outcome(batch: int) -> tuple[str, str | None] | None:
        if batch in seen:
            return seen[batch]
        rec = known.get(search.trial(batch).key)
        return (rec.status, rec.error) if rec is not None and rec.status in FINAL_STATUSES else None

    while not isinstance(step := walk(search.config, outcome), Found):
        cell = search.trial(step)
        progress.add(1)
        progress.start(cell.label(), f"({search.label()})")
        for trial, result in engine.run([cell]):
            record = to_record(trial, result)
            save(record)
            progress.finish(trial.label(), record)
            seen[step] = (record.status, record.error)
        if step not in seen:  # the engine gave no outcome: stop rather than loop
            return Found("failed", None, None, len(seen), f"batch {step}: no outcome")
    return step


def _cancel_quietly(engine: Engine) -> None:
    # A second Ctrl-C while cleaning up must not leave jobs or containers behind.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        engine.cancel()
    finally:
        signal.signal(signal.SIGINT, previous)
