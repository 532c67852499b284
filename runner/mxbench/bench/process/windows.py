"""Paired measurement: the arms of one comparison in one process, in short interleaved windows.

On a machine in use the noise moves at the scale of seconds: two processes measured seconds
apart see different machines, and a ratio of their step times carries that drift whole. Here
every arm (float32 and each policy it is compared with) is built once in the same process and
trained in its own ``model.fit`` call on its own thread; a turnstile lets exactly one arm run
at a time, in *windows* of ``k`` steps, in rounds in a randomised balanced order
(:func:`balanced_orders`: blocks of n rounds for n arms, each block the n rotations of a
random permutation in a random order, so that over every block each arm runs in each
position once: A B, B A, B A, A B, ...; independent shuffles per round were not balanced).
The speedup of a round is the base window's time per step over the arm's, from windows
seconds apart at most; what a burst of load does to one window of a round and not to the
other is seen by the interference probe
(:mod:`mxbench.bench.evidence.interference`), which marks the window.

No per-window setup cost: each arm's ``fit`` starts once (its data adapter, callbacks and the
fit-end work are paid once per arm, outside every window); a window begins when its arm gets
the turn and ends at the sync that waits for the last of its ``k`` steps (on JAX and PyTorch
the steps inside a window keep their asynchronous dispatch: batch ends run on worker threads,
and only the window's end waits). ``k`` is chosen after the warm-up so that a window lasts
about :data:`WINDOW_S`. Rounds go on until an arm has ``steps`` timed steps or the windows
have taken ``timed_s`` seconds in all.

Every fit is given one spare step beyond what the windows can use: when the rounds end each
arm is let through its turnstile once more with ``stop_training`` set, so its loop ends after
one untimed step (while no window is being timed). Where more steps follow the windows (the
profiled window: :meth:`Outcome.tail`), they are that spare step and the next ones of the same
fit, one arm after another, and the arm's loop ends after the last of them: no new ``fit``
call, no step run only to end a loop.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from mxbench.bench.evidence import interference
from mxbench.bench.process.timing import callback_base
from mxbench.records.record import Interference

WINDOW_S = 0.25  # a window's target length: short against the seconds the noise moves in
MIN_ROUNDS = 4  # rounds run even past the time budget (an interval needs a few)
LETTERS = "ABCDEFGH"


@dataclass
class WindowMark:
    round: int
    position: int
    steps: int
    start: float  # perf_counter when the arm got the turn (after the previous window's sync)
    end: float  # when the last step of the window had finished (the sync)
    ends: list[float]  # each step's completion, in order
    interference: Interference


@dataclass
class ArmLog:
    """What one arm's fit did: warm-up marks, then its windows."""

    begin: float | None = None
    warm_ends: list[float] = field(default_factory=list)
    windows: list[WindowMark] = field(default_factory=list)
    losses: dict[int, float] = field(default_factory=dict)  # step -> running-mean loss
    tail_end: float | None = None  # when the last step after the windows finished
    error: BaseException | None = None


class Turnstile:
    """One arm at a time: :meth:`grant` gives an arm the turn, the arm runs until it calls
    :meth:`give_back`; :meth:`wait_turn` blocks an arm until its turn (or the end)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._turn: int | None = None
        self._returned = False
        self.ending = False
        self.tail = 0  # steps of the turn granted last, after the windows (0: a window)

    def grant(self, arm: int, tail: int = 0) -> None:
        with self._cond:
            self._turn, self._returned, self.tail = arm, False, tail
            self._cond.notify_all()

    def wait_back(self, alive: Callable[[], bool]) -> bool:
        """Wait until the arm holding the turn gives it back (False: its thread died)."""
        with self._cond:
            while not self._returned:
                if not alive():
                    return False
                self._cond.wait(0.5)
            return True

    def give_back(self) -> None:
        with self._cond:
            self._turn, self._returned = None, True
            self._cond.notify_all()

    def wait_turn(self, arm: int) -> bool:
        """Block until it is ``arm``'s turn; False when the rounds are over (stop)."""
        with self._cond:
            while self._turn != arm and not self.ending:
                self._cond.wait()
            return not self.ending or self._turn == arm

    def end(self) -> None:
        with self._cond:
            self.ending = True
            self._turn = None
            self._cond.notify_all()


