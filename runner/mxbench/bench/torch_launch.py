"""PyTorch on several devices of one host: ``devices: N`` (``nodes: 1``) on the torch backend
is N processes, one per device, started by the bench process itself.

Keras 3 has no distribution for its torch backend, and PyTorch drives one device per
process, so a cell of N devices is N processes, as a Slurm cell of N tasks is
(:mod:`mxbench.bench.parallel.torch_workers` joins them, broadcasts rank 0's weights and averages
the gradients). Here the bench process the engine started (local or Docker: the same
``mxbench bench``) is their launcher, torchrun's role, and trains nothing itself:

- **Start**: N fresh interpreters through :mod:`multiprocessing`'s ``spawn`` (never a
  shell, never a fork of a process that imported a framework), each given torchrun's
  variables: ``MASTER_ADDR`` 127.0.0.1 and a free loopback port, ``RANK`` =
  ``LOCAL_RANK``, ``WORLD_SIZE`` N, gloo held to the loopback interface (unless the user
  named one). Each measures the cell (:func:`mxbench.bench.process.cell.run_cell`) as rank k:
  gloo on CPUs (the N processes share the host's cores: ``distribution.shared_cores``),
  NCCL with GPU k on a host with GPUs.
- **One record**: rank 0's (sent back over a pipe, as are its records before the extra
  phases, which the launcher prints as they come); the other ranks' serve to tell a failure.
- **Independent replicas** (``scaling: independent``): the same N processes, each training a
  replica of its own with no process group (:mod:`mxbench.bench.parallel.independent`). Their timed
  windows start together (:func:`meet`: each rank, once warmed up, waits on its pipe until
  the launcher has heard from every one), each sends its step log, and the cell's record is
  rank 0's with the replicas' figures as one (``merge``, passed in, as ``measure`` is).
- **A failure ends the cell, bounded**: a rank that sends an error record, raises, or dies
  (a signal, the kernel's out-of-memory killer) is the cell's failure; the others get
  :data:`GRACE_S` seconds to finish (they are usually stuck in a collective with the rank
  that is gone), then are terminated, then killed. The record is rank 0's (else the first
  that came back) with the first failure as its error, naming the rank. The launcher's
  processes are in the engine's process group (local) or container (Docker): killing the
  cell on its timeout kills them too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from mxbench.matrix import scale
from mxbench.matrix.params import Params
from mxbench.records.codec import decode, encode, new_record, tail
from mxbench.records.record import Record

RANK_VAR = "MXBENCH_TORCH_RANK"  # set in the launched processes: not a launcher
GRACE_S = 20.0  # after a failure: how long the other ranks get to come back
STOP_S = 5.0  # after SIGTERM: how long before SIGKILL

Measure = Callable[..., Record]  # run_cell's shape: (p, started_at=, emit=) -> Record
# independent replicas: (p, records, step logs, started_at) -> the cell's record, in rank order
Merge = Callable[[Params, list[Record], list[Any], float], Record]
MEET_S = 3600.0  # a rank waiting this long for the others' warm-up: they have failed

_link: Connection | None = None  # a launched process's end of its pipe to the launcher


def launches(p: Params, env: Mapping[str, str] = os.environ) -> bool:
    """Whether this bench process starts the cell's processes (torch on N > 1 devices of one
    host, and it is not one of them)."""
    return p.nodes == 1 and scale.processes(p) > 1 and RANK_VAR not in env


def rank(env: Mapping[str, str] = os.environ) -> int:
    """This process's rank among the launched ones (0 where it was not launched)."""
    return int(env.get(RANK_VAR, "0"))


def rendezvous(env: Mapping[str, str]) -> dict[str, str]:
    """torchrun's variables the launcher gave this process. RuntimeError where it was not
    started by the launcher."""
    names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    if RANK_VAR not in env or any(n not in env for n in names):
        raise RuntimeError(
            "several torch devices: this process was not started by mxbench bench's launch "
            f"({RANK_VAR} and torchrun's variables unset)"
        )
    return {n: env[n] for n in names}


