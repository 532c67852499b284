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

import collections
import datetime as _dt
import json
import signal
import statistics
import threading
import time
from abc import ABC
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import msgspec

from mxbench.matrix import scale
from mxbench.matrix.schema import HostBase, format_bytes

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell
    from mxbench.matrix.file import Matrix
from mxbench.records.codec import (
    MAX_LINE_BYTES,
    bench_output,
    bench_records,
    new_record,
    now_iso,
    tail,
)
from mxbench.records.record import Convergence, Image, Profile, Record, Status


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
    stdout: str | bytes = ""  # untrusted: bytes as they came (bounded by the engine)
    stderr: str | bytes = ""
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


CANCEL_WAIT_S = 10.0  # how long Engine.cancel() waits for a host to answer


class Engine(ABC):
    name: ClassVar[str]
    host_model: ClassVar[type[HostBase]]  # the `hosts:` entry this engine runs

    def __init__(self, host: Any, matrix: Matrix) -> None:
        self.host = host
        self.matrix = matrix
        # Called by engines with a queue whenever their progress_note() changes.
        self.on_progress: Callable[..., None] | None = None
        self.cancel_wait_s = CANCEL_WAIT_S  # cancel() waits this long at most for the host

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
        """Stop what is running (Ctrl-C). Must be safe to call from a signal handler thread,
        and return within seconds whatever the host does (:func:`bounded`)."""

    def progress_note(self) -> str:
        """A short state shown beside the progress bar (e.g. Slurm's queued / running / done)."""
        return ""


