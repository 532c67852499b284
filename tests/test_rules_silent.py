"""Every diagnosis rule on a record where it must not fire (issue 48): per rule, the same
records just on its firing side of its threshold, and just across it, where it is silent.

A case pairs two builds that differ only across the rule's threshold (the constant read from
the code, never a copied number): the firing side must say the rule's sentence, the silent
side must not, so each case fails both ways. A rule without a numeric threshold is silent on
the nearest record whose facts do not support it (a GPU with Tensor Cores, a CPU flag,
evidence that replaces a guess). The table covers every rule of ``diagnose.RULES`` and
``serving_rules.RULES`` (:func:`test_every_rule_has_a_silent_case`), and the other rules
the report prints sentences by: the scaling map's notes, the health sweep, training's
"at chance", the largest batch's verdict, the serving gate.

Records are synthetic (report code only, no framework runs). The serving and scaling rules
are tested against their behaviour at main (another change is under way there)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mxbench import stats
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.matrix.search import Found
from mxbench.records.inference import GATE_AGREEMENT, GATE_COSINE
from mxbench.records.record import CATEGORY_NAMES
from mxbench.report import tables
from mxbench.report.diagnosis import kernels as dp
from mxbench.report.diagnosis import rules as dg
from mxbench.report.diagnosis import serving as serving_rules
from mxbench.report.diagnosis.busy import BUSY_CORES, BUSY_ROUNDS
from mxbench.report.sections import capacity, convergence, inference, roofline, scaling, training
from mxbench.report.sections import scaling_reference as sref
from mxbench.report.tables import LOSS_TOLERANCE, NVML_PERIOD_MS, Table
from mxbench.roofs import datasheet
from report_records import rec, typed, typed_all

# ---- devices ----------------------------------------------------------------------------

V100 = {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}
T4 = {"kind": "gpu", "name": "Tesla T4", "compute_capability": "7.5"}
GTX_1660_TI = {"kind": "gpu", "name": "NVIDIA GeForce GTX 1660 Ti", "compute_capability": "7.5"}
TITAN_XP = {"kind": "gpu", "name": "NVIDIA TITAN Xp", "compute_capability": "6.1"}
A100 = {"kind": "gpu", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
CPU = {"kind": "cpu", "name": "cpu"}
XEON_OLD = {"model": "Intel(R) Xeon(R) CPU E5-2680 v4", "arch": "x86_64",
            "flags": ["sse2", "avx", "avx2", "fma"]}  # fmt: skip
XEON_BF16 = {**XEON_OLD, "flags": [*XEON_OLD["flags"], "avx512f", "avx512_bf16"]}
XEON_VNNI = {**XEON_OLD, "flags": [*XEON_OLD["flags"], "avx512_vnni"]}
NEOVERSE = {"model": "Neoverse-N1", "arch": "aarch64", "flags": ["fp", "asimd", "fphp"]}

# ---- builders ---------------------------------------------------------------------------


def table(records: list[dict[str, Any]]) -> Table:
    (t,) = tables.build(typed_all(records))
    return t


def params(r: dict[str, Any], **changed: Any) -> dict[str, Any]:
    """``r`` with its params changed (its cell key follows)."""
    r["params"].update(changed)
    r["cell"] = cell_key(r["host"], None, None, Params(**r["params"]))
    return r


def pair(
    device: dict[str, Any],
    policy: str = "mixed_float16",
    batch: int = 64,
    f32_ms: float = 100.0,
    ms: float = 90.0,
    mine: dict[str, Any] | None = None,
    **both: Any,
) -> Table:
    """float32 and ``policy`` at one batch size; ``mine``: the policy's record's own parts,
    ``both``: both records'."""
    return table([
        rec("h", "float32", batch, median=f32_ms, device=device, **both),
        rec("h", policy, batch, median=ms, device=device, **{**both, **(mine or {})}),
    ])  # fmt: skip


def profile(**ms: Any) -> dict[str, Any]:
    """A profiled window: ms per step by category (a large ``host_gap``: the profiler's own
    cost, which the timed step's breakdown must not count), other keys as given."""
    extra = {k: ms.pop(k) for k in list(ms) if k not in CATEGORY_NAMES}
    return {"tool": "torch.profiler", "steps": 3, "step_ms": sum(ms.values()), "cost_s": 0.5,
            "breakdown_ms": ms, **extra}  # fmt: skip


