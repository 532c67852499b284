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

Operations count by their own (exclusive) time (:func:`exclusive`): an event's duration
less the time of the events nested in it on the same thread. Events that only enclose work
(a step function, an executor, ``__inference_*`` bodies, Python frames, autograd nodes:
:data:`ENCLOSING`) are never operations, whatever their names contain; events that are a
part of the operation around them (a thread pool's loop that TensorFlow's own Eigen kernels
run on the operation's thread: :data:`PARTS`) are none either: their time is that
operation's own.

:func:`summarize` turns timed operations into the record's :class:`~mxbench.records.record.Profile`
figures: per category milliseconds per step scaled into the time the device (or the CPU's
worker threads) was busy, plus ``host_gap``: the rest of the wall-clock step, when nothing
ran (Python, dispatch and launch overhead, synchronisation). On one thread the operations'
own times add up to the busy time; only operations running side by side on several threads
make the scale differ from one.

Name rules are heuristics, stated as such in the record and the report.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mxbench.records.record import CATEGORY_NAMES

CATEGORIES: tuple[str, ...] = tuple(CATEGORY_NAMES)


@dataclass(frozen=True, slots=True)
class Rule:
    """Names whose words match ``pattern`` are ``category``; ``callers``: the rule also
    holds for what such an operation calls (the optimizer's work, whatever its ops)."""

    category: str
    pattern: re.Pattern[str]
    callers: bool = False


def _rule(category: str, pattern: str, callers: bool = False) -> Rule:
    return Rule(category, re.compile(pattern), callers)


# The one table of category rules, first match wins, over an operation's words
# (:func:`words`: ``_MklNativeFusedConv2D`` -> ``mkl_native_fused_conv2d``, ``aten::_to_copy``
# -> ``aten_to_copy``). Every pattern is anchored at word boundaries (``(^|_)`` ... ``(_|$)``),
# never a bare substring: ``multi_step_on_iterator`` is no ``mul``. Order matters where names
# overlap: a cast before a convolution (``convert``), cuDNN's normalization kernels before
# its convolutions, XLA:CPU's XNNPACK / YNNPACK fusions (a dot or elementwise work: their
# name does not say which) before the generic fusion rule.
RULES: tuple[Rule, ...] = (
    _rule("optimizer", r"(^|_)foreach_|(^|_)(resource_)?apply_[a-z]|(^|_)optimizer(_|$)",
          callers=True),
    _rule("input", r"^iterator_get_next(_|$)|(^|_)data_?loader(_|$)"),
    # cuDNN's tensor conversion between one type and the same type reorders (a filter's
    # KCRS to KRSC), it casts nothing: ``convertTensor_kernel<float, float, float, 2>``
    # PyTorch's copy without a cast (``gpu_kernel_impl_nocast<direct_copy_kernel_cuda...>``:
    # source and destination of one type) makes a tensor contiguous; with one it casts
    _rule("layout", r"(^|_)convert_tensor_kernel_(float|double|half|nv_half|nv_bfloat16|"
                    r"bf16|int8|int)_\2(_|$)|(^|_)impl_nocast_(at_native_)?direct_copy_kernel"),
    _rule("cast", r"^cast(_op)?$|(^|_)convert(_|$)|(^|_)(b?float16|half|float8)_copy_kernel|"
                  r"(^|_)load_with_cast(_|$)|(^|_)to_copy$|^aten_to$|"
                  r"(^|_)direct_copy_kernel"),
    _rule("layout", r"(^|_)(transpose|permute|reorder|contiguous|layout)(_|$)|"
                    r"(^|_)mkl_to_tf(_|$)|(^|_)input_conversion(_|$)|(^|_)nchw_to_nhwc|"
                    r"(^|_)nhwc_to_nchw|^copy(_fusion)?$|(^|_)add_padding(_|$)"),
    _rule("elementwise_norm", r"(^|_)(batch_|layer_|group_|instance_|rms_)?norm(_|$|alization)|"
                              r"(^|_)bn_(fw|bw)|(^|_)(log_)?softmax(_|$)|"
                              r"(^|_)(max_|avg_|adaptive_avg_|adaptive_max_)?pool(ing)?(\d|_|$)"),
    _rule("other", r"^[xy]nn_fusion$"),
    _rule("conv_matmul", r"(^|_)(mkldnn_|cudnn_)?conv(\dd?|olution|_)|(^|_)conv$|"
                         r"(^|_)(batch_)?mat_?mul(_|$)|(^|_)[a-z]?\d*gem[mv](\d|_|$)|"
                         r"(^|_)dot(_general)?(_|$)|(^|_)(add|b)?mm(_|$)|(^|_)linear(_|$)|"
                         r"(^|_)einsum(_|$)|(^|_)inner_product(_|$)|"
                         r"(^|_)(cudnn|cublas|xmma|hmma|wgmma|wmma|cutlass|nvjet|tensorop|"
                         r"winograd|implicit|wgrad|dgrad|fprop|convolve)(_|$)|"
                         r"(^|_)sm\d\d_|(^|_)implicit_gemm|(^|_)wgrad_alg\d"),
    _rule("elementwise_norm", r"(^|_)(relu\d?|elu|selu|gelu|silu|sigmoid|tanh|softplus|"
                              r"elementwise|reduce|sum|mean|max|min|maximum|minimum|add|"
                              r"add_v2|add_n|bias_add|mul|multiply|sub|subtract|div|divide|"
                              r"real_div|select(_v2)?|where|sqrt|rsqrt|square|squared_"
                              r"difference|pow|exp|log|neg|negate|abs|threshold|clamp|"
                              r"dropout|bias|loss|nll|entropy|fill|zero|zeros|ones|broadcast|"
                              r"vectorized|unrolled|memset|tile|concat(_v2)?|concatenate|cat|slice|"
                              r"strided_slice|pad|compare|equal|greater|less|"
                              r"and|or|not|exponential|logistic|add_any|fusion)(_|$|\d)"),
)  # fmt: skip

# cuBLAS / cuDNN / CUTLASS kernel names that run on Tensor Cores: the MMA shapes
# (h884, s1688, s16816, i8816...), xmma/hmma/wgmma/wmma, CUTLASS tensorop, Hopper nvjet.
_TENSOR_CORE = re.compile(
    r"[hsib]?(884|1688|16816|8816|16832)(gemm|cudnn|dgrad|wgrad|fprop|conv)|xmma|hmma|"
    r"wgmma|gmma|wmma|tensorop|_tc_|tensorcore|nvjet|_mma_|mma_sync",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=65536)
def words(name: str) -> str:
    """An operation's or kernel's name as lowercase words joined by ``_``: a TensorFlow op's
    type (``scope/name:Type``: the scope says where, not what), an XLA instruction without
    its instance number (``dot.4``), CamelCase split (``FusedBatchNormV3`` ->
    ``fused_batch_norm_v3``), a C++ kernel without its parameters (:func:`kernel_head`), a
    mangled one by its head (:func:`mangled_head`)."""
    if name.startswith("_Z"):
        name = mangled_head(name)
    elif name.startswith("void ") or "<" in name:
        name = kernel_head(name)
    elif ":" in name and "::" not in name:
        name = name.rsplit(":", 1)[-1]
    name = re.sub(r"\.\d+$", "", name.strip())
    name = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name)
    return "_".join(re.findall(r"[a-z0-9]+", name.lower()))


