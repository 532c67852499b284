"""The answer first: one line per comparison with float32, as hyperfine says it.

``mixed_bfloat16 is 1.48× [1.41–1.55] faster than float32 at batch 32 on local · AMD EPYC``;
"no clear difference" when that is the truth, "too few processes" when one process per
policy cannot say (:mod:`mxbench.stats` has the vocabulary). ``mxbench run`` ends with these,
and a line (:func:`judged`) says how many were verdicts and how many false ones their level
expects; ``mxbench report`` says it under its summary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from mxbench import stats
from mxbench.matrix.params import BASELINE, control
from mxbench.records.record import Record
from mxbench.report.sections import roofline
from mxbench.report.tables import Table

# A device name is what a bench printed: no control sequence reaches the user's terminal.
_CONTROL = control()


def lines(tables: Sequence[Table]) -> list[str]:
    """Every policy against float32 at every batch size where both have a time, table by
    table (a diverged training loss is said instead of a speedup), with the speedup's bound
    where the float32 arm was profiled and the two dtypes' ceilings are known
    (:func:`mxbench.report.sections.roofline.bound`: ``1.40x of at most 1.47x here: ...``)."""
    out = []
    for t in tables:
        for b in t.batches:
            for p in t.reduced:
                r = t.ratios.get((p, b))
                if r is None:
                    continue
                where = f"at batch {b} on {_CONTROL.sub(' ', t.title)}"
                if not t.trusted((p, b)):
                    out.append(f"{p} {where}: loss diverged, not a speedup")
                else:
                    said = r.sentence(p, BASELINE, where)
                    most = roofline.bound(t, p, b)
                    out.append(f"{said}; {most}" if most else said)
    return out


def judged_count(tables: Sequence[Table]) -> int:
    """How many of :func:`lines`' answers are verdicts (a 95 % interval over processes)."""
    return sum(
        1
        for t in tables
        for b in t.batches
        for p in t.reduced
        if (r := t.ratios.get((p, b))) is not None and r.judged and t.trusted((p, b))
    )


def judged(tables: Sequence[Table]) -> str | None:
    """``12 comparisons judged at 95%: about 0.6 false verdicts expected if none differed``:
    a verdict holds its level one comparison at a time, so among many, some "faster" or
    "slower" is expected by chance alone. None: no verdict."""
    n = judged_count(tables)
    if not n:
        return None
    level = f"{stats.LEVEL:.0%}"
    expected = f"{n * (1 - stats.LEVEL):.2g}"
    what = "comparison" if n == 1 else "comparisons"
    return (
        f"{n} {what} judged at {level}: about {expected} false verdicts expected if none differed."
    )


def time_to_answer(records: Iterable[Record], label: str | None = None) -> str | None:
    """Where the processes' wall time went: ``time to answer: 24 processes, 410 s; timed
    steps 14.1 s (3.4%); import 38%, first_step 20%, ...`` (phases over 2%, largest first;
    ``teardown``: what the bench could not stamp: the interpreter's exit after the record,
    and the engine starting the process), over the processes whose records stamp their
    phases (records older than the stamps say only how long they ran). None when no record
    says how long its process ran."""
    walls, n = 0.0, 0
    staged, stamped = 0.0, 0  # the wall time and the count of the processes that stamp phases
    phases: dict[str, float] = defaultdict(float)
    seen: set[str] = set()  # a paired process's arms share its wall time: counted once
    for r in records:
        wall = r.run.get("wall_s")
        if not isinstance(wall, int | float) or wall <= 0:
            continue
        if r.pairing is not None and r.pairing.group:
            if r.pairing.group in seen:
                continue
            seen.add(r.pairing.group)
        n += 1
        walls += wall
        if not r.metrics.phases_s:
            continue
        stamped += 1
        staged += wall
        for name, spent in r.metrics.phases_s.items():
            phases[name] += spent
        phases["teardown"] += max(0.0, wall - sum(r.metrics.phases_s.values()))
    if not n:
        return None
    run = f" ({label})" if label else ""
    head = f"time to answer{run}: {n} process(es), {walls:.0f} s"
    if not stamped:
        return head
    timed = phases.pop("timed", 0.0)
    biggest = sorted(phases.items(), key=lambda kv: -kv[1])
    share = ", ".join(f"{k} {v / staged:.0%}" for k, v in biggest if v / staged >= 0.02)
    of = "" if stamped == n else f" of the {stamped} that stamp their phases"
    return f"{head}; timed steps {timed:.1f} s ({timed / staged:.1%}{of})" + (
        f"; {share}" if share else ""
    )


def time_per_run(records: Iterable[Record]) -> list[str]:
    """:func:`time_to_answer` of each run (label) among ``records``."""
    runs: dict[str | None, list[Record]] = {}
    for r in records:
        runs.setdefault(r.label, []).append(r)
    said = [time_to_answer(recs, label) for label, recs in sorted(runs.items(), key=_by_label)]
    return [s + "." for s in said if s]


def _by_label(item: tuple[str | None, list[Record]]) -> str:
    return item[0] or ""
