"""`mxbench run` end to end with the local engine: real bench processes, real TensorFlow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

TINY = """\
benchmark:
  image_size: 32
  warmup_steps: 1
  steps: {steps}
  timeout_s: {timeout}
  repeats: 1
axes:
  policy: [float32, mixed_bfloat16]
  batch_size: [4, 8]
hosts:
  - name: box
    engine: local
"""


def write_matrix(tmp_path: Path, steps: int = 3, timeout: float = 300) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(TINY.format(steps=steps, timeout=timeout))
    return path


def mxbench(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args],
        capture_output=True,
        text=True,
        timeout=600,
        **kw,  # type: ignore[arg-type]
    )


def records(results: Path) -> list[dict]:
    path = results / "box.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    tmp = tmp_path_factory.mktemp("run")
    matrix = write_matrix(tmp)
    results = tmp / "results"
    proc = mxbench("run", "--matrix", str(matrix), "--results", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return matrix, results, proc.stderr, proc.stdout


def test_every_cell_recorded_once_and_complete(first_run: tuple[Path, Path, str, str]) -> None:
    _, results, log, out = first_run
    recs = records(results)
    assert len(recs) == 4
    assert {(r["params"]["policy"], r["params"]["batch_size"]) for r in recs} == {
        ("float32", 4), ("float32", 8), ("mixed_bfloat16", 4), ("mixed_bfloat16", 8),
    }  # fmt: skip
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert (r["host"], r["engine"]) == ("box", "local")
        assert len(r["cell"]) == 16
        step = r["metrics"]["step_ms"]
        assert step["n"] == 3 and 0 < step["p25"] <= step["median"] <= step["p75"]
        assert r["device"]["kind"] == "cpu"
        assert r["run"]["wall_s"] > 0
    # not a terminal: one plain line per cell, so CI logs stay readable
    assert sum(1 for line in log.splitlines() if line.startswith("[")) == 4
    assert "[4/4] box" in log
    # the answer last: a verdict line per comparison, none claimed from one process each
    said = out.strip().splitlines()
    assert len(said) == 2 and all("too few processes for a verdict" in line for line in said)
    assert (
        said[0].startswith("mixed_bfloat16: ")
        and " the speed of float32 at batch 4 on box · " in said[0]
    )


def test_unusable_host_is_recorded_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        TINY.format(steps=1, timeout=60).replace("image_size: 32", "image_size: 32\n  data: /nope")
    )
    results = tmp_path / "results"
    proc = mxbench("run", "-m", str(path), "-r", str(results))
    assert proc.returncode == 1
    recs = records(results)
    assert len(recs) == 4 and all("/nope" in r["error"] for r in recs)
    assert os.path.exists(results / "box.jsonl")


def test_a_local_python_without_mxbench_stops_before_any_cell(tmp_path: Path) -> None:
    bare = tmp_path / "bare"  # a real interpreter with nothing installed
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    path = write_matrix(tmp_path)
    text = path.read_text().replace(
        "engine: local", f"engine: local\n    python: {bare}/bin/python"
    )
    path.write_text(text)
    results = tmp_path / "results"
    proc = mxbench("run", "-m", str(path), "-r", str(results))
    assert proc.returncode == 2, proc.stderr
    assert f"{bare}/bin/python cannot import mxbench" in proc.stderr
    source = re.search(r"-m pip install -e '(.+)\[tf\]'", proc.stderr)
    assert source is not None and (Path(source[1]) / "pyproject.toml").is_file(), proc.stderr
    assert "Traceback" not in proc.stderr
    assert records(results) == []  # nothing attempted, nothing recorded
