"""Where a step's time goes: operations from any backend's profiler, sorted into categories.

The profilers name what they saw in their own words: TensorFlow ops (``scope/name:Conv2D``),
PyTorch ATen operators (``aten::mkldnn_convolution`` under ``aten::_to_copy``...), XLA's HLO
instructions and fusions (``convert_reduce_fusion``, ``dot_general.4``) and, on a GPU, CUDA
kernel names (``ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn``). :func:`category` maps
any of them onto the few categories that explain a mixed-precision result:

- ``conv_matmul``: convolutions and matrix products, the only work Tensor Cores / AMX /
  AVX512_BF16 speed up (split on a GPU into Tensor Core kernels and the rest by name);
- ``elementwise_norm``: memory-bound work (activations, normalization, reductions,
  pooling, XLA's elementwise fusions): at best the bandwidth ratio from 16-bit types;
- ``cast``: dtype conversions, the price mixed precision pays;
- ``layout``: transposes, reorders, contiguous copies;
- ``optimizer``: the weight update;
- ``input``: waiting for the next batch;
- ``other``: what none of these names says.

:func:`summarize` turns timed operations into the record's :class:`~mxbench.results.Profile`
figures: per category milliseconds per step scaled into the time the device (or the CPU's
worker threads) was busy, plus ``host_gap``: the rest of the wall-clock step, when nothing
ran (Python, dispatch and launch overhead, synchronisation).

Name rules are heuristics, stated as such in the record and the report.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mxbench.results import CATEGORY_NAMES

CATEGORIES: tuple[str, ...] = tuple(CATEGORY_NAMES)

# Order matters: a cast is checked before a convolution ("convert" contains "conv").
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("input", r"iteratorgetnext|^iterator::|dataloader|prefetch"),
        ("cast", r"\bcast\b|^cast$|convert|_to_copy|\baten::to\b|direct_copy_kernel|"
                 r"castop"),
        ("layout", r"transpose|permute|reorder|contiguous|_mkltotf|inputconversion|"
                   r"nchwtonhwc|nhwctonchw|\bcopy_fusion|^copy(\.\d+)?$|layout"),
        ("elementwise_norm", r"norm|bn_fw|bn_bw|softmax|pooling"),  # before cudnn's name
        # XLA:CPU's XNNPACK / YNNPACK fusions hold dots or elementwise work: their name
        # does not say which
        ("other", r"^[xy]nn_fusion"),
        ("conv_matmul", r"conv|matmul|gemm|\bdot\b|dot_general|^dot(\.\d+)?$|\baten::(add|b)?mm\b|"
                        r"\baten::linear\b|einsum|inner_product|cudnn|cublas|xmma|hmma|wgmma|"
                        r"wmma|cutlass|nvjet|tensorop|winograd|implicit_|sm\d\d_"),
        ("elementwise_norm", r"norm|relu|gelu|sigmoid|tanh|softmax|elementwise|fusion|reduce|"
                             r"\bsum\b|mean|pool|add|\bmul|sub\b|\bsub|div|maximum|minimum|"
                             r"select|where|sqrt|rsqrt|square|\bpow|\bexp|\blog|neg|abs|"
                             r"threshold|clamp|dropout|bias|loss|nll|entropy|fill|zero|"
                             r"broadcast|vectorized|unrolled|memset|tile|concat|slice|pad"),
    )
)  # fmt: skip

# The weight update: PyTorch's fused _foreach_ ops, TF's Apply* kernels, optimizer scopes.
_OPTIMIZER = re.compile(
    r"_foreach_|resourceapply|applyadam|applygradientdescent|applymomentum|applyrmsprop|"
    r"optimizer",
    re.IGNORECASE,
)

# cuBLAS / cuDNN / CUTLASS kernel names that run on Tensor Cores: the MMA shapes
# (h884, s1688, s16816, i8816...), xmma/hmma/wgmma/wmma, CUTLASS tensorop, Hopper nvjet.
_TENSOR_CORE = re.compile(
    r"[hsib]?(884|1688|16816|8816|16832)(gemm|cudnn|dgrad|wgrad|fprop|conv)|xmma|hmma|"
    r"wgmma|gmma|wmma|tensorop|_tc_|tensorcore|nvjet|_mma_|mma_sync",
    re.IGNORECASE,
)


def category(names: Sequence[str], optimizer: str | None = None) -> str:
    """The category of an operation named ``names[0]``, called from ``names[1:]`` (its
    callers, innermost first: an ``aten::copy_`` under ``aten::_to_copy`` is a cast, under
    ``aten::contiguous`` a layout change). ``optimizer``: the optimizer's name scope
    (``adam``), for TensorFlow op names."""
    scope = f"/{optimizer.lower()}/" if optimizer else None
    for n in names:  # anything the optimizer called is the optimizer's
        if _OPTIMIZER.search(n) or (
            scope and (scope in n.lower() or n.lower().startswith(scope[1:]))
        ):
            return "optimizer"
    for name in names:
        op = name.rsplit(":", 1)[-1] if ":" in name and "::" not in name else name
        for cat, pattern in _RULES:
            if pattern.search(op):
                return cat
    return "other"


def tensor_core(kernel: str) -> bool:
    """Whether a GPU kernel's name says it runs on Tensor Cores (a heuristic on cuBLAS,
    cuDNN and CUTLASS naming)."""
    return bool(_TENSOR_CORE.search(kernel))


@dataclass(frozen=True, slots=True)
class Op:
    """One timed operation: what ran (and who called it), when, for how long (seconds,
    its own time: children excluded), and on which thread or stream."""

    names: tuple[str, ...]
    start: float
    duration: float
    lane: str = ""
    self_s: float | None = None  # its own time when the profiler tells it (PyTorch)

    @property
    def own(self) -> float:
        return self.duration if self.self_s is None else self.self_s


def busy_s(ops: Iterable[Op]) -> float:
    """Seconds during which at least one of ``ops`` ran (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for op in sorted(ops, key=lambda o: o.start):
        stop = op.start + op.duration
        if stop <= end:
            continue
        total += stop - max(op.start, end)
        end = stop
    return total


@dataclass
class Summary:
    breakdown_ms: dict[str, float]  # per category, ms per step (host_gap included)
    busy_share: float
    top: list[tuple[str, str, float, int]]  # (name, category, ms per step, calls)
    tensor_core_share: float | None  # of conv/matmul time (GPU kernels only)
    cast_share: float | None  # of busy time


def short_name(name: str) -> str:
    """An op's name as the top list shows it: a TF op's type, not its whole scope; a
    kernel's name without its template arguments."""
    if ":" in name and "::" not in name:
        name = name.rsplit(":", 1)[-1]
    name = re.sub(r"\.\d+$", "", name)
    return re.sub(r"<.*", "", name)[:120]


def summarize(
    ops: Sequence[Op],
    *,
    wall_s: float,
    steps: int,
    optimizer: str | None = None,
    gpu: bool = False,
    top: int = 10,
) -> Summary:
    """Categories of ``ops`` (each op's own time), scaled into the busy time (ops that ran
    at the same time on several threads count once), and the step's idle rest."""
    per_cat: dict[str, float] = defaultdict(float)
    per_op: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    tc = non_tc = 0.0
    for op in ops:
        cat = category(op.names, optimizer)
        per_cat[cat] += op.own
        entry = per_op[(short_name(op.names[0]), cat)]
        entry[0] += op.own
        entry[1] += 1
        if gpu and cat == "conv_matmul":
            if tensor_core(op.names[0]):
                tc += op.own
            else:
                non_tc += op.own
    total = sum(per_cat.values())
    busy = min(busy_s(ops), wall_s)
    scale = busy / total if total > 0 else 0.0
    per_step = 1000.0 / steps
    out = {c: round(per_cat.get(c, 0.0) * scale * per_step, 4) for c in CATEGORIES[:-1]}
    out["host_gap"] = round(max(wall_s - busy, 0.0) * per_step, 4)
    ranked = sorted(per_op.items(), key=lambda kv: -kv[1][0])[:top]
    return Summary(
        breakdown_ms=out,
        busy_share=round(busy / wall_s, 4) if wall_s > 0 else 0.0,
        top=[(n, c, round(t * scale * per_step, 4), int(k)) for (n, c), (t, k) in ranked],
        tensor_core_share=round(tc / (tc + non_tc), 4) if gpu and tc + non_tc > 0 else None,
        cast_share=round(per_cat.get("cast", 0.0) / total, 4) if total > 0 else None,
    )
