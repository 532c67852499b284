"""The lines under a table's title: what the device is and can do, and how TF was built.

GPU: "CC 7.0 (Volta) · fp16 Tensor Cores: yes · bf16 Tensor Cores: no · TF … · CUDA … · cuDNN …".
CPU: model, AVX2 / FMA / AVX512_BF16 / AMX, and whether the TF binary was compiled for
AVX2/FMA ("compiled in" only when TF's own probe said so, never guessed).
"""

from __future__ import annotations

from mxbench.cells import repeats
from mxbench.matrix import params
from mxbench.records.record import Record
from mxbench.report import devices
from mxbench.report.tables import Table, bounded


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def gpu_cc(table: Table) -> tuple[devices.Capability | None, bool]:
    """The GPU's capability and whether it was inferred from the name (not recorded)."""
    return table.capability


def software_line(rec: Record) -> str:
    sw = rec.software
    parts = [
        f"{label} {bounded(value)}"
        for label, value in (
            ("TF", sw.tensorflow),
            ("JAX", sw.jax),
            ("PyTorch", sw.torch),
            ("Keras", sw.keras),
            ("CUDA", devices.cuda_text(sw.cuda)),
            ("cuDNN", devices.cudnn_text(sw.cudnn)),
        )
        if value
    ]
    if sw.backend and sw.backend != "tensorflow":
        parts.append(f"backend {bounded(sw.backend)}")
    return " · ".join(parts)


def compiled_for_avx2_fma(rec: Record) -> bool | None:
    """True/False from TF's cpu_feature_guard probe; None when the record does not say."""
    missing = rec.cpu.tf_not_compiled_for
    if missing is None:
        return None
    return not ({"AVX2", "FMA"} & {m.upper() for m in missing})


def gpu_line(table: Table) -> str:
    cap, inferred = gpu_cc(table)
    if cap is None:
        return "CC unknown · Tensor Cores: unknown"
    cc = f"CC {cap.label} ({cap.arch}{', from the name' if inferred else ''})"
    if devices.without_tensor_cores(table.device.name):  # a GTX 16xx: Turing without them
        return f"{cc} · Tensor Cores: none (built without)"
    return " · ".join(
        (
            cc,
            f"fp16 Tensor Cores: {_yes(cap.fp16_tensor_cores)}",
            f"bf16 Tensor Cores: {_yes(cap.bf16_tensor_cores)}",
        )
    )


def cpu_line(rec: Record) -> str:
    cpu = rec.cpu
    parts = [f"CPU {bounded(cpu.model or rec.device.name or 'model unknown')}"]
    if cpu.cores:
        parts[0] += f" ({cpu.cores} cores)"
    if cpu.flags:
        have = {f.lower() for f in cpu.flags}
        parts += [f"{name}: {_yes(flag in have)}" for flag, name in devices.CPU_FEATURES]
    else:
        parts.append("instruction set not recorded")
    compiled = compiled_for_avx2_fma(rec)
    if compiled is True:
        parts.append("TF binary: AVX2/FMA compiled in")
    elif compiled is False:
        parts.append("TF binary: not compiled for AVX2/FMA")
    elif rec.software.tensorflow or not rec.software.backend:
        parts.append("TF binary: AVX2/FMA build unknown")
    return " · ".join(parts)


TOKEN_PARAMS = ("seq_len", "vocab_size")
IMAGE_PARAMS = ("image_size", "image_width")


def _takes_tokens(rec: Record) -> bool:
    return any(" int" in i or " uint" in i for i in rec.model.inputs) if rec.model else False


# Setup parameters a table names only away from their defaults (Keras' own loss scaling; a
# training cell's mode, call and quantization; one device in one process, its scaling, and
# the all-reduce in the gradients' own dtype)
_SAID_WHEN_CHOSEN = (
    "loss_scale",
    "mode",
    "call",
    "quantize",
    "weights",
    "devices",
    "nodes",
    "scaling",
    "allreduce",
)
_DEFAULTS = {name: params.field(name).default for name in _SAID_WHEN_CHOSEN}


def _not_for_this_model(rec: Record) -> tuple[str, ...]:
    """Parameters that do not shape this model's input (token settings of an image model)."""
    if rec.model is None or not rec.model.inputs:
        return TOKEN_PARAMS
    takes_images = any(" float" in i for i in rec.model.inputs)
    return (() if _takes_tokens(rec) else TOKEN_PARAMS) + (() if takes_images else IMAGE_PARAMS)


def model_line(rec: Record) -> str | None:
    """``model: resnet50 (zoo) · 25.6 M parameters · 0.48 GFLOP/example (analytic) · ...``:
    what the bench recorded about the model."""
    m = rec.model
    if m is None or m.parameters is None:
        return None
    origin = f" ({bounded(f'{m.source}, source {m.source_sha256}')})" if m.source_sha256 else ""
    parts = [f"model: {bounded(m.name or '')}{origin}"]
    parts.append(f"{m.parameters / 1e6:.3g} M parameters")
    if m.flops_per_example:
        flops = f"{m.flops_per_example / 1e9:.3g} GFLOP/example"
        parts.append(f"{flops} to train ({bounded(str(m.flops_source))})")
    if m.inputs:
        parts.append("input " + bounded(", ".join(m.inputs)))
    if m.off_multiple_of_8_count:
        parts.append(f"{m.off_multiple_of_8_count} GEMM dimension(s) off a multiple of 8")
    if m.memory_bound_share is not None:
        parts.append(f"memory-bound layers write {m.memory_bound_share:.0%} of activations")
    return " · ".join(parts)


def lines(table: Table) -> list[str]:
    rec = table.info
    kind = table.device.kind
    out = []
    if kind == "gpu":
        out.append(gpu_line(table))
    elif kind == "cpu":
        out.append(cpu_line(rec))
    else:
        out.append("device not recorded")
    sw = software_line(rec)
    if sw:
        out.append(sw)
    hidden = _not_for_this_model(rec)
    several = (table.setup.get("devices") or 1) * (table.setup.get("nodes") or 1) > 1
    hidden += tuple(  # said only when a matrix chose another than the default
        name
        for name, default in _DEFAULTS.items()
        if table.setup.get(name) == default and not (name == "scaling" and several)
    )
    setup = " · ".join(
        f"{k} {bounded(str(v))}"
        for k, v in table.setup.items()
        if v not in (None, "") and k not in hidden
    )
    if setup:
        out.append(f"setup: {setup}")
    facts = model_line(rec)
    if facts:
        out.append(facts)
    labels = table.labels
    if len(labels) == 1:
        out.append(f"label: {next(iter(labels))}")
    elif labels:
        runs = ", ".join(f"{name} ({n} cell{'s' if n != 1 else ''})" for name, n in labels.items())
        out.append(
            f"labels: {runs}; each cell shows its latest run, marked (run …) where "
            f"not {next(iter(labels))} (--label picks one run)"
        )
    if rec.source:
        out.append(f"source: {bounded(rec.source)}")
    out += auto_stops(table)
    return out


def auto_stops(table: Table) -> list[str]:
    """Where each comparison of a ``repeats: auto`` run stopped and why, per batch size."""
    if "auto_repeats" not in table.carries:
        return []  # no record was measured under repeats: auto
    by_batch: dict[int, dict[str, list[Record]]] = {}
    for (policy, batch), e in table.entries.items():
        by_batch.setdefault(batch, {})[policy] = e.records
    out = []
    for batch, by_policy in sorted(by_batch.items()):
        decision = repeats.stopped(by_policy)
        if decision is not None:
            out.append(f"repeats: auto: bs={batch}: {decision.text()}")
    return out
