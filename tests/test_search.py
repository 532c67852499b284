"""The batch-size search: the walk (pure), the matrix syntax, the report's replay.

The walk is checked against a device whose true limit the test knows: every batch up to
``limit`` trains, every batch above runs out of memory. The real-engine half (a local host
with a memory limit, resume) is in test_search_engine.py.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.search import BatchSearch, Found, walk
from mxbench.report.sections import capacity

from mxbench.errors import UsageError
from mxbench.report.load import load
from report_records import rec, write


def device(limit: int, asked: list[int] | None = None):  # type: ignore[no-untyped-def]
    def outcome(batch: int) -> tuple[str, None]:
        if asked is not None:
            asked.append(batch)
        return ("ok" if batch <= limit else "oom", None)

    return outcome


def run(cfg: BatchSearch, limit: int) -> tuple[Found, list[int]]:
    """Walk to the end, trying each batch the walk asks for once (as mxbench run does)."""
    known: dict[int, tuple[str, None]] = {}
    tried: list[int] = []
    truth = device(limit)
    while not isinstance(step := walk(cfg, known.get), Found):
        assert step not in known, "a finished trial was asked for again"
        known[step] = truth(step)
        tried.append(step)
    return step, tried


def test_doubling_then_bisection() -> None:
    found, tried = run(BatchSearch(start=8, cap=4096, precision=0.0), 100)
    assert tried == [8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    assert (found.state, found.batch, found.oom_at, found.trials) == ("found", 100, 101, 11)
    assert found.sentence() == "100 fits, 101 does not (11 trial(s))"


def test_precision_stops_the_bisection_early() -> None:
    found, tried = run(BatchSearch(start=8, cap=4096, precision=0.1), 1000)
    assert found.state == "found" and found.batch is not None and found.oom_at is not None
    assert found.oom_at - found.batch <= 0.1 * found.batch and found.batch <= 1000 < found.oom_at
    assert len(tried) < len(run(BatchSearch(start=8, cap=4096, precision=0.0), 1000)[1])


@pytest.mark.parametrize(
    ("cfg", "limit", "state", "batch", "oom_at"),
    [
        (BatchSearch(start=8, cap=64), 1000, "capped", 64, None),  # nothing above the cap
        (BatchSearch(start=8, cap=50), 1000, "capped", 50, None),  # the cap itself is tried
        (BatchSearch(start=8), 0, "none_fit", None, 1),  # halves down to 1
        (BatchSearch(start=64), 5, "found", 5, 6),  # starts too big: halves, then bisects
        (BatchSearch(start=8, max_trials=3), 1000, "exhausted", 32, None),
    ],
)
def test_ends(
    cfg: BatchSearch, limit: int, state: str, batch: int | None, oom_at: int | None
) -> None:
    found, tried = run(cfg, limit)
    assert (found.state, found.batch, found.oom_at) == (state, batch, oom_at)
    assert len(tried) == found.trials <= cfg.max_trials


def test_a_trial_that_fails_otherwise_stops_the_search_with_its_reason() -> None:
    outcomes = {8: ("ok", None), 16: ("error", "ImportError: no module named keras")}
    found = walk(BatchSearch(start=8), outcomes.get)
    assert isinstance(found, Found) and found.state == "failed" and found.batch == 8
    assert found.reason == "batch 16: error: ImportError: no module named keras"


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(0, 5000),
    start=st.integers(1, 600),
    precision=st.sampled_from([0.0, 0.02, 0.05, 0.25]),
)
def test_the_answer_is_within_one_bisection_step_of_the_true_limit(
    limit: int, start: int, precision: float
) -> None:
    cfg = BatchSearch(start=start, cap=4096, precision=precision, max_trials=64)
    found, tried = run(cfg, limit)
    assert len(set(tried)) == len(tried)  # no batch tried twice
    if limit == 0:
        assert found.state == "none_fit"
    elif limit >= cfg.cap:
        assert (found.state, found.batch) == ("capped", cfg.cap)
    else:
        assert found.state == "found" and found.batch is not None and found.oom_at is not None
        assert found.batch <= limit < found.oom_at  # the boundary is bracketed ...
        assert found.oom_at - found.batch <= max(1, int(found.batch * precision))  # ... tightly
    # replaying over the finished trials gives the same answer without asking for any
    known = {b: device(limit)(b) for b in tried}
    assert walk(cfg, known.get) == found


BASE = "version: 1\nhosts: [{name: l, engine: local}]\n"


def test_matrix_axis_takes_max_alone_or_among_numbers() -> None:
    from mxbench.cells.cell import expand, searches

    from mxbench.cells import cell as cells

    m = parse_matrix(BASE + "axes: {batch_size: max, policy: [float32, mixed_bfloat16]}\n")
    assert m.sweep()["batch_size"] == ["max"] and m.benchmark.batch_search == BatchSearch()
    assert expand(m) == [] and [s.label() for s in searches(m)] == [
        "l float32 bs=max", "l mixed_bfloat16 bs=max"
    ]  # fmt: skip
    search = "benchmark: {batch_search: {start: 4, cap: 256, max_trials: 9}, repeats: 1}\n"
    m = parse_matrix(BASE + "axes: {batch_size: [16, max], policy: [float32]}\n" + search)
    (hunt,) = searches(m)
    (cell,) = expand(m)
    assert hunt.config == BatchSearch(start=4, cap=256, max_trials=9)
    # a trial trains only (no profiled window, no one-step check): not the ordinary cell of
    # its batch size, whose extras once decided OOMs (issue 34)
    trial = hunt.trial(16)
    assert trial.key != cell.key
    bare = {"profile": "off", "check": "off", "warmup_steps": 1, "steps": cells.TRIAL_STEPS}
    assert trial.params == msgspec.structs.replace(cell.params, **bare)
    assert trial.search == hunt.config and cell.search is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("axes: {batch_size: [32, maxx]}", "axes.batch_size[1]: expected a batch_size from 1 to 65536, or max; got 'maxx'"),  # noqa: E501
        ("axes: {batch_size: min}", "axes.batch_size[0]: expected a batch_size"),
        ("axes: {batch_size: [max, max]}", "duplicate values: max"),
        ("benchmark: {batch_search: {start: 0}}", "benchmark.batch_search: start must be between 1 and 65536"),  # noqa: E501
        ("benchmark: {batch_search: {cap: '9'}}", "Expected `int`, got `str` - at `cap`"),
        ("benchmark: {batch_search: {stat: 9}}", "unknown field `stat`"),
        ("benchmark: {batch_search: {start: 64, cap: 32}}", "start 64 is above cap 32"),
        ("benchmark: {batch_search: {precision: 1.5}}", "precision must be at least 0 and below 1"),
        ("benchmark: {batch_search: {max_trials: 1000}}", "max_trials must be between 1 and 64"),
    ],
)  # fmt: skip
def test_bad_search_settings_name_the_key(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_matrix(BASE + text + "\n")
    assert needle in str(err.value)


def _trial(policy: str, batch: int, status: str, **extra: object) -> dict:
    search = {"start": 8, "cap": 4096, "max_trials": 16, "precision": 0.0}
    median = 10.0 if status == "ok" else None
    r = rec("box", policy, batch, status=status, median=median, search=search, **extra)
    if status == "oom":  # killed for memory: no device facts
        r.pop("device")
        r["error"] = "the bench was killed for going past the host's memory_limit of 1g"
    return r


def test_report_replays_the_search_from_the_records(tmp_path: Path) -> None:
    recs = []
    for policy, limit, peak in (("float32", 20, 900), ("mixed_float16", 30, 700)):
        _, tried = run(BatchSearch(precision=0.0), limit)
        for b in tried:
            r = _trial(policy, b, "ok" if b <= limit else "oom")
            if b == limit:
                r["run"] = {"cgroup_peak_bytes": peak * 2**20}
            recs.append(r)
    path = write(tmp_path / "box.jsonl", recs)
    winners = load([path]).winners
    (c,) = capacity.build(winners)
    assert {p: f.batch for p, f in c.fits.items()} == {"float32": 20, "mixed_float16": 30}
    assert c.ratio("mixed_float16") == 1.5 and c.table.device.name == "Tesla V100-SXM2-16GB"
    _, rows = capacity.rows(c)
    assert rows[1][:5] == ["mixed_float16", "30", "1.50x", "0.68 GiB (cgroup)", "31"]
    assert "Largest batch: float32 20, mixed_float16 30 (1.50x): mixed precision lets" in (
        capacity.diagnosis(c) or ""
    )
    from mxbench.report.render import html
    from mxbench.report.render.plot import memory_png

    from mxbench.report import document, tables

    assert tables.build(winners) == []  # trials are not speed cells
    assert (memory_png(c) or b"").startswith(b"\x89PNG")  # peak memory against batch size
    page = html.render(document.build(load([path]), []), lambda t: [])
    assert "<h2>Largest batch: box" in page and "peak memory against batch size" in page
    # a search cut short: the report names the trial that is missing
    cut = write(tmp_path / "cut" / "box.jsonl", recs[:3])
    (c,) = capacity.build(load([cut]).winners)
    assert (
        capacity.rows(c)[1][0][-1] == "incomplete: batch 24 next (mxbench run --resume)"
    )  # 8, 16 ok; 32 oom
