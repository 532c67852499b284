"""Training input: synthetic batches, or a folder in Imagenette layout.

Synthetic data is one batch generated once and repeated, so the input is never the
bottleneck: under JAX and PyTorch the batch is placed once on the backend's device (the GPU
when there is one), since copying it from host memory every step would time the copy, not the
model (examples/measured/h100). TensorFlow's tf.data keeps it on the host.

A folder (``DIR/train/<class>/*.jpg``) is read, decoded, resized (bilinear, as published),
cached as uint8, shuffled, batched, scaled to [0, 1] and prefetched.
Labels are class indices in the sorted order of the class folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mxbench.errors import UsageError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


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


def list_images(root: str | Path) -> tuple[list[str], list[int], list[str]]:
    """Files and labels of ``root/train/<class>/*``; UsageError when there are none."""
    train = Path(root) / "train"
    classes = sorted(d.name for d in train.iterdir() if d.is_dir()) if train.is_dir() else []
    files: list[str] = []
    labels: list[int] = []
    for index, name in enumerate(classes):
        for f in sorted((train / name).iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file():
                files.append(str(f))
                labels.append(index)
    if not files:
        raise UsageError(f"--data {str(root)!r}: no images under train/<class>/ (jpg or png)")
    return files, labels, classes


def image_folder(root: str | Path, batch_size: int, size: tuple[int, int], seed: int = 0) -> Any:
    """An endless tf.data pipeline over the folder, resized to ``size`` (height, width);
    needs TensorFlow, under any Keras backend."""
    import tensorflow as tf

    files, labels, _ = list_images(root)

    def load(path: Any, label: Any) -> tuple[Any, Any]:
        img = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        img = tf.image.resize(img, size, method="bilinear")
        return tf.cast(tf.clip_by_value(tf.round(img), 0, 255), tf.uint8), label

    auto = tf.data.AUTOTUNE
    ds = tf.data.Dataset.from_tensor_slices((files, np.asarray(labels, np.int32)))
    ds = ds.map(load, num_parallel_calls=auto).cache()
    ds = ds.shuffle(min(len(files), 10_000), seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat().batch(batch_size, drop_remainder=True)
    ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y), num_parallel_calls=auto)
    return ds.prefetch(auto)
