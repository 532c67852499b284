"""Faults of a Slurm controller, injected at our own seam: an ``scontrol`` wrapper on PATH
that answers as an unreachable controller does, in front of the real one-node cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from conftest import require_service, slurm_up
from test_faults import fake_python, records


def test_a_finished_cell_is_kept_while_the_controller_does_not_answer(tmp_path: Path) -> None:
    """The controller stops answering `scontrol show job` once the job is submitted; the
    task's result is on the shared disk, so the cell is ok (not an error 10 minutes later)."""
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")
    real = shutil.which("scontrol")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "scontrol"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = show ] && [ "$2" = job ]; then\n'
        "  echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\n"
        "  exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    host = f"cut-{uuid.uuid4().hex[:6]}"
    py = fake_python(tmp_path, "print(json.dumps(GOOD))")
    doc = {
        "benchmark": {"image_size": 32, "warmup_steps": 1, "steps": 3},
        "axes": {"policy": ["float32"], "batch_size": [4]},
        "hosts": [{"name": host, "engine": "slurm", "python": str(py),
                   "workdir": str(tmp_path / "work")}],
    }  # fmt: skip
    (tmp_path / "matrix.yaml").write_text(json.dumps(doc))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MXBENCH_SLURM_POLL_S": "1"}
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", "matrix.yaml", "-r", "results"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert "Unable to contact slurm controller" in res.stderr  # the retries said so
    (rec,) = records(tmp_path, host)
    assert rec["status"] == "ok" and rec["run"]["exit_code"] == 0
    assert took < 120, f"{took:.0f} s"
