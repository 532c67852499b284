"""The fleet's progress display: a live line per host on a terminal, plain lines in logs."""

from __future__ import annotations

import io
import threading

from mxbench.matrix.params import Params
from mxbench.records.codec import new_record
from mxbench.records.record import StepStats
from rich.console import Console

from mxbench.progress import CellProgress


def _record(status: str, median: float | None = None):  # type: ignore[no-untyped-def]
    rec = new_record(params=Params(), status=status, error="boom" if status != "ok" else None)  # type: ignore[arg-type]
    if median is not None:
        rec.metrics.step_ms = StepStats(median=median, p25=median, p75=median, n=3)
    rec.run = {"wall_s": 1.5}
    return rec


def test_a_terminal_gets_one_line_per_host_with_its_state_and_last_result() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    with CellProgress(3, console) as progress:
        progress.hosts({"v100": 2, "cluster": 1})
        progress.start("v100", "v100 float32 bs=32")
        progress.start("cluster", "(preparing)")
        progress.set_note("cluster", "slurm 42: 1 queued, 0 running, 0/1 done")
        progress._progress.refresh()  # type: ignore[union-attr]
        mid = out.getvalue()
        progress.finish("v100", "v100 float32 bs=32", _record("ok", 41.25))
        progress.finish("cluster", "cluster float32 bs=32", _record("error"))
        progress.host_done("cluster", "done")
    text = out.getvalue()
    assert "v100 float32 bs=32" in mid and "slurm 42: 1 queued" in mid
    assert "[1/3] v100 float32 bs=32: ok 41.2 ms/step (1.5 s)" in text
    assert "last: ok 41.2 ms/step" in text and "last: error: boom" in text
    assert "1/2" in text and "2/3" in text  # the host's count and the total


def test_a_log_gets_plain_lines_from_every_host_thread(capsys) -> None:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), force_terminal=False)
    with CellProgress(20, console) as progress:
        progress.hosts({"a": 10, "b": 10})

        def host(name: str) -> None:
            for i in range(10):
                progress.start(name, f"{name} cell {i}")
                progress.finish(name, f"{name} cell {i}", _record("ok", 1.0))

        threads = [threading.Thread(target=host, args=(h,)) for h in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 20
    assert sorted(int(line[1:].split("/")[0]) for line in lines) == list(range(1, 21))


def test_a_records_error_cannot_drive_the_terminal_or_be_read_as_markup() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    rec = _record("error")
    rec.error = "\x1b]0;pwned\x07\x1b[2J[bold red]boom[/] \x9b31m"
    with CellProgress(2, console) as progress:
        progress.hosts({"a": 1, "b": 1})
        progress.finish("a", "a float32 bs=32", rec)
        progress._progress.refresh()  # type: ignore[union-attr]
    text = out.getvalue()
    assert "pwned" in text and "[bold red]boom[/]" in text  # shown as it reads
    assert "\x1b]0;" not in text and "\x1b[2J" not in text and "\x9b" not in text
