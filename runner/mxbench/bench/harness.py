"""The model of a cell, whatever it is: the harness around a model plugin.

:func:`prepare` resolves the ``model`` parameter (a zoo name or a user's entry point), calls
its ``build`` under the cell's dtype policy with the initial weights of a float32 build
copied in (so every policy starts from the same weights), checks what it returned, and
derives what the model does not say: synthetic inputs from ``model.inputs`` (floats uniform
in [0, 1); integer inputs from a declared range), labels from the output (one sigmoid unit:
binary; C classes: sparse labels in [0, C)), the loss and the optimizer (Adam). The model's
own code is untrusted: whatever it raises, returns or prints becomes a clear error record
(:class:`ModelError`), never a crash of the bench. The contract is ``docs/models.md``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mxbench import models
from mxbench.models import EntryPoint

# Keys a build() may return in its dict, and what each is.
RESULT_KEYS = {
    "model": "the uncompiled keras.Model (required)",
    "loss": "a Keras loss (name or object)",
    "optimizer": "a Keras optimizer (name or object)",
    "inputs": "{input name: {'range': [low, high]}} for integer inputs",
    "labels": "{'kind': 'sparse' | 'binary' | 'dense', 'classes': C} or {'range': [low, high]}",
    "dataset": "dataset(batch_size, seed) -> an endless source of (x, y) batches",
}
LOGIT_ACTIVATIONS = ("softmax", "sigmoid")


class ModelError(Exception):
    """The model plugin failed or broke its contract: the record says which and how."""


@dataclass
class Prepared:
    """A built model with everything the bench needs to train it."""

    model: Any
    loss: Any
    optimizer: Any
    inputs: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, Any] | None = None
    dataset: Callable[[int, int], Any] | None = None
    source: str = "zoo"  # zoo, file or module
    source_sha256: str | None = None
    build_s: float = 0.0
    init: str = "seeded"
    warnings: list[str] = field(default_factory=list)
    forward_flops: int | None = None  # the model's own formula, when it has one
    image: tuple[int, int] | None = None  # the image input it took (:func:`image_input`)


def _load_module(ep: EntryPoint) -> Any:
    try:
        if ep.kind == "file":
            path = Path(ep.target)
            if not path.is_file():
                raise ModelError(f"model {str(ep)!r}: no such file {ep.target}")
            name = "mxbench_user_model_" + hashlib.sha256(str(path).encode()).hexdigest()[:8]
            loader = importlib.util.spec_from_file_location(name, path)
            if loader is None or loader.loader is None:
                raise ModelError(f"model {str(ep)!r}: {ep.target} is not a Python file")
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            sys.path.insert(0, str(path.resolve().parent))  # its sibling modules
            loader.loader.exec_module(module)
            return module
        return importlib.import_module(ep.target)
    except ModelError:
        raise
    except (Exception, SystemExit) as exc:
        raise ModelError(f"model {str(ep)!r}: import failed: {type(exc).__name__}: {exc}") from exc


def _builder(p: Any) -> tuple[Callable[[], Any], str, str | None, int | None]:
    """A no-argument build, where the model comes from, its source hash, its forward FLOPs
    per example when it declares them. The zoo's models and users' are called alike: their
    module's ``build`` (and ``forward_flops``) with the arguments each names."""
    ep = models.entry_point(p.model)
    module = _load_module(ep)
    fn = getattr(module, ep.function, None)
    if not callable(fn):
        raise ModelError(f"model {str(ep)!r}: {ep.target} has no function {ep.function!r}")
    values = models.build_values(p)
    digest: str | None = None
    if not models.is_builtin(p.model):
        try:
            digest = models.source_hash(ep)
        except (OSError, ValueError):
            digest = None
    source = "zoo" if models.is_builtin(p.model) else ep.kind
    return (lambda: models.call(fn, values)), source, digest, _flops(module, values, str(ep))


def _flops(module: Any, values: dict[str, Any], model: str) -> int | None:
    """The module's ``forward_flops`` called like its build; ModelError when it fails."""
    fn = getattr(module, models.FLOPS_FUNCTION, None)
    if fn is None:
        return None
    what = f"model {model!r}: {models.FLOPS_FUNCTION}()"
    try:
        flops = models.call(fn, values)
    except (Exception, SystemExit) as exc:
        raise ModelError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not 0 < flops < 1e30:
        raise ModelError(f"{what} returned {flops!r}, expected a positive number of FLOPs")
    return int(flops)


