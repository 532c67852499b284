"""A serving cell (``mode: infer``): the cell's model, inference calls only, timed one by one.

The model is the training cell's (:func:`mxbench.bench.model.harness.prepare`: the zoo's or the
user's, under the cell's dtype policy, from a float32 build's weights, or given trained
weights from a file: :mod:`mxbench.bench.model.served`), optionally quantized
in place by Keras (``quantize: int8``: :meth:`keras.Model.quantize`), never compiled for
training. Each call is timed from the host's side until its result exists as a NumPy array
(``keras.ops.convert_to_numpy``: the backend has finished, asynchronous dispatch cannot end
a call early), on one synthetic batch of the cell's batch size that stays on the device
between calls (``call: direct``; Keras' ``predict`` and ``predict_on_batch`` take it from the
host, as their users do). Warm-up calls (tracing, compilation) are untimed and counted.

Then, once per cell (its first process) and for every policy but plain float32: the gate
(:func:`gate`). With loaded weights and a data folder it is top-1 on the folder's validation
split (every precision, float32's too); else a float32 build with the same weights and the
policy's model are called on the same synthetic inputs; the top-1 agreement and the cosine
similarity of their outputs say whether the policy still serves float32's answers. It runs
after the timed calls and after the memory reading
(:func:`mxbench.bench.process.cell.probe_device`): neither sees it.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from mxbench.bench.backends import Backend
from mxbench.bench.model import harness
from mxbench.bench.model.served import (
    NO_FILES,
    WeightFiles,
    gates_on_data,
    load,
    no_grad,
    outputs,
)
from mxbench.bench.process.timing import Phases, summarize
from mxbench.matrix.params import BASELINE, Params
from mxbench.records.inference import (
    GATE_AGREEMENT,
    GATE_COSINE,
    Gate,
    Inference,
    LatencyPercentile,
)
from mxbench.records.record import Metrics, Record, StepStats
from mxbench.stats import latency

GATE_EXAMPLES = 256  # synthetic inputs the gate compares (top-1 agreement in steps of 0.4%)
SYNC = "to_numpy"


@dataclass
class Served:
    """A serving cell's model, as it was timed, and the weights file it loaded (if any)."""

    prepared: harness.Prepared
    quantized: dict[str, int]
    files: WeightFiles = NO_FILES
    call: Callable[[], Any] | None = None  # one timed call, as it was timed

    @property
    def model(self) -> Any:
        return self.prepared.model


def needs_gate(p: Params, files: WeightFiles = NO_FILES) -> bool:
    """Whether the cell is compared with float32 (``check: on``): any policy but float32,
    float32 quantized, and every cell whose gate is top-1 on real data (float32's own top-1
    is the reference of the others)."""
    differs = p.policy != BASELINE or p.quantize != "none"
    return p.check == "on" and (differs or gates_on_data(p, files))


def measure(
    p: Params,
    rec: Record,
    backend: Backend,
    phases: Phases,
    import_s: float,
    files: WeightFiles = NO_FILES,
) -> Served:
    """Build the cell's model (its weights loaded from ``files.load``, if any), time its
    inference calls, fill the record's ``inference`` and ``metrics`` (throughput, warm-up)."""
    prepared = harness.prepare(p, harness.set_policy, p.seed)
    model = prepared.model
    if files.load is not None:  # before quantizing: every precision serves these weights
        load(model, files.load, p)
    quantized = quantize(model, p.quantize)
    compiled_fn, xla = None, False
    if p.call == "compiled":  # the backend's compiler around the forward pass
        from mxbench.bench.model.compiled import forward

        compiled_fn, xla = forward(model, backend.name, p.jit_compile)
    elif p.call != "direct":  # Keras' loops want a compiled model (its jit_compile applies)
        harness.compile_model(prepared, p.jit_compile)
    phases.mark("build")
    x, _ = harness.synthetic_batch(prepared, p)
    call = caller(model, p.call, x, backend.name, compiled_fn)
    on_device = p.call in ("direct", "compiled")
    rec.settings.input_device = "device" if on_device else "host"
    phases.mark("data")
    from mxbench.bench.model import facts

    rec.model = facts.model_info(p, prepared)
    phases.mark("facts")
    first_s, warm_s, times, window_s = time_calls(call, p.warmup_steps, p.steps, phases)
    steps = summarize(times)  # each call's ms, as the record keeps them
    images_per_s = p.batch_size * len(times) / window_s
    keras_loop = bool(getattr(model, "jit_compile", False)) and not on_device
    rec.settings.jit_compile = xla or keras_loop
    rec.inference = Inference(
        call=p.call,
        sync=SYNC,
        batch=p.batch_size,
        warmup_calls=p.warmup_steps,
        warmup_ms=round(warm_s * 1000.0, 3),
        first_call_ms=round(first_s * 1000.0, 3) if first_s is not None else None,
        calls=len(times),
        percentiles=[
            LatencyPercentile(
                q=x.q, n=x.n, level=x.level, needs=x.needs, ms=x.value, low_ms=x.low, high_ms=x.high
            )
            for x in latency.percentiles(steps["samples"])
        ],
        window_s=round(window_s, 6),
        images_per_s=round(images_per_s, 3),
        quantize=None if p.quantize == "none" else p.quantize,
        quantized_layers=quantized,
        weights_file=files.load,
    )
    rec.metrics = Metrics(
        step_ms=msgspec.convert(steps, StepStats),
        images_per_s=round(images_per_s, 3),
        first_step_ms=rec.inference.first_call_ms,
        warmup_ms=rec.inference.warmup_ms,
        import_s=round(import_s, 3),
    )
    return Served(prepared, quantized, files, call)