@dataclass
class Plan:
    warmup: int
    max_steps: int  # timed steps per arm at most
    timed_s: float  # seconds of windows (all arms) at most
    k: int = 0  # steps per window, set after the warm-up
    tail: int = 0  # steps an arm may run after the windows (Outcome.tail) at most; 0: none

    def fit_steps(self) -> int:
        """Each fit's steps: the warm-up, the windows' most, then the spare step (or the
        tail's steps)."""
        return self.warmup + self.max_steps + max(1, self.tail)


def _synced(done: threading.Condition, finished: list[float], upto: int) -> float:
    """Wait until steps 0..upto-1 have finished (``finished``: their completion times, under
    ``done``); the time the last one did."""
    with done:
        while len(finished) < upto:
            done.wait()
        return finished[upto - 1]


def gate(
    arm: int,
    log: ArmLog,
    turns: Turnstile,
    plan: Plan,
    rounds: list[tuple[int, int]],
    handoff: Callable[[], None] | None = None,
    turn: Callable[[int | None], None] | None = None,
) -> Any:
    """The Keras callback that holds arm ``arm``'s fit at its turnstile. ``rounds``: the
    coordinator's current (round, position) for the arm, read when a window starts;
    ``handoff``: called right after a window's start and end (the energy counter's readings);
    ``turn``: called with ``arm`` where the arm's turn begins (warm-up, window, tail) and with
    None where its steps have finished and it gives the turn back."""
    mark = handoff or (lambda: None)
    own = turn or (lambda _arm: None)
    done = threading.Condition()
    finished: list[float] = []  # completion time of each step, by step index

    state: dict[str, Any] = {"window": None, "snap": None, "tail_end": 0}

    class Gate(callback_base()):  # type: ignore[misc]
        async_safe = True  # batch ends may run on worker threads: no device sync per step

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if batch == 0:
                turns.wait_turn(arm)
                own(arm)
                log.begin = time.perf_counter()
                return
            if state["tail_end"]:  # a tail's step: its last ends the loop
                self.model.stop_training = batch == state["tail_end"] - 1
                return
            at_boundary = batch == plan.warmup or (
                batch > plan.warmup and plan.k and (batch - plan.warmup) % plan.k == 0
            )
            if not at_boundary:
                return
            end = _synced(done, finished, batch)  # the sync: every step so far has finished
            if batch > plan.warmup:
                mark()  # the window's end: its energy is read before the next arm's turn
            snap = interference.snapshot()
            if batch == plan.warmup:
                log.warm_ends = finished[:batch]
            else:
                (rnd, pos), seen = state["where"], state["snap"]
                steps = finished[batch - plan.k : batch]
                log.windows.append(WindowMark(rnd, pos, plan.k, state["window"], end, steps,
                                              interference.between(seen, snap)))  # fmt: skip
            own(None)  # every step of the turn has finished: what follows is not this arm's
            turns.give_back()
            if not turns.wait_turn(arm):
                self.model.stop_training = True  # one spare, untimed step, then the loop ends
                turns.give_back()
                return
            own(arm)
            if turns.tail:  # the steps after the windows, then the loop ends
                state["tail_end"] = batch + turns.tail
                self.model.stop_training = turns.tail == 1
                return
            state["where"] = rounds[arm]
            state["snap"] = interference.snapshot()
            state["window"] = time.perf_counter()
            mark()

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            ready = time.perf_counter()  # the logs are numbers: the step has finished
            loss = float((logs or {}).get("loss", float("nan")))
            with done:
                finished.append(ready)
                log.losses[batch] = loss
                done.notify_all()
            if state["tail_end"] and batch == state["tail_end"] - 1:
                log.tail_end = ready  # the tail's last step has finished
                own(None)
                turns.give_back()

    return Gate()


@dataclass
class Outcome:
    """The arms' logs and the order the windows ran in; where :func:`run` was asked to keep
    the arms' loops (``plan.tail``), :meth:`tail` runs steps after the windows and
    :meth:`finish` ends what is left."""

    logs: list[ArmLog]
    order: str
    k: int
    rounds: int
    turns: Turnstile | None = None
    threads: list[threading.Thread] = field(default_factory=list)

    def tail(self, arm: int, steps: int, start: Callable[[], None],
             stop: Callable[[], None]) -> float:  # fmt: skip
        """``steps`` more steps of ``arm``'s fit (at most ``plan.tail``), in its turn, after
        every window; ``start`` just before the first, ``stop`` once the last has finished;
        the arm's loop ends after them. The seconds from ``start`` to the last's end."""
        assert self.turns is not None and not self.turns.ending
        log, thread = self.logs[arm], self.threads[arm]
        start()
        began = time.perf_counter()
        self.turns.grant(arm, tail=steps)
        try:
            back = self.turns.wait_back(thread.is_alive)
        finally:
            stop()
        thread.join()  # its fit's end, before anything else runs
        if not back or log.tail_end is None:
            raise log.error or RuntimeError(f"arm {arm}'s steps after the windows failed")
        return log.tail_end - began

    def finish(self) -> None:
        """End the loops of the arms that ran no :meth:`tail` (a spare step each)."""
        if self.turns is not None:
            self.turns.end()
        for t in self.threads:
            t.join()


