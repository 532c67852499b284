"""A CPU's formula peaks: FLOP per cycle per core from its ISA flags, times cores and clock.

Per core and cycle, an FMA counted as 2 FLOP, two FMA units assumed (every server core
since Haswell; some Xeon Silver / Bronze parts have one AVX-512 unit, and their figure is
half of this):

- float32: 32 with AVX2 + FMA (2 x 256-bit FMA), 64 with AVX-512 (2 x 512-bit), except AMD
  Zen 4 (family 0x19), whose AVX-512 runs as two 256-bit halves: 32; Zen 1 (family 0x17,
  models below 0x30) has 2 x 128-bit FMA: 16. Without FMA: 16 (AVX), 8 (SSE2).
- bfloat16: AMX tiles 1024; AVX512_BF16's dot products twice the float32 rate; else no
  native path: bfloat16 is converted and computed in float32, at best the float32 roof.
- float16: AMX-FP16 1024; AVX512_FP16 twice float32; else converted, as bfloat16.
- int8: AMX 2048; VNNI (AVX512_VNNI / AVX_VNNI) four times float32 (a dot product of four
  bytes per 32-bit lane).

``ONEDNN_MAX_CPU_ISA`` caps what oneDNN uses (tests/cpu_kinds.py makes an AVX2-only CPU of
any x86 with it): :func:`capped` drops the flags above the cap, so the formula is the
capped CPU's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mxbench.roofs.model import Roof, absent

# ONEDNN_MAX_CPU_ISA levels (lowest first) -> flag prefixes above that level
_ABOVE = {
    "AVX2": ("avx512", "amx", "avx_vnni"),
    "AVX2_VNNI": ("avx512", "amx"),
    "AVX512_CORE": ("avx512_bf16", "avx512_fp16", "avx512_vnni", "amx"),
    "AVX512_CORE_VNNI": ("avx512_bf16", "avx512_fp16", "amx"),
    "AVX512_CORE_BF16": ("avx512_fp16", "amx"),
    "AVX512_CORE_FP16": ("amx",),
}


def capped(flags: Iterable[str], max_isa: str | None) -> set[str]:
    """The flags oneDNN can use under ``ONEDNN_MAX_CPU_ISA=max_isa`` (no cap: all)."""
    found = {f.lower() for f in flags}
    above = _ABOVE.get((max_isa or "").strip().upper())
    if not above:
        return found
    return {f for f in found if not f.startswith(above)}


@dataclass(frozen=True)
class Rates:
    """FLOP (int8: operations) per cycle per core by dtype; None: no native path."""

    float32: int
    bfloat16: int | None
    float16: int | None
    int8: int | None
    why: dict[str, str]  # dtype -> the flags (and core) the rate follows from


def rates(
    flags: Iterable[str],
    vendor: str = "",
    family: int | None = None,
    model: int | None = None,
) -> Rates:
    """FLOP per cycle per core from the flags (``/proc/cpuinfo``) and, for AMD, the family
    and model (Zen 4's AVX-512 is two 256-bit halves; Zen 1's FMA two 128-bit units)."""
    f = {x.lower() for x in flags}
    amd = "amd" in vendor.lower()
    zen4 = amd and family == 0x19
    zen1 = amd and family == 0x17 and model is not None and model < 0x30
    why: dict[str, str] = {}
    if "avx512f" in f and not zen4:
        fp32, why["float32"] = 64, "AVX-512: 2 x 512-bit FMA"
    elif "avx512f" in f:
        fp32, why["float32"] = 32, "AVX-512 on Zen 4: 2 x 256-bit FMA (512-bit ops in halves)"
    elif {"avx2", "fma"} <= f and zen1:
        fp32, why["float32"] = 16, "AVX2 + FMA on Zen 1: 2 x 128-bit FMA"
    elif {"avx2", "fma"} <= f:
        fp32, why["float32"] = 32, "AVX2 + FMA: 2 x 256-bit FMA"
    elif "avx" in f:
        fp32, why["float32"] = 16, "AVX without FMA: 256-bit add + multiply"
    else:
        fp32, why["float32"] = 8, "SSE2: 128-bit add + multiply"
    bf16 = f16 = i8 = None
    if "amx_bf16" in f:
        bf16, why["bfloat16"] = 1024, "AMX-BF16 tiles"
    elif "avx512_bf16" in f:
        bf16, why["bfloat16"] = 2 * fp32, "AVX512_BF16 dot products: 2 x float32"
    if "amx_fp16" in f:
        f16, why["float16"] = 1024, "AMX-FP16 tiles"
    elif "avx512_fp16" in f:
        f16, why["float16"] = 2 * fp32, "AVX512_FP16: 2 x float32"
    if "amx_int8" in f:
        i8, why["int8"] = 2048, "AMX-INT8 tiles"
    elif "avx512_vnni" in f:
        i8, why["int8"] = 4 * fp32, "AVX512_VNNI: 4 x float32"
    elif "avx_vnni" in f:
        i8, why["int8"] = 4 * min(fp32, 32), "AVX-VNNI (256-bit): 4 x float32"
    return Rates(fp32, bf16, f16, i8, why)


def formula_roofs(
    device: str,
    flags: Iterable[str],
    cores: int,
    ghz: float,
    clock_source: str,
    vendor: str = "",
    family: int | None = None,
    model: int | None = None,
    max_isa: str | None = None,
) -> list[Roof]:
    """The formula roofs (TFLOP/s) of a CPU: per dtype, rate x cores x clock; a dtype with
    no native path gets ``value`` None and a note of what stands in for it."""
    every = {x.lower() for x in flags}
    used = capped(every, max_isa)
    r = rates(used, vendor, family, model)
    cap = f"; flags capped by ONEDNN_MAX_CPU_ISA={max_isa}" if used != every else ""
    clock = f"{cores} core(s) x {ghz:.2f} GHz ({clock_source}){cap}"
    fp32 = r.float32 * cores * ghz / 1000
    out = []
    for dtype, rate in (
        ("float32", r.float32),
        ("bfloat16", r.bfloat16),
        ("float16", r.float16),
        ("int8", r.int8),
    ):
        if rate is None:
            if dtype == "int8":
                note = "no int8 dot-product instructions (VNNI, AMX): no native path"
            else:
                note = (
                    f"no native {dtype} path on this ISA: converted and computed in "
                    f"float32, at best the float32 roof ({fp32 * 1000:.3g} GFLOP/s)"
                )
            out.append(absent(device, dtype, clock, note))
            continue
        source = f"{r.why[dtype]}: {rate} FLOP/cycle/core x {clock}"
        out.append(
            Roof(
                device=device,
                dtype=dtype,
                value=rate * cores * ghz / 1000,
                provenance="formula",
                source=source,
                native=True,
            )
        )
    return out
