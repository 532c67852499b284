"""Serving trained weights (issue 37, Deliver 4 and 5): a training run's first seed saves its
final weights, a ``weights: trained`` serving cell loads them (or a user's weights file), and
the gate is top-1 on the digits' validation split against float32 with the same weights;
trained in one precision, served in another, in the report's cross table.

Known truths, on real TensorFlow and JAX with a model trained here for real: float32 serving
the weights a training run saved scores exactly that run's last validation accuracy (the same
images, the same weights, inference mode both times), well above chance (0.10); a model that
scales its input past float16's largest finite value (65,504) and back is the identity in
float32 and bfloat16 (float32's exponent range) but infinite in float16, so served under
mixed_float16 it answers at chance and is struck, while mixed_bfloat16 passes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from mxbench.cells.cell import expand
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params

from bench_helpers import run_bench
from conftest import mxbench
from mxbench.cells import trained
from mxbench.errors import UsageError
from report_records import rec, write

pytest.importorskip("PIL")

OVERFLOW = """
import keras
from keras import layers


def build(image_size):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.Rescaling(70000.0)(inputs)  # past float16's largest finite value, 65504
    x = layers.Rescaling(1 / 70000.0)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(32, activation="relu")(x)
    x = layers.Dense(10)(x)
    return keras.Model(inputs, layers.Activation("softmax", dtype="float32")(x))
