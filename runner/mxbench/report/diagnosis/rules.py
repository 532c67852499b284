"""Why mixed precision does (not) pay off on a device: one function per rule.

Each rule takes a :class:`~mxbench.report.tables.Table` and returns a note (one sentence or
two) or None. Rules only speak from what the records say; a rule whose inputs are not
recorded stays silent rather than guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mxbench.matrix.params import BASELINE
from mxbench.records.codec import cc_pair
from mxbench.records.record import ModelInfo, OffMultipleOf8
from mxbench.report import devices
from mxbench.report.annotate import compiled_for_avx2_fma, gpu_cc
from mxbench.report.diagnosis.cpu import bf16_on_cpu, float16_emulated_on_cpu, observed
from mxbench.report.diagnosis.kernels import (
    BFLOAT16,
    FLOAT16,
    cast_overhead,
    cpu_kernels,
    is_cpu,
    is_gpu,
    launch_bound,
    measured_memory_bound,
    profiles,
    tensor_core_kernels,
    tensor_core_policies,
)
from mxbench.report.sections import convergence, roofline
from mxbench.report.tables import LOSS_TOLERANCE, NVML_PERIOD_MS, Table
from mxbench.stats import figure

FRAMEWORKS = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
OVERHEAD_MS = 10.0
LOW_UTIL_PCT = 80.0
# A model whose memory-bound layers write at least this share of its activations.
MEMORY_BOUND_SHARE = 0.75


@dataclass(frozen=True)
class Note:
    rule: str
    text: str


def no_fp16_tensor_cores(t: Table) -> str | None:
    cap, _ = gpu_cc(t)
    if not is_gpu(t) or cap is None or not FLOAT16 & set(t.policies):
        return None
    if cap.fp16_tensor_cores and devices.without_tensor_cores(t.device.name):
        return (
            f"No Tensor Cores: {t.device.name} is a Turing GPU (compute capability "
            f"{cap.label}) built without them, so no speedup is expected from mixed_float16"
            f"{observed(t, FLOAT16)}; its double-rate float16 vector arithmetic helps little "
            "once the casts are paid."
        )
    if cap.fp16_tensor_cores:
        return None
    if cap.cc < (6, 0):
        why = "Maxwell has no fast float16 arithmetic"
    elif cap.cc == (6, 0):
        why = "the P100's double-rate float16 is no Tensor Core"
    else:
        why = f"CC {cap.label} runs float16 arithmetic at a small fraction of its float32 rate"
    return (
        f"No Tensor Cores: compute capability {cap.label} < 7.0 has no float16 Tensor Cores, "
        f"so no speedup is expected from mixed_float16{observed(t, FLOAT16)}; {why}. "
        "What remains is the smaller memory traffic of half-size activations."
    )


def no_bf16_tensor_cores(t: Table) -> str | None:
    cap, _ = gpu_cc(t)
    if not is_gpu(t) or cap is None or cap.bf16_tensor_cores or not BFLOAT16 & set(t.policies):
        return None
    return (
        f"No bfloat16 Tensor Cores: compute capability {cap.label} < 8.0; mixed_bfloat16 "
        f"runs without a fast path here{observed(t, BFLOAT16)}."
    )


def tf32_baseline(t: Table) -> str | None:
    cap, _ = gpu_cc(t)
    if not is_gpu(t) or cap is None or not cap.tf32 or BASELINE not in t.policies:
        return None
    if any(e.tf32_off for (p, _), e in t.entries.items() if p == BASELINE):
        return None
    framework = FRAMEWORKS.get(t.info.device.framework or t.info.params.backend, "the framework")
    setting = t.info.settings.matmul_precision
    how = f"{framework}: {setting}" if setting else f"{framework}'s default"
    return (
        f"TF32 in the baseline: on compute capability {cap.label} the float32 runs already "
        f"use TF32 Tensor Cores ({how}), so mixed precision is compared with a Tensor Core "
        "baseline, not with true float32."
    )


def overhead_bound(t: Table) -> str | None:
    if profiles(t):
        return None  # measured instead (launch_bound)
    short = sorted(
        (b, e.median)
        for (_, b), e in t.entries.items()
        if e.median is not None and e.median < OVERHEAD_MS
    )
    if not short:
        return None
    batches = sorted({b for b, _ in short})
    return (
        f"Overhead-bound: steps under {OVERHEAD_MS:g} ms (batch {', '.join(map(str, batches))}, "
        f"fastest {short[0][1]:.2f} ms): kernel launches and framework overhead dominate, "
        "so faster arithmetic barely shows."
    )


def _model(t: Table) -> ModelInfo | None:
    """The model facts the table's records carry (the heading record's, else any)."""
    best = t.info.model if t.info.model is not None and t.info.model.parameters else None
    if best is not None or "model" not in t.carries:
        return best
    found = [r.model for e in t.entries.values() for r in e.records if r.model is not None]
    return next((m for m in found if m.parameters is not None), None)


def _dims(found: list[OffMultipleOf8], most: int = 6) -> str:
    named = [f"{d.layer} ({d.kind} {d.attribute} {d.value})" for d in found[:most]]
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return ", ".join(named) + more


def dims_not_multiple_of_8(t: Table) -> str | None:
    """The layers whose GEMM dimensions keep them off Tensor Core kernels (on a GPU that has
    them, with a 16-bit policy in the table whose type they serve)."""
    if not tensor_core_policies(t):
        return None
    model = _model(t)
    if model is None or not model.off_multiple_of_8:
        return None
    count = model.off_multiple_of_8_count or len(model.off_multiple_of_8)
    return (
        f"{count} GEMM dimension(s) of {model.name} are not multiples of 8, so those layers "
        f"cannot use Tensor Cores as they are (cuDNN / cuBLAS pad them or take slower "
        f"kernels): {_dims(model.off_multiple_of_8)}."
    )


def float16_output(t: Table) -> str | None:
    """A mixed policy whose model output stayed 16-bit: the loss is computed in 16 bits."""
    if "model" not in t.carries:
        return None
    bad = sorted(
        {
            f"{policy} ({r.model.output_dtype})"
            for (policy, _), e in t.entries.items()
            for r in e.records
            if policy.startswith("mixed")
            and r.model is not None
            and r.model.output_dtype in ("float16", "bfloat16")
        }
    )
    if not bad:
        return None
    return (
        f"The model's output is 16-bit under {', '.join(bad)}: mixed precision needs a float32 "
        "output (end the model with keras.layers.Activation('linear', dtype='float32')), or "
        "the softmax and the loss run in 16 bits and may overflow or lose precision."
    )


def memory_bound(t: Table) -> str | None:
    """Most activations written by memory-bound layers: the gain is bounded by bandwidth."""
    model = _model(t)
    share = model.memory_bound_share if model is not None else None
    if model is None or share is None or share < MEMORY_BOUND_SHARE:
        return None
    if not (FLOAT16 | BFLOAT16) & set(t.policies) or profiles(t):
        return None  # with a profiled window: measured_memory_bound
    return (
        f"Memory-bound: normalization, activation, depthwise, pooling and elementwise layers "
        f"write {share:.0%} of {model.name}'s activations ({model.memory_bound_layers} layers). "
        "Those layers gain at most the bandwidth ratio from 16-bit types (2x fewer bytes), "
        "never the Tensor Cores' arithmetic speedup."
    )


def model_warnings(t: Table) -> str | None:
    """What the bench noticed about a model that mixed precision cares about."""
    if "model" not in t.carries:
        return None
    said = list(
        dict.fromkeys(
            w
            for e in t.entries.values()
            for r in e.records
            if r.model is not None
            for w in r.model.warnings
        )
    )
    return ("The model: " + "; ".join(said) + ".") if said else None


def batch_not_multiple_of_8(t: Table) -> str | None:
    """The batch sizes of the 16-bit policies that could use Tensor Cores here, and cannot
    fully: not multiples of 8."""
    fast = tensor_core_policies(t)
    odd = sorted({b for p, b in t.entries if p in fast and b % 8})
    if not odd:
        return None
    return (
        f"Batch size {', '.join(map(str, odd))} is not a multiple of 8: Tensor Core kernels "
        "need multiples of 8 in every GEMM dimension."
    )


def input_bound(t: Table) -> str | None:
    low: dict[int, float] = {}
    for (_, b), e in t.entries.items():
        util = e.gpu_util_min
        if util is not None and util < LOW_UTIL_PCT:
            low[b] = min(util, low.get(b, util))
    if not low:
        return None
    unjudged = sorted({b for (_, b), e in t.entries.items() if e.util_unjudged} - set(low))
    seen = ", ".join(f"{u:.0f}% at batch {b}" for b, u in sorted(low.items()))
    skipped = (
        f" Not judged where the timed steps lasted under {NVML_PERIOD_MS / 1000:g} s, NVML's "
        f"sample period (batch {', '.join(map(str, unjudged))}; run more steps)."
        if unjudged
        else ""
    )
    return (
        f"Input-bound: GPU utilisation under {LOW_UTIL_PCT:g}% ({seen}): the GPU waits for "
        f"the input pipeline or the host, which no precision change can speed up.{skipped}"
    )


def silent_cpu_fallback(t: Table) -> str | None:
    dev = t.device
    gpus = dev.present_gpus
    framework = FRAMEWORKS.get(dev.framework or t.info.params.backend, "the framework")
    if is_cpu(t) and not gpus and t.image.labels.get("io.mxbench.target") == "gpu":
        # The GPU image, and not a GPU in sight: the container got none (the host has no
        # gpus: setting, no NVIDIA runtime, or no driver), and the framework said nothing.
        return (
            f"Silent CPU fallback: image {t.image_name} is the GPU build, but no GPU was "
            f"visible in it (NVML found no driver, {framework} no device), so {framework} ran "
            "on the CPU: give the host gpus: all (with the NVIDIA container runtime) and "
            "check nvidia-smi on it."
        )
    if dev.used_gpu is not False and not (is_cpu(t) and gpus):
        return None
    names = (
        ", ".join(
            f"{g.name or 'GPU'} (CC {g.compute_capability})"
            if g.compute_capability
            else g.name or "GPU"
            for g in gpus
        )
        or "a GPU"
    )
    text = f"Silent CPU fallback: {names} present, but {framework} ran on the CPU."
    ccs = [cc_pair(g.compute_capability) for g in gpus]
    if framework == "TensorFlow" and any(cc is not None and cc < (6, 0) for cc in ccs):
        text += (
            " Official TF GPU builds from 2.18 ignore compute capability < 6.0 (Maxwell): "
            "use TF 2.17 or a newer GPU."
        )
    return text


# NVML throttle reasons that slow a busy GPU down (not: idle, a clock setting, sync boost).
SLOWDOWNS = {
    "sw_power_cap": "power cap",
    "hw_power_brake_slowdown": "power brake",
    "hw_slowdown": "hardware slowdown (power or heat)",
    "sw_thermal_slowdown": "thermal",
    "hw_thermal_slowdown": "thermal (hardware)",
}


def throttled(t: Table) -> str | None:
    if not any(e.throttled for e in t.entries.values()):
        return None
    where: dict[str, list[str]] = {}  # kind of slowdown -> slots
    hottest: float | None = None
    for (policy, b), e in t.by_batch:
        kinds = sorted({SLOWDOWNS[r] for r in e.throttled if r in SLOWDOWNS})
        for kind in kinds:
            where.setdefault(kind, []).append(f"{policy} batch {b}")
        if kinds and e.temperature_max is not None:
            hottest = max(hottest or e.temperature_max, e.temperature_max)
    if not where:
        return None
    seen = "; ".join(f"{kind} at {', '.join(slots)}" for kind, slots in where.items())
    heat = f", up to {hottest:.0f} °C" if hottest is not None else ""
    return (
        f"Throttled during the timed steps ({seen}{heat}): the GPU ran below its clocks, so "
        "the clocks, not the precision, may explain part of these times and ratios; compare "
        "with a cooler GPU, a lower power draw or locked clocks."
    )


def loss_parity(t: Table) -> str | None:
    if not t.parity:
        return None  # no loss recorded
    diverged: dict[str, list[int]] = {}
    differs: dict[str, list[str]] = {}
    for (policy, b), loss in sorted(t.parity.items(), key=lambda kv: kv[0][1]):
        if not loss.trusted:
            diverged.setdefault(policy, []).append(b)
        elif loss.state == "differs" and loss.diff is not None:
            differs.setdefault(policy, []).append(f"{loss.diff:+.0%} at batch {b}")
    parts = []
    if diverged:
        which = "; ".join(f"{p} at batch {', '.join(map(str, bs))}" for p, bs in diverged.items())
        parts.append(
            f"Loss diverged: {which} trained to a non-finite loss (same seed and data as "
            "float32), so its step times time a broken training run: not a speedup."
        )
    if differs:
        which = "; ".join(f"{p} {', '.join(d)}" for p, d in differs.items())
        parts.append(
            f"Loss differs from float32's by more than {LOSS_TOLERANCE:.0%} ({which}): check "
            "that this policy trains to the same quality before trusting its speed."
        )
    return " ".join(parts) or None


# loss_scale values that leave pure float16 without loss scaling (auto: Keras scales
# mixed_float16 only)
UNSCALED = frozenset({"auto", "none"})


def pure_float16(t: Table) -> str | None:
    pure = [e for (p, _), e in t.entries.items() if p == "float16" or e.pure_float16]
    if not pure:
        return None
    scales = {r.params.loss_scale for e in pure for r in e.records}
    if scales and not scales & UNSCALED:  # every record scaled its loss: that part is not so
        return (
            "Pure float16: no float32 master weights, so updates too small for a float16 "
            f"weight are lost; its loss scaling (loss_scale {', '.join(sorted(scales))}) keeps "
            "small gradients from underflowing, not that. Use mixed_float16."
        )
    return (
        "Pure float16 (the Stack Overflow case): no float32 master weights and no loss "
        "scaling, so small gradients underflow and updates are lost; use mixed_float16."
    )


def above_the_roof(t: Table) -> str | None:
    """A cell above 100% of its dtype's roof: flagged, with what its float32 share implies."""
    return roofline.above(t)


