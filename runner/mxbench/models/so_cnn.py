"""``so-cnn``: the Stack Overflow question's binary classifier, exactly as posted.

Four 3x3 "same" convolutions (32, 32, 64, 64; the first ``lecun_normal``), each with ReLU and
2x2 max pooling, a 2x2 average pooling, Flatten, Dense(1) and a sigmoid (kept float32);
binary cross-entropy, RMSprop(lr 1e-4, rho 0.9, epsilon 1e-4). The question trains it at
224x336 (height x width): its own input, where a matrix names no ``image_size``.
"""

from __future__ import annotations

from typing import Any

INPUTS = "image"
MIN_IMAGE_SIZE = 32  # five 2x2 poolings
IMAGE_SIZE = 224  # the question's input, height x width
IMAGE_WIDTH = 336
CLASSES = 2  # binary

FILTERS = (32, 32, 64, 64)


def build(image_size: int, image_width: int) -> dict[str, Any]:
    import keras
    from keras import layers

    stack: list[Any] = [keras.Input(shape=(image_size, image_width, 3))]
    for i, filters in enumerate(FILTERS):
        init = "lecun_normal" if i == 0 else "glorot_uniform"
        stack += [
            layers.Conv2D(filters, (3, 3), padding="same", kernel_initializer=init),
            layers.Activation("relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
        ]
    stack += [
        layers.AveragePooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dense(1),
        layers.Activation("sigmoid", dtype="float32"),
    ]
    return {
        "model": keras.Sequential(stack, name="so_cnn"),
        "loss": "binary_crossentropy",
        "optimizer": keras.optimizers.RMSprop(learning_rate=1e-4, rho=0.9, epsilon=1e-4),
    }


def forward_flops(image_size: int, image_width: int) -> int:
    """Multiply-adds x 2 of the convolutions and the Dense layer (pooling, ReLU ignored)."""
    height, width = image_size, image_width
    channels, flops = 3, 0
    for filters in FILTERS:
        flops += 2 * height * width * 9 * channels * filters
        channels = filters
        height, width = height // 2, width // 2
    height, width = height // 2, width // 2
    return flops + 2 * height * width * channels
