"""The JSONL store (append-only, concurrent-safe, resume) and engine outcome -> record mapping."""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
from pathlib import Path

from mxbench.cells import expand
from mxbench.engines.base import Outcome, to_record
from mxbench.matrix import parse_matrix
from mxbench.results import SCHEMA, BadLine, ResultStore, new_record, parse_bench_output

MATRIX = parse_matrix(
    "hosts:\n  - name: box\n    engine: local\naxes:\n  policy: [float32]\n  batch_size: [8]\n"
)
CELL = expand(MATRIX)[0]


def _writer(root: str, tag: str, n: int) -> None:
    store = ResultStore(root)
    for i in range(n):
        rec = new_record(params={"i": i, "pad": tag * 20000}, status="ok", cell=f"{tag}{i}")
        rec["host"] = "shared"
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
        store.append(new_record(params={}, status=status, cell=cell, host="h"))
    assert store.done_cells() == {"c1", "c3"}


def test_bad_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    good = json.dumps(new_record(params={}, status="ok", cell="x", host="h"))
    path.write_text(good + "\n{truncated\n[1, 2]\n\n" + good + "\n")
    bad: list[BadLine] = []
    recs = list(ResultStore(tmp_path).records(bad))
    assert len(recs) == 2
    assert [(b.path.name, b.lineno) for b in bad] == [("h.jsonl", 2), ("h.jsonl", 3)]


def test_bench_record_found_after_stray_stdout() -> None:
    rec = new_record(params={"a": 1}, status="ok")
    out = "some library said hello\n{not json}\n" + json.dumps(rec) + "\n"
    assert parse_bench_output(out) == rec
    assert parse_bench_output('{"schema": "other"}\n') is None


def test_outcome_with_record_is_stamped() -> None:
    bench = new_record(params={"policy": "float32"}, status="ok")
    bench["metrics"] = {"step_ms": {"median": 5.0, "p25": 4.0, "p75": 6.0, "n": 3}}
    rec = to_record(CELL, Outcome(returncode=0, stdout=json.dumps(bench) + "\n", wall_s=1.5))
    assert rec["schema"] == SCHEMA
    assert (rec["cell"], rec["host"], rec["engine"]) == (CELL.key, "box", "local")
    assert rec["params"]["batch_size"] == 8 and rec["status"] == "ok"
    assert rec["run"]["wall_s"] == 1.5


def test_failures_become_records() -> None:
    timeout = to_record(CELL, Outcome(returncode=-9, stderr="x\nstuck", timed_out=True))
    assert timeout["status"] == "timeout" and "stuck" in timeout["error"]
    killed = to_record(CELL, Outcome(returncode=-signal.SIGKILL, stderr="loading"))
    assert killed["status"] == "oom"
    crash = to_record(CELL, Outcome(returncode=1, stderr="Traceback...\nValueError: boom"))
    assert crash["status"] == "error" and "ValueError: boom" in crash["error"]
    silent = to_record(CELL, Outcome(returncode=0, stdout="nothing useful"))
    assert silent["status"] == "error" and "no result record" in silent["error"]
    unsupported = to_record(CELL, Outcome(returncode=None, status="unsupported", reason="no GPU"))
    assert (unsupported["status"], unsupported["error"]) == ("unsupported", "no GPU")
    for rec in (timeout, killed, crash, silent, unsupported):
        assert rec["cell"] == CELL.key and rec["params"] == CELL.params
