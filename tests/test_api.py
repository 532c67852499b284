"""The declared Python API (docs/api.md): its worked example executed as a notebook would,
the report of a filtered frame, a speedup from one's own samples held against a known truth,
and clear errors for what it cannot take."""

from __future__ import annotations

import math
import random
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import mxbench

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "measured" / "h100" / "results"


@pytest.fixture()
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder whose ``results/`` holds the committed H100 records, as the cwd."""
    shutil.copytree(H100, tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "results"


@pytest.mark.process  # its first block measures: mxbench.run starts bench processes
def test_the_documented_example_runs_as_written(results: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)
    assert len(blocks) >= 5
    scope: dict[str, object] = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/api.md block {i + 1}", "exec"), scope)


def test_the_declared_names_are_exported_and_nothing_else_is_promised() -> None:
    for name in mxbench.__all__:
        assert getattr(mxbench, name) is not None, name
    with pytest.raises(AttributeError):
        _ = mxbench.not_an_api_name  # type: ignore[attr-defined]


def test_a_filtered_frame_reports_only_its_cells(results: Path) -> None:
    frame = mxbench.load_results("results")
    both = mxbench.render_report(frame)
    torch = mxbench.render_report(frame[frame["backend"] == "torch"])
    assert "backend jax" in both and "backend torch" in both
    assert "backend torch" in torch and "backend jax" not in torch
    small = frame[frame["batch_size"] == 32]
    doc = mxbench.render_report(small, format="json")
    assert '"schema": "mxbench.report/1"' in doc
    # the same cells through records give the same tables
    keys = set(small["cell"])
    recs = [r for r in mxbench.load_records("results") if r.cell in keys]
    assert _tables(mxbench.render_report(recs)) == _tables(mxbench.render_report(small))


def _tables(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


def test_speedup_intervals_hold_their_level_on_samples_with_a_known_truth() -> None:
    """Four fresh processes a side, each with its own effect (SD 0.05 in the log) and noisy
    steps: the 95 % interval covers the true 1.25 in about 95 % of 400 tables, and an A/A
    comparison says "no clear difference" about as often."""
    rnd = random.Random(7)

    def side(level: float) -> list[list[float]]:
        out = []
        for _ in range(4):
            here = level * math.exp(rnd.gauss(0, 0.05))
            out.append([here * math.exp(rnd.gauss(0, 0.08)) for _ in range(30)])
        return out

    covered = same = 0
    for _ in range(400):
        r = mxbench.speedup(side(100.0), side(80.0))
        covered += r.low <= 1.25 <= r.high
        same += mxbench.speedup(side(100.0), side(100.0)).verdict == "no clear difference"
    assert covered / 400 >= 0.91, covered
    assert same / 400 >= 0.91, same


def test_a_bad_run_argument_is_refused_before_anything_runs(results: Path) -> None:
    from mxbench.errors import UsageError

    with pytest.raises(UsageError, match=r"batch_size=\['abc'\]: axes\.batch_size\[0\]"):
        mxbench.run(batch_size=["abc"], results="nothing")
    with pytest.raises(TypeError, match="unknown argument 'batchsize'"):
        mxbench.run(batchsize=[8], results="nothing")
    with pytest.raises(UsageError, match="measure"):
        mxbench.run(measure="fastest", results="nothing")
    assert not (results.parent / "nothing").exists()


def test_what_the_api_cannot_take_is_said_clearly(results: Path) -> None:
    frame = mxbench.load_results("results")
    with pytest.raises(ValueError, match="format 'pdf'"):
        mxbench.render_report(frame, format="pdf")
    with pytest.raises(TypeError, match=r"a frame from mxbench\.load_results"):
        mxbench.render_report(pd.DataFrame(frame.to_dict()))  # made anew: no attrs
    with pytest.raises(FileNotFoundError):
        mxbench.render_report("no-such-folder")
    with pytest.raises(TypeError, match="Records, or a frame"):
        mxbench.render_report([1, 2])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no result records"):
        mxbench.render_report(frame[frame["batch_size"] < 0])
    with pytest.raises(TypeError, match="one list of step times per process"):
        mxbench.speedup([1.0, 2.0], [[1.0]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no positive step time"):
        mxbench.speedup([[0.0]], [[1.0]])
    with pytest.raises(ValueError, match="level"):
        mxbench.speedup([[1.0]], [[1.0]], level=95)
