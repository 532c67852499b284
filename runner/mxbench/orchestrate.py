"""Run planned cells through their hosts' engines, appending one record per attempt.

Each host runs in its own worker thread, so a fleet takes about as long as its slowest
host. Hosts that share hardware never overlap (their timings would mix): hosts are grouped
by *machine* (the host's ``machine:``, else the engine's answer: ``local``, the Docker
daemon's ID, the Slurm cluster) and the hosts of one machine run one after another;
``max_parallel`` bounds how many hosts run at once. Within a host, cells run in plan order.

Every record is appended to the store the moment it exists, so a crash or Ctrl-C loses
nothing already measured. On Ctrl-C (or SIGTERM) every host's engine is cancelled
(processes killed, containers removed, Slurm jobs cancelled), an interrupted cell is *not*
recorded (it was not measured), and ``RunSummary.interrupted`` tells the caller.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from mxbench.cells import repeats, rounds
from mxbench.cells.cell import Cell, Search, family, pair_up, to_run
from mxbench.engines import (
    Engine,
    EngineUnavailable,
    Outcome,
    bounded,
    engine_class,
    retry,
    to_record,
    to_records,
)
from mxbench.matrix.file import Matrix
from mxbench.matrix.search import Found, walk
from mxbench.progress import CellProgress
from mxbench.records.record import FINAL_STATUSES, Record, Status
from mxbench.records.store import ResultStore, StoreError

FAILED_STATUSES = frozenset({"error", "timeout"})
CANCEL_GRACE_S = 60.0  # after Ctrl-C, how long hosts get to stop their cells
CANCEL_ONE_S = 5.0  # how long one host's cancel() may hold the others' (it goes on meanwhile)


@dataclass
class RunSummary:
    counts: Counter[str] = field(default_factory=Counter)
    paths: set[str] = field(default_factory=set)
    interrupted: bool = False
    searches: list[tuple[Search, Found]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # closing lines (repeats: auto, timing)
    added: set[str] = field(default_factory=set)  # keys of the cells repeats: auto added
    measured: list[Record] = field(default_factory=list)  # every record this run saved
    wall_s: float = 0.0  # how long the run took

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.counts.items() if s in FAILED_STATUSES)

    @property
    def done(self) -> int:
        return sum(self.counts.values())


@dataclass
class HostWork:
    """One host's share of a run: its engine, cells and searches."""

    name: str
    engine: Engine
    cells: list[Cell]
    searches: list[Search]
    machine: str = ""
    auto: list[Cell] = field(default_factory=list)  # a cell of each open repeats: auto group

    @property
    def planned(self) -> list[Cell]:
        return [*self.cells, *(s.template for s in self.searches)]


def group_by_host(cells: Sequence[Cell]) -> dict[str, list[Cell]]:
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.host, []).append(cell)
    return groups


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT (Ctrl-C) and SIGTERM raise :class:`KeyboardInterrupt` in the main thread while
    the block runs, whatever this process inherited: a run started from a script in the
    background, by ``nohup`` or by a CI runner begins with SIGINT *ignored* (POSIX shells do
    that to background jobs, and exec keeps it), and Python then leaves Ctrl-C ignored too;
    a ``kill -INT`` of such a run used to change nothing while its cells ran on (the cause of
    the Ctrl-C cases that hung for 90 s in CI). Only the main thread can install handlers:
    elsewhere the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, was in previous.items():
            signal.signal(sig, was)


def plan_hosts(
    matrix: Matrix,
    cells: Sequence[Cell],
    searches: Sequence[Search] = (),
    auto: rounds.Plan | None = None,
) -> list[HostWork]:
    """Each host's engine and work, checked (exit 2 for what only the user can fix) before
    any cell of any host runs (a host whose cells are done may still have ``repeats: auto``
    groups to grow)."""
    groups = [g.template for g in auto.groups if g.decision is None] if auto else []
    by_host = group_by_host([*cells, *(s.template for s in searches), *groups])
    works = []
    for host_name, planned in by_host.items():
        host = matrix.host(host_name)
        engine = engine_class(host.engine_name)(host, matrix)
        engine.check(planned)
        works.append(
            HostWork(
                host_name,
                engine,
                [c for c in cells if c.host == host_name],
                [s for s in searches if s.template.host == host_name],
                auto=[c for c in groups if c.host == host_name],
            )
        )
    return works


