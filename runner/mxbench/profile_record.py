"""The profiled window's parts of the result record (:mod:`mxbench.records.record`): where its time
went by category, its busiest operations, and which kernels ran the CPU's convolutions and
matmuls (oneDNN's, or the path that ran them instead)."""

from __future__ import annotations

from typing import Annotated, Literal

from mxbench.records.part import Count, Doc, Part

# The profiled window's categories (record.profile.breakdown_ms keys), with their headings.
CATEGORY_NAMES: dict[str, str] = {
    "conv_matmul": "conv/matmul",
    "elementwise_norm": "memory-bound",
    "cast": "casts",
    "layout": "layout",
    "optimizer": "optimizer",
    "input": "input",
    "other": "other",
    "host_gap": "host gap",
}


class TopOp(Part):
    """One of the operations that took the most time in the profiled window."""

    name: str | None = None
    category: str | None = None
    ms_per_step: float | None = None
    calls: Count | None = None


class OneDnnEvidence(Part):
    """Which oneDNN kernels ran the CPU's convolutions and matmuls (its verbose log); where
    oneDNN ran none of them, which path did instead and why."""

    ran: Annotated[
        bool | None,
        Doc("whether oneDNN ran the convolutions/matmuls: true: its log names them (the "
            "figures below); false: another path did (path, why, kernels); null: not known "
            "(oneDNN's log was off: why; or a record older than this field)"),
    ] = None  # fmt: skip
    path: Annotated[
        str | None,
        Doc("what ran the convolutions/matmuls: onednn; eigen: TensorFlow's own CPU kernels "
            "(its oneDNN operations off, or handing them none); aten: PyTorch's own CPU "
            "kernels (no oneDNN path for the type on this CPU)"),
    ] = None  # fmt: skip
    why: Annotated[
        str | None,
        Doc("why oneDNN did not run them (TF_ENABLE_ONEDNN_OPTS=0; TensorFlow's default on a "
            "CPU without AVX512_VNNI/AVX512_BF16/AVX_VNNI/AMX; no oneDNN bfloat16 path in "
            "PyTorch below AVX-512), or why that is not known"),
    ] = None  # fmt: skip
    isa: Annotated[
        str | None,
        Doc("the instruction set oneDNN said it runs with (its log's info line), after any "
            "ONEDNN_MAX_CPU_ISA cap: 'Intel AVX-512 with Intel DL Boost and bfloat16 "
            "support'"),
    ] = None  # fmt: skip
    weight: Annotated[
        Literal["time", "flops"] | None,
        Doc("time: measured executions in the profiled window (PyTorch); flops: the "
            "primitives created, weighed by their arithmetic (TensorFlow: oneDNN logs at "
            "creation, in the warm-up, so that no execution is timed or logged)"),
    ] = None  # fmt: skip
    gemm_isas: Annotated[
        dict[str, float], Doc("ISA of the convolution/matmul kernels -> share (avx512_core_bf16, "
                              "avx512_core_amx, avx2, ref, gemm: ISA not named)")
    ] = {}  # fmt: skip
    native16_share: Annotated[
        float | None,
        Doc("share of the 16-bit convolutions/matmuls on kernels that compute in 16 bits "
            "natively; null: none had a 16-bit source"),
    ] = None  # fmt: skip
    sixteen_bit_share: Annotated[
        float | None, Doc("share of convolution/matmul work whose source was bf16 / f16")
    ] = None
    reorder_ms: Annotated[float | None, Doc("oneDNN reorders (layout/type), window total")] = None
    gemm_ms: Annotated[float | None, Doc("oneDNN convolutions/matmuls, window total")] = None
    primitives: Count | None = None
    scope: Annotated[
        Literal["process", "turns", "window"] | None,
        Doc("whose log the figures come from: process: a process of one policy, its whole "
            "log (TensorFlow's creation lines); turns: a paired process, the lines logged in "
            "the turns of this record's arm and of any arm of its policy (warm-up, windows, "
            "profiled window), the other policies' left out; window: the profiled window's "
            "own executions (PyTorch, every design); null: a record older than this field "
            "(a paired TensorFlow one then gave every arm the whole process's log)"),
    ] = None  # fmt: skip
    left_out: Annotated[
        Count | None,
        Doc("scope turns: convolution/matmul primitives logged in no arm's turn (building "
            "the models, the fits' starts and ends), in no arm's figures"),
    ] = None  # fmt: skip
    kernels: Annotated[
        list[str],
        Doc('a few distinct kernels: "convolution brg_conv_fwd:avx512_core_bf16 bf16"; where '
            "oneDNN did not run them, the convolution/matmul operations that did (the "
            'profiled window\'s busiest: "Conv2DBackpropFilter", "aten::_slow_conv2d_forward")'),
    ] = []  # fmt: skip
    ref_passes: Annotated[
        dict[str, float],
        Doc("pass (forward_training, backward_data, backward_weights) -> share of the "
            "convolution/matmul weight that ran on oneDNN's reference loops (ref) in it"),
    ] = {}  # fmt: skip


class Profile(Part):
    """The profiled window: a few training steps after the timed ones under the backend's
    own profiler (mxbench.bench.evidence.profile), and where their time went."""

    tool: Annotated[str | None, Doc("tf.profiler, jax.profiler or torch.profiler")] = None
    device: Literal["gpu", "cpu"] | None = None
    steps: Count | None = None
    step_ms: Annotated[float | None, Doc("wall-clock ms per profiled step (profiler on)")] = None
    cost_s: Annotated[
        float | None, Doc("what the window cost: its steps, the profiler, reading the trace")
    ] = None
    breakdown_ms: Annotated[
        dict[str, float],
        Doc("ms per step by category: conv_matmul, elementwise_norm (memory-bound), cast, "
            "layout, optimizer, input, other, host_gap (nothing ran: Python, launches, "
            "waits); the sum is step_ms"),
    ] = {}  # fmt: skip
    busy_share: Annotated[float | None, Doc("share of the window in which some operation ran")] = (
        None
    )
    ops_ms: Annotated[
        float | None,
        Doc("the operations' own (exclusive) times per step, summed over threads (ms): the "
            "busy time, more where threads ran operations side by side"),
    ] = None  # fmt: skip
    tensor_core_share: Annotated[
        float | None,
        Doc("GPU: share of convolution/matmul kernel time in Tensor Core kernels, judged from "
            "kernel names (a heuristic)"),
    ] = None  # fmt: skip
    cast_share: Annotated[float | None, Doc("casts' share of the operations' time")] = None
    top_ops: Annotated[list[TopOp], Doc("the operations that took the most time")] = []
    onednn: Annotated[
        OneDnnEvidence | None, Doc("CPU: the oneDNN kernels that ran (verbose log)")
    ] = None
    trace: Annotated[str | None, Doc("where the raw trace was kept (MXBENCH_PROFILE_DIR)")] = None
    error: Annotated[str | None, Doc("why the window gave no breakdown")] = None