def free_port() -> int:
    """A loopback port nobody listens on now (rank 0's store binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def threads(world: int, env: Mapping[str, str] = os.environ) -> str:
    """CPU threads each of ``world`` processes runs (``OMP_NUM_THREADS``): the user's, else
    an equal share of the CPUs this process may use, at least one (torchrun gives each 1).
    Every process at the default, all the CPUs, would oversubscribe them ``world`` times
    over, and gloo's waits spin."""
    if env.get("OMP_NUM_THREADS"):
        return env["OMP_NUM_THREADS"]
    return str(max(1, len(os.sched_getaffinity(0)) // world))


def worker_env(rank_: int, world: int, port: int) -> dict[str, str]:
    """What rank ``rank_`` of ``world`` gets on top of the launcher's environment."""
    return {
        "OMP_NUM_THREADS": threads(world),
        RANK_VAR: str(rank_),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank_),
        "LOCAL_RANK": str(rank_),
        "WORLD_SIZE": str(world),
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
    }


def meet(timeout_s: float = MEET_S) -> None:
    """Wait until every launched process has called this (the launcher answers all of them
    at once). RuntimeError outside a launched process, or after ``timeout_s``."""
    if _link is None:
        raise RuntimeError("not a process of mxbench bench's torch launch: nobody to meet")
    _link.send(("met", None))
    if not _link.poll(timeout_s):
        raise RuntimeError(f"the other ranks did not reach the timed steps in {timeout_s:.0f} s")
    _link.recv()


def share_log(log: Any) -> None:
    """Send this process's step log to the launcher (independent replicas' timings)."""
    if _link is not None:
        _link.send(("log", log))


def _work(measure: Measure, p: Params, started_at: float, env: dict[str, str],
          out: Connection) -> None:  # fmt: skip
    """One launched process: rank ``env[RANK_VAR]`` measures the cell and sends its record
    (rank 0: also those before the extra phases); an exception escaping the measure is sent
    as its text."""
    global _link
    _link = out
    os.environ.update(env)
    speaks = env[RANK_VAR] == "0"

    def emit(rec: Record) -> None:
        if speaks:
            out.send(("partial", encode(rec)))

    try:
        out.send(("record", encode(measure(p, started_at=started_at, emit=emit))))
    except BaseException as exc:  # the launcher tells it as this rank's failure
        out.send(("raised", f"{type(exc).__name__}: {exc}"))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as mxbench bench does: no framework teardown


@dataclass
class Ranks:
    """What the launched processes have come back with."""

    world: int
    records: dict[int, Record] = field(default_factory=dict)
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # rank, status, why
    done: set[int] = field(default_factory=set)
    met: set[int] = field(default_factory=set)  # ranks waiting in :func:`meet`
    logs: dict[int, Any] = field(default_factory=dict)  # independent replicas' step logs

    def take(self, r: int, kind: str, payload: Any, emit: Callable[[Record], None]) -> None:
        if kind == "partial":
            emit(decode(payload))
            return
        if kind == "met":
            self.met.add(r)
            return
        if kind == "log":
            self.logs[r] = payload
            return
        self.done.add(r)
        if kind == "raised":
            self.failures.append((r, "error", str(payload)))
            return
        rec = self.records[r] = decode(payload)
        if rec.status != "ok":
            self.failures.append((r, rec.status, rec.error or rec.status))

    def died(self, r: int, code: int | None) -> None:
        self.done.add(r)
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            why = f"killed by {name} before its record"
            why += " (the kernel's out-of-memory killer sends it)" if name == "SIGKILL" else ""
        else:
            why = f"exited with code {code} before its record"
        self.failures.append((r, "error", why))


def run(p: Params, measure: Measure, started_at: float, emit: Callable[[Record], None],
        merge: Merge | None = None) -> Record:  # fmt: skip
    """Measure the cell in ``devices`` processes, one per device: rank 0's record (``merge``
    of every rank's, where given and every rank sent its step log), or the first failure's
    (see the module's docstring)."""
    ctx = multiprocessing.get_context("spawn")
    port, world = free_port(), scale.processes(p)
    procs, pipes = [], []
    try:
        for r in range(world):
            mine, theirs = ctx.Pipe()  # theirs: records and logs up, the meeting's answer down
            env = worker_env(r, world, port)
            proc = ctx.Process(target=_work, args=(measure, p, started_at, env, theirs),
                               name=f"mxbench-torch-rank{r}")  # fmt: skip
            proc.start()
            theirs.close()
            procs.append(proc)
            pipes.append(mine)
        found = supervise(procs, pipes, emit, GRACE_S)
    finally:
        stop(procs)
    if merge is not None and not found.failures and len(found.logs) == world == len(found.records):
        return merge(p, [found.records[r] for r in range(world)],
                     [found.logs[r] for r in range(world)], started_at)  # fmt: skip
    return outcome(p, found)


def supervise(procs: list[Any], pipes: list[Connection], emit: Callable[[Record], None],
              grace_s: float) -> Ranks:  # fmt: skip
    """Wait for every rank's record, or, once one has failed, ``grace_s`` more seconds."""
    found = Ranks(len(procs))
    failed_at: float | None = None
    while len(found.done) < found.world:
        left = None if failed_at is None else failed_at + grace_s - time.monotonic()
        if left is not None and left <= 0:
            break
        waiting = [r for r in range(found.world) if r not in found.done]
        handles: list[Any] = [pipes[r] for r in waiting] + [procs[r].sentinel for r in waiting]
        for ready in wait(handles, left):
            r = _whose(ready, pipes, procs)
            if r in found.done:
                continue
            while pipes[r].poll():  # a process that exited may have sent first
                try:
                    kind, payload = pipes[r].recv()
                    found.take(r, kind, payload, emit)
                except EOFError:
                    break
            if r not in found.done and not procs[r].is_alive():
                found.died(r, procs[r].exitcode)
            if len(found.met) == found.world:  # every rank at the meeting: all go on at once
                found.met.clear()
                _answer(pipes)
        if found.failures and failed_at is None:
            failed_at = time.monotonic()
    return found


def _answer(pipes: list[Connection]) -> None:
    for pipe in pipes:
        with contextlib.suppress(OSError):  # a rank gone since: the failure is told apart
            pipe.send(("go", None))


def _whose(handle: Any, pipes: list[Connection], procs: list[Any]) -> int:
    for r, (pipe, proc) in enumerate(zip(pipes, procs, strict=True)):
        if handle is pipe or handle == proc.sentinel:
            return r
    raise AssertionError(handle)


def stop(procs: list[Any]) -> None:
    """Every launched process ended: those still running terminated, then killed."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + STOP_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def outcome(p: Params, found: Ranks) -> Record:
    """The cell's record: rank 0's when every rank came back ok; else the first failure's,
    on rank 0's record (or the first that came back)."""
    if not found.failures and 0 in found.records:
        return found.records[0]
    rec = found.records.get(0) or next(iter(found.records.values()), None)
    rec = rec if rec is not None else new_record(params=p, status="error")
    if not found.failures:  # rank 0 came back with nothing (cannot happen: it sends or dies)
        found.failures.append((0, "error", "no record came back"))
    r, status, why = found.failures[0]
    late = sorted(set(range(found.world)) - found.done)
    stopped = f"; rank(s) {', '.join(map(str, late))} stopped after it" if late else ""
    rec.status = "oom" if status == "oom" else "error"
    rec.error = tail(f"rank {r} of {found.world} processes: {why}{stopped}")
    return rec