def against_the_roof(t: Table) -> str | None:
    """Every cell's achieved TFLOP/s against the roofs of its dtype (datasheet, measured,
    formula): MFU and the share of the ceiling."""
    return roofline.against(t)


def speedup_bound(t: Table) -> str | None:
    """The measured speedup against the most mixed precision can give here (Amdahl)."""
    return roofline.bounds(t)


def isa_claim_mismatch(t: Table) -> str | None:
    claim = t.image.labels.get("io.mxbench.isa-claim", "").lower()
    if not claim:
        return None  # most images claim nothing
    claimed = {x.strip() for x in claim.split(",")} & {"avx2", "fma"}
    missing = t.info.cpu.tf_not_compiled_for
    if not claimed or compiled_for_avx2_fma(t.info) is not False or missing is None:
        return None
    absent = sorted(claimed & {str(m).lower() for m in missing})
    if not absent:
        return None
    return (
        f"Image claims {'/'.join(sorted(claimed)).upper()} (io.mxbench.isa-claim={claim}) but "
        f"TensorFlow's probe says it was not compiled for {'/'.join(absent).upper()}: the "
        "image does not contain the build it claims."
    )


def _speed(ratio: float) -> str:
    """``12.10× slower``, ``1.40× faster``: a point estimate as the answers say it."""
    if ratio < 1:
        return f"{figure(1 / ratio)}× slower"
    return f"{figure(ratio)}× faster"