def run(
    fits: Sequence[Callable[[Any, int], None]],
    plan: Plan,
    rng: random.Random,
    handoff: Callable[[], None] | None = None,
    turn: Callable[[int | None], None] | None = None,
) -> Outcome:
    """Run each arm's fit (``fits[i](callback, steps_per_epoch)``) on its own thread under the
    turnstile: warm-ups one after another, then rounds of windows in random orders
    (``handoff``: called at every window's start and end; ``turn``: with the arm's index
    where an arm's turn begins, with None where it ends, as :func:`gate` says)."""
    n = len(fits)
    turns = Turnstile()
    logs = [ArmLog() for _ in range(n)]
    where: list[tuple[int, int]] = [(0, 0)] * n
    threads = []
    for i, fit in enumerate(fits):
        callback = gate(i, logs[i], turns, plan, where, handoff, turn)

        def target(
            fit: Callable[[Any, int], None] = fit, cb: Any = callback, log: ArmLog = logs[i]
        ) -> None:
            try:
                fit(cb, plan.fit_steps())
            except BaseException as exc:  # the coordinator re-raises it
                log.error = exc
                turns.give_back()

        t = threading.Thread(target=target, name=f"mxbench-arm-{i}", daemon=True)
        threads.append(t)
        t.start()

    def step(arm: int) -> None:
        turns.grant(arm)
        if not turns.wait_back(threads[arm].is_alive) or logs[arm].error is not None:
            turns.end()
            for t in threads:
                t.join(timeout=60)
            failed = next((log_.error for log_ in logs if log_.error is not None), None)
            raise failed or RuntimeError(f"arm {arm}'s training loop ended early")

    for arm in range(n):  # warm-ups, one arm at a time
        step(arm)
    plan.k = window_steps(logs, plan)
    order: list[str] = []
    timed = 0.0
    rounds = 0
    orders = balanced_orders(n, rng)
    while (rounds + 1) * plan.k <= plan.max_steps and (rounds < MIN_ROUNDS or timed < plan.timed_s):
        perm = next(orders)
        for pos, arm in enumerate(perm):
            where[arm] = (rounds, pos)
            step(arm)
            w = logs[arm].windows[-1]
            timed += w.end - w.start
            order.append(LETTERS[arm])
        rounds += 1
    out = Outcome(logs, "".join(order), plan.k, rounds, turns, threads)
    if not plan.tail:
        out.finish()
    failed = next((log_.error for log_ in logs if log_.error is not None), None)
    if failed is not None:
        out.finish()
        raise failed
    return out


def balanced_orders(n: int, rng: random.Random) -> Iterator[list[int]]:
    """Round orders of ``n`` arms, endlessly, in blocks of ``n`` rounds: a block is the ``n``
    cyclic rotations of a random permutation, in a random order. Over each block every arm
    holds every position once (a drift across the block falls on every arm alike); the
    first position of a round is still unpredictable to the arms."""
    while True:
        perm = list(range(n))
        rng.shuffle(perm)
        block = [perm[i:] + perm[:i] for i in range(n)]
        rng.shuffle(block)
        yield from block


def window_steps(logs: Sequence[ArmLog], plan: Plan) -> int:
    """Steps per window: about :data:`WINDOW_S` at the arms' warm-up pace (the geometric mean
    of their last warm-up steps; the first is tracing and compilation)."""
    paces = []
    for log_ in logs:
        marks = [log_.begin, *log_.warm_ends] if log_.begin is not None else []
        steps = [b - a for a, b in itertools.pairwise(marks)]
        if steps:
            paces.append(max(min(steps[1:] or steps), 1e-6))
    if not paces:
        return 1
    pace = math.exp(sum(math.log(x) for x in paces) / len(paces))
    return max(1, min(plan.max_steps, round(WINDOW_S / pace)))
