"""The ``keras.applications`` networks of the zoo, built offline (``weights=None``).

Each is the application without its top, average-pooled, with a Dense head (ImageNet's 1000
classes, the module's ``CLASSES``) whose softmax is kept in float32, as mixed precision
requires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def application(name: str, constructor: str, classes: int) -> Callable[..., Any]:
    """The ``build(image_size, image_width)`` of ``keras.applications.<constructor>``."""

    def build(image_size: int, image_width: int) -> Any:
        import keras

        base = getattr(keras.applications, constructor)(
            include_top=False,
            weights=None,
            input_shape=(image_size, image_width, 3),
            pooling="avg",
        )
        x = keras.layers.Dense(classes, name="head")(base.output)
        out = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
        return keras.Model(base.input, out, name=name)

    return build
