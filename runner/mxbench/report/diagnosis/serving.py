"""Why a serving precision is (not) faster: the diagnosis of inference groups.

Each rule reads one serving group (its precisions, :class:`mxbench.report.rung.Rung`)
and, for the dispatch rule, the other groups of the run; it returns a sentence or None. What
the device can do comes from the records (compute capability, CPU flags), what ran from the
records too, never from a guess:

- float16 without fast float16: a GPU below compute capability 7.0, or a Turing GTX 16xx
  (compute capability 7.5 without Tensor Cores: the GTX 1660 Ti of tensorflow#44191, whose
  inference became ~4x slower under mixed_float16);
- float16 on an x86 CPU: emulated (converted to float32 around every operation) where the
  CPU has no float16 arithmetic; where oneDNN's kernels ran native float16 (AVX512-FP16,
  AMX-FP16) and it is still slower, the time is not the arithmetic's, and it says so;
- int8 without VNNI or AMX: the CPU has no 8-bit dot-product instructions, so quantized
  layers convert back and forth around float32 arithmetic;
- the call is dispatch-bound: a batch at least 16x larger costs clearly at most 1.5x as much
  per call (the whole interval of the ratio of the p50s), so the time is the per-call
  overhead of the call path the records name (direct: eager, operation by operation;
  compiled: around one compiled function; predict / predict_on_batch: Keras' loop), which
  no precision shrinks.

What a rule says of speed comes from an interval: "slower" only where the speedup's whole
interval lies under 1 (:attr:`mxbench.stats.Ratio.verdict`), and the measured figure it
quotes carries that interval and verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mxbench import stats
from mxbench.matrix.params import Params
from mxbench.records.record import Record
from mxbench.report import devices
from mxbench.report.rung import Rung

FLOAT16 = frozenset({"mixed_float16", "float16"})
# /proc/cpuinfo flags of 8-bit integer dot products: AVX512_VNNI, AVX-VNNI, AMX's int8 tiles
INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
# /proc/cpuinfo flags of float16 arithmetic: AVX512-FP16, AMX's float16 tiles
FP16_FLAGS = frozenset({"avx512_fp16", "amx_fp16"})
# a batch this many times larger that costs at most this much more per call: per-call overhead
DISPATCH_BATCH_RATIO = 16
DISPATCH_TIME_RATIO = 1.5


def _first(rungs: Sequence[Rung]) -> Record | None:
    return next((r for rung in rungs for r in rung.ok), None)


def _names(rungs: Sequence[Rung]) -> set[str]:
    return {rung.policy for rung in rungs if rung.ok}


# how a measured speed reads after its figure, by verdict
MEASURED = {
    stats.FASTER: "faster",
    stats.SLOWER: "slower",
    stats.SAME: stats.SHORT[stats.SAME],
    stats.TOO_FEW: "one process a side: no verdict",
}


def measured(name: str, r: stats.Ratio) -> str:
    """``mixed_float16 0.64x [0.60–0.68] the speed of float32, slower`` (no interval and no
    verdict with one process a side)."""
    span = f" [{r.low:.2f}–{r.high:.2f}]" if r.judged else ""
    return f"{name} {r.value:.2f}x{span} the speed of float32, {MEASURED[r.verdict]}"


def _speed(rungs: Sequence[Rung], policies: frozenset[str]) -> str:
    seen = [measured(rung.name, rung.ratio) for rung in rungs
            if rung.policy in policies and rung.ratio is not None]  # fmt: skip
    return f" (measured: {'; '.join(seen)})" if seen else ""


def float16_without_fast_float16(rungs: Sequence[Rung], _: Peers) -> str | None:
    r = _first(rungs)
    if r is None or not FLOAT16 & _names(rungs) or r.device.kind != "gpu":
        return None
    device = r.device
    cap = devices.capability(device.compute_capability or devices.cc_from_name(device.name))
    if devices.without_tensor_cores(device.name):
        why = f"{device.name} is a Turing GPU built without Tensor Cores"
    elif cap is not None and not cap.fp16_tensor_cores:
        why = f"compute capability {cap.label} < 7.0 has no float16 Tensor Cores"
    else:
        return None
    return (
        f"No fast float16 for serving: {why}, so mixed_float16 computes at float32's rate "
        f"plus the casts around every layer{_speed(rungs, FLOAT16)}; serve in float32 here "
        "(a model trained under mixed_float16 loads into a float32 build)."
    )


def float16_on_cpu(rungs: Sequence[Rung], _: Peers) -> str | None:
    r = _first(rungs)
    if r is None or not FLOAT16 & _names(rungs) or r.device.kind != "cpu":
        return None
    cpu = r.cpu
    if devices.is_x86(cpu.model, cpu.flags, cpu.arch) is not True:
        return None
    speed = _speed(rungs, FLOAT16)
    ran = _native16(rungs)
    if ran is not None and not _slower(rungs, FLOAT16):
        return None  # native float16 and no slower: the kernels column says what ran
    if ran is not None:  # the records say the arithmetic was float16's own
        isa, share = ran
        return (
            f"mixed_float16 ran native float16 kernels on this CPU (oneDNN {isa}, {share:.0%} "
            f"of its convolutions and matmuls in 16 bits){speed}: not emulated, so what is "
            "not float16 arithmetic makes it slower (the casts around each layer, whose "
            "inputs, outputs and variables stay float32, and the call's other work)."
        )
    has = FP16_FLAGS & {f.lower() for f in cpu.flags or ()}
    if has:  # float16 instructions, but no record says they ran
        return (
            f"this CPU has float16 arithmetic ({', '.join(sorted(has))}), but no record says "
            f"mixed_float16's kernels used it{speed}: without it float16 is converted to "
            "float32 around the arithmetic (profile: on records oneDNN's kernels)."
        )
    return (
        "float16 on an x86 CPU without float16 arithmetic (no AVX512_FP16, no AMX-FP16) is "
        f"converted to float32 around the arithmetic, so mixed_float16 serving is expected "
        f"to be slower than float32{speed}."
    )


def _slower(rungs: Sequence[Rung], policies: frozenset[str]) -> bool:
    """Whether a rung of ``policies`` was measured slower than float32: its speedup's whole
    interval under 1, over two or more processes a side (:attr:`mxbench.stats.Ratio.verdict`)."""
    return any(
        rung.ratio is not None and rung.ratio.verdict == stats.SLOWER
        for rung in rungs
        if rung.policy in policies
    )


def _native16(rungs: Sequence[Rung]) -> tuple[str, float] | None:
    """The oneDNN ISA and native 16-bit share of a float16 rung's kernels, where its
    records say most of them were native 16-bit (None: not recorded, or not native)."""
    for rung in rungs:
        if rung.policy not in FLOAT16:
            continue
        for rec in rung.ok:
            found = rec.profile.onednn if rec.profile is not None else None
            share = found.native16_share if found is not None else None
            if found is not None and share is not None and share >= 0.5 and found.gemm_isas:
                return next(iter(found.gemm_isas)), share
    return None


def int8_without_vnni(rungs: Sequence[Rung], _: Peers) -> str | None:
    quantized = [rung for rung in rungs if rung.quantize == "int8" and rung.ok]
    r = _first(quantized)
    if r is None or r.device.kind != "cpu":
        return None
    flags = r.cpu.flags
    if not flags or INT8_FLAGS & {f.lower() for f in flags}:
        return None
    return (
        "int8 without VNNI or AMX: this CPU has no 8-bit dot-product instructions "
        "(avx512_vnni, avx_vnni, amx_int8), so the quantized layers convert to wider types "
        "around their arithmetic; expect little or no gain from quantize: int8 here."
    )


# A serving setup as the dispatch rule compares its groups: one host, model, backend, call
# path, input and device; its groups differ in batch size.
SetupKey = tuple[str, str, str | None, str, int | None, str | None]
Peers = dict[SetupKey, list[Rung]]  # a setup's float32 rungs (with processes), by group


def _baseline(rungs: Sequence[Rung]) -> Rung | None:
    """A group's float32 rung, where it has ok calls to judge."""
    base = next((rung for rung in rungs if rung.baseline and rung.ok), None)
    return base if base is not None and base.processes else None


