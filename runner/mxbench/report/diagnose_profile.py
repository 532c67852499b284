"""The diagnosis rules that read the profiled window (``record.profile``): which kernels ran
the convolutions and matmuls, Tensor Core use, casts, memory-bound and launch-bound steps.
:mod:`mxbench.report.diagnosis.rules` orders them among the others.
"""

from __future__ import annotations

from typing import TypeGuard

from mxbench.bench.evidence import onednn
from mxbench.records.record import OneDnnEvidence, Profile
from mxbench.report import devices
from mxbench.report.annotate import gpu_cc
from mxbench.report.sections import why
from mxbench.report.sections.why import profile_of
from mxbench.report.tables import Table

FLOAT16 = frozenset({"mixed_float16", "float16"})
BFLOAT16 = frozenset({"mixed_bfloat16", "bfloat16"})
# Measured (the profiled window): shares of a step that the diagnosis calls out.
MEASURED_MEMORY_BOUND = 0.40  # elementwise + normalization
CAST_SHARE = 0.05  # casts under a 16-bit policy
HOST_GAP_SHARE = 0.30  # nothing ran: launches, Python, waits
NO_TENSOR_CORES = 0.05  # Tensor Core share of conv/matmul time below this: none
MOST_TENSOR_CORES = 0.5  # ... at least this in every profiled slot: they ran "most" of it
# What AMX is, in the sentences that name it (the bench measured mixed_bfloat16 2.26x float32
# on AMX, blog-cnn at 128 px, batch 16)
AMX = (
    "tile matrix units: each instruction multiplies whole blocks of 16-bit numbers, the "
    "reason bf16 can be 2x or more faster than float32"
)
NATIVE_16 = 0.5  # share of 16-bit conv/matmul work on native kernels to call it native
# share of conv/matmul work on oneDNN's reference loops (plain C++, no vector kernel) that the
# kernels' sentence leads with: on this repository's Xeon PyTorch's float16 weight gradients
# ran there, 2182 ms for a convolution whose forward took 2 ms (docs/why.md)
REFERENCE_SHARE = 0.25
# oneDNN's passes (its verbose log's propagation kind), as the sentences name them
PASSES = {
    "forward_training": "the forward pass",
    "forward_inference": "the forward pass",
    "forward": "the forward pass",
    "backward_data": "the data gradients",
    "backward_weights": "the weight gradients",
    "backward": "the gradients",
}


def kernels_said(d: OneDnnEvidence | None) -> TypeGuard[OneDnnEvidence]:
    """Whether a record says what ran its convolutions/matmuls: oneDNN's kernels (its log
    named them), or another path (oneDNN ran none); not where oneDNN's log was off."""
    return d is not None and (d.ran is False or bool(d.gemm_isas))


def on_reference(d: OneDnnEvidence) -> float:
    """The share of the convolution/matmul work that ran on oneDNN's reference loops."""
    return d.gemm_isas.get("ref", 0.0)


def _passes(shares: dict[str, float]) -> str:
    """``: the weight gradients 97%, the forward pass 1%`` (nothing when not recorded)."""
    said: dict[str, float] = {}
    for name, share in shares.items():
        what = PASSES.get(name, name)
        said[what] = said.get(what, 0.0) + share
    return ": " + ", ".join(f"{k} {v:.0%}" for k, v in said.items()) if said else ""


def is_gpu(t: Table) -> bool:
    """Whether the table's device is a GPU."""
    return t.device.kind == "gpu"


def is_cpu(t: Table) -> bool:
    """Whether the table's device is a CPU."""
    return t.device.kind == "cpu"


# ---- Evidence: the profiled window (record.profile) -------------------------------------


def profiles(t: Table, policies: frozenset[str] | None = None) -> list[tuple[str, int, Profile]]:
    """(policy, batch, profile) of every slot with a usable profiled window."""
    if "profile" not in t.carries:
        return []
    out = []
    for (policy, b), e in t.by_batch:
        if policies is not None and policy not in policies:
            continue
        p = profile_of(e.records)
        if p is not None:
            out.append((policy, b, p))
    return out


