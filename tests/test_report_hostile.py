"""Hostile result files: the report never crashes on content, never hangs on a file, and
nothing in a record can change the structure of the markdown, CSV or HTML it appears in."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mxbench.cells.cell import cell_key
from mxbench.cli import app
from mxbench.errors import MxbenchError
from mxbench.matrix.params import Params
from report_records import rec, write

FORMATS = ("--markdown", "--csv", "--html", "--json")


def _report(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["report", *args])
    if isinstance(res.exception, MxbenchError):  # what `mxbench` (cli.main) prints and exits
        return res.exception.exit_code, res.stdout, res.stderr + str(res.exception)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("mxbench: warning:")]


# Any JSON value, nested, with the awkward ones well represented.
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1e-310, 1e308, 2**63, -(2**63) - 1, "", "nan", "=1+1", "|"]),
    st.text(max_size=20),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_FIELDS = st.sampled_from(
    ["host", "cell", "status", "params", "metrics", "device", "cpu", "software", "settings",
     "image", "time", "error", "run", "schema", "model", "source"]
)  # fmt: skip
_PATHS = st.sampled_from(
    [("params", "policy"), ("params", "batch_size"), ("metrics", "step_ms"),
     ("metrics", "step_ms", "median"), ("metrics", "step_ms", "p25"), ("device", "name"),
     ("device", "compute_capability"), ("device", "kind"), ("cpu", "flags"), ("image", "labels"),
     ("metrics", "gpu_util_pct"), ("settings", "tf32"), ("device", "present_gpus")]
)  # fmt: skip


def _set(obj: dict, path: tuple[str, ...], value: object) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = obj[key] = {}
        obj = nxt
    obj[path[-1]] = value


def _texts(value: object) -> list[str]:
    """Every string in ``value`` (keys too), not its numbers: what a report may print as is."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


@st.composite
def _records(draw: st.DrawFn) -> dict:
    """A valid record with a few fields replaced by anything at all."""
    base = rec(host=draw(st.sampled_from(["h1", "h2"])), batch=draw(st.sampled_from([8, 16])))
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            base[draw(_FIELDS)] = draw(_JSON)
        else:
            _set(base, draw(_PATHS), draw(_JSON))
    return base


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=st.lists(_records(), min_size=1, max_size=6), fmt=st.sampled_from(FORMATS))
def test_any_record_renders_or_is_skipped_with_one_warning(
    records: list[dict], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = write(tmp_path_factory.mktemp("r") / "h.jsonl", [rec(host="anchor"), *records])
    code, out, err = _report("--results", str(path), fmt)
    assert code == 0, err
    assert "Traceback" not in err
    for warning in _warnings(err):
        assert f"{path}:" in warning and warning.endswith("(skipped)")
    said = " ".join(_texts([rec(host="anchor"), *records])).lower()
    for text in ("nan", "inf"):
        if text not in said:  # a text the records carry may say it (a host named "nan")
            assert f" {text} " not in out.lower().replace("|", " ")
    if fmt == "--json":  # strict JSON: no NaN / Infinity constants
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON export"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"metrics": {"step_ms": {"median": 0}}}, "median"),
        ({"metrics": {"step_ms": {"median": -3.0}}}, "median"),
        ({"metrics": {"step_ms": {"median": 1e999}}}, "Infinity"),
        ({"metrics": {"step_ms": {"median": 1e300, "samples": [1e300, 1e999]}}}, ""),
        ({"params": {"policy": "float32", "batch_size": 2**70}}, "batch_size"),
        ({"params": {"policy": ["float32"], "batch_size": 8}}, "policy"),
        ({"host": {"name": "h"}}, "host"),
        ({"device": {"name": "x" * 1_000_000}}, ""),
    ],
)
def test_bad_values_are_skipped_the_same_way_in_every_format(
    tmp_path: Path, fmt: str, change: dict, reason: str
) -> None:
    bad = rec(host="h1", batch=16)
    bad.update(change)
    path = write(tmp_path / "h1.jsonl", [rec(host="h1", batch=8), bad])
    code, out, err = _report("--results", str(path), fmt)
    assert code == 0, err
    warnings = _warnings(err)
    if reason:
        assert len(warnings) == 1 and f"{path}:2:" in warnings[0] and reason in warnings[0]
    assert "nan" not in out.lower().split() and "inf" not in out.lower().split()