"""
TRAIN = ["--image-size", "8", "--batch-size", "8", "--epochs", "3", "--profile", "off"]
SERVE = ["--mode", "infer", "--image-size", "8", "--batch-size", "1", "--steps", "8"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / "overflow.py"
    path.write_text(OVERFLOW)
    return f"{path}:build"


@pytest.fixture(scope="module")
def run(digits: Path, model: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real training run on TensorFlow (float32, 3 epochs) that saved its weights."""
    weights = tmp_path_factory.mktemp("weights") / "w" / "run.weights.h5"
    done = run_bench(
        "--model", model, "--data", str(digits), *TRAIN, "--save-weights", str(weights)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = done.record
    assert record["status"] == "ok", record["error"]
    assert weights.is_file()
    return {"record": record, "weights": str(weights)}


def _serve(model: str, digits: Path, weights: str, *args: str) -> dict[str, Any]:
    done = run_bench("--model", model, "--data", str(digits), *SERVE, "--weights", weights, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    record = done.record
    assert record["status"] == "ok", record["error"]
    return record


def test_float32_serves_the_training_runs_own_accuracy(
    run: dict[str, Any], model: str, digits: Path
) -> None:
    last = run["record"]["train"]["points"][-1]["val_metric"]
    assert last > 0.5  # well above chance (0.10): the model learned
    served = _serve(model, digits, run["weights"], "--backend", "tensorflow")
    gate = served["inference"]["gate"]
    assert served["inference"]["weights_file"] == run["weights"]
    assert gate["kind"] == "data" and gate["examples"] == 359  # the validation split
    assert gate["top1"] == gate["float32_top1"] == last and gate["passed"] is True


def test_float16_past_its_range_is_struck_on_real_data(
    run: dict[str, Any], model: str, digits: Path
) -> None:
    last = run["record"]["train"]["points"][-1]["val_metric"]
    f16 = _serve(model, digits, run["weights"], "--backend", "jax", "--policy", "mixed_float16")
    gate = f16["inference"]["gate"]
    assert gate["kind"] == "data" and gate["float32_top1"] == last  # TF's weights, on JAX
    assert gate["top1"] < 0.2 and gate["passed"] is False  # chance: struck
    bf16 = _serve(model, digits, run["weights"], "--backend", "jax", "--policy", "mixed_bfloat16")
    assert bf16["inference"]["gate"]["top1_relative"] >= 0.99
    assert bf16["inference"]["gate"]["passed"] is True


def test_a_weights_file_of_another_model_is_an_error_record(
    run: dict[str, Any], digits: Path
) -> None:
    done = run_bench("--model", "blog-cnn", "--data", str(digits), *SERVE, "--weights",
                     run["weights"], "--image-size", "16")  # fmt: skip
    assert done.returncode == 0
    assert done.record["status"] == "error" and "do not fit blog-cnn" in done.record["error"]


MATRIX = """
version: 1
benchmark: {{model: blog-cnn, image_size: 16, data: {data}, epochs: 3, repeats: 1{extra}}}
axes:
  mode: [train, infer]
  policy: [float32, mixed_bfloat16]
  batch_size: [8]
{axes}
hosts: [{{name: local, engine: local}}]
"""


def _matrix(data: Path, extra: str = ", weights: trained", axes: str = "") -> Any:
    return parse_matrix(MATRIX.format(data=data, extra=extra, axes=axes))


def test_serving_cells_load_their_training_runs_weights(digits: Path, tmp_path: Path) -> None:
    axes = "  train_policy: [float32, mixed_bfloat16]"
    cells = trained.link(expand(_matrix(digits, axes=axes)), tmp_path)
    train = [c for c in cells if c.params.mode == "train"]
    serve = [c for c in cells if c.params.mode == "infer"]
    assert len(train) == 2 and len(serve) == 4 and cells == [*train, *serve]  # training first
    saved = {c.params.policy: c.save_weights for c in train}
    for c in train:
        assert c.save_weights == str(tmp_path.resolve() / "weights" / f"{c.key}.weights.h5")
        assert c.params.weights == "none" and c.params.train_policy is None  # infer's only
    for c in serve:
        assert c.weights_file == saved[c.params.train_policy]
        assert c.bench_args()[-2:] == ["--weights-file", c.weights_file]
    assert {(c.params.policy, c.params.train_policy) for c in serve} == {
        (p, t) for p in ("float32", "mixed_bfloat16") for t in ("float32", "mixed_bfloat16")
    }


def test_a_later_matrix_serves_an_earlier_runs_weights(digits: Path, tmp_path: Path) -> None:
    mx = _matrix(digits).model_copy()
    (first,) = [c for c in expand(mx) if c.params.mode == "train" and c.params.policy == "float32"]
    record = rec(host="local", policy="float32", batch=8)
    record["params"] = json.loads(json.dumps(first.params, default=_plain))
    record["cell"] = first.key
    write(tmp_path / "local.jsonl", [record])
    serving = [c for c in expand(_serve_only(digits)) if c.params.policy == "float32"]
    with pytest.raises(UsageError, match=r"weights: trained: .*no training run"):
        trained.link(serving, tmp_path)  # the weights file is not there
    trained.weights_path(tmp_path, first.key).parent.mkdir()
    trained.weights_path(tmp_path, first.key).write_bytes(b"")
    from mxbench.records.store import ResultStore

    (cell,) = trained.link(serving, tmp_path, ResultStore(tmp_path).latest_by_cell)
    assert cell.params.batch_size == 1  # served at another batch size than trained (8)
    assert cell.weights_file == str(trained.weights_path(tmp_path.resolve(), first.key))


def _plain(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


def _serve_only(data: Path) -> Any:
    text = MATRIX.format(data=data, extra=", weights: trained, steps: 400", axes="")
    return parse_matrix(text.replace("mode: [train, infer]", "mode: [infer]").replace("[8]", "[1]"))


def test_what_a_serving_cells_weights_cannot_be(digits: Path, tmp_path: Path) -> None:
    def refused(extra: str, axes: str = "") -> str:
        with pytest.raises(UsageError) as caught:
            trained.link(expand(_matrix(digits, extra, axes)), tmp_path)
        return str(caught.value)

    missing = tmp_path / "nope.weights.h5"
    said = refused(f", weights: {missing}")
    assert "benchmark.weights" in said and "no such file, or not readable" in said
    assert "a Keras .weights.h5 file" in refused(", weights: model.keras")
    assert "benchmark.epochs" in refused("")  # epochs on infer cells name a training run
    said = refused(", weights: trained", "  train_policy: [float16]")  # trained under no cell
    assert "no training run of this setup under float16" in said
    from mxbench.bench.params import validate

    with pytest.raises(UsageError, match=r"--weights: .*no such file"):
        validate(Params(mode="infer", weights=str(missing), image_size=16))


def test_mxbench_run_trains_then_serves_and_reports_the_cross(
    digits: Path, model: str, tmp_path: Path
) -> None:
    matrix = tmp_path / "matrix.yaml"
    text = MATRIX.format(
        data=digits, extra=", weights: trained, steps: 8, warmup_steps: 1, profile: off",
        axes="  train_policy: [float32, mixed_bfloat16]",
    ).replace("model: blog-cnn, image_size: 16", f"model: '{model}', image_size: 8")  # fmt: skip
    matrix.write_text(text)
    done = mxbench("run", "--matrix", str(matrix), "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = mxbench("report", "--results", str(tmp_path / "r"), "--markdown")
    assert report.returncode == 0, report.stderr
    (cross,) = [line for line in report.stdout.splitlines() if "trained x served: " in line]
    assert "overflow.py:build at 8x8, batch 8, call direct" in cross
    assert "| float32 " in report.stdout and "| mixed_bfloat16 " in report.stdout
    rows = list(csv.DictReader(io.StringIO(
        mxbench("report", "--results", str(tmp_path / "r"), "--csv").stdout
    )))  # fmt: skip
    final = {r["policy"]: float(r["final_val_metric"]) for r in rows if r["mode"] == "train"}
    for r in (r for r in rows if r["mode"] == "infer"):
        assert r["gate_kind"] == "data"
        # served under any precision, the weights trained under one score its own accuracy
        assert abs(float(r["float32_top1"]) - final[r["train_policy"]]) < 1e-6, r
        assert float(r["top1"]) >= 0.99 * float(r["float32_top1"])


def test_docker_mounts_the_weights_folders_not_the_files(digits: Path, tmp_path: Path) -> None:
    from mxbench.engines.docker_container import weights_mounts

    cells = trained.link(expand(_matrix(digits)), tmp_path)
    folder = str(tmp_path.resolve() / "weights")
    train = next(c for c in cells if c.params.mode == "train")
    serve = next(c for c in cells if c.params.mode == "infer")
    assert weights_mounts(train) == {folder: {"bind": folder, "mode": "rw"}}
    # a file not there yet would be made a directory by the daemon: its folder, read-only
    assert weights_mounts(serve) == {folder: {"bind": folder, "mode": "ro"}}
