"""The serving cell's parts of the result record (:mod:`mxbench.records.record`): how its inference
calls were timed, their latency percentiles, and its output against float32's (the gate)."""

from __future__ import annotations

from typing import Annotated, Literal

from mxbench.records.part import Count, Doc, Part, Positive

# The quality gate: a policy's outputs against float32's on the same weights and inputs.
GATE_AGREEMENT = 0.99  # top-1 agreement at least this (MLPerf: 99% of float32's quality)
GATE_COSINE = 0.99  # cosine similarity of the outputs at least this
GATE_RELATIVE_TOP1 = 0.99  # on real data: top-1 at least this share of float32's


class LatencyPercentile(Part):
    """One percentile of the per-call latency (mxbench.stats.latency): its value and
    distribution-free interval, or null where the calls cannot support it."""

    q: Annotated[float, Doc("the quantile: 0.5, 0.9, 0.99")] = 0.5
    n: Annotated[Count, Doc("timed calls it rests on")] = 0
    level: Annotated[float, Doc("the interval's confidence level")] = 0.95
    ms: Annotated[Positive | None, Doc("nearest-rank value; null: too few calls")] = None
    low_ms: Annotated[Positive | None, Doc("order-statistic interval, lower end")] = None
    high_ms: Annotated[Positive | None, Doc("order-statistic interval, upper end")] = None
    needs: Annotated[
        Count | None, Doc("calls the percentile needs for an interval at its level")
    ] = None


class Gate(Part):
    """The policy against a float32 build with the same weights, after the timed calls and
    after the memory reading (never in either): top-1 on a data folder's validation split
    (kind data: loaded weights), else the outputs on the same synthetic inputs."""

    ran: Annotated[bool, Doc("whether the comparison ran (false: see note)")] = False
    kind: Annotated[
        Literal["synthetic", "data"],
        Doc("data: top-1 on the validation split (trained or given weights); synthetic: "
            "output agreement on synthetic inputs"),
    ] = "synthetic"  # fmt: skip
    examples: Annotated[Count | None, Doc("inputs compared (validation images, kind data)")] = None
    top1: Annotated[float | None, Doc("kind data: the policy's top-1 accuracy")] = None
    float32_top1: Annotated[
        float | None, Doc("kind data: float32's top-1 with the same weights, same images")
    ] = None
    top1_relative: Annotated[float | None, Doc("kind data: top1 / float32_top1")] = None
    top1_agreement: Annotated[
        float | None, Doc("share of inputs whose top-1 class is float32's")
    ] = None
    cosine: Annotated[
        float | None, Doc("cosine similarity of all outputs with float32's (flattened)")
    ] = None
    max_abs_diff: Annotated[float | None, Doc("largest absolute output difference")] = None
    passed: Annotated[
        bool | None,
        Doc("synthetic: top-1 agreement >= 0.99 and cosine >= 0.99; data: top1 >= 0.99 x "
            "float32_top1: its speedup may stand in the summary"),
    ] = None  # fmt: skip
    gate_s: Annotated[float | None, Doc("seconds the comparison took")] = None
    note: Annotated[str | None, Doc("why it did not run, or what it left out")] = None


class Inference(Part):
    """A serving cell (params.mode infer): inference calls only, timed one by one; each
    call's time (ms) is a step in metrics.step_ms."""

    call: Annotated[
        Literal["direct", "compiled", "predict_on_batch", "predict"] | None,
        Doc("direct: model(x, training=False) on a device-placed batch (torch under no_grad); "
            "compiled: the same through tf.function (XLA with jit_compile on), jax.jit or "
            "torch.compile; predict_on_batch / predict: Keras' own loops"),
    ] = None  # fmt: skip
    sync: Annotated[
        str | None,
        Doc("how each call waited for its result: to_numpy (the output copied to the host: "
            "asynchronous dispatch cannot end a call early)"),
    ] = None  # fmt: skip
    batch: Annotated[Count | None, Doc("examples per call")] = None
    warmup_calls: Annotated[Count | None, Doc("untimed calls first (tracing, compilation)")] = None
    warmup_ms: Annotated[float | None, Doc("the warm-up calls together")] = None
    first_call_ms: Annotated[float | None, Doc("the first warm-up call")] = None
    calls: Annotated[Count | None, Doc("timed calls")] = None
    percentiles: Annotated[
        list[LatencyPercentile],
        Doc("p50, p90, p99 of the calls' times: metrics.step_ms.samples (a serving cell's "
            "step is one call)"),
    ] = []  # fmt: skip
    window_s: Annotated[float | None, Doc("first timed call's start to last one's end")] = None
    images_per_s: Annotated[Positive | None, Doc("batch x calls / window_s")] = None
    quantize: Annotated[
        str | None, Doc("Keras Model.quantize mode applied (int8, float8, int4), or null")
    ] = None
    quantized_layers: Annotated[
        dict[str, int], Doc("layers Model.quantize changed, by class (what actually ran)")
    ] = {}
    weights_file: Annotated[
        str | None,
        Doc("the weights file served (params.weights trained: the training run's), or null: "
            "the build's own"),
    ] = None  # fmt: skip
    gate: Annotated[
        Gate | None,
        Doc("against float32 (policies but float32; every cell where the gate is on data)"),
    ] = None  # fmt: skip