def _call_build(build: Callable[[], Any], what: str) -> dict[str, Any]:
    """``build()``'s result as a dict with a ``model``; ModelError for anything else."""
    import keras

    try:
        out = build()
    except (Exception, SystemExit) as exc:
        raise ModelError(f"{what}: build() raised {type(exc).__name__}: {exc}") from exc
    result = out if isinstance(out, dict) else {"model": out}
    unknown = sorted(set(result) - set(RESULT_KEYS))
    if unknown:
        allowed = "; ".join(f"{k}: {v}" for k, v in RESULT_KEYS.items())
        raise ModelError(f"{what}: build() returned unknown keys {unknown} (allowed: {allowed})")
    model = result.get("model")
    if not isinstance(model, keras.Model):
        got = type(model).__name__ if "model" in result else "a dict without 'model'"
        raise ModelError(f"{what}: build() returned {got}, expected an uncompiled keras.Model")
    if getattr(model, "compiled", False) or getattr(model, "optimizer", None) is not None:
        raise ModelError(f"{what}: build() returned a compiled model; mxbench compiles it")
    return result


def set_policy(policy: str) -> None:
    """Global dtype policy. ``float16`` is the pure case: float16 variables, no loss scaling."""
    import keras

    keras.config.set_dtype_policy(policy)


