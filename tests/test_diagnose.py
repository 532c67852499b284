"""Each diagnosis rule on its own: it fires on the case it names and stays silent otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from mxbench.report import devices
from mxbench.report.diagnosis import rules as dg
from mxbench.report.tables import Table, build
from report_records import rec, typed_all

V100 = {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}
TITAN_XP = {"kind": "gpu", "name": "NVIDIA TITAN Xp", "compute_capability": "6.1"}
M2200 = {"kind": "gpu", "name": "Quadro M2200", "compute_capability": "5.2"}
A100 = {"kind": "gpu", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
XEON_BF16 = {
    "model": "Intel(R) Xeon(R) Platinum 8481C",
    "cores": 2,
    "flags": ["sse2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"],
}
XEON_OLD = {
    "model": "Intel(R) Xeon(R) CPU E5-2680 v4",
    "cores": 2,
    "flags": ["sse2", "avx", "avx2", "fma"],
}
EPYC_BF16 = {"model": "AMD EPYC 9B14", "cores": 2, "flags": ["sse2", "avx2", "fma", "avx512_bf16"]}
ARM = {"model": "Neoverse-N1", "cores": 2, "flags": ["fp", "asimd", "fphp"]}
CPU_DEV = {"kind": "cpu", "name": "cpu"}


def table(device: dict[str, Any], cells: dict[tuple[str, int], float | str], **extra: Any) -> Table:
    """One table from {(policy, batch): median ms or a status}."""
    recs = []
    for (policy, batch), value in cells.items():
        if isinstance(value, str):
            recs.append(rec("h", policy, batch, status=value, device=device, **extra))
        else:
            recs.append(rec("h", policy, batch, median=value, device=device, **extra))
    (t,) = build(typed_all(recs))
    return t


SLOW = {("float32", 64): 100.0, ("mixed_float16", 64): 95.0}


@pytest.mark.parametrize(("device", "fires"), [(M2200, True), (TITAN_XP, True), (V100, False)])
def test_no_fp16_tensor_cores_below_cc_7(device: dict, fires: bool) -> None:
    text = dg.no_fp16_tensor_cores(table(device, SLOW))
    assert bool(text) is fires
    if fires:
        assert f"compute capability {device['compute_capability']} < 7.0" in text
        assert "observed speedup 1.05" in text


def test_no_fp16_tensor_cores_needs_a_float16_policy_and_a_gpu() -> None:
    only_bf16 = {("float32", 64): 100.0, ("mixed_bfloat16", 64): 99.0}
    assert dg.no_fp16_tensor_cores(table(TITAN_XP, only_bf16)) is None
    assert dg.no_fp16_tensor_cores(table(CPU_DEV, SLOW, cpu=XEON_OLD)) is None


def test_cc_from_the_name_when_not_recorded() -> None:
    nameonly = {"kind": "gpu", "name": "NVIDIA TITAN Xp"}
    assert "6.1 < 7.0" in dg.no_fp16_tensor_cores(table(nameonly, SLOW))


@pytest.mark.parametrize(("device", "fires"), [(V100, True), (TITAN_XP, True), (A100, False)])
def test_no_bf16_tensor_cores_below_cc_8(device: dict, fires: bool) -> None:
    cells = {("float32", 64): 100.0, ("mixed_bfloat16", 64): 99.0}
    assert bool(dg.no_bf16_tensor_cores(table(device, cells))) is fires
    assert dg.no_bf16_tensor_cores(table(device, SLOW)) is None


def test_tf32_baseline_on_cc_8_unless_disabled() -> None:
    assert "TF32" in dg.tf32_baseline(table(A100, SLOW))
    assert dg.tf32_baseline(table(V100, SLOW)) is None
    assert dg.tf32_baseline(table(A100, SLOW, settings={"tf32": False})) is None


def test_tf32_baseline_names_the_backends_setting() -> None:
    torch = table(A100, SLOW, backend="torch",
                  settings={"tf32": True, "matmul_precision": "matmul.allow_tf32=False, "
                            "cudnn.allow_tf32=True"})  # fmt: skip
    assert "PyTorch: matmul.allow_tf32=False, cudnn.allow_tf32=True" in dg.tf32_baseline(torch)
    jax = table(A100, SLOW, backend="jax", settings={"matmul_precision": "default"})
    assert "(JAX: default)" in dg.tf32_baseline(jax)
    assert "(TensorFlow's default)" in dg.tf32_baseline(table(A100, SLOW))


def _health(reasons: list[str], hot: float = 70.0) -> dict:
    return {"throttle_reasons": reasons, "temperature_max_c": hot, "samples": 40}


def test_throttled_names_the_reason_the_slots_and_the_heat() -> None:
    recs = [
        rec("h", "float32", 256, median=100.0, device=A100,
            metrics={"step_ms": {"median": 100.0}, "gpu_health": _health(["sw_power_cap"])}),
        rec("h", "mixed_float16", 256, median=60.0, device=A100,
            metrics={"step_ms": {"median": 60.0},
                     "gpu_health": _health(["hw_thermal_slowdown", "sw_power_cap"], 91.0)}),
        rec("h", "float32", 64, median=30.0, device=A100,
            metrics={"step_ms": {"median": 30.0},
                     "gpu_health": _health(["applications_clocks_setting"])}),
    ]  # fmt: skip
    (t,) = build(typed_all(recs))
    note = dg.throttled(t)
    assert note is not None
    assert "power cap at float32 batch 256, mixed_float16 batch 256" in note
    assert "thermal (hardware) at mixed_float16 batch 256" in note and "91 °C" in note
    assert "batch 64" not in note  # a clock setting is not a slowdown
    calm = [rec("h", "float32", 64, device=A100,
                metrics={"step_ms": {"median": 30.0}, "gpu_health": _health([])})]  # fmt: skip
    (t,) = build(typed_all(calm))
    assert dg.throttled(t) is None


def test_float16_emulated_on_x86_cpu_only() -> None:
    cells = {("float32", 16): 2500.0, ("mixed_float16", 16): 10500.0}
    text = dg.float16_emulated_on_cpu(table(CPU_DEV, cells, cpu=XEON_BF16))
    assert "emulated" in text and "observed speedup 0.24" in text
    assert dg.float16_emulated_on_cpu(table(CPU_DEV, cells, cpu=ARM)) is None
    assert dg.float16_emulated_on_cpu(table(CPU_DEV, cells)) is None  # CPU not recorded
    assert dg.float16_emulated_on_cpu(table(V100, cells)) is None
    # the machine architecture, when recorded, decides over the model name and flags
    arm_box = {"model": "Intel-named Arm box", "arch": "aarch64", "flags": []}
    assert dg.float16_emulated_on_cpu(table(CPU_DEV, cells, cpu=arm_box)) is None
    bare_x86 = {"arch": "x86_64"}
    assert "emulated" in dg.float16_emulated_on_cpu(table(CPU_DEV, cells, cpu=bare_x86))
    assert "XLA" not in text  # the records do not say whether XLA ran


def test_float16_on_cpu_without_xla_points_to_jit_compile() -> None:
    cells = {("float32", 8): 60.0, ("mixed_float16", 8): 14675.0}
    off = {"jit_compile": False, "tf32": None}
    text = dg.float16_emulated_on_cpu(table(CPU_DEV, cells, cpu=XEON_BF16, settings=off))
    assert "XLA was off" in text and "--jit-compile on" in text
    on = {"jit_compile": True, "tf32": None}
    text = dg.float16_emulated_on_cpu(table(CPU_DEV, cells, cpu=XEON_BF16, settings=on))
    assert "emulated" in text and "XLA" not in text


def test_bf16_on_cpu_with_and_without_native_support() -> None:
    cells = {("float32", 16): 2500.0, ("mixed_bfloat16", 16): 750.0}
    native = dg.bf16_on_cpu(table(CPU_DEV, cells, cpu=XEON_BF16))  # AMX: tiles, 2x or more
    assert "This CPU has AMX (tile matrix units" in native and "observed speedup 3.33" in native
    assert "2x or more faster than float32" in native
    vector = dg.bf16_on_cpu(table(CPU_DEV, cells, cpu=EPYC_BF16))  # AVX512_BF16 only
    assert "This CPU has AVX512_BF16 (bfloat16 dot products in its vector units" in vector
    assert "no AMX" in vector and "2x" not in vector
    assert "neither AVX512_BF16 nor AMX" in dg.bf16_on_cpu(table(CPU_DEV, cells, cpu=XEON_OLD))
    assert dg.bf16_on_cpu(table(CPU_DEV, cells)) is None
    assert "It did not here" not in native
    slower = {("float32", 8): 91.4, ("mixed_bfloat16", 8): 117.2}  # measured at 64 px here
    assert "It did not here" in dg.bf16_on_cpu(table(CPU_DEV, slower, cpu=XEON_BF16))


def test_overhead_bound_under_10_ms() -> None:
    cells = {("float32", 8): 6.5, ("mixed_float16", 8): 7.2, ("float32", 512): 40.0}
    text = dg.overhead_bound(table(V100, cells))
    assert "batch 8" in text and "fastest 6.50 ms" in text and "512" not in text
    assert dg.overhead_bound(table(V100, SLOW)) is None


# What the bench records for blog-cnn at 256 px (tests/test_models.py checks the bench does).
BLOG_CNN = {
    "name": "blog-cnn", "parameters": 1096394, "source": "zoo",
    "flops_per_example": 8792317440.0, "flops_source": "formula",
    "off_multiple_of_8": [
        {"layer": "conv2d", "kind": "Conv2D", "attribute": "input channels", "value": 3},
        {"layer": "dense", "kind": "Dense", "attribute": "units", "value": 10},
    ],
    "off_multiple_of_8_count": 2, "output_dtype": "float32", "memory_bound_share": 0.5,
}  # fmt: skip
# EfficientNet-B0's squeeze-excite convolutions, as the bench records them.
EFFICIENTNET = {
    "name": "efficientnet_b0", "parameters": 5330571, "memory_bound_share": 0.82,
    "off_multiple_of_8": [
        {"layer": "block2a_se_reduce", "kind": "Conv2D", "attribute": "filters", "value": 4},
        {"layer": "block2b_se_reduce", "kind": "Conv2D", "attribute": "filters", "value": 6},
        {"layer": "block3a_se_reduce", "kind": "Conv2D", "attribute": "filters", "value": 6},
        {"layer": "block4a_se_reduce", "kind": "Conv2D", "attribute": "filters", "value": 10},
    ],
    "off_multiple_of_8_count": 23,
}  # fmt: skip


def test_dims_off_multiple_of_8_name_the_layers_on_tensor_core_gpus() -> None:
    text = dg.dims_not_multiple_of_8(table(V100, SLOW, model=BLOG_CNN))
    assert "conv2d (Conv2D input channels 3)" in text and "dense (Dense units 10)" in text
    text = dg.dims_not_multiple_of_8(table(V100, SLOW, model=EFFICIENTNET))
    assert "23 GEMM dimension(s) of efficientnet_b0" in text
    assert "block2a_se_reduce (Conv2D filters 4)" in text and "(Conv2D filters 10)" in text
    assert dg.dims_not_multiple_of_8(table(TITAN_XP, SLOW, model=BLOG_CNN)) is None  # no TC
    only_fp32 = {("float32", 64): 100.0}
    assert dg.dims_not_multiple_of_8(table(V100, only_fp32, model=BLOG_CNN)) is None
    assert dg.dims_not_multiple_of_8(table(V100, SLOW)) is None  # nothing recorded: silent


def test_float16_output_and_model_warnings() -> None:
    out16 = {**BLOG_CNN, "output_dtype": "float16", "warnings": ["the output is float16: ..."]}
    text = dg.float16_output(table(V100, SLOW, model=out16))
    assert "16-bit under mixed_float16 (float16)" in text
    assert dg.float16_output(table(V100, SLOW, model=BLOG_CNN)) is None
    assert "the output is float16" in dg.model_warnings(table(V100, SLOW, model=out16))
    assert dg.model_warnings(table(V100, SLOW, model=BLOG_CNN)) is None


def test_memory_bound_models_gain_at_most_the_bandwidth_ratio() -> None:
    text = dg.memory_bound(table(V100, SLOW, model=EFFICIENTNET))
    assert "82% of efficientnet_b0's activations" in text and "bandwidth ratio" in text
    assert dg.memory_bound(table(V100, SLOW, model=BLOG_CNN)) is None


def test_batch_not_multiple_of_8() -> None:
    cells = {("float32", 30): 30.0, ("mixed_float16", 30): 29.0, ("float32", 64): 60.0}
    assert "Batch size 30 is not" in dg.batch_not_multiple_of_8(table(V100, cells))
    assert dg.batch_not_multiple_of_8(table(V100, SLOW)) is None


def test_input_bound_under_80_percent_utilisation() -> None:
    low = table(V100, SLOW)
    assert dg.input_bound(low) is None  # utilisation not recorded: silent
    recs = [
        rec("h", "float32", 64, median=100.0, device=V100),
        rec("h", "mixed_float16", 64, median=90.0, device=V100),
    ]
    recs[0]["metrics"]["gpu_util_pct"] = 72.0
    recs[1]["metrics"]["gpu_util_pct"] = 95.0
    (t,) = build(typed_all(recs))
    assert "72% at batch 64" in dg.input_bound(t)
    recs[0]["metrics"]["gpu_util_pct"] = 85.0
    (t,) = build(typed_all(recs))
    assert dg.input_bound(t) is None


def test_utilisation_of_a_timed_window_shorter_than_nvml_period_is_not_judged() -> None:
    # 50 steps of 2.7 ms: 0.13 s, less than NVML's sample period; seen on an H100 as 0 %
    recs = [
        rec("h", "float32", 32, median=4.5, device=V100),
        rec("h", "mixed_float16", 32, median=2.7, device=V100),
        rec("h", "float32", 512, median=50.0, device=V100),
        rec("h", "mixed_float16", 512, median=22.0, device=V100),
    ]
    for r, util in zip(recs, [42.0, 0.0, 96.0, 89.0], strict=True):
        r["metrics"]["gpu_util_pct"] = util
    (t,) = build(typed_all(recs))
    assert dg.input_bound(t) is None  # the long windows were busy; the short ones say nothing
    recs[3]["metrics"]["gpu_util_pct"] = 60.0  # 50 x 22 ms = 1.1 s: judged
    (t,) = build(typed_all(recs))
    text = dg.input_bound(t)
    assert "60% at batch 512" in text and "at batch 32" not in text.split("(")[1]
    assert "Not judged where the timed steps lasted under 1 s" in text and "(batch 32;" in text


def test_silent_cpu_fallback_on_a_gpu_host() -> None:
    fallback = {
        "kind": "cpu",
        "name": "cpu",
        "used_gpu": False,
        "present_gpus": [{"name": "Quadro M2200", "compute_capability": "5.2"}],
    }
    text = dg.silent_cpu_fallback(table(fallback, SLOW, cpu=XEON_OLD))
    assert "Quadro M2200 (CC 5.2) present, but TensorFlow ran on the CPU" in text
    assert "2.18" in text
    newer = {**fallback, "present_gpus": [{"name": "Tesla T4", "compute_capability": "7.5"}]}
    assert "2.18" not in dg.silent_cpu_fallback(table(newer, SLOW))
    assert dg.silent_cpu_fallback(table(CPU_DEV, SLOW, cpu=XEON_OLD)) is None
    assert dg.silent_cpu_fallback(table(V100, SLOW)) is None


def test_silent_cpu_fallback_of_the_gpu_image_without_a_gpu() -> None:
    gpu_image = {"name": "gpu", "labels": {"io.mxbench.target": "gpu"}}
    no_gpu = {"kind": "cpu", "name": "AMD EPYC", "used_gpu": None, "present_gpus": []}
    text = dg.silent_cpu_fallback(table(no_gpu, SLOW, image=gpu_image))
    assert text.startswith("Silent CPU fallback: image gpu is the GPU build, but no GPU")
    assert "TensorFlow ran on the CPU" in text and "gpus: all" in text
    cpu_image = {"name": "cpu", "labels": {"io.mxbench.target": "cpu"}}
    assert dg.silent_cpu_fallback(table(no_gpu, SLOW, image=cpu_image)) is None
    assert dg.silent_cpu_fallback(table(no_gpu, SLOW)) is None  # local host, no image
    assert dg.silent_cpu_fallback(table(V100, SLOW, image=gpu_image)) is None  # used the GPU


def test_pure_float16_means_no_loss_scaling() -> None:
    cells = {("float32", 64): 500.0, ("float16", 64): 800.0}
    assert "no loss scaling" in dg.pure_float16(table(V100, cells))
    assert dg.pure_float16(table(V100, SLOW)) is None


def test_against_the_roof_from_the_models_flops() -> None:
    t = table(A100, SLOW, model=BLOG_CNN)
    text = dg.against_the_roof(t)
    # from the FLOPs the record carries: 64 images / 95 ms; TF32 on: float32 runs as tf32
    flops = BLOG_CNN["flops_per_example"]
    assert f"mixed_float16 (float16) at batch 64: {flops * 64 / 0.095 / 1e12:.3g} TFLOP/s" in text
    assert "312 TFLOP/s float16 datasheet roof (MFU)" in text
    assert "156 TFLOP/s tf32 datasheet roof (MFU)" in text
    assert "an FMA counted as 2 FLOP" in text
    assert dg.above_the_roof(t) is None
    gtx = {"kind": "gpu", "name": "NVIDIA GeForce GTX 1660 Ti", "compute_capability": "7.5"}
    assert dg.against_the_roof(table(gtx, SLOW, model=BLOG_CNN)) is None  # no roof known


def test_isa_claim_contradicted_by_the_probe() -> None:
    labels = {"io.mxbench.isa-claim": "avx2,fma"}
    lying = table(
        CPU_DEV,
        SLOW,
        cpu={**XEON_OLD, "tf_not_compiled_for": ["AVX2", "FMA"]},
        image={"name": "cpu-avx2", "labels": labels},
    )
    assert "not compiled for AVX2/FMA" in dg.isa_claim_mismatch(lying)
    honest = table(
        CPU_DEV,
        SLOW,
        cpu={**XEON_OLD, "tf_not_compiled_for": ["AVX512F"]},
        image={"name": "cpu-avx2", "labels": labels},
    )
    assert dg.isa_claim_mismatch(honest) is None
    unknown = table(CPU_DEV, SLOW, cpu=XEON_OLD, image={"name": "cpu-avx2", "labels": labels})
    assert dg.isa_claim_mismatch(unknown) is None


def test_diagnose_runs_every_rule_and_names_them() -> None:
    names = [n.rule for n in dg.diagnose(table(TITAN_XP, SLOW))]
    assert names == ["no_fp16_tensor_cores"]


@pytest.mark.parametrize(
    ("cc", "arch", "fp16", "bf16"),
    [
        ("5.2", "Maxwell", False, False),
        ("6.1", "Pascal", False, False),
        ("7.0", "Volta", True, False),
        ("7.5", "Turing", True, False),
        ("8.0", "Ampere", True, True),
        ("8.9", "Ada Lovelace", True, True),
        ("9.0", "Hopper", True, True),
        ("10.0", "Blackwell", True, True),
        ("12.0", "Blackwell", True, True),
        ("sm_86", "Ampere", True, True),
    ],
)
def test_capability_table_maxwell_to_blackwell(cc: str, arch: str, fp16: bool, bf16: bool) -> None:
    cap = devices.capability(cc)
    assert (cap.arch, cap.fp16_tensor_cores, cap.bf16_tensor_cores) == (arch, fp16, bf16)


def test_gpu_names_to_cc() -> None:
    assert devices.cc_from_name("NVIDIA TITAN Xp") == "6.1"
    assert devices.cc_from_name("NVIDIA TITAN X (Pascal)") is None  # ambiguous: Maxwell or Pascal
    assert devices.cc_from_name("NVIDIA A10") == "8.6"
    assert devices.cc_from_name("NVIDIA A100-SXM4-80GB") == "8.0"
    assert devices.cc_from_name("NVIDIA GH200 480GB") == "9.0"
    assert devices.cc_from_name("Some Future GPU") is None


def test_a_turing_gpu_built_without_tensor_cores_is_no_tensor_core_gpu() -> None:
    """The GTX 1660 Ti (tensorflow#44191): compute capability 7.5, no Tensor Cores."""
    gtx = {"kind": "gpu", "name": "NVIDIA GeForce GTX 1660 Ti", "compute_capability": "7.5"}
    text = dg.no_fp16_tensor_cores(table(gtx, SLOW))
    assert text is not None and "built without them" in text and "7.5" in text
    from mxbench.report.annotate import gpu_line

    assert "Tensor Cores: none" in gpu_line(table(gtx, SLOW))
    assert dg.no_fp16_tensor_cores(table(V100, SLOW)) is None  # 7.0 with Tensor Cores
