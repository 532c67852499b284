"""``blog-cnn``: the 2020 blog post's CNN, the published experiment's model.

Three stride-2 convolutions (32 5x5, 64 7x7, 128 11x11) with ReLU and batch normalization,
global average pooling, Dense(10), softmax kept in float32; sparse categorical
cross-entropy, Adam (the defaults).
"""

from __future__ import annotations

from typing import Any

INPUTS = "image"
MIN_IMAGE_SIZE = 8  # three stride-2 convolutions
CLASSES = 10
# (filters, kernel) of the three stride-2 convolutions, as published.
CONVS = ((32, 5), (64, 7), (128, 11))


def build(image_size: int, image_width: int) -> Any:
    """The CNN under the current global dtype policy; softmax stays float32 as published."""
    import keras
    from keras import layers

    stack: list[Any] = [keras.Input(shape=(image_size, image_width, 3))]
    for filters, kernel in CONVS:
        stack.append(layers.Conv2D(filters, kernel, strides=2, padding="same", activation="relu"))
        stack.append(layers.BatchNormalization())
    stack += [
        layers.GlobalAveragePooling2D(),
        layers.Dense(CLASSES),
        layers.Activation("softmax", dtype="float32"),
    ]
    return keras.Sequential(stack, name="blog_cnn")


def forward_flops(image_size: int, image_width: int) -> int:
    """Multiply-adds x 2 of the convolutions and the Dense layer (BatchNorm/ReLU ignored)."""
    flops, height, width, channels = 0, image_size, image_width, 3
    for filters, kernel in CONVS:
        height, width = -(-height // 2), -(-width // 2)  # "same" padding, stride 2
        flops += 2 * height * width * kernel * kernel * channels * filters
        channels = filters
    return flops + 2 * channels * CLASSES
