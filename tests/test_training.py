"""Real data and training runs: `mxbench data digits`, the image-folder pipeline that every
backend reads, training runs to a target accuracy, steps_per_execution, and the report's
time-to-accuracy and input-share answers (against records whose truth is known)."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import msgspec
import numpy as np
import pytest
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params
from mxbench.records.record import Record

from bench_helpers import run_bench
from conftest import mxbench
from mxbench.errors import UsageError

pytest.importorskip("PIL")


def test_digits_are_the_real_dataset_split_by_class(digits: Path) -> None:
    from PIL import Image
    from sklearn.datasets import load_digits

    train = sorted(digits.glob("train/*/*.png"))
    val = sorted(digits.glob("val/*/*.png"))
    assert len(train) + len(val) == 1797 and len(val) == 359
    truth = load_digits()
    for split in (train, val):
        assert sorted({p.parent.name for p in split}) == [str(d) for d in range(10)]
    for path in train[:5] + val[-5:]:  # the file's pixels are the dataset's, label and all
        i = int(path.stem)
        assert int(path.parent.name) == truth.target[i]
        pixels = np.asarray(Image.open(path))
        assert pixels.shape == (8, 8)
        assert np.array_equal(pixels, np.round(truth.images[i] * 255 / 16).astype(np.uint8))
    per_class = [len(list(digits.glob(f"val/{d}/*.png"))) for d in range(10)]
    assert min(per_class) >= 35 and max(per_class) <= 37  # stratified: 20% of each class


def test_data_command_refuses_what_it_would_overwrite(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    run = mxbench("data", "digits", str(tmp_path / "full"))
    assert run.returncode == 2 and "not an empty folder" in run.stderr
    run = mxbench("data", "digits", str(tmp_path / "new"), "--split", "holdout")
    assert run.returncode == 2 and "--split 'holdout'" in run.stderr


@pytest.fixture(scope="module")
def so_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Stack Overflow question's layout (train/ + test/, two classes), with images whose
    pixels say where they are: column c of row r holds (r, c, class)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("so")
    rows, cols = np.meshgrid(np.arange(12), np.arange(20), indexing="ij")
    for split, n in (("train", 3), ("test", 2)):
        for label, name in enumerate(("cats", "dogs")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = np.stack([rows * 10, cols * 10, np.full_like(rows, 100 * label + i)], -1)
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.png")
    return root


def test_pipeline_reads_a_folder_as_posted(so_folder: Path) -> None:
    from mxbench.bench.model import data

    assert data.validation_split(so_folder) == "test"
    same = data.image_folder(
        so_folder, 4, (12, 20), split="test", binary=True, endless=False, shuffle=False
    )
    assert len(same) == 1  # 4 images, one batch, none dropped
    x, y = same[0]
    assert x.shape == (4, 12, 20, 3) and x.dtype == np.float32 and y.shape == (4, 1)
    assert y.ravel().tolist() == [0.0, 0.0, 1.0, 1.0]
    assert np.allclose(x[0, 3, 7], [30 / 255, 70 / 255, 0.0])  # rescaled 1/255, not resized
    flipped = data.image_folder(so_folder, 6, (12, 20), flip="both", seed=3, endless=False)
    seen = set()
    for _epoch in range(4):
        fx, _ = flipped[0]
        for img in fx:
            h = img[0, 0, 1] > img[0, -1, 1]  # columns run backwards: flipped left-right
            v = img[0, 0, 0] > img[-1, 0, 0]  # rows run backwards: flipped upside down
            seen.add((bool(h), bool(v)))
            upright = img[::-1] if v else img
            upright = upright[:, ::-1] if h else upright
            assert np.allclose(upright[..., :2], x[0, ..., :2])  # a flip, nothing else
        flipped.on_epoch_end()
    assert seen == {(False, False), (True, False), (False, True), (True, True)}
    resized = data.image_folder(so_folder, 2, (24, 10), endless=True)
    assert resized[0][0].shape == (2, 24, 10, 3)  # non-square targets, any direction
    assert len(resized[0][1]) == 2 and resized[7][0].shape == (2, 24, 10, 3)  # endless


def test_shuffling_is_seeded_per_epoch(digits: Path) -> None:
    from mxbench.bench.model import data

    def order(seed: int, epochs: int) -> list[list[int]]:
        ds = data.image_folder(digits, 1437, (8, 8), seed=seed, endless=False)
        out = []
        for _ in range(epochs):
            out.append(ds[0][1][:20].tolist())
            ds.on_epoch_end()
        return out

    first = order(0, 2)
    assert first == order(0, 2) and first[0] != first[1] and first != order(1, 2)


def test_validation_classes_must_be_training_classes(so_folder: Path, tmp_path: Path) -> None:
    import shutil

    from mxbench.bench.model import data

    shutil.copytree(so_folder, tmp_path / "d")
    (tmp_path / "d" / "test" / "birds").mkdir()
    with pytest.raises(UsageError, match="test/ has class folders that train/ has not: birds"):
        data.image_folder(tmp_path / "d", 2, (8, 8), split="test")


@pytest.fixture(scope="module")
def linear_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multinomial logistic regression: known to exceed 90% on the digits within epochs."""
    path = tmp_path_factory.mktemp("model") / "linear.py"
    path.write_text(
        "import keras\n"
        "def build(image_size, image_width):\n"
        "    x = keras.Input((image_size, image_width, 3))\n"
        "    y = keras.layers.Dense(10)(keras.layers.Flatten()(x))\n"
        "    y = keras.layers.Activation('softmax', dtype='float32')(y)\n"
        "    return {'model': keras.Model(x, y), 'optimizer': keras.optimizers.Adam(0.02)}\n"
    )
    return path


