"""Loss parity: each policy's training loss over the timed steps against float32's at the
same batch size; a non-finite loss is 'diverged' and its speedup is not a speedup."""

from __future__ import annotations

from typing import Any

from mxbench.report.diagnosis import rules as dg
from mxbench.report.render import markdown

from mxbench.report import document, text
from mxbench.report.load import load
from mxbench.report.tables import LOSS_TOLERANCE, build
from report_records import rec, typed_all, write

V100 = {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}


def timed(policy: str, batch: int, median: float, losses: list[float | None]) -> dict[str, Any]:
    samples = [median * f for f in (0.99, 1.0, 1.01, 0.995, 1.005)]
    return rec(
        "h", policy, batch, device=V100,
        metrics={"step_ms": {"median": median, "p25": median * 0.995, "p75": median * 1.005,
                             "n": 5, "samples": samples},
                 "losses": losses},
    )  # fmt: skip


BASE_LOSS = [2.30, 2.28, 2.25, 2.21, 2.20]


def test_diverged_loss_is_not_a_speedup_anywhere() -> None:
    recs = [
        timed("float32", 64, 100.0, BASE_LOSS),
        timed("float16", 64, 40.0, [2.3, None, None, None, None]),  # NaN from step 2 on
        timed("mixed_float16", 64, 50.0, [v * 1.01 for v in BASE_LOSS]),
    ]
    (t,) = build(typed_all(recs))
    assert t.parity["float16", 64].state == "diverged"
    assert t.parity["mixed_float16", 64].state == "matches"
    assert t.parity["float32", 64].state == "no baseline"  # itself
    speedups = text.speedup_texts(t)
    assert speedups["float16", 64].endswith("loss diverged, not a speedup")
    assert "faster" not in speedups["float16", 64]
    assert speedups["mixed_float16", 64] == "2.00"  # a speedup (one process: no verdict)
    note = dg.loss_parity(t)
    assert note is not None and "float16 at batch 64" in note and "not a speedup" in note
    # the answer grid says it too
    grids = {g.policy: g for g in document.grids([t], {id(t): "table-1"})}
    assert grids["float16"].rows[0].cells[0].text == "2.50 loss diverged"


def test_loss_beyond_the_tolerance_is_flagged_within_it_is_not() -> None:
    off = 1 + 2 * LOSS_TOLERANCE
    near = 1 + LOSS_TOLERANCE / 2
    recs = [
        timed("float32", 32, 100.0, BASE_LOSS),
        timed("mixed_bfloat16", 32, 80.0, [v * off for v in BASE_LOSS]),
        timed("float32", 64, 200.0, BASE_LOSS),
        timed("mixed_bfloat16", 64, 150.0, [v * near for v in BASE_LOSS]),
    ]
    (t,) = build(typed_all(recs))
    assert t.parity["mixed_bfloat16", 32].state == "differs"
    assert t.parity["mixed_bfloat16", 64].state == "matches"
    speedups = text.speedup_texts(t)
    assert speedups["mixed_bfloat16", 32].endswith(f"loss +{2 * LOSS_TOLERANCE:.0%} vs float32")
    assert "loss" not in speedups["mixed_bfloat16", 64]
    note = dg.loss_parity(t)
    assert note is not None and "mixed_bfloat16 +10% at batch 32" in note
    assert "batch 64" not in note


def test_records_without_losses_say_nothing_and_old_records_use_first_and_last() -> None:
    plain = [rec("h", "float32", 8, device=V100), rec("h", "mixed_float16", 8, device=V100)]
    (t,) = build(typed_all(plain))
    assert t.parity == {} and dg.loss_parity(t) is None
    old = [
        rec("h", "float32", 8, device=V100, metrics={"step_ms": {"median": 10.0},
                                                    "loss_first": 2.3, "loss_last": 2.2}),
        rec("h", "mixed_float16", 8, device=V100, metrics={"step_ms": {"median": 8.0},
                                                          "loss_first": 2.3, "loss_last": None}),
    ]  # fmt: skip
    (t,) = build(typed_all(old))
    assert t.parity["mixed_float16", 8].state == "diverged"


def test_markdown_shows_parity_in_the_table_and_the_diagnosis(tmp_path) -> None:  # type: ignore[no-untyped-def]
    recs = [timed("float32", 64, 100.0, BASE_LOSS), timed("float16", 64, 40.0, [None] * 5)]
    loaded = load([write(tmp_path / "h.jsonl", recs)])
    out = markdown.render(document.build(loaded, build(loaded.winners)))
    assert "loss diverged, not a speedup" in out
    assert "Loss diverged: float16 at batch 64" in out
    assert "Loss parity:" in out
