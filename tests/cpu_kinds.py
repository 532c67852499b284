"""The CPU kinds that the CPU-dependent tests run under on any machine (issue 47): an
AVX2-only CPU, one with AVX512_BF16 and one with AMX, made by capping oneDNN's instruction
set (``ONEDNN_MAX_CPU_ISA``) and switching TensorFlow's oneDNN operations
(``TF_ENABLE_ONEDNN_OPTS``) as each kind's CPU has them.

A cap only goes down: a kind above what this CPU has runs as the best it has (the AMX kind
on a CPU without AMX is its AVX512_BF16, or less). So :func:`check_kernels` never trusts
the kind's name: it asserts what the record says ran (``profile.onednn``) against what
follows from the record's own facts, the CPU's flags and the settings it ran under.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mxbench.bench.evidence import onednn

KINDS: dict[str, dict[str, str]] = {
    # AMD EPYC without AVX-512: TensorFlow leaves its oneDNN operations off (its default on
    # a CPU without AVX512_VNNI / AVX512_BF16 / AVX_VNNI / AMX), and oneDNN has AVX2 only,
    # below PyTorch's oneDNN bfloat16 path
    "avx2": {"TF_ENABLE_ONEDNN_OPTS": "0", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512_bf16": {"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
    "amx": {"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
}

# oneDNN's instruction sets as ONEDNN_MAX_CPU_ISA names them, lowest first (cumulative)
LEVELS = ("AVX2", "AVX512_CORE", "AVX512_CORE_BF16", "AVX512_CORE_AMX")
AVX2, AVX512_CORE, AVX512_CORE_BF16, AVX512_CORE_AMX = range(4)
# TensorFlow's oneDNN operations are on by default on x86 Linux where the CPU has one of
# these (tensorflow/core/util/port.cc, DefaultOneDnnPolicy)
TF_ONEDNN_DEFAULT = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                               "amx_bf16"})  # fmt: skip


def env(kind: str) -> dict[str, str]:
    """This process's environment as a cell of ``kind`` runs in it."""
    return {**os.environ, **KINDS[kind]}


def cpu_level(flags: list[str]) -> int:
    """The highest of :data:`LEVELS` this CPU's flags (/proc/cpuinfo) provide; -1: below."""
    f = {x.lower() for x in flags}
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= f
    if avx512 and "avx512_bf16" in f and {"amx_tile", "amx_bf16"} <= f:
        return AVX512_CORE_AMX
    if avx512 and "avx512_bf16" in f:
        return AVX512_CORE_BF16
    return AVX512_CORE if avx512 else AVX2 if "avx2" in f else -1


def level(rec: dict[str, Any]) -> int:
    """The highest oneDNN instruction set a cell could use: its CPU's, capped by the
    ``ONEDNN_MAX_CPU_ISA`` its record says it ran under."""
    found = cpu_level(rec["cpu"]["flags"])
    cap = (rec["settings"]["onednn_max_cpu_isa"] or "").upper()
    return min(found, LEVELS.index(cap)) if cap in LEVELS else found


def tf_onednn_on(rec: dict[str, Any]) -> bool:
    """Whether TensorFlow's oneDNN operations were on, from the record's setting, else from
    TensorFlow's default for the record's CPU."""
    setting = rec["settings"]["onednn"]
    if setting is not None:
        return setting.lower() not in ("0", "false")
    return bool(TF_ONEDNN_DEFAULT & {f.lower() for f in rec["cpu"]["flags"]})


