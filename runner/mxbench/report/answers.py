"""The answer first: one line per comparison with float32, as hyperfine says it.

``mixed_bfloat16 is 1.48× [1.41–1.55] faster than float32 at batch 32 on local · AMD EPYC``;
"no clear difference" when that is the truth, "too few processes" when one process per
policy cannot say (:mod:`mxbench.stats` has the vocabulary). ``mxbench run`` ends with these.
"""

from __future__ import annotations

from collections.abc import Sequence

from mxbench.params import BASELINE
from mxbench.report.tables import Table


def lines(tables: Sequence[Table]) -> list[str]:
    """Every policy against float32 at every batch size where both have a time, table by
    table (a diverged training loss is said instead of a speedup)."""
    out = []
    for t in tables:
        for b in t.batches:
            for p in t.reduced:
                r = t.ratios.get((p, b))
                if r is None:
                    continue
                where = f"at batch {b} on {t.title}"
                if not t.trusted((p, b)):
                    out.append(f"{p} {where}: loss diverged, not a speedup")
                else:
                    out.append(r.sentence(p, BASELINE, where))
    return out
