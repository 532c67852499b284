"""Training runs that learn (issue 34, Step 19): a validation curve at chance while training
accuracy is high is named, with the model's batch normalization as the usual suspect; the
time to target is interpolated between evaluations, with its resolution stated.

Known truth: the committed batch-32 digits run (examples/training/results-batch32) sits at
chance (0.10) on validation for the first 5 to 8 epochs while its training accuracy is above
0.9 (blog-cnn's BatchNormalization moving statistics, momentum 0.99, at 45 steps per epoch)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from mxbench.bench.process.train import crossing
from mxbench.records.codec import decode
from mxbench.records.record import TrainPoint
from mxbench.report.sections import training

ROOT = Path(__file__).resolve().parents[1]


def committed() -> list:
    out = []
    for line in (ROOT / "examples/training/results-batch32/local.jsonl").read_text().splitlines():
        r = decode(line)
        if r.train is not None and r.train.classes is None:  # written before the field
            r.train = msgspec.structs.replace(r.train, classes=10)
        out.append(r)
    return out


def test_a_validation_curve_at_chance_while_training_learns_is_named() -> None:
    (section,) = training.sections(committed())
    said = [s for s in section.sentences if "validation accuracy at chance" in s]
    assert len(said) == 2, section.sentences  # float32 and mixed_bfloat16
    for s in said:
        assert "(0.10, 10 classes)" in s and "batch normalization layer(s)" in s, s
        assert "mostly times that gap closing" in s


def test_a_curve_that_rises_with_training_is_not_named() -> None:
    records = committed()
    for r in records:
        assert r.train is not None
        r.train.points = [
            msgspec.structs.replace(pt, val_metric=max(pt.val_metric or 0.0, 0.5 + pt.epoch / 50))
            for pt in r.train.points
        ]
    (section,) = training.sections(records)
    assert not any("at chance" in s for s in section.sentences), section.sentences


def points(*pairs: tuple[float, float]) -> list[TrainPoint]:
    return [TrainPoint(epoch=i + 1, train_s=t, val_metric=v) for i, (t, v) in enumerate(pairs)]


def test_time_to_target_is_interpolated_with_its_resolution() -> None:
    # 0.80 at 20 s, 0.95 at 30 s: 0.90 is crossed two thirds of the way, at 26.67 s
    assert crossing(points((10.0, 0.5), (20.0, 0.8), (30.0, 0.95)), 0.9) == (26.6667, 10.0, 3)
    assert crossing(points((10.0, 0.95)), 0.9) == (9.4737, 10.0, 1)  # from the start: 0 at 0 s
    assert crossing(points((10.0, 0.5), (20.0, 0.6)), 0.9) is None
    assert crossing(points((10.0, 0.5)), None) is None


def test_the_report_states_the_resolution() -> None:
    records = committed()
    for r in records:
        assert r.train is not None
        found = crossing(r.train.points, r.params.target)
        assert found is not None
        r.train.time_to_target_s, r.train.target_resolution_s, _ = found
    (section,) = training.sections(records)
    (said,) = [s for s in section.sentences if "the resolution" in s]
    assert said.startswith("Times to 90% are interpolated between the two evaluations"), said
    assert json.dumps(training.as_dict(section))  # the JSON report carries it
