"""A roof and its provenance; an achieved figure judged against one; the speedup's bound."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from mxbench.records.part import Doc

Provenance = Literal["measured", "formula", "datasheet"]
Kind = Literal["matmul", "bandwidth"]
# The dtypes a roof is stated for: float32 (IEEE, no TF32), TF32 (float32 storage on
# Tensor Cores), bfloat16, float16, float8 (e4m3) and int8.
DTYPES = ("float32", "tf32", "bfloat16", "float16", "float8", "int8")


ABOVE = "above the roof: another path ran, or a unit is wrong"
# A measured ceiling is what a short sweep of matmul shapes reached, a floor under the true
# roof: a cell a little above it is not impossible, but says the sweep or the count is off.
ABOVE_MEASURED = (
    "above the measured ceiling: this model's kernels beat the probe's matmul shapes, or its "
    "FLOP count (3x forward) overstates"
)


class Roof(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One ceiling: a matmul rate (TFLOP/s; TOP/s for int8) or a memory bandwidth (GB/s).

    ``value`` None: no such path here (``note`` says why, and what stands in for it).
    ``native``: whether the hardware computes this dtype natively (False: converted or
    emulated; None: not known). ``dense`` (datasheets): the figure is without 2:4
    sparsity."""

    device: Annotated[str, Doc("a GPU's name, or 'cpu: MODEL (N core(s))'")]
    dtype: Annotated[str, Doc("float32, tf32, bfloat16, float16, float8, int8")]
    kind: Annotated[Kind, Doc("matmul (TFLOP/s; int8: TOP/s) or bandwidth (GB/s)")] = "matmul"
    value: Annotated[float | None, Doc("null: no such path here (note says why)")]
    provenance: Annotated[
        Provenance,
        Doc("measured (a matmul sweep or a stream, run here), formula (ISA flags x cores x "
            "clock; SMs x clock x rate per SM) or datasheet"),
    ]  # fmt: skip
    source: Annotated[
        str, Doc("where the figure comes from: the sweep and its stack, the formula's terms, "
                 "the datasheet")
    ]  # fmt: skip
    backend: Annotated[str | None, Doc("the backend that measured it")] = None
    native: Annotated[
        bool | None, Doc("the hardware computes this dtype natively (false: converted)")
    ] = None
    dense: Annotated[bool | None, Doc("a datasheet figure without 2:4 sparsity")] = None
    note: Annotated[str, Doc("why a figure is absent, what stands in for it")] = ""
    detail: Annotated[dict[str, float], Doc("measured: the rate at each matrix size n")] = {}

    @property
    def unit(self) -> str:
        if self.kind == "bandwidth":
            return "GB/s"
        return "TOP/s" if self.dtype == "int8" else "TFLOP/s"

    def text(self) -> str:
        """The value as people read it (GFLOP/s below one TFLOP/s)."""
        return quantity(self.value, self.unit)


def quantity(value: float | None, unit: str) -> str:
    if value is None:
        return "none"
    if unit in ("TFLOP/s", "TOP/s") and value < 1:
        return f"{value * 1000:.3g} G{unit[1:]}"
    return f"{value:.4g} {unit}"


class Judged(msgspec.Struct, frozen=True):
    """An achieved figure as a share of a roof; ``flag`` when it is above the roof."""

    share: float
    flag: str | None


def judge(achieved: float, roof: Roof, tolerance: float = 0.0) -> Judged | None:
    """``achieved`` (in the roof's unit) as a share of ``roof``; flagged when above 100%
    (plus ``tolerance``): the arithmetic cannot have run on this path, or a count or unit
    is wrong. None when the roof has no value."""
    if roof.value is None or roof.value <= 0:
        return None
    share = achieved / roof.value
    if share <= 1.0 + tolerance:
        return Judged(share, None)
    what = f"{share:.0%} of the {roof.text()} {roof.dtype} {roof.provenance} roof"
    return Judged(share, f"{what}: {ABOVE_MEASURED if roof.provenance == 'measured' else ABOVE}")


def amdahl_bound(f: float, r: float) -> float:
    """The most a speedup ``r`` of a share ``f`` of the time can give the whole (Amdahl:
    1 / ((1 - f) + f / r)). ``f`` is the share of time in the work that speeds up (the
    profile's convolutions and matmuls), ``r`` the ratio of the two dtypes' ceilings."""
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"a share of time is between 0 and 1, not {f}")
    if r <= 0:
        raise ValueError(f"a ceiling ratio is positive, not {r}")
    return 1.0 / ((1.0 - f) + f / r)


def absent(device: str, dtype: str, source: str, note: str, native: bool | None = False) -> Roof:
    """A formula roof that is not there: no such path on this device (``note`` says why and
    what stands in for it; ``native`` None where even that is not known)."""
    return Roof(device=device, dtype=dtype, value=None, provenance="formula", source=source,
                native=native, note=note)  # fmt: skip