def _shares(
    t: Table, category: str, policies: frozenset[str] | None = None
) -> list[tuple[str, int, float]]:
    """(policy, batch, share of the timed step) of ``category`` in every profiled slot: the
    breakdown's milliseconds of the timed step (:func:`mxbench.report.sections.why.split`), so that
    the profiler's own cost is no share of anything."""
    return [
        (b.policy, b.batch, b.share(category))
        for b in why.bars(t)
        if policies is None or b.policy in policies
    ]


# What ran a CPU's convolutions and matmuls where oneDNN did not (OneDnnEvidence.path)
PATHS = {
    "eigen": "TensorFlow's own (Eigen) kernels",
    "aten": "PyTorch's own (ATen) kernels",
}


def path_name(path: str | None) -> str:
    """A path that ran the convolutions and matmuls, as the sentences name it."""
    return PATHS.get(path or "", f"{path} kernels" if path else "other kernels")


def cpu_kernels(t: Table) -> str | None:
    """Which kernels ran the 16-bit convolutions/matmuls: oneDNN's (its verbose log), or,
    where oneDNN ran none of them, the path that did and why."""
    if not is_cpu(t):
        return None
    parts, created, without = [], False, []
    for policy, b, p in profiles(t, FLOAT16 | BFLOAT16):
        d = p.onednn
        if d is not None and d.ran is False:
            ran = f" ({', '.join(d.kernels[:3])})" if d.kernels else ""
            without.append(
                f"{policy} at batch {b}: {path_name(d.path)} ran the convolutions/matmuls"
                f"{ran}, not oneDNN: {d.why or 'the record does not say why'}"
            )
            continue
        if d is None or not d.gemm_isas:
            continue
        what = "bf16" if policy in BFLOAT16 else "float16"
        of = "time" if d.weight == "time" else "arithmetic"
        created = created or d.weight == "flops"
        isas = ", ".join(f"{isa} {share:.0%}" for isa, share in list(d.gemm_isas.items())[:3])
        if (ref := on_reference(d)) >= REFERENCE_SHARE:
            parts.append(
                f"{policy} at batch {b}: {ref:.0%} of the convolutions/matmuls' {of} ran on "
                f"oneDNN's reference loops (ref: plain C++, no vector kernel for them on this "
                f"CPU{_passes(d.ref_passes)}), many times slower than any vector kernel"
            )
        elif d.native16_share is None:
            parts.append(
                f"{policy} at batch {b}: the convolutions/matmuls ran in float32 ({isas} of "
                f"their {of}): no {what} kernel"
            )
        elif d.native16_share >= NATIVE_16:
            dtype = "bf16" if policy in BFLOAT16 else "f16"
            isa = next(
                (i for i in d.gemm_isas if onednn.native16(i, dtype)), next(iter(d.gemm_isas))
            )
            tiles = f"AMX {AMX}; " if onednn.amx(isa) else ""
            parts.append(
                f"{policy} at batch {b}: {what} convolutions/matmuls ran on {isa} kernels "
                f"({tiles}{d.native16_share:.0%} of their {of} in 16 bits natively)"
            )
        else:
            parts.append(
                f"{policy} at batch {b}: the {what} convolutions/matmuls were converted to "
                f"float32: no native {what} kernel for {1 - d.native16_share:.0%} of their "
                f"{of} ({isas})"
            )
    said = []
    if parts:
        how = ": kernels logged at creation, weighed by their arithmetic" if created else ""
        said.append(f"Kernels that ran (oneDNN's verbose log{how}): " + "; ".join(parts) + ".")
    if without:
        said.append("Kernels that ran without oneDNN: " + "; ".join(without) + ".")
    if not said:
        if t.info.params.backend == "jax" and profiles(t, BFLOAT16):
            return (
                "Kernels (JAX on a CPU): XLA compiles its own kernels (Eigen, XNNPACK), which "
                "oneDNN's log does not see; whether bf16 ran natively cannot be read from it. "
                "The breakdown below still shows the convolutions' and casts' share."
            )
        return None
    return " ".join(said)