def machine_in_use(t: Table) -> str | None:
    """The paired design measured what else ran during the timed windows: a busy machine is
    said, with the verdicts it may have blurred."""
    from mxbench.report.diagnosis.busy import as_measured, busy

    if "pairing" not in t.carries:
        return None  # no paired windows measured anything
    said, given_back = [], False
    for (policy, batch), e in t.by_batch:
        found = busy(e.records) if policy != BASELINE else None
        if found is None or not found.busy:
            continue
        ratio = t.ratios.get((policy, batch))
        verdict = f", verdict: {ratio.verdict}" if ratio is not None else ""
        raw = as_measured(e.records)
        if raw is not None and ratio is not None:
            given_back = True
            idle, measured = _speed(ratio.value), _speed(raw.value)
            verdict += f" ({idle} on an idle machine, {measured} as measured)"
        said.append(f"{policy} at batch {batch}: {found.text()}{verdict}")
    if not said:
        return None
    back = (
        ", each window is given back the CPU the others took (docs/measuring.md, 'A busy machine')"
        if given_back
        else ""
    )
    return (
        "The machine was in use while it was measured (measured, per window): "
        + "; ".join(said[:6])
        + f". Paired windows cancel most of it{back} and disturbed rounds are left out where "
        "enough were clean, but a 'no clear difference' here may be the load's: run again on "
        "a quieter machine, or let repeats: auto add processes."
    )