def _setup(rung: Rung) -> SetupKey:
    r = rung.ok[0]
    p = r.params
    return (str(r.host), p.model, p.backend, p.call, p.image_size, r.device.name)


def peers(every: Sequence[Sequence[Rung]]) -> Peers:
    """The float32 rungs of all the run's groups by setup, found once (each group's rules
    look up its own setup's: a fleet of 7,700 groups compared each with all was quadratic,
    141 s for 20,000 serving records)."""
    out: Peers = {}
    for rungs in every:
        base = _baseline(rungs)
        if base is not None:
            out.setdefault(_setup(base), []).append(base)
    return out


def dispatch_bound(rungs: Sequence[Rung], found: Peers) -> str | None:
    """A group at batch B whose float32 calls take clearly at most
    :data:`DISPATCH_TIME_RATIO` times as long as the same setup's (:func:`peers`: one host,
    model, backend, call path, input and device) at a batch at least
    :data:`DISPATCH_BATCH_RATIO` times smaller (the whole interval of the ratio of their
    p50s): the per-call overhead of the call path is the time."""
    mine = _baseline(rungs)
    if mine is None:
        return None
    p = mine.ok[0].params
    for small in found.get(_setup(mine), ()):
        if small is mine:
            continue
        q = small.ok[0].params
        if p.batch_size < DISPATCH_BATCH_RATIO * q.batch_size:
            continue
        (ratio,) = stats.judge([(mine.processes, small.processes)])  # the big call's time / 1's
        if ratio is None or ratio.high > DISPATCH_TIME_RATIO:
            continue
        big, one = _p50(mine), _p50(small)
        basis = "" if ratio.judged else "; one process a batch: an interval over its calls"
        path, advice = call_path(p, mine.ok[0].settings.jit_compile)
        return (
            f"Dispatch-bound calls: a float32 call at batch {p.batch_size} takes "
            f"{big:.2f} ms, at batch {q.batch_size} {one:.2f} ms ({p.batch_size // q.batch_size}x "
            f"the work for {ratio.value:.2f}x [{ratio.low:.2f}–{ratio.high:.2f}] the time, at "
            f"most {DISPATCH_TIME_RATIO}x{basis}): {path} is the time, and no precision "
            f"shrinks it; {advice}."
        )
    return None


