"""Speedup intervals and verdicts (mxbench.stats): processes are the unit, autocorrelated
steps are not independent evidence, one process a side is no verdict, A/A holds its level."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from mxbench import stats
from mxbench.stats import noisy, speedup, speedups, summarise
from mxbench.stats import repeats_disagree as stats_repeats


def _steps(median: float, spread: float, n: int = 50, seed: int = 0) -> list[float]:
    return list(np.random.default_rng(seed).normal(median, spread, n).clip(min=0.1))


def _procs(levels: tuple[float, ...], spread: float = 1.0, seed: int = 0) -> list[list[float]]:
    return [_steps(m, spread, seed=seed + i) for i, m in enumerate(levels)]


def _ar1(rng: np.random.Generator, level: float, n: int, phi: float, sd: float) -> list[float]:
    e = np.empty(n)
    e[0] = rng.normal(0, sd)
    for t in range(1, n):
        e[t] = phi * e[t - 1] + rng.normal(0, sd * (1 - phi**2) ** 0.5)
    return list(level * np.exp(e))


def test_a_clear_speedup_over_processes_is_faster_with_an_interval_around_it() -> None:
    r = speedup(_procs((100, 101, 99)), _procs((80, 81, 79), seed=10))
    assert r is not None and r.judged and r.over == "processes" and r.n == 3
    assert 1.2 < r.low < r.value < r.high < 1.3 and r.verdict == stats.FASTER
    assert r.text().startswith("1.2") and "–" in r.text()
    said = r.sentence("mixed_bfloat16", "float32")
    assert said.startswith("mixed_bfloat16 is 1.2") and said.endswith("faster than float32")


def test_slower_is_said_the_way_round_people_read_it() -> None:
    r = speedup(_procs((50, 51, 49)), _procs((100, 102, 98), seed=10))
    assert r is not None and r.high < 1 and r.verdict == stats.SLOWER
    said = r.sentence("float16", "float32")
    assert said.startswith("float16 is 1.99×") and said.endswith("slower than float32")


def test_processes_that_disagree_are_no_clear_difference_whatever_the_steps_say() -> None:
    # each process is tight (sd 1 ms) but they differ 90..110: steps alone would say faster
    r = speedup(_procs((100, 100, 101)), _procs((90, 110, 95), seed=9))
    assert r is not None and r.judged and r.low < 1.0 < r.high
    assert r.verdict == stats.SAME and "no clear difference from float32" in r.sentence(
        "mixed_float16", "float32"
    )


def test_one_process_a_side_is_too_few_for_a_verdict_however_clear_its_steps() -> None:
    r = speedup([_steps(100, 1)], [_steps(50, 1, seed=1)])
    assert r is not None and not r.judged and r.over == "steps" and r.n == 1
    assert r.verdict == stats.TOO_FEW and r.text() == f"{r.value:.2f}"
    assert stats.TOO_FEW in r.sentence("mixed_float16", "float32")
    # one side with one process (a repeat that failed) is still too few
    r = speedup(_procs((100, 101, 99)), [_steps(50, 1, seed=1)])
    assert r is not None and r.verdict == stats.TOO_FEW


def test_two_processes_that_agree_by_chance_keep_the_width_their_steps_give() -> None:
    # identical medians (zero spread between processes) but noisy steps: not a zero interval
    noisy_steps = _steps(100, 20, seed=3)
    r = speedup([noisy_steps, noisy_steps], [[x * 0.98 for x in noisy_steps]] * 2)
    assert r is not None and r.high / r.low > 1.05 and r.verdict == stats.SAME


def test_autocorrelated_steps_count_for_less_than_independent_ones() -> None:
    rng = np.random.default_rng(5)
    ar = np.array(_ar1(rng, 100.0, 400, 0.9, 0.05))
    shuffled = rng.permutation(ar)  # same values, order (and autocorrelation) gone
    _, (v_ar, v_iid) = summarise([ar, shuffled])
    assert v_ar > 5 * v_iid > 0


def test_aa_comparisons_hold_the_level_where_the_step_12_method_did_not() -> None:
    """Identical policies, each process its own level (sd 5%), AR(1) steps: a faster/slower
    verdict in at most ~5% of comparisons (the old method: 61% with 2 processes, 11% with
    3; benchmarks/calibration.py has the full table)."""
    rng = np.random.default_rng(22)
    for k in (2, 3, 5):
        pairs = [
            tuple(
                [_ar1(rng, 100 * float(np.exp(rng.normal(0, 0.05))), 30, 0.5, 0.05)
                 for _ in range(k)]
                for _side in range(2)
            )
            for _ in range(300)
        ]  # fmt: skip
        ratios = speedups(pairs)  # type: ignore[arg-type]
        wrong = sum(r is not None and r.verdict in (stats.FASTER, stats.SLOWER) for r in ratios)
        assert wrong / len(pairs) <= 0.08, (k, wrong)


def test_a_long_run_stays_small_in_memory() -> None:
    rng = np.random.default_rng(1)
    base = [list(rng.uniform(9, 11, 150_000)) for _ in range(3)]
    other = [list(rng.uniform(7, 9, 150_000)) for _ in range(3)]
    tracemalloc.start()
    try:
        r = speedup(base, other)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r is not None and r.verdict == stats.FASTER
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MiB for 900,000 step times"


def test_reproducible_and_empty_inputs() -> None:
    a, b = _procs((100, 101)), _procs((90, 91), seed=3)
    assert speedup(a, b) == speedup(a, b)
    assert speedup([[]], b) is None and speedup(a, [[0.0, -1.0]]) is None
    assert all(r is None or r.verdict in stats.VERDICTS for r in speedups([(a, b), ([[]], b)]))


def test_noisy_flags_a_wide_iqr_only() -> None:
    assert noisy(100.0, 90.0, 130.0) == 0.4
    assert noisy(100.0, 98.0, 103.0) is None and noisy(None, 1.0, 2.0) is None


def _repeated(policy: str, medians: tuple[float, ...]) -> list[dict[str, object]]:
    from mxbench.cells.cell import cell_key
    from mxbench.matrix.params import Params

    from report_records import rec

    out = []
    for i, m in enumerate(medians):  # fresh processes of one cell
        r = rec("h", policy, 8, median=m)
        r["params"]["repeat"] = i
        r["cell"] = cell_key("h", None, None, Params(**r["params"]))
        r["metrics"]["step_ms"]["samples"] = _steps(m, m / 100, n=20, seed=i)
        out.append(r)
    return out


def test_repeats_that_disagree_are_flagged_with_the_figure() -> None:
    from mxbench.report import text
    from mxbench.report.tables import build
    from report_records import typed_all

    assert stats_repeats([100.0, 101.0, 99.0]) is None
    assert stats_repeats([100.0]) is None
    assert stats_repeats([100.0, 130.0, 99.0]) == pytest.approx(0.31, abs=0.01)
    (t,) = build(typed_all(_repeated("float32", (100.0, 130.0, 99.0))))
    assert "noisy (repeats differ by 31%)" in text.cell_text(t.entries["float32", 8])


def test_report_frame_and_text_share_the_verdicts() -> None:
    from mxbench.report import frame, text
    from mxbench.report.tables import build
    from report_records import typed_all

    for repeats, verdict in ((3, stats.FASTER), (1, stats.TOO_FEW)):
        recs = _repeated("float32", (100.0, 101.0, 99.0)[:repeats])
        recs += _repeated("mixed_float16", (60.0, 61.0, 59.0)[:repeats])
        (t,) = build(typed_all(recs))
        row = frame.row(t, t.entries["mixed_float16", 8].records[0], 1)
        assert row["verdict"] == verdict
        cell = text.speedup_texts(t)["mixed_float16", 8]
        note = text.interval_note(t)
        if verdict == stats.TOO_FEW:  # the bare ratio, and the note says why
            assert row["speedup_low"] is None and cell == "1.67"
            assert note is not None and stats.TOO_FEW in note
        else:
            assert row["speedup_low"] > 1 and cell.endswith(stats.SHORT[verdict])
