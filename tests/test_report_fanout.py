"""A large report's sections are made and rendered in forked worker processes
(mxbench.report.fanout): the same bytes as in one process, in order, and never at the cost
of the report (a dead worker, a process with threads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mxbench.report import document, fanout, load, tables
from mxbench.report.render import export, markdown
from report_records import rec, write

CORES = fanout.workers()


def _python(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_PIDS = """
import json, os, sys
from mxbench.report import fanout
fanout.prepare()
{setup}
parent = os.getpid()
out = fanout.fan_out(lambda i: {job}, 1000)
print(json.dumps({{"order": [i for i, _ in out] == list(range(1000)),
                   "pids": sorted({{p for _, p in out}}), "parent": parent}}))
"""


@pytest.mark.skipif(CORES < 2, reason="one usable core: the report stays in one process")
def test_many_items_are_done_by_worker_processes_in_order() -> None:
    # each item takes a moment: a worker forked late on a loaded machine still finds work
    # (instant items were all taken by the first worker at times: a flaky count)
    got = _python(_PIDS.format(setup="import time", job="time.sleep(0.002) or (i, os.getpid())"))
    assert got["order"]
    # this process and its workers shared the items: at least one worker beside this
    # process, at most one process per core
    assert got["parent"] in got["pids"]
    assert 2 <= len(got["pids"]) <= min(CORES, 1000 // (fanout.MIN_ITEMS // 2))


_MEANWHILE = """
import json, os, time
from mxbench.report import fanout
fanout.prepare()
parent, seen, flag = os.getpid(), [], {flag!r}
def job(i):
    if os.getpid() != parent and not os.path.exists(flag):
        open(flag, "a").close()  # a worker has started on the items
    return time.time(), os.getpid()
def meanwhile():
    deadline = time.monotonic() + 60
    while fanout.workers() >= 2 and not os.path.exists(flag):
        assert time.monotonic() < deadline, "no worker started on the items in 60 s"
        time.sleep(0.01)
    seen.append(os.getpid())
    {fail}
try:
    out = fanout.fan_out(job, 1000, meanwhile)
    workers = [t for t, p in out if p != parent]
    print(json.dumps({{"seen": seen == [parent], "before": bool(workers) and min(workers) < end,
                       "failed": False}}))
except ValueError as exc:
    print(json.dumps({{"seen": seen == [parent], "failed": str(exc)}}))
"""


@pytest.mark.skipif(CORES < 2, reason="one usable core: the report stays in one process")
def test_this_process_does_its_other_work_while_the_workers_start(tmp_path: Path) -> None:
    fail = "global end; end = time.time()"
    got = _python(_MEANWHILE.format(fail=fail, flag=str(tmp_path / "started")))
    # meanwhile ran here, once, and a worker did items before it ended
    assert got == {"seen": True, "before": True, "failed": False}


def test_a_failure_meanwhile_is_raised_and_ends_the_workers(tmp_path: Path) -> None:
    fail = "raise ValueError('meanwhile broke')"
    got = _python(_MEANWHILE.format(fail=fail, flag=str(tmp_path / "started")))
    assert got == {"seen": True, "failed": "meanwhile broke"}


def test_a_worker_killed_costs_the_parallelism_not_the_result() -> None:
    # every worker is killed (as the kernel's OOM killer would) on its first item
    kill = "(i, os.getpid()) if os.getpid() == parent else os.kill(os.getpid(), 9)"
    got = _python(_PIDS.format(setup="", job=kill))
    assert got["order"]
    assert got["pids"] == [got["parent"]]


def test_a_process_with_threads_is_not_forked() -> None:
    setup = "import threading; threading.Thread(target=threading.Event().wait, daemon=True).start()"
    got = _python(_PIDS.format(setup=setup, job="(i, os.getpid())"))
    assert got["order"]
    assert got["pids"] == [got["parent"]]


def test_few_items_stay_in_this_process() -> None:
    parent = os.getpid()
    assert fanout.fan_out(lambda i: os.getpid(), fanout.MIN_ITEMS - 1) == [parent] * (
        fanout.MIN_ITEMS - 1
    )


def test_a_large_report_is_the_same_from_workers_as_from_one_process(tmp_path: Path) -> None:
    """300 tables (more than MIN_ITEMS sections): `mxbench report` fans them out; the
    markdown and JSON it writes are byte for byte what one process renders."""
    hosts = 300
    records = [
        rec(f"host{h:03d}", policy, 32, median=100.0 if policy == "float32" else 80.0 + h % 7)
        for h in range(hosts)
        for policy in ("float32", "mixed_float16")
    ]
    write(tmp_path / "results" / "fleet.jsonl", records)
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    cmd = [sys.executable, "-m", "mxbench", "report", "--results", str(tmp_path / "results")]
    subprocess.run([*cmd, "-o", str(md), "-o", str(js)], check=True, timeout=300)

    loaded = load.load([tmp_path / "results"])
    doc = document.build(loaded, tables.build(loaded.winners))
    assert len(doc.sections) == hosts >= fanout.MIN_ITEMS  # made here, in one process
    assert md.read_text(encoding="utf-8") == markdown.render(doc)
    assert js.read_text(encoding="utf-8") == export.render(doc)
    assert json.loads(js.read_text(encoding="utf-8"))["tables"][-1]["title"].startswith("host299")


_SPOOL = """
import json, os, tempfile
from mxbench.report import fanout
fanout.prepare()
parent = os.getpid()
{setup}
out = fanout.fan_out(lambda i: (i, os.getpid()), 1000)
print(json.dumps({{"order": [i for i, _ in out] == list(range(1000)),
                   "pids": sorted({{p for _, p in out}}), "parent": parent}}))
"""


@pytest.mark.skipif(CORES < 2, reason="one usable core: the report stays in one process")
@pytest.mark.parametrize(
    ("setup", "forked"),
    [
        # no writable temporary folder to hand results back through: all done here
        ("tempfile.tempdir = '/nonexistent/mxbench-tmp'", False),
        # a worker's results cannot be written (a full disk): its runs are done here
        ("import builtins; real = builtins.open\n"
         "def full(f, m='r', *a, **k):\n"
         "    if os.getpid() != parent and 'w' in m: raise OSError(28, 'No space left')\n"
         "    return real(f, m, *a, **k)\n"
         "os.fdopen = lambda fd, m='r', *a, **k: full(fd, m, *a, **k)", True),
    ],
)  # fmt: skip
def test_results_that_cannot_cross_back_are_done_here(setup: str, forked: bool) -> None:
    got = _python(_SPOOL.format(setup=setup))
    assert got["order"] and got["parent"] in got["pids"]
    if not forked:
        assert got["pids"] == [got["parent"]]