def machines(works: Sequence[HostWork]) -> dict[str, list[HostWork]]:
    """Hosts grouped by the hardware they run on (asked of every engine at once: reaching a
    daemon or a controller takes a moment)."""

    def machine(work: HostWork) -> str:
        given = work.engine.host.machine
        if given:
            return f"machine:{given}"
        try:
            return work.engine.machine()
        except Exception:  # unreachable or broken: prepare() says why, for this host only
            return f"{work.engine.name}:{work.name}"

    pool = ThreadPoolExecutor(max_workers=max(1, len(works)))
    try:
        for work, name in zip(works, pool.map(machine, works), strict=True):
            work.machine = name
    except KeyboardInterrupt:  # no waiting for a daemon that does not answer: retries end
        retry.STOPPING.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    groups: dict[str, list[HostWork]] = {}
    for work in works:
        groups.setdefault(work.machine, []).append(work)
    return groups


def describe_machines(groups: dict[str, list[HostWork]], max_parallel: int) -> str:
    """``"3 hosts on 2 machines, at most 3 at once: local: a; docker:4F2C…: b, c (one at a
    time)"``: what will overlap and what will not, and why."""
    hosts = sum(len(ws) for ws in groups.values())
    parts = []
    for machine, ws in groups.items():
        shown = machine if len(machine) <= 40 else machine[:39] + "…"
        names = ", ".join(w.name for w in ws)
        parts.append(f"{shown}: {names}" + (" (one at a time)" if len(ws) > 1 else ""))
    return (
        f"{hosts} hosts on {len(groups)} machine(s), at most {min(max_parallel, len(groups))} "
        f"at once: " + "; ".join(parts)
    )


