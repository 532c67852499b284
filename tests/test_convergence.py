"""Step 14: the loss-scale parameter, the skipped steps and the one-step check against
float32, on real TensorFlow, JAX and PyTorch (tiny models, few steps), and how the report
shows them.

Known truths the real runs are checked against: a float16 loss scale of 1e-8 makes every
gradient element underflow to zero (the smallest float16 is 6e-8; the loss is about 0.7),
so the cosine is 0 and the loss does not move; a fixed scale of 1e30 overflows float16
(largest 65504), so the gradients are not finite and the loss is NaN; Keras' dynamic scale
(32768) on a model whose output gradient is about 3 overflows at once, and keeps
overflowing for 7 halvings, so all of a 3-step run is skipped; the small CNNs' float16 and
bfloat16 gradients point where float32's do (cosine above 0.99) once dropout is off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import run_bench
from mxbench.bench import params as bp
from mxbench.errors import UsageError
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params, parse_loss_scale
from mxbench.report import text
from mxbench.report.diagnosis import rules as dg
from mxbench.report.sections import convergence as rc
from mxbench.report.tables import build
from report_records import rec, typed_all

# Several cells in one process (one framework import): run_cell is what `mxbench bench`
# runs; the engines give each cell a fresh process, which does not matter to the check.
DRIVER = """
import json, os, sys
os.environ["KERAS_BACKEND"] = sys.argv[1]
from mxbench.bench.process.cell import run_cell
from mxbench.bench.params import validate
from mxbench.matrix.params import Params
from mxbench.records.codec import encode
out = []
for spec in json.loads(sys.argv[2]):
    out.append(encode(run_cell(validate(Params(**spec)))).decode())
sys.stdout.write("RECORDS " + json.dumps(out) + "\\n")
"""

# No profiled window: nothing here reads it (test_profile does), and on PyTorch it costs
# more than the rest of the cell (9 of 22 s).
TINY = {"image_size": 32, "batch_size": 8, "warmup_steps": 1, "steps": 2, "profile": "off"}

# MSE on an output 100x a Dense layer's: the output gradient is about 3, x 32768 overflows.
OVERFLOW = """
import keras
from keras import layers


def build(image_size):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.GlobalAveragePooling2D()(inputs)
    x = layers.Dense(4, kernel_initializer="ones")(x)
    x = layers.Rescaling(100.0)(x)
    out = layers.Activation("linear", dtype="float32")(x)
    return {"model": keras.Model(inputs, out), "labels": {"kind": "dense"}}
"""

# Dropout (its masks would differ between the two passes) and the model's own dataset.
DROPOUT = """
import keras
import numpy as np
from keras import layers


