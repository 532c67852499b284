"""Serving cells on the real backends (issue 37): ``mxbench bench --mode infer`` builds the
zoo's blog-cnn at 32 px on TensorFlow, JAX and PyTorch, times its inference calls only and
prints a record with their latency percentiles, the calls each rests on, and (a policy
other than float32) the gate against float32's outputs."""

from __future__ import annotations

from typing import Any

import pytest

import cpu_kinds
from bench_helpers import run_bench

pytest.importorskip("keras")

CALLS = 40  # p50 and p90 get intervals (6 and 36 needed), p99 needs 368
SMALL = ["--model", "blog-cnn", "--image-size", "32", "--warmup-steps", "2"]


def _infer(backend: str, *args: str, kind: str | None = None) -> dict[str, Any]:
    """A serving cell's record; ``kind``: run as that CPU kind (tests/cpu_kinds.py)."""
    run = run_bench(*SMALL, "--mode", "infer", "--backend", backend, "--steps", str(CALLS), *args,
                    env=cpu_kinds.env(kind) if kind else None)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "ok", rec["error"]
    return rec


def _latency(rec: dict[str, Any], batch: int) -> dict[str, Any]:
    inf = rec["inference"]
    assert inf["batch"] == batch and inf["calls"] == CALLS and inf["warmup_calls"] == 2
    assert inf["sync"] == "to_numpy"
    step = rec["metrics"]["step_ms"]
    assert step["n"] == CALLS and len(step["samples"]) == CALLS  # one sample per call
    p50, p90, p99 = inf["percentiles"]
    assert [p["q"] for p in (p50, p90, p99)] == [0.5, 0.9, 0.99]
    assert all(p["n"] == CALLS for p in (p50, p90, p99))
    assert p50["low_ms"] <= p50["ms"] <= p50["high_ms"] <= p90["high_ms"]
    assert p99["ms"] is None and p99["needs"] == 368  # too few calls: no figure
    rate = rec["metrics"]["images_per_s"]
    assert rate == inf["images_per_s"] and rate > 0
    # the rate follows from the calls: batch x calls / the window they fill
    assert rate <= batch * 1000.0 / min(step["samples"]) * 1.01
    # no training ran: no losses, no optimizer, no one-step check
    assert rec["metrics"]["losses"] == [] and rec["settings"]["loss_scaling"] is False
    assert rec["convergence"] is None
    prof = rec["profile"]
    if rec["params"]["backend"] != "jax":  # what ran the convolutions: oneDNN or another path
        cpu_kinds.check_kernels(rec)
    if rec["params"]["backend"] == "tensorflow":  # the kernels oneDNN created (warm-up)
        assert prof["device"] == "cpu" and prof["breakdown_ms"] == {} and prof["steps"] is None
    else:  # what ran: a profiled window of the cell's own calls, after the timed ones
        assert prof["error"] is None and prof["steps"] > 0 and prof["device"] == "cpu"
        assert prof["tool"] == f"{rec['params']['backend']}.profiler"
        # the window's call split by category (the host's gaps included) is the call; the
        # convolutions ran in it, and no optimizer did (at batch 1 eager PyTorch spends as
        # much on Keras' layout copies and its own dispatch as on them)
        parts = prof["breakdown_ms"]
        assert sum(parts.values()) == pytest.approx(prof["step_ms"], rel=0.1)
        assert parts["conv_matmul"] > 0 and parts["optimizer"] == 0
        assert "conv_matmul" in {op["category"] for op in prof["top_ops"][:3]}
        assert rec["metrics"]["phases_s"]["profile"] > 0
    assert rec["metrics"]["peak_memory_bytes"] > 0
    return inf


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_a_serving_cell_times_inference_calls_at_batch_1(backend: str) -> None:
    rec = _infer(backend, "--batch-size", "1")
    inf = _latency(rec, 1)
    assert rec["params"]["mode"] == "infer" and inf["call"] == "direct"
    assert inf["gate"] is None  # float32 is the reference
    assert rec["settings"]["input_device"] == "device" and rec["settings"]["jit_compile"] is False


