"""The ``keras.applications`` networks of the zoo, built offline (``weights=None``).

Each is the application without its top, average-pooled, with a Dense head of 1000 classes
(ImageNet's) whose softmax is kept in float32, as mixed precision requires.
"""

from __future__ import annotations

from typing import Any

from mxbench.models import ModelSpec

CLASSES = 1000


def application(name: str, constructor: str, summary: str, min_image_size: int = 32) -> ModelSpec:
    """The :class:`ModelSpec` of ``keras.applications.<constructor>``."""

    def build(p: Any) -> Any:
        import keras

        base = getattr(keras.applications, constructor)(
            include_top=False,
            weights=None,
            input_shape=(p.image_size, p.image_width or p.image_size, 3),
            pooling="avg",
        )
        x = keras.layers.Dense(CLASSES, name="head")(base.output)
        out = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
        return keras.Model(base.input, out, name=name.replace("-", "_"))

    return ModelSpec(
        name=name, summary=summary, build=build, min_image_size=min_image_size, classes=CLASSES
    )
