"""The notebook frame (mxbench.load_results): complete, typed, and Python errors from Python."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import pytest
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from typer.testing import CliRunner

import mxbench
from mxbench.cli import app
from mxbench.report import annotate, devices
from mxbench.report.load import load
from mxbench.report.tables import build
from report_records import rec, write

H100 = Path(__file__).resolve().parents[1] / "examples" / "measured" / "h100"


@pytest.fixture(scope="module")
def h100() -> pd.DataFrame:
    return mxbench.load_results(H100)


def test_times_counts_and_flags_are_typed(h100: pd.DataFrame) -> None:
    for col in ("time", "started_at", "finished_at"):
        assert isinstance(h100[col].dtype, pd.DatetimeTZDtype) and str(h100[col].dt.tz) == "UTC"
    assert h100["time"].notna().all() and h100["time"].min().year == 2026
    for col in ("batch_size", "image_size", "steps", "repeat", "step_ms_n", "peak_memory_bytes",
                "attempts"):  # fmt: skip
        assert str(h100[col].dtype) == "Int64", col
    assert h100["repeat"].isna().all()  # missing stays missing, not NaN in a float column
    assert str(h100["tf32"].dtype) == "boolean"
    for col in ("host", "image", "device", "policy", "jit_compile", "cuda", "tensorflow", "error"):
        assert str(h100[col].dtype) == "string", col  # text, even where every value is missing
    assert h100["image"].isna().all() and h100["tensorflow"].isna().all()
    assert {str(h100[c].dtype) for c in ("time", "started_at", "finished_at")} == {
        "datetime64[us, UTC]"}  # fmt: skip


def test_what_changes_the_numbers_is_there(h100: pd.DataFrame) -> None:
    assert set(h100["cuda"].dropna()) == {"13.0"}  # 'cuda 13000' and '13.0' as written
    torch = h100[h100["backend"] == "torch"]
    assert set(torch["cudnn"].dropna()) == {"9.19.0"}  # PyTorch's 91900
    assert (h100["peak_memory_bytes"].dropna() > 100 * 2**20).all()
    assert set(h100["peak_memory_kind"].dropna()) == {"gpu"}
    assert (h100["first_step_ms"] > h100["step_ms_median"]).all()  # compilation
    assert h100["warmup_ms"].notna().all()
    assert set(h100["input_device"].dropna()) >= {"cuda:0"}
    assert h100["matmul_precision"].notna().all()
    mixed = h100[h100["policy"] != "float32"]
    assert set(mixed["loss_parity"]) <= {"matches", "differs", "diverged"}
    assert mixed["loss_vs_float32"].notna().all()
    assert set(h100.loc[h100["policy"] == "float32", "loss_parity"]) == {"no baseline"}


def test_throttle_reasons_are_one_text_column(tmp_path: Path) -> None:
    r = rec(metrics={"step_ms": {"median": 10.0}, "gpu_health": {
        "throttle_reasons": ["sw_power_cap", "hw_slowdown"]}})  # fmt: skip
    df = mxbench.load_results(write(tmp_path / "h.jsonl", [r]))
    assert df["throttle_reasons"].tolist() == ["sw_power_cap,hw_slowdown"]


def test_versions_read_as_people_write_them() -> None:
    assert devices.cuda_text("cuda 13000") == "13.0" and devices.cuda_text("12.5.1") == "12.5.1"
    assert devices.cudnn_text("91900") == "9.19.0" and devices.cudnn_text("8907") == "8.9.7"
    assert devices.cudnn_text("9") == "9" and devices.cudnn_text(None) is None
    loaded = load([H100])
    lines = {line for t in build(loaded.winners) for line in annotate.lines(t)}
    assert any("CUDA 13.0 · cuDNN 9.19.0" in line for line in lines)
    assert not any("13000" in line or "91900" in line for line in lines)


def test_python_errors_from_the_python_api(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        mxbench.load_results(tmp_path / "nope")
    assert missing.value.filename == str(tmp_path / "nope") and "--results" not in str(
        missing.value
    )
    with pytest.raises(TypeError, match="a path is a str or a Path"):
        mxbench.load_results(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="label is a str"):
        mxbench.load_results(H100, label=1)  # type: ignore[arg-type]


def test_without_a_path_a_missing_results_folder_is_file_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as missing:
        mxbench.load_results()
    assert missing.value.filename == "results" and "--results" not in str(missing.value)


def test_numbers_are_floats_even_where_every_value_is_missing(tmp_path: Path) -> None:
    failed = rec(status="oom", error="OOM", metrics={"step_ms": None})
    df = mxbench.load_results(write(tmp_path / "h.jsonl", [failed, rec(policy="mixed_float16")]))
    for col in ("step_ms_median", "images_per_s", "speedup_vs_float32", "speedup_low",
                "speedup_high", "loss_mean", "loss_vs_float32", "first_step_ms", "warmup_ms",
                "gpu_util_pct", "achieved_tflops", "target"):  # fmt: skip
        assert str(df[col].dtype) == "float64", col


def test_a_label_that_matches_nothing_warns(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"label 'nosuch' matches none of the 56 records read"):
        df = mxbench.load_results(H100, label="nosuch")
    assert df.empty and list(df.columns) == list(mxbench.load_results(H100).columns)


@pytest.mark.parametrize(
    "change",
    [{"metrics": {"step_ms": {"median": 10.0, "n": 2**64}}},
     {"metrics": {"step_ms": {"median": 10.0}, "peak_memory_bytes": 2**70}},
     {"params": {"policy": "float32", "batch_size": 16, "repeat": 2**63}}],
    ids=["step_ms.n", "peak_memory_bytes", "params.repeat"],
)  # fmt: skip
def test_a_count_past_64_bits_is_a_bad_line_not_a_crash(tmp_path: Path, change: dict) -> None:
    """The frame's counts are Int64: a record with a count no 64-bit integer holds is skipped
    with one warning naming file:line (as by the report), never an OverflowError."""
    path = write(tmp_path / "h.jsonl", [rec(batch=8), rec(batch=16) | change])
    why = re.escape(f"{path}:2: Expected `int` <= {2**63 - 1}")
    with pytest.warns(UserWarning, match=why) as caught:
        df = mxbench.load_results(path)
    assert len(caught) == 1 and df["batch_size"].tolist() == [8]
    assert str(df["step_ms_n"].dtype) == "Int64"


def _repeat(policy: str, repeat: int, label: str = "a", **kw: object) -> dict:
    d = rec(policy=policy, label=label, **kw)  # type: ignore[arg-type]
    d["params"]["repeat"] = repeat
    d["cell"] = cell_key("h1", None, None, Params(**d["params"]))
    return d


def test_every_cell_is_a_row_a_failed_repeat_and_an_older_runs_too(tmp_path: Path) -> None:
    """A slot's table entry keeps its ok records of its latest run only; the CSV and the
    frame still have a row for every cell: the repeat that ran out of memory beside two ok
    ones, the repeat only an older run measured (neither with the slot's speedup)."""
    path = write(tmp_path / "h.jsonl", [
        _repeat("float32", 0), _repeat("float32", 1, median=102.0),
        _repeat("float32", 2, status="oom", error="RESOURCE_EXHAUSTED: OOM"),
        _repeat("mixed_float16", 0, median=60.0), _repeat("mixed_float16", 1, median=61.0),
        _repeat("mixed_float16", 2, median=90.0),  # run a
        _repeat("mixed_float16", 0, label="b", median=62.0, time="2026-01-02T00:00:00+00:00"),
        _repeat("mixed_float16", 1, label="b", median=63.0, time="2026-01-02T00:00:00+00:00"),
    ])  # fmt: skip
    df = mxbench.load_results(path)
    res = CliRunner().invoke(app, ["report", "-r", str(path), "--csv"])
    assert res.exit_code == 0, res.output
    written = pd.read_csv(io.StringIO(res.stdout))
    for got in (df, written):
        assert len(got) == 6  # 8 records, 6 cells
        cells = set(zip(got["policy"], got["repeat"], got["status"], got["label"], strict=True))
        assert ("float32", 2, "oom", "a") in cells and ("mixed_float16", 2, "ok", "a") in cells
        alone = got[(got["repeat"] == 2)]
        assert alone["speedup_vs_float32"].isna().all()  # not part of the slot's figure
        mixed = got[(got["policy"] == "mixed_float16") & (got["repeat"] < 2)]
        assert mixed["speedup_vs_float32"].notna().all() and set(mixed["label"]) == {"b"}


def test_batch_size_search_trials_are_rows_flagged_as_such(tmp_path: Path) -> None:
    """The trials of a largest-batch search (axes.batch_size: max) are cells the report
    counts and shows ('Largest batch'): the CSV and the frame have a row for each, with
    search_trial true, and no speedup."""
    search = {"start": 8, "cap": 4096, "max_trials": 16, "precision": 0.05, "growth": 3}
    path = write(tmp_path / "h.jsonl", [
        rec(batch=32), rec(batch=32, policy="mixed_float16", median=60.0),
        rec(batch=64, search=search), rec(batch=192, search=search),
        rec(batch=576, status="oom", error="OOM", search=search),
    ])  # fmt: skip
    df = mxbench.load_results(path)
    res = CliRunner().invoke(app, ["report", "-r", str(path), "--csv"])
    assert res.exit_code == 0, res.output
    written = pd.read_csv(io.StringIO(res.stdout))
    for got in (df, written, mxbench.load_results(path, latest=False)):
        assert len(got) == 5
        trials = got[got["search_trial"].astype(bool)]
        assert sorted(zip(trials["batch_size"], trials["status"], strict=True)) == [
            (64, "ok"), (192, "ok"), (576, "oom")]  # fmt: skip
        assert trials["speedup_vs_float32"].isna().all()
    assert str(df["search_trial"].dtype) == "boolean"
