"""Facts about any Keras model, for the record: what the report needs to explain a speedup.

Parameters, layers by kind, FLOPs per example from every source that gives a count (the
model's own formula, XLA's cost analysis under JAX, an analytic walk of the layers: their
disagreement is a finding; the first positive one is used), GEMM dimensions that are not
multiples of 8 (Tensor Core kernels want multiples of 8 in every dimension), the output
dtype, layers whose dtype policy is not the global one, and the share of the activations
written by memory-bound layers (normalization, activations, depthwise convolutions, pooling,
elementwise), whose speedup from 16-bit types is at most the bandwidth ratio.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

OFF8_LIMIT = 64  # the record lists at most this many; the count says how many in all
# Layer classes whose cost is moving memory, not arithmetic.
MEMORY_BOUND = frozenset(
    {
        "BatchNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "UnitNormalization",
        "RMSNormalization",
        "Normalization",
        "Rescaling",
        "Activation",
        "ReLU",
        "ELU",
        "LeakyReLU",
        "PReLU",
        "Softmax",
        "DepthwiseConv1D",
        "DepthwiseConv2D",
        "Add",
        "Subtract",
        "Multiply",
        "Average",
        "Maximum",
        "Minimum",
        "Concatenate",
        "Dropout",
        "MaxPooling1D",
        "MaxPooling2D",
        "MaxPooling3D",
        "AveragePooling1D",
        "AveragePooling2D",
        "AveragePooling3D",
        "GlobalAveragePooling1D",
        "GlobalAveragePooling2D",
        "GlobalMaxPooling1D",
        "GlobalMaxPooling2D",
        "ZeroPadding2D",
        "PositionEmbedding",
        "LayerScale",
        "StochasticDepth",
    }
)
# Leaf layers that move no data worth counting (views, inputs).
FREE = frozenset({"InputLayer", "Flatten", "Reshape", "Permute", "Identity"})


def leaves(model: Any) -> Iterator[Any]:
    """The model's layers, nested models expanded."""
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers and hasattr(layer, "inputs"):
            yield from leaves(layer)
        else:
            yield layer


def _shape(tensor_or_list: Any) -> tuple[int, ...] | None:
    t = tensor_or_list[0] if isinstance(tensor_or_list, (list, tuple)) else tensor_or_list
    shape = getattr(t, "shape", None)
    if shape is None or any(d is None for d in shape[1:]):
        return None
    return tuple(int(d) for d in shape[1:])


def _io(layer: Any) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    try:
        return _shape(layer.input), _shape(layer.output)
    except (AttributeError, ValueError, IndexError, TypeError):
        return None, None


def _einsum_flops(eq: str, kernel_shape: tuple[int, ...], out_elems: int) -> int:
    lhs, rhs = eq.replace(" ", "").split("->")
    kernel = lhs.split(",")[1]
    contracted = math.prod(n for ch, n in zip(kernel, kernel_shape, strict=False) if ch not in rhs)
    return 2 * out_elems * contracted


def _ints(shape: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in shape)


def layer_flops(layer: Any) -> int | None:
    """Forward FLOPs per example (a multiply-add is 2), for layers that do arithmetic."""
    kind = type(layer).__name__
    inp, out = _io(layer)
    if out is None:
        return None
    out_elems = math.prod(out)
    in_elems = math.prod(inp) if inp else 0
    kernel = getattr(layer, "kernel", None)
    if kind == "MultiHeadAttention":
        return _attention_flops(layer, out)
    if kind in ("DepthwiseConv1D", "DepthwiseConv2D"):
        return 2 * out_elems * math.prod(_ints(layer.kernel_size))
    if kind in ("SeparableConv1D", "SeparableConv2D"):
        pointwise = 2 * out_elems * _ints(layer.pointwise_kernel.shape)[-2]
        return pointwise + 2 * in_elems * math.prod(_ints(layer.kernel_size))
    if kernel is None:
        return None
    ks = _ints(kernel.shape)
    if kind in ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"):
        return 2 * in_elems * math.prod(ks[:-2]) * ks[-2]
    if kind in ("Conv1D", "Conv2D", "Conv3D"):
        return 2 * out_elems * math.prod(ks[:-1])
    if kind == "Dense":
        return 2 * out_elems * ks[0]
    if kind == "EinsumDense":
        return _einsum_flops(str(layer.equation), ks, out_elems)
    return None


def _attention_flops(layer: Any, out: tuple[int, ...]) -> int:
    """Self-attention over the output's length: the four projections, the scores and the
    weighted sum (the value length is taken to be the query's: an approximation)."""
    length = out[0] if len(out) > 1 else 1
    proj = 0
    for name in ("_query_dense", "_key_dense", "_value_dense", "_output_dense"):
        dense = getattr(layer, name, None)
        if dense is not None and getattr(dense, "kernel", None) is not None:
            proj += 2 * length * math.prod(int(d) for d in dense.kernel.shape)
    heads, key_dim = int(layer.num_heads), int(layer.key_dim)
    value_dim = int(layer.value_dim or key_dim)
    return proj + 2 * length * length * heads * (key_dim + value_dim)


def _off8(layer: Any) -> list[dict[str, Any]]:
    """GEMM dimensions of the layer that are not multiples of 8."""
    kind = type(layer).__name__
    dims: list[tuple[str, int]] = []
    kernel = getattr(layer, "kernel", None)
    if kind.startswith("Conv") and kernel is not None:
        dims = [("input channels", int(kernel.shape[-2])), ("filters", int(kernel.shape[-1]))]
    elif kind.startswith("DepthwiseConv") and kernel is not None:
        dims = [("channels", int(kernel.shape[-2]))]
    elif kind == "Dense" and kernel is not None:
        dims = [("input units", int(kernel.shape[0])), ("units", int(kernel.shape[1]))]
    elif kind == "Embedding":
        dims = [("vocabulary", int(layer.input_dim)), ("output dim", int(layer.output_dim))]
    elif kind == "MultiHeadAttention":
        dims = [("heads x key dim", int(layer.num_heads) * int(layer.key_dim))]
    return [
        {"layer": layer.name, "kind": kind, "attribute": a, "value": v} for a, v in dims if v % 8
    ]