def kernel_head(name: str) -> str:
    """A C++ kernel's signature without its return type, its parameters and the casts of its
    template arguments: ``void cudnn::convertTensor_kernel<float, float, float,
    (cudnnKernelDataType_t)2>(float, float const*...)`` -> ``cudnn::convertTensor_kernel<float,
    float, float, 2>`` (the parameters repeat the template's types and name no work)."""
    depth = 0
    name = _CAST.sub("", name.removeprefix("void ").replace("(anonymous namespace)", "anon"))
    for i, ch in enumerate(name):
        if ch == "(" and depth == 0:
            return name[:i]
        depth += (ch == "<") - (ch == ">")
    return name


_CAST = re.compile(r"\(\w+\)(?=-?\d)")  # a template argument's cast: (cudnnKernelDataType_t)2


def mangled_head(name: str) -> str:
    """What a mangled C++ kernel is (``_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23
    ImplicitGemmConvolutionINS1_...`` -> ``cutlass__5x_cudnn::Kernel<conv::kernel::
    ImplicitGemmConvolution``): the Itanium ABI's length-prefixed source names up to the
    second template argument list. Traces carry such names from cuDNN's CUTLASS kernels, too
    long and deep for c++filt to demangle, and naming in their depths a ``layout`` or a
    ``permute`` that would misfile a convolution; their head says what they compute."""
    out, i, lists = [], 2, 0
    while i < len(name) and lists < 2:
        if m := _SOURCE_NAME.match(name, i):
            n, i = int(m.group(1)), m.end()
            out.append("::" + name[i : i + n])
            i += n
        elif m := _SKIP.match(name, i):  # a literal (Li128E) or a substitution (S_, S1_, St)
            i = m.end()
        else:
            lists += name[i] == "I"
            out.append("<" if name[i] == "I" and lists < 2 else "")
            i += 1
    return "".join(out).lstrip(":")