def test_training_run_reaches_a_known_accuracy(digits: Path, linear_model: Path) -> None:
    """A real training run (TensorFlow): the curve, the time to target, the seed."""
    run = run_bench(
        "--model",
        f"{linear_model}:build",
        "--data",
        str(digits),
        "--image-size",
        "8",
        "--batch-size",
        "64",
        "--epochs",
        "6",
        "--eval-every",
        "2",
        "--target",
        "0.9",
        "--repeat",
        "1",
        "--jit-compile",
        "off",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "ok", rec["error"]
    train = rec["train"]
    assert (train["train_images"], train["val_images"], train["val_split"]) == (1438, 359, "val")
    assert train["steps_per_epoch"] == 1438 // 64 and train["seed"] == 1
    points = train["points"]
    assert [p["epoch"] for p in points] == [2, 4, 6]
    assert all(a["train_s"] < b["train_s"] for a, b in itertools.pairwise(points))
    assert all(p["wall_s"] >= p["train_s"] for p in points)
    assert points[-1]["val_metric"] > 0.9 and points[-1]["train_loss"] < points[0]["train_loss"]
    # the crossing, interpolated between the evaluations around it; the resolution between
    i = next(i for i, p in enumerate(points) if p["val_metric"] >= 0.9)
    first, before = points[i], points[i - 1] if i else {"train_s": 0.0, "val_metric": 0.0}
    assert before["train_s"] < train["time_to_target_s"] <= first["train_s"]
    assert train["target_resolution_s"] == pytest.approx(first["train_s"] - before["train_s"])
    share = (0.9 - before["val_metric"]) / (first["val_metric"] - before["val_metric"])
    gap = first["train_s"] - before["train_s"]
    assert train["time_to_target_s"] == pytest.approx(before["train_s"] + share * gap, abs=1e-3)
    assert train["epochs_to_target"] == first["epoch"] and train["classes"] == 10
    assert rec["metrics"]["step_ms"]["n"] == 5  # per-epoch means after the first epoch


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_same_pipeline_feeds_every_backend(backend: str, so_folder: Path) -> None:
    """TensorFlow blocked: the folder reaches JAX / PyTorch through Pillow and numpy only;
    steps_per_execution 2 (JAX; PyTorch has only 1) gives one sample per call of two steps."""
    pytest.importorskip(backend)
    run = run_bench(
        "--backend",
        backend,
        "--model",
        "so-cnn",
        "--data",
        str(so_folder),
        "--image-size",
        "32",
        "--image-width",
        "48",
        "--batch-size",
        "2",
        "--flip",
        "both",
        "--warmup-steps",
        "2",
        "--steps",
        "4",
        "--steps-per-execution",
        "2" if backend == "jax" else "1",
        env={**os.environ, "MXBENCH_TEST_BLOCK": "tensorflow"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "ok", rec["error"]
    assert rec["settings"]["input_device"] == "host"
    assert rec["model"]["inputs"] == ["32x48x3 float32"]
    calls = 2 if backend == "jax" else 4  # a sample per call of steps_per_execution steps
    assert rec["metrics"]["step_ms"]["n"] == calls and len(rec["metrics"]["losses"]) == calls


def test_bench_refuses_runs_it_cannot_measure(so_folder: Path, tmp_path: Path) -> None:
    run = run_bench("--epochs", "2")
    assert run.returncode == 2 and "a training run needs --data" in run.stderr
    (tmp_path / "train" / "a").mkdir(parents=True)
    run = run_bench("--steps-per-execution", "4", "--steps", "6")
    assert run.returncode == 2 and "must be multiples of it" in run.stderr


@pytest.mark.parametrize(
    ("benchmark", "message"),
    [
        ("{epochs: 3}", "benchmark.epochs: a training run needs real data"),
        ("{epochs: 3, data: d, target: 1.5}", "benchmark.target: 1.5: a validation accuracy"),
        ("{steps_per_execution: 4}", "benchmark.steps_per_execution: 4: warmup_steps 5 is"),
        ("{flip: sideways}", "unknown flip 'sideways'"),
        ("{backend: torch, steps_per_execution: 5}", "one step per call on the torch backend"),
    ],
)
def test_matrix_names_the_key(benchmark: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_matrix(f"benchmark: {benchmark}\nhosts: [{{name: a, engine: local}}]")


def test_each_repeat_of_a_training_run_is_a_seed() -> None:
    from mxbench.cells.cell import expand

    m = parse_matrix(
        "benchmark: {epochs: 2, data: d, repeats: 2, batch_size: 8}\n"
        "axes: {policy: [float32]}\nhosts: [{name: a, engine: local}]"
    )
    args = [c.bench_args() for c in expand(m)]
    assert [a[a.index("--repeat") + 1] for a in args] == ["0", "1"]


def test_training_parameters_stay_out_of_old_cell_keys() -> None:
    from mxbench.matrix.params import Params

    assert Params().key_fields() == Params(steps_per_execution=1, flip="none").key_fields()
    assert "epochs" in Params(epochs=3).key_fields()


# --------------------------------------------------------------------------- the report


def _train_record(
    policy: str, seed: int, curve: list[float], seconds: float, target: float = 0.9
) -> Record:
    """A training record whose evaluation k (1-based) is at k * seconds of training."""
    points = [
        {
            "epoch": k + 1,
            "train_s": (k + 1) * seconds,
            "wall_s": (k + 1) * seconds + 1,
            "val_metric": acc,
        }
        for k, acc in enumerate(curve)
    ]
    reached = next((p for p in points if p["val_metric"] >= target), None)
    return msgspec.convert(
        {
            "cell": f"{policy}{seed}",
            "host": "h",
            "status": "ok",
            "params": {
                "policy": policy,
                "data": "/d/digits",
                "image_size": 32,
                "epochs": len(curve),
                "target": target,
                "repeat": seed,
            },
            "device": {"name": "cpu-x"},
            "train": {
                "seed": seed,
                "target": target,
                "points": points,
                "time_to_target_s": reached and reached["train_s"],
                "epochs_to_target": reached and reached["epoch"],
            },
        },
        Record,
    )


def test_time_to_accuracy_and_the_band_against_known_records() -> None:
    from mxbench.report.sections import training

    f32 = [[0.5, 0.8, 0.92, 0.95], [0.55, 0.82, 0.93, 0.96], [0.5, 0.85, 0.91, 0.95]]
    records = [_train_record("float32", s, c, 10.0 + s) for s, c in enumerate(f32)]
    # the same curves in 0.7x the time: reaches 90% at the same epoch, 0.70x the time
    records += [_train_record("mixed_bfloat16", s, c, 0.7 * (10.0 + s)) for s, c in enumerate(f32)]
    # faster steps, but learning lags the band and never gets to 90%
    slow = [[0.3, 0.5, 0.7, 0.85]] * 3
    records += [_train_record("mixed_float16", s, c, 5.0) for s, c in enumerate(slow)]
    (s,) = training.sections(records)
    assert [r.policy for r in s.runs] == ["float32", "mixed_bfloat16", "mixed_float16"]
    assert s.rows[0][:4] == ["float32", "3", "0.950 [0.950–0.960]", "(the band)"]
    assert s.rows[0][4:6] == ["33.0 [30.0–36.0]", "3/3"]
    assert s.rows[1][3] == "within float32's band" and s.rows[1][6] == "1.43 [1.16–1.76]"
    assert s.rows[2][3] == "ends below float32's band" and s.rows[2][5] == "0/3"
    assert "mixed_bfloat16 reaches 90% in 0.70× [0.57–0.86] float32's time: sooner" in s.sentences
    assert "mixed_float16 does not reach 90% in any of 3 seeds" in s.sentences
    lag = [
        _train_record("float32", 0, [0.5, 0.8, 0.9], 1.0),
        _train_record("mixed_bfloat16", 0, [0.3, 0.6, 0.9], 1.0),
    ]
    assert (
        "mixed_bfloat16: converges slower than float32's band"
        in training.sections(lag)[0].sentences
    )


def _timed(data: str, policy: str, rep: int, ms: float) -> Record:
    rng = np.random.default_rng(rep)
    samples = (ms * (1 + 0.01 * rng.standard_normal(40))).tolist()
    return msgspec.convert(
        {
            "cell": f"{data}{policy}{rep}",
            "host": "h",
            "status": "ok",
            "params": {"policy": policy, "data": data, "image_size": 32, "repeat": rep},
            "metrics": {"step_ms": {"median": float(np.median(samples)), "samples": samples}},
        },
        Record,
    )


def test_input_share_against_known_step_times() -> None:
    from mxbench.report.sections import training

    records = [
        _timed(d, "float32", k, ms)
        for k in range(3)
        for d, ms in (("synthetic", 6.0), ("/d/digits", 10.0))
    ]
    (line,) = training.input_shares(records)
    assert line.startswith("the input pipeline costs 40% [")
    assert re.search(
        r"digits at batch 32, 32 px, float32, h: 10\.0\d ms/step real vs 6\.0\d ", line
    )
    same = [_timed(d, "float32", k, ms) for k, ms in enumerate((6.0, 9.0, 12.0))
            for d in ("synthetic", "/d/digits")]  # fmt: skip
    assert training.input_shares(same)[0].startswith("no clear input-pipeline cost: 0% [")
    calls = [msgspec.structs.replace(_timed("synthetic", "float32", k, ms), params=Params(
        data="synthetic", image_size=32, repeat=k, steps_per_execution=spe))
        for k in range(3) for spe, ms in ((1, 10.0), (10, 8.0))]  # fmt: skip
    (line,) = training.shares(calls)  # the host-overhead A/B, the same way
    assert line.startswith("steps_per_execution 10 saves 20% [")
    assert re.search(r"float32, h: 10\.0\d ms/step at 1 vs 8\.0\d at 10\)$", line)


def test_report_renders_the_training_section(tmp_path: Path) -> None:
    f32 = [0.5, 0.8, 0.92]
    records = [
        _train_record(p, s, f32, 10.0 + s) for p in ("float32", "mixed_bfloat16") for s in range(2)
    ]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "h.jsonl").write_bytes(
        b"".join(msgspec.json.encode(r) + b"\n" for r in records)
    )
    md = mxbench("report", "--results", str(tmp_path / "r"), "--markdown")
    assert md.returncode == 0, md.stderr
    assert "## Training run: blog-cnn on digits at 32x32, batch 32, 3 epochs" in md.stdout
    assert "mixed_bfloat16 reaches 92%" not in md.stdout and "reaches 90% in 1.00×" in md.stdout
    page = tmp_path / "r.html"
    html = mxbench("report", "--results", str(tmp_path / "r"), "--html", "--output", str(page))
    assert html.returncode == 0, html.stderr
    text = page.read_text()
    assert 'alt="validation accuracy against epoch and training time' in text
    assert text.count("data:image/png;base64,") >= 1
    as_json = json.loads(mxbench("report", "--results", str(tmp_path / "r"), "--json").stdout)
    (section,) = as_json["training"]
    assert section["rows"][1]["reached"] == "2/2" and section["sentences"]
    plain = mxbench("report", "--results", str(tmp_path / "r"), "--output", str(tmp_path / "r.txt"))
    assert plain.returncode == 0 and "Training run: blog-cnn" in (tmp_path / "r.txt").read_text()
