"""The engine interface: how a bench command reaches a machine.

An engine knows only how to run "these ``mxbench bench`` arguments, on this host, in this
image, with these devices" and hand back what came out (:class:`Outcome`). Turning that
into a result record (parsing the bench's JSON line, mapping a timeout, a kill or garbage
to a status) is shared by every engine: :func:`to_record`.

Engines that run cells one by one implement :meth:`Engine.run_one`; engines that submit
many at once (Slurm job arrays, later Kubernetes) override :meth:`Engine.run` and yield
outcomes as they complete. :meth:`Engine.cancel` is called on Ctrl-C from another thread.
"""

from __future__ import annotations

import datetime as _dt
import json
import signal
import time
from abc import ABC
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import msgspec

from mxbench.schema import HostBase, format_bytes

if TYPE_CHECKING:
    from mxbench.cells import Cell
    from mxbench.matrix import Matrix
from mxbench.results import Image, Record, Status, new_record, parse_bench_output, tail


class EngineUnavailable(Exception):
    """The host cannot run these cells at all (daemon unreachable, no GPU runtime...).

    ``status`` is the record status its cells get: ``unsupported`` for a capability the host
    lacks, ``error`` for a host that should work but does not.
    """

    def __init__(self, reason: str, status: Status = "error") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass
