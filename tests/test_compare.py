"""`mxbench compare`: two runs of the same matrix, a regression only when it is one."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params

from report_records import rec, write


def _run(
    tmp: Path,
    name: str,
    scale: float,
    seed: int,
    label: str | None = None,
    repeats: int = 3,
    mixed: float = 0.8,
) -> Path:
    """A run of 4 cells, each in ``repeats`` processes whose levels differ by up to ±2%."""
    rng = random.Random(seed)
    records = []
    for policy in ("float32", "mixed_bfloat16"):
        for batch in (8, 32):
            for repeat in range(repeats):
                base = batch * (1.0 if policy == "float32" else mixed) * scale
                level = base * rng.uniform(0.98, 1.02)
                samples = [round(level * rng.uniform(0.97, 1.03), 4) for _ in range(50)]
                r = rec("box", policy, batch, median=sorted(samples)[25], label=label)
                r["params"]["repeat"] = repeat
                r["cell"] = cell_key("box", None, None, Params(**r["params"]))
                r["metrics"]["step_ms"]["samples"] = samples
                records.append(r)
    return write(tmp / name / "box.jsonl", records).parent


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mxbench", "compare", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_two_runs_of_the_same_machine_are_no_regression(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a", 1.0, 1), _run(tmp_path, "b", 1.0, 2)
    proc = _compare(str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "4 cell(s) compared, 0 regression(s)" in proc.stdout


def test_a_slowed_run_is_flagged_and_exits_1(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a", 1.0, 1), _run(tmp_path, "b", 1.2, 2)
    proc = _compare(str(a), str(b), "--json")
    assert proc.returncode == 1 and "4 cell(s) regressed by more than 5%" in proc.stderr
    out = json.loads(proc.stdout)
    assert out["schema"] == "mxbench.compare/1" and out["only_in_base"] == []
    changes = out["cells"]
    assert len(changes) == 4 and all(c["regressed"] and c["verdict"] == "slower" for c in changes)
    assert all(0.15 < c["change"] < 0.25 and c["low"] > 0 for c in changes)
    assert _compare(str(a), str(b), "--threshold", "30").returncode == 0  # within tolerance


def test_labels_select_the_two_sides_of_one_directory(tmp_path: Path) -> None:
    one = tmp_path / "one"
    base = _run(tmp_path, "x", 1.0, 1, label="old") / "box.jsonl"
    new = _run(tmp_path, "y", 0.7, 2, label="new") / "box.jsonl"
    one.mkdir()
    (one / "box.jsonl").write_text(base.read_text() + new.read_text())
    proc = _compare(str(one), str(one), "--base-label", "old", "--new-label", "new")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("faster") == 4


def _rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| box")]  # fmt: skip


def test_rows_are_sorted_by_number_and_unchanged_cells_can_be_left_out(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a", 1.0, 1), _run(tmp_path, "b", 1.0, 2, mixed=0.5)
    proc = _compare(str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    cells = _rows(proc.stdout.split("Speedup over float32")[0])
    assert [(r[2], r[3]) for r in cells] == [
        ("float32", "8"),
        ("float32", "32"),
        ("mixed_bfloat16", "8"),
        ("mixed_bfloat16", "32"),
    ]
    only = _compare(str(a), str(b), "--only-changed")
    assert only.returncode == 0, only.stderr
    changed = _rows(only.stdout.split("Speedup over float32")[0])
    assert [(r[2], r[3], r[-1]) for r in changed] == [
        ("mixed_bfloat16", "8", "faster"),
        ("mixed_bfloat16", "32", "faster"),
    ]
    assert "4 cell(s) compared" in only.stdout  # the counts still cover every cell
    same = _compare(str(a), str(_run(tmp_path, "c", 1.0, 3)), "--only-changed")
    assert "No cell changed." in same.stdout


def test_cells_that_differ_in_another_parameter_are_told_apart(tmp_path: Path) -> None:
    sides = []
    for name in ("a", "b"):
        records = []
        for model in ("resnet50", "blog-cnn"):
            for policy in ("float32", "mixed_bfloat16"):
                r = rec("box", policy, 8, median=10.0 if policy == "float32" else 8.0)
                r["params"]["model"] = model
                r["cell"] = cell_key("box", None, None, Params(**r["params"]))
                records.append(r)
        sides.append(str(write(tmp_path / name / "box.jsonl", records).parent))
    proc = _compare(*sides)
    assert proc.returncode == 0, proc.stderr
    cells, speed = (_rows(part) for part in proc.stdout.split("Speedup over float32"))
    assert [(r[2], r[3]) for r in cells] == [
        ("blog-cnn", "float32"), ("blog-cnn", "mixed_bfloat16"),
        ("resnet50", "float32"), ("resnet50", "mixed_bfloat16"),
    ]  # fmt: skip
    assert [(r[2], r[3]) for r in speed] == [
        ("blog-cnn", "mixed_bfloat16"), ("resnet50", "mixed_bfloat16"),
    ]  # fmt: skip
    assert "| model " in proc.stdout


def test_a_missing_side_is_named_as_the_command_names_it(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", 1.0, 1)
    proc = _compare(str(a), str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert f"NEW {tmp_path / 'nope'}: no such file or directory" in proc.stderr
    assert "--results" not in proc.stderr


def test_a_label_no_record_carries_is_named(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", 1.0, 1, label="base")
    proc = _compare(str(a), str(a), "--base-label", "base", "--new-label", "nope")
    assert proc.returncode == 2
    assert "label 'nope' matches none of the 12 records read (their labels: 'base')" in proc.stderr


def test_the_speedup_itself_is_compared_between_the_runs(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a", 1.0, 1), _run(tmp_path, "b", 1.0, 2, mixed=0.5)
    proc = _compare(str(a), str(b))
    speed = _rows(proc.stdout.split("Speedup over float32 in each run")[1])
    assert [(r[2], r[3]) for r in speed] == [("mixed_bfloat16", "8"), ("mixed_bfloat16", "32")]
    for row in speed:  # 1/0.8 = 1.25 before, 1/0.5 = 2.0 after, intervals well apart
        assert row[4].startswith("1.2") and row[5].startswith("2.0")
        assert row[6].startswith("+0.7") and "intervals apart" in row[6]
    assert "mixed_bfloat16: the speedup over float32 moved by +0.7" in proc.stdout
    found = json.loads(_compare(str(a), str(b), "--json").stdout)["speedups"]  # the same, as data
    assert [(s["params"]["policy"], s["params"]["batch_size"]) for s in found] == [
        ("mixed_bfloat16", 8), ("mixed_bfloat16", 32)]  # fmt: skip
    assert all(0.7 < s["gained"] < 0.8 and s["clear"] and s["base_low"] > 1 for s in found)


def test_one_process_a_side_is_too_few_for_a_verdict_not_a_regression(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", 1.0, 1, repeats=1)
    b = _run(tmp_path, "b", 1.2, 2, repeats=1)  # 20% slower, but one process each
    proc = _compare(str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("too few processes") == 5  # 4 rows and the summary
    assert "4 cell(s) with one process on a side" in proc.stdout
    changes = json.loads(_compare(str(a), str(b), "--json").stdout)["cells"]
    assert all(c["verdict"] == "too few processes" and c["low"] is None for c in changes)


def test_a_cell_that_ran_before_and_fails_after_is_a_regression_not_only_in_base(
    tmp_path: Path,
) -> None:
    a, b = _run(tmp_path, "a", 1.0, 1), _run(tmp_path, "b", 1.0, 2)
    lines = []
    for line in (b / "box.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["params"]["policy"] == "float32" and r["params"]["batch_size"] == 32:
            r.update(status="oom", metrics={}, error="Traceback...\nOOM when allocating tensor")
        lines.append(json.dumps(r))
    (b / "box.jsonl").write_text("\n".join(lines) + "\n")
    proc = _compare(str(a), str(b))
    assert proc.returncode == 1 and "1 cell(s) ran in base and failed in new" in proc.stderr
    broke = _rows(proc.stdout.split("Ran in base, failed in new")[1].split("cell(s) compared")[0])
    assert [r[2:4] + r[5:] for r in broke] == [["float32", "32", "OOM",
                                                "OOM when allocating tensor"]]  # fmt: skip
    assert "3 cell(s) compared, 0 regression(s)" in proc.stdout
    assert "1 ran in base and failed in new, 0 failed in base and ran in new; 0 only in base" in (
        proc.stdout
    )
    back = _compare(str(b), str(a))  # the other way round: fixed, not a regression
    assert back.returncode == 0 and "Failed in base, ran in new" in back.stdout, back.stderr
    out = json.loads(_compare(str(a), str(b), "--json").stdout)
    assert [(f["params"]["batch_size"], f["status"]) for f in out["broke"]] == [(32, "oom")]
    assert out["fixed"] == [] and out["only_in_base"] == []


def test_the_sentence_after_the_speedup_table_is_not_a_row_of_it(tmp_path: Path) -> None:
    """GitHub markdown takes a line right after a table as one more row: the sentence on how
    the speedup moved stands apart from the table, in a paragraph of its own."""
    from markdown_it import MarkdownIt

    a, b = _run(tmp_path, "a", 1.0, 1), _run(tmp_path, "b", 1.0, 2, mixed=0.5)
    proc = _compare(str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    page = MarkdownIt("commonmark").enable("table").render(proc.stdout)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", page)
    assert cells and not any("moved by" in c for c in cells), page
    assert "<p>mixed_bfloat16: the speedup over float32 moved by +0.7" in page


def test_cells_only_one_side_has_are_listed_not_only_counted(tmp_path: Path) -> None:
    """A matrix that dropped batch 32 and added an OOM at batch 64: compare names those
    cells (markdown and --json), not only how many there are."""
    a = _run(tmp_path, "a", 1.0, 1)
    lines = (a / "box.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["params"]["batch_size"] != 32]
    added = json.loads(kept[0])
    added["params"].update(batch_size=64, repeat=0)
    added.update(
        status="oom", metrics={}, cell=cell_key("box", None, None, Params(**added["params"]))
    )
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "box.jsonl").write_text("\n".join([*kept, json.dumps(added)]) + "\n")
    proc = _compare(str(a), str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    assert "2 only in base, 1 only in new, 0 failed in both." in proc.stdout
    base_part = proc.stdout.split("Only in base")[1].split("Only in new")[0]
    assert re.findall(r"\| (float32|mixed_bfloat16) +\| +32 \| ok", base_part) == [
        "float32", "mixed_bfloat16"]  # fmt: skip
    assert re.search(r"\| float32 +\| +64 \| OOM", proc.stdout.split("Only in new")[1])
    out = json.loads(_compare(str(a), str(tmp_path / "b"), "--json").stdout)
    said = [[c["params"]["policy"], c["params"]["batch_size"], c["status"]]
            for c in out["only_in_base"]]  # fmt: skip
    assert said == [["float32", 32, "ok"], ["mixed_bfloat16", 32, "ok"]]
    assert [[c["params"]["batch_size"], c["status"]] for c in out["only_in_new"]] == [[64, "oom"]]


def test_the_counting_sentence_is_whole_however_much_it_says(tmp_path: Path) -> None:
    """Cells only on one side, one process a side: the sentence that counts them (text the
    tool writes, past 300 characters) ends with its hint whole, not cut to '…'."""
    base = [rec(batch=b, policy=p) for b in (8, 16, 32) for p in ("float32", "mixed_float16")]
    new = [rec(batch=32, policy="float32", median=101.0), rec(batch=128, status="error")]
    a, b = write(tmp_path / "a.jsonl", base), write(tmp_path / "b.jsonl", new)
    proc = _compare(str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    assert "(set benchmark.repeats to auto, or 3 or more)." in " ".join(proc.stdout.split())


def test_a_cell_that_failed_on_both_sides_is_listed_not_lost(tmp_path: Path) -> None:
    """Batch 512 ran out of memory in both runs: it is neither compared nor only on one
    side; compare still names it (markdown, --json) and counts it."""
    base = [rec(batch=32), rec(batch=512, status="oom", error="OOM")]
    new = [rec(batch=32, median=101.0), rec(batch=512, status="error", error="boom")]
    a, b = write(tmp_path / "a.jsonl", base), write(tmp_path / "b.jsonl", new)
    proc = _compare(str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "0 only in base, 0 only in new, 1 failed in both." in said
    assert re.search(r"\| float32 +\| +512 \| error", proc.stdout.split("Failed in both")[1])
    out = json.loads(_compare(str(a), str(b), "--json").stdout)
    assert [(c["params"]["batch_size"], c["status"]) for c in out["failed_in_both"]] == [
        (512, "error")]  # fmt: skip


def test_json_bounds_the_text_it_takes_from_records(tmp_path: Path) -> None:
    """A 100,000-character host, image name and error: compare --json holds each cut to the
    report's 300 characters (as report --json does), in every list."""
    from mxbench.report.tables import MAX_RECORD_TEXT

    host, image = "h" * 100_000, {"name": "i" * 100_000}
    base = [rec(host, batch=b, image=image) for b in (8, 16, 32)]
    new = [rec(host, batch=8, median=101.0, image=image),
           rec(host, batch=16, status="oom", error="E" * 100_000, image=image),
           rec(host, batch=64, image=image)]  # fmt: skip
    a, b = write(tmp_path / "a.jsonl", base), write(tmp_path / "b.jsonl", new)
    proc = _compare(str(a), str(b), "--json")
    assert proc.returncode == 1, proc.stderr  # batch 16 broke
    out = json.loads(proc.stdout)
    lists = ("cells", "broke", "only_in_base", "only_in_new")
    cells = [c for name in lists for c in out[name]]
    assert len(cells) == 4
    for c in cells:
        assert len(c["host"]) == len(c["image"]) == MAX_RECORD_TEXT, c["params"]
    assert len(out["broke"][0]["error"]) == MAX_RECORD_TEXT