def test_unreadable_result_files_are_warned_about_not_fatal(tmp_path: Path) -> None:
    good = write(tmp_path / "good.jsonl", [rec(host="h1")])
    write(tmp_path / "dir.jsonl" / "h2.jsonl", [rec(host="h2")])  # a folder: read below it
    os.mkfifo(tmp_path / "fifo.jsonl")  # must not hang
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    for fmt in FORMATS:
        code, out, err = _report("--results", str(tmp_path), fmt)
        assert code == 0, err
        names = " ".join(_warnings(err))
        assert "fifo.jsonl" in names and "loop.jsonl" in names and "dir.jsonl" not in names
        assert "h1" in out and "h2" in out
    assert good.exists()


@pytest.mark.parametrize("schema", ["mxbench.result/2", "mxbench.result/1"])
def test_a_line_that_is_not_utf8_is_skipped_with_a_warning(tmp_path: Path, schema: str) -> None:
    bad = (
        json.dumps(rec(host="hX", batch=16) | {"schema": schema}).encode().replace(b"hX", b"h\xe9")
    )
    path = tmp_path / "h.jsonl"
    path.write_bytes(json.dumps(rec(host="h1")).encode() + b"\n" + bad + b"\n")
    for fmt in FORMATS:
        code, out, err = _report("--results", str(path), fmt)
        assert code == 0 and "h1" in out, err
        warnings = _warnings(err)
        assert len(warnings) == 1 and f"{path}:2: not UTF-8" in warnings[0], warnings


def test_a_file_saved_with_a_byte_order_mark_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(rec(host="h1")).encode() + b"\r\n")
    code, out, err = _report("--results", str(path), "--markdown")
    assert code == 0 and _warnings(err) == [] and "1 records from 1 file(s)" in out


HOSTILE = "a|b\nc<script>alert(1)</script>"


def test_markdown_escapes_what_it_interpolates(tmp_path: Path) -> None:
    r = rec(host=HOSTILE, device={"kind": "gpu", "name": "GPU | <b>x</b>\n# heading"})
    r["image"] = {"name": "img|x", "id": None}
    failed = rec(host=HOSTILE, batch=64, status="error", error="boom | <i>\n## fake")
    path = write(tmp_path / "h.jsonl", [r, failed])
    code, out, _ = _report("--results", str(path), "--markdown")
    assert code == 0
    assert "<script>" not in out and "<b>" not in out and "<i>" not in out
    lines = out.splitlines()
    assert not any(line.startswith(("# heading", "## fake", "c<")) for line in lines)
    # every row of every table has its header's number of (unescaped) column separators
    pipes = [len(re.findall(r"(?<!\\)\|", line)) if line.startswith("|") else 0 for line in lines]
    for i in range(1, len(lines)):
        if pipes[i] and pipes[i - 1]:
            assert pipes[i] == pipes[i - 1], lines[i]
    assert "a\\|b c&lt;script>" in out


def test_markdown_emphasis_and_strikethrough_from_a_name_stay_text() -> None:
    from mxbench.report.render.markdown import escape

    assert escape("_pwned_ ~~gone~~ __bold__") == "\\_pwned\\_ \\~\\~gone\\~\\~ \\_\\_bold\\_\\_"
    for plain in ("mixed_float16", "snake_case_host", "Tesla V100-SXM2-16GB"):
        assert escape(plain) == plain  # an underscore inside a word formats nothing