def _policy_name(obj: Any) -> str | None:
    policy = getattr(obj, "dtype_policy", None)
    return getattr(policy, "name", None) if policy is not None else None


def facts(model: Any, global_policy: str) -> dict[str, Any]:
    """The record's model facts (``record.model``) that a walk of the layers gives."""
    kinds: Counter[str] = Counter()
    off8: list[dict[str, Any]] = []
    overrides: list[dict[str, str]] = []
    flops, walked, unknown = 0, 0, []
    elems_memory, elems_all, n_memory, n_all = 0, 0, 0, 0
    for layer in leaves(model):
        kind = type(layer).__name__
        if kind in FREE:
            continue
        kinds[kind] += 1
        n_all += 1
        off8 += _off8(layer)
        name = _policy_name(layer)
        if name and name != global_policy:
            overrides.append({"layer": layer.name, "policy": name})
        f = layer_flops(layer)
        if f is not None:
            flops += f
            walked += 1
        elif getattr(layer, "weights", None) and kind not in MEMORY_BOUND and kind != "Embedding":
            unknown.append(kind)
        _, out = _io(layer)
        elems = math.prod(out) if out else 0
        elems_all += elems
        if kind in MEMORY_BOUND:
            elems_memory += elems
            n_memory += 1
    out_dtype = str(model.outputs[0].dtype) if getattr(model, "outputs", None) else None
    return {
        "parameters": int(model.count_params()),
        "layers": dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        "analytic_forward_flops": flops or None,
        "flops_unknown_layers": sorted(set(unknown)),
        "off_multiple_of_8": off8[:OFF8_LIMIT],
        "off_multiple_of_8_count": len(off8),
        "output_dtype": out_dtype,
        "policy_overrides": overrides[:OFF8_LIMIT],
        "memory_bound_layers": n_memory,
        "memory_bound_share": round(elems_memory / elems_all, 4) if elems_all else None,
    }


def xla_forward_flops(model: Any, x: Any) -> float | None:
    """FLOPs of one forward pass per example from XLA's cost analysis (JAX backend only:
    lowering is cheap, nothing is compiled); XLA's own answer as it came where it is not
    positive (-1: it could not count; never a count to use); None where the backend gives
    none."""
    if "jax" not in sys.modules:
        return None
    import jax
    import keras

    if keras.backend.backend() != "jax":
        return None
    try:
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]

        def forward(tv: Any, ntv: Any, inputs: Any) -> Any:
            return model.stateless_call(tv, ntv, inputs, training=False)[0]

        first = x[0] if isinstance(x, list) else x
        batch = int(first.shape[0])
        analysis = jax.jit(forward).lower(trainable, non_trainable, x).cost_analysis()
        if isinstance(analysis, list):
            analysis = analysis[0] if analysis else {}
        if not analysis or "flops" not in analysis:
            return None
        total = float(analysis["flops"])
        return total / batch if total > 0 else total
    except Exception as exc:  # the cost analysis is a nicety: fall back to the layer walk
        print(f"mxbench bench: XLA cost analysis failed: {exc!r}", file=sys.stderr)
        return None


SOURCES = ("formula", "xla", "analytic")  # the order one is picked in


def flops_by_source(forward: dict[str, float | None]) -> dict[str, float]:
    """Training FLOPs per example (forward x 3) of each source that gave a forward count
    (``forward``: source -> FLOPs of one forward pass per example, None: no answer); a
    count that is not positive (XLA's -1) is kept as it came, never multiplied."""
    return {k: 3 * float(v) if v > 0 else float(v) for k, v in forward.items() if v is not None}


def pick(by_source: dict[str, float]) -> str | None:
    """The source whose count the record uses: the first of :data:`SOURCES` with a positive
    count (the model's own formula, then XLA's, then the layer walk's)."""
    return next((k for k in SOURCES if by_source.get(k, 0) > 0), None)


def model_info(p: Any, prepared: Any, x: Any = None) -> Any:
    """The record's model facts (``mxbench.records.record.ModelInfo``): the harness's and a walk of
    the built model's layers; the FLOPs of every source (:func:`flops_by_source`), the first
    positive of the model's formula, XLA's count on the batch ``x`` (when given), the
    layers' analytic count used. Training and serving cells alike."""
    import msgspec

    from mxbench.records.record import ModelInfo

    model = prepared.model
    found = facts(model, p.policy)
    xla = xla_forward_flops(model, x) if x is not None else None
    forward = {"formula": prepared.forward_flops, "xla": xla,
               "analytic": found["analytic_forward_flops"]}  # fmt: skip
    by_source = flops_by_source(forward)
    source = pick(by_source)
    inputs = ["x".join(str(d) for d in t.shape[1:]) + f" {t.dtype}" for t in model.inputs]
    info = {k: v for k, v in found.items() if k != "analytic_forward_flops"}
    return msgspec.convert(
        {
            **info,
            "name": p.model,
            "source": prepared.source,
            "source_sha256": prepared.source_sha256,
            "build_s": round(prepared.build_s, 3),
            "init": prepared.init,
            "inputs": inputs,
            "image_input": list(prepared.image) if prepared.image else None,
            "flops_per_example": by_source[source] if source else None,
            "flops_source": source,
            "flops_by_source": by_source,
            "warnings": prepared.warnings,
        },
        ModelInfo,
    )
