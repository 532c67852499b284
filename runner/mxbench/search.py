"""The largest batch that trains without running out of memory (``axes.batch_size: max``).

One search per (host, image, parameters but the batch size): doubling from ``start`` until a
trial runs out of memory (or reaches ``cap``), then bisection between the largest batch that
trained and the smallest that did not, until they are within ``precision`` of each other or
``max_trials`` trials were made. Each trial is an ordinary cell (a fresh process, container
or job) and an ordinary record, stamped with the search's settings.

The walk is a pure function of the outcomes: :func:`walk` replays it from the start over
whatever outcomes are known and returns the first batch whose outcome is not known yet, or
the answer. So ``--resume`` continues a search without repeating a finished trial, and the
report derives the answer from the records alone, with the very same code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from mxbench.matrix.params import MAX_BATCH_SIZE

SEARCH = "max"  # the batch-size axis value that asks for a search

State = Literal["found", "capped", "none_fit", "exhausted", "failed"]


# Part of the record (``search``): a field a newer mxbench adds is ignored when read, as
# everywhere in the record (no forbid_unknown_fields); the matrix refuses an unknown key
# itself (matrix._settings).
class BatchSearch(msgspec.Struct, frozen=True, kw_only=True):
    """How a search walks (``benchmark.batch_search`` in the matrix; stamped on each trial)."""

    start: int = 8
    cap: int = 4096
    max_trials: int = 16
    precision: float = 0.05

    def describe(self) -> str:
        return (
            f"search from {self.start}, doubling up to {self.cap}, then bisecting to within "
            f"{self.precision:.0%}; at most {self.max_trials} trials"
        )


LIMITS = {"start": (1, MAX_BATCH_SIZE), "cap": (1, MAX_BATCH_SIZE), "max_trials": (1, 64)}


@dataclass(frozen=True)
class Found:
    """Where a search ended."""

    state: State
    batch: int | None  # the largest batch that trained (None: none did)
    oom_at: int | None  # the smallest batch that ran out of memory above it (None: none)
    trials: int
    reason: str | None = None  # why a failed search stopped (the trial's error)

    def sentence(self) -> str:
        if self.state == "failed":
            return f"stopped after {self.trials} trial(s): {self.reason}"
        if self.state == "none_fit":
            return f"not even batch {self.oom_at} fits ({self.trials} trial(s))"
        fits = f"{self.batch} fits"
        if self.state == "capped":
            return f"{fits}: the cap, nothing above it was tried ({self.trials} trial(s))"
        above = f", {self.oom_at} does not" if self.oom_at else ""
        left = " (trials used up before the bisection ended)" if self.state == "exhausted" else ""
        return f"{fits}{above} ({self.trials} trial(s)){left}"


Outcome = Callable[[int], "tuple[str, str | None] | None"]  # batch -> (status, error) or None


def walk(cfg: BatchSearch, outcome: Outcome) -> int | Found:
    """Replay the search over the known outcomes: the next batch to try, or the answer."""
    lo: int | None = None  # largest batch that trained
    hi: int | None = None  # smallest batch that ran out of memory
    batch = min(cfg.start, cfg.cap)
    trials = 0
    while True:
        known = outcome(batch)
        if known is None:
            return batch
        trials += 1
        status, error = known
        if status == "ok":
            lo = batch if lo is None else max(lo, batch)
        elif status == "oom":
            hi = batch if hi is None else min(hi, batch)
        else:
            return Found("failed", lo, hi, trials, f"batch {batch}: {status}: {error or ''}")
        if hi is None:
            if batch >= cfg.cap:
                return Found("capped", lo, None, trials)
            nxt = min(batch * 2, cfg.cap)
        elif lo is None or lo > hi:
            if hi <= 1:
                return Found("none_fit", None, hi, trials)
            lo = None
            nxt = hi // 2
        else:
            # within precision of each other: hi - lo <= floor(lo * precision), said without
            # floor, which raises on the product of a legal precision overflowing to inf
            if hi - lo <= 1 or hi - lo <= lo * cfg.precision:
                return Found("found", lo, hi, trials)
            nxt = (lo + hi) // 2
        if trials >= cfg.max_trials:
            return Found("exhausted", lo, hi, trials)
        batch = nxt