def profiled(device: dict[str, Any], mine: dict[str, Any], policy: str = "mixed_bfloat16",
             **both: Any) -> Table:  # fmt: skip
    """Timed at 100 ms a step each; float32's operations busy 95 ms of it."""
    f32 = profile(conv_matmul=95.0, host_gap=300.0)
    return table([
        rec("h", "float32", 64, median=100.0, device=device, profile=f32, **both),
        rec("h", policy, 64, median=100.0, device=device, profile=mine, **both),
    ])  # fmt: skip


def onednn(native: float | None, isas: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {"weight": "time", "gemm_isas": isas, "native16_share": native,
            "sixteen_bit_share": 1.0 if native is not None else 0.0, **extra}  # fmt: skip


def on_cpu(policy: str, evidence: dict[str, Any] | None, cpu: dict[str, Any] = XEON_OLD,
           ms: float = 150.0) -> Table:  # fmt: skip
    """float32 and ``policy`` on a CPU, the policy's oneDNN evidence as given (None: no
    profiled window)."""
    mine = {"profile": profile(conv_matmul=50.0, onednn=evidence)} if evidence else {}
    return pair(CPU, policy, 8, 100.0, ms, mine=mine, cpu=cpu)


def tensor_cores(device: dict[str, Any], share: float, policy: str = "mixed_float16") -> Table:
    window = profile(conv_matmul=80.0, host_gap=20.0, tensor_core_share=share)
    return pair(device, policy, mine={"profile": window})


def health(reasons: list[str]) -> Table:
    h = {"throttle_reasons": reasons, "temperature_max_c": 80.0, "samples": 40}
    metrics = {"step_ms": {"median": 100.0, "n": 50}, "gpu_health": h}
    return pair(A100, metrics=metrics)


def losses(diff: float) -> Table:
    base = [2.30, 2.28, 2.25, 2.21, 2.20]

    def timed(policy: str, ms: float, scale: float) -> dict[str, Any]:
        return rec("h", policy, 64, device=V100,
                   metrics={"step_ms": {"median": ms, "n": 5},
                            "losses": [v * scale for v in base]})  # fmt: skip

    return table([timed("float32", 100.0, 1.0), timed("mixed_float16", 80.0, 1.0 + diff)])


def checked(**conv: Any) -> Table:
    conv = {"check": "scored", "steps": 55, "skipped_steps": 0, "underflow_share": 0.0, **conv}
    return pair(V100, mine={"convergence": conv})


def turned(factor: float) -> Table:
    """The policy turns the gradient ``factor`` x GAP_FACTOR times the angle float32 turns it
    with only its input rounded (10 degrees: a cosine below THRESHOLD)."""
    own = 10.0
    assert math.cos(math.radians(own)) < convergence.THRESHOLD
    cos = math.cos(math.radians(own * convergence.GAP_FACTOR * factor))
    return checked(cosine=cos, float32_rounded_input_cosine=math.cos(math.radians(own)))


def util(pct: float, ms: float = 100.0, steps: int = 50) -> Table:
    metrics = {"step_ms": {"median": ms, "n": steps}, "gpu_util_pct": pct}
    return pair(V100, f32_ms=ms, ms=ms, metrics=metrics)


def model(device: dict[str, Any], policy: str = "mixed_float16", **facts: Any) -> Table:
    off = [{"layer": "dense", "kind": "Dense", "attribute": "units", "value": 10}]
    found = {"name": "m", "parameters": 1000, "output_dtype": "float32", "off_multiple_of_8": off,
             "off_multiple_of_8_count": 1, **facts}  # fmt: skip
    return pair(device, policy, model=found)


def peak(share: float) -> Table:
    """mixed_float16 on an A100 at ``share`` of its fp16 datasheet roof (from the model's
    FLOPs and the step time)."""
    sheet = datasheet.sheet(A100["name"])
    assert sheet is not None
    fp16 = sheet.peaks["float16"]
    flops = fp16 * 1e12 * share * 0.090 / 64  # per example: 64 examples in 90 ms
    found = {"name": "m", "parameters": 1000, "flops_per_example": flops}
    return table([rec("h", "mixed_float16", 64, median=90.0, device=A100, model=found)])


def isa(missing: list[str]) -> Table:
    image = {"name": "cpu-avx2", "labels": {"io.mxbench.isa-claim": "avx2,fma"}}
    return pair(CPU, cpu={**XEON_OLD, "tf_not_compiled_for": missing}, image=image)


def busy_machine(others: float, disturbed: float) -> Table:
    """Paired records of 100 rounds: other processes' CPU in every window, and the share of
    rounds disturbed."""
    rounds = 100
    bad = round(disturbed * rounds)
    clean = [i >= bad for i in range(rounds)]
    window = {"round": 0, "position": 0, "steps": 5, "ms": 100.0, "start_s": 0.0,
              "interference": {"others_cores": others, "steal_cores": 0.0}}  # fmt: skip

    def arm(policy: str, ms: float, ratios: list[float]) -> dict[str, Any]:
        pairing = {"group": "g", "arms": ["float32", "mixed_float16"], "ratios": ratios,
                   "clean": clean, "windows": [window]}  # fmt: skip
        return rec("h", policy, 64, median=ms, device=V100, pairing=pairing)

    return table([arm("float32", 100.0, []), arm("mixed_float16", 90.0, [1.1] * rounds)])


# ---- serving (report/sections/inference.py, report/diagnosis/serving.py) ----------------


def served(
    policy: str,
    ms: float,
    device: dict[str, Any] = CPU,
    cpu: dict[str, Any] = XEON_OLD,
    batch: int = 1,
    agreement: float = 1.0,
    cosine: float = 0.9999,
    quantize: str = "none",
    evidence: dict[str, Any] | None = None,
    repeat: int | None = None,
) -> dict[str, Any]:
    """A serving record of 400 calls around ``ms`` (float32: no gate); ``repeat``: which
    process of the cell (each a little slower than the one before)."""
    ms *= 1 + 0.002 * (repeat or 0)
    calls = [ms * (1 + 0.2 * ((i * 37) % 100) / 100) for i in range(400)]
    p = {"model": "blog-cnn", "policy": policy, "batch_size": batch, "image_size": 32,
         "mode": "infer", "quantize": quantize, "steps": len(calls), "call": "direct",
         "repeat": repeat}  # fmt: skip
    out = rec("h", policy, batch, device=device, cpu=cpu)
    out["params"] = p
    out["cell"] = cell_key("h", None, None, Params(**p))
    out["metrics"] = {"step_ms": {"median": sorted(calls)[200], "n": len(calls), "samples": calls}}
    out["inference"] = {"call": "direct", "batch": batch, "calls": len(calls)}
    if policy != "float32" or quantize != "none":
        out["inference"]["gate"] = {"ran": True, "top1_agreement": agreement, "cosine": cosine,
                                    "passed": True}  # fmt: skip
    if evidence is not None:
        out["profile"] = {"tool": "oneDNN creation log", "device": "cpu", "onednn": evidence}
    return out


def serving(*records: dict[str, Any]) -> list[str]:
    """Every sentence of the serving sections of ``records``."""
    found = inference.sections(typed_all(list(records)))
    return [s for section in found for s in section.sentences]


def said(found: list[str]) -> str:
    return "\n".join(found)


def fp16_served(device: dict[str, Any]) -> str:
    return said(serving(served("float32", 4.0, device), served("mixed_float16", 8.0, device)))


def fp16_on_cpu(ratio: float, cpu: dict[str, Any] = XEON_BF16, native: bool = True) -> str:
    """mixed_float16 served at ``ratio`` x float32's speed (native kernels, if ``native``), two
    processes a side (a verdict on serving speed needs an interval over processes)."""
    evidence = onednn(1.0, {"avx10_1_512": 1.0}) if native else None
    f16 = [served("mixed_float16", 4.0 / ratio, cpu=cpu, evidence=evidence, repeat=k)
           for k in (0, 1)]  # fmt: skip
    return said(serving(*(served("float32", 4.0, cpu=cpu, repeat=k) for k in (0, 1)), *f16))


def dispatch(batch_ratio: int, time_ratio: float) -> str:
    """A batch ``batch_ratio`` times larger costing ``time_ratio`` times the time, two
    processes a side."""
    return said(serving(*(served("float32", 10.0, repeat=k) for k in (0, 1)),
                        *(served("float32", 10.0 * time_ratio, batch=batch_ratio, repeat=k)
                          for k in (0, 1))))  # fmt: skip


def gate(agreement: float = 1.0, cosine: float = 0.9999) -> str:
    f16 = served("mixed_bfloat16", 2.0, agreement=agreement, cosine=cosine)
    return said(serving(served("float32", 4.0), f16))


# ---- scaling map notes, health sweep, training, largest batch ------------------------------


def ratio(value: float, high: float | None = None) -> stats.Ratio:
    high = value * 1.02 if high is None else high
    return stats.Ratio(value, min(value, high) * 0.98, high, "processes", 3)


def point(devices_: int, efficiency: stats.Ratio | None, shared: bool = False) -> scaling.Point:
    return scaling.Point("float32", 32, devices_, 32 * devices_, 32, 1000.0, efficiency, None,
                         shared)  # fmt: skip


def scaling_notes(efficiency: stats.Ratio, shared: bool = False) -> str:
    return said(scaling.notes([point(1, None, shared), point(4, efficiency, shared)]))


def sweep(high: float) -> str:
    """The health sweep of three replicas, the last one's interval topping at ``high``."""
    ratios = [ratio(1.0), ratio(1.0), ratio(high * 0.97, high)]
    return sref.Health("float32", 32, ["gpu:0", "gpu:1", "gpu:2"], [100.0, 100.0, 80.0],
                       ratios, 3).sentence()  # fmt: skip


def at_chance(val: float, train: float, classes: int = 10) -> str | None:
    points = [{"epoch": 1, "train_s": 10.0, "val_metric": val, "train_metric": train},
              {"epoch": 2, "train_s": 20.0, "val_metric": 0.95, "train_metric": 0.97}]  # fmt: skip
    r = typed(rec("h", "float32", 32, train={"classes": classes, "seed": 0, "points": points,
                                              "time_to_target_s": 20.0}))  # fmt: skip
    return training.stuck_at_chance(training.Run("float32", [r]))


def near_chance(classes: int = 10) -> float:
    """The highest validation accuracy that counts as at chance (training.stuck_at_chance)."""
    chance = 1.0 / classes
    return chance + max(0.05, training.CHANCE_MARGIN * chance)


def largest(times: float, base: int = 1000) -> str | None:
    """float32's search found ``base``, mixed_float16's ``times`` x ``base``."""
    t = table([rec("h", "float32", base, device=V100)])
    fits = {
        p: capacity.Fit(p, Found("found", b, None, 3), None, [])
        for p, b in (("float32", base), ("mixed_float16", round(base * times)))
    }
    return capacity.diagnosis(capacity.Capacity(t, fits))


def as_is(said: str | None) -> str | None:
    return said


# ---- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    rule: str  # the rule's function name (report/diagnosis/rules*.py), or what else it is
    say: Callable[[Any], str | None]  # the rule's sentence(s) from what the builder made
    fires: Callable[[], Any]  # over the threshold: the rule speaks
    silent: Callable[[], Any]  # just under it: the rule says nothing (or not ``needle``)
    needle: str | None = None  # None: the whole rule is silent; else these words are absent
    why: str = ""  # the test id's tail


def rule(fn: Callable[[Table], str | None], fires: Callable[[], Any],
         silent: Callable[[], Any], needle: str | None = None, why: str = "") -> Case:  # fmt: skip
    return Case(fn.__name__, fn, fires, silent, needle, why)


D = 0.01  # how far on either side of a threshold the two records lie
SLOWDOWN = sorted(dg.SLOWDOWNS)[0]
BATCH_RATIO, TIME_RATIO = serving_rules.DISPATCH_BATCH_RATIO, serving_rules.DISPATCH_TIME_RATIO

CASES: list[Case] = [
    # ---- diagnose.RULES, in their order
    rule(dg.silent_cpu_fallback,
         lambda: pair({**CPU, "used_gpu": False, "present_gpus": [{"name": "Tesla T4"}]}),
         lambda: pair({**T4, "used_gpu": True, "present_gpus": [{"name": "Tesla T4"}]}),
         why="gpu-present-and-used"),
    rule(dg.silent_cpu_fallback,
         lambda: pair({**CPU, "present_gpus": []},
                      image={"name": "gpu", "labels": {"io.mxbench.target": "gpu"}}),
         lambda: pair({**CPU, "present_gpus": []},
                      image={"name": "cpu", "labels": {"io.mxbench.target": "cpu"}}),
         why="cpu-image-on-a-cpu"),
    rule(dg.throttled, lambda: health([SLOWDOWN]),
         lambda: health(["applications_clocks_setting", "gpu_idle"]), why="no-slowdown-reason"),
    rule(dg.no_fp16_tensor_cores, lambda: pair(TITAN_XP), lambda: pair(V100), why="cc-7.0"),
    rule(dg.no_fp16_tensor_cores, lambda: pair(GTX_1660_TI), lambda: pair(T4),
         why="turing-with-tensor-cores"),
    rule(dg.no_bf16_tensor_cores, lambda: pair(T4, "mixed_bfloat16"),
         lambda: pair(A100, "mixed_bfloat16"), why="cc-8.0"),
    rule(dg.tf32_baseline, lambda: pair(A100), lambda: pair(T4), why="cc-7.5"),
    rule(dg.tf32_baseline, lambda: pair(A100), lambda: pair(A100, settings={"tf32": False}),
         why="tf32-off"),
    rule(dg.float16_emulated_on_cpu,
         lambda: on_cpu("mixed_float16", onednn(None, {"avx512_core": 1.0})),
         lambda: on_cpu("mixed_float16", onednn(D, {"avx512_core": 1 - D, "avx10_1_512": D})),
         why="some-native-float16"),
    rule(dg.float16_emulated_on_cpu,  # the bug: 49% native was "converted for every operation"
         lambda: on_cpu("mixed_float16", onednn(0.0, {"avx512_core": 1.0})),
         lambda: on_cpu("mixed_float16", onednn(dp.NATIVE_16 - D, {"avx10_1_512": 1.0})),
         why="just-under-NATIVE_16"),
    rule(dg.float16_emulated_on_cpu,
         lambda: on_cpu("mixed_float16", onednn(None, {"ref": dp.REFERENCE_SHARE - D,
                                                       "avx512_core": 0.5})),
         lambda: on_cpu("mixed_float16", onednn(None, {"ref": dp.REFERENCE_SHARE + D,
                                                       "avx512_core": 0.5})),
         why="REFERENCE_SHARE"),
    rule(dg.float16_emulated_on_cpu, lambda: on_cpu("mixed_float16", None),
         lambda: on_cpu("mixed_float16", None, cpu=NEOVERSE), why="arm"),
    rule(dg.bf16_on_cpu, lambda: on_cpu("mixed_bfloat16", None, XEON_BF16),
         lambda: on_cpu("mixed_bfloat16", onednn(0.9, {"avx512_core_bf16": 1.0}), XEON_BF16),
         why="kernels-recorded"),
    rule(dg.bf16_on_cpu, lambda: on_cpu("mixed_bfloat16", None, XEON_BF16, ms=100 / (1 - D)),
         lambda: on_cpu("mixed_bfloat16", None, XEON_BF16, ms=100 / (1 + D)),
         needle="It did not here", why="speedup-1"),
    rule(dg.cpu_kernels, lambda: on_cpu("mixed_bfloat16", onednn(None, {"avx512_core": 1.0})),
         lambda: on_cpu("mixed_bfloat16", onednn(None, {})), why="no-conv-matmul-logged"),
    rule(dg.cpu_kernels,
         lambda: on_cpu("mixed_float16", onednn(0.0, {"ref": dp.REFERENCE_SHARE + D,
                                                      "avx512_core": 0.5})),
         lambda: on_cpu("mixed_float16", onednn(0.0, {"ref": dp.REFERENCE_SHARE - D,
                                                      "avx512_core": 0.5})),
         needle="reference loops", why="REFERENCE_SHARE"),
    rule(dg.cpu_kernels,
         lambda: on_cpu("mixed_bfloat16", onednn(dp.NATIVE_16 + D, {"avx512_core_bf16": 1.0})),
         lambda: on_cpu("mixed_bfloat16", onednn(dp.NATIVE_16 - D, {"avx512_core_bf16": 1.0})),
         needle="in 16 bits natively", why="NATIVE_16"),
    rule(dg.tensor_core_kernels, lambda: tensor_cores(A100, dp.NO_TENSOR_CORES - D),
         lambda: tensor_cores(A100, dp.NO_TENSOR_CORES + D), needle="No Tensor Core kernels ran",
         why="NO_TENSOR_CORES"),
    rule(dg.tensor_core_kernels,  # the bug: 6% was "most of the time"
         lambda: tensor_cores(A100, dp.MOST_TENSOR_CORES + D),
         lambda: tensor_cores(A100, dp.MOST_TENSOR_CORES - D), needle="ran most",
         why="MOST_TENSOR_CORES"),
    rule(dg.tensor_core_kernels,  # the bug: bfloat16 on a Volta took no Tensor Cores "despite"
         lambda: tensor_cores(V100, 0.0), lambda: tensor_cores(V100, 0.0, "mixed_bfloat16"),
         why="bf16-below-cc-8"),
    rule(dg.tensor_core_kernels,  # the bug: a GTX 1660 Ti has none to run
         lambda: tensor_cores(T4, 0.0), lambda: tensor_cores(GTX_1660_TI, 0.0),
         why="turing-without-tensor-cores"),
    rule(dg.tensor_core_kernels, lambda: tensor_cores(A100, 0.9),
         lambda: pair(A100, mine={"profile": profile(conv_matmul=80.0, host_gap=20.0)}),
         why="share-not-recorded"),
    rule(dg.cast_overhead,
         lambda: profiled(A100, profile(conv_matmul=90 - 100 * (dp.CAST_SHARE + D),
                                        cast=100 * (dp.CAST_SHARE + D), host_gap=500.0)),
         lambda: profiled(A100, profile(conv_matmul=90 - 100 * (dp.CAST_SHARE - D),
                                        cast=100 * (dp.CAST_SHARE - D), host_gap=500.0)),
         why="CAST_SHARE"),
    rule(dg.measured_memory_bound,
         lambda: profiled(A100, profile(conv_matmul=95 - 100 * (dp.MEASURED_MEMORY_BOUND + D),
                                        elementwise_norm=100 * (dp.MEASURED_MEMORY_BOUND + D),
                                        host_gap=500.0)),
         lambda: profiled(A100, profile(conv_matmul=95 - 100 * (dp.MEASURED_MEMORY_BOUND - D),
                                        elementwise_norm=100 * (dp.MEASURED_MEMORY_BOUND - D),
                                        host_gap=500.0)),
         why="MEASURED_MEMORY_BOUND"),
    rule(dg.launch_bound,  # the gap: timed less busy, never the profiled window's own gap
         lambda: profiled(A100, profile(conv_matmul=100 * (1 - dp.HOST_GAP_SHARE - D),
                                        host_gap=400.0)),
         lambda: profiled(A100, profile(conv_matmul=100 * (1 - dp.HOST_GAP_SHARE + D),
                                        host_gap=400.0)),
         why="HOST_GAP_SHARE"),
    rule(dg.loss_parity, lambda: losses(LOSS_TOLERANCE + D), lambda: losses(LOSS_TOLERANCE - D),
         why="LOSS_TOLERANCE"),
    rule(convergence.one_step_check, lambda: checked(cosine=convergence.THRESHOLD - D / 10),
         lambda: checked(cosine=convergence.THRESHOLD + D / 10), why="THRESHOLD"),
    rule(convergence.one_step_check,
         lambda: checked(cosine=0.9999, underflow_share=convergence.UNDERFLOW),
         lambda: checked(cosine=0.9999, underflow_share=convergence.UNDERFLOW - D / 10),
         why="UNDERFLOW"),
    rule(convergence.one_step_check, lambda: turned(1 + D), lambda: turned(1 - D),
         needle="the first gradient is off float32's", why="GAP_FACTOR"),
    rule(convergence.one_step_check, lambda: checked(cosine=0.9999, skipped_steps=1),
         lambda: checked(cosine=0.9999, skipped_steps=0), why="no-step-skipped"),
    rule(dg.pure_float16, lambda: pair(V100, "float16"), lambda: pair(V100, "mixed_float16"),
         why="mixed"),
    rule(dg.pure_float16,  # the bug: said "no loss scaling" of a run with loss scaling
         lambda: pair(V100, "float16"),
         lambda: table([params(rec("h", p, 64, device=V100), loss_scale="dynamic")
                        for p in ("float32", "float16")]),
         needle="no loss scaling", why="loss-scaled"),
    rule(dg.overhead_bound, lambda: pair(V100, f32_ms=dg.OVERHEAD_MS - D, ms=dg.OVERHEAD_MS - D),
         lambda: pair(V100, f32_ms=dg.OVERHEAD_MS + D, ms=dg.OVERHEAD_MS + D),
         why="OVERHEAD_MS"),
    rule(dg.input_bound, lambda: util(dg.LOW_UTIL_PCT - D), lambda: util(dg.LOW_UTIL_PCT + D),
         why="LOW_UTIL_PCT"),
    rule(dg.input_bound, lambda: util(50.0, 10.0, round(NVML_PERIOD_MS / 10.0)),
         lambda: util(50.0, 10.0, round(NVML_PERIOD_MS / 10.0) - 1), why="NVML_PERIOD_MS"),
    rule(dg.dims_not_multiple_of_8, lambda: model(V100), lambda: model(V100, off_multiple_of_8=[],
                                                                       off_multiple_of_8_count=0),
         why="all-multiples-of-8"),
    rule(dg.dims_not_multiple_of_8,  # the bug: bfloat16 on a Volta has no Tensor Cores to miss
         lambda: model(A100, "mixed_bfloat16"), lambda: model(V100, "mixed_bfloat16"),
         why="bf16-below-cc-8"),
    rule(dg.dims_not_multiple_of_8, lambda: model(T4), lambda: model(GTX_1660_TI),
         why="turing-without-tensor-cores"),
    rule(dg.float16_output, lambda: model(V100, output_dtype="float16"), lambda: model(V100),
         why="float32-output"),
    rule(dg.memory_bound, lambda: model(V100, memory_bound_share=dg.MEMORY_BOUND_SHARE + D),
         lambda: model(V100, memory_bound_share=dg.MEMORY_BOUND_SHARE - D),
         why="MEMORY_BOUND_SHARE"),
    rule(dg.model_warnings, lambda: model(V100, warnings=["the output is float16"]),
         lambda: model(V100, warnings=[]), why="none-recorded"),
    rule(dg.batch_not_multiple_of_8, lambda: pair(V100, batch=63), lambda: pair(V100, batch=64),
         why="batch-64"),
    rule(dg.batch_not_multiple_of_8,  # the bug: bfloat16 on a Volta has no Tensor Cores
         lambda: pair(A100, "mixed_bfloat16", batch=63),
         lambda: pair(V100, "mixed_bfloat16", batch=63), why="bf16-below-cc-8"),
    rule(dg.against_the_roof, lambda: peak(0.5), lambda: pair(GTX_1660_TI, model={
        "name": "m", "parameters": 1000, "flops_per_example": 1e9}), why="no-roof-known"),
    rule(dg.against_the_roof, lambda: peak(roofline.FAR_BELOW - D),
         lambda: peak(roofline.FAR_BELOW + D), needle="far below", why="FAR_BELOW"),
    rule(dg.above_the_roof, lambda: peak(1 + D), lambda: peak(1 - D), why="at-most-100%"),
    rule(dg.speedup_bound, lambda: profiled(CPU, {}, cpu=XEON_BF16),
         lambda: pair(CPU, "mixed_bfloat16", cpu=XEON_BF16), needle="of at most",
         why="no-profile"),
    rule(dg.isa_claim_mismatch, lambda: isa(["AVX2", "FMA"]), lambda: isa(["AVX512F"]),
         why="claim-holds"),
    rule(dg.machine_in_use, lambda: busy_machine(BUSY_CORES + D, 0.0),
         lambda: busy_machine(BUSY_CORES - D, 0.0), why="BUSY_CORES"),
    rule(dg.machine_in_use, lambda: busy_machine(0.0, BUSY_ROUNDS + D),
         lambda: busy_machine(0.0, BUSY_ROUNDS - D), why="BUSY_ROUNDS"),
    # ---- serving_rules.RULES (serving), against main's behaviour
    Case("float16_without_fast_float16", as_is, lambda: fp16_served(TITAN_XP),
         lambda: fp16_served(V100), "No fast float16 for serving", "cc-7.0"),
    Case("float16_without_fast_float16", as_is, lambda: fp16_served(GTX_1660_TI),
         lambda: fp16_served(T4), "No fast float16 for serving", "turing-with-tensor-cores"),
    # "slower" is judged from the interval over processes: clearly slower against faster
    Case("float16_on_cpu", as_is, lambda: fp16_on_cpu(0.8), lambda: fp16_on_cpu(1.2),
         "mixed_float16 ran native float16 kernels", "native-and-not-slower"),
    Case("float16_on_cpu", as_is, lambda: fp16_on_cpu(0.5, XEON_OLD, False),
         lambda: fp16_on_cpu(0.5, NEOVERSE, False), "float16 on an x86 CPU", "arm"),
    Case("int8_without_vnni", as_is,
         lambda: said(serving(served("float32", 4.0), served("float32", 3.0, quantize="int8"))),
         lambda: said(serving(served("float32", 4.0, cpu=XEON_VNNI),
                              served("float32", 3.0, cpu=XEON_VNNI, quantize="int8"))),
         "int8 without VNNI or AMX", "vnni"),
    # the whole interval of the time ratio under the limit fires; a point just over it not
    Case("dispatch_bound", as_is, lambda: dispatch(BATCH_RATIO, TIME_RATIO * 0.8),
         lambda: dispatch(BATCH_RATIO, TIME_RATIO + D), "Dispatch-bound", "DISPATCH_TIME_RATIO"),
    Case("dispatch_bound", as_is, lambda: dispatch(BATCH_RATIO, 1.0),
         lambda: dispatch(BATCH_RATIO - 1, 1.0), "Dispatch-bound", "DISPATCH_BATCH_RATIO"),
    # ---- the serving gate (report/sections/inference.py: struck), against main's behaviour
    Case("inference.struck", as_is, lambda: gate(agreement=GATE_AGREEMENT - D / 10),
         lambda: gate(agreement=GATE_AGREEMENT), "speedup struck", "GATE_AGREEMENT"),
    Case("inference.struck", as_is, lambda: gate(cosine=GATE_COSINE - D / 10),
         lambda: gate(cosine=GATE_COSINE), "speedup struck", "GATE_COSINE"),
    # ---- the scaling map's notes (report/sections/scaling.py): with no independent replicas
    # measured the cause is "communication or contention" (communication-bound only where they
    # show it: tests/test_scaling.py)
    Case("scaling.communication_bound", as_is,
         lambda: scaling_notes(ratio(0.5, scaling.COMMUNICATION - D)),
         lambda: scaling_notes(ratio(0.5, scaling.COMMUNICATION + D)),
         "communication or contention",
         "COMMUNICATION"),
    Case("scaling.communication_bound", as_is,
         lambda: scaling_notes(ratio(0.5, scaling.COMMUNICATION - D)),
         lambda: scaling_notes(ratio(0.5, scaling.COMMUNICATION - D), shared=True),
         "communication or contention", "shared-cores"),
    Case("scaling.superlinear", as_is, lambda: scaling_notes(ratio(scaling.SUPERLINEAR + D)),
         lambda: scaling_notes(ratio(scaling.SUPERLINEAR - D)), "super-linear", "SUPERLINEAR"),
    Case("scaling_reference.Health.slow", as_is, lambda: sweep(sref.SLOW - D),
         lambda: sweep(sref.SLOW + D), "gpu:2 is slow", "SLOW"),
    # ---- training (report/sections/training.py)
    Case("training.stuck_at_chance", as_is, lambda: at_chance(near_chance() - D, 0.9),
         lambda: at_chance(near_chance() + D, 0.9), None, "CHANCE_MARGIN"),
    Case("training.stuck_at_chance", as_is,
         lambda: at_chance(0.1, training.LEARNING + D),
         lambda: at_chance(0.1, training.LEARNING - D), None, "LEARNING"),
    # ---- the largest batch (report/sections/capacity.py)
    Case("capacity.diagnosis", as_is, lambda: largest(capacity.LARGER + D),
         lambda: largest(capacity.LARGER - D), "lets this device train larger batches", "LARGER"),
    Case("capacity.diagnosis",  # the bug: 1.04x was "does not fit a larger batch"
         as_is, lambda: largest(1.0), lambda: largest(1 + 4 * D),
         "does not fit a larger batch", "a-little-larger"),
]  # fmt: skip


def _id(c: Case) -> str:
    return f"{c.rule}-{c.why}" if c.why else c.rule


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_a_rule_fires_on_its_side_of_the_threshold_and_not_just_across(case: Case) -> None:
    fired = case.say(case.fires())
    assert fired, f"{case.rule} did not fire on its own case"
    if case.needle is not None:
        assert case.needle in fired, fired
    quiet = case.say(case.silent())
    if case.needle is None:
        assert quiet is None, quiet
    else:
        assert case.needle not in (quiet or ""), quiet


DIAGNOSE = {r.__name__: r for r in dg.RULES}


@pytest.mark.parametrize("case", [c for c in CASES if c.rule in DIAGNOSE and c.needle is None],
                         ids=_id)  # fmt: skip
def test_the_report_runs_it_where_it_fires_and_not_where_it_is_silent(case: Case) -> None:
    """What the report prints (diagnose: the rules of the table's kind of device)."""
    assert case.rule in {n.rule for n in dg.diagnose(case.fires())}
    assert case.rule not in {n.rule for n in dg.diagnose(case.silent())}


def test_every_rule_has_a_silent_case() -> None:
    named = {c.rule for c in CASES}
    assert set(DIAGNOSE) <= named, set(DIAGNOSE) - named
    serving_names = {r.__name__ for r in serving_rules.RULES}
    assert serving_names <= named, serving_names - named
