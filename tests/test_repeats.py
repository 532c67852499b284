"""`repeats: auto`: the decision over records with a known truth, the matrix settings, and
a real `mxbench run --resume` that continues an auto run (real TensorFlow processes)."""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from mxbench import stats
from mxbench.cells import repeats, rounds
from mxbench.cells.cell import expand
from mxbench.cells.repeats import AutoRepeats, decide
from mxbench.errors import UsageError
from mxbench.matrix.file import load_matrix, parse_matrix
from mxbench.matrix.params import Params
from mxbench.records import codec
from mxbench.records.record import Metrics, Record, StepStats
from mxbench.records.store import ResultStore

CFG = AutoRepeats(start=3, target=0.03, max=10, budget_s=600)


def measured(policy: str, level: float, cell: str = "c", n: int = 30, sd: float = 0.02,
             seed: int = 0) -> Record:  # fmt: skip
    """An ok record whose steps are ``level`` ms with ``sd`` relative noise (known truth)."""
    rnd = random.Random(seed)
    samples = [level * (1 + rnd.gauss(0, sd)) for _ in range(n)]
    srt = sorted(samples)
    step = StepStats(median=srt[n // 2], p25=srt[n // 4], p75=srt[3 * n // 4], n=n,
                     samples=samples)  # fmt: skip
    return Record(cell=cell, host="h", params=Params(policy=policy), status="ok",
                  metrics=Metrics(step_ms=step), run={"wall_s": 5.0})  # fmt: skip


def sides(levels: dict[str, list[float]], sd: float = 0.02) -> dict[str, list[Record]]:
    return {p: [measured(p, x, seed=i * 7 + len(p)) for i, x in enumerate(xs)]
            for p, xs in levels.items()}  # fmt: skip


def test_a_clear_verdict_stops_without_the_target() -> None:
    # 1.25x with an interval of a few percent: an answer; ±3% is not needed for it
    d = decide(CFG, sides({"float32": [100, 104, 97], "mixed_bfloat16": [80, 78, 82]}), 3)
    assert d.why == "verdict clear" and not d.more, d.text()
    assert "faster" in d.text()


def test_a_gross_difference_stops_at_two_processes_and_a_modest_one_does_not() -> None:
    # 10x slower (bfloat16 emulated): at 2 processes the 99% interval (1 degree of freedom)
    # still holds 1, the 95% one does not, and 10x is far past repeats.GROSS
    two = AutoRepeats(start=2, max=6)
    d = decide(two, sides({"float32": [100, 103], "mixed_bfloat16": [1000, 1010]}), 2)
    assert d.why == "verdict clear" and "slower" in d.text(), d.text()

    def ratio(value: float, low: float, high: float) -> stats.Ratio:
        return stats.Ratio(value, low, high, "processes", 2)

    gross, firm_open = ratio(0.1, 0.06, 0.17), ratio(0.1, 0.01, 1.2)
    assert repeats.stop(two, [gross], [firm_open], 2) == "verdict clear"
    assert repeats.stop(two, [ratio(8.0, 5.0, 13.0)], [ratio(8.0, 0.9, 70.0)], 2) == "verdict clear"
    # where it must not fire: clear at 95% but under 2x; 2x but not clear at 95%; one
    # policy gross and another not clear at all
    modest = ratio(1.6, 1.1, 2.3)
    assert repeats.stop(two, [modest], [ratio(1.6, 0.5, 5.0)], 2) == "more"
    assert repeats.stop(two, [ratio(2.5, 0.8, 7.0)], [ratio(2.5, 0.2, 30.0)], 2) == "more"
    unclear = ratio(1.1, 0.7, 1.7)
    assert repeats.stop(two, [gross, unclear], [firm_open, unclear], 2) == "more"


def test_processes_that_agree_on_no_difference_meet_the_target() -> None:
    d = decide(CFG, sides({"float32": [100, 100.5, 99.6], "mixed_bfloat16": [100.2, 99.9, 100.1]}),
               3)  # fmt: skip
    assert d.why == "target met" and not d.more, d.text()
    assert d.width is not None and d.width <= 0.03 and d.processes == 3


def test_a_moderately_wide_interval_around_one_asks_for_more() -> None:
    d = decide(CFG, sides({"float32": [100, 104, 97], "mixed_bfloat16": [99, 103, 97]}), 3)
    assert d.more, d.text()
    assert d.width is not None and 0.03 < d.width < 0.10
    assert "wider than ±3%" in d.text()


def test_disagreeing_processes_ask_for_more_even_within_the_target() -> None:
    cfg = AutoRepeats(target=0.9, max=10)
    d = decide(cfg, sides({"float32": [100, 130, 100, 100], "mixed_bfloat16": [110] * 4}), 4)
    assert d.more and "float32's processes differ by 3" in d.text()


def test_noise_is_never_given_up_on_before_the_cap_or_the_budget() -> None:
    noisy = sides({"float32": [100, 180, 60], "mixed_bfloat16": [80, 40, 150]})
    assert decide(CFG, noisy, 3).more  # noisy: more processes, until the cap or the budget
    assert decide(CFG, noisy, 10).why == "cap"  # attempts at auto_repeats.max


def test_no_baseline_and_failed_policies_stop() -> None:
    assert decide(CFG, sides({"mixed_bfloat16": [1, 2, 3]}), 3).why == "no baseline"
    oom = Record(cell="x", host="h", params=Params(policy="mixed_float16"), status="oom")
    by = {**sides({"float32": [100, 100, 100]}), "mixed_float16": [oom, oom, oom]}
    assert decide(CFG, by, 3).why == "failed"


AUTO = """\
benchmark:
  image_size: 32
  warmup_steps: 1
  steps: 3
  repeats: auto
  auto_repeats: {{start: 3, max: 4, target: 0.03, budget_s: 900}}
axes:
  policy: [float32, mixed_bfloat16]
  batch_size: [4]
hosts:
  - name: box
    engine: local
"""


def test_auto_plans_the_cells_and_keys_of_its_start() -> None:
    auto = parse_matrix(AUTO.format())
    fixed = parse_matrix(AUTO.format().replace("repeats: auto", "repeats: 3").replace(
        "  auto_repeats: {start: 3, max: 4, target: 0.03, budget_s: 900}\n", ""))  # fmt: skip
    assert [c.key for c in expand(auto)] == [c.key for c in expand(fixed)]
    assert auto.benchmark.auto == AutoRepeats(start=3, max=4, target=0.03, budget_s=900)
    assert fixed.benchmark.auto is None


@pytest.mark.parametrize(
    ("bench", "where", "says"),
    [
        ("repeats: sometimes", "measure.repeats", "auto"),
        ("repeats: 3\n  auto_repeats: {max: 5}", "measure.auto_repeats", "repeats: auto"),
        ("repeats: auto\n  auto_repeats: {start: 6, max: 5}", "measure.auto_repeats",
         "start 6 is above max 5"),
        ("repeats: auto\n  auto_repeats: {target: 0}", "measure.auto_repeats", "target"),
        ("repeats: auto\n  auto_repeats: {maximum: 5}", "measure.auto_repeats", "maximum"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_key(bench: str, where: str, says: str) -> None:
    text = f"measure:\n  {bench}\nhosts:\n  - name: box\n    engine: local\n"
    with pytest.raises(UsageError) as err:
        parse_matrix(text)
    assert where in str(err.value) and says in str(err.value), str(err.value)


def mxbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mxbench", *args], capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def test_resume_continues_an_auto_run(tmp_path: Path) -> None:
    """A first round already stored (written here: a known spread that asks for one more
    process a policy); `--resume` measures exactly that round for real, stops at the cap,
    says why, and a second `--resume` measures nothing (the decision replays)."""
    path = tmp_path / "matrix.yaml"
    path.write_text(AUTO.format())
    mx = load_matrix(path)
    store = ResultStore(tmp_path / "results")
    levels = {"float32": [100, 104, 97], "mixed_bfloat16": [99, 103, 97]}
    for i, cell in enumerate(expand(mx)):
        level = levels[cell.params.policy][cell.params.repeat or 0]
        rec = measured(cell.params.policy, level, cell.key, seed=i)
        rec.host, rec.params = "box", cell.params
        store.append(rec)
    plan = rounds.plan(mx.benchmark.auto_repeats, expand(mx), {"box": None})
    rounds.known(plan, store.latest_by_cell())
    assert decide(plan.cfg, plan.groups[0].by_policy(), 3).more  # the premise

    proc = mxbench("run", "-m", str(path), "-r", str(tmp_path / "results"), "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(x) for x in (tmp_path / "results" / "box.jsonl").read_text().splitlines()]
    added = recs[6:]
    assert [(r["params"]["policy"], r["params"]["repeat"]) for r in added] == [
        ("float32", 3), ("mixed_bfloat16", 3)]  # fmt: skip
    assert all(r["status"] == "ok" and "process 4" in r["run"]["repeats"] for r in added)
    assert "box bs=4: adding process 4 per policy" in proc.stderr
    assert "repeats: auto: box bs=4: 4 processes per policy" in proc.stderr
    assert "cap (auto_repeats.max 4 reached)" in proc.stderr or "target met" in proc.stderr
    assert "mixed_bfloat16" in proc.stdout  # the verdict counts all 4 processes a policy
    assert all(r["run"]["auto_repeats"]["max"] == 4 for r in added)  # the run's settings
    # the records alone say where the comparison stopped (the 6 stored above were made by
    # this test with no settings: the run's own records carry them)
    from mxbench.report.load import load

    by_policy: dict[str, list[Record]] = {}
    for r in load([tmp_path / "results"]).winners:
        by_policy.setdefault(r.params.policy, []).append(r)
    said = repeats.stopped(by_policy)
    assert said is not None and said.processes == 4 and said.why in {"cap", "target met"}
    report = mxbench("report", "--results", str(tmp_path / "results"), "--markdown")
    assert "repeats: auto: bs=4: " in report.stdout, report.stdout[:3000]
    # where the run's time went: the one (paired) process it ran, its timed share
    assert all(r["pairing"]["design"] == "paired" for r in added)
    assert re.search(
        r"time to answer: 1 process\(es\), \d+ s; timed steps [\d.]+ s "
        r"\([\d.]+%\).*the run took \d+ s",
        proc.stderr,
    ), proc.stderr[-2000:]

    again = mxbench("run", "-m", str(path), "-r", str(tmp_path / "results"), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert len((tmp_path / "results" / "box.jsonl").read_text().splitlines()) == 8
    assert "0 cell(s) to run" in again.stderr or "nothing" in again.stderr


def test_dry_run_explains_auto(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(AUTO.format())
    proc = mxbench("run", "-m", str(path), "-r", str(tmp_path / "r"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "6 cell(s)" in proc.stdout  # the first round: 3 processes of each policy
    assert (
        "repeats: auto: 3 processes per cell to start, then one more per policy (a paired "
        "process measures them together) until the verdict is clear"
    ) in proc.stdout
    assert "pairing: paired: 6 of the cells below are measured in 3 process(es)" in proc.stdout
    assert "1 comparison group(s) may grow to 4 processes per policy (8 processes at most" in (
        proc.stdout
    )


def test_a_store_of_the_old_default_is_the_first_process_of_the_new_one(tmp_path: Path) -> None:
    """`repeats: auto` became the default: a matrix that leaves `repeats` out, run before
    (one process per cell, `repeat` unset), is resumed as auto's first round with its
    stored records as each cell's first process: `--resume` plans only processes 2 and 3."""
    text = AUTO.format().replace("  repeats: auto\n", "")
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    now = load_matrix(path)
    assert now.benchmark.auto is not None and "repeats" not in now.benchmark.model_fields_set
    old = parse_matrix(text.replace("  auto_repeats:", "  repeats: 1\n  # auto_repeats:"))
    store = ResultStore(tmp_path / "results")
    for i, cell in enumerate(expand(old)):  # what the old default measured and stored
        rec = measured(cell.params.policy, 100.0, cell.key, seed=i)
        rec.host, rec.params = "box", cell.params
        store.append(rec)
    firsts = [c for c in expand(now) if c.params.repeat is None]
    assert {c.key for c in firsts} == {c.key for c in expand(old)}
    proc = mxbench("run", "-m", str(path), "-r", str(tmp_path / "results"), "--resume",
                   "--dry-run")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "2 cell(s) already done" in proc.stdout and "4 cell(s)" in proc.stdout, proc.stdout


def test_a_training_run_gets_seeds_not_growth() -> None:
    """Under the default `repeats: auto` a training run trains `start` seeds; it is not a
    timing comparison, so no group would grow it (or report it as failed)."""
    mx = parse_matrix("benchmark: {epochs: 2, data: d, batch_size: 8}\n"
                      "axes: {policy: [float32, mixed_bfloat16]}\n"
                      "hosts: [{name: a, engine: local}]\n")  # fmt: skip
    cells = expand(mx)
    seeds = range(AutoRepeats().start)
    assert sorted((c.params.policy, c.params.repeat or 0) for c in cells) == [
        (p, k) for p in ("float32", "mixed_bfloat16") for k in seeds]  # fmt: skip
    assert rounds.plan(mx.benchmark.auto_repeats, cells, {"a": None}).groups == []


def test_the_records_say_where_an_auto_comparison_stopped() -> None:
    """Each record of an auto run carries the run's settings (`run.auto_repeats`), so a
    reader can tell from the records alone where each comparison stopped and why."""
    settings = msgspec.to_builtins(CFG)
    firm = sides({"float32": [100, 100.5, 99.6], "mixed_bfloat16": [100.2, 99.9, 100.1]})
    loose = sides({"float32": [100, 103, 98], "mixed_bfloat16": [100, 102, 99]})
    clear = sides({"float32": [100, 103, 98], "mixed_bfloat16": [80, 82, 79]})
    for recs in (*firm.values(), *loose.values(), *clear.values()):
        for r in recs:
            r.run["auto_repeats"] = settings
    said = repeats.stopped(firm)
    assert said is not None and said.why == "target met"
    verdict = repeats.stopped(clear)
    assert verdict is not None and verdict.why == "verdict clear" and "faster" in verdict.detail
    late = repeats.stopped(loose)  # wanted more: the run's budget (or Ctrl-C) ended it
    assert late is not None and late.why == "budget" and "time budget" in late.detail
    assert repeats.stopped(sides({"float32": [100, 101], "mixed_bfloat16": [80, 81]})) is None
    for r in firm["float32"]:
        r.run["auto_repeats"] = {"start": 3, "max": 1}  # not settings auto accepts
    for r in firm["mixed_bfloat16"]:
        r.run["auto_repeats"] = "garbage"
    assert repeats.stopped(firm) is None  # a bad record is not a crash


SERIES = Path(__file__).parent.parent / "benchmarks/records/cpu-issue48-series/avx2-only"


def test_a_paired_round_is_estimated_from_what_its_comparison_takes() -> None:
    """Issue 48, the AVX2-only kind under load: two paired processes of both batch sizes took
    63 and 53 s (the first with its profile and check); their mean said a third would not
    fit 150 s after 116 s spent, and batch 32 got no verdict. The third process such a run
    did start measured batch 32 alone in 25 s (paired-0): the estimate is that process's,
    its start-up once per family a round."""
    recs = [codec.decode(x) for x in (SERIES / "bursty-runs/paired-3/results/local.jsonl")
            .read_text().splitlines()]  # fmt: skip
    third = [codec.decode(x) for x in (SERIES / "bursty-runs/paired-0/results/local.jsonl")
             .read_text().splitlines() if '"repeat":2' in x]  # fmt: skip
    group = rounds.Group("bs=32", None, ["float32", "mixed_bfloat16"], None)
    for r in recs:
        if r.params.batch_size == 32:
            group.records[r.cell or ""] = r
            group.wall_s.append(float(r.run["wall_s"]))
    assert len(group.records) == 4 and min(group.wall_s) > 50  # two processes, both sizes
    took = third[0].run["wall_s"]
    assert {r.params.batch_size for r in third} == {32} and 20 < took < 30
    alone, shared = group.round_s(), group.round_s(shared=True)
    assert 0.75 * took < alone < 1.35 * took, (alone, took)  # not the 58 s mean
    assert 116 + alone < 150 < 116 + statistics.fmean(group.wall_s)
    assert shared < alone - 4  # the start-up and import (about 6 s), paid once