# oneDNN off or kept from bf16 (an AVX2-only CPU), and the best this CPU has (AMX capped at
# what exists); test_profile's cells run the kind between too. JAX: XLA's own kernels.
SERVED_KINDS = [(b, k) for b in ("tensorflow", "torch") for k in ("avx2", "amx")]


@pytest.mark.parametrize(("backend", "kind"), [*SERVED_KINDS, ("jax", None)])
def test_a_16_bit_serving_cell_is_gated_against_float32(backend: str, kind: str | None) -> None:
    """Under each CPU kind, what ran the bf16 convolutions is what the CPU and the settings
    allow (cpu_kinds.check_kernels): oneDNN's kernels, or the path that ran instead."""
    rec = _infer(backend, "--batch-size", "8", "--policy", "mixed_bfloat16", kind=kind)
    inf = _latency(rec, 8)
    assert rec["settings"]["compute_dtype"] == "bfloat16"
    gate = inf["gate"]
    assert gate["ran"] and gate["examples"] == 256 and gate["note"].startswith("float32 given")
    # bfloat16 rounding: close to float32's outputs, not equal to them
    assert 0.99 < gate["cosine"] <= 1.0 and 0 < gate["max_abs_diff"] < 0.05
    assert 0.5 < gate["top1_agreement"] <= 1.0
    assert gate["passed"] == (gate["top1_agreement"] >= 0.99 and gate["cosine"] >= 0.99)
    assert rec["metrics"]["phases_s"]["check"] > 0  # the gate ran after the timed calls
    if backend == "tensorflow" and rec["profile"]["onednn"]["ran"]:  # the kernels are the
        assert rec["profile"]["onednn"]["sixteen_bit_share"] == 1.0  # cell's, not float32's


@pytest.mark.parametrize(
    ("backend", "args", "xla"),
    [("tensorflow", (), False), ("jax", (), True), ("torch", (), False)],
)
def test_a_compiled_call_is_recorded_with_its_compiler(
    backend: str, args: tuple[str, ...], xla: bool
) -> None:
    """``call: compiled``: tf.function (XLA with jit_compile on), jax.jit, torch.compile;
    the first warm-up call traces and compiles, so it costs more than a compiled call."""
    rec = _infer(backend, "--batch-size", "1", "--call", "compiled", *args)
    inf = _latency(rec, 1)
    assert inf["call"] == "compiled" and rec["settings"]["input_device"] == "device"
    assert rec["settings"]["jit_compile"] is xla
    assert inf["first_call_ms"] > 2 * rec["metrics"]["step_ms"]["median"]


def test_keras_loops_and_int8_quantization_are_recorded() -> None:
    rec = _infer(
        "tensorflow", "--batch-size", "8", "--call", "predict_on_batch", "--quantize", "int8"
    )
    inf = _latency(rec, 8)
    assert inf["call"] == "predict_on_batch" and rec["settings"]["input_device"] == "host"
    assert inf["quantize"] == "int8" and inf["quantized_layers"] == {"Dense": 1}
    # float32 quantized is gated too, against float32 rebuilt from the same seed
    assert inf["gate"]["ran"] and inf["gate"]["note"].startswith("float32 built from the same seed")


@pytest.mark.parametrize("mode", ["float8", "int4"])
def test_keras_other_quantized_modes_run_and_are_gated(mode: str) -> None:
    inf = _latency(_infer("tensorflow", "--batch-size", "8", "--quantize", mode), 8)
    assert inf["quantize"] == mode and inf["quantized_layers"] == {"Dense": 1}
    assert inf["gate"]["ran"] and 0.99 < inf["gate"]["cosine"] <= 1.0


def test_a_serving_option_on_a_training_cell_is_a_usage_error() -> None:
    run = run_bench(*SMALL, "--call", "predict")
    assert run.returncode == 2 and run.stdout == ""
    assert "--call: predict: applies to infer cells only (set mode: infer)" in run.stderr