def build(image_size):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.Conv2D(8, 3, activation="relu")(inputs)
    x = layers.Flatten()(x)
    x = layers.Dense(32, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(3)(x)
    model = keras.Model(inputs, layers.Activation("softmax", dtype="float32")(x))

    def dataset(batch_size, seed):
        rng = np.random.default_rng(seed)
        while True:
            x = rng.random((batch_size, image_size, image_size, 3), dtype=np.float32)
            yield x, rng.integers(0, 3, size=batch_size)

    return {"model": model, "dataset": dataset}
"""


def run_cells(backend: str, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, backend, json.dumps(specs)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    line = next((x for x in p.stdout.splitlines() if x.startswith("RECORDS ")), None)
    assert p.returncode == 0 and line, p.stderr[-3000:]
    records = [json.loads(r) for r in json.loads(line.removeprefix("RECORDS "))]
    for r in records:
        assert r["status"] == "ok", r["error"]
    return records


@pytest.fixture(scope="module")
def tf_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("models")
    (folder / "overflow.py").write_text(OVERFLOW)
    (folder / "dropout.py").write_text(DROPOUT)
    cells = {
        "dynamic": {"model": "so-cnn", "policy": "mixed_float16"},
        "tiny scale": {"model": "so-cnn", "policy": "mixed_float16", "loss_scale": "1e-8"},
        "huge scale": {"model": "so-cnn", "policy": "mixed_float16", "loss_scale": "1e30"},
        "pure float16": {"model": "so-cnn", "policy": "float16"},
        "float32": {"model": "so-cnn", "policy": "float32", "loss_scale": "dynamic"},
        "overflow": {"model": f"{folder / 'overflow.py'}:build", "policy": "mixed_float16"},
        "dropout": {"model": f"{folder / 'dropout.py'}:build", "policy": "mixed_bfloat16"},
    }
    found = run_cells("tensorflow", [{**TINY, **c} for c in cells.values()])
    return dict(zip(cells, found, strict=True))


def test_mixed_float16_matches_float32_in_one_step(tf_records: dict[str, Any]) -> None:
    r = tf_records["dynamic"]
    c = r["convergence"]
    assert (c["steps"], c["skipped_steps"], c["check"]) == (3, 0, "scored")
    assert c["cosine"] > 0.99 and 0.98 < c["norm_ratio"] < 1.02
    assert c["loss_scale"] == 32768.0 and c["check_s"] > 0
    assert r["settings"]["loss_scaling"] is True


def test_too_small_a_loss_scale_underflows_and_does_not_train(tf_records: dict) -> None:
    r = tf_records["tiny scale"]
    c = r["convergence"]
    assert r["params"]["loss_scale"] == "1e-08"
    assert (c["check"], c["cosine"], c["underflow_share"]) == ("scored", 0.0, 1.0)
    assert c["skipped_steps"] is None  # a fixed factor: no dynamic scaler
    # the control: float32 with only its input rounded to float16 keeps its direction, so
    # the low cosine is the policy's (the underflow), not the model's sensitivity
    assert c["float32_rounded_input_cosine"] > 0.99
    losses = r["metrics"]["losses"]
    assert losses[0] == pytest.approx(losses[-1], rel=1e-5)  # nothing learnt
    learnt = tf_records["dynamic"]["metrics"]["losses"]
    assert abs(learnt[0] - learnt[-1]) > 1e-3  # where the scale is right, it learns
    assert r["settings"]["loss_scaling"] is False


def test_too_large_a_loss_scale_overflows_to_nan(tf_records: dict) -> None:
    r = tf_records["huge scale"]
    assert r["convergence"]["check"] == "not finite"
    assert r["convergence"]["cosine"] is None
    assert r["metrics"]["losses"] == [None, None]  # diverged


def test_pure_float16_and_float32_cells(tf_records: dict) -> None:
    c = tf_records["pure float16"]["convergence"]
    assert c["check"] == "scored" and c["loss_scale"] == 1.0 and c["skipped_steps"] is None
    f32 = tf_records["float32"]
    assert f32["convergence"]["check"] is None  # float32 is the reference, not checked
    assert f32["convergence"]["skipped_steps"] == 0  # loss_scale dynamic wraps any policy
    assert f32["settings"]["loss_scaling"] is True


def test_dynamic_scaler_skips_overflowing_steps(tf_records: dict) -> None:
    c = tf_records["overflow"]["convergence"]
    assert (c["steps"], c["skipped_steps"], c["check"]) == (3, 3, "skipped")
    assert tf_records["overflow"]["metrics"]["loss_scale"] == 32768.0 / 8


def test_dropout_is_off_for_the_check_and_the_models_dataset_is_used(tf_records: dict) -> None:
    c = tf_records["dropout"]["convergence"]
    assert c["check"] == "scored", c["note"]
    assert c["cosine"] > 0.99 and c["note"] is None


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_check_runs_on_jax_and_torch(backend: str) -> None:
    cell = {**TINY, "model": "blog-cnn", "policy": "mixed_float16", "backend": backend}
    (r,) = run_cells(backend, [cell])
    c = r["convergence"]
    assert (c["check"], c["skipped_steps"]) == ("scored", 0)
    assert c["cosine"] > 0.99 and r["software"]["backend"] == backend


@pytest.mark.parametrize(
    ("value", "canonical"),
    [("auto", "auto"), ("Dynamic", "dynamic"), ("none", "none"), ("1e9", "1e+09"),
     (1000000000, "1e+09"), ("1.0e9", "1e+09"), (32768, "32768"), (0.5, "0.5")],
)  # fmt: skip
def test_loss_scale_has_one_spelling_per_value(value: Any, canonical: str) -> None:
    assert parse_loss_scale(value) == canonical
    assert bp.validate(Params(loss_scale=str(value))).loss_scale == canonical


@pytest.mark.parametrize("bad", ["-1", "0", "nan", "inf", "1e31", "static", "", "1e9x"])
def test_bad_loss_scale_names_the_option(bad: str) -> None:
    with pytest.raises(UsageError) as err:
        bp.validate(Params(loss_scale=bad))
    assert str(err.value).startswith("--loss-scale: ")


def test_bad_loss_scale_in_a_matrix_names_the_key_path() -> None:
    text_ = "hosts:\n  - name: a\n    engine: local\naxes:\n  loss_scale: [dynamic, -4]\n"
    with pytest.raises(UsageError) as err:
        parse_matrix(text_, "m.yaml")
    assert "m.yaml:5: axes.loss_scale[1]" in str(err.value)
    assert "above 0" in str(err.value)
    m = parse_matrix(text_.replace("-4", "1.0e4"), "m.yaml")
    assert m.sweep()["loss_scale"] == ["dynamic", "10000"]


def test_bad_loss_scale_on_the_command_line_exits_2() -> None:
    r = run_bench("--loss-scale", "huge")
    assert r.returncode == 2 and r.stdout == ""
    assert "--loss-scale: 'huge'" in r.stderr and "Traceback" not in r.stderr


def test_the_default_leaves_cell_keys_unchanged() -> None:
    assert "loss_scale" not in Params().key_fields()
    assert Params(loss_scale="none").key_fields()["loss_scale"] == "none"


def checked(policy: str, batch: int, median: float, **convergence: Any) -> dict[str, Any]:
    return rec("h", policy, batch, median=median, convergence=convergence)


def test_report_shows_the_check_and_diagnoses_what_is_off() -> None:
    records = typed_all(
        [
            rec("h", "float32", 32, median=100.0),
            checked(
                "mixed_float16",
                32,
                50.0,
                steps=55,
                skipped_steps=0,
                check="scored",
                cosine=0.99995,
                loss_scale=32768.0,
            ),
            checked(
                "float16",
                32,
                60.0,
                check="scored",
                cosine=0.61,
                underflow_share=0.4,
                loss_scale=1.0,
            ),
            rec("h", "float32", 64, median=200.0),
            checked(
                "mixed_float16",
                64,
                90.0,
                steps=55,
                skipped_steps=4,
                check="skipped",
                loss_scale=32768.0,
            ),
            checked("float16", 64, 120.0, check="error", note="boom"),
        ]
    )
    (t,) = build(records)
    headers, rows = text.table_rows(t)
    assert headers[-2:] == ["mixed_float16 1-step cos", "float16 1-step cos"]
    assert rows[0][-2:] == ["cos 1.0000", "cos 0.6100 low, 40% zero"]
    assert rows[1][-2:] == ["skipped (overflow), 4/55 steps skipped", "not checked"]
    note = rc.one_step_check(t)
    assert note is not None
    assert "float16 at batch 32 0.610, 40% of its elements zero" in note
    assert "mixed_float16 at batch 32" not in note  # above the threshold: not flagged
    assert "Gradients not finite on the first step (mixed_float16 at batch 64 at loss scale" in note
    assert "skipped steps (mixed_float16 at batch 64 4 of 55)" in note
    assert "one_step_check" in {n.rule for n in dg.diagnose(t)}


def test_report_without_checks_has_no_column_and_no_note() -> None:
    (t,) = build(typed_all([rec("h", "float32", 32), rec("h", "mixed_float16", 32, median=50)]))
    headers, _ = text.table_rows(t)
    assert not any("1-step" in h for h in headers)
    assert rc.one_step_check(t) is None


def test_old_records_without_convergence_still_load(tmp_path: Path) -> None:
    from mxbench.records.codec import decode

    line = json.dumps(rec("h", "mixed_float16", 32))
    assert decode(line).convergence is None


def test_a_low_cosine_without_underflow_is_blamed_on_rounding() -> None:
    records = typed_all(
        [
            rec("h", "float32", 32, median=100.0),
            checked("mixed_bfloat16", 32, 50.0, check="scored", cosine=0.2, underflow_share=0.0004),
        ]
    )
    (t,) = build(records)
    note = rc.one_step_check(t)
    assert note is not None and "mixed_bfloat16 at batch 32 0.200)" in note
    assert "Nothing underflowed" in note and "elements zero" not in note


def test_a_low_cosine_that_float32_shares_is_not_blamed_on_the_policy() -> None:
    records = typed_all(
        [
            rec("h", "float32", 32, median=100.0),
            checked(
                "mixed_bfloat16",
                32,
                50.0,
                check="scored",
                cosine=-0.03,
                float32_rounded_input_cosine=0.26,
            ),
        ]
    )
    (t,) = build(records)
    assert text.table_rows(t)[1][0][-1] == "cos -0.0300 low (float32, input rounded: 0.2600)"
    note = rc.one_step_check(t)
    assert note is not None and "not conclusive (mixed_bfloat16 at batch 32 -0.030" in note
    assert "Nothing underflowed" not in note


def test_a_high_cosine_with_most_of_the_gradient_zero_is_flagged() -> None:
    # convnext_tiny under pure float16 (examples/convergence): cosine 1.0000, 92% underflow
    records = typed_all(
        [
            rec("h", "float32", 32, median=100.0),
            checked("float16", 32, 50.0, check="scored", cosine=0.99998, underflow_share=0.9177),
        ]
    )
    (t,) = build(records)
    assert text.table_rows(t)[1][0][-1] == "cos 1.0000, 92% zero"
    note = rc.one_step_check(t)
    assert note is not None and note.startswith("Gradient underflow (float16 at batch 32 92%")


# The committed control records (examples/convergence/results-control): model, policy, the
# policy's cosine, float32's with only its input rounded, and whether the policy is to blame.
# ResNet-50 and MobileNetV2 at 32 px are sensitive by themselves at initialization (their
# control turns nearly as far); EfficientNet-B0 under mixed_bfloat16 turns 3.8x its control's
# angle (issue 34: called "not conclusive" before).
CONTROLS = [
    ("resnet50", "mixed_bfloat16", -0.032482, 0.175769, False),
    ("resnet50", "float16", 0.61736, 0.751364, False),
    ("mobilenet_v2", "mixed_bfloat16", 0.195877, 0.22304, False),
    ("mobilenet_v2", "float16", 0.750438, 0.875318, False),
    ("efficientnet_b0", "mixed_bfloat16", 0.673222, 0.975526, True),
    ("efficientnet_b0", "float16", 0.989637, 0.999666, True),
]


@pytest.mark.parametrize(("model", "policy", "cosine", "control", "blamed"), CONTROLS)
def test_the_check_judges_the_policys_gap_against_the_controls(
    model: str, policy: str, cosine: float, control: float, blamed: bool
) -> None:
    records = typed_all(
        [
            rec("h", "float32", 8, median=100.0),
            checked(
                policy, 8, 50.0, check="scored", cosine=cosine, float32_rounded_input_cosine=control
            ),
        ]
    )
    (t,) = build(records)
    note = rc.one_step_check(t) or ""
    assert ("not conclusive" in note) is not blamed, (model, note)
    assert ("the policy does not compute float32's update" in note) is blamed, (model, note)
    if blamed and control < rc.THRESHOLD:  # the sentence says how far beyond the control
        turn, own = rc.angle(cosine), rc.angle(control)
        assert f"a turn of {turn:.0f} degrees" in note and f"turns {own:.0f}" in note


def test_angles() -> None:
    assert rc.angle(1.0) == 0.0 and rc.angle(0.0) == 90.0 and rc.angle(-1.0) == 180.0
    assert rc.angle(1.0000001) == 0.0  # rounding past 1 is 0 degrees, not a math error


def test_the_check_runs_on_fewer_examples_where_a_step_is_slow() -> None:
    """About half a second of the policy's pass at the timed pace: an emulated bfloat16 step
    of 1.7 s at batch 32 checks 9 examples (not 32), never under 8; a fast step keeps 32;
    no timed steps: 32."""
    from mxbench.bench.model import convergence as cv

    assert cv.examples_for(32, None) == cv.CHECK_BATCH == 32
    assert [cv.examples_for(32, ms) for ms in (60.0, 500.0, 1700.0, 9000.0)] == [32, 32, 9, 8]
    assert cv.examples_for(8, 407.0) == 8  # the batch's own 8 are all there is: 8 checked
    assert cv.examples_for(4, 9000.0) == 4  # under CHECK_MIN only where the batch is smaller
