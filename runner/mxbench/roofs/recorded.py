"""The roofs of a record's device, and its FLOP counts by source: what the report judges a
cell against (:mod:`mxbench.report.sections.roofline`).

One accessor for each: :func:`roofs_of` takes the roofs a record carries (``record.roofs``:
measured, formula and datasheet, with their provenance) and, for a record without them,
builds what its other fields allow: the datasheet's roofs from a GPU's name
(:mod:`mxbench.roofs.datasheet`), a CPU's formula roofs from its recorded ISA flags and
usable CPUs where its model name states a clock (``@ 2.90GHz``; :mod:`mxbench.roofs.cpu`).
:func:`flops_of` takes ``model.flops_by_source`` or, without it, the one count a record
holds (``model.flops_per_example`` and its ``flops_source``).

:func:`ceiling_ratio` is the ratio R of two dtypes' matmul ceilings on the record's device:
measured where both were measured (the record's backend first), else the formula's, which
needs no clock (its FLOP per cycle by ISA flags or compute capability), else the
datasheet's. Where the formula says the dtype has no native path (bfloat16 on an AVX2-only
CPU: converted and computed in float32) R is at most 1.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mxbench.records.codec import cc_pair
from mxbench.records.record import Record
from mxbench.roofs import cpu, datasheet, gpu
from mxbench.roofs.model import DTYPES, Roof

# a policy's compute dtype (its convolutions' and matmuls'); float32 may run as TF32
POLICY_DTYPES = {"float32": "float32", "mixed_float16": "float16", "float16": "float16",
                 "mixed_bfloat16": "bfloat16", "bfloat16": "bfloat16"}  # fmt: skip
_GHZ = re.compile(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", re.I)
_AMD = re.compile(r"\bamd\b|epyc|ryzen|threadripper|opteron", re.I)


def roofs_of(record: Record) -> Sequence[Roof]:
    """The roofs of the record's device: the ones it carries, else those its fields allow
    (read them, never change them: a GPU's datasheet roofs are one tuple for its name)."""
    return list(record.roofs) if record.roofs else derived(record)


def derived(record: Record) -> Sequence[Roof]:
    """The roofs that follow from a record without any: a GPU's datasheet (a formula needs
    its SMs and clock, which records do not hold), a CPU's formula where its model name
    states a clock."""
    dev = record.device
    if dev.kind == "gpu":
        return _sheet_roofs(dev.name)
    if dev.kind != "cpu":
        return []
    c = record.cpu
    ghz = nominal_ghz(c.model or dev.name)
    if not c.flags or not c.cores or ghz is None:
        return []
    source = (
        f"the model name's nominal clock, maybe below boost; {c.cores} usable CPU(s) counted "
        "as cores (with SMT siblings among them the figure is up to twice the truth)"
    )
    model = c.model or dev.name or ""
    return cpu.formula_roofs(
        dev.name or model, c.flags, c.cores, ghz, source, vendor_of(model),
        max_isa=record.settings.onednn_max_cpu_isa,
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _sheet_roofs(name: str | None) -> tuple[Roof, ...]:
    """A GPU's datasheet roofs, one tuple for each name: a fleet's tables of one GPU judge
    against the same roofs (the report finds what each dtype is set against once for them,
    report/sections/roofline.py)."""
    return tuple(datasheet.roofs(name))


def vendor_of(model: str) -> str:
    """The CPU vendor a record's model name implies (records keep no vendor string):
    ``AuthenticAMD`` for AMD's product names, else unknown ("")."""
    return "AuthenticAMD" if _AMD.search(model) else ""


def nominal_ghz(model: str | None) -> float | None:
    """The clock a CPU's model name states (``Intel(R) Xeon(R) CPU @ 2.20GHz``), or None."""
    m = _GHZ.search(model or "")
    return float(m.group(1)) if m and float(m.group(1)) > 0 else None


def flops_of(record: Record) -> dict[str, float]:
    """Training FLOP per example by source (``formula``, ``xla``, ``analytic``): the
    record's ``model.flops_by_source``, else its one count; {} without any."""
    model = record.model
    by = model.flops_by_source if model is not None else None
    if by:
        return {str(k): float(v) for k, v in by.items() if v and v > 0}
    if model is not None and model.flops_per_example:
        return {model.flops_source or "recorded": model.flops_per_example}
    if record.metrics.train_flops_per_image:
        return {"recorded": record.metrics.train_flops_per_image}
    return {}


def flops(record: Record) -> tuple[float, str] | None:
    """The count the achieved figure uses, with its source: the one the bench chose
    (``model.flops_per_example``), else the first source's."""
    found = flops_of(record)
    if not found:
        return None
    model = record.model
    chosen = model.flops_per_example if model is not None else None
    if chosen:
        source = model.flops_source if model is not None and model.flops_source else None
        return chosen, source or next((k for k, v in found.items() if v == chosen), "recorded")
    return next(iter(found.values())), next(iter(found))


def find(
    roofs: Sequence[Roof], dtype: str, provenance: str, backend: str | None = None
) -> Roof | None:
    """The dense matmul roof of a dtype and provenance (measured: the backend's first, then
    any backend's), with a value or without (no such path)."""
    matching = [
        r
        for r in roofs
        if r.dtype == dtype and r.provenance == provenance and r.kind == "matmul"
        and r.dense is not False
    ]  # fmt: skip
    if backend is not None:
        matching.sort(key=lambda r: r.backend != backend)
    return matching[0] if matching else None


def compute_dtype(record: Record, roofs: Sequence[Roof], tf32: bool | None = None) -> str | None:
    """The dtype a cell's convolutions and matmuls ran in: its policy's 16-bit type, else
    float32, or TF32 where the device has a TF32 roof and the record did not turn it off
    (``tf32``: whether ``roofs`` hold one, where the caller knows already)."""
    said = record.settings.compute_dtype
    dtype = said if said in DTYPES else POLICY_DTYPES.get(record.params.policy)
    if dtype != "float32" or record.settings.tf32 is False:
        return dtype
    if tf32 is None:
        tf32 = has_tf32(roofs)
    return "tf32" if tf32 else dtype


def has_tf32(roofs: Sequence[Roof]) -> bool:
    """Whether the roofs hold a TF32 one with a value (the device has that path)."""
    return any(r.dtype == "tf32" and r.value for r in roofs)


@dataclass(frozen=True)
class CeilingRatio:
    """R: the ratio of two dtypes' matmul ceilings on one device, and where it comes from."""

    value: float
    provenance: str  # measured, formula or datasheet
    native: bool  # the faster dtype has a fast path (False: R <= 1, emulated or slow)
    why: str = ""  # what the formula or the roof says where there is no fast path


def ceiling_ratio(
    record: Record, dtype: str, base: str = "float32", roofs: Sequence[Roof] | None = None
) -> CeilingRatio | None:
    """R of ``dtype`` over ``base`` on the record's device: measured, else formula (its
    values, or clock-free its per-cycle rates), else datasheet; None where nothing says.
    ``roofs``: the record's, where the caller has them already (:func:`roofs_of`)."""
    roofs = roofs_of(record) if roofs is None else roofs
    backend = record.params.backend
    for provenance in ("measured", "formula"):
        fast, slow = find(roofs, dtype, provenance, backend), find(roofs, base, provenance, backend)
        if fast is None or slow is None or not slow.value:
            continue
        if fast.value:
            r = fast.value / slow.value
            return CeilingRatio(r, provenance, r > 1 and fast.native is not False, fast.note)
        if provenance == "formula" and fast.native is False:
            return CeilingRatio(1.0, provenance, False, fast.note)
    rates = formula_rates(record)
    base_rate = rates.get(base)
    if base_rate:
        fast_rate = rates.get(dtype)
        if fast_rate is None:
            why = f"no native {dtype} path here: converted and computed in {base}"
            return CeilingRatio(1.0, "formula", False, why)
        r = fast_rate / base_rate
        return CeilingRatio(r, "formula", r > 1)
    fast, slow = find(roofs, dtype, "datasheet"), find(roofs, base, "datasheet")
    if fast is not None and slow is not None and slow.value:
        if fast.value:
            r = fast.value / slow.value
            return CeilingRatio(r, "datasheet", r > 1, fast.note)
        return CeilingRatio(1.0, "datasheet", False, fast.note)
    return None


def formula_rates(record: Record) -> dict[str, int | None]:
    """FLOP per cycle (per core or SM) by dtype: a CPU's from its recorded flags, a GPU's
    from its compute capability; {} where the record says neither. A dtype mapped to None
    has no native path; one left out is not known."""
    dev = record.device
    if dev.kind == "cpu" and record.cpu.flags:
        model = record.cpu.model or dev.name or ""
        flags = cpu.capped(record.cpu.flags, record.settings.onednn_max_cpu_isa)
        r = cpu.rates(flags, vendor_of(model))
        return {"float32": r.float32, "bfloat16": r.bfloat16, "float16": r.float16}
    if dev.kind == "gpu":
        cc = cc_pair(dev.compute_capability)
        per_sm = gpu.PER_SM.get(cc) if cc is not None else None
        if per_sm is None:
            return {}
        return {d: per_sm.get(d) for d in gpu.DTYPES}
    return {}
