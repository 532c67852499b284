"""Merging records from many sources: latest ok wins, bad lines warned, minimum records render."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mxbench.records import summary
from mxbench.report import load as loading
from mxbench.report import tables, text
from mxbench.report.load import load, pick
from mxbench.report.tables import build
from report_records import rec, typed, write


def mxbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", "report", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


def test_latest_ok_wins_over_later_failure_and_earlier_ok() -> None:
    early = typed(rec(median=120.0, time="2026-01-01T00:00:00+00:00"))
    late_ok = typed(rec(median=100.0, time="2026-01-02T00:00:00+00:00"))
    later_oom = typed(rec(status="oom", time="2026-01-03T00:00:00+00:00"))
    assert pick([early, later_oom, late_ok]) is late_ok
    assert pick([late_ok, early]) is late_ok  # by time, not by read order


def test_no_ok_shows_latest_status_and_offsets_compare_as_instants() -> None:
    err = typed(rec(status="error", time="2026-01-02T10:00:00+02:00"))  # 08:00 UTC
    oom = typed(rec(status="oom", time="2026-01-02T09:00:00+00:00"))
    assert pick([oom, err]).status == "oom"
    # equal or missing times: the record read last wins
    a = typed(rec(status="timeout", time=None))
    b = typed(rec(status="unsupported", time=None))
    assert pick([a, b]) is b


def test_merges_dirs_and_files_across_hosts(tmp_path: Path) -> None:
    write(
        tmp_path / "a" / "h1.jsonl",
        [rec("h1", median=90.0), rec("h1", "mixed_float16", median=60.0)],
    )
    write(tmp_path / "b.jsonl", [rec("h2", median=50.0)])
    loaded = load([tmp_path / "a", tmp_path / "b.jsonl"])
    assert loaded.read == 3 and not loaded.bad
    tables = build(loaded.winners)
    assert [t.host for t in tables] == ["h1", "h2"]
    assert tables[0].speedup("mixed_float16", 32) == 1.5


def test_repeats_in_one_slot_take_the_median_of_medians(tmp_path: Path) -> None:
    recs = []
    for i, ms in enumerate((10.0, 30.0, 20.0)):
        r = rec(median=ms)
        r["params"]["repeat"] = i
        r["cell"] = f"cell{i}"
        r["metrics"]["step_ms"]["samples"] = [ms] * 50
        recs.append(r)
    (t,) = build(load([write(tmp_path / "r.jsonl", recs)]).winners)
    e = t.entries[("float32", 32)]
    assert (e.median, e.n, len(e.records)) == (20.0, 150, 3)


def test_corrupt_line_warns_with_file_and_line_and_report_renders(tmp_path: Path) -> None:
    path = write(
        tmp_path / "res" / "h1.jsonl",
        [rec(median=80.0), rec("h1", "mixed_float16", median=40.0)],
        extra_lines=(
            "",
            '{"schema": "mxbench.result/1", "cell": "x", truncated',
            "[1, 2]",
            json.dumps({"schema": "mxbench.result/1", "host": "h1"}),
        ),
    )
    proc = mxbench("--results", str(tmp_path / "res"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{path}:4: not JSON" in proc.stderr
    assert f"{path}:5: Expected `object`, got `array`" in proc.stderr
    assert f"{path}:6: Object missing required field `params`" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(r"^\| +32 \| +80\.0 \[78\.4–82\.4\] \|", proc.stdout, re.M)
    assert "3 unreadable line(s) or file(s) skipped" in proc.stdout


def test_minimum_contract_records_render(tmp_path: Path) -> None:
    recs = [
        rec("bare", "float32", 64, minimal=True),
        rec("bare", "mixed_float16", 64, status="oom", minimal=True),
    ]
    write(tmp_path / "results" / "bare.jsonl", recs)
    proc = mxbench(cwd=tmp_path)  # default --results ./results
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "## bare · unknown device" in out
    assert "device not recorded" in out
    row = next(ln for ln in out.splitlines() if ln.replace(" ", "").startswith("|64|"))
    assert [c.strip() for c in row.strip("|").split("|")] == ["64", "ok", "", "OOM", "", "–"]
    for fmt in ("--csv", "--html"):
        assert mxbench(fmt, cwd=tmp_path).returncode == 0


def test_missing_results_path_is_usage_error(tmp_path: Path) -> None:
    proc = mxbench("--results", "nope", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "mxbench: error: --results nope: no such file or directory"
    bare = mxbench(cwd=tmp_path)  # no ./results either: says what to run first
    assert bare.returncode == 2 and "measure first (mxbench run)" in bare.stderr


def test_two_formats_is_usage_error(tmp_path: Path) -> None:
    write(tmp_path / "r.jsonl", [rec()])
    proc = mxbench("--results", "r.jsonl", "--csv", "--html", cwd=tmp_path)
    assert proc.returncode == 2
    assert "choose one output format, not --csv and --html" in proc.stderr


def test_no_records_exits_1_with_a_clear_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    write(tmp_path / "junk.jsonl", [], extra_lines=("not json",))
    proc = mxbench("--results", "empty", "--results", "junk.jsonl", cwd=tmp_path)
    assert proc.returncode == 1
    assert "no result records found in empty, junk.jsonl: run `mxbench run`" in proc.stderr
    assert "junk.jsonl:1: not JSON" in proc.stderr


def test_a_label_no_record_carries_names_the_labels_there_are(tmp_path: Path) -> None:
    write(tmp_path / "r.jsonl", [rec(label="old"), rec(label="new"), rec()])
    proc = mxbench("--results", "r.jsonl", "--label", "nope", cwd=tmp_path)
    assert proc.returncode == 1
    assert "label 'nope' matches none of the 3 records read" in proc.stderr
    assert "(their labels: 'new', 'old')" in proc.stderr and "mxbench run` first" not in proc.stderr


def test_output_file(tmp_path: Path) -> None:
    write(tmp_path / "r.jsonl", [rec()])
    proc = mxbench("--results", "r.jsonl", "--csv", "--output", "out.csv", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert (tmp_path / "out.csv").read_text().startswith("host,engine,image,")


def test_a_folder_means_every_result_file_in_the_tree_below_it(tmp_path: Path) -> None:
    write(tmp_path / "a" / "results" / "h1.jsonl", [rec(host="h1")])
    write(tmp_path / "b" / "c" / "d" / "h2.jsonl", [rec(host="h2")])
    write(tmp_path / ".git" / "h3.jsonl", [rec(host="h3")])  # hidden: not looked in
    elsewhere = write(tmp_path.parent / f"{tmp_path.name}-other" / "h4.jsonl", [rec(host="h4")])
    (tmp_path / "link").symlink_to(elsewhere.parent)  # a linked folder is not followed
    (tmp_path / "a" / "h5.jsonl").symlink_to(elsewhere)  # nor a linked file
    loaded = loading.load([tmp_path])
    assert sorted(str(r.host) for r in loaded.winners) == ["h1", "h2"]
    assert loading.folders(loaded.files) == [tmp_path / "a" / "results", tmp_path / "b" / "c" / "d"]
    assert sorted(b.path.name for b in loaded.bad) == ["h5.jsonl", "link"]
    intro = text.counts(loaded, tables.build(loaded.winners))
    assert f"2 file(s) in {tmp_path / 'a' / 'results'}, {tmp_path / 'b' / 'c' / 'd'};" in intro


def test_a_file_named_twice_or_under_two_named_folders_is_read_once(tmp_path: Path) -> None:
    f = write(tmp_path / "a" / "h1.jsonl", [rec(host="h1"), rec(host="h1", time="2026-02-01")])
    (tmp_path / "named.jsonl").symlink_to(f)  # a link named on the command line is read
    loaded = loading.load([tmp_path, tmp_path / "a", f, tmp_path / "named.jsonl"])
    assert loaded.files == [f] and loaded.read == 2
    assert loaded.attempts == {str(loaded.winners[0].cell): 2}  # one older attempt, not 7
    assert len(load([f, f], keep_all=True).everything[str(loaded.winners[0].cell)]) == 2


def test_the_walk_is_bounded_in_depth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "MAX_DEPTH", 2)
    write(tmp_path / "1" / "h1.jsonl", [rec(host="h1")])
    write(tmp_path / "1" / "2" / "3" / "h2.jsonl", [rec(host="h2")])
    loaded = loading.load([tmp_path])
    assert [r.host for r in loaded.winners] == ["h1"]
    assert [b.reason for b in loaded.bad] == ["more than 2 folders deep (not read)"]


def test_the_published_and_measured_examples_are_found_from_the_top(tmp_path: Path) -> None:
    examples = Path(__file__).parents[1] / "examples"
    loaded = loading.load([examples / "measured"])
    found = {d.relative_to(examples).as_posix() for d in loading.folders(loaded.files)}
    assert found == {"measured/compare/results", "measured/cpu-backends/results",
                     "measured/h100/results"}  # fmt: skip
    assert loaded.bad == [] and loaded.read == 18 + 36 + 56


def _summary_records(rng: random.Random) -> list[dict]:
    """Records whose parts the reader summarises: raw samples, losses (one not finite),
    first/last loss only, no samples at all, attempts of one cell."""
    out = []
    for i, policy in enumerate(("float32", "mixed_float16", "mixed_bfloat16")):
        r = rec("h1", policy, 32, median=100.0 - 10 * i)
        r["metrics"]["step_ms"]["samples"] = [rng.uniform(80, 120) for _ in range(40 + i)]
        r["metrics"]["losses"] = [rng.uniform(1, 3) for _ in range(40)] + ([None] if i == 2 else [])
        out.append(r)
    first_last = rec("h1", "float32", 64, median=70.0)
    first_last["metrics"].update(loss_first=2.5, loss_last=2.0)
    out.append(first_last)
    out.append(rec("h1", "mixed_float16", 64, median=50.0))  # a median and nothing else
    early = rec("h1", "float32", 128, median=300.0, time="2026-01-01T00:00:00+00:00")
    late = rec("h1", "float32", 128, median=200.0, time="2026-01-02T00:00:00+00:00")
    failed = rec("h1", "float32", 128, status="oom", time="2026-01-03T00:00:00+00:00")
    return [*out, late, failed, early]


def test_the_reader_summarises_records_as_the_record_type_reads_them(tmp_path: Path) -> None:
    """Known truth: each record decoded whole by codec.decode (samples and losses kept);
    the report's reader keeps per record only the process summary stats.summarise makes of
    its samples and the sum / count of its losses, and picks the same winners."""
    from mxbench import stats
    from mxbench.records.store import read_records

    records = _summary_records(random.Random(3))
    path = write(tmp_path / "h1.jsonl", records)
    loaded = load([path], keep_all=True)
    assert not loaded.bad and loaded.read == len(records)
    whole = [r for _, r in read_records(path)]
    read = [r for attempts in loaded.everything.values() for r in attempts]
    assert len(read) == len(whole)
    by_cell: dict[str, list] = {}
    for full in whole:
        by_cell.setdefault(str(full.cell), []).append(full)
    for full, got in zip(sorted(whole, key=lambda r: (r.cell, r.time)),
                         sorted(read, key=lambda r: (r.cell, r.time)), strict=True):  # fmt: skip
        assert summary.process(got) == summary.process(full)
        step = full.step
        if step is not None:
            med, var = stats.summarise([list(step.samples) or [step.median]])
            assert summary.process(got) == (med[0], var[0])
        losses = full.metrics.losses or (
            [full.metrics.loss_first, full.metrics.loss_last]
            if full.metrics.loss_first is not None else []
        )  # fmt: skip
        want = None if not losses else (
            (math.nan if None in losses else sum(losses), len(losses))  # type: ignore[arg-type]
        )  # fmt: skip
        got_loss = summary.loss(got)
        assert (got_loss is None) == (want is None)
        if want is not None and got_loss is not None:
            assert got_loss[1] == want[1]
            assert got_loss[0] == want[0] or (math.isnan(got_loss[0]) and math.isnan(want[0]))
        assert got.metrics.losses == [] and (got.metrics.step_ms is None
                                             or got.metrics.step_ms.samples == [])  # fmt: skip
    want_winners = {c: pick(a) for c, a in by_cell.items()}
    assert {str(w.cell): (w.status, w.time) for w in loaded.winners} == {
        c: (w.status, w.time) for c, w in want_winners.items()
    }
    assert loaded.attempts == {c: len(a) for c, a in by_cell.items() if len(a) > 1}
    # the tables from summaries are the tables from the whole records
    from_read, from_whole = build(loaded.winners), build(list(want_winners.values()))
    assert [t.ratios for t in from_read] == [t.ratios for t in from_whole]
    assert [t.parity for t in from_read] == [t.parity for t in from_whole]


def test_the_fast_reader_refuses_what_the_record_type_refuses(tmp_path: Path) -> None:
    """Lines the fast path must not vouch for: bad samples or losses, a deep ``run``, an
    injected summary field, an older schema (upgraded). Same records, same reasons."""
    from mxbench.records.store import read_records

    deep: dict = {}
    inner = deep
    for _ in range(20):
        inner["x"] = {}
        inner = inner["x"]
    lines = []
    for i, (where, value) in enumerate([
        ("samples", [1.0, -2.0]), ("samples", [1.0, "fast"]), ("losses", ["nan"]),
        ("run", deep), ("~process", [1.0, 0.0]), ("~loss", "garbage"), ("samples", [1e300]),
    ]):  # fmt: skip
        r = rec("h1", "float32", 8 * (i + 1))
        if where == "samples":
            r["metrics"]["step_ms"]["samples"] = value
        elif where == "losses":
            r["metrics"]["losses"] = value
        else:
            r[where] = value
        lines.append(r)
    old = rec("h1", "float32", 512, status="oom", metrics=None)
    old["schema"] = "mxbench.result/1"
    path = write(tmp_path / "h1.jsonl", [*lines, old])
    want_bad: list = []
    kept = [r.cell for _, r in read_records(path, want_bad)]
    loaded = load([path])
    assert [(b.lineno, b.reason) for b in loaded.bad] == [(b.lineno, b.reason) for b in want_bad]
    assert len(want_bad) == 5  # negative, text, nan text, deep run, too large a sample
    assert sorted(str(w.cell) for w in loaded.winners) == sorted(str(c) for c in kept)
    injected = [w for w in loaded.winners if w.params.batch_size in (40, 48)]
    assert [summary.process(w) for w in injected] == [(100.0, 0.0), (100.0, 0.0)]


def test_reading_holds_memory_per_cell_not_per_step(tmp_path: Path) -> None:
    """40 records of 20,000 timed steps each: read whole (or summarised only at the end)
    that is a peak of ~50 MB; the reader summarises a few MB of samples at a time and keeps
    two numbers a record (~19 MB peak, measured)."""
    import tracemalloc

    rng = random.Random(5)
    path = tmp_path / "long.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(40):
            r = rec(f"h{i}", "float32", 32)
            r["metrics"]["step_ms"]["samples"] = [round(rng.uniform(90, 110), 3)
                                                  for _ in range(20_000)]  # fmt: skip
            fh.write(json.dumps(r) + "\n")
    tracemalloc.start()
    try:
        loaded = load([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(loaded.winners) == 40 and all(summary.process(w) for w in loaded.winners)
    assert peak < 30 * 2**20, f"peak {peak / 2**20:.0f} MiB while reading"


def test_the_parts_records_leave_out_are_shared_and_no_format_writes_to_them(
    tmp_path: Path,
) -> None:
    """A record read without a part gets the one default every record read shares
    (summary.Read): rendering every format from such records leaves each still equal to a
    fresh default, or one report's records would change the next one's."""
    from mxbench.records.record import Record
    from mxbench.report import document

    recs = [rec("bare", p, b, minimal=True) for p in ("float32", "mixed_float16") for b in (8, 16)]
    recs.append(rec("bare", "float16", 8, status="oom", minimal=True))
    write(tmp_path / "bare.jsonl", recs)
    loaded = load([tmp_path])
    first, second = loaded.winners[:2]
    fresh = Record(params=first.params, status="ok")  # every part its default
    for part in ("image", "metrics", "device", "cpu", "software", "settings", "run", "pending"):
        assert getattr(first, part) is getattr(second, part), part
    doc = document.build(loaded, build(loaded.winners))
    for fmt in document.FORMATS:
        assert document.render(doc, fmt)
    for part in ("image", "metrics", "device", "cpu", "software", "settings", "run", "pending"):
        assert getattr(first, part) == getattr(fresh, part), part


def test_equal_parts_of_records_read_one_after_another_are_one_and_no_format_writes_to_them(
    tmp_path: Path,
) -> None:
    """A record whose device, CPU, software, image or settings equal those of the record
    read before it shares them (summary.Read is never written to); a part that differs is
    its own. Every format rendered, each record's parts still equal its line's."""
    from mxbench.records import codec
    from mxbench.report import document

    cpu = {"model": "Xeon", "arch": "x86_64", "cores": 8, "flags": ["avx2", "fma"]}
    software = {"python": "3.11.7", "tensorflow": "2.21.0", "cuda": "12.5"}
    image = {"name": "gpu", "id": "sha256:" + "ab" * 32}
    other = {"kind": "gpu", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
    recs = [
        rec("h", p, b, cpu=cpu, software=software, image=image)
        for p in ("float32", "mixed_float16")
        for b in (8, 16)
    ]
    recs.append(rec("h", "float32", 32, cpu=cpu, software=software, image=image, device=other))
    path = write(tmp_path / "h.jsonl", recs)
    lines = [codec.decode(line) for line in path.read_bytes().splitlines()]
    loaded = load([tmp_path])
    got = sorted(loaded.winners, key=lambda r: (r.params.batch_size, r.params.policy))
    a, b = got[0], got[3]  # float32 at 8 and mixed_float16 at 16: not read one after another
    for part in ("device", "cpu", "software", "image", "settings"):
        assert getattr(a, part) is getattr(b, part), part
    a100 = got[-1]
    assert a100.cpu is a.cpu and a100.device is not a.device
    assert a100.device.name == "NVIDIA A100-SXM4-40GB" and a.device.name == "Tesla V100-SXM2-16GB"
    doc = document.build(loaded, build(loaded.winners))
    for fmt in document.FORMATS:
        assert document.render(doc, fmt)
    by_cell = {r.cell: r for r in lines}
    for r in loaded.winners:
        for part in ("device", "cpu", "software", "image", "settings"):
            assert getattr(r, part) == getattr(by_cell[r.cell], part), (r.cell, part)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"", b""),  # as committed: read straight into the record type
        (b'"compute_capability": "7.0"', b'"compute_capability": "sm_70"'),  # text rewritten
        (b'"compute_capability": "7.0"', b'"compute_capability": 7.0'),  # a number
        (b'"image_size": 256, ', b""),  # none: the first version's 256
        (b'"image_size": 256', b'"image_size": null'),  # a null stays null
        (b'"kind": "gpu",', b'"kind": "gpu", "used_by_tf": true,'),  # the old name
        (b'"error": null', b'"error": null, "~loss": [1e9, 1]'),  # what only the reader sets
        (b'"engine": null', b'"engine": null, "metrics_extra": 1'),  # an unknown key
    ],
)  # fmt: skip
def test_a_first_version_file_reads_as_each_line_upgraded(
    tmp_path: Path, old: bytes, new: bytes
) -> None:
    """Known truth: codec.decode, line by line (the upgrade, /1 -> /2). The reader reads a
    /1 file straight into the record type where that reads the same, else through the
    upgrade; either way each record is the one codec.decode makes."""
    import msgspec

    from mxbench.records import codec

    source = Path(__file__).resolve().parents[1] / "examples/published/blog-v100.jsonl"
    data = source.read_bytes()
    assert old in data
    path = tmp_path / "old.jsonl"
    path.write_bytes(data.replace(old, new, 1) if old else data)
    want = [codec.decode(line) for line in path.read_bytes().splitlines()]
    loaded = load([path], keep_all=True)
    assert not loaded.bad
    got = [r for attempts in loaded.everything.values() for r in attempts]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        mine = msgspec.to_builtins(g)
        mine.pop("~process", None), mine.pop("~loss", None)
        assert mine == msgspec.to_builtins(w)
