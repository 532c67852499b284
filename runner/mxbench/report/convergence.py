"""The convergence check in the report: a column per 16-bit policy, and the diagnosis.

Each record's ``convergence`` (:mod:`mxbench.bench.model.convergence`) says how many steps its
dynamic loss scaler skipped and how its first gradient compares with float32's. A slot shows
the lowest cosine of its records (``cos 0.99995``; ``low`` below the threshold), or why
there is none (``skipped``, ``not finite``), and the skipped steps when there were any.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mxbench.matrix.params import BASELINE
from mxbench.records.record import Convergence
from mxbench.report.tables import Entry, Table

THRESHOLD = 0.99  # mxbench.bench.model.convergence.THRESHOLD (the bench is not imported here)
UNDERFLOW = 0.01  # a gradient with this share of elements zero (float32's not) underflowed
# The control excuses a low cosine only when the policy turns the gradient by at most this
# many times the angle float32 turns it with only its input rounded. Committed records: the
# sensitive models (ResNet-50 and ConvNeXt at small inputs, initialization) turn 1.0-1.4x
# their control; EfficientNet-B0 under mixed_bfloat16 turns 47.7 degrees against its
# control's 12.7 (3.8x): the policy's, not the model's.
GAP_FACTOR = 2.0
UNSCORED = {"skipped": "skipped (overflow)", "not finite": "not finite", "error": "not checked"}


@dataclass(frozen=True)
class Check:
    """What a slot's records say about convergence."""

    cosine: float | None  # the lowest scored cosine
    underflow: float | None  # the largest underflow share
    states: frozenset[str]  # every check state seen
    skipped: int  # steps the dynamic scaler skipped, over the records
    steps: int  # steps run, over the records that had a dynamic scaler
    scale: float | None  # the loss scale of the checked step(s), when one
    control: float | None  # float32's cosine with its input rounded (the lowest cosine's)

    @property
    def low(self) -> bool:
        return self.cosine is not None and self.cosine < THRESHOLD

    @property
    def sensitive(self) -> bool:
        """float32 itself turns nearly as much with only its input rounded (the policy's
        angle at most :data:`GAP_FACTOR` times the control's): not the policy."""
        if not self.low or self.control is None or self.control >= THRESHOLD:
            return False
        assert self.cosine is not None
        return angle(self.cosine) <= GAP_FACTOR * angle(self.control)


def angle(cosine: float) -> float:
    """The angle (degrees) between two gradients of this cosine."""
    return math.degrees(math.acos(max(-1.0, min(1.0, cosine))))


def _found(e: Entry) -> list[Convergence]:
    return [r.convergence for r in e.records if r.status == "ok" and r.convergence is not None]


def check(e: Entry | None) -> Check | None:
    found = _found(e) if e is not None else []
    if not found:
        return None
    scored = [c for c in found if c.cosine is not None]
    worst = min(scored, key=lambda c: c.cosine or 0.0) if scored else None
    scaled = [c for c in found if c.skipped_steps is not None]
    scales = {c.loss_scale for c in found if c.loss_scale is not None}
    return Check(
        cosine=worst.cosine if worst else None,
        underflow=max((c.underflow_share or 0.0 for c in scored), default=None),
        states=frozenset(c.check for c in found if c.check is not None),
        skipped=sum(c.skipped_steps or 0 for c in scaled),
        steps=sum(c.steps or 0 for c in scaled),
        scale=scales.pop() if len(scales) == 1 else None,
        control=worst.float32_rounded_input_cosine if worst else None,
    )


def policies(t: Table) -> list[str]:
    """The table's policies whose cells were checked (in the table's order)."""
    if "convergence" not in t.carries:
        return []
    return [
        p
        for p in t.policies
        if p != BASELINE and any(check(e) for (q, _), e in t.entries.items() if q == p)
    ]


def header(policy: str) -> str:
    return f"{policy} 1-step cos"


