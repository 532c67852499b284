"""``call: compiled``: the model's forward pass through the backend's own compiler, called
directly (no Keras loop around it): TensorFlow's ``tf.function`` (XLA with ``jit_compile:
on``), JAX's ``jax.jit`` of Keras' ``stateless_call`` over the model's variables, PyTorch's
``torch.compile`` (inductor). Tracing and compilation happen in the warm-up calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def forward(model: Any, backend: str, jit_compile: str) -> tuple[Callable[[Any], Any], bool]:
    """The compiled ``model(x, training=False)``, and whether XLA compiles it."""
    if backend == "tensorflow":
        import tensorflow as tf

        xla = jit_compile == "on"
        fn = tf.function(lambda x: model(x, training=False), jit_compile=xla)
        return fn, xla
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        @jax.jit  # type: ignore[untyped-decorator]  # jax is untyped here
        def run(tv: Any, ntv: Any, x: Any) -> Any:
            out, _ = model.stateless_call(tv, ntv, x, training=False)
            return out

        return (lambda x: run(trainable, frozen, x)), True
    import torch

    return torch.compile(lambda x: model(x, training=False)), False
