"""Which CPU kernels really ran: oneDNN's verbose log, parsed.

TensorFlow (with ``TF_ENABLE_ONEDNN_OPTS``, the default on x86 Linux) and PyTorch run their
CPU convolutions and matrix products through oneDNN, which can log every primitive it
creates or executes::

    onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_fwd:avx512_core_bf16,
        forward_training,src:bf16::blocked:acdb::f0 wei:bf16:...,<attrs>,<alg>,
        mb8_ic3oc32_ih32oh16kh5sh2dh0ph1_iw32ow16kw5sw2dw0pw1,0.200195

The implementation name carries the instruction set the kernel was generated for
(``avx512_core_bf16``, ``avx512_core_amx``, ``avx2``, ``ref`` for the reference C++ path);
the descriptor the data types. A 16-bit convolution runs *natively* when its source is
bf16 / f16 and its ISA has the matching instructions; otherwise oneDNN converted it, or
emulated it on a float32 ISA.

PyTorch switches the log on and off at run time (``torch.backends.mkldnn.verbose``): its
``exec`` lines, with each execution's milliseconds, cover the profiled window only.
TensorFlow has no such switch and oneDNN reads ``ONEDNN_VERBOSE`` once, before the first
primitive: the bench sets ``ONEDNN_VERBOSE=profile_create`` at start (creation lines only,
printed while primitives are built, in the warm-up; in the timed steps only the few that
TensorFlow builds again each step, which oneDNN's cache answers: ``create:cache_hit``; no
execution is timed or logged), and weighs each created convolution / matmul by its
arithmetic (from its shape), not by measured time. The record says which (``weight``). In a
paired process the log is one for every arm: :func:`mxbench.bench.evidence.profile.mark_turn` marks
whose turn each line was logged in.

oneDNN writes the log to the process's standard output (file descriptor 1), which the bench
keeps for its one JSON record: :func:`captured_stdout` collects it in a file meanwhile.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from mxbench.bench.process import stdio

# oneDNN primitive kinds that are convolutions or matrix products (the Tensor Core / AMX /
# AVX512_BF16 work).
GEMM_KINDS = frozenset({"convolution", "deconvolution", "inner_product", "matmul"})
MAX_LOG_BYTES = 64 * 2**20  # of a captured log (a user's ONEDNN_VERBOSE=all may be huge)
SIXTEEN_BIT = frozenset({"bf16", "f16"})
# Which oneDNN ISAs compute in bf16 / f16 natively: THE definition, for the product and its
# tests. oneDNN's ISAs are cumulative (its cpu_isa_traits.hpp): avx512_core_bf16 adds bf16
# dot products to the AVX-512 vector units; avx10_1_512 (alias avx512_core_fp16) adds fp16
# arithmetic; avx10_1_512_amx (alias avx512_core_amx) adds AMX's tile matrix units (bf16 and
# int8 tiles), avx10_1_512_amx_fp16 (avx512_core_amx_fp16) fp16 tiles; avx2_vnni_2 has AVX-NE-
# CONVERT's bf16 / fp16 loads. Every AVX10 or AMX name has both types, so whatever oneDNN
# names next in those families counts too. "f16" alone must not match inside "bf16":
# avx512_core_bf16 has no float16 arithmetic.
_NATIVE16 = {
    "bf16": re.compile(r"bf16|fp16|amx|avx10|avx2_vnni_2", re.IGNORECASE),
    "f16": re.compile(r"fp16|(?<!b)f16|amx|avx10|avx2_vnni_2", re.IGNORECASE),
}


def native16(isa: str, dtype: str = "bf16") -> bool:
    """Whether oneDNN's ISA ``isa`` (``avx512_core_bf16``, ``avx10_1_512_amx``; or a whole
    implementation name, ``brg_conv_fwd:avx512_core_amx``) computes ``dtype`` (``bf16`` /
    ``f16``) natively. False for other types and for float32 ISAs (``avx512_core``, ``avx2``,
    ``ref``, ``gemm``)."""
    pattern = _NATIVE16.get(dtype)
    return bool(pattern and pattern.search(isa))


def amx(isa: str) -> bool:
    """Whether the ISA runs on AMX's tile matrix units (``avx512_core_amx``,
    ``avx10_1_512_amx``, ``avx512_core_amx_fp16``, ...)."""
    return "amx" in isa.lower()


_ISA = re.compile(
    r"(avx10[_\w]*|avx512_core_amx_fp16|avx512_core_amx|avx512_core_fp16|avx512_core_bf16|"
    r"avx512_core_vnni|avx512_core|avx512_common|avx2_vnni_2|avx2_vnni|avx2|avx|sse41|"
    r"asimd|sve_\d+|ref|any)"
)


@dataclass(frozen=True, slots=True)
class Primitive:
    """One log line: what oneDNN created or executed."""

    stage: str  # exec / create
    kind: str  # convolution, matmul, inner_product, reorder, ...
    impl: str  # brg_conv_fwd:avx512_core_bf16, jit:uni, x64:gemm:jit, ref:any
    prop: str  # forward_training, backward_data, ...
    src_dtype: str | None
    shape: str
    ms: float | None  # exec lines: milliseconds

    @property
    def isa(self) -> str:
        """The instruction set named by the implementation (``gemm`` when it names none)."""
        found = [x for x in _ISA.findall(self.impl) if x != "any"]
        if found:
            return str(found[-1])
        return "gemm" if "gemm" in self.impl else self.impl.split(":")[0] or "unknown"

    @property
    def native16(self) -> bool:
        """A 16-bit source on a kernel whose ISA computes in that type: the ISA the
        implementation names, never the rest of its name (``jit_bf16:avx512_core`` is
        oneDNN's bf16 kernel for AVX-512 without bf16 instructions: converted, not native;
        ``gemm:jit:bf16`` names no ISA)."""
        return self.src_dtype in SIXTEEN_BIT and native16(self.isa, str(self.src_dtype))

    @property
    def flops(self) -> float:
        """Multiply-adds the shape implies (convolution, inner product, matmul); 0 else."""
        return shape_macs(self.kind, self.shape)


def _dims(shape: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"([a-z]+)(\d+)", shape)}


def shape_macs(kind: str, shape: str) -> float:
    """Multiply-adds of a convolution (``mb8_ic3oc32_ih32oh16kh5..._iw32ow16kw5...``), an
    inner product (``mb8ic128oc10``) or a matmul (``8x10:10x128``; batch dims multiply)."""
    if kind == "matmul":
        parts = [p.split("x") for p in shape.split(":")[:2]]
        try:
            a, b = [[int(x) for x in p] for p in parts]
        except ValueError:
            return 0.0
        if len(a) < 2 or len(b) < 2:
            return 0.0
        return float(math.prod(a[:-2]) * a[-2] * a[-1] * b[-1])
    d = _dims(shape)
    if kind == "inner_product":
        spatial = math.prod(d.get(k, 1) for k in ("id", "ih", "iw"))
        return float(d.get("mb", 1) * d.get("ic", 0) * d.get("oc", 0) * spatial)
    if kind in ("convolution", "deconvolution"):
        out = math.prod(d.get(k, 1) for k in ("od", "oh", "ow"))
        kernel = math.prod(d.get(k, 1) for k in ("kd", "kh", "kw"))
        return float(
            d.get("mb", 1) * d.get("ic", 0) * d.get("oc", 0) * out * kernel / max(d.get("g", 1), 1)
        )
    return 0.0


def parse(lines: Iterable[str]) -> list[Primitive]:
    """The primitive lines of a oneDNN verbose log (v3 ``onednn_verbose,v1,primitive,...``
    and the older ``onednn_verbose,exec,...`` / ``dnnl_verbose,exec,...``); anything else
    (info lines, other output) is skipped."""
    out = []
    for line in lines:
        if "_verbose," not in line:
            continue
        f = line.strip().split(",")
        if len(f) > 2 and f[1] == "v1":
            if f[2] != "primitive":
                continue
            f = f[2:]
            f = f[1:]
        else:
            f = f[1:]
        # f: stage, engine, kind, impl, prop, descriptors, attrs, aux, shape, time
        if len(f) < 9 or f[1] != "cpu":
            continue
        stage = f[0].split(":")[0]
        if stage not in ("exec", "create"):
            continue
        src = re.search(r"src(?:_f32|_bf16)?:([a-z0-9]+):", f[5])
        time_ms: float | None = None
        with contextlib.suppress(ValueError):
            time_ms = float(f[-1])
        out.append(
            Primitive(
                stage,
                f[2],
                f[3],
                f[4],
                src.group(1) if src else None,
                f[-2] if time_ms is not None else f[-1],
                time_ms if stage == "exec" else None,
            )
        )
    return out


_INFO_ISA = re.compile(r"_verbose,(?:v1,)?info,cpu,isa:(.+)$")


def isa(lines: Iterable[str]) -> str | None:
    """The instruction set oneDNN says it runs with (its log's info line, ``onednn_verbose,
    v1,info,cpu,isa:Intel AVX2``), after any ``ONEDNN_MAX_CPU_ISA`` cap; None: not logged."""
    for line in lines:
        if "info,cpu,isa:" in line and (m := _INFO_ISA.search(line.strip())):
            return m.group(1).strip()
    return None


# The ONEDNN_VERBOSE values (a comma-separated list) under which oneDNN logs the primitives
# it creates or executes; others (none, 0, error, warn, check, dispatch...) log none.
_LOGGING = frozenset({"1", "2", "all", "profile", "profile_create", "profile_exec"})


def logs_primitives(verbose: str) -> bool:
    """Whether oneDNN with ``ONEDNN_VERBOSE=verbose`` logs its primitives."""
    return any(v.strip().lower() in _LOGGING for v in verbose.split(","))


@dataclass
class Evidence:
    weight: Literal["time", "flops"]  # exec milliseconds, or created primitives' arithmetic
    gemm_isas: dict[str, float]  # ISA -> share of convolution/matmul weight
    native16_share: float | None  # share of 16-bit conv/matmul weight on native kernels
    sixteen_bit_share: float  # share of conv/matmul weight whose source was 16-bit
    reorder_ms: float | None  # time in reorders (exec lines)
    gemm_ms: float | None  # time in convolutions / matmuls (exec lines)
    primitives: int
    examples: list[str]  # a few distinct kernels: "convolution brg_conv_fwd:avx512_core_bf16 bf16"
    # pass (forward_training, backward_data, backward_weights, ...) -> share of the
    # convolution/matmul weight on oneDNN's reference loops (``ref``) in that pass
    ref_passes: dict[str, float]


def evidence(prims: list[Primitive]) -> Evidence | None:
    """What the log says about the convolutions and matmuls (None: it has none)."""
    execs = [p for p in prims if p.stage == "exec"]
    weight: Literal["time", "flops"] = "time"
    if any(p.kind in GEMM_KINDS for p in execs):
        chosen = execs
        w = {id(p): p.ms or 0.0 for p in execs}
    else:
        seen: dict[tuple[str, str, str, str | None, str], Primitive] = {}
        for p in prims:  # each distinct primitive once: created in the warm-up, reused
            seen.setdefault((p.kind, p.impl, p.prop, p.src_dtype, p.shape), p)
        chosen, weight = list(seen.values()), "flops"
        w = {id(p): p.flops for p in chosen}
    gemm = [p for p in chosen if p.kind in GEMM_KINDS]
    total = sum(w[id(p)] for p in gemm)
    if not gemm:
        return None
    isas: dict[str, float] = {}
    for p in gemm:
        isas[p.isa] = isas.get(p.isa, 0.0) + w[id(p)]
    sixteen = [p for p in gemm if p.src_dtype in SIXTEEN_BIT]
    w16 = sum(w[id(p)] for p in sixteen)
    native = sum(w[id(p)] for p in sixteen if p.native16)
    examples = sorted({f"{p.kind} {p.impl} {p.src_dtype}" for p in gemm})[:8]
    ref: dict[str, float] = {}
    for p in gemm:
        if p.isa == "ref":
            ref[p.prop] = ref.get(p.prop, 0.0) + w[id(p)]
    return Evidence(
        weight=weight,
        gemm_isas={k: round(v / total, 4) for k, v in sorted(isas.items(), key=lambda kv: -kv[1])}
        if total > 0
        else {},
        native16_share=round(native / w16, 4) if w16 > 0 else None,
        sixteen_bit_share=round(w16 / total, 4) if total > 0 else 0.0,
        reorder_ms=round(sum(p.ms or 0 for p in execs if p.kind == "reorder"), 4)
        if weight == "time"
        else None,
        gemm_ms=round(total, 4) if weight == "time" else None,
        primitives=len(chosen),
        examples=examples,
        ref_passes={k: round(v / total, 4) for k, v in sorted(ref.items(), key=lambda kv: -kv[1])}
        if total > 0
        else {},
    )


@contextlib.contextmanager
def captured_stdout() -> Iterator[list[str]]:
    """Collect what is written to file descriptor 1 meanwhile (C libraries' ``printf``
    included) into the yielded list, at most :data:`MAX_LOG_BYTES` of it."""
    lines: list[str] = []
    out = stdio.Captured()
    try:
        with stdio.capture_fd(1, MAX_LOG_BYTES) as out:
            yield lines
    finally:
        lines += out.text.splitlines()
