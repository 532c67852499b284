"""Out of memory, for real: the kernel's OOM killer, under a memory cgroup, kills a bench
whose batch cannot fit, and `mxbench run` records the cell as `oom` (exit 0: an OOM is a
valid final result) and goes on to the next cell, which starts clean in a fresh process.

Why not TensorFlow's own ResourceExhaustedError on CPU: under an address-space limit
(RLIMIT_AS) TF 2.21 raised it cleanly in 3 of 3 quiet runs at 4 GiB, but in CI under load
the same process died of SIGSEGV during import; oneDNN's allocator also segfaults instead
of raising. The kernel OOM kill is deterministic. (The bench's ResourceExhaustedError ->
`oom` mapping is the GPU path; it is unit-tested in test_bench_units.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_helpers import run_bench
from conftest import require_service

pytest.importorskip("tensorflow")

MEMCG = Path("/sys/fs/cgroup/memory")  # cgroup v1 memory controller (this machine kind)
LIMIT = 1536 * 2**20  # TF import + a small cell fit; batch 512 at 256 px needs many GiB


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    require_service(os.access(MEMCG, os.W_OK), "a writable memory cgroup (root)")
    group = MEMCG / f"mxbench-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
        swap = group / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(LIMIT))
        yield group
    finally:
        for pid in (group / "tasks").read_text().split():  # nothing may outlive the test
            subprocess.run(["kill", "-9", pid], check=False)
        group.rmdir()


def test_cell_killed_for_memory_is_an_oom_record_and_the_run_goes_on(
    memory_cgroup: Path, tmp_path: Path
) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "benchmark: {image_size: 256, warmup_steps: 1, steps: 2, timeout_s: 600}\n"
        "axes: {policy: [float32], batch_size: [512, 2]}\n"
        "hosts:\n  - {name: box, engine: local}\n"
    )
    results = tmp_path / "results"

    def enter_cgroup() -> None:
        (memory_cgroup / "tasks").write_text(str(os.getpid()))

    proc = subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "-m", str(matrix), "-r", str(results)],
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=enter_cgroup,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(line) for line in (results / "box.jsonl").read_text().splitlines()]
    by_batch = {r["params"]["batch_size"]: r for r in recs}
    assert by_batch[512]["status"] == "oom", by_batch[512].get("error")
    assert "killed (out of memory)" in by_batch[512]["error"]
    assert by_batch[2]["status"] == "ok", by_batch[2].get("error")  # the next cell ran clean
    assert by_batch[2]["metrics"]["peak_memory_bytes"] < LIMIT


def test_other_failures_are_error_records(tmp_path) -> None:
    # a file that is not an image, in Imagenette layout: decoding fails inside TensorFlow
    bad = tmp_path / "train" / "n01440764"
    bad.mkdir(parents=True)
    (bad / "broken.jpg").write_bytes(b"this is not a jpeg")
    run = run_bench("--data", str(tmp_path), "--image-size", "32", "--batch-size", "1",
                    "--steps", "1", "--warmup-steps", "0")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "error"
    assert rec["error"] and "InvalidArgumentError" in rec["error"]
    assert rec["software"]["tensorflow"]
