"""Failures inside the bench. Out of memory for real (a host's ``memory_limit``: the
kernel's OOM killer in a memory cgroup, Docker's limit, Slurm's --mem) is part of the engine
contract (test_engine_contract.py).

Why the kernel's kill and not TensorFlow's own ResourceExhaustedError on CPU: under an
address-space limit (RLIMIT_AS) TF 2.21 raised it cleanly in 3 of 3 quiet runs at 4 GiB, but
in CI under load the same process died of SIGSEGV during import; oneDNN's allocator also
segfaults instead of raising. The kernel OOM kill is deterministic. (The bench's
ResourceExhaustedError -> `oom` mapping is the GPU path; it is unit-tested in
test_bench_units.)
"""

from __future__ import annotations

import pytest

from bench_helpers import run_bench

pytest.importorskip("tensorflow")


def test_other_failures_are_error_records(tmp_path) -> None:
    # a file that is not an image, in Imagenette layout: decoding fails in the input pipeline
    bad = tmp_path / "train" / "n01440764"
    bad.mkdir(parents=True)
    (bad / "broken.jpg").write_bytes(b"this is not a jpeg")
    run = run_bench("--data", str(tmp_path), "--image-size", "32", "--batch-size", "1",
                    "--steps", "1", "--warmup-steps", "0")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "error"
    assert rec["error"] and "cannot identify image file" in rec["error"]
    assert "broken.jpg" in rec["error"]  # the error names the file
    assert rec["software"]["tensorflow"]
