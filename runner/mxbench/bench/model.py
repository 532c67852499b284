"""The published benchmark model (the 2020 blog post's CNN), on Keras 3's public API only."""

from __future__ import annotations

from typing import Any

NUM_CLASSES = 10
# (filters, kernel) of the three stride-2 convolutions, as published.
CONVS = ((32, 5), (64, 7), (128, 11))


def build_model(image_size: int, num_classes: int = NUM_CLASSES) -> Any:
    """The CNN under the current global dtype policy; softmax stays float32 as published."""
    import keras
    from keras import layers

    stack: list[Any] = [keras.Input(shape=(image_size, image_size, 3))]
    for filters, kernel in CONVS:
        stack.append(layers.Conv2D(filters, kernel, strides=2, padding="same", activation="relu"))
        stack.append(layers.BatchNormalization())
    stack += [
        layers.GlobalAveragePooling2D(),
        layers.Dense(num_classes),
        layers.Activation("softmax", dtype="float32"),
    ]
    return keras.Sequential(stack, name="blog_cnn")


def set_policy(policy: str) -> None:
    """Global dtype policy. ``float16`` is the pure case: float16 variables, no loss scaling."""
    import keras

    keras.config.set_dtype_policy(policy)


def compile_model(model: Any, jit_compile: str) -> None:
    """As published: sparse categorical cross-entropy, Adam, accuracy.

    Keras adds dynamic loss scaling itself under ``mixed_float16`` (not under pure float16).
    """
    jit: bool | str = "auto" if jit_compile == "auto" else jit_compile == "on"
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer="adam",
        metrics=["accuracy"],
        jit_compile=jit,
    )


def forward_flops_per_image(image_size: int, num_classes: int = NUM_CLASSES) -> int:
    """Multiply-adds x 2 of the convolutions and the Dense layer (BatchNorm/ReLU ignored)."""
    flops, size, channels = 0, image_size, 3
    for filters, kernel in CONVS:
        size = -(-size // 2)  # "same" padding, stride 2
        flops += 2 * size * size * kernel * kernel * channels * filters
        channels = filters
    return flops + 2 * channels * num_classes


def train_flops_per_image(image_size: int) -> int:
    """Forward plus backward: the usual 3x forward."""
    return 3 * forward_flops_per_image(image_size)
