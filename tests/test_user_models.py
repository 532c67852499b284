"""A user's own model through the real CLI and every engine: the record stream stays one
clean line per cell whatever the model does, the model's source is part of the cell key,
and local processes, Docker containers and Slurm jobs all reach the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import user_models
from bench_helpers import run_bench
from conftest import matrix_text, mxbench, records, require_service, slurm_up

pytest.importorskip("keras")

TINY = ["--image-size", "16", "--batch-size", "2", "--steps", "2", "--warmup-steps", "1"]


def test_bench_keeps_stdout_for_the_record_when_the_model_prints(tmp_path: Path) -> None:
    path = user_models.write(tmp_path, "loud", user_models.FLOAT16_OUTPUT)
    run = run_bench("--model", f"{path}:build", "--policy", "mixed_float16", *TINY)
    assert run.returncode == 0, run.stderr[-2000:]
    rec = run.record  # exactly one line on stdout
    assert rec["status"] == "ok", rec["error"]
    assert "hello from build()" in run.stderr
    m = rec["model"]
    assert m["source"] == "file" and len(m["source_sha256"]) == 16
    assert m["output_dtype"] == "float16" and "the output is float16" in m["warnings"][0]
    assert m["flops_per_example"] > 0 and m["flops_source"] == "analytic"
    assert rec["metrics"]["achieved_tflops"] > 0


@pytest.mark.parametrize("case", ["import_error", "raises", "returns_int", "exits"])
def test_a_broken_model_is_an_error_record_not_a_crash(tmp_path: Path, case: str) -> None:
    source, says = user_models.BAD[case]
    path = user_models.write(tmp_path, case, source)
    run = run_bench("--model", f"{path}:build", *TINY)
    assert run.returncode == 0, run.stderr[-2000:]
    rec = run.record
    assert rec["status"] == "error" and says in rec["error"], rec["error"]
    assert rec["model"]["name"] == f"{path}:build"


def _matrix(folder: Path, model_axis: str, host: str = "  - {name: here, engine: local}",
            timeout_s: int = 300) -> Path:  # fmt: skip
    path = folder / "matrix.yaml"
    path.write_text(
        "version: 1\n"
        f"benchmark: {{image_size: 16, warmup_steps: 1, steps: 2, timeout_s: {timeout_s}, "
        "repeats: 1}\n"
        f"axes: {{model: {model_axis}, policy: [float32], batch_size: [2]}}\n"
        f"hosts:\n{host}\n"
    )
    return path


def test_editing_the_model_makes_resume_measure_it_again(tmp_path: Path) -> None:
    user_models.write(tmp_path / "nets", "mine", user_models.GOOD)
    m = _matrix(tmp_path, "[blog-cnn, nets/mine.py:build]")  # relative to the matrix file
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=tmp_path.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(results)
    assert {r["status"] for r in recs} == {"ok"} and len(recs) == 2
    mine = next(r for r in recs if r["model"]["source"] == "file")
    assert mine["params"]["model"] == f"{tmp_path / 'nets' / 'mine.py'}:build"
    again = mxbench("run", "-m", str(m), "--results", str(results), "--resume", "--dry-run",
                    cwd=tmp_path)  # fmt: skip
    assert "2 cell(s) already done" in again.stdout, again.stdout
    (tmp_path / "nets" / "mine.py").write_text(user_models.GOOD.replace("12,", "16,"))
    edited = mxbench("run", "-m", str(m), "--results", str(results), "--resume", "--dry-run",
                     cwd=tmp_path)  # fmt: skip
    assert "1 cell(s) already done" in edited.stdout and "mine.py:build" in edited.stdout


def test_a_missing_model_file_or_function_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    user_models.write(tmp_path, "mine", user_models.GOOD)
    for axis, says in (
        ("[missing.py:build]", "axes.model: model"),
        ("[mine.py:make]", "defines no 'make'"),
        ("[resnet]", "a built-in model (blog-cnn"),
    ):
        m = _matrix(tmp_path, axis)
        for command in (["run", "--dry-run"], ["doctor"]):
            out = mxbench(*command, "--matrix", str(m), cwd=tmp_path)
            assert out.returncode == 2, (command, out.stdout, out.stderr)
            assert says in out.stderr, out.stderr
            assert "Traceback" not in out.stderr


def test_a_model_declares_its_smallest_input_and_flops_and_shows_the_input_it_took(
    tmp_path: Path,
) -> None:
    user_models.write(tmp_path, "fixed", user_models.FIXED)
    m = tmp_path / "matrix.yaml"
    text = (
        "version: 1\n"
        "benchmark: {model: fixed.py:build, warmup_steps: 0, steps: 1, profile: off, "
        "repeats: 1, SIZE}\n"
        "axes: {policy: [float32], batch_size: [2]}\n"
        "hosts:\n  - {name: here, engine: local}\n"
    )
    m.write_text(text.replace(", SIZE", ", image_size: 32"))  # below its declared smallest
    small = mxbench("run", "--dry-run", "--matrix", str(m), cwd=tmp_path)
    assert small.returncode == 2, small.stdout + small.stderr
    assert "benchmark.image_size: 32 px is below fixed.py:build's smallest input (40 px)" in (
        small.stderr
    ), small.stderr
    m.write_text(text.replace(", SIZE", ""))  # no image size named: the cell asks 256
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = records(results)
    assert rec["status"] == "ok", rec["error"]
    assert rec["params"]["image_size"] == 256 and rec["model"]["image_input"] == [40, 48]
    assert rec["model"]["flops_source"] == "formula"
    assert rec["model"]["flops_per_example"] == 3 * user_models.FIXED_FORWARD_FLOPS
    report = mxbench("report", "--results", str(results), "--markdown", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    setup = next(line for line in report.stdout.splitlines() if "setup:" in line)
    assert "image_size 40 · image_width 48" in setup and "256" not in setup, setup
    assert "0.00249 GFLOP/example to train (formula)" in report.stdout


def test_a_model_that_hangs_is_a_timeout(tmp_path: Path) -> None:
    user_models.write(tmp_path, "hangs", user_models.HANGS)
    m = _matrix(tmp_path, "[hangs.py:build]", timeout_s=15)
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=tmp_path)
    assert out.returncode == 1
    (rec,) = records(results)
    assert rec["status"] == "timeout"


def test_a_user_model_in_a_docker_container(built: dict, ctx: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    path = user_models.write(folder, "mine", user_models.GOOD)
    m = ctx / "user-model.yaml"
    m.write_text(
        matrix_text("  - {name: box, engine: docker, images: [cpu]}").replace(
            "axes: {", f"axes: {{model: ['{path}:build'], "
        )
    )
    results = tmp_path / "results"
    out = mxbench("run", "--matrix", str(m), "--results", str(results), cwd=ctx)
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = records(results)
    assert rec["status"] == "ok", rec["error"]
    assert rec["engine"] == "docker" and rec["model"]["source"] == "file"
    assert rec["model"]["layers"]["Conv2D"] == 1


def test_a_user_model_as_a_slurm_job(tmp_path: Path) -> None:
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")
    path = user_models.write(tmp_path / "shared", "mine", user_models.GOOD)
    host = f"  - {{name: cluster, engine: slurm, workdir: {tmp_path / 'work'}}}"
    m = _matrix(tmp_path, f"['{path}:build']", host=host)
    env = {**os.environ, "MXBENCH_SLURM_POLL_S": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", str(m), "--results",
         str(tmp_path / "results")], capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = [
        json.loads(x) for x in (tmp_path / "results" / "cluster.jsonl").read_text().splitlines()
    ]
    assert rec["status"] == "ok" and rec["engine"] == "slurm", rec["error"]
    assert rec["model"]["source_sha256"] and rec["model"]["layers"]["Dense"] == 1