_SOURCE_NAME = re.compile(r"(\d+)")
_SKIP = re.compile(r"L[^E]*E|S[0-9A-Z]*_|S[a-z]")


def rule_of(names: Sequence[str]) -> Rule | None:
    """The rule that decides an operation named ``names[0]``, called from ``names[1:]``
    (the operations around it, innermost first: an ``aten::copy_`` under
    ``aten::_to_copy`` is a cast, under ``aten::contiguous`` a layout change); None: other.
    Rules that hold for callers (the optimizer's) are tried on the whole chain first."""
    said = [words(n) for n in names]
    for callers in (True, False):
        for w in said:
            for r in RULES:
                if r.callers is callers and r.pattern.search(w):
                    return r
    return None


def category(names: Sequence[str], optimizer: str | None = None) -> str:
    """The category of an operation (:func:`rule_of`); ``optimizer``: the optimizer's name
    scope (``adam``): a TensorFlow op under it (``adam/Mul_17:Mul``) is the optimizer's."""
    if optimizer:
        scope = optimizer.lower() + "/"
        if any(n.lower().startswith(scope) or "/" + scope in n.lower() for n in names):
            return "optimizer"
    found = rule_of(names)
    return "other" if found is None else found.category


def tensor_core(kernel: str) -> bool:
    """Whether a GPU kernel's name says it runs on Tensor Cores (a heuristic on cuBLAS,
    cuDNN and CUTLASS naming)."""
    return bool(_TENSOR_CORE.search(kernel))


# Events that enclose operations and are none: a training step's function and its Python
# frames, the runtimes that execute it (TF's eager C API and executor, XLA's thunk executor,
# PyTorch's autograd engine and nodes), the profiler's own step marks. Each spans the work
# it encloses; its own time is dispatch overhead, never an operation's. With them the
# runtimes' bookkeeping around a call (argument checks, buffer waits): dispatch, no work.
ENCLOSING = re.compile(
    r"^\$|"  # Python frames (the JAX and TF Python tracers)
    r"^(TFE_|Eager)|^\s*__(inference|forward|backward)_|"  # TF's eager API, function bodies
    r"(^|_)(multi_step|one_step)_on_(iterator|data)|^train_(step|function)|"  # Keras' steps
    r"^[A-Z][A-Za-z0-9]*::|"  # C++ runtime scopes: ExecutorState::Process, ThunkExecutor::..
    r"^(ExecutorDoneCallback|FunctionRun|PjRt|ThreadpoolListener|InstantiatedCapturedFunction|"
    r"PrefetchProduce|PrefetchConsume|ParallelMap|MakeIterator)|"
    r"^(autograd|torch)::|^[A-Z]\w*Backward\d*$|^ProfilerStep|^Optimizer\.|^<built-in|"
    # the runtimes' bookkeeping on the Python thread (JAX's dispatch, TF's eager checks)
    r"^(Wait for |ParseArguments|Handle input|AllocateOutputBuffers|DevicePut|PjitFunction\(|"
    r"ValidateInputTypeAndPlacement|convert_to_tensor$)"
)