def tensor_core_policies(t: Table) -> frozenset[str]:
    """The table's 16-bit policies whose type this GPU has Tensor Cores for: none below
    compute capability 7.0 or on a Turing GPU built without them (GTX 16xx), float16 only
    below 8.0 (no bfloat16 Tensor Cores)."""
    cap, _ = gpu_cc(t)
    if not is_gpu(t) or cap is None or devices.without_tensor_cores(t.device.name):
        return frozenset()
    fast = (FLOAT16 if cap.fp16_tensor_cores else frozenset()) | (
        BFLOAT16 if cap.bf16_tensor_cores else frozenset()
    )
    return fast & frozenset(t.policies)


def tensor_core_kernels(t: Table) -> str | None:
    """From kernel names: did the 16-bit convolutions/matmuls run on Tensor Cores (judged
    only for the policies whose type this GPU has Tensor Cores for: bfloat16 on a Volta
    takes no Tensor Core kernel by design, which no_bf16_tensor_cores says)?"""
    cap, _ = gpu_cc(t)
    fast = tensor_core_policies(t)
    if cap is None or not fast:
        return None
    found = [
        (pol, b, p.tensor_core_share)
        for pol, b, p in profiles(t, fast)
        if p.tensor_core_share is not None
    ]
    if not found:
        return None
    none = [f"{pol} at batch {b}" for pol, b, s in found if s < NO_TENSOR_CORES]
    if none:
        return (
            f"No Tensor Core kernels ran ({', '.join(none)}) despite compute capability "
            f"{cap.label} >= 7.0 (judged from kernel names, a heuristic): the convolutions "
            "and matmuls took kernels without Tensor Cores; check dimensions that are not "
            "multiples of 8, the layout and the library versions."
        )
    shown = "; ".join(f"{pol} at batch {b}: {s:.0%}" for pol, b, s in found)
    most = "most" if all(s >= MOST_TENSOR_CORES for _, _, s in found) else "part"
    return (
        f"Tensor Core kernels ran {most} of the convolution/matmul time ({shown}; judged "
        "from kernel names, a heuristic)."
    )


def cast_overhead(t: Table) -> str | None:
    big = [x for x in _shares(t, "cast", FLOAT16 | BFLOAT16) if x[2] >= CAST_SHARE]
    if not big:
        return None
    shown = "; ".join(f"{pol} {s:.0%} at batch {b}" for pol, b, s in big)
    return (
        f"Cast overhead (measured): dtype conversions take {shown} of the step. Mixed "
        "precision converts float32 variables to 16 bits at every use, and the float32 "
        "output back: a cost the faster arithmetic must first repay."
    )


def measured_memory_bound(t: Table) -> str | None:
    big = [x for x in _shares(t, "elementwise_norm") if x[2] >= MEASURED_MEMORY_BOUND]
    if not big or not (FLOAT16 | BFLOAT16) & set(t.policies):
        return None
    shown = "; ".join(f"{pol} {s:.0%} at batch {b}" for pol, b, s in big[:6])
    return (
        f"Memory-bound (measured): elementwise, normalization and reduction operations take "
        f"{shown} of the step. That work gains at most the bandwidth ratio from 16-bit types "
        "(2x fewer bytes), never the arithmetic speedup of Tensor Cores / AMX."
    )


def launch_bound(t: Table) -> str | None:
    # the gap is the timed step less the profiled operations: busy time clearly short of
    # the timed step, never the profiler's own cost (it lands in no category)
    big = [x for x in _shares(t, "host_gap") if x[2] >= HOST_GAP_SHARE]
    if not big:
        return None
    shown = "; ".join(f"{pol} {s:.0%} at batch {b}" for pol, b, s in big[:6])
    where = "kernel launches" if is_gpu(t) else "dispatching operations"
    return (
        f"Launch/overhead-bound (measured): nothing ran for {shown} of the step (Python, "
        f"{where}, synchronisation). No precision change speeds that up; larger batches, "
        "jit_compile or fewer, larger operations do."
    )