def cpu_flags() -> list[str]:
    """This machine's CPU flags (/proc/cpuinfo's first ``flags`` line; none off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                 if ln.startswith("flags")), [])  # fmt: skip


def tf_bf16_native(environ: Mapping[str, str] | None = None) -> bool:
    """Whether TensorFlow computes bfloat16 natively in a process of this environment: its
    oneDNN operations on, on a CPU with AVX512_BF16 that ``ONEDNN_MAX_CPU_ISA`` leaves it.
    Elsewhere (the AVX2-only kind) bfloat16 is emulated, several times float32's time."""
    e = os.environ if environ is None else environ
    rec = {"cpu": {"flags": cpu_flags()},
           "settings": {"onednn_max_cpu_isa": e.get("ONEDNN_MAX_CPU_ISA"),
                        "onednn": e.get("TF_ENABLE_ONEDNN_OPTS")}}  # fmt: skip
    return tf_onednn_on(rec) and level(rec) >= AVX512_CORE_BF16


def mixed_policy(environ: Mapping[str, str] | None = None) -> str:
    """The mixed policy TensorFlow runs fastest here: mixed_bfloat16 where bfloat16 is
    native (:func:`tf_bf16_native`), else mixed_float16 (measured on the AVX2-only kind,
    blog-cnn at batch 64 and 128 px, one step: float32 2.8 s, mixed_float16 6.3 s,
    mixed_bfloat16 14.3 s). For tests whose subject is not the bfloat16 arithmetic itself
    (a batch-size search, the engines) but that train real mixed-precision cells."""
    return "mixed_bfloat16" if tf_bf16_native(environ) else "mixed_float16"


def check_kernels(rec: dict[str, Any]) -> dict[str, Any]:
    """What a CPU cell's record says ran its convolutions and matmuls (TensorFlow, PyTorch),
    checked against what must have run on its CPU under its settings; the evidence."""
    backend, dtype = rec["params"]["backend"], rec["settings"]["compute_dtype"]
    d, top = rec["profile"]["onednn"], rec["profile"]["top_ops"]
    assert d is not None, rec["profile"]
    lvl = level(rec)
    if d["ran"] is False:  # another path: which, why, and (a profiled window) its operations
        assert d["path"] == {"tensorflow": "eigen", "torch": "aten"}[backend] and d["why"], d
        assert d["gemm_isas"] == {} and d["native16_share"] is None, d
        assert not [k for k in d["kernels"] if "mkl" in k.lower()], d  # _MklNative*, mkldnn_*
        assert d["kernels"] or not top, d  # the window's convolutions, by their own names
    else:
        assert d["ran"] is True and d["path"] == "onednn" and d["gemm_isas"], d
    # what follows from the CPU and the settings
    if backend == "tensorflow" and not tf_onednn_on(rec):
        assert d["ran"] is False, d
        said = "TF_ENABLE_ONEDNN_OPTS=" if rec["settings"]["onednn"] else "default"
        assert said in d["why"], d
    elif backend == "tensorflow" and lvl >= AVX512_CORE:
        assert d["ran"] is True, d
    if backend == "torch" and dtype == "bfloat16" and lvl < AVX512_CORE:
        assert d["ran"] is False and "no oneDNN bfloat16 path" in d["why"], d
    elif backend == "torch" and lvl >= AVX512_CORE:
        assert d["ran"] is True, d
    if not d["ran"]:
        return dict(d)
    isa = d["isa"] or ""  # oneDNN's own line: the cap applied
    assert isa, d
    assert ("AVX2" in isa) == (lvl == AVX2) and ("AMX" in isa) == (lvl == AVX512_CORE_AMX), d
    assert ("bfloat16" in isa) == (lvl >= AVX512_CORE_BF16), d
    assert not [k for k in d["gemm_isas"] if onednn.amx(k)] or lvl == AVX512_CORE_AMX, d
    if dtype == "bfloat16" and lvl >= AVX512_CORE_BF16:  # bf16 instructions: native kernels
        assert d["native16_share"] > 0.9, d
        native = sum(v for k, v in d["gemm_isas"].items() if onednn.native16(k))
        assert native >= 0.9 * d["sixteen_bit_share"], d  # native ISAs carry the 16-bit work
    else:  # none to run bf16 on: converted, or float32 work
        assert not d["native16_share"], d
    return dict(d)
