"""The committed series judged again, each window given back the CPU other processes took.

For every run of the series named (a folder of runs, each a folder of ``*.jsonl`` from
``benchmarks/paired_vs_process.py --keep``), it judges each batch size's speedup twice from
the same windows: from the rounds' measured ratios, and from their ratios on an idle machine
(:mod:`mxbench.stats.load`, derived here from each window's measured interference, so that
records written before ``pairing.idle_ratios`` existed are judged the same way). Both go
through the report's own path (:func:`mxbench.stats.paired_process`, clean rounds preferred,
then :func:`mxbench.stats.judge_paired`), over the processes the run took. Against a quiet
independent reference (benchmarks/reference_loop.py), it counts the estimates within 20% of
it, as paired_vs_process.py does; for an A/A series (``--reference aa``), the false verdicts.

    python benchmarks/load_adjustment.py DIR=8:0.090,32:0.081 [DIR=aa ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from mxbench import stats
from mxbench.records import codec
from mxbench.records.record import Record
from mxbench.stats import load


def judged(records: list[Record]) -> dict[int, tuple[stats.Ratio | None, stats.Ratio | None]]:
    """Per batch size: (measured, idle) judged over the run's paired processes."""
    groups: dict[tuple[int, str], list[Record]] = defaultdict(list)
    for r in records:
        if r.status == "ok" and r.pairing is not None and r.pairing.windows:
            groups[(r.params.batch_size, r.pairing.group)].append(r)
    procs: dict[int, tuple[list[stats.Process], list[stats.Process]]] = defaultdict(
        lambda: ([], [])
    )
    for (batch, _), arms in groups.items():
        base = next((a for a in arms if not a.pairing or not a.pairing.ratios), None)
        for arm in arms:
            pair = arm.pairing
            if base is None or arm is base or pair is None or base.pairing is None:
                continue
            cores = arm.cpu.logical_cpus or 1
            idle = load.idle_ratios(base.pairing.windows, pair.windows, cores) or pair.ratios
            measured = stats.paired_process(pair.ratios, pair.clean)
            on_idle = stats.paired_process(idle, pair.clean)
            if measured is not None and on_idle is not None:
                procs[batch][0].append(measured)
                procs[batch][1].append(on_idle)
    out = {}
    for batch, (m, i) in procs.items():
        a, b = stats.judge_paired([m, i])
        out[batch] = (a, b)
    return out


def agrees(r: stats.Ratio | None, truth: float) -> bool:
    """paired_vs_process.py's rule: the verdict points the reference's way (it is at least
    1.1x off 1) and the estimate is within 20 % of it."""
    if r is None:
        return False
    want = "faster" if truth >= 1.1 else "slower" if truth <= 1 / 1.1 else None
    return (want is None or r.verdict == want) and abs(r.value / truth - 1) <= 0.2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("series", nargs="+", help="DIR=8:0.090,32:0.081 (a reference) or DIR=aa")
    args = ap.parse_args()
    for spec in args.series:
        where, _, ref_text = spec.partition("=")
        aa = ref_text == "aa"
        pairs = [] if aa else [p.split(":") for p in ref_text.split(",")]
        ref = {int(b): float(x) for b, x in pairs}
        runs = sorted(p for p in Path(where).iterdir() if p.is_dir() and any(p.rglob("*.jsonl")))
        tally = {"measured": [0, 0], "idle": [0, 0]}
        values: dict[str, dict[int, list[float]]] = {k: defaultdict(list) for k in tally}
        print(f"== {where} ({len(runs)} runs; reference {ref_text})")
        for run in runs:
            recs = [
                codec.decode(line)
                for f in sorted(run.rglob("*.jsonl"))
                for line in f.read_bytes().splitlines()
                if line.strip()
            ]
            parts = []
            for batch, pair in sorted(judged(recs).items()):
                for name, r in zip(("measured", "idle"), pair, strict=True):
                    if r is None:
                        continue
                    values[name][batch].append(r.value)
                    ok = (
                        r.verdict == "no clear difference"
                        if aa
                        else (batch in ref and agrees(r, ref[batch]))
                    )
                    if aa or batch in ref:
                        tally[name][0] += ok
                        tally[name][1] += 1
                m, i = pair
                if m is not None and i is not None:
                    parts.append(f"bs {batch}: measured {m.value:.3f} ({m.verdict}), "
                                 f"idle {i.value:.3f} ({i.verdict})")  # fmt: skip
            print(f"  {run.name}: " + "; ".join(parts))
        for name, (ok, n) in tally.items():
            spread = "; ".join(
                f"bs {b}: {statistics.median(v):.3f} [{min(v):.3f}–{max(v):.3f}]"
                for b, v in sorted(values[name].items())
            )
            what = "no false verdict" if aa else "agree with the reference"
            print(f"  {name:8s} {what}: {ok}/{n}; {spread}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