def prepare(
    p: Any,
    set_policy: Callable[[str], None],
    seed: int = 0,
    scope: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> Prepared:
    """Build the cell's model under ``p.policy`` from the weights of a float32 build;
    ``scope``: where the model itself is built (a distribution strategy's; the float32
    reference is built and cleared outside it)."""
    import keras

    t0 = time.perf_counter()
    what = f"model {p.model!r}"
    build, source, digest, flops = _builder(p)
    init = "seeded"
    reference: list[Any] | None = None
    if p.policy != "float32":
        set_policy("float32")
        keras.utils.set_random_seed(seed)
        reference = _call_build(build, what)["model"].get_weights()
        keras.backend.clear_session()
    set_policy(p.policy)
    keras.utils.set_random_seed(seed)
    warnings: list[str] = []
    with scope():
        result = _call_build(build, what)
        model = result["model"]
        if reference is not None:
            init = _copy_weights(model, reference, warnings)
    prepared = Prepared(
        model=model,
        loss=result.get("loss"),
        optimizer=result.get("optimizer") or "adam",
        inputs=dict(result.get("inputs") or {}),
        labels=result.get("labels"),
        dataset=result.get("dataset"),
        source=source,
        source_sha256=digest,
        init=init,
        warnings=warnings,
        forward_flops=flops,
    )
    if prepared.loss is None:
        prepared.loss = default_loss(model, prepared.labels)
    _check(prepared, p.policy)
    prepared.image = image_input(model, p)
    prepared.build_s = time.perf_counter() - t0
    return prepared


def _copy_weights(model: Any, reference: list[Any], warnings: list[str]) -> str:
    current = model.get_weights()
    shapes = [w.shape for w in current]
    if len(current) != len(reference) or shapes != [r.shape for r in reference]:
        warnings.append(
            "the model builds differently under this policy than under float32: its initial "
            "weights are seeded, not copied from float32's"
        )
        return "seeded"
    model.set_weights([r.astype(c.dtype) for r, c in zip(reference, current, strict=True)])
    return "float32-copy"


def _output_activation(model: Any) -> str | None:
    last = model.layers[-1] if model.layers else None
    act = getattr(last, "activation", None)
    return getattr(act, "__name__", None) if act is not None else None


def default_loss(model: Any, labels: dict[str, Any] | None) -> Any:
    """Binary cross-entropy for one output unit, sparse categorical cross-entropy for C > 1,
    mean squared error for ``labels: {'kind': 'dense'}``; from logits when the output layer
    is not a sigmoid / softmax."""
    import keras

    kind = label_kind(model, labels)
    logits = _output_activation(model) not in LOGIT_ACTIVATIONS
    if kind == "dense":
        return keras.losses.MeanSquaredError()
    if kind == "binary":
        return keras.losses.BinaryCrossentropy(from_logits=logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=logits)


def label_kind(model: Any, labels: dict[str, Any] | None) -> str:
    if labels and labels.get("kind"):
        return str(labels["kind"])
    if labels and "range" in labels:
        return "sparse"
    return "binary" if int(model.outputs[0].shape[-1] or 1) == 1 else "sparse"


def _check(prepared: Prepared, policy: str) -> None:
    """What a model does that mixed precision cares about: said in the record."""
    import keras

    model = prepared.model
    if len(model.outputs) != 1 and prepared.dataset is None:
        raise ModelError(
            f"the model has {len(model.outputs)} outputs: mxbench's synthetic labels cover one; "
            "return a dataset(batch_size, seed) from build() for several"
        )
    out_dtype = str(model.outputs[0].dtype)
    if policy.startswith("mixed") and out_dtype in ("float16", "bfloat16"):
        prepared.warnings.append(
            f"the output is {out_dtype}: mixed precision needs a float32 output (end the model "
            "with keras.layers.Activation('linear', dtype='float32')), or the loss is computed "
            "in 16 bits"
        )
    if isinstance(prepared.optimizer, keras.optimizers.LossScaleOptimizer):
        prepared.warnings.append(
            "build() returned its own LossScaleOptimizer: mxbench compiles with it as given "
            "(Keras does not wrap it again)"
        )
    kind = (prepared.labels or {}).get("kind")
    if kind is not None and kind not in ("sparse", "binary", "dense"):
        raise ModelError(f"labels: kind {kind!r}: expected sparse, binary or dense")


def synthetic_batch(prepared: Prepared, p: Any, seed: int = 0) -> tuple[Any, Any]:
    """One batch of inputs and labels for the model, derived from its inputs and output."""
    rng = np.random.default_rng(seed)
    model = prepared.model
    xs = []
    for tensor in model.inputs:
        name = str(getattr(tensor, "name", "")).split(":")[0]
        shape = [p.batch_size, *(_dim(d, i, p) for i, d in enumerate(tensor.shape[1:]))]
        dtype = str(tensor.dtype)
        declared = prepared.inputs.get(name) or {}
        if "int" in dtype or "bool" in dtype:
            if "range" not in declared:
                raise ModelError(
                    f"integer input {name!r} needs a declared range: return {{'model': ..., "
                    f"'inputs': {{'{name}': {{'range': [0, {p.vocab_size}]}}}}}} from build()"
                )
            low, high = (int(v) for v in declared["range"])
            xs.append(rng.integers(low, high, size=shape).astype(dtype))
        else:
            xs.append(rng.random(shape, dtype=np.float32))
    x = xs[0] if len(xs) == 1 else xs
    return x, _labels(prepared, p, rng)


def image_input(model: Any, p: Any) -> tuple[int, int] | None:
    """Height and width of the image the model takes: its first input's where the model
    fixes them (whatever the cell asked), the cell's where it leaves them open; None when
    that input is not an image (batch, height, width, channels)."""
    shape = tuple(model.inputs[0].shape) if model.inputs else ()
    if len(shape) != 4:
        return None
    return _dim(shape[1], 0, p), _dim(shape[2], 1, p)


def _dim(d: Any, index: int, p: Any) -> int:
    """A dimension the model leaves open: the sequence length, or the image's height/width."""
    if d is not None:
        return int(d)
    return p.image_hw[index] if index < 2 else 3


def _labels(prepared: Prepared, p: Any, rng: np.random.Generator) -> Any:
    model, labels = prepared.model, prepared.labels or {}
    out = [p.batch_size, *(int(d or 1) for d in model.outputs[0].shape[1:])]
    kind = label_kind(model, prepared.labels)
    if kind == "dense":
        return rng.random(out, dtype=np.float32)
    if kind == "binary":
        return rng.integers(0, 2, size=out).astype(np.float32)
    low, high = labels.get("range") or [0, labels.get("classes") or out[-1]]
    return rng.integers(int(low), int(high), size=out[:-1]).astype(np.int32)


def compile_model(
    prepared: Prepared, jit_compile: str, loss_scale: str = "auto", steps_per_execution: int = 1
) -> None:
    """Keras adds dynamic loss scaling itself under ``mixed_float16`` (not under float16);
    ``loss_scale`` other than ``auto`` decides instead (:mod:`mxbench.bench.model.loss_scale`)."""
    from mxbench.bench.model import loss_scale as scaling

    jit: bool | str = "auto" if jit_compile == "auto" else jit_compile == "on"
    optimizer, auto = scaling.optimizer(prepared.optimizer, loss_scale)
    prepared.model.compile(
        loss=prepared.loss,
        optimizer=optimizer,
        metrics=["accuracy"],
        jit_compile=jit,
        auto_scale_loss=auto,
        steps_per_execution=steps_per_execution,
    )