def bounded(what: str, fn: Callable[[], object], seconds: float) -> bool:
    """``fn()`` in a thread of its own, waited for at most ``seconds``: whether it ended.

    For cancelling (Ctrl-C): a daemon that stopped answering or a controller that is down
    must not hold the caller (the orchestrator cancels one host after another, then gives
    them all one grace period); ``fn`` goes on meanwhile while the process lives, and what
    it could not stop is swept by the next run (:mod:`mxbench.engines.stale`)."""
    worker = threading.Thread(target=fn, name=f"mxbench cancel {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


# How much of a bench's output an engine keeps (the end of it: the record is the last line).
STDOUT_LIMIT = MAX_LINE_BYTES + 2**20
STDERR_LIMIT = 2**16


class Tail:
    """The last ``limit`` bytes of a stream (a bench's output is untrusted: its size is
    not), and how many bytes came in all. Memory: ``limit`` plus one chunk."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._kept = 0
        self._chunks: collections.deque[bytes] = collections.deque()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._chunks.append(chunk)
        self._kept += len(chunk)
        while self._kept - len(self._chunks[0]) >= self.limit:
            self._kept -= len(self._chunks.popleft())

    def data(self) -> bytes:
        excess = self._kept - self.limit
        if excess > 0:  # only the first chunk reaches past the limit
            self._chunks[0] = self._chunks[0][excess:]
            self._kept = self.limit
        return b"".join(self._chunks)

    @property
    def dropped(self) -> int:
        return max(0, self.total - self.limit)


def text(data: str | bytes) -> str:
    """Output as text, whatever bytes it holds (invalid UTF-8 is replaced, never raised)."""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


PROBE = ["-m", "mxbench.bench.evidence.probe"]  # what `mxbench doctor` runs where the bench runs


def probe_check(stdout: str, stderr: str, want_gpus: bool) -> Check:
    """The devices line of ``mxbench doctor`` from the probe's JSON (``PROBE``)."""
    lines = stdout.strip().splitlines()
    try:
        facts = json.loads(lines[-1]) if lines else None
    except ValueError:
        facts = None
    if not isinstance(facts, dict):
        why = tail(stderr or stdout) or "no output"
        return Check(
            "devices",
            "fail",
            f"the probe printed no result: {why}",
            "run `python -m mxbench.bench.evidence.probe` there and read its error",
        )
    cpu = facts.get("cpu") or {}
    where = f"{cpu.get('model') or 'unknown CPU'}, {cpu.get('cores')} cores"
    gpus = facts.get("gpus") or []
    if not gpus:
        if want_gpus:
            return Check(
                "devices",
                "fail",
                f"GPUs requested, none visible ({where})",
                "check the driver (nvidia-smi) and the container runtime",
            )
        return Check("devices", "ok", f"CPU only: {where}")
    shown = "; ".join(
        f"{g.get('name')} ({int(g.get('memory_bytes') or 0) / 2**30:.0f} GiB, "
        f"CC {g.get('compute_capability')})"
        for g in gpus
    )
    return Check("devices", "ok", f"{len(gpus)} GPU(s): {shown}; driver {facts.get('driver')}")


def to_records(cell: Cell, outcome: Outcome) -> list[tuple[Cell, Record]]:
    """The result record of each cell ``cell``'s process measured (itself, then its
    partners: :attr:`~mxbench.cells.cell.Cell.arms`), whatever happened. A paired process prints
    one record per arm, in the arms' order: per batch size (a process of several measures
    them pass by pass), the last records of that batch size, by position (each must carry
    its arm's policy); a missing one is that arm's failure. A pass's records followed by
    another pass's are final, whatever ended the process later."""
    if not cell.partners:
        return [(cell, to_record(cell, outcome))]
    printed = bench_records(outcome.stdout) if outcome.stdout else []
    blocks: dict[int, list[Cell]] = {}
    for arm in cell.arms:
        blocks.setdefault(arm.params.batch_size, []).append(arm)
    out = []
    for size, arms in blocks.items():
        mine = [i for i, r in enumerate(printed) if len(blocks) == 1 or r.params.batch_size == size]
        later = bool(mine) and any(r.params.batch_size != size for r in printed[mine[-1] :])
        out += _block(arms, [printed[i] for i in mine][-len(arms) :], outcome, later)
    return out


def _block(
    arms: list[Cell], printed: list[Record], outcome: Outcome, final: bool
) -> list[tuple[Cell, Record]]:
    """The records of one comparison of a paired process (``final``: the process went on
    to another pass after printing them)."""
    out = []
    for i, arm in enumerate(arms):
        found: tuple[Record | None, str | None] = (None, None)  # none: its exit code says why
        if printed and len(printed) < len(arms):
            found = (None, f"the process printed {len(printed)} record(s) for {len(arms)} policies")
        elif printed:
            rec = printed[i]
            found = (
                (rec, None)
                if rec.params.policy == arm.params.policy
                else (
                    None,
                    f"record {i + 1} of the process is {rec.params.policy}'s, not "
                    f"{arm.params.policy}'s",
                )
            )
        out.append((arm, to_record(arm, outcome, found, final)))
    return out


def to_record(
    cell: Cell,
    outcome: Outcome,
    printed: tuple[Record | None, str | None] | None = None,
    final: bool = False,
) -> Record:
    """The result record for one attempt, whatever happened.

    What the bench printed is untrusted: a record is taken only when it is consistent with
    the process that printed it (:func:`implausible`), and what is the orchestrator's to say
    (cell, host, engine, image, params, label, source, time, exit code) is stamped here
    (the label by the store), whatever the bench wrote there. ``printed``: the record (or
    why none) already picked from the output for this cell (a paired process's arm);
    ``final``: it stands whatever ended the process (a later pass of it began).
    """
    image = Image(name=cell.image)
    if outcome.image:
        image = msgspec.convert({"name": cell.image, **outcome.image}, Image)
    parsed, why = None, None
    if outcome.stdout:
        parsed, why = printed if printed is not None else bench_output(outcome.stdout)
        ended = final or (not outcome.timed_out and outcome.status is None)
        if parsed is not None and not ended and not parsed.pending:
            parsed, why = None, None  # the process's end says what happened
        problem = implausible(cell, outcome, parsed, final) if parsed is not None else None
        if problem is not None:
            parsed, why = None, problem
    if parsed is not None and parsed.pending:  # it died after its timed steps
        parsed = interrupted(cell, outcome, parsed)
    if parsed is not None:
        record = msgspec.structs.replace(
            parsed,
            cell=cell.key,
            host=cell.host,
            engine=cell.engine,
            image=image,
            params=cell.params,
            time=now_iso(),
            label=None,
            source=None,
            run={},
        )
    else:
        status, error = _failure(cell, outcome, why)
        record = new_record(
            params=cell.params,
            status=status,
            error=error,
            cell=cell.key,
            host=cell.host,
            engine=cell.engine,
            image=image,
        )
    record.search = cell.search
    record.cost_per_hour = cell.cost_per_hour
    record.started_at = _iso(outcome.started_at)
    record.finished_at = _iso(outcome.finished_at)
    record.run = {"wall_s": round(outcome.wall_s, 3), "exit_code": outcome.returncode}
    record.run.update(outcome.extra)
    if outcome.memory_limit is not None:
        record.run["memory_limit_bytes"] = outcome.memory_limit
    return record


# Slack when comparing the timed steps a record claims with the life of its process.
_WALL_SLACK = 1.1
_WALL_SLACK_S = 1.0


def implausible(cell: Cell, outcome: Outcome, rec: Record, final: bool = False) -> str | None:
    """Why the record a bench printed cannot be what that process measured, or None.

    An ``ok`` needs exit code 0 (or ``final``: a later pass of the process began), step
    times in order (min <= p25 <= median <= p75 <= max), no more timed steps than the cell
    asked for, a rate that follows from its step time, and timed steps that fit in the time
    the process lived."""
    if rec.status != "ok":
        return None  # the bench's own account of a failure: kept as it said it
    code = outcome.returncode
    if code is not None and code != 0 and not rec.pending and not final:
        return f"the bench printed an ok record but exited with code {code}"
    step = rec.metrics.step_ms
    if step is None or step.median is None:
        return "the bench printed an ok record without step times"
    p = cell.params
    steps = p.epochs if p.epochs and p.training_run else p.steps  # a training run: per epoch
    n = step.n if step.n is not None else len(step.samples)
    if n > steps or len(step.samples) > steps:
        return f"implausible record: {max(n, len(step.samples))} timed steps, the cell ran {steps}"
    order = [step.min, step.p25, step.median, step.p75, step.max]
    known = [v for v in order if v is not None]
    if known != sorted(known):
        return "implausible record: step times out of order (min <= p25 <= median <= p75 <= max)"
    rate = rec.metrics.images_per_s
    # the rate is over the timed window, which the steps add up to: their mean, not their
    # median (one stalled step on a loaded machine moves the mean, rightly)
    mean = statistics.fmean(step.samples) if step.samples else step.median
    batch = scale.global_batch(cell.params)  # every device's examples
    expected = batch * 1000.0 / mean
    if rate is not None and not expected / 2 <= rate <= expected * 2:
        return (
            f"implausible record: {rate:.6g} images/s, but batch {batch} at "
            f"{mean:.6g} ms per step (the timed steps' mean) is {expected:.6g}"
        )
    timed_s = (sum(step.samples) if step.samples else step.median * max(n, 1)) / 1000.0
    if outcome.wall_s > 0 and timed_s > outcome.wall_s * _WALL_SLACK + _WALL_SLACK_S:
        return (
            f"implausible record: its timed steps add up to {timed_s:.6g} s, but the bench "
            f"ran for {outcome.wall_s:.3g} s"
        )
    return None


_PHASES = {"profile": "the profiled window", "check": "the one-step check"}


def interrupted(cell: Cell, outcome: Outcome, rec: Record) -> Record:
    """A record the bench printed after its timed steps, before the phases it names in
    ``pending`` (:func:`mxbench.bench.process.cell.run_cell`'s ``emit``), from a process that never
    printed a later one: the timed figures stand; the first pending phase is where the
    process ended (the reason: how it ended), the others never ran."""
    if outcome.returncode == 0 and not outcome.timed_out and outcome.status is None:
        why = "the bench ended without finishing it"
    else:
        why = _failure(cell, outcome)[1].splitlines()[0]
    first = rec.pending[0]
    notes = {
        name: f"{_PHASES.get(first, first)} did not finish: {why} (the timed steps had)"
        if name == first
        else f"did not run: the process ended in {_PHASES.get(first, first)} ({why})"
        for name in rec.pending
    }
    if "profile" in notes:
        rec.profile = msgspec.structs.replace(rec.profile or Profile(), error=notes["profile"])
    if "check" in notes:
        found = rec.convergence or Convergence()
        rec.convergence = msgspec.structs.replace(found, check="error", note=notes["check"])
    return rec


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _failure(cell: Cell, o: Outcome, why: str | None = None) -> tuple[Status, str]:
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
    if why is not None:
        return "error", f"the bench's record was rejected: {why}" + _tail(o)
    if o.returncode == 0:
        return "error", "the bench printed no result record" + _tail(o)
    return "error", f"the bench failed with exit code {o.returncode}" + _tail(o)


def _tail(o: Outcome) -> str:
    t = tail(text(o.stderr or o.stdout))
    return f"\n{t}" if t else ""


# engine name -> engine class, filled by @register as the engine modules are imported
# (mxbench.engines imports them all). The matrix's host union, its messages and
# `mxbench build`'s question "does this host need images" come from here.
ENGINES: dict[str, type[Engine]] = {}
E = TypeVar("E", bound=type[Engine])


def register(cls: E) -> E:
    """Class decorator: make an engine known by its ``name``; its ``host_model`` is the one
    the matrix validates hosts of that engine against (:data:`mxbench.matrix.hosts.HOSTS`)."""
    from mxbench.matrix.hosts import HOSTS

    if HOSTS.get(cls.name) is not cls.host_model:
        raise TypeError(f"engine {cls.name!r}: its host model is not mxbench.matrix.hosts.HOSTS's")
    ENGINES[cls.name] = cls
    return cls