def enclosing(name: str) -> bool:
    """Whether an event is a wrapper around operations, not one (:data:`ENCLOSING`)."""
    return bool(ENCLOSING.search(name))


# Events that are a part of the operation around them, not operations: TensorFlow's own CPU
# kernels (Eigen's, where oneDNN is off: an AVX2-only CPU's default) split a convolution's
# work with the thread pool's ``ParallelFor``, traced on the operation's thread inside it.
# Its time is the convolution's: counted as an operation of its own, it took the time from
# the convolution and listed ``ParallelFor`` among the busiest operations.
PARTS = re.compile(r"^ParallelFor$")


def part(name: str) -> bool:
    """Whether an event is a part of the operation around it (:data:`PARTS`)."""
    return bool(PARTS.search(name))


@dataclass(frozen=True, slots=True)
class Op:
    """One timed operation: what ran (and the operations around it), when, for how long
    (seconds, its interval), on which thread or stream, and its own time (children
    excluded; None: the whole duration, as a GPU kernel's)."""

    names: tuple[str, ...]
    start: float
    duration: float
    lane: str = ""
    self_s: float | None = None

    @property
    def own(self) -> float:
        return self.duration if self.self_s is None else self.self_s


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a profiler's trace on a host thread: an operation or a wrapper."""

    name: str
    start: float  # seconds
    duration: float
    lane: str  # the thread (events on one thread nest)


def exclusive(events: Iterable[Event]) -> list[Op]:
    """The operations among ``events`` with their own (exclusive) time: per thread, an
    event inside another's interval is its child, and an event's own time is its duration
    less the time its direct children cover. Wrappers (:func:`enclosing`) are no
    operations; nor are an operation's parts (:func:`part`), whose time stays the
    operation's own; an operation's ``names`` are it and the operations around it."""
    by_lane: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.duration > 0:
            by_lane[e.lane].append(e)
    return [op for lane, evs in by_lane.items() for op in _nested(lane, evs)]


@dataclass
class _Open:
    event: Event
    chain: tuple[str, ...]  # the operations it is and is inside, innermost first
    children_s: float = 0.0
    part: bool = False  # a part of the operation around it: its time is that one's

    @property
    def end(self) -> float:
        return self.event.start + self.event.duration


def _nested(lane: str, events: list[Event]) -> list[Op]:
    """One thread's events as a nest (a stack of open events), each closed with its own time."""
    ops: list[Op] = []
    stack: list[_Open] = []

    def close(top: _Open) -> None:
        e = top.event
        if top.chain and top.chain[0] == e.name and not enclosing(e.name) and not top.part:
            own = max(e.duration - top.children_s, 0.0)
            ops.append(Op(top.chain, e.start, e.duration, lane, self_s=own))

    for e in sorted(events, key=lambda e: (e.start, -e.duration)):
        while stack and e.start >= stack[-1].end:
            close(stack.pop())
        outer = stack[-1] if stack else None
        chain = outer.chain if outer is not None else ()
        if chain and part(e.name):  # inside an operation, a part of it: no child of it
            stack.append(_Open(e, chain, part=True))
            continue
        if outer is not None:  # its time inside the parent's interval (past the parts)
            owner = next(o for o in reversed(stack) if not o.part)
            owner.children_s += min(e.start + e.duration, outer.end) - e.start
        stack.append(_Open(e, chain if enclosing(e.name) else (e.name, *chain)))
    while stack:
        close(stack.pop())
    return ops


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
    ops_ms: float  # the operations' own times, ms per step (summed over threads)
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
        ops_ms=round(total * per_step, 4),
        top=[(n, c, round(t * scale * per_step, 4), int(k)) for (n, c), (t, k) in ranked],
        tensor_core_share=round(tc / (tc + non_tc), 4) if gpu and tc + non_tc > 0 else None,
        cast_share=round(per_cat.get("cast", 0.0) / total, 4) if total > 0 else None,
    )
