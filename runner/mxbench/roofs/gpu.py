"""A GPU's formula peaks: SMs x clock x FLOP per cycle per SM, by compute capability.

Dense rates, an FMA counted as 2 FLOP (int8: operations), per SM and cycle, from NVIDIA's
architecture whitepapers and the CUDA programming guide's throughput table: the CUDA cores
for float32 (64 or 128 per SM), the Tensor Cores for TF32 / bfloat16 / float16 / float8 /
int8 where the compute capability has them. A dtype without a rate here has no fast path:
float16 on Maxwell 5.0 / 5.2 is converted and computed in float32; Pascal 6.1 computes it at
1/64 of float32's rate; bfloat16 before 8.0 has no Tensor Core path.

Checked against the datasheets (tests): V100 80 SMs x 1530 MHz -> 15.7 / 125; A100 108 x
1410 -> 19.5 / 156 / 312; H100 SXM 132 x 1830 -> 67 (fp32 at 1980) / 989 / 1979 (fp8);
L4 58 x 2040 -> 30.3 / 121; T4 40 x 1590 -> 8.1 / 65 / 130.
"""

from __future__ import annotations

from mxbench.roofs.model import Roof, absent

# compute capability -> dtype -> dense FLOP per cycle per SM
PER_SM: dict[tuple[int, int], dict[str, int]] = {
    (5, 0): {"float32": 256},
    (5, 2): {"float32": 256},
    (5, 3): {"float32": 256, "float16": 512},
    (6, 0): {"float32": 128, "float16": 256},
    (6, 1): {"float32": 256, "float16": 4, "int8": 1024},  # fp16 1/64; int8 dp4a
    (6, 2): {"float32": 256, "float16": 512},
    (7, 0): {"float32": 128, "float16": 1024},
    (7, 2): {"float32": 128, "float16": 1024, "int8": 2048},
    (7, 5): {"float32": 128, "float16": 1024, "int8": 2048},
    (8, 0): {"float32": 128, "tf32": 1024, "bfloat16": 2048, "float16": 2048, "int8": 4096},
    (8, 6): {"float32": 256, "tf32": 512, "bfloat16": 1024, "float16": 1024, "int8": 2048},
    (8, 7): {"float32": 256, "tf32": 512, "bfloat16": 1024, "float16": 1024, "int8": 2048},
    (8, 9): {
        "float32": 256,
        "tf32": 512,
        "bfloat16": 1024,
        "float16": 1024,
        "float8": 2048,
        "int8": 2048,
    },
    (9, 0): {
        "float32": 256,
        "tf32": 2048,
        "bfloat16": 4096,
        "float16": 4096,
        "float8": 8192,
        "int8": 8192,
    },
}
TENSOR_CORE_DTYPES = frozenset({"tf32", "bfloat16", "float16", "float8", "int8"})
DTYPES = ("float32", "tf32", "bfloat16", "float16", "float8", "int8")


def tensor_cores(cc: tuple[int, int], dtype: str) -> bool:
    """Whether compute capability ``cc`` runs ``dtype`` matmuls on Tensor Cores."""
    if dtype not in TENSOR_CORE_DTYPES:
        return False
    first = {
        "float16": (7, 0),
        "int8": (7, 2),
        "tf32": (8, 0),
        "bfloat16": (8, 0),
        "float8": (8, 9),
    }[dtype]
    return cc >= first


def formula_roofs(
    device: str, cc: tuple[int, int], sms: int, clock_mhz: float, clock_source: str = "boost clock"
) -> list[Roof]:
    """The formula roofs (TFLOP/s) of a GPU; a compute capability outside the table gives
    float32..int8 with ``value`` None and a note (no rate known, not "no path")."""
    per_sm = PER_SM.get(cc)
    label = f"{cc[0]}.{cc[1]}"
    clock = f"{sms} SMs x {clock_mhz:.0f} MHz ({clock_source})"
    out = []
    for dtype in DTYPES:
        if per_sm is None:
            note = f"no per-SM rates known for compute capability {label}"
            out.append(absent(device, dtype, clock, note, native=None))
            continue
        rate = per_sm.get(dtype)
        if rate is None:
            note = f"compute capability {label} has no {dtype} fast path"
            if dtype in ("bfloat16", "float16", "tf32"):
                note += ": computed in float32, at best the float32 roof"
            out.append(absent(device, dtype, clock, note))
            continue
        where = "Tensor Cores" if tensor_cores(cc, dtype) else "CUDA cores"
        source = f"cc {label} {where}: {rate} FLOP/cycle/SM x {clock}"
        native = tensor_cores(cc, dtype) or dtype == "float32" or rate >= per_sm["float32"]
        out.append(
            Roof(
                device=device,
                dtype=dtype,
                value=rate * sms * clock_mhz / 1e6,
                provenance="formula",
                source=source,
                native=native,
            )
        )
    return out
