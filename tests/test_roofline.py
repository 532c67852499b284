"""Every cell against its roof, and the speedup's bound (issue 50), on constructed records:
no figure above 100% of its dtype's roof without the flag; no flag at 60%; the bound on the
answer line where the float32 arm was profiled and the ceilings are known, and nowhere
else."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mxbench.records.record import Record
from mxbench.report import document, load, tables
from mxbench.report.diagnosis.rules import diagnose
from mxbench.report.sections import answers, roofline
from mxbench.roofs import recorded
from mxbench.roofs.model import ABOVE, Roof
from report_records import rec, typed, typed_all

V100 = {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}
A100 = {"kind": "gpu", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
XEON = {"model": "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "arch": "x86_64", "cores": 2,
        "flags": ["sse2", "avx", "avx2", "fma", "avx512f", "avx512_bf16"]}  # fmt: skip
AVX2 = {**XEON, "flags": ["sse2", "avx", "avx2", "fma"]}
CPU = {"kind": "cpu", "name": "cpu"}
BATCH = 64
MS = 100.0  # a step: 640 examples/s


def flops_for(tflops: float) -> float:
    """Training FLOP per example that make ``tflops`` at BATCH examples per MS."""
    return tflops * 1e12 * (MS / 1000) / BATCH


def cell(policy: str, device: dict[str, Any], tflops: float, **extra: Any) -> dict[str, Any]:
    model = {"name": "m", "parameters": 1000, "flops_per_example": flops_for(tflops),
             "flops_source": "formula", **extra.pop("model", {})}  # fmt: skip
    return rec("h", policy, BATCH, median=MS, device=device, model=model, **extra)


def notes(records: list[dict[str, Any]]) -> list[str]:
    (t,) = tables.build(typed_all(records))
    return [n.text for n in diagnose(t)]


PCT = re.compile(r"(\d+)(?:–(\d+))?% of the")


def unflagged_above(said: list[str]) -> list[str]:
    """The notes that print a share above 100% of a roof without the flag."""
    return [
        n
        for n in said
        for m in PCT.finditer(n)
        if max(int(m.group(1)), int(m.group(2) or 0)) > 100
        and "above the roof" not in n.lower()
        and "above the measured ceiling" not in n.lower()
    ]


@pytest.mark.parametrize(
    ("policy", "device", "tflops", "flagged"),
    [
        ("mixed_float16", V100, 0.6 * 125.0, False),  # 60% of the float16 roof
        ("mixed_float16", V100, 1.2 * 125.0, True),  # 120%: a unit is wrong
        ("float32", V100, 0.6 * 15.7, False),
        ("float32", V100, 1.5 * 15.7, True),
        ("mixed_bfloat16", V100, 0.6 * 15.7, False),  # no bf16 path: float32's roof
        ("mixed_bfloat16", V100, 1.3 * 15.7, True),
        ("float32", A100, 1.2 * 19.5, False),  # TF32 on: judged against TF32's 156
    ],
)
def test_no_share_above_100_percent_without_the_flag(
    policy: str, device: dict[str, Any], tflops: float, flagged: bool
) -> None:
    said = notes([cell(policy, device, tflops)])
    assert unflagged_above(said) == []
    above = [n for n in said if n.startswith("Above the roof")]
    assert bool(above) == flagged, said
    if flagged:
        assert ABOVE in above[0].lower()
    assert any(n.startswith("Against the roofs") for n in said)


def test_above_a_measured_ceiling_is_flagged_as_the_probe_falling_short() -> None:
    """A measured ceiling is a floor under the true roof: a cell 5% above it, below the
    formula peak, is flagged, but not as an impossible figure; above the formula peak it is."""
    measured = Roof(device="cpu", dtype="float32", value=0.2, provenance="measured",
                    source="tensorflow: square matmuls", backend="tensorflow")  # fmt: skip
    formula = Roof(device="cpu", dtype="float32", value=0.3, provenance="formula",
                   source="2 cores x 2.4 GHz x 64 FLOP/cycle")  # fmt: skip
    for tflops, heading in ((0.21, "Above the measured ceiling"), (0.33, "Above the roof")):
        r = typed(cell("float32", CPU, tflops, cpu=XEON))
        (t,) = tables.build([_carrying(r, "roofs", [measured, formula])])
        said = [n.text for n in diagnose(t)]
        assert unflagged_above(said) == [], said
        above = [n for n in said if n.startswith("Above")]
        assert len(above) == 1 and above[0].startswith(heading), said
    r = typed(cell("float32", CPU, 0.19, cpu=XEON))  # 95%: nothing to flag
    (t,) = tables.build([_carrying(r, "roofs", [measured, formula])])
    assert not [n for n in diagnose(t) if n.text.startswith("Above")]


def test_the_float32_share_says_where_16_bit_arithmetic_ran() -> None:
    # the published Titan Xp shape: 16-bit at 45x its 1/64-rate float16 roof
    titan = {"kind": "gpu", "name": "NVIDIA TITAN Xp", "compute_capability": "6.1"}
    said = notes([cell("mixed_float16", titan, 8.6)])
    above = next(n for n in said if n.startswith("Above the roof"))
    assert "4526% of the 190 GFLOP/s float16 datasheet roof" in above
    assert "71% of the 12.15 TFLOP/s float32 datasheet roof" in above
    assert "cannot have run in float16" in above


def test_a_cpu_is_judged_against_its_formula_roof() -> None:
    # 2 cores x 2.4 GHz x 64 FLOP/cycle (AVX-512) = 307 GFLOP/s float32, 614 bfloat16
    said = notes([cell("float32", CPU, 0.6 * 0.3072, cpu=XEON)])
    assert any("60% of the 307 GFLOP/s float32 formula roof" in n for n in said), said
    said = notes([cell("mixed_bfloat16", CPU, 0.5 * 0.3072, cpu=AVX2)])  # no bf16 path
    text = next(n for n in said if n.startswith("Against"))
    assert "no native bfloat16 path on this ISA: float32's roof stands in" in text
    assert not any(n.startswith("Above the roof") for n in said)


def test_the_flop_sources_disagreement_is_shown_past_10_percent() -> None:
    assert roofline.disagreement({"formula": 1e9, "xla": 1.05e9}) is None
    assert roofline.disagreement({"formula": 1e9}) is None
    far = roofline.disagreement({"formula": 1e9, "xla": 1.5e9})
    assert far == "its sources disagree by 50%: formula 1, xla 1.5 GFLOP"
    r = typed(cell("float32", V100, 5.0))
    assert recorded.flops_of(r) == {"formula": pytest.approx(flops_for(5.0))}
    by = {"formula": 1e9, "xla": 1.5e9}
    model = _carrying(r.model, "flops_by_source", by)
    assert recorded.flops_of(_carrying(r, "model", model)) == by


def test_the_recorded_roofs_come_first() -> None:
    measured = Roof(device="cpu", dtype="float32", value=0.2, provenance="measured",
                    source="torch: square matmuls", backend="tensorflow")  # fmt: skip
    r = typed(cell("float32", CPU, 0.1, cpu=XEON))
    assert [x.provenance for x in recorded.roofs_of(r)] == ["formula"] * 4
    carried = _carrying(r, "roofs", [measured])
    assert recorded.roofs_of(carried) == [measured]


def _carrying(obj: Any, field: str, value: Any) -> Any:
    """``obj`` (a record or one of its parts) with ``field`` set: the real struct, copied."""
    return msgspec.structs.replace(obj, **{field: value})


def profile(conv: float, other: float) -> dict[str, Any]:
    return {"tool": "tf.profiler", "steps": 3, "step_ms": conv + other,
            "breakdown_ms": {"conv_matmul": conv, "elementwise_norm": other}}  # fmt: skip


def embedded_default(
    cpu: dict[str, Any], bf16_ms: float, profiled: bool = True, spread: float = 0.0
) -> list[Record]:
    """The embedded default's shape: TensorFlow on the local CPU, float32 and mixed_bfloat16
    at one batch size, profile on (float32's step 60% conv/matmul), three processes each
    (``spread``: mixed_bfloat16's processes that much apart, each from the next)."""
    out = []
    for repeat in range(3):
        bf16 = bf16_ms * (1 + spread * (repeat - 1))
        for policy, ms in (("float32", 100.0), ("mixed_bfloat16", bf16)):
            extra: dict[str, Any] = {"profile": profile(60.0, 40.0)} if profiled else {}
            r = rec("local", policy, 8, median=ms + repeat, device={**CPU, "name": "AMD EPYC"},
                    cpu=cpu, **extra)  # fmt: skip
            r["params"]["repeat"] = repeat
            r["cell"] = f"{r['cell']}-{repeat}"
            out.append(r)
    return typed_all(out)


def test_the_embedded_defaults_answer_shows_its_bound() -> None:
    said = answers.lines(tables.build(embedded_default(XEON, 80.0)))
    # f = 60 / 101 ms, m = 40 / 101, R = 2 (AVX512_BF16: twice float32's FLOP per cycle)
    f, m = 60 / 101, 40 / 101
    top = 1 / ((1 - f - m) + f / 2 + m / 2)
    assert len(said) == 1 and f"of at most {top:.2f}x here" in said[0], said
    assert "(R = 2.00, formula bfloat16/float32 ceilings)" in said[0]
    assert roofline.most(0.5, 2.0) == pytest.approx(4 / 3)


@pytest.mark.parametrize(
    ("bf16_ms", "spread", "said"),
    [
        (52.0, 0.0, "x of at most 1.98x here: conv/matmul"),  # 1.94x: under the bound
        (50.0, 0.15, "x, at its bound of 1.98x here (within the estimate's interval): conv"),
        (49.0, 0.0, "x, at its bound of 1.98x here (within"),  # 2.02x [1.94–2.11]
        # 2.07x [1.98–2.16]: within 5% of the bound, but the whole interval is past it
        (47.7, 0.0, "x, above its bound of 1.98x here: the profile's shares or the ceilings"),
        (45.0, 0.15, "x, above its bound of 1.98x here: the profile's shares"),  # 2.24x: > 5%
    ],
)
def test_an_estimate_over_its_bound_is_said_at_it_or_above_it(
    bf16_ms: float, spread: float, said: str
) -> None:
    """Over the bound by less than its 5% slack: "at its bound" where the interval holds the
    bound, "above" where the whole interval is past it; never "2.02x of at most 1.98x"."""
    (t,) = tables.build(embedded_default(XEON, bf16_ms, spread=spread))
    r = t.ratios[("mixed_bfloat16", 8)]
    (line,) = answers.lines([t])
    assert said in line, (r, line)
    assert ("of at most" in line) == (r.value <= 1 / (1 / 101 + 30 / 101 + 20 / 101)), line


def test_the_bound_says_where_there_is_no_fast_path() -> None:
    said = answers.lines(tables.build(embedded_default(AVX2, 1000.0)))
    assert len(said) == 1 and "x here: no native bfloat16 path" in said[0], said
    assert "(R at most 1, formula)" in said[0]


def test_no_bound_without_a_profile_or_a_ceiling_ratio() -> None:
    unprofiled = answers.lines(tables.build(embedded_default(XEON, 80.0, profiled=False)))
    assert len(unprofiled) == 1 and "of at most" not in unprofiled[0]
    unknown = answers.lines(tables.build(embedded_default({"model": "?"}, 80.0)))
    assert len(unknown) == 1 and "of at most" not in unknown[0]
    (t,) = tables.build(embedded_default(XEON, 80.0, profiled=False))
    assert roofline.bounds(t) is None


def test_the_published_rows_are_judged_in_every_format() -> None:
    loaded = load.load([Path(__file__).resolve().parents[1] / "examples" / "published"])
    doc = document.build(loaded, tables.build(loaded.winners))
    for fmt in ("markdown", "html", "json", "terminal"):
        text = " ".join(document.render(doc, fmt).split())  # (the terminal wraps)
        assert "Above the roof" in text and "cannot have run in float16" in text, fmt
    for section in doc.speed:
        assert unflagged_above(section.diagnosis) == [], section.title
