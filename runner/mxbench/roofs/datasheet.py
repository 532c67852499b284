"""The vendors' figures for the GPUs mxbench knows: THE one table of datasheet peaks.

Dense rates in TFLOP/s (int8 in TOP/s), an FMA counted as 2 FLOP, at the boost clock, and
the memory bandwidth in GB/s. From Ampere on NVIDIA's datasheets quote the Tensor Core
rates "with sparsity" (2:4 structured sparsity, twice the dense rate) in the headline
column: the figures here are the dense ones, and :func:`roofs` states the sparse ones
beside them (``dense=False``), so that a 1979 TFLOP/s H100 "bf16 peak" (inductor's table
has it) is never taken for the dense 989.4. A dtype absent from an entry has no fast path on
that GPU; where a datasheet gives no figure but the rate is documented elsewhere (float16
on the Titan Xp: CUDA's throughput table), the source says so.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from mxbench.roofs.model import Roof

CUDA_THROUGHPUT = (
    "CUDA C++ Programming Guide, 'Arithmetic Instructions' throughput table "
    "(docs.nvidia.com/cuda/cuda-c-programming-guide/)"
)


@dataclass(frozen=True)
class Sheet:
    """One GPU's datasheet: dense peaks per dtype, bandwidth, where they come from."""

    fragment: str  # lower-case marketing name fragment, matched as a word sequence
    name: str
    peaks: dict[str, float]
    bandwidth_gbs: float
    source: str
    variant: str = ""  # which form factor the figures are for (SXM, PCIe, ...)
    sparse_from_tensor_cores: bool = False  # the datasheet's headline rates are sparse
    notes: dict[str, str] = field(default_factory=dict)  # per dtype: a source of its own


SHEETS: tuple[Sheet, ...] = (
    Sheet(
        "v100", "Tesla V100", {"float32": 15.7, "float16": 125.0}, 900.0,
        "NVIDIA Tesla V100 datasheet (nvidia.com/en-us/data-center/v100/)",
        variant="SXM2 (PCIe: 14 / 112 TFLOP/s)",
    ),
    Sheet(
        "titan xp", "TITAN Xp", {"float32": 12.15, "float16": 0.19}, 547.7,
        "NVIDIA TITAN Xp specifications (nvidia.com/en-us/titan/titan-xp/): 12.1 TFLOP/s, "
        "3840 CUDA cores at 1582 MHz",
        notes={"float16": "no float16 figure on the datasheet: GP102 (compute capability 6.1) "
               f"runs float16 at 1/64 of float32's rate, per the {CUDA_THROUGHPUT}"},
    ),
    Sheet(
        "m2200", "Quadro M2200", {"float32": 2.12}, 88.0,
        "NVIDIA Quadro M2200 specifications (nvidia.com): 1024 CUDA cores at 1036 MHz boost, "
        "128-bit GDDR5 at 5.5 Gbps",
        notes={"float16": "Maxwell 5.2 has no float16 arithmetic: float16 is converted and "
               f"computed in float32 ({CUDA_THROUGHPUT})"},
    ),
    Sheet(
        "a100", "A100", {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0,
                         "int8": 624.0}, 2039.0,
        "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/)",
        variant="SXM 80GB (40GB: 1555 GB/s)", sparse_from_tensor_cores=True,
    ),
    Sheet(
        "h100 pcie", "H100 PCIe", {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.0,
                                   "float16": 756.0, "float8": 1513.0, "int8": 1513.0}, 2000.0,
        "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/)",
        variant="PCIe", sparse_from_tensor_cores=True,
    ),
    Sheet(
        "h100", "H100", {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4,
                         "float8": 1978.9, "int8": 1978.9}, 3350.0,
        "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/)",
        variant="SXM", sparse_from_tensor_cores=True,
    ),
    Sheet(
        "h200", "H200", {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4,
                         "float8": 1978.9, "int8": 1978.9}, 4800.0,
        "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/)",
        variant="SXM", sparse_from_tensor_cores=True,
    ),
    Sheet(
        "l4", "L4", {"float32": 30.3, "tf32": 60.0, "bfloat16": 121.0, "float16": 121.0,
                     "float8": 242.5, "int8": 242.5}, 300.0,
        "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4/)",
        sparse_from_tensor_cores=True,
    ),
    Sheet(
        "t4", "Tesla T4", {"float32": 8.1, "float16": 65.0, "int8": 130.0}, 320.0,
        "NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4/)",
    ),
)  # fmt: skip


@functools.cache
def _pattern(fragment: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![a-z0-9]){re.escape(fragment)}(?![a-z0-9])")


def sheet(name: str | None) -> Sheet | None:
    """The datasheet of a GPU by its name (``NVIDIA H100 80GB HBM3``), first match wins."""
    if not name:
        return None
    low = name.lower()
    return next((s for s in SHEETS if _pattern(s.fragment).search(low)), None)


def roofs(name: str | None) -> list[Roof]:
    """The datasheet's roofs of a GPU: dense matmul rates per dtype, the sparse ones where
    the datasheet quotes them, and the memory bandwidth; [] for a GPU not in the table."""
    s = sheet(name)
    if s is None:
        return []
    device = str(name)
    where = s.source + (f"; {s.variant}" if s.variant else "")
    out = []
    for dtype, value in s.peaks.items():
        note = s.notes.get(dtype, "")
        out.append(Roof(device=device, dtype=dtype, value=value, provenance="datasheet",
                        source=where, dense=True, note=note))  # fmt: skip
        if s.sparse_from_tensor_cores and dtype != "float32":
            out.append(Roof(device=device, dtype=dtype, value=2 * value,
                            provenance="datasheet", source=where, dense=False,
                            note="2:4 structured sparsity: not a dense matmul's roof"))  # fmt: skip
    for dtype, note in s.notes.items():
        if dtype not in s.peaks:
            out.append(Roof(device=device, dtype=dtype, value=None, provenance="datasheet",
                            source=where, native=False, note=note))  # fmt: skip
    out.append(Roof(device=device, dtype="float32", kind="bandwidth", value=s.bandwidth_gbs,
                    provenance="datasheet", source=where))  # fmt: skip
    return out
