"""The JSONL store (append-only, concurrent-safe, resume) and engine outcome -> record mapping."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mxbench.cells.cell import expand
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params
from mxbench.records.codec import decode, encode, new_record, parse_bench_output
from mxbench.records.record import SCHEMA, Metrics, StepStats
from mxbench.records.store import BadLine, ResultStore, read_records

from mxbench.engines.base import Outcome, to_record

MATRIX = parse_matrix(
    "benchmark:\n  repeats: 1\nhosts:\n  - name: box\n    engine: local\n"
    "axes:\n  policy: [float32]\n  batch_size: [8]\n"
)
CELL = expand(MATRIX)[0]


def _writer(root: str, tag: str, n: int) -> None:
    store = ResultStore(root)
    for i in range(n):
        rec = new_record(params=Params(), status="ok", cell=f"{tag}{i}", host="shared")
        rec.error = tag * 20000
        store.append(rec)


def test_two_writers_never_interleave(tmp_path: Path) -> None:
    # Records of 20+ KB (well past PIPE_BUF) from two processes at once into one file.
    procs = [mp.Process(target=_writer, args=(str(tmp_path), t, 60)) for t in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = (tmp_path / "shared.jsonl").read_text().splitlines()
    assert len(lines) == 120
    cells = [json.loads(line)["cell"] for line in lines]  # every line parses whole
    assert sorted(cells) == sorted([f"a{i}" for i in range(60)] + [f"b{i}" for i in range(60)])


def test_latest_record_decides_resume(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    for cell, status in [("c1", "error"), ("c1", "ok"), ("c2", "ok"), ("c2", "timeout"),
                         ("c3", "oom"), ("c4", "unsupported")]:  # fmt: skip
        store.append(new_record(params=Params(), status=status, cell=cell, host="h"))
    assert store.done_cells() == {"c1", "c3"}


def test_bad_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    good = encode(new_record(params=Params(), status="ok", cell="x", host="h")).decode()
    typo = good.replace('"batch_size":32', '"batch_size":"32"')
    path.write_text(good + "{truncated\n[1, 2]\n\n" + typo + good)
    bad: list[BadLine] = []
    recs = list(read_records(path, bad))
    assert [n for n, _ in recs] == [1, 6]
    assert [(b.path.name, b.lineno) for b in bad] == [
        ("h.jsonl", 2), ("h.jsonl", 3), ("h.jsonl", 5)
    ]  # fmt: skip
    assert bad[0].reason.startswith("not JSON")
    assert "$.params.batch_size" in bad[2].reason


def test_bench_record_found_after_stray_stdout() -> None:
    rec = new_record(params=Params(), status="ok")
    out = "some library said hello\n{not json}\n" + encode(rec).decode()
    assert parse_bench_output(out) == rec
    assert parse_bench_output('{"schema": "other"}\n') is None


def test_outcome_with_record_is_stamped() -> None:
    bench = new_record(params=Params(batch_size=8), status="ok")
    bench.metrics = Metrics(step_ms=StepStats(median=5.0, p25=4.0, p75=6.0, n=3))
    rec = to_record(CELL, Outcome(returncode=0, stdout=encode(bench).decode(), wall_s=1.5))
    assert rec.schema == SCHEMA
    assert (rec.cell, rec.host, rec.engine) == (CELL.key, "box", "local")
    assert rec.params.batch_size == 8 and rec.status == "ok"
    assert rec.run["wall_s"] == 1.5 and rec.metrics == bench.metrics


def test_failures_become_records() -> None:
    timeout = to_record(CELL, Outcome(returncode=-9, stderr="x\nstuck", timed_out=True))
    assert timeout.status == "timeout" and "stuck" in (timeout.error or "")
    killed = to_record(CELL, Outcome(returncode=-signal.SIGKILL, stderr="loading"))
    assert killed.status == "oom"
    crash = to_record(CELL, Outcome(returncode=1, stderr="Traceback...\nValueError: boom"))
    assert crash.status == "error" and "ValueError: boom" in (crash.error or "")
    silent = to_record(CELL, Outcome(returncode=0, stdout="nothing useful"))
    assert silent.status == "error" and "no result record" in (silent.error or "")
    unsupported = to_record(CELL, Outcome(returncode=None, status="unsupported", reason="no GPU"))
    assert (unsupported.status, unsupported.error) == ("unsupported", "no GPU")
    for rec in (timeout, killed, crash, silent, unsupported):
        assert rec.cell == CELL.key and rec.params == CELL.params


def test_docs_record_md_is_generated_from_the_type() -> None:
    from mxbench.records.doc import render

    doc = Path(__file__).resolve().parents[1] / "docs" / "record.md"
    assert doc.read_text(encoding="utf-8") == render(), (
        "docs/record.md is out of date: python -m mxbench.records.doc > docs/record.md"
    )


def test_records_of_earlier_versions_still_load() -> None:
    # A line exactly as mxbench wrote it before the record became a type (commit ae84a5e),
    # and the transcribed published records (fewer params, no cpu/software).
    old = (
        '{"schema": "mxbench.result/1", "cell": "40dc925c236dcb3d", "time": '
        '"2026-11-21T12:00:00+00:00", "host": "local", "engine": "local", "image": {"name": '
        'null, "id": null}, "params": {"model": "blog-cnn", "policy": "float32", "batch_size": '
        '8, "image_size": 64, "data": "synthetic", "warmup_steps": 2, "steps": 10, '
        '"jit_compile": "auto"}, "status": "ok", "metrics": {"step_ms": {"median": 50.1, '
        '"p25": 49.0, "p75": 51.2, "mean": 50.3, "min": 48.7, "max": 55.0, "n": 10}, '
        '"images_per_s": 159.7, "first_step_ms": 2100.0, "warmup_ms": 2150.0, "startup_s": '
        '7.1, "import_s": 4.0, "loss_first": 2.3, "loss_last": 2.2, "loss_scale": null, '
        '"train_flops_per_image": 137387520, "achieved_tflops": 0.02, "gpu_util_pct": null, '
        '"peak_memory_bytes": 737320960, "peak_memory_kind": "rss"}, "device": {"kind": "cpu", '
        '"name": "AMD EPYC", "compute_capability": null, "memory_bytes": null, "driver": null, '
        '"uuid": null, "used_by_tf": null, "present_gpus": [], "cc_source": null}, "cpu": '
        '{"model": "AMD EPYC", "arch": "x86_64", "cores": 2, "logical_cpus": 2, "flags": '
        '["avx2", "fma"], "tf_not_compiled_for": ["AVX2", "FMA"]}, "software": {"python": '
        '"3.11.7", "backend": "tensorflow", "mxbench": "0.1.0", "tensorflow": "2.21.0"}, '
        '"settings": {"onednn": null, "xla_flags": null, "tf32_override": null, "policy": '
        '"float32", "tf32": true, "jit_compile": false}, "model": {"name": "blog-cnn", '
        '"parameters": 1096394}, "run": {"wall_s": 9.2, "pid": 123}, "error": null}'
    )
    rec = decode(old)
    assert rec.problem() is None and rec.step is not None and rec.step.median == 50.1
    assert rec.params == Params(batch_size=8, image_size=64, warmup_steps=2, steps=10)
    assert rec.cpu.tf_not_compiled_for == ["AVX2", "FMA"] and rec.run["pid"] == 123
    published = Path(__file__).resolve().parents[1] / "examples" / "published"
    bad: list[BadLine] = []
    recs = [r for f in sorted(published.glob("*.jsonl")) for _, r in read_records(f, bad)]
    assert not bad and len(recs) > 20 and all(r.problem() is None for r in recs)
    assert {r.device.compute_capability for r in recs} == {"5.2", "6.1", "7.0"}


def test_a_torn_last_line_is_ended_before_the_next_record(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    first = new_record(params=Params(), status="ok", cell="c1", host="h")
    path = store.append(first)
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 2])  # a crash in the middle of a write
    store.append(new_record(params=Params(), status="ok", cell="c2", host="h"))
    bad: list[BadLine] = []
    assert [r.cell for _, r in read_records(path, bad)] == ["c1", "c2"]
    assert [b.lineno for b in bad] == [2]  # the torn line is still reported, not glued


def test_an_interrupt_during_appends_is_delivered_and_lines_stay_whole(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    rec = new_record(params=Params(), status="ok", cell="c1", host="h")
    rec.error = "x" * 5_000_000  # a write long enough to be interrupted
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        timer = threading.Timer(0.001, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        for _ in range(5):
            store.append(rec)
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert got == [signal.SIGINT]  # held during a write, never lost
    assert [r.cell for _, r in read_records(store.path_for("h"))] == ["c1"] * 5


@pytest.mark.parametrize("kind", ["file", "host-file-is-dir", "unwritable-parent"])
def test_results_are_checked_before_the_first_cell(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "results"
    if kind == "file":
        target.write_text("not a directory")
    elif kind == "host-file-is-dir":
        (target / "box.jsonl").mkdir(parents=True)
    else:
        target = Path("/proc/mxbench-results")
    matrix = tmp_path / "m.yaml"
    matrix.write_text("hosts:\n  - name: box\n    engine: local\n    python: /bin/false\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", str(matrix), "--results", str(target)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"--results {target}" in proc.stderr and "Traceback" not in proc.stderr
    assert "cell(s) to run" not in proc.stderr  # refused before planning to measure


def test_a_label_is_stamped_and_resume_counts_only_its_own_records(tmp_path: Path) -> None:
    ResultStore(tmp_path).append(new_record(params=Params(), status="ok", cell="c1", host="h"))
    labelled = ResultStore(tmp_path, label="driver-550")
    assert labelled.done_cells() == set()  # a new label measures everything again
    labelled.append(new_record(params=Params(), status="ok", cell="c1", host="h"))
    assert labelled.done_cells() == {"c1"} and ResultStore(tmp_path).done_cells() == {"c1"}
    assert [r.label for _, r in read_records(tmp_path / "h.jsonl")] == [None, "driver-550"]
