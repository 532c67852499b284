"""Faults: a bench is untrusted, and the orchestrator stamps what is its to stamp.

Each case runs the real `mxbench run` on a local host whose `python:` is a fake interpreter:
a script that hands the engine's own checks (`python -c ...`) to the real interpreter and,
for `-m mxbench bench`, does the hostile thing (prints garbage, lies, floods, hangs,
leaves children behind). Processes are real; nothing in mxbench is replaced.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# A record a real bench could print for the matrix below (batch 4, 3 steps of ~10 ms).
GOOD = {
    "schema": "mxbench.result/1",
    "params": {},
    "status": "ok",
    "metrics": {
        "step_ms": {"median": 10.0, "p25": 9.5, "p75": 10.5, "min": 9.0, "max": 11.0, "n": 3,
                    "samples": [9.0, 10.0, 11.0]},
        "images_per_s": 400.0,
    },
}  # fmt: skip


def fake_python(tmp: Path, body: str, name: str = "python") -> Path:
    """An interpreter whose `-m mxbench bench ...` runs ``body`` (with GOOD as a dict)."""
    path = tmp / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, subprocess, sys, time\n"
        "if sys.argv[1:3] != ['-m', 'mxbench']:\n"
        f"    os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n"
        f"GOOD = {GOOD!r}\n"
        "out = sys.stdout.buffer\n" + textwrap.dedent(body)
    )
    path.chmod(0o755)
    return path


def matrix(tmp: Path, *hosts: tuple[str, Path | None], timeout_s: float = 60) -> Path:
    entries = [
        {"name": name, "engine": "local", **({"python": str(py)} if py else {})}
        for name, py in hosts
    ]
    doc = {
        "benchmark": {
            "image_size": 32,
            "warmup_steps": 1,
            "steps": 3,
            "timeout_s": timeout_s,
            "repeats": 1,
        },
        "axes": {"policy": ["float32"], "batch_size": [4]},
        "hosts": entries,
    }
    path = tmp / "matrix.yaml"
    path.write_text(json.dumps(doc))
    return path


def run(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-r", str(tmp / "results"), *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(tmp: Path, m: Path, results: Path, **popen: Any) -> subprocess.Popen[str]:
    """``mxbench run`` of ``m`` in the background (output discarded unless ``popen`` says)."""
    out = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **popen}
    return subprocess.Popen(
        [sys.executable, "-m", "mxbench", "run", "-m", str(m), "-r", str(results)],
        cwd=tmp, text=True, **out,
    )  # fmt: skip


def wait_for(
    ready: Callable[[], object], proc: subprocess.Popen[str], within_s: float = 60
) -> None:
    """Until ``ready()`` is true, while ``proc`` runs (a failure if it ends or time runs out)."""
    deadline = time.monotonic() + within_s
    while not ready():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)


def killed_once(tmp: Path, m: Path, marker: Path) -> None:
    """A run of ``m`` killed with SIGKILL once its bench has written ``marker``."""
    first = start(tmp, m, tmp / "r1")
    try:
        wait_for(lambda: marker.exists() and marker.read_text(), first)
    finally:
        first.kill()
        first.wait()


def records(tmp: Path, host: str) -> list[dict]:
    path = tmp / "results" / f"{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def one(tmp: Path, body: str, *args: str, timeout_s: float = 60) -> tuple[dict, str]:
    """Run one cell with a fake bench; its record and the run's stderr."""
    m = matrix(tmp, ("h", fake_python(tmp, body)), timeout_s=timeout_s)
    res = run(tmp, "-m", str(m), *args)
    assert "Traceback" not in res.stderr, res.stderr
    (rec,) = records(tmp, "h")
    return rec, res.stderr


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


# ---------------------------------------------------------------- output is untrusted


def test_invalid_utf8_around_and_inside_a_record_is_read_leniently(tmp_path: Path) -> None:
    rec, _ = one(
        tmp_path,
        """
        GOOD["device"] = {"name": "GPU-NAME"}
        line = json.dumps(GOOD).encode().replace(b"GPU-NAME", b"\\xff\\xfeGPU")
        out.write(b"\\xc3\\x28 garbage \\xff\\n" + line + b"\\n\\xff\\xff")
        """,
    )
    assert rec["status"] == "ok"
    assert rec["device"]["name"].endswith("GPU") and "\ufffd" in rec["device"]["name"]


def test_garbage_only_is_one_error_record_and_the_other_host_goes_on(tmp_path: Path) -> None:
    bad = fake_python(tmp_path, "out.write(bytes(range(256)) * 100); sys.exit(0)", "bad")
    good = fake_python(tmp_path, "print(json.dumps(GOOD))", "good")
    m = matrix(tmp_path, ("bad", bad), ("good", good))
    res = run(tmp_path, "-m", str(m))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    (b,) = records(tmp_path, "bad")
    (g,) = records(tmp_path, "good")
    assert b["status"] == "error" and "no result record" in b["error"]
    assert g["status"] == "ok"