class _Fleet:
    """The hosts of one run, in worker threads, and what they share (the store, the
    summary, the progress display, the stop signal)."""

    def __init__(
        self,
        store: ResultStore,
        progress: CellProgress,
        known: dict[str, Record],
        max_parallel: int,
        auto: rounds.Plan | None = None,
    ) -> None:
        self.auto = auto  # repeats: auto (None: a fixed number of repeats)
        self.store = store
        self.progress = progress
        self.known = known
        self.summary = RunSummary()
        self.stop = threading.Event()
        self.slots = threading.BoundedSemaphore(max_parallel)
        self.lock = threading.Lock()
        self.failure: BaseException | None = None  # a bug in a worker, re-raised by run()

    def save(self, record: Record) -> bool:
        """Append the record; after Ctrl-C only a finished measurement (ok) is kept: a cell
        killed by the cancellation was not measured."""
        if self.stop.is_set() and record.status != "ok":
            return False
        if self.auto is not None and (record.cell or "") in self.auto.by_key:
            # the settings, so a reader of the records can say where its comparison stopped
            record.run["auto_repeats"] = msgspec.to_builtins(self.auto.cfg)
        path = str(self.store.append(record))
        if self.auto is not None:
            self.auto.note(record)
        with self.lock:
            self.summary.paths.add(path)
            self.summary.counts[record.status] += 1
            self.summary.measured.append(record)
        return True

    def run_machine(self, works: Sequence[HostWork]) -> None:
        """The hosts of one machine, one after another."""
        try:
            for work in works:
                if self.stop.is_set():
                    return
                with self.slots:
                    if not self.stop.is_set():
                        self.run_host(work)
        except BaseException as exc:  # a bug: stop the fleet, report it from the main thread
            if not (self.stop.is_set() and isinstance(exc, KeyboardInterrupt)):
                self.failure = self.failure or exc
            self.stop.set()

    def run_host(self, work: HostWork) -> None:
        engine, progress, name = work.engine, self.progress, work.name
        engine.on_progress = lambda *_: progress.set_note(name, engine.progress_note())
        began = time.monotonic()
        progress.start(name, "(preparing)")
        try:
            engine.prepare([*work.planned, *work.auto])
        except EngineUnavailable as exc:
            self.give_up(work, work.planned, exc.status, exc.reason)
            return
        except Exception as exc:  # a daemon answering 500, a cut link, a bug: this host only
            self.give_up(work, work.planned, "error", _unexpected(work, exc))
            return
        if self.stop.is_set() or not self.run_list(work, work.cells):
            return
        if self.auto is not None and not self.run_auto(work, self.auto, began):
            return
        for search in work.searches:
            if self.stop.is_set():
                return
            try:
                found = _search(engine, search, self.known, self.save, progress, self.stop)
            except StoreError:
                raise
            except Exception as exc:
                found = Found("failed", None, None, 0, _unexpected(work, exc))
            with self.lock:
                self.summary.searches.append((search, found))
            progress.message(f"{search.label()}: {found.sentence()}")
        progress.host_done(name, "done")

    def run_list(
        self, work: HostWork, cells: Sequence[Cell], why: dict[str, str] | None = None
    ) -> bool:
        """Run cells of one host in order, saving each record; False when the host stops
        (Ctrl-C, or an engine failure: the rest of its cells get a record saying so).
        ``why``: cell key -> why ``repeats: auto`` added it (the record's ``run.repeats``)."""
        engine, progress, name = work.engine, self.progress, work.name
        processes = pair_up(cells)  # the paired design: a comparison's cells share a process
        if processes:
            progress.start(name, processes[0].label())
        outcomes = engine.run(processes)
        finished: set[str] = set()
        try:
            for i, (lead, outcome) in enumerate(outcomes):
                for cell, record in to_records(lead, outcome):
                    if why and cell.key in why:
                        record.run["repeats"] = why[cell.key]
                    if not self.save(record):
                        return False
                    finished.add(cell.key)
                    progress.finish(name, cell.label(), record)
                if self.stop.is_set():
                    return False
                if i + 1 < len(processes):
                    progress.start(name, processes[i + 1].label(), engine.progress_note())
        except StoreError:
            raise  # the disk, not the host: the whole run stops (run_machine)
        except Exception as exc:
            rest = [c for c in cells if c.key not in finished]
            self.give_up(
                work, rest + [s.template for s in work.searches], "error", _unexpected(work, exc)
            )
            return False
        finally:
            close = getattr(outcomes, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()  # a batch engine's generator cancels what it still has queued
        return True

    def run_auto(self, work: HostWork, plan: rounds.Plan, began: float) -> bool:
        """``repeats: auto``: rounds of one more process per policy for every comparison
        group of the host that needs one, until none does (or the budget is spent). A
        process ``--resume`` kept is reused, not measured again."""
        cfg, progress = plan.cfg, self.progress
        groups = [g for g in plan.host(work.name) if g.decision is None]
        while groups and not self.stop.is_set():
            todo: list[Cell] = []
            reasons: dict[str, str] = {}
            families: set[tuple[object, ...]] = set()  # a process this round: one start each
            for g in list(groups):
                decision = repeats.decide(cfg, g.by_policy(), g.attempts)
                spent = time.monotonic() - began
                shared = family(g.template) in families
                if decision.more and spent + g.round_s(shared) > cfg.budget_s:
                    doing = rounds.noise(g.records.values())
                    detail = f"{spent:.0f} s spent of auto_repeats.budget_s {cfg.budget_s:g}"
                    decision = replace(
                        decision, why="budget", detail=detail + (f"; {doing}" if doing else "")
                    )
                if not decision.more:
                    g.decision = decision
                    groups.remove(g)
                    progress.message(f"{g.label}: stopped after {decision.text()}")
                    continue
                families.add(family(g.template))
                repeat = g.attempts
                why = f"process {repeat + 1}: {decision.text()}"
                progress.message(
                    f"{g.label}: adding process {repeat + 1} per policy ({decision.text()})"
                )
                cells = plan.extend(g, repeat)
                done = {
                    c.key
                    for c in cells
                    if (rec := self.known.get(c.key)) is not None and rec.status in FINAL_STATUSES
                }
                for cell in cells:
                    if cell.key in done:
                        plan.note(self.known[cell.key])  # measured by the run --resume continues
                for cell in to_run(cells, done):
                    todo.append(cell)
                    reasons[cell.key] = why
            if todo:
                progress.add(len(todo), work.name)
                if not self.run_list(work, todo, reasons):
                    return False
        return not self.stop.is_set()

    def give_up(self, work: HostWork, cells: Sequence[Cell], status: Status, reason: str) -> None:
        """The host cannot go on: each of ``cells`` gets a record saying why (made by the
        same function as any outcome's); the other hosts go on."""
        name, progress = work.name, self.progress
        progress.message(f"{name}: {status}: {reason}")
        for cell in cells:
            record = to_record(cell, Outcome(None, status=status, reason=reason))
            if self.save(record):
                progress.finish(name, cell.label(), record)
        progress.host_done(name, f"{status}: host not usable")


def _unexpected(work: HostWork, exc: Exception) -> str:
    """One line for an engine failure nobody planned for (the host's cells get it)."""
    what = " ".join(str(exc).split())[:300] or "no message"
    return f"host {work.name}: the {work.engine.name} engine failed: {type(exc).__name__}: {what}"


def run_cells(
    matrix: Matrix,
    cells: Sequence[Cell],
    store: ResultStore,
    progress: CellProgress,
    searches: Sequence[Search] = (),
    known: dict[str, Record] | None = None,
    max_parallel: int | None = None,
    auto: rounds.Plan | None = None,
) -> RunSummary:
    """Every cell, then every search, of every host; hosts in parallel as their machines
    allow (``known``: the records a search may reuse, the store's latest per cell under
    ``--resume``; ``max_parallel``: at most this many hosts at once, default all; ``auto``:
    the comparison groups of ``repeats: auto``, which get processes added after the cells)."""
    began = time.monotonic()
    retry.STOPPING.clear()
    works = plan_hosts(matrix, cells, searches, auto)
    groups = machines(works)
    limit = max_parallel or max(1, len(works))
    fleet = _Fleet(store, progress, known or {}, limit, auto)
    progress.hosts({w.name: len(w.planned) for w in works})
    if len(works) > 1:
        progress.message(describe_machines(groups, limit))
    threads = [
        threading.Thread(target=fleet.run_machine, args=(ws,), name=f"mxbench {m}", daemon=True)
        for m, ws in groups.items()
    ]
    with stop_signals():
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive() and fleet.failure is None:
                    thread.join(0.2)  # short joins: Ctrl-C reaches this (main) thread
            if fleet.failure is not None:  # e.g. a full disk: stop every host's cells too
                _cancel_all(fleet, [w.engine for w in works], threads)
        except KeyboardInterrupt:
            fleet.summary.interrupted = True
            _cancel_all(fleet, [w.engine for w in works], threads)
    if fleet.failure is not None:
        raise fleet.failure
    fleet.summary.wall_s = time.monotonic() - began
    return fleet.summary


def _cancel_all(
    fleet: _Fleet, engines: Sequence[Engine], threads: Sequence[threading.Thread]
) -> None:
    """Stop every host: no new cell starts, every running one is cancelled, and the workers
    get :data:`CANCEL_GRACE_S` to clean up (a second Ctrl-C meanwhile is ignored, so that
    no job or container is left behind)."""
    fleet.stop.set()
    retry.STOPPING.set()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for engine in engines:
            if not bounded(engine.host.name, _cancel_one(fleet, engine), CANCEL_ONE_S):
                fleet.progress.message(
                    f"{engine.host.name}: still cancelling after {CANCEL_ONE_S:g} s; "
                    "what it leaves is swept by the next run"
                )
        deadline = time.monotonic() + CANCEL_GRACE_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        signal.signal(signal.SIGINT, previous)


def _cancel_one(fleet: _Fleet, engine: Engine) -> Callable[[], None]:
    def cancel() -> None:
        try:
            engine.cancel()
        except Exception as exc:  # one host's failing cleanup must not stop the others'
            fleet.progress.message(f"{engine.host.name}: cancelling failed: {exc}")

    return cancel


def _search(
    engine: Engine,
    search: Search,
    known: dict[str, Record],
    save: Callable[[Record], bool],
    progress: CellProgress,
    stop: threading.Event,
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
        if stop.is_set():
            return Found("failed", None, None, len(seen), "interrupted")
        cell = search.trial(step)
        host = cell.host
        progress.add(1, host)
        progress.start(host, cell.label(), f"({search.label()})")
        for trial, result in engine.run([cell]):
            record = to_record(trial, result)
            if not save(record):
                return Found("failed", None, None, len(seen), "interrupted")
            progress.finish(host, trial.label(), record)
            seen[step] = (record.status, record.error)
        if step not in seen:  # the engine gave no outcome: stop rather than loop
            return Found("failed", None, None, len(seen), f"batch {step}: no outcome")
    return step
