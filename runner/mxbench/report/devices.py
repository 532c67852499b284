"""What a device can do: NVIDIA compute capabilities Maxwell..Blackwell, CPU features.

Facts, not measurements: the capability rules are NVIDIA's (float16 Tensor Cores from 7.0,
bfloat16 and TF32 Tensor Cores from 8.0); the vendors' peak rates are roofs,
kept with their sources in :mod:`mxbench.roofs.datasheet`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from mxbench.records.codec import cc_pair


@dataclass(frozen=True)
class Capability:
    cc: tuple[int, int]
    arch: str

    @property
    def fp16_tensor_cores(self) -> bool:
        return self.cc >= (7, 0)

    @property
    def bf16_tensor_cores(self) -> bool:
        return self.cc >= (8, 0)

    @property
    def tf32(self) -> bool:
        return self.cc >= (8, 0)

    @property
    def label(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


# Compute capability -> architecture, Maxwell (5.x) to Blackwell (10.x, 12.x).
ARCHITECTURES: dict[tuple[int, int], str] = {
    (5, 0): "Maxwell",
    (5, 2): "Maxwell",
    (5, 3): "Maxwell",
    (6, 0): "Pascal",
    (6, 1): "Pascal",
    (6, 2): "Pascal",
    (7, 0): "Volta",
    (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada Lovelace",
    (9, 0): "Hopper",
    (10, 0): "Blackwell",
    (10, 3): "Blackwell",
    (11, 0): "Blackwell",
    (12, 0): "Blackwell",
    (12, 1): "Blackwell",
}

# Marketing name fragment (lower case, matched as a word sequence) -> compute capability.
# Used only when a record names a GPU but carries no compute capability.
_NAME_CC: tuple[tuple[str, str], ...] = (
    ("m2200", "5.2"),
    ("gtx 980", "5.2"),
    ("p100", "6.0"),
    ("titan xp", "6.1"),
    ("1080", "6.1"),
    ("1070", "6.1"),
    ("p40", "6.1"),
    ("p4", "6.1"),
    ("v100", "7.0"),
    ("titan v", "7.0"),
    ("t4", "7.5"),
    ("2080", "7.5"),
    ("titan rtx", "7.5"),
    ("a100", "8.0"),
    ("a30", "8.0"),
    ("a10", "8.6"),
    ("a40", "8.6"),
    ("3090", "8.6"),
    ("3080", "8.6"),
    ("l4", "8.9"),
    ("l40", "8.9"),
    ("4090", "8.9"),
    ("h100", "9.0"),
    ("h200", "9.0"),
    ("gh200", "9.0"),
    ("b200", "10.0"),
    ("gb200", "10.0"),
    ("5090", "12.0"),
)


@functools.cache
def _fragment(fragment: str) -> re.Pattern[str]:
    """A name fragment as a whole word (compiled once per fragment, not per name)."""
    return re.compile(rf"(?<![a-z0-9]){re.escape(fragment)}(?![a-z0-9])")


def _name_match(name: str, fragment: str) -> bool:
    return _fragment(fragment).search(name.lower()) is not None


def cc_from_name(name: str | None) -> str | None:
    if not name:
        return None
    for fragment, cc in _NAME_CC:
        if _name_match(name, fragment):
            return cc
    return None


# Turing GPUs built without Tensor Cores (compute capability 7.5 all the same): GTX 16xx
_NO_TENSOR_CORES = ("gtx 16",)


def without_tensor_cores(name: str | None) -> bool:
    """Whether a GPU of a Tensor Core compute capability was built without them (the GTX
    1650 / 1660 family: Turing, 7.5)."""
    low = (name or "").lower()
    return any(fragment in low for fragment in _NO_TENSOR_CORES)


def capability(cc: object) -> Capability | None:
    parsed = cc_pair(cc)  # read as the upgrade of older records reads it
    if parsed is None:
        return None
    arch = ARCHITECTURES.get(parsed)
    if arch is None:
        arch = "future" if parsed > (12, 1) else "unknown"
    return Capability(parsed, arch)


# CPU instructions that matter for the report, as (flag in /proc/cpuinfo, display name).
CPU_FEATURES: tuple[tuple[str, str], ...] = (
    ("avx2", "AVX2"),
    ("fma", "FMA"),
    ("avx512_bf16", "AVX512_BF16"),
    ("amx_bf16", "AMX"),
)

_X86_FLAGS = frozenset({"sse2", "avx", "avx2", "sse4_2", "ssse3"})
_X86_MODEL = re.compile(r"intel|amd|xeon|epyc|ryzen|core\(tm\)|core i\d|opteron|threadripper", re.I)


_X86_ARCH = frozenset({"x86_64", "amd64", "i386", "i686"})


def is_x86(model: str | None, flags: list[str] | None, arch: str | None = None) -> bool | None:
    """True/False when the record says enough to know, None when it does not."""
    if arch:
        return str(arch).lower() in _X86_ARCH
    if flags:
        return bool(_X86_FLAGS.intersection(f.lower() for f in flags))
    if model:
        return True if _X86_MODEL.search(model) else None
    return None


# /proc/cpuinfo flags of the instructions oneDNN computes bfloat16 with: AVX512_BF16's dot
# products in the vector units, AMX's tile matrix units (whose CPUs have AVX512_BF16 too).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def native_bf16(flags: list[str] | None) -> bool | None:
    """Whether the CPU computes bfloat16 natively (None: no flags recorded)."""
    if not flags:
        return None
    return bool({f.lower() for f in flags} & NATIVE_BF16_FLAGS)


def amx_bf16(flags: list[str] | None) -> bool | None:
    """Whether the CPU has AMX tile matrix units for bfloat16 (None: no flags recorded)."""
    if not flags:
        return None
    return "amx_bf16" in {f.lower() for f in flags}


def cuda_text(value: str | None) -> str | None:
    """CUDA as people write it: '13.0' from jaxlib's 'cuda 13000' (major * 1000 + minor * 10)."""
    if not value:
        return value
    from mxbench.bench.backends import cuda_version

    return cuda_version(value)


def cudnn_text(value: str | None) -> str | None:
    """cuDNN as people write it: '9.19.0' from PyTorch's 91900 (from 9: major * 10000 + minor *
    100 + patch; before: major * 1000 + minor * 100 + patch, 8907 -> '8.9.7'); other text as
    it is."""
    if not value or not value.strip().isdigit() or len(value.strip()) < 4:
        return value
    n = int(value)
    major, rest = (n // 10000, n % 10000) if n >= 90000 else (n // 1000, n % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"