class Outcome:
    """What came back from running one cell's bench command."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False  # killed by the kernel / cgroup / scheduler for memory
    memory_limit: int | None = None  # the host's memory_limit the cell ran under, bytes
    status: Status | None = None  # an engine-decided status (e.g. "unsupported", "timeout")
    reason: str | None = None  # why, when status is set
    image: dict[str, Any] | None = None  # {"name", "id", "labels"} for containerised runs
    extra: dict[str, Any] = field(default_factory=dict)  # engine details (job id, container)
    # When the attempt started and ended on the host (epoch seconds): what overlapped.
    started_at: float | None = None
    finished_at: float | None = None


@dataclass
class Check:
    """One line of ``mxbench doctor``: what was checked on a host, how it went, the fix."""

    name: str
    state: Literal["ok", "fail", "warn", "skip"]
    detail: str
    fix: str = ""


class Engine(ABC):
    name: ClassVar[str]
    host_model: ClassVar[type[HostBase]]  # the `hosts:` entry this engine runs

    def __init__(self, host: Any, matrix: Matrix) -> None:
        self.host = host
        self.matrix = matrix
        # Called by engines with a queue whenever their progress_note() changes.
        self.on_progress: Callable[..., None] | None = None

    def check(self, cells: Sequence[Cell]) -> None:  # noqa: B027 - optional hook
        """Fast checks of the user's setup before any cell of any host runs: raise
        :class:`~mxbench.errors.UsageError` (exit 2) for what only the user can fix."""

    def prepare(self, cells: Sequence[Cell]) -> None:  # noqa: B027 - optional hook
        """Check the host can run ``cells``; raise :class:`EngineUnavailable` if not."""

    def machine(self) -> str:
        """The hardware this host's cells run on, for hosts that did not say (``machine:``):
        hosts of one machine never run at the same time (their timings would mix)."""
        return f"{self.name}:{self.host.name}"

    def doctor(self, cells: Sequence[Cell]) -> Iterator[Check]:
        """``mxbench doctor``: check, in seconds, that the host can run ``cells`` (reachable,
        versions, GPUs seen through what the bench runs in, images), one line per check."""
        return iter(())

    def run(self, cells: Sequence[Cell]) -> Iterator[tuple[Cell, Outcome]]:
        """Run cells, yielding each outcome the moment it is known."""
        for cell in cells:
            started = time.time()
            outcome = self.run_one(cell)
            outcome.started_at = outcome.started_at or started
            outcome.finished_at = outcome.finished_at or time.time()
            yield cell, outcome

    def run_one(self, cell: Cell) -> Outcome:
        """One cell (engines that work cell by cell); batch engines override :meth:`run`."""
        raise NotImplementedError(f"engine {self.name} runs cells in batches: use run()")

    def cancel(self) -> None:  # noqa: B027 - optional hook
        """Stop what is running (Ctrl-C). Must be safe to call from a signal handler thread."""

    def progress_note(self) -> str:
        """A short state shown beside the progress bar (e.g. Slurm's queued / running / done)."""
        return ""


PROBE = ["-m", "mxbench.bench.probe"]  # what `mxbench doctor` runs where the bench runs


def probe_check(stdout: str, stderr: str, want_gpus: bool) -> Check:
    """The devices line of ``mxbench doctor`` from the probe's JSON (``PROBE``)."""
    lines = stdout.strip().splitlines()
    try:
        facts = json.loads(lines[-1]) if lines else None
    except ValueError:
        facts = None
    if not isinstance(facts, dict):
        why = tail(stderr or stdout) or "no output"
        return Check("devices", "fail", f"the probe printed no result: {why}",
                     "run `python -m mxbench.bench.probe` there and read its error")  # fmt: skip
    cpu = facts.get("cpu") or {}
    where = f"{cpu.get('model') or 'unknown CPU'}, {cpu.get('cores')} cores"
    gpus = facts.get("gpus") or []
    if not gpus:
        if want_gpus:
            return Check("devices", "fail", f"GPUs requested, none visible ({where})",
                         "check the driver (nvidia-smi) and the container runtime")  # fmt: skip
        return Check("devices", "ok", f"CPU only: {where}")
    shown = "; ".join(
        f"{g.get('name')} ({int(g.get('memory_bytes') or 0) / 2**30:.0f} GiB, "
        f"CC {g.get('compute_capability')})"
        for g in gpus
    )
    return Check("devices", "ok", f"{len(gpus)} GPU(s): {shown}; driver {facts.get('driver')}")


def to_record(cell: Cell, outcome: Outcome) -> Record:
    """The result record for one attempt, whatever happened."""
    image = Image(name=cell.image)
    if outcome.image:
        image = msgspec.convert({"name": cell.image, **outcome.image}, Image)
    parsed = parse_bench_output(outcome.stdout) if outcome.stdout else None
    if parsed is not None and not outcome.timed_out and outcome.status is None:
        record = msgspec.structs.replace(
            parsed, cell=cell.key, host=cell.host, engine=cell.engine, image=image,
            params=cell.params,
        )  # fmt: skip
    else:
        status, error = _failure(cell, outcome)
        record = new_record(
            params=cell.params, status=status, error=error, cell=cell.key, host=cell.host,
            engine=cell.engine, image=image,
        )  # fmt: skip
    record.search = cell.search
    record.started_at = _iso(outcome.started_at)
    record.finished_at = _iso(outcome.finished_at)
    record.run = {**record.run, "wall_s": round(outcome.wall_s, 3), **outcome.extra}
    if outcome.memory_limit is not None:
        record.run["memory_limit_bytes"] = outcome.memory_limit
    return record


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _failure(cell: Cell, o: Outcome) -> tuple[Status, str]:
    if o.status:
        return o.status, o.reason or o.status
    if o.timed_out:
        return "timeout", f"no result within the cell timeout of {cell.timeout_s:g} s" + _tail(o)
    if o.oom_killed and o.memory_limit is not None:
        return "oom", (
            "the bench was killed for going past the host's memory_limit of "
            f"{format_bytes(o.memory_limit)}" + _tail(o)
        )
    if o.oom_killed or o.returncode == -signal.SIGKILL or o.returncode == 137:
        return "oom", "the bench process was killed (out of memory)" + _tail(o)
    if o.returncode == 0:
        return "error", "the bench printed no result record" + _tail(o)
    return "error", f"the bench failed with exit code {o.returncode}" + _tail(o)


def _tail(o: Outcome) -> str:
    t = tail(o.stderr or o.stdout)
    return f"\n{t}" if t else ""


# engine name -> engine class, filled by @register as the engine modules are imported
# (mxbench.engines imports them all). The matrix's host union, its messages and
# `mxbench build`'s question "does this host need images" come from here.
ENGINES: dict[str, type[Engine]] = {}
E = TypeVar("E", bound=type[Engine])


def register(cls: E) -> E:
    """Class decorator: make an engine (and its ``host_model``) known by its ``name``."""
    ENGINES[cls.name] = cls
    return cls
