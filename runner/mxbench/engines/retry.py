"""Bounded retries of *transient* failures reaching a host (tenacity).

What is retried: connecting to a Docker daemon (socket, tcp or ssh) and the Slurm
controller's commands (``sinfo``, ``sbatch``, ``scontrol``, ``sacct``, ``scancel``) when
they fail in a way that says "not reachable right now" (refused, timed out, controller
down). Bounds: :data:`ATTEMPTS` attempts, waiting 1, 2, 4 s between them (at most
:data:`WAIT_MAX_S`): about 7 s plus the attempts themselves before a host is given up.

What is never retried: a cell. A cell's attempt is one record; running it again is the
user's decision (``mxbench run --resume``), and the earlier attempt stays in the results.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import tenacity

ATTEMPTS = 4
WAIT_FIRST_S = 1.0
WAIT_MAX_S = 8.0
BOUNDS = f"{ATTEMPTS} attempts, {WAIT_FIRST_S:g}-2-4 s apart"

T = TypeVar("T")

# Set while the run stops (Ctrl-C, SIGTERM): a wait between attempts ends at once, with
# :class:`Stopped`, so that no host keeps the run waiting seconds for a retry nobody wants.
STOPPING = threading.Event()


class Stopped(Exception):
    """The run is stopping: the retry's wait was cut short (the host's work is not done)."""


def _sleep(seconds: float) -> None:
    if STOPPING.wait(seconds):
        raise Stopped("the run was interrupted")


def _say(what: str) -> Callable[[tenacity.RetryCallState], None]:
    def before_sleep(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        why = ""
        if outcome is not None and outcome.failed:
            why = " ".join(str(outcome.exception()).split())[:160]
        elif outcome is not None:
            why = _short(outcome.result())
        wait = state.next_action.sleep if state.next_action else 0
        print(
            f"mxbench: {what}: {why}; retrying in {wait:g} s "
            f"(attempt {state.attempt_number + 1}/{ATTEMPTS})",
            file=sys.stderr,
            flush=True,
        )

    return before_sleep


def _short(result: Any) -> str:
    text = getattr(result, "stderr", None) or getattr(result, "stdout", None) or str(result)
    lines = str(text).strip().splitlines()
    return lines[-1][:160] if lines else "failed"


def _policy(what: str, attempts: int, **kw: Any) -> tenacity.Retrying:
    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=WAIT_FIRST_S, max=WAIT_MAX_S),
        before_sleep=_say(what),
        sleep=_sleep,
        reraise=True,
        **kw,
    )


def on_exception(
    what: str, fn: Callable[[], T], transient: type[BaseException], attempts: int = ATTEMPTS
) -> T:
    """``fn()``, again while it raises ``transient`` (the last one is re-raised)."""
    return _policy(what, attempts, retry=tenacity.retry_if_exception_type(transient))(fn)


def on_result(
    what: str, fn: Callable[[], T], transient: Callable[[T], bool], attempts: int = ATTEMPTS
) -> T:
    """``fn()``, again while ``transient(result)``; the last result when attempts run out."""
    return _policy(
        what,
        attempts,
        retry=tenacity.retry_if_result(transient),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )(fn)
