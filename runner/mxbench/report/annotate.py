"""The lines under a table's title: what the device is and can do, and how TF was built.

GPU: "CC 7.0 (Volta) · fp16 Tensor Cores: yes · bf16 Tensor Cores: no · TF … · CUDA … · cuDNN …".
CPU: model, AVX2 / FMA / AVX512_BF16 / AMX, and whether the TF binary was compiled for
AVX2/FMA ("compiled in" only when TF's own probe said so, never guessed).
"""

from __future__ import annotations

from typing import Any

from mxbench.report import devices
from mxbench.report.tables import Table


def _d(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def gpu_cc(table: Table) -> tuple[devices.Capability | None, bool]:
    """The GPU's capability and whether it was inferred from the name (not recorded)."""
    return table.capability


def software_line(rec: dict[str, Any]) -> str:
    sw = _d(rec.get("software"))
    parts = []
    for key, label in (("tensorflow", "TF"), ("keras", "Keras"), ("cuda", "CUDA"),
                       ("cudnn", "cuDNN")):  # fmt: skip
        if sw.get(key):
            parts.append(f"{label} {sw[key]}")
    backend = sw.get("backend")
    if backend and backend != "tensorflow":
        parts.append(f"backend {backend}")
    return " · ".join(parts)


def compiled_for_avx2_fma(rec: dict[str, Any]) -> bool | None:
    """True/False from TF's cpu_feature_guard probe; None when the record does not say."""
    missing = _d(rec.get("cpu")).get("tf_not_compiled_for")
    if not isinstance(missing, list):
        return None
    upper = {str(m).upper() for m in missing}
    return not ({"AVX2", "FMA"} & upper)


def gpu_line(table: Table) -> str:
    cap, inferred = gpu_cc(table)
    if cap is None:
        return "CC unknown · Tensor Cores: unknown"
    cc = f"CC {cap.label} ({cap.arch}{', from the name' if inferred else ''})"
    return " · ".join(
        (
            cc,
            f"fp16 Tensor Cores: {_yes(cap.fp16_tensor_cores)}",
            f"bf16 Tensor Cores: {_yes(cap.bf16_tensor_cores)}",
        )
    )


def cpu_line(rec: dict[str, Any]) -> str:
    cpu = _d(rec.get("cpu"))
    parts = [f"CPU {cpu.get('model') or _d(rec.get('device')).get('name') or 'model unknown'}"]
    if cpu.get("cores"):
        parts[0] += f" ({cpu['cores']} cores)"
    flags = cpu.get("flags")
    if isinstance(flags, list) and flags:
        have = {str(f).lower() for f in flags}
        parts += [f"{name}: {_yes(flag in have)}" for flag, name in devices.CPU_FEATURES]
    else:
        parts.append("instruction set not recorded")
    compiled = compiled_for_avx2_fma(rec)
    if compiled is True:
        parts.append("TF binary: AVX2/FMA compiled in")
    elif compiled is False:
        parts.append("TF binary: not compiled for AVX2/FMA")
    else:
        parts.append("TF binary: AVX2/FMA build unknown")
    return " · ".join(parts)


def lines(table: Table) -> list[str]:
    rec = table.info
    kind = table.device.get("kind")
    out = []
    if kind == "gpu":
        out.append(gpu_line(table))
    elif kind == "cpu":
        out.append(cpu_line(rec))
    else:
        out.append("device not recorded")
    sw = software_line(rec)
    if sw:
        out.append(sw)
    setup = " · ".join(f"{k} {v}" for k, v in table.setup.items() if v not in (None, ""))
    if setup:
        out.append(f"setup: {setup}")
    if rec.get("source"):
        out.append(f"source: {rec['source']}")
    return out