def test_a_deeply_nested_record_is_an_error_saying_why(tmp_path: Path) -> None:
    rec, _ = one(
        tmp_path,
        """
        line = json.dumps(GOOD)[:-1] + ', "run": {"x": ' + "[" * 100000 + "]" * 100000 + "}}"
        print(line)
        """,
    )
    assert rec["status"] == "error"
    assert "rejected" in rec["error"] and "nested too deeply" in rec["error"]


def test_unbounded_output_costs_bounded_memory(tmp_path: Path) -> None:
    """768 MiB of output (no newline, then a record): the orchestrator keeps a bounded
    tail, the record at its end is still found, and the run's peak memory stays small."""
    m = matrix(
        tmp_path,
        (
            "h",
            fake_python(
                tmp_path,
                """
                chunk = b"x" * 2**20
                for _ in range(768):
                    out.write(chunk)
                out.write(b"\\n" + json.dumps(GOOD).encode() + b"\\n")
                """,
            ),
        ),
    )
    # The run's peak RSS, measured in a wrapper whose only children are the orchestrator and
    # its fake bench (this test process's own children include earlier tests' TensorFlows).
    wrapper = (
        "import resource, subprocess, sys; "
        "rc = subprocess.run(sys.argv[1:], capture_output=True).returncode; "
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    argv = [sys.executable, "-m", "mxbench", "run", "-r", str(tmp_path / "results"), "-m", str(m)]
    out = subprocess.run([sys.executable, "-c", wrapper, *argv], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    rc, peak_kib = (int(x) for x in out.stdout.split())
    assert rc == 0, out.stderr
    (rec,) = records(tmp_path, "h")
    assert rec["status"] == "ok"
    assert rec["run"]["stdout_dropped_bytes"] > 600 * 2**20
    # 768 MiB of output would be >1.5 GiB as text.
    assert peak_kib < 450 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"


# ---------------------------------------------------------------- the process group


def test_a_grandchild_holding_stdout_neither_hangs_the_cell_nor_survives_it(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    rec, _ = one(
        tmp_path,
        f"""
        child = subprocess.Popen(["sleep", "300"])  # inherits stdout, same process group
        open({str(pids)!r}, "w").write(str(child.pid))
        print(json.dumps(GOOD), flush=True)
        """,
        timeout_s=60,
    )
    took = time.monotonic() - t0
    assert rec["status"] == "ok"
    assert took < 30, f"the run waited {took:.0f} s for a grandchild"
    assert not alive(int(pids.read_text()))


def test_a_grandchild_that_left_the_group_costs_seconds_not_the_timeout(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    try:
        rec, _ = one(
            tmp_path,
            f"""
            child = subprocess.Popen(["sleep", "300"], start_new_session=True)
            open({str(pids)!r}, "w").write(str(child.pid))
            print(json.dumps(GOOD), flush=True)
            """,
            timeout_s=120,
        )
        assert rec["status"] == "ok"
        assert time.monotonic() - t0 < 40
    finally:
        if pids.exists():  # the grandchild the test made: gone before the test ends
            pid = int(pids.read_text())
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)


def test_the_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    rec, _ = one(
        tmp_path,
        f"""
        child = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL)
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
        """,
        timeout_s=3,
    )
    assert rec["status"] == "timeout"
    for pid in map(int, pids.read_text().split()):
        assert not alive(pid)


def test_kill_9_of_the_orchestrator_kills_its_bench(tmp_path: Path) -> None:
    """A parent-death signal: the bench does not outlive `mxbench run`."""
    pids = tmp_path / "pids"
    py = fake_python(
        tmp_path,
        f"""
        open({str(pids)!r}, "w").write(str(os.getpid()))
        time.sleep(300)
        """,
    )
    m = matrix(tmp_path, ("h", py))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mxbench", "run", "-m", str(m), "-r", str(tmp_path / "r")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() or not pids.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        bench = int(pids.read_text())
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while alive(bench) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(bench), "the bench outlived the orchestrator"
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------- lies


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("print(json.dumps(GOOD)); sys.exit(3)", "ok record but exited with code 3"),
        (
            """
            GOOD["metrics"] = {"step_ms": {"median": 1e9, "n": 3}, "images_per_s": 4e-6}
            print(json.dumps(GOOD))
            """,
            "add up to 3e+06 s, but the bench ran for",
        ),
        (
            """
            GOOD["metrics"]["step_ms"]["samples"] = [10.0] * 500
            print(json.dumps(GOOD))
            """,
            "500 timed steps, the cell ran 3",
        ),
        (
            """
            GOOD["metrics"]["images_per_s"] = 1e9
            print(json.dumps(GOOD))
            """,
            "1e+09 images/s",
        ),
        (
            """
            GOOD["metrics"]["step_ms"]["min"] = 50.0
            print(json.dumps(GOOD))
            """,
            "out of order",
        ),
        ('GOOD["metrics"] = {}; print(json.dumps(GOOD))', "without step times"),
    ],
    ids=["exit-code", "longer-than-its-life", "more-steps", "rate", "order", "no-times"],
)
def test_an_ok_the_process_cannot_have_measured_is_an_error(
    tmp_path: Path, body: str, why: str
) -> None:
    rec, _ = one(tmp_path, body)
    assert rec["status"] == "error"
    assert why in rec["error"], rec["error"]


def test_the_orchestrator_stamps_label_source_host_time_and_exit_code(tmp_path: Path) -> None:
    rec, _ = one(
        tmp_path,
        """
        GOOD.update(label="forged", source="forged", host="elsewhere", cell="c0ffee",
                    time="2099-01-01T00:00:00+00:00", engine="docker",
                    run={"exit_code": 7, "wall_s": 1e6})
        GOOD["params"] = {"batch_size": 4096, "policy": "mixed_float16"}
        print(json.dumps(GOOD))
        """,
        "--label",
        "mine",
    )
    assert rec["status"] == "ok"
    assert (rec["label"], rec["source"], rec["host"], rec["engine"]) == ("mine", None, "h", "local")
    assert rec["cell"] != "c0ffee" and not rec["time"].startswith("2099")
    assert rec["params"]["batch_size"] == 4 and rec["params"]["policy"] == "float32"
    assert rec["run"]["exit_code"] == 0 and rec["run"]["wall_s"] < 1000


def test_the_next_run_sweeps_what_a_killed_run_left(tmp_path: Path) -> None:
    """A grandchild that left the bench's session survives `kill -9` of the orchestrator
    (no parent-death signal reaches it); the next run on this machine kills it."""
    pids = tmp_path / "pids"
    py = fake_python(
        tmp_path,
        f"""
        if "mixed_float16" not in sys.argv:
            child = subprocess.Popen(["sleep", "300"], start_new_session=True)
            open({str(pids)!r}, "w").write(str(child.pid))
            time.sleep(300)
        print(json.dumps(GOOD))
        """,
    )
    m = matrix(tmp_path, ("h", py))
    killed_once(tmp_path, m, pids)
    left = int(pids.read_text())
    try:
        time.sleep(0.5)
        assert alive(left)  # escaped both the process group and the parent-death signal
        doc = json.loads(m.read_text())
        doc["axes"]["policy"] = ["mixed_float16"]
        m.write_text(json.dumps(doc))
        res = run(tmp_path, "-m", str(m))
        assert res.returncode == 0, res.stderr
        assert "killed stale bench processes (1) left by an earlier run" in res.stderr
        assert not alive(left)
    finally:
        if alive(left):
            os.kill(left, signal.SIGKILL)


def test_the_next_run_removes_the_memory_cgroup_a_killed_run_left(tmp_path: Path) -> None:
    from mxbench.engines.cgroup import CgroupUnavailable, MemoryCgroup

    try:
        MemoryCgroup(2**28, "probe").remove()
    except CgroupUnavailable as exc:
        pytest.skip(f"no writable memory cgroup here: {exc}")
    started = tmp_path / "started"
    py = fake_python(
        tmp_path,
        f"""
        if "mixed_float16" not in sys.argv:
            open({str(started)!r}, "w").write(open("/proc/self/cgroup").read())
            time.sleep(300)
        print(json.dumps(GOOD))
        """,
    )
    m = matrix(tmp_path, ("h", py))
    doc = json.loads(m.read_text())
    doc["hosts"][0]["memory_limit"] = "512m"
    m.write_text(json.dumps(doc))
    killed_once(tmp_path, m, started)
    names = {line.rpartition("/")[2] for line in started.read_text().splitlines()}
    (name,) = {n for n in names if n.startswith("mxbench-")}
    left = [p for p in Path("/sys/fs/cgroup").glob(f"*/{name}")]
    assert left  # kill -9: nobody removed it
    doc["axes"]["policy"] = ["mixed_float16"]
    m.write_text(json.dumps(doc))
    res = run(tmp_path, "-m", str(m))
    assert res.returncode == 0, res.stderr
    assert "removed stale memory cgroups (1) left by an earlier run" in res.stderr
    assert not any(p.exists() for p in left)
