"""An independent count of a profiled window, from the raw trace the bench kept
(``MXBENCH_PROFILE_DIR``): computed apart from mxbench's reader, to check its figures.

What differs from :mod:`mxbench.bench.evidence.profile`: other files and readers (TensorFlow's
XSpace through its protobuf directly; JAX's and PyTorch's Chrome-format trace JSON, which the reader
never opens), another rule for what an operation is (TF: an event named ``name:Type``, TF's
own op naming; JAX: an event carrying XLA's ``hlo_op`` argument; PyTorch: an ``aten::``
operator), its own small list of rules per backend sorting operations into the record's
categories (written from each framework's op naming, not from mxbench's table), and another
algorithm for own time: a sweep over each thread's event boundaries giving every slice of
time to the innermost operation open during it. Events inside an operation that are none
(TensorFlow's Eigen kernels trace their thread pool's ``ParallelFor`` inside the convolution
that runs it) are part of it; time in no operation (a wrapper's own) is nobody's.

A slice of time goes to the category of the innermost operation open during it, with two
exceptions: an operation that *claims* what it calls (PyTorch's ``_foreach_`` optimizer
ops, whose slow CPU path calls ``aten::sqrt`` per tensor) takes everything inside it, and an
operation that is no work of its own kind (``aten::copy_``, ``aten::empty``: category None)
takes the category of the operation around it (``aten::copy_`` in ``aten::_to_copy`` is a
cast), "other" at the top.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Slice:
    name: str
    start: float  # seconds
    end: float
    thread: str
    op: bool  # an operation (else a wrapper around operations or a part of one)
    category: str | None = "other"  # None: the category of the operation around it
    claims: bool = False  # what runs inside it is its category too (the optimizer's)

    @property
    def conv(self) -> bool:  # a convolution or matrix product
        return self.category == "conv_matmul"


@dataclass(frozen=True)
class Count:
    ops_s: float  # the operations' own times, summed over threads
    busy_s: float  # the union of the operations' intervals
    conv_s: float  # the convolutions' and matmuls' own times
    thread_busy_s: float  # each thread's union of its operations' intervals, summed
    categories: dict[str, float]  # category -> own times summed (adds up to ops_s)

    def share(self, category: str) -> float:
        """``category``'s share of the operations' own time."""
        return self.categories.get(category, 0.0) / self.ops_s if self.ops_s > 0 else 0.0

    def largest_besides_conv(self) -> str | None:
        work = {c: t for c, t in self.categories.items() if c != "conv_matmul" and t > 0}
        return max(work, key=work.__getitem__) if work else None


def count(slices: list[Slice]) -> Count:
    own: dict[int, float] = defaultdict(float)
    by_cat: dict[str, float] = defaultdict(float)
    per_thread: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(slices):
        per_thread[s.thread].append(i)
    for idx in per_thread.values():
        edges = sorted({t for i in idx for t in (slices[i].start, slices[i].end)})
        starts = sorted(idx, key=lambda i: slices[i].start)
        k, open_ = 0, list[int]()
        for lo, hi in itertools.pairwise(edges):
            while k < len(starts) and slices[starts[k]].start <= lo:
                open_.append(starts[k])
                k += 1
            open_ = [i for i in open_ if slices[i].end > lo]
            ops_open = [i for i in open_ if slices[i].op]
            if ops_open:  # the innermost operation: opened last (the shorter one at a tie)
                nest = sorted(ops_open, key=lambda i: (slices[i].start, -slices[i].end))
                own[nest[-1]] += hi - lo
                by_cat[_category([slices[i] for i in nest])] += hi - lo
    ops = [i for i, s in enumerate(slices) if s.op]
    threads = {slices[i].thread for i in ops}
    return Count(
        ops_s=sum(own[i] for i in ops),
        busy_s=_union([slices[i] for i in ops]),
        conv_s=sum(own[i] for i in ops if slices[i].conv),
        thread_busy_s=sum(
            _union([slices[i] for i in ops if slices[i].thread == t]) for t in threads
        ),
        categories=dict(by_cat),
    )


def _category(nest: list[Slice]) -> str:
    """The category of a slice of time inside ``nest`` (the open operations, outermost
    first): an operation's that claims what it calls, else the innermost one's that has one
    of its own."""
    for s in nest:
        if s.claims and s.category:
            return s.category
    return next((s.category for s in reversed(nest) if s.category), "other")


def _union(spans: list[Slice]) -> float:
    """The time covered by at least one of ``spans``."""
    busy, reach = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s.start):
        if s.end > reach:
            busy += s.end - max(s.start, reach)
            reach = s.end
    return busy


def _one(trace_dir: Path, pattern: str) -> Path:
    found = sorted(trace_dir.rglob(pattern))
    assert found, f"no {pattern} under {trace_dir}"
    return found[-1]


_TF_OP = re.compile(r"^[^:]+:(\w+)$")  # TF's op events: "scope/name:Type"
# Keras' optimizers name their update's scope after themselves (TF: "StatefulPartitionedCall/
# adam/Sub_4:Sub"; JAX, in XLA's metadata: "jit(train_step)/adam/add"); TF's own fused
# updates are ResourceApply* / Apply* op types
_OPTIMIZER_SCOPE = re.compile(
    r"^(adam|adamw|adamax|nadam|sgd|rmsprop|adagrad|adadelta|adafactor|ftrl|lamb|lion|"
    r"loss_scale_optimizer)(_\d+)?$"
)
# TF op types (oneDNN's _Mkl / _MklNative / _Fused prefixes taken off) by category
_TF_TYPES = {
    "cast": {"Cast"},
    "layout": {"Transpose", "ConjugateTranspose", "MklToTf", "ToTf"},
    "elementwise_norm": set(
        re.findall(
            r"\w+",
            "Relu Relu6 ReluGrad Relu6Grad Elu EluGrad Selu Sigmoid SigmoidGrad Tanh TanhGrad "
            "Softmax LogSoftmax BiasAdd BiasAddGrad BiasAddV1 BatchNorm BatchNormV3 "
            "BatchNormGradV3 BatchNormEx FusedBatchNorm FusedBatchNormV3 FusedBatchNormGradV3 "
            "FusedBatchNormEx MaxPool MaxPoolGrad AvgPool AvgPoolGrad Add AddV2 AddN Sub Mul "
            "Div RealDiv DivNoNan Neg Sqrt Rsqrt RsqrtGrad SqrtGrad Square SquaredDifference "
            "Pow Exp Log Log1p Abs Maximum Minimum Mean Sum Max Min Prod ArgMax ArgMin Tile "
            "Select SelectV2 Equal NotEqual Less LessEqual Greater GreaterEqual LogicalAnd "
            "LogicalOr LogicalNot BitwiseAnd BitwiseOr ZerosLike OnesLike Fill BroadcastTo "
            "ConcatV2 Slice StridedSlice StridedSliceGrad SparseSoftmaxCrossEntropyWithLogits "
            "SoftmaxCrossEntropyWithLogits ClipByValue Pad PadV2",
        )
    ),
}


def tf_category(name: str) -> str:
    """The category of a TF op event ``scope/name:Type`` by TF's own op naming: its scope
    (the optimizer's), its type (oneDNN's kernels are ``_Mkl*`` / ``_MklNative*`` versions
    of TF's types)."""
    if name.startswith("IteratorGetNext"):
        return "input"
    path, _, op_type = name.rpartition(":")
    if any(_OPTIMIZER_SCOPE.match(part.lower()) for part in path.split("/")[:-1]):
        return "optimizer"
    if re.match(r"^(Resource)?(Sparse)?Apply[A-Z]", op_type):
        return "optimizer"
    if op_type == "IteratorGetNext":
        return "input"
    if "Conv" in op_type or "MatMul" in op_type or op_type == "Einsum":
        return "conv_matmul"
    base = re.sub(r"^_(Mkl)?(Native)?(Fused)?", "", op_type)
    return next((c for c, types in _TF_TYPES.items() if base in types), "other")


def tensorflow(trace_dir: Path) -> Count:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(_one(trace_dir, "*.xplane.pb").read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {k: m.name for k, m in host.event_metadata.items()}
    slices = []
    for line in host.lines:
        if line.name.startswith("tf_data"):
            continue
        for e in line.events:
            name = names.get(e.metadata_id, "")
            start = (line.timestamp_ns * 1000 + e.offset_ps) / 1e12
            op = bool(_TF_OP.match(name)) or name.startswith("IteratorGetNextOp")
            slices.append(Slice(name, start, start + e.duration_ps / 1e12, str(line.id), op=op,
                                category=tf_category(name) if op else None))  # fmt: skip
    return count(slices)


def _chrome(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e.get("dur")]


_XLA_CONV = re.compile(r"conv_|convolution|dot|cublas|cudnn")  # HLO names: not convert


def xla_dump_flags(trace_dir: Path | str) -> str:
    """``XLA_FLAGS`` that make a JAX bench dump its compiled training step as text under
    ``trace_dir/xla``, where :func:`_library_convs` reads it."""
    return (
        f"--xla_dump_to={trace_dir}/xla --xla_dump_hlo_as_text "
        "--xla_dump_hlo_module_re=jit_train_step"
    )


def _library_convs(trace_dir: Path) -> set[str]:
    """XLA:CPU's library fusions (``ynn_fusion.N``) that hold a convolution or a dot, from
    XLA's own text dump of the compiled step (``trace_dir/xla``, written by the bench under
    ``--xla_dump_to``): a fusion whose fused computation contains one."""
    convs = set()
    for path in sorted((trace_dir / "xla").glob("*jit_train_step*after_optimizations.txt")):
        text = path.read_text()
        bodies = {
            m.group(1): m.group(2)
            for m in re.finditer(r"^%(\S+) \([^\n]*\{\n(.*?)^\}", text, re.MULTILINE | re.DOTALL)
        }
        for name, callee in re.findall(r"%([xy]nn_fusion[.\d]*) = .*?calls=%(\S+?),", text):
            if re.search(r"= \S+ (convolution|dot)\(", bodies.get(callee, "")):
                convs.add(name)
    return convs


@dataclass(frozen=True)
class Hlo:
    """One instruction of XLA's dump: its opcode, the opcodes of what it fuses (a fusion's
    computation; else its own), that computation's root's, and its JAX op's name."""

    opcode: str
    fused: frozenset[str]
    root: str
    op_name: str


_HLO_HEAD = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{$")
_HLO_INSTRUCTION = re.compile(r"^\s+(ROOT )?%([\w.\-]+) = .*? ([a-z][\w\-]*)\((.*)$")


def hlo_instructions(trace_dir: Path) -> dict[str, Hlo]:
    """The compiled training step's instructions by name, from XLA's text dump
    (``trace_dir/xla``)."""
    found: dict[str, Hlo] = {}
    for path in sorted((trace_dir / "xla").glob("*jit_train_step*after_optimizations.txt")):
        bodies: dict[str, list[str]] = defaultdict(list)
        roots: dict[str, str] = {}
        lines: list[tuple[str, str, str]] = []  # (name, opcode, rest of the line)
        computation = ""
        for line in path.read_text().splitlines():
            if head := _HLO_HEAD.match(line):
                computation = head.group(1)
            elif ins := _HLO_INSTRUCTION.match(line):
                root, name, opcode, rest = ins.groups()
                bodies[computation].append(opcode)
                roots[computation] = opcode if root else roots.get(computation, "")
                lines.append((name, opcode, rest))
        for name, opcode, rest in lines:
            calls = re.search(r"calls=%([\w.\-]+)", rest)
            callee = calls.group(1) if calls and opcode == "fusion" else ""
            op_name = re.search(r'op_name="([^"]*)"', rest)
            found[name] = Hlo(
                opcode,
                frozenset(bodies[callee]) if callee else frozenset({opcode}),
                roots.get(callee, "") if callee else opcode,
                op_name.group(1) if op_name else "",
            )
    return found


# What is no work of its own in a fused computation (its inputs, views of them)
_HLO_PLUMBING = {"parameter", "constant", "bitcast", "broadcast", "reshape", "tuple", "iota",
                 "get-tuple-element", "slice"}  # fmt: skip
_HLO_LAYOUT = {"transpose", "copy", "reverse", "pad", "concatenate", "dynamic-slice",
               "dynamic-update-slice"}  # fmt: skip


def xla_category(hlo_op: str, dump: dict[str, Hlo]) -> str:
    """An XLA instruction's category from what XLA's dump says it computes: the JAX
    operation's scope (Keras' optimizer names its update's: ``jit(train_step)/adam/add``),
    then a convolution or dot inside, a conversion at its root, data movement only, other
    arithmetic; an instruction the dump lacks, by its name."""
    h = dump.get(hlo_op)
    if h is None:
        return "conv_matmul" if _XLA_CONV.match(hlo_op) else "other"
    if any(_OPTIMIZER_SCOPE.match(part) for part in h.op_name.split("/")[1:-1]):
        return "optimizer"
    if h.fused & {"convolution", "dot"}:
        return "conv_matmul"
    if h.root == "convert":
        return "cast"
    work = h.fused - _HLO_PLUMBING
    if h.root in _HLO_LAYOUT and work <= _HLO_LAYOUT | {"convert"}:  # moves data (converted)
        return "layout"
    if h.opcode in ("fusion", "reduce", "reduce-window", "select-and-scatter", "map") or work:
        return "elementwise_norm" if h.opcode not in ("custom-call", "while", "call") else "other"
    return "other"


def jax(trace_dir: Path) -> Count:
    slices = []
    dump = hlo_instructions(trace_dir)
    for e in _chrome(_one(trace_dir, "*.trace.json.gz")):
        hlo = str((e.get("args") or {}).get("hlo_op", ""))
        start = float(e["ts"]) / 1e6
        slices.append(
            Slice(
                str(e["name"]),
                start,
                start + float(e["dur"]) / 1e6,
                f"{e['pid']}/{e['tid']}",
                op=bool(hlo),
                category=xla_category(hlo, dump) if hlo else None,
            )
        )
    return count(slices)


_TORCH_MATMUL = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::matmul",
    "aten::linear",
    "aten::convolution_backward",
)
# ATen operators by category, by name ("aten::" and an in-place "_" suffix taken off); the
# optimizer's are the _foreach_ ones and all they call; None: what the operator around it is
# (a copy or an allocation under aten::_to_copy is the cast's, under contiguous the layout's)
_TORCH_OPS: tuple[tuple[str | None, re.Pattern[str]], ...] = (
    ("optimizer", re.compile(r"^_foreach_")),
    ("cast", re.compile(r"^_?to(_copy)?$|^type_as$")),
    ("layout", re.compile(r"^(contiguous|permute_copy|transpose_copy|_mkldnn_reshape|"
                          r"to_mkldnn|to_dense|_reorder)$")),
    ("elementwise_norm", re.compile(
        r"^(add|sub|rsub|mul|div|sqrt|rsqrt|pow|neg|exp|log|abs|square|sum|mean|var|std|max|"
        r"min|amax|amin|maximum|minimum|argmax|relu|threshold|threshold_backward|clamp|"
        r"clamp_min|clamp_max|where|eq|ne|lt|le|gt|ge|fill|zero|ones|zeros|full|sigmoid|tanh|"
        r"gelu|silu|softmax|_softmax|log_softmax|_log_softmax|_log_softmax_backward_data|"
        r"_softmax_backward_data|nll_loss|nll_loss_forward|nll_loss_backward|cross_entropy|"
        r"batch_norm|_batch_norm_impl_index|native_batch_norm|native_batch_norm_backward|"
        r"max_pool2d|max_pool2d_with_indices|max_pool2d_with_indices_backward|avg_pool2d|"
        r"avg_pool2d_backward|adaptive_avg_pool2d|_adaptive_avg_pool2d|"
        r"_adaptive_avg_pool2d_backward|mkldnn_max_pool2d|dropout|constant_pad_nd|cat|"
        r"stack|logical_and|logical_or|logical_not|bitwise_and|sign|reciprocal|lerp|addcmul|"
        r"addcdiv|mse_loss|_fused_dropout|native_dropout|expand_as)$")),
    (None, re.compile(r"^(copy|clone|empty|empty_like|empty_strided|as_strided|view|reshape|"
                      r"_reshape_alias|expand|unsqueeze|squeeze|slice|narrow|select|t|"
                      r"transpose|permute|detach|alias|resize|lift_fresh|_unsafe_view|"
                      r"unbind|split|chunk|index_select|_local_scalar_dense|item|"
                      r"result_type|flatten)$")),
)  # fmt: skip


def torch_category(name: str) -> str | None:
    """An ATen operator's category by its name (None: the operator around it decides)."""
    if "conv" in name or name in _TORCH_MATMUL:
        return "conv_matmul"
    if "DataLoader" in name:  # PyTorch's annotation of a batch's fetch
        return "input"
    base = name.removeprefix("aten::")
    base = base[:-1] if base.endswith("_") and not base.startswith("_foreach_") else base
    return next((c for c, rule in _TORCH_OPS if rule.match(base)), "other")


def torch(trace_dir: Path) -> Count:
    """The ``aten::`` operators on the host; on a GPU the kernels on its streams instead,
    each in the category of the operator that launched it (the trace links them by
    ``External id``: the kernel's own name is not read)."""
    events = _chrome(_one(trace_dir, "torch-trace.json"))
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if kernels:
        launched_by = {
            (e.get("args") or {}).get("External id"): str(e["name"])
            for e in events
            if e.get("cat") == "cpu_op"
        }
        return count([_torch_kernel(e, launched_by) for e in kernels])
    slices = []
    for e in events:
        if e.get("cat") not in ("cpu_op", "user_annotation"):
            continue
        name = str(e["name"])
        start = float(e["ts"]) / 1e6
        op = name.startswith("aten::") or "DataLoader" in name
        cat = torch_category(name) if op else None
        slices.append(Slice(name, start, start + float(e["dur"]) / 1e6, str(e["tid"]), op=op,
                            category=cat, claims=cat == "optimizer"))  # fmt: skip
    return count(slices)


def _torch_kernel(e: dict[str, Any], launched_by: dict[Any, str]) -> Slice:
    start = float(e["ts"]) / 1e6
    op = launched_by.get((e.get("args") or {}).get("External id"), "")
    return Slice(str(e["name"]), start, start + float(e["dur"]) / 1e6,
                 f"stream {e['tid']}", op=True, category=torch_category(op) or "other")  # fmt: skip


COUNTERS = {"tensorflow": tensorflow, "jax": jax, "torch": torch}
