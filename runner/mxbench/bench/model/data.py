"""Training input: synthetic batches, or an image folder, through one pipeline on every
Keras backend.

Synthetic data is one batch generated once and repeated, so the input is never the
bottleneck: under JAX and PyTorch the batch is placed once on the backend's device (the GPU
when there is one), since copying it from host memory every step would time the copy, not the
model (examples/measured/h100). TensorFlow's tf.data keeps it on the host.

An image folder is Imagenette's layout (``DIR/train/<class>/*.JPEG`` and ``DIR/val/<class>/``)
or the Stack Overflow question's (``DIR/train/<class>/`` and ``DIR/test/<class>/``). It is read
by :class:`keras.utils.PyDataset` with Pillow and numpy, so the same code feeds TensorFlow,
JAX and PyTorch (the jax / torch images carry no TensorFlow): each image is decoded, resized
to (height, width) with bilinear filtering (as published; the target may be non-square, the
question's 224x336), kept in memory as uint8 after its first decode, shuffled every epoch
from the cell's seed, optionally flipped at random (the question's ImageDataGenerator:
horizontal and vertical flips), and scaled by 1/255 to [0, 1]. Batches are made by a few
worker threads while the model trains. Labels are class indices in the sorted order of the
training split's class folders (float 0/1 for a model with one sigmoid output).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mxbench.errors import UsageError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
TRAIN = "train"
# Where a folder keeps its validation images, in the order they are looked for: Imagenette's
# val/, then the Stack Overflow question's test/.
VALIDATION = ("val", "validation", "test")
FLIPS = {
    "none": (False, False),
    "horizontal": (True, False),
    "vertical": (False, True),
    "both": (True, True),
}
# Threads decoding batches ahead of the model (keras.utils.PyDataset's workers).
WORKERS = 4


def _repeated_batch_class() -> type:
    import keras

    class _RepeatedBatch(keras.utils.PyDataset):  # type: ignore[misc]  # keras is untyped
        """The same batch ``steps`` times (backends without tf.data)."""

        def __init__(self, x: np.ndarray, y: np.ndarray, length: int = 1 << 30) -> None:
            super().__init__()
            self.x, self.y, self.length = x, y, length

        def __len__(self) -> int:
            return self.length

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            return self.x, self.y

    return _RepeatedBatch


def repeated_batch(x: Any, y: Any) -> Any:
    """A ``keras.utils.PyDataset`` yielding ``(x, y)`` for ever."""
    return _repeated_batch_class()(x, y)


def device_batch(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    """:func:`repeated_batch` of ``(x, y)`` placed once on the Keras backend's default device
    (Keras' data adapters pass backend tensors through untouched), and the placed images."""
    import keras

    on_device = keras.ops.convert_to_tensor(x)
    return repeated_batch(on_device, keras.ops.convert_to_tensor(y)), on_device


def validation_split(root: str | Path) -> str | None:
    """The name of the folder's validation split (val, validation or test), or None."""
    return next((s for s in VALIDATION if (Path(root) / s).is_dir()), None)


def list_images(
    root: str | Path, split: str = TRAIN, classes: list[str] | None = None
) -> tuple[list[str], list[int], list[str]]:
    """Files and labels of ``root/<split>/<class>/*`` (classes: the training split's, unless
    given); UsageError when there are none, or when a class folder is not one of ``classes``."""
    where = Path(root) / split
    found = sorted(d.name for d in where.iterdir() if d.is_dir()) if where.is_dir() else []
    if classes is None:
        classes = found
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise UsageError(
            f"--data {str(root)!r}: {split}/ has class folders that train/ has not: "
            + ", ".join(unknown[:5])
        )
    files: list[str] = []
    labels: list[int] = []
    for index, name in enumerate(classes):
        folder = where / name
        for f in sorted(folder.iterdir()) if folder.is_dir() else ():
            if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file():
                files.append(str(f))
                labels.append(index)
    if not files:
        raise UsageError(
            f"--data {str(root)!r}: no images under {split}/<class>/ (jpg, jpeg or png)"
        )
    return files, labels, classes


@dataclass(frozen=True)
class Folder:
    """What :func:`image_folder` reads, and how."""

    files: list[str]
    labels: np.ndarray  # int32 class indices, or float32 0/1 (binary)
    batch_size: int
    size: tuple[int, int]  # (height, width)
    flip: str = "none"
    seed: int = 0
    shuffle: bool = True
    endless: bool = True  # timing: batches for ever; training: one epoch per pass


def _folder_class() -> type:
    import keras

    class _ImageFolder(keras.utils.PyDataset):  # type: ignore[misc]  # keras is untyped
        """Batches of a :class:`Folder`: decoded once, then from memory."""

        def __init__(self, spec: Folder) -> None:
            super().__init__(workers=WORKERS, use_multiprocessing=False)
            self.spec = spec
            n = len(spec.files)
            self.per_epoch = (
                max(1, n // spec.batch_size) if spec.shuffle else -(-n // spec.batch_size)
            )
            self.cache = np.zeros((n, *spec.size, 3), np.uint8)
            self.decoded = np.zeros(n, bool)
            self.lock = threading.Lock()
            self.epoch = 0  # finite datasets: advanced by Keras at each epoch's end

        def __len__(self) -> int:
            return 1 << 30 if self.spec.endless else self.per_epoch

        def on_epoch_end(self) -> None:
            self.epoch += 1

        def _order(self, epoch: int) -> np.ndarray:
            n = len(self.spec.files)
            if not self.spec.shuffle:
                return np.arange(n)
            return np.random.default_rng((self.spec.seed, epoch)).permutation(n)

        def _image(self, i: int) -> np.ndarray:
            if not self.decoded[i]:
                from PIL import Image

                h, w = self.spec.size
                with Image.open(self.spec.files[i]) as img:
                    pixels = img.convert("RGB").resize((w, h), Image.Resampling.BILINEAR)
                self.cache[i] = np.asarray(pixels, np.uint8)
                with self.lock:
                    self.decoded[i] = True
            image: np.ndarray = self.cache[i]
            return image

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            s = self.spec
            epoch, j = divmod(index, self.per_epoch)
            epoch += self.epoch
            picked = self._order(epoch)[j * s.batch_size : (j + 1) * s.batch_size]
            x = np.stack([self._image(int(i)) for i in picked]).astype(np.float32)
            x *= 1.0 / 255.0
            horizontal, vertical = FLIPS[s.flip]
            if horizontal or vertical:
                rng = np.random.default_rng((s.seed, epoch, j, 1))
                if horizontal:
                    rows = rng.random(len(x)) < 0.5
                    x[rows] = x[rows, :, ::-1]
                if vertical:
                    rows = rng.random(len(x)) < 0.5
                    x[rows] = x[rows, ::-1]
            return x, s.labels[picked]

    return _ImageFolder


def image_folder(
    root: str | Path,
    batch_size: int,
    size: tuple[int, int],
    *,
    split: str = TRAIN,
    seed: int = 0,
    flip: str = "none",
    binary: bool = False,
    endless: bool = True,
    shuffle: bool = True,
) -> Any:
    """A ``keras.utils.PyDataset`` over ``root/<split>/``, resized to ``size`` (height,
    width): endless for timing, one epoch per pass for training (the last partial batch
    dropped when shuffling, kept when not: validation sees every image)."""
    classes = list_images(root)[2]
    files, labels, _ = list_images(root, split, classes)
    y = np.asarray(labels, np.float32 if binary else np.int32)
    if binary:
        y = y.reshape(-1, 1)
    spec = Folder(files, y, batch_size, size, flip, seed, shuffle, endless)
    return _folder_class()(spec)


def write_digits(
    root: str | Path,
    validation: str = "val",
    fraction: float = 0.2,
    seed: int = 0,
    classes: Sequence[int] = range(10),
) -> dict[str, int]:
    """scikit-learn's handwritten digits (1,797 real 8x8 images, 10 classes) as an image
    folder: ``root/train/<digit>/*.png`` and ``root/<validation>/<digit>/*.png``, a split
    stratified by class (``fraction`` of each class to validation); only the digits in
    ``classes`` (two: a binary task). Returns images per split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UsageError(
            "scikit-learn is needed for the digits: pip install scikit-learn"
        ) from None
    from PIL import Image

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)  # 0..16 -> 0..255
    rng = np.random.default_rng(seed)
    counts = {TRAIN: 0, validation: 0}
    for label in classes:
        index = rng.permutation(np.flatnonzero(digits.target == label))
        held = round(len(index) * fraction)
        for split, part in ((validation, index[:held]), (TRAIN, index[held:])):
            folder = Path(root) / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            for i in part:
                Image.fromarray(images[i]).save(folder / f"{i:04d}.png")
            counts[split] += len(part)
    return counts
