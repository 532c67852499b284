"""Pre-flight: before a long run, does this host have a fast path for each backend and
16-bit dtype, and how much faster can its matmuls be than float32's?

Three witnesses per (backend, dtype): the hardware (ISA flags on a CPU, Tensor Cores by
compute capability on a GPU: the formula roof's ``native``), the kernels a tiny probe ran
(oneDNN's verbose log names the ISA of each matmul it created: ``avx512_core_bf16`` is
native bfloat16, ``avx2`` or ``avx512_core`` a float32 ISA converting), and the measured
ceiling ratio (the dtype's matmul ceiling over float32's). A warning where the hardware has
no fast path, where the backend's kernels did not use the one it has, or where the measured
ratio leaves mixed precision nothing to gain.
"""

from __future__ import annotations

from dataclasses import dataclass

from mxbench.bench.evidence import onednn
from mxbench.roofs.collect import Roofs

NO_GAIN = 1.1  # a ceiling ratio below this leaves mixed precision next to nothing
SIXTEEN = ("bfloat16", "float16")
ONEDNN_NAMES = {"bfloat16": "bf16", "float16": "f16"}


@dataclass(frozen=True)
class FastPath:
    backend: str
    device: str
    dtype: str
    state: str  # ok / warn
    hardware: str
    kernels: str
    ratio: float | None
    detail: str


def _kernels(isas: list[str] | None, dtype: str) -> tuple[str, bool | None]:
    """The probe's oneDNN kernels for ``dtype`` in words, and whether any was native."""
    if not isas:
        return "no oneDNN matmul logged (another library ran it)", None
    native = any(onednn.native16(i, ONEDNN_NAMES[dtype]) for i in isas)
    return f"oneDNN {', '.join(isas)}" + (" (native)" if native else " (converted)"), native


def fast_paths(found: Roofs) -> list[FastPath]:
    """Per backend measured and 16-bit dtype: whether a fast path exists and is used."""
    out = []
    for m in found.roofs:
        if m.provenance != "measured" or m.kind != "matmul" or m.dtype not in SIXTEEN:
            continue
        backend = m.backend or ""
        formula = found.find(m.device, m.dtype, "formula")
        base = found.find(m.device, "float32", "measured", backend)
        ratio = m.value / base.value if m.value and base and base.value else None
        hw_native = formula.native if formula else None
        hardware = {True: "native", False: "none", None: "not known"}[hw_native]
        if formula and formula.source and hw_native:
            hardware += f" ({formula.source.split(':')[0]})"
        words, ran_native = _kernels(found.kernels.get(backend, {}).get(m.dtype), m.dtype)
        warn = []
        if hw_native is False:
            warn.append(f"no native {m.dtype} path in this hardware: converted to float32")
        elif ran_native is False:
            warn.append(f"{backend}'s kernels converted {m.dtype} instead of using the native path")
        if ratio is not None and ratio < NO_GAIN:
            has = " though the hardware has a fast path" if hw_native else ""
            warn.append(
                f"{backend}'s {m.dtype} matmuls reach {ratio:.2f}x float32's ceiling{has}: "
                f"mixed {m.dtype} has little or nothing to gain here"
            )
        ok = f"{m.dtype} matmuls reach {ratio:.2f}x float32's ceiling" if ratio else "measured"
        out.append(
            FastPath(
                backend,
                m.device,
                m.dtype,
                "warn" if warn else "ok",
                hardware,
                words,
                ratio,
                "; ".join(warn) or ok,
            )
        )
    return out


def text(paths: list[FastPath]) -> str:
    from tabulate import tabulate

    body = [
        [
            p.backend,
            p.dtype,
            p.state,
            p.hardware,
            p.kernels,
            f"{p.ratio:.2f}x" if p.ratio is not None else "",
            p.detail,
        ]
        for p in paths
    ]
    head = [
        "backend",
        "dtype",
        "",
        "hardware path",
        "kernels the probe ran",
        "vs float32",
        "detail",
    ]
    return str(tabulate(body, headers=head))