@pytest.mark.parametrize("prefix", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_neutralises_formulas(tmp_path: Path, prefix: str) -> None:
    path = write(tmp_path / "h.jsonl", [rec(host=f"{prefix}HYPERLINK(1)", status="error",
                                            error=f"{prefix}cmd|' /C calc'!A0")])  # fmt: skip
    code, out, _ = _report("--results", str(path), "--csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    for row in rows:
        for value in row.values():
            assert not (value or "").startswith(("=", "+", "@", "\t", "\r")) or value.startswith(
                "'"
            )
            if value and value[0] == "-":
                float(value)  # only numbers may start with a minus


def test_html_stays_escaped(tmp_path: Path) -> None:
    path = write(
        tmp_path / "h.jsonl", [rec(host=HOSTILE, device={"kind": "gpu", "name": "$x^2$ <b>"})]
    )
    code, out, _ = _report("--results", str(path), "--html")
    assert code == 0
    assert "<script>alert" not in out and "<b>" not in out


def test_html_holds_no_control_character_and_a_name_draws_without_warnings(
    tmp_path: Path,
) -> None:
    import warnings

    device = {"kind": "gpu", "name": "GPU\x00\x1b[31m\x07 \U0001f680 \u2028x"}
    path = write(tmp_path / "h.jsonl", [rec(device=device),
                                        rec(policy="mixed_float16", median=50.0, device=device)])  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = _report("--results", str(path), "--html")
    assert code == 0 and "Warning" not in err
    assert [str(w.message) for w in caught] == []
    assert re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", out) is None
    assert "GPU" in out


def test_no_results_says_what_to_run_first(tmp_path: Path) -> None:
    code, _, err = _report("--results", str(tmp_path))
    assert code == 1
    assert "mxbench run" in err


def test_records_are_json(tmp_path: Path) -> None:
    # guard for the helpers above: rec() writes real JSON lines
    path = write(tmp_path / "h.jsonl", [rec()])
    assert json.loads(path.read_text())["host"] == "h1"


# Step times at and near the schema's bounds: ratios that underflow to 0 or overflow.
_EXTREME_MS = st.sampled_from([5e-324, 1e-310, 1e-300, 1e-9, 1.0, 1e14, 9.99e14, 1e300, 1.7e308])


@st.composite
def _timed(draw: st.DrawFn) -> dict:
    """A valid ok record whose step times (median, quartiles, samples) are extreme."""
    median = draw(_EXTREME_MS)
    base = rec(host="h1", policy=draw(st.sampled_from(["float32", "mixed_bfloat16"])),
               batch=draw(st.sampled_from([8, 16])), median=median)  # fmt: skip
    samples = draw(st.lists(_EXTREME_MS, max_size=4))
    step = base["metrics"]["step_ms"]
    step.update(p25=median, p75=median, n=max(len(samples), 1))
    if samples:
        step.update(samples=sorted(samples), median=sorted(samples)[len(samples) // 2],
                    p25=min(samples), p75=max(samples))  # fmt: skip
    return base


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    base=st.lists(st.one_of(_records(), _timed()), min_size=1, max_size=6),
    new=st.lists(st.one_of(_records(), _timed()), min_size=1, max_size=6),
    as_json=st.booleans(),
)
def test_compare_of_any_records_is_a_table_or_a_warning_never_a_crash(
    base: list[dict], new: list[dict], as_json: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Step 16, every reader is total: `compare` of lines that decode under the schema,
    step times at its bounds included (a ratio that underflows to 0 or overflows), exits 0
    or 1 (a regression) with no traceback, and its JSON stays strict."""
    root = tmp_path_factory.mktemp("c")
    sides = [write(root / f"{name}.jsonl", [rec(host="anchor"), *records])
             for name, records in (("base", base), ("new", new))]  # fmt: skip
    args = ["compare", *map(str, sides), *(["--json"] if as_json else [])]
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code in (0, 1), res.stderr
    assert "Traceback" not in res.stderr
    for warning in _warnings(res.stderr):
        assert warning.endswith("(skipped)")
    if as_json:
        for line in res.stdout.splitlines():
            if line.strip():
                json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in compare --json"))


def _extreme(fast: float) -> list[dict]:
    """Two processes a slot: float32 at 9e13 ms a step, mixed_bfloat16 at ``fast``."""
    records = []
    for policy, median in (("float32", 9e13), ("mixed_bfloat16", fast)):
        for batch in (8, 16):
            for repeat in range(2):
                r = rec(policy=policy, batch=batch, median=median * (1 + repeat / 10))
                r["params"]["repeat"] = repeat
                r["cell"] = cell_key("h1", None, None, Params(**r["params"]))
                records.append(r)
    return records


def test_a_figure_from_extreme_step_times_stays_a_few_characters(tmp_path: Path) -> None:
    """Item 2, what comes from records stays bounded: a step time at the schema's bounds
    (1e-300 ms beside 9e13 ms) makes rates and speedups of 1e300 and more; every format
    writes each in a few characters (scientific notation), not as a 300-digit number."""
    results = write(tmp_path / "h.jsonl", _extreme(1e-300))
    outs = [tmp_path / f"r.{suffix}" for suffix in ("md", "html", "json", "csv", "txt")]
    code, _, err = _report("--results", str(results), *(f"-o{o}" for o in outs))
    assert code == 0 and not _warnings(err), err
    for out in outs:
        longest = max(re.findall(r"\d+", out.read_text(encoding="utf-8")), key=len)
        assert len(longest) <= 20, (out.name, longest[:40])


def test_compare_writes_a_speedup_from_extreme_step_times_in_a_few_characters(
    tmp_path: Path,
) -> None:
    """The same bound in `compare`: the speedups of both runs and what they gained."""
    sides = [str(write(tmp_path / f"{name}.jsonl", _extreme(fast)))
             for name, fast in (("base", 1.0), ("new", 1e-300))]  # fmt: skip
    res = CliRunner().invoke(app, ["compare", *sides])
    assert res.exit_code in (0, 1) and not _warnings(res.stderr), res.stderr
    assert "gained" in res.stdout
    longest = max(re.findall(r"\d+", res.stdout), key=len)
    assert len(longest) <= 20, longest[:40]


HUGE = 100_000  # characters of one name in a record


def test_a_huge_name_from_a_record_stays_bounded_in_every_format(tmp_path: Path) -> None:
    """A host, device, image and label of 100,000 characters each: every format carries a
    bounded piece of each (not a copy of it per mention), and a table's title still names
    its device after a long host."""
    device = {"kind": "gpu", "name": "N" * HUGE, "compute_capability": "7.0"}
    rows = [
        rec(host="h" * HUGE, policy=p, batch=b, device=device, label="L" * HUGE,
            image={"name": "I" * HUGE})
        for p in ("float32", "mixed_float16") for b in (8, 32)
    ]  # fmt: skip
    path = write(tmp_path / "h.jsonl", rows)
    for fmt in ("--markdown", "--html", "--json"):
        code, out, _ = _report("--results", str(path), fmt)
        assert code == 0
        assert len(out) < 50_000 + (30_000 if fmt == "--html" else 0), (fmt, len(out))
        assert max(len(m) for m in re.findall("[hNLI]{50,}", out)) <= 300, fmt
    code, out, _ = _report("--results", str(path), "--json")
    grid_title = json.loads(out)["summary"][0]["devices"][0]["title"]
    assert grid_title.startswith("h" * 100) and "NNNN" in grid_title and "image III" in grid_title


def test_markdown_keeps_a_long_line_the_tool_wrote_whole(tmp_path: Path) -> None:
    """A user model under a long path: its facts line runs past 300 characters, and the
    markdown keeps its end (what the tool measured about the model) as the HTML does."""
    model = (
        "/home/someone/projects/mixed-precision-study/experiments/2026-q1/models/my_model.py:build"
    )
    facts = {"name": model, "parameters": 1210826, "source": "file",
             "source_sha256": "9e3c01164a07f843", "inputs": ["64x64x3 float32", "16 int32"],
             "flops_per_example": 1078213632.0, "flops_source": "analytic",
             "off_multiple_of_8_count": 2, "memory_bound_share": 0.4202}  # fmt: skip
    rows = []
    for p in ("float32", "mixed_float16"):
        r = rec(policy=p, model=facts)
        r["params"]["model"] = model
        r["cell"] = cell_key("h1", None, None, Params(**r["params"]))
        rows.append(r)
    path = write(tmp_path / "h.jsonl", rows)
    code, out, _ = _report("--results", str(path), "--markdown")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("model: "))
    assert len(line) > 300 and line.rstrip().endswith(
        "memory-bound layers write 42% of activations"
    )


def test_csv_and_frame_bound_record_text_as_the_report_does(tmp_path: Path) -> None:
    """A 100,000-character host, label, CPU model or device name: the CSV and the frame
    hold it cut to the report's 300 characters (MAX_RECORD_TEXT, ending '…'), the same host
    as the JSON report's table; a cell stays told apart by its cell key."""
    import pandas as pd

    import mxbench
    from mxbench.report.tables import MAX_RECORD_TEXT

    big = "h" * 100_000
    device = {"kind": "gpu", "name": "d" * 100_000, "compute_capability": "7.0"}
    records = [rec(host=big, label="L" * 100_000, cpu={"model": "M" * 100_000}, device=device),
               rec(host=big, policy="mixed_float16", median=50.0, device=device,
                   status="error", error="E" * 100_000)]  # fmt: skip
    path = write(tmp_path / "h.jsonl", records)
    code, out, _ = _report("--results", str(path), "--csv")
    assert code == 0
    _, js, _ = _report("--results", str(path), "--json")
    host = json.loads(js)["tables"][0]["host"]
    assert len(host) == MAX_RECORD_TEXT and host.endswith("…")
    for got in (pd.read_csv(io.StringIO(out), dtype=str), mxbench.load_results(path)):
        assert len(got) == 2 and got["cell"].nunique() == 2
        assert set(got["host"]) == {host}
        for col in ("label", "cpu_model", "device", "error"):
            value = got[col].dropna().iloc[0]
            assert len(value) == MAX_RECORD_TEXT and value.endswith("…"), col
    help_text = " ".join(CliRunner().invoke(app, ["report", "--help"]).stdout.split())
    assert f"cut to {MAX_RECORD_TEXT} characters" in help_text