def cell(e: Entry | None) -> str:
    c = check(e)
    if c is None:
        return ""
    if c.cosine is not None:
        text = f"cos {c.cosine:.4f}" + (" low" if c.low else "")
        if c.control is not None:
            text += f" (float32, input rounded: {c.control:.4f})"
        if c.underflow is not None and c.underflow >= UNDERFLOW:
            text += f", {c.underflow:.0%} zero"
    else:
        text = next((UNSCORED[s] for s in UNSCORED if s in c.states), "no gradient")
    if c.skipped:
        text += f", {c.skipped}/{c.steps} steps skipped"
    return text


def _beyond(c: Check) -> str:
    """Where the control is low too but the policy turns much more: say by how much."""
    if c.control is None or c.control >= THRESHOLD or c.cosine is None:
        return ""
    turn, own = angle(c.cosine), angle(c.control)
    return (
        f" (a turn of {turn:.0f} degrees; float32 with only its input rounded turns "
        f"{own:.0f}: more than {GAP_FACTOR:g}x, so not the model's sensitivity alone)"
    )


def _scale(c: Check) -> str:
    return f" at loss scale {c.scale:g}" if c.scale is not None and c.scale != 1 else ""


def one_step_check(t: Table) -> str | None:
    """Low cosines, unscored first steps and skipped steps, with what each means."""
    if "convergence" not in t.carries:
        return None
    low, unscored, skipping, sensitive, lost = [], [], [], [], []
    underflow = False
    for (policy, b), e in t.by_batch:
        c = check(e) if policy != BASELINE else None
        if c is None:
            continue
        where = f"{policy} at batch {b}"
        if c.sensitive:
            sensitive.append(f"{where} {c.cosine:.3f} against float32's own {c.control:.3f}")
        elif c.low:
            zeros = c.underflow is not None and c.underflow >= UNDERFLOW
            underflow |= zeros
            under = f", {c.underflow:.0%} of its elements zero" if zeros else ""
            low.append(f"{where} {c.cosine:.3f}{_scale(c)}{under}{_beyond(c)}")
        elif c.underflow is not None and c.underflow >= UNDERFLOW:
            lost.append(f"{where} {c.underflow:.0%}{_scale(c)}")
        if c.cosine is None and c.states & {"skipped", "not finite"}:
            unscored.append(f"{where}{_scale(c)}")
        if c.skipped:
            skipping.append(f"{where} {c.skipped} of {c.steps}")
    parts = []
    if low:
        why = (
            "Zeros where float32's gradient has none are float16 underflow: no loss scale, or "
            "one too small (loss_scale dynamic scales as far as float16 allows)"
            if underflow
            else "Nothing underflowed: the 16-bit rounding of the forward and backward passes "
            "turned the gradient (deep networks at initialization amplify it in their first "
            "layers)"
        )
        parts.append(
            f"One-step check: the first gradient is off float32's (cosine below {THRESHOLD:g}: "
            f"{'; '.join(low)}): the policy does not compute float32's update. {why}. "
            "A speedup counts only if the policy still trains to float32's accuracy."
        )
    if sensitive:
        parts.append(
            f"One-step check not conclusive ({'; '.join(sensitive)}): float32's gradient "
            "turns nearly as much when only its input is rounded to 16 bits, so at these "
            "initial weights the model's gradient is that sensitive by itself (deep networks "
            "with batch normalization at initialization, small inputs); judge this policy by "
            "a training run to float32's accuracy, not by one step."
        )
    if lost:
        parts.append(
            f"Gradient underflow ({'; '.join(lost)} of the elements zero where float32's are "
            "not): the cosine is high because the large elements agree, but those weights get "
            "no update; float16 underflow that loss scaling (mixed_float16's dynamic scale, "
            "loss_scale dynamic) prevents."
        )
    if unscored:
        parts.append(
            f"Gradients not finite on the first step ({'; '.join(unscored)}): the scaled loss "
            "overflowed float16 (largest value 65504). A dynamic scaler skips such steps and "
            "halves its scale; a fixed factor this large writes NaN / Inf into the weights."
        )
    if skipping:
        parts.append(
            f"The dynamic loss scaler skipped steps ({'; '.join(skipping)}): those steps "
            "trained nothing, yet their time is in the step times. A few at the start are the "
            "scale settling from 32768; more mean the gradients keep overflowing."
        )
    return " ".join(parts) or None
