"""A small generated folder in Imagenette layout, read through the real pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mxbench.bench.model.data import list_images

from bench_helpers import run_bench

CLASSES = ("n01440764", "n02102040", "n02979186")


@pytest.fixture(scope="module")
def imagenette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes x 4 JPEGs of different sizes (like imagenette2-320), plus a stray file."""
    image = pytest.importorskip("PIL.Image")
    root = tmp_path_factory.mktemp("imagenette")
    rng = np.random.default_rng(1)
    for c, name in enumerate(CLASSES):
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for i in range(4):
            h, w = 40 + 8 * i, 48 + 4 * c
            pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            image.fromarray(pixels).save(folder / f"{name}_{i}.JPEG", quality=90)
    (root / "train" / CLASSES[0] / "README.txt").write_text("not an image")
    return root


def test_listing_follows_the_layout(imagenette: Path) -> None:
    files, labels, classes = list_images(imagenette)
    assert classes == list(CLASSES)
    assert len(files) == 12 and all(f.endswith(".JPEG") for f in files)
    assert labels == [0] * 4 + [1] * 4 + [2] * 4


def test_pipeline_resizes_and_scales(imagenette: Path) -> None:
    from mxbench.bench.model.data import image_folder

    x, y = image_folder(imagenette, batch_size=5, size=(24, 40))[0]
    assert tuple(x.shape) == (5, 24, 40, 3) and x.dtype.name == "float32"
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x.max()) > 0.5  # scaled, not all zeros
    assert set(y.tolist()) <= {0, 1, 2}


def test_bench_on_an_image_folder(imagenette: Path) -> None:
    pytest.importorskip("tensorflow")
    run = run_bench("--data", str(imagenette), "--image-size", "32", "--batch-size", "8",
                    "--steps", "4", "--warmup-steps", "1", "--jit-compile", "off")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = run.record
    assert rec["status"] == "ok", rec["error"]
    assert rec["params"]["data"] == str(imagenette)
    assert rec["metrics"]["step_ms"]["n"] == 4 and rec["metrics"]["step_ms"]["median"] > 0