def _p50(rung: Rung) -> float:
    """The p50 the table prints: the geometric mean of the processes' p50s."""
    return math.exp(sum(math.log(x) for x, _ in rung.processes) / len(rung.processes))


COMPILERS = {"tensorflow": "tf.function", "jax": "jax.jit", "torch": "torch.compile"}


def call_path(p: Params, jit_compile: bool | None) -> tuple[str, str]:
    """(what a call's per-call overhead is on its call path, what would take it out)."""
    if p.call == "compiled":
        compiler = COMPILERS.get(p.backend, "the backend's compiler")
        xla = " with XLA" if jit_compile and p.backend == "tensorflow" else ""
        return (
            f"the cost around one call of a function already compiled (call compiled: "
            f"{compiler}{xla}; launching it and bringing its output to the host)",
            "larger batches spread it over more images, and a precision can show only where "
            "the arithmetic outgrows it",
        )
    if p.call in ("predict", "predict_on_batch"):
        extra = " (a data adapter and callbacks each call)" if p.call == "predict" else ""
        return (
            f"Keras' own loop around its predict function (call {p.call}{extra})",
            "a compiled call (call: compiled) times the forward pass without Keras' loop",
        )
    return (
        f"the framework's per-call overhead (call {p.call}: eager, operation by operation)",
        "a compiled call (call: compiled) takes the operation-by-operation dispatch out",
    )


RULES: tuple[Callable[[Sequence[Rung], Peers], str | None], ...] = (
    float16_without_fast_float16,
    float16_on_cpu,
    int8_without_vnni,
    dispatch_bound,
)


def diagnose(rungs: Sequence[Rung], found: Peers) -> list[str]:
    """The diagnosis of one serving group (``found``: the run's groups by setup, :func:`peers`)."""
    return [said for rule in RULES if (said := rule(rungs, found)) is not None]
