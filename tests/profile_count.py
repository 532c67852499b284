"""An independent count of a profiled window, from the raw trace the bench kept
(``MXBENCH_PROFILE_DIR``): computed apart from mxbench's reader, to check its figures.

What differs from :mod:`mxbench.bench.evidence.profile`: other files and readers (TensorFlow's XSpace
through its protobuf directly; JAX's and PyTorch's Chrome-format trace JSON, which the reader
never opens), another rule for what an operation is (TF: an event named ``name:Type``, TF's
own op naming; JAX: an event carrying XLA's ``hlo_op`` argument; PyTorch: an ``aten::``
operator), its own list of what a convolution / matmul is, and another algorithm for own
time: a sweep over each thread's event boundaries giving every slice of time to the
innermost operation open during it. Events inside an operation that are none (TensorFlow's
Eigen kernels trace their thread pool's ``ParallelFor`` inside the convolution that runs it)
are part of it; time in no operation (a wrapper's own) is nobody's.
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
    conv: bool  # a convolution or matrix product


@dataclass(frozen=True)
class Count:
    ops_s: float  # the operations' own times, summed over threads
    busy_s: float  # the union of the operations' intervals
    conv_s: float  # the convolutions' and matmuls' own times
    thread_busy_s: float  # each thread's union of its operations' intervals, summed


def count(slices: list[Slice]) -> Count:
    own: dict[int, float] = defaultdict(float)
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
                inner = max(ops_open, key=lambda i: (slices[i].start, -slices[i].end))
                own[inner] += hi - lo
    ops = [i for i, s in enumerate(slices) if s.op]
    threads = {slices[i].thread for i in ops}
    return Count(
        ops_s=sum(own[i] for i in ops),
        busy_s=_union([slices[i] for i in ops]),
        conv_s=sum(own[i] for i in ops if slices[i].conv),
        thread_busy_s=sum(
            _union([slices[i] for i in ops if slices[i].thread == t]) for t in threads
        ),
    )


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
            m = _TF_OP.match(name)
            op_type = m.group(1) if m else ""
            slices.append(Slice(name, start, start + e.duration_ps / 1e12, str(line.id),
                                op=bool(m) or name.startswith("IteratorGetNextOp"),
                                conv="Conv" in op_type or "MatMul" in op_type))  # fmt: skip
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


def jax(trace_dir: Path) -> Count:
    slices = []
    library = _library_convs(trace_dir)
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
                conv=bool(_XLA_CONV.match(hlo)) or hlo in library,
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


def torch(trace_dir: Path) -> Count:
    """The ``aten::`` operators on the host; on a GPU the kernels on its streams instead,
    each a convolution / matmul when the operator that launched it is one (the trace links
    them by ``External id``: the kernel's own name is not read)."""
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
        slices.append(Slice(name, start, start + float(e["dur"]) / 1e6, str(e["tid"]),
                            op=name.startswith("aten::"), conv=_torch_conv(name)))  # fmt: skip
    return count(slices)


def _torch_conv(op: str) -> bool:
    return "conv" in op or op in _TORCH_MATMUL


def _torch_kernel(e: dict[str, Any], launched_by: dict[Any, str]) -> Slice:
    start = float(e["ts"]) / 1e6
    op = launched_by.get((e.get("args") or {}).get("External id"), "")
    return Slice(str(e["name"]), start, start + float(e["dur"]) / 1e6,
                 f"stream {e['tid']}", op=True, conv=_torch_conv(op))  # fmt: skip


COUNTERS = {"tensorflow": tensorflow, "jax": jax, "torch": torch}