RULES: tuple[Callable[[Table], str | None], ...] = (
    silent_cpu_fallback,
    above_the_roof,
    throttled,
    no_fp16_tensor_cores,
    no_bf16_tensor_cores,
    tf32_baseline,
    float16_emulated_on_cpu,
    bf16_on_cpu,
    cpu_kernels,
    tensor_core_kernels,
    cast_overhead,
    measured_memory_bound,
    launch_bound,
    loss_parity,
    convergence.one_step_check,
    pure_float16,
    overhead_bound,
    input_bound,
    dims_not_multiple_of_8,
    float16_output,
    memory_bound,
    model_warnings,
    batch_not_multiple_of_8,
    against_the_roof,
    speedup_bound,
    isa_claim_mismatch,
    machine_in_use,
)


# Rules that speak of one kind of device only (each checks it too): not tried on a table of
# another kind (a fleet's tables are mostly of one kind; a minimal record's of none).
GPU_ONLY = frozenset({no_fp16_tensor_cores, no_bf16_tensor_cores, tf32_baseline,
                      tensor_core_kernels, dims_not_multiple_of_8,
                      batch_not_multiple_of_8})  # fmt: skip
CPU_ONLY = frozenset({float16_emulated_on_cpu, bf16_on_cpu, cpu_kernels})


def _rules(kind: str | None) -> tuple[Callable[[Table], str | None], ...]:
    return tuple(
        r
        for r in RULES
        if (r not in GPU_ONLY or kind == "gpu") and (r not in CPU_ONLY or kind == "cpu")
    )


_BY_KIND = {kind: _rules(kind) for kind in ("gpu", "cpu", None)}  # any other kind: None's


def diagnose(t: Table) -> list[Note]:
    notes = []
    for rule in _BY_KIND.get(t.device.kind, _BY_KIND[None]):
        text = rule(t)
        if text:
            notes.append(Note(rule.__name__, text))
    return notes