def quantize(model: Any, mode: str) -> dict[str, int]:
    """Keras' in-place quantization (``int8``, ``float8``, ``int4``); the layers it changed,
    by class."""
    if mode == "none":
        return {}
    from mxbench.bench.model.facts import leaves

    with warnings.catch_warnings():  # "Layer X does not have a quantize method": told below
        warnings.simplefilter("ignore")
        model.quantize(mode)
    changed = Counter(
        type(x).__name__ for x in leaves(model) if getattr(x, "quantization_mode", None)
    )
    if not changed:
        raise harness.ModelError(f"quantize {mode}: Keras quantized no layer of this model")
    return dict(sorted(changed.items()))


def caller(
    model: Any, call: str, x: Any, backend: str, compiled_fn: Callable[[Any], Any] | None = None
) -> Callable[[], Any]:
    """One inference call on ``x`` that returns when its result is on the host; ``direct``
    and ``compiled`` (``compiled_fn``: :func:`mxbench.bench.model.compiled.forward`) on ``x``
    converted to the backend's tensor once."""
    import keras

    def host(out: Any) -> Any:
        return keras.tree.map_structure(keras.ops.convert_to_numpy, out)

    if call == "predict":
        batch = len(x[0] if isinstance(x, list) else x)
        return lambda: host(model.predict(x, batch_size=batch, verbose=0))
    if call == "predict_on_batch":
        return lambda: host(model.predict_on_batch(x))
    placed = keras.tree.map_structure(keras.ops.convert_to_tensor, x)

    def eager(t: Any) -> Any:
        return model(t, training=False)

    forward = eager if compiled_fn is None else compiled_fn

    def direct() -> Any:
        with no_grad(backend):
            return host(forward(placed))

    return direct


def time_calls(
    call: Callable[[], Any], warmup: int, steps: int, phases: Phases
) -> tuple[float | None, float, list[float], float]:
    """The first warm-up call's seconds, all warm-up calls', each timed call's, and the timed
    window's (first start to last end)."""
    first: float | None = None
    start = time.perf_counter()
    for i in range(warmup):
        t0 = time.perf_counter()
        call()
        if i == 0:
            first = time.perf_counter() - t0
            phases.mark("first_step")
    warm = time.perf_counter() - start
    phases.mark("warmup")
    times: list[float] = []
    begin = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    window = time.perf_counter() - begin
    phases.mark("timed")
    return first, warm, times, window


def gate(p: Params, served: Served, backend: str) -> Gate:
    """Top-1 on the data folder's validation split against float32's with the same weights
    (loaded weights and a data folder: :func:`mxbench.bench.model.served.data_gate`); else the
    policy's outputs against a float32 build's with the same weights, on
    :data:`GATE_EXAMPLES` synthetic inputs (seed 1, not the timed batch)."""
    from mxbench.bench.model.served import data_gate

    if served.files.load is not None and gates_on_data(p, served.files):
        return data_gate(p, served.model, served.prepared, backend, served.files.load)
    t0 = time.perf_counter()
    inputs, _ = harness.synthetic_batch(
        served.prepared, msgspec.structs.replace(p, batch_size=GATE_EXAMPLES), seed=1
    )
    ours = outputs(served.model, inputs, backend)
    base = harness.prepare(
        msgspec.structs.replace(p, policy=BASELINE, quantize="none"), harness.set_policy, p.seed
    )
    note = "float32 built from the same seed (the weights the policy's build copied)"
    if served.files.load is not None:
        load(base.model, served.files.load, p)
        note = "float32 loaded from the same weights file"
    elif not served.quantized:  # the very weights the cell served, in float32
        weights = served.model.get_weights()
        if [w.shape for w in weights] == [w.shape for w in base.model.get_weights()]:
            base.model.set_weights([np.asarray(w, dtype=np.float32) for w in weights])
            note = "float32 given the cell's own weights"
    theirs = outputs(base.model, inputs, backend)
    found = agreement(ours, theirs)
    passed = (found["top1_agreement"] or 0.0) >= GATE_AGREEMENT and (
        found["cosine"] or 0.0
    ) >= GATE_COSINE
    return Gate(
        ran=True,
        examples=GATE_EXAMPLES,
        passed=passed,
        gate_s=round(time.perf_counter() - t0, 3),
        note=note + "; after the timed calls and the memory reading",
        top1_agreement=found["top1_agreement"],
        cosine=found["cosine"],
        max_abs_diff=found["max_abs_diff"],
    )


def agreement(ours: np.ndarray, theirs: np.ndarray) -> dict[str, float | None]:
    """Top-1 agreement (the class axis last; one unit: which side of 0.5 for outputs in
    [0, 1], else of 0), cosine similarity of the flattened outputs, largest difference."""
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"outputs of shape {a.shape} and float32's {b.shape}")
    if a.shape[-1] > 1:
        top_a, top_b = a.argmax(axis=-1), b.argmax(axis=-1)
    else:
        cut = 0.5 if b.min() >= 0.0 and b.max() <= 1.0 else 0.0
        top_a, top_b = a[..., 0] > cut, b[..., 0] > cut
    finite = bool(np.isfinite(a).all())
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a.ravel() @ b.ravel()) / norm if finite and norm > 0 else 0.0
    return {
        "top1_agreement": round(float(np.mean(top_a == top_b)), 6),
        "cosine": round(cosine, 6),
        "max_abs_diff": float(np.abs(a - b).max()) if finite else None,
    }
