"""Loss scaling as a parameter (``loss_scale``): how the optimizer is wrapped, and what the
scaler did.

``auto`` leaves it to Keras (a dynamic :class:`keras.optimizers.LossScaleOptimizer` under
``mixed_float16``, nothing otherwise); ``dynamic`` wraps the optimizer in one under any
policy; ``none`` compiles without scaling; a number sets the optimizer's own
``loss_scale_factor``: the loss is multiplied by it and the gradients divided, with no check
for overflow (a factor too large makes the gradients infinite and the weights NaN; too small
lets float16 gradients underflow to zero). A dynamic scaler skips every step whose gradients
are not finite and halves its scale: :func:`skipped_steps` counts them.
"""

from __future__ import annotations

from typing import Any

from mxbench.matrix.params import loss_scale_factor


def optimizer(given: Any, loss_scale: str) -> tuple[Any, bool]:
    """The optimizer to compile with for ``loss_scale``, and Keras' ``auto_scale_loss``."""
    import keras

    if loss_scale == "auto":
        return given, True
    opt = keras.optimizers.get(given)
    if isinstance(opt, keras.optimizers.LossScaleOptimizer):
        opt = opt.inner_optimizer  # the model's own scaler gives way to the parameter
    if loss_scale == "dynamic":
        return keras.optimizers.LossScaleOptimizer(opt), False
    opt.loss_scale_factor = loss_scale_factor(loss_scale)  # None for "none"
    return opt, False


def scaler(model: Any) -> Any:
    """The model's dynamic loss scaler, or None."""
    import keras

    opt = getattr(model, "optimizer", None)
    return opt if isinstance(opt, keras.optimizers.LossScaleOptimizer) else None


def skipped_steps(model: Any, steps: int) -> int | None:
    """How many of the ``steps`` training steps run so far the dynamic scaler skipped
    (non-finite gradients): the steps its inner optimizer did not apply. None: no scaler."""
    import keras

    opt = scaler(model)
    if opt is None:
        return None
    applied = int(keras.ops.convert_to_numpy(opt.inner_optimizer.iterations))
    return max(0, steps - applied)


def first_scale(model: Any) -> float:
    """The factor the model's first training step multiplies its loss by."""
    opt = scaler(model)
    if opt is not None:
        return float(opt.initial_scale)
    factor = getattr(getattr(model, "optimizer", None), "loss_scale_factor", None)
    return float(factor) if factor else 1.0
