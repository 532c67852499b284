"""The markdown report on several processes: the same bytes as one process, whatever the split."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mxbench.cli import app
from mxbench.report import fanout, load, pipeline
from report_records import rec, write

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def _square(x: int) -> int:
    return x * x


def _fail_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError(f"bad item {x} in pid {os.getpid()}")
    return x


def _die_on_seven(x: int) -> int:
    if x == 7:
        os._exit(3)
    return x


def test_fan_out_keeps_order_and_runs_in_other_processes() -> None:
    assert fanout.fan_out(_square, list(range(10)), jobs=3) == [x * x for x in range(10)]
    pids = fanout.fan_out(lambda _: os.getpid(), list(range(6)), jobs=3)
    assert len(set(pids)) == 3 and os.getpid() not in pids  # this process only waits
    assert fanout.fan_out(lambda _: os.getpid(), [0, 1], jobs=1) == [os.getpid()] * 2


def test_fan_out_raises_a_workers_exception_in_the_parent() -> None:
    with pytest.raises(ValueError, match="bad item 7 in pid") as info:
        fanout.fan_out(_fail_on_seven, list(range(10)), jobs=2)
    assert f"pid {os.getpid()}" not in str(info.value)  # it happened in the worker


def test_fan_out_reports_a_worker_that_died() -> None:
    with pytest.raises(RuntimeError, match=r"died .*exit status 3"):
        fanout.fan_out(_die_on_seven, list(range(10)), jobs=2)


def _fleet(root: Path, hosts: int) -> None:
    for h in range(hosts):
        name = f"host{h:02d}"
        recs = [
            rec(name, p, b, median=10.0 * b / (i + 1), time=f"2026-01-01T00:00:{h:02d}+00:00")
            for i, p in enumerate(POLICIES)
            for b in (16, 32, 64)
        ]
        recs.append(rec(name, "mixed_float16", 128, status="oom"))
        write(root / f"{name}.jsonl", recs, ("{not json",) if h % 3 == 0 else ())


def _report(tmp_path: Path, *args: str) -> tuple[str, str]:
    out = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.md"
    res = CliRunner().invoke(app, ["report", *args, "--output", str(out)])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if "warning" in line]
    return out.read_text(), "\n".join(warnings)


@pytest.fixture
def always_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split even a small fleet (the threshold only saves time, it changes no output)."""
    monkeypatch.setattr(pipeline, "MIN_BYTES_PER_JOB", 0)


def test_split_report_is_byte_for_byte_the_serial_one(tmp_path: Path, always_split) -> None:
    _fleet(tmp_path / "results", hosts=12)
    serial, serial_err = _report(tmp_path, "--results", str(tmp_path / "results"), "-j", "1")
    split, split_err = _report(tmp_path, "--results", str(tmp_path / "results"), "-j", "4")
    assert split == serial
    assert split_err == serial_err and split_err.count("not JSON") == 4  # same order too
    assert "## host11 · Tesla V100-SXM2-16GB" in split and "OOM" in split


def test_split_keeps_same_named_files_together(tmp_path: Path) -> None:
    files = [tmp_path / d / f"h{i}.jsonl" for d in ("a", "b") for i in range(4)]
    for f in files:
        write(f, [rec(f.stem)])
    groups = pipeline.split(files, 3, {f: f.stat().st_size for f in files})
    assert len(groups) == 3
    for g in groups:
        assert {f.name for f in g} == {f.name for f in g if f.parent.name == "a"}
        assert g == sorted(g, key=files.index)  # given order kept inside a group


def test_a_host_in_two_workers_files_falls_back_to_one_process(
    tmp_path: Path, always_split
) -> None:
    _fleet(tmp_path / "results", hosts=4)
    # a hand-made file under another name: a retry of host00's OOM cell that now ran ok
    retry = rec("host00", "mixed_float16", 128, median=700.0, time="2026-01-02T00:00:00+00:00")
    write(tmp_path / "extra" / "retries.jsonl", [retry])
    args = ("--results", str(tmp_path / "results"), "--results", str(tmp_path / "extra"))
    serial, _ = _report(tmp_path, *args, "-j", "1")
    split, _ = _report(tmp_path, *args, "-j", "5")  # 5 files, 5 workers: host00 is split
    assert split == serial
    host00 = split.split("## host00")[1].split("## host01")[0]
    assert "700.0" in host00 and "OOM" not in host00  # the latest ok won across the files


def test_one_big_file_is_split_by_host_shard(tmp_path: Path, always_split) -> None:
    _fleet(tmp_path / "per-host", hosts=9)
    lines = []
    for f in sorted((tmp_path / "per-host").glob("*.jsonl")):
        lines += f.read_text().splitlines()
    lines.insert(5, '{"host": ["not", "a", "string"]}')  # no readable host: shard 0 warns
    random.Random(0).shuffle(lines)  # hosts interleaved, as a hand-merged file may be
    (tmp_path / "fleet.jsonl").write_text("\n".join(lines) + "\n")
    args = ("--results", str(tmp_path / "fleet.jsonl"))
    serial, serial_err = _report(tmp_path, *args, "-j", "1")
    split, split_err = _report(tmp_path, *args, "-j", "3")
    assert split == serial and split_err == serial_err
    assert split_err.count("not JSON") == 3 and split_err.count("warning") == 4
    assert all(f"## host{h:02d}" in split for h in range(9))


def test_host_shards_are_stable_and_cover_every_host() -> None:
    from mxbench.report.load import shard_of

    hosts = [f"node-{i}" for i in range(200)]
    shards = [shard_of(h, 4) for h in hosts]
    assert set(shards) == {0, 1, 2, 3}
    assert shard_of("node-7", 4) == shard_of("node-7", 4) == 2  # crc32: same in every process
    assert shard_of(None, 4) == shard_of(["x"], 4) == 0


def test_one_file_written_host_by_host_is_cut_where_the_host_changes(
    tmp_path: Path, always_split
) -> None:
    _fleet(tmp_path / "per-host", hosts=9)
    text = "".join(f.read_text() for f in sorted((tmp_path / "per-host").glob("*.jsonl")))
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_text(text)
    runs = pipeline.host_pieces([fleet], 3, {fleet: fleet.stat().st_size})
    assert runs is not None and len(runs) == 3
    data = fleet.read_bytes()
    for (_, start, _), *_ in runs[1:]:  # each cut: a line start where the host changes
        before = data[:start].splitlines()
        after = data[start:].splitlines()
        host = [load.host_of(x) for x in (before[-1], after[0])]  # None: not JSON
        assert data[start - 1 : start] == b"\n" and host[0] != host[1]
    args = ("--results", str(fleet))
    serial, serial_err = _report(tmp_path, *args, "-j", "1")
    split, split_err = _report(tmp_path, *args, "-j", "3")
    assert split == serial and split_err == serial_err  # line numbers of later pieces too
    assert split_err.count("not JSON") == 3
