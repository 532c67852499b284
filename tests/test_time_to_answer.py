"""Where a run's time goes: the compile cache's environment and the time-to-answer line."""

from __future__ import annotations

from mxbench.engines.compile_cache import JAX_DIR, TF_FLAG, CompileCache
from mxbench.matrix.params import Params
from mxbench.records.record import Metrics, Record
from mxbench.report.sections.answers import lines, time_per_run, time_to_answer
from mxbench.report.tables import build


def test_the_cache_env_per_backend_and_what_the_user_set_wins() -> None:
    cache = CompileCache()
    jax = cache.env("jax", {})
    assert jax[JAX_DIR] == cache.path and jax["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert cache.env("jax", {JAX_DIR: "/mine"}) == {}
    assert cache.env("tensorflow", {}) == {"TF_XLA_FLAGS": f"{TF_FLAG}={cache.path}"}
    assert cache.env("tensorflow", {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}) == {
        "TF_XLA_FLAGS": f"--tf_xla_auto_jit=2 {TF_FLAG}={cache.path}"
    }
    assert cache.env("tensorflow", {"TF_XLA_FLAGS": f"{TF_FLAG}=/mine"}) == {}
    assert cache.env("torch", {}) == {}


def rec(wall: float, label: str | None = None, **phases: float) -> Record:
    return Record(params=Params(), status="ok", run={"wall_s": wall}, label=label,
                  metrics=Metrics(phases_s=phases))  # fmt: skip


def test_time_to_answer_adds_up_the_processes() -> None:
    recs = [
        rec(10.0, start=1.0, timed=1.0, first_step=4.0),
        rec(10.0, start=1.0, timed=0.5, first_step=1.0),
        Record(params=Params(), status="error", run={}),  # never ran: not counted
    ]
    said = time_to_answer(recs)
    assert said == ("time to answer: 2 process(es), 20 s; timed steps 1.5 s (7.5%); "
                    "teardown 57%, first_step 25%, start 10%")  # fmt: skip
    assert time_to_answer([]) is None
    runs = time_per_run([rec(4.0, "a", timed=1.0), rec(8.0, "b", timed=1.0)])
    assert [r.split(":")[0] for r in runs] == ["time to answer (a)", "time to answer (b)"]
    assert "(25.0%)" in runs[0] and "(12.5%)" in runs[1]


def test_records_older_than_the_phase_stamps_are_not_all_teardown() -> None:
    old = [rec(30.0), rec(30.0)]  # how long each ran, not where the time went
    assert time_to_answer(old) == "time to answer: 2 process(es), 60 s"
    mixed = time_to_answer([*old, rec(10.0, start=1.0, timed=2.0)])
    assert mixed == ("time to answer: 3 process(es), 70 s; timed steps 2.0 s (20.0% of the 1 "
                     "that stamp their phases); teardown 70%, start 10%")  # fmt: skip


def test_the_answer_lines_carry_no_control_sequence_from_a_bench() -> None:
    from report_records import rec, typed_all

    device = {"kind": "gpu", "name": "GPU\x1b]0;pwned\x07\x1b[2J\nnext"}
    records = [rec(device=device), rec(policy="mixed_float16", median=50.0, device=device)]
    said = lines(build(typed_all(records)))
    assert len(said) == 1 and "\x1b" not in said[0] and "\x07" not in said[0]
    assert "\n" not in said[0] and "GPU" in said[0] and "next" in said[0]


def test_a_line_under_the_answers_says_how_many_false_verdicts_their_level_expects() -> None:
    from dataclasses import dataclass, field

    from mxbench import stats
    from mxbench.report.sections.answers import judged

    @dataclass
    class Shown:  # what judged reads of a table
        ratios: dict[tuple[str, int], stats.Ratio]
        batches: list[int] = field(default_factory=lambda: [8, 32])
        reduced: list[str] = field(default_factory=lambda: ["mixed_bfloat16"])

        def trusted(self, slot: tuple[str, int]) -> bool:
            return True

    verdict = stats.Ratio(1.5, 1.4, 1.6, "processes", 3)
    bare = stats.Ratio(1.5, 1.4, 1.6, "steps", 1)  # one process: no verdict, not counted
    six = [Shown({("mixed_bfloat16", 8): verdict, ("mixed_bfloat16", 32): verdict})] * 6
    said = judged([*six, Shown({("mixed_bfloat16", 8): bare})])  # type: ignore[list-item]
    assert (
        said == "12 comparisons judged at 95%: about 0.6 false verdicts expected if none differed."
    )
    assert judged([Shown({("mixed_bfloat16", 8): bare})]) is None  # type: ignore[list-item]


def test_run_and_report_print_it_under_the_verdicts() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    from mxbench.report.load import load
    from mxbench.session import verdicts

    root = Path(__file__).resolve().parents[1]
    paired = root / "benchmarks" / "records" / "cpu-step18-series" / "quiet" / "paired-0"
    line = "2 comparisons judged at 95%: about 0.1 false verdicts expected if none differed."
    said = verdicts(paired, None, {r.cell or "" for r in load([paired]).winners})
    assert len(said) == 3 and "faster than float32 at batch 8" in said[0] and said[-1] == line
    for fmt in ("--markdown", "--json"):
        proc = subprocess.run(
            [sys.executable, "-m", "mxbench", "report", "--results", str(paired), fmt],
            capture_output=True, text=True, check=True, cwd=root,
        )  # fmt: skip
        if fmt == "--markdown":
            summary = proc.stdout.split("\n## ")[1]  # the answer grid, the legend, this line
            assert summary.startswith("Summary:") and line in summary
        else:
            doc = json.loads(proc.stdout)
            assert doc["judged"]["comparisons"] == 2 and doc["judged"]["level"] == 0.95
