"""Speedup intervals and verdicts (mxbench.stats): reproducible, and honest about overlap."""

from __future__ import annotations

import numpy as np
import pytest

from mxbench.stats import noisy, speedup
from mxbench.stats import repeats_disagree as stats_repeats


def _steps(median: float, spread: float, n: int = 50, seed: int = 0) -> list[float]:
    return list(np.random.default_rng(seed).normal(median, spread, n).clip(min=0.1))


def test_a_clear_speedup_is_faster_with_an_interval_around_it() -> None:
    r = speedup([_steps(100, 3)], [_steps(80, 3, seed=1)])
    assert r is not None and r.over == "steps"
    assert 1.2 < r.low < r.value < r.high < 1.3 and r.verdict == "faster"
    assert r.text().startswith("1.2") and "–" in r.text()


def test_overlapping_step_times_are_no_clear_difference() -> None:
    r = speedup([_steps(100, 20)], [_steps(98, 20, seed=1)])
    assert r is not None and r.low < 1.0 < r.high and r.verdict == "no clear difference"


def test_slower_is_said() -> None:
    r = speedup([_steps(50, 2)], [_steps(700, 30, seed=1)])
    assert r is not None and r.high < 1 and r.verdict == "slower"


def test_repeats_are_the_unit_from_three_on() -> None:
    base = [_steps(100, 1, seed=s) for s in range(3)]
    other = [_steps(m, 1, seed=9 + i) for i, m in enumerate((90, 110, 95))]
    r = speedup(base, other)
    assert r is not None and r.over == "repeats" and r.n == 3
    # process-to-process spread (90..110) is wide: per-step resampling would hide it
    assert r.verdict == "no clear difference"
    steps = speedup(base[:2], other[:2])
    assert steps is not None and steps.over == "steps"


def test_reproducible_and_empty_inputs() -> None:
    a, b = [_steps(100, 10)], [_steps(90, 10, seed=3)]
    assert speedup(a, b) == speedup(a, b)
    assert speedup([[]], b) is None and speedup(a, [[0.0, -1.0]]) is None


def test_noisy_flags_a_wide_iqr_only() -> None:
    assert noisy(100.0, 90.0, 130.0) == 0.4
    assert noisy(100.0, 98.0, 103.0) is None and noisy(None, 1.0, 2.0) is None


def test_repeats_that_disagree_are_flagged_with_the_figure() -> None:
    from mxbench.cells import cell_key
    from mxbench.params import Params
    from mxbench.report import text
    from mxbench.report.tables import build
    from report_records import rec, typed_all

    assert stats_repeats([100.0, 101.0, 99.0]) is None
    assert stats_repeats([100.0]) is None
    assert stats_repeats([100.0, 130.0, 99.0]) == pytest.approx(0.31, abs=0.01)
    recs = []
    for i, m in enumerate((100.0, 130.0, 99.0)):  # three fresh processes of one cell
        r = rec("h", "float32", 8, median=m)
        r["params"]["repeat"] = i
        r["cell"] = cell_key("h", None, None, Params(**r["params"]))
        recs.append(r)
    (t,) = build(typed_all(recs))
    assert "noisy (repeats differ by 31%)" in text.cell_text(t.entries["float32", 8])
