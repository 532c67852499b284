"""The CPU's 16-bit rules (:mod:`mxbench.report.diagnosis.rules` orders them among the others):
what float16 and bfloat16 can do on a CPU, from its flags and the settings that keep oneDNN
from its instructions, where no record says which kernels ran (where one does, its
kernels say it: :func:`mxbench.report.diagnosis.kernels.cpu_kernels`); and the observed
speedups every rule quotes."""

from __future__ import annotations

from mxbench import stats
from mxbench.bench.evidence import onednn
from mxbench.report import devices
from mxbench.report.diagnosis.kernels import (
    AMX,
    BFLOAT16,
    FLOAT16,
    REFERENCE_SHARE,
    is_cpu,
    kernels_said,
    on_reference,
    profiles,
)
from mxbench.report.tables import Table


def fmt_range(values: list[float]) -> str:
    """``0.95–1.02``: the range of ``values`` as figures (one figure where they agree)."""
    lo, hi = min(values), max(values)
    lo_text, hi_text = stats.figure(lo), stats.figure(hi)
    return lo_text if lo_text == hi_text else f"{lo_text}–{hi_text}"


def speedups(t: Table, policies: frozenset[str]) -> list[float]:
    """The measured speedups over float32 of ``policies``, at every batch size."""
    return [
        s
        for p in t.policies
        if p in policies
        for b in t.batches
        if (s := t.speedup(p, b)) is not None
    ]


def observed(t: Table, policies: frozenset[str]) -> str:
    """`` (observed speedup 0.95–1.02, no clear difference)``: the range and the verdict
    of the intervals (when they agree)."""
    found = speedups(t, policies)
    if not found:
        return ""
    verdicts = {
        r.verdict
        for slot, r in t.ratios.items()
        if slot[0] in policies and r.judged and t.trusted(slot)
    }
    said = ""
    if len(verdicts) == 1:
        said = f", {verdicts.pop()}"
    elif verdicts:
        said = ", the verdict varies with batch size"
    return f" (observed speedup {fmt_range(found)}{said})"


# /proc/cpuinfo flags of float16 arithmetic: AVX512-FP16, AMX's float16 tiles
FP16_FLAGS = frozenset({"avx512_fp16", "amx_fp16"})


def float16_emulated_on_cpu(t: Table) -> str | None:
    if not is_cpu(t) or not FLOAT16 & set(t.policies):
        return None
    cpu = t.info.cpu
    if devices.is_x86(cpu.model, cpu.flags, cpu.arch) is not True:
        return None
    found = [p.onednn for _, _, p in profiles(t, FLOAT16) if kernels_said(p.onednn)]
    if any((d.native16_share or 0.0) > 0 for d in found):
        # some of its kernels ran float16 natively, so not every operation was converted:
        # what ran says how much (cpu_kernels)
        return None
    if any(on_reference(d) >= REFERENCE_SHARE for d in found):
        return None  # its kernels ran on oneDNN's reference loops: cpu_kernels says so
    has = sorted(FP16_FLAGS & {f.lower() for f in cpu.flags or ()})
    if has and not found:  # float16 instructions, and no record of the kernels that ran
        text = (
            f"this CPU has float16 arithmetic ({', '.join(has)}), but no record says "
            "mixed_float16's convolutions and matmuls used it (profile: on records oneDNN's "
            "kernels); where it is not used, float16 is converted to float32 for every "
            f"operation{observed(t, FLOAT16)}."
        )
    else:
        text = (
            "float16 on an x86 CPU is emulated (converted to float32 for every operation), so "
            f"mixed_float16 is expected to be much slower than float32{observed(t, FLOAT16)}."
        )
    if t.info.settings.jit_compile is False:
        text += (
            " XLA was off here: each operation converts on its own. With jit_compile: on "
            "(--jit-compile on) XLA fuses the conversions, which is usually many times "
            "faster, though still not faster than float32."
        )
    return text


def bf16_on_cpu(t: Table) -> str | None:
    if not is_cpu(t) or not BFLOAT16 & set(t.policies):
        return None
    if any(kernels_said(p.onednn) for _, _, p in profiles(t, BFLOAT16)):
        return None  # the kernels that ran say it (cpu_kernels)
    native = devices.native_bf16(t.info.cpu.flags)
    if native is None:
        return None
    kept, cap = onednn_kept(t)
    if native and kept is not None and not onednn.native16(cap or "avx2", "bf16"):
        return (
            f"This CPU has bfloat16 instructions, but {kept}: bfloat16 is converted to float32 "
            f"around the arithmetic there, so no speedup is expected from mixed_bfloat16"
            f"{observed(t, BFLOAT16)}."
        )
    if native:
        amx = devices.amx_bf16(t.info.cpu.flags)
        if amx and (cap is None or onednn.amx(cap)):
            text = (
                f"This CPU has AMX ({AMX}): oneDNN runs the bfloat16 convolutions and matmuls "
                "on them, so mixed_bfloat16 is expected to be clearly faster than float32 "
                f"where those dominate{observed(t, BFLOAT16)}."
            )
        elif amx:
            text = (
                f"This CPU has AMX, but {kept}, below it: oneDNN runs bfloat16 natively on "
                "the vector units (AVX512_BF16) instead of the tiles, so mixed_bfloat16 can "
                f"beat float32, by less than AMX would{observed(t, BFLOAT16)}."
            )
        else:
            text = (
                "This CPU has AVX512_BF16 (bfloat16 dot products in its vector units; no AMX "
                "tile matrix units): oneDNN runs bfloat16 natively, so mixed_bfloat16 can "
                f"beat float32{observed(t, BFLOAT16)}."
            )
        seen = speedups(t, BFLOAT16)
        if seen and max(seen) < 1:
            text += (
                " It did not here: on small inputs the casts and layout changes around each "
                "layer likely outweigh the faster arithmetic; the gain shows at larger image "
                "sizes (the experiment's 256 px)."
            )
        return text
    return (
        "This CPU has neither AVX512_BF16 nor AMX: bfloat16 is converted in software, so no "
        f"speedup is expected from mixed_bfloat16{observed(t, BFLOAT16)}."
    )


def onednn_kept(t: Table) -> tuple[str | None, str | None]:
    """What the settings kept oneDNN from (a sentence's clause, None: nothing), and the
    ``ONEDNN_MAX_CPU_ISA`` cap (None: no cap): TensorFlow's oneDNN operations switched off
    leave it no instruction at all."""
    s, backend = t.info.settings, t.info.params.backend
    if backend not in ("tensorflow", "torch"):
        return None, None  # XLA compiles its own kernels: no oneDNN
    cap = (s.onednn_max_cpu_isa or "").strip()
    cap_or_none = cap if cap and cap.lower() != "all" else None
    if backend == "tensorflow" and (s.onednn or "").strip().lower() in ("0", "false"):
        return f"TensorFlow's oneDNN operations were off (TF_ENABLE_ONEDNN_OPTS={s.onednn})", None
    if cap_or_none is not None:
        return f"oneDNN was capped at ONEDNN_MAX_CPU_ISA={cap}", cap_or_none
    return None, None
