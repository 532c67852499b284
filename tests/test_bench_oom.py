"""Out of memory, for real: the bench process runs under an address-space limit with a batch
that cannot fit, TensorFlow raises ResourceExhaustedError, and the bench writes an `oom`
record and exits 0.

TF_ENABLE_ONEDNN_OPTS=0: with oneDNN on, TensorFlow 2.21's CPU allocator ("mklcpu") returns
no memory and the process then dies of SIGSEGV instead of raising (measured here); a
crashed process is the orchestrator's to record, not the bench's.
"""

from __future__ import annotations

import os
import resource

import pytest

from bench_helpers import run_bench

pytest.importorskip("tensorflow")

# TensorFlow's import and a tiny cell peak at about 1.9 GiB of address space here; thread
# stacks add to that with the core count. A 512-image batch at 256 px: 0.4 GiB of input,
# 1 GiB per first-layer activation, several GiB for one step: it cannot fit. Measured here
# (3 runs each): 4 GiB with batch 512 always gave ResourceExhaustedError; tighter limits
# (3-3.5 GiB) sometimes fail an unguarded allocation (abort, SIGSEGV), and batch 1024 can
# fail earlier in graph optimisation (InvalidArgumentError on a 2 GiB constant).
LIMIT = 4 * 2**30 + 16 * 2**20 * (os.cpu_count() or 1)


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_batch_that_cannot_fit_is_an_oom_record() -> None:
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"}
    run = run_bench(
        *("--image-size", "256", "--batch-size", "512", "--steps", "2", "--warmup-steps", "1"),
        env=env,
        preexec_fn=_limit_address_space,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "oom", rec.get("error")
    assert "OOM when allocating tensor" in rec["error"]
    assert rec["settings"]["onednn"] == "0"
    assert "step_ms" not in rec["metrics"]
    assert rec["metrics"]["peak_memory_kind"] == "rss"
    assert rec["metrics"]["peak_memory_bytes"] < LIMIT
    assert rec["device"]["kind"] == "cpu"


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
