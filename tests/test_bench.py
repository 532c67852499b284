"""`mxbench bench` end to end with the real TensorFlow, on small shapes.

Each bench process pays TensorFlow's import, so one record per policy is shared by
several assertions (module-scoped fixtures).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import msgspec
import pytest

from bench_helpers import SMALL, BenchRun, run_bench, shared_bench
from mxbench.records.record import SCHEMA, Record

pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def f32() -> BenchRun:
    return run_bench("--model", "blog-cnn", "--policy", "float32", *SMALL, "--jit-compile", "off")


@pytest.fixture(scope="module")
def mixed() -> BenchRun:
    # float16 is emulated on a CPU (about a second a step at 32 px): two timed steps and no
    # profiled window (its four steps; a window's failure would not fail the cell anyway)
    few = ["--image-size", "32", "--batch-size", "8", "--steps", "2", "--warmup-steps", "1"]
    return run_bench("--policy", "mixed_float16", *few, "--data", "synthetic", "--profile", "off")


def test_exit_zero_and_one_json_line_on_stdout(f32: BenchRun) -> None:
    assert f32.returncode == 0, f32.stderr[-3000:]
    rec = f32.record
    assert rec["schema"] == SCHEMA and rec["status"] == "ok" and rec["error"] is None
    assert [f.name for f in msgspec.structs.fields(Record)] == list(rec)  # every field, in order
    # the orchestrator stamps these
    assert rec["cell"] is None and rec["host"] is None and rec["engine"] is None
    # TensorFlow's own logs went to stderr
    assert "cpu_feature_guard" in f32.stderr or "This TensorFlow binary" in f32.stderr


def test_params_echo_the_arguments(f32: BenchRun) -> None:
    assert f32.record["params"] == {
        "model": "blog-cnn", "policy": "float32", "batch_size": 8, "image_size": 32,
        "image_width": None, "seq_len": 128, "vocab_size": 8192,
        "data": "synthetic", "warmup_steps": 2, "steps": 6, "jit_compile": "off",
        "backend": "tensorflow", "profile": "on", "check": "on", "loss_scale": "auto",
        "steps_per_execution": 1,
        "flip": "none", "epochs": None, "eval_every": 1, "target": None,
        "mode": "train", "call": "direct", "quantize": "none", "weights": "none",
        "train_policy": None, "pairing": "paired",
        "timed_s": 8.0, "devices": 1, "nodes": 1, "scaling": "weak", "allreduce": "native",
        "repeat": None,
    }  # fmt: skip


def test_timing_is_sane(f32: BenchRun) -> None:
    m = f32.record["metrics"]
    s = m["step_ms"]
    assert s["n"] == 6
    assert 0 < s["min"] <= s["p25"] <= s["median"] <= s["p75"] <= s["max"]
    assert s["min"] <= s["mean"] <= s["max"]
    # throughput from the timed window (two syncs), about the mean step (not the median)
    assert m["images_per_s"] == pytest.approx(8 * 1000 / s["mean"], rel=0.05)
    # warm-up (tracing) is excluded from the timed steps and reported on its own
    assert m["first_step_ms"] > s["median"]
    assert m["warmup_ms"] >= m["first_step_ms"]
    assert m["startup_s"] > m["import_s"] > 0
    assert m["startup_s"] > m["warmup_ms"] / 1000
    assert m["achieved_tflops"] > 0 and m["train_flops_per_image"] > 0


def test_phases_account_for_the_process(f32: BenchRun) -> None:
    from mxbench.bench.process.timing import PHASES

    m = f32.record["metrics"]
    phases = m["phases_s"]
    assert set(phases) == set(PHASES) and all(v >= 0 for v in phases.values())
    # the timed window is the steps' sum; the first step and warm-up are the record's own
    assert phases["timed"] == pytest.approx(sum(m["step_ms"]["samples"]) / 1000, rel=0.05)
    assert phases["first_step"] == pytest.approx(m["first_step_ms"] / 1000, abs=0.002)
    assert phases["import"] == pytest.approx(m["import_s"], rel=0.05, abs=0.01)
    # from process start to the first timed step: startup_s, stamped on another clock
    before = sum(phases[k] for k in ("start", "probe", "import", "build", "data", "facts"))
    assert before + phases["first_step"] + phases["warmup"] <= m["startup_s"] + 0.5


def test_losses_and_memory(f32: BenchRun) -> None:
    m = f32.record["metrics"]
    assert m["loss_first"] > 0 and m["loss_last"] > 0
    assert m["loss_scale"] is None
    assert m["peak_memory_kind"] == "rss" and m["peak_memory_bytes"] > 100 * 2**20


def test_environment_probe(f32: BenchRun) -> None:
    rec = f32.record
    assert rec["device"]["kind"] == "cpu" and rec["device"]["compute_capability"] is None
    assert rec["cpu"]["cores"] >= 1 and rec["cpu"]["model"]
    flags = rec["cpu"]["flags"]
    assert "sse2" in flags
    not_compiled = rec["cpu"]["tf_not_compiled_for"]
    assert isinstance(not_compiled, list)
    # every instruction TF names is one this CPU reports (lower-case in /proc/cpuinfo)
    assert all(i.lower() in flags for i in not_compiled)
    sw = rec["software"]
    assert sw["tensorflow"] and sw["keras"].startswith("3.") and sw["backend"] == "tensorflow"
    assert "cuda" in sw and "cuda_compute_capabilities" in sw
    st = rec["settings"]
    assert st["jit_compile"] is False and isinstance(st["tf32"], bool)
    assert st["input_device"] == "host"  # tf.data keeps the batch in host memory
    assert {"onednn", "xla_flags"} <= set(st)
    assert (st["compute_dtype"], st["variable_dtype"]) == ("float32", "float32")
    m = rec["model"]
    assert (m["name"], m["parameters"], m["source"], m["init"]) == (
        "blog-cnn", 1096394, "zoo", "seeded")  # fmt: skip
    assert m["flops_per_example"] == 137387520 and m["flops_source"] == "formula"
    assert m["inputs"] == ["32x32x3 float32"] and m["output_dtype"] == "float32"
    assert m["layers"] == {"BatchNormalization": 3, "Conv2D": 3, "Activation": 1, "Dense": 1,
                           "GlobalAveragePooling2D": 1}  # fmt: skip


def test_mixed_float16_applied_with_loss_scale(mixed: BenchRun) -> None:
    assert mixed.returncode == 0, mixed.stderr[-3000:]
    rec = mixed.record
    assert rec["status"] == "ok"
    st = rec["settings"]
    assert (st["compute_dtype"], st["variable_dtype"]) == ("float16", "float32")
    assert st["loss_scaling"] is True and st["pure_float16"] is False
    scale = rec["metrics"]["loss_scale"]
    assert isinstance(scale, float) and scale > 0
    assert rec["metrics"]["step_ms"]["n"] == 2


def _one_line_exit_2(run: BenchRun, needle: str) -> None:
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batch-size", "0"], "--batch-size 0"),
        (["--policy", "float8"], "--policy 'float8'"),
        (["--data", "/nonexistent/imagenette"], "no such directory"),
        (["--image-size", "4"], "--image-size 4"),
        (["--model", "resnet"], "--model 'resnet'"),
        (["--model", "so-cnn", "--image-size", "16"], "--image-size: 16 px is below so-cnn"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], needle: str) -> None:
    _one_line_exit_2(run_bench(*args, timeout=60), needle)


def test_so_cnn_alone_runs_the_questions_224_by_336() -> None:
    run = run_bench(
        "--model",
        "so-cnn",
        "--batch-size",
        "2",
        "--warmup-steps",
        "0",
        "--steps",
        "1",
        "--profile",
        "off",
        "--check",
        "off",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rec = run.record
    assert rec["status"] == "ok", rec["error"]
    assert (rec["params"]["image_size"], rec["params"]["image_width"]) == (224, 336)
    assert rec["model"]["image_input"] == [224, 336]


def test_record_is_json_serialisable_roundtrip(f32: BenchRun) -> None:
    from mxbench.records.codec import encode, parse_bench_output

    parsed = parse_bench_output(f32.stdout)
    assert parsed is not None
    assert json.loads(encode(parsed)) == f32.record


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_keras_backends_measure_and_say_which_framework(backend: str, tmp_path: Path) -> None:
    from mxbench.engines.compile_cache import CompileCache

    pytest.importorskip(backend)
    cache = CompileCache()  # as the local engine sets it: JAX caches even quick compiles
    added = cache.env(backend, dict(os.environ))  # PyTorch: nothing
    args = ("--backend", backend, "--policy", "mixed_bfloat16", *SMALL)
    run = run_bench(*args, env={**os.environ, **added}) if added else shared_bench(*args)
    assert run.returncode == 0, run.stderr
    assert (len(os.listdir(cache.path)) > 5) == (backend == "jax")  # torch: nothing to cache
    rec = run.record
    assert rec["status"] == "ok", rec["error"]
    assert rec["params"]["backend"] == backend and rec["software"]["backend"] == backend
    assert rec["software"][backend] and rec["software"]["tensorflow"] is None
    assert rec["device"]["framework"] == backend and rec["device"]["kind"] == "cpu"
    assert rec["settings"]["compute_dtype"] == "bfloat16"
    assert rec["settings"]["matmul_precision"]
    by_source = rec["model"]["flops_by_source"]  # jax: XLA's cost analysis beside the others
    assert set(by_source) == {"formula", "analytic"} | ({"xla"} if backend == "jax" else set())
    assert all(v > 0 for v in by_source.values()), by_source
    assert any(r["provenance"] == "measured" and r["backend"] == backend for r in rec["roofs"])
    assert rec["metrics"]["step_ms"]["n"] == 6 and rec["metrics"]["step_ms"]["median"] > 0
    # the synthetic batch is placed once on the backend's device (here its CPU), not copied
    assert (
        rec["settings"]["input_device"]
        in {"jax": {"cpu:0", "TFRT_CPU_0"}, "torch": {"cpu"}}[backend]
    )


def test_jaxlib_cuda_version_reads_as_major_minor() -> None:
    from mxbench.bench.backends import cuda_version

    assert cuda_version("cuda 13000") == "13.0"  # what jaxlib 0.11 on an H100 reports
    assert cuda_version("CUDA 12080") == "12.8"
    assert cuda_version("rocm 6.2") == "rocm 6.2" and cuda_version("  ") is None


def test_a_backend_that_is_not_installed_is_exit_2_with_the_pip_line() -> None:
    # The guarded runner blocks imports by name: make "torch" unimportable for this run.
    env = {**os.environ, "MXBENCH_TEST_BLOCK": "torch"}
    run = run_bench("--backend", "torch", *SMALL, env=env)
    assert run.returncode == 2, run.stderr
    # the fix installs from the checkout mxbench runs from (it is on no package index)
    source = re.search(r"-m pip install -e '(.+)\[torch\]'", run.stderr)
    assert source is not None and (Path(source[1]) / "pyproject.toml").is_file(), run.stderr
    assert "Traceback" not in run.stderr
