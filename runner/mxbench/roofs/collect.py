"""This machine's roofs, put together: the formula's, the datasheet's and each backend's
measured ones (run in fresh processes, kept in the cache), as one table."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxbench.bench.evidence import onednn
from mxbench.roofs import cache, clock, cpu, datasheet, gpu, host
from mxbench.roofs.model import Roof, judge

BACKENDS = ("torch", "jax", "tensorflow")
PROBE_TIMEOUT_S = 120
BENCH_PROBE_TIMEOUT_S = 60  # a bench's quick probe: seconds when it works


def available() -> list[str]:
    """The backends installed here (found, not imported)."""
    return [b for b in BACKENDS if importlib.util.find_spec(b) is not None]


def cpu_identity(facts: host.CpuFacts) -> dict[str, Any]:
    return {
        "model": facts.model,
        "flags": sorted(facts.flags),
        "cores": facts.cores,
        "arch": facts.arch,
    }


def cpu_formula(facts: host.CpuFacts, env: dict[str, str] | None = None) -> list[Roof]:
    """The CPU's formula roofs, at its measured clock where that can be measured, else the
    kernel's highest frequency, else /proc/cpuinfo's."""
    env = dict(os.environ) if env is None else env
    ghz = clock.measured_ghz()
    source = "measured: dependent register adds, one per cycle"
    if ghz is None and facts.max_mhz:
        ghz, source = facts.max_mhz / 1000, "cpufreq cpuinfo_max_freq"
    if ghz is None:
        ghz, source = (facts.mhz or 0.0) / 1000, "/proc/cpuinfo cpu MHz, maybe below boost"
    return cpu.formula_roofs(
        facts.name,
        facts.flags,
        facts.cores,
        ghz,
        source,
        facts.vendor,
        facts.family,
        facts.model_number,
        env.get("ONEDNN_MAX_CPU_ISA"),
    )


def run_probe(
    backend: str, quick: bool = False, timeout_s: float = PROBE_TIMEOUT_S
) -> dict[str, Any]:
    """``backend``'s ceilings, measured in a fresh process (the argv is fixed, no shell)."""
    here = str(Path(__file__).resolve().parents[2])  # the directory holding mxbench/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    if backend in ("torch", "tensorflow"):  # oneDNN names each kernel it creates
        env.setdefault("ONEDNN_VERBOSE", "profile_create")
    argv = [sys.executable, "-m", "mxbench.roofs.probe", backend, *(["--quick"] if quick else [])]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return {"backend": backend, "error": f"the probe ran past {timeout_s:.0f} s"}
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " ".join(done.stderr.strip().splitlines()[-1:])[:300]
        return {"backend": backend, "error": f"the probe failed (exit {done.returncode}): {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["kernels"] = kernels(done.stdout.splitlines())
    return result


ONEDNN_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "s8": "int8",
                 "u8": "int8"}  # fmt: skip


def kernels(lines: list[str]) -> dict[str, list[str]]:
    """dtype -> the oneDNN ISAs its matmuls were created for (``avx512_core_bf16``), from
    the probe's verbose log; {} when oneDNN logged no matmul (another library ran them)."""
    found: dict[str, set[str]] = {}
    for p in onednn.parse(lines):
        if p.kind in onednn.GEMM_KINDS and p.src_dtype:
            dtype = ONEDNN_DTYPES.get(p.src_dtype, p.src_dtype)
            found.setdefault(dtype, set()).add(p.isa)
    return {k: sorted(v) for k, v in found.items()}


def measured_roofs(m: dict[str, Any], device: str) -> list[Roof]:
    """A probe's result as roofs."""
    backend, version = m["backend"], m.get("version")
    if m.get("measured_at"):  # which measurement: a cached one keeps its time
        version = f"{version}, measured {m['measured_at']}"
    out = []
    for dtype, s in (m.get("matmul") or {}).items():
        if "error" in s:
            out.append(
                Roof(
                    device=device,
                    dtype=dtype,
                    value=None,
                    provenance="measured",
                    backend=backend,
                    source=f"{backend} {version}",
                    note=s["error"],
                )
            )
            continue
        sizes = ", ".join(s["per_size"])
        source = (
            f"{backend} {version}: square matmuls n = {sizes}, median after warm-up, "
            f"best at n = {s['best_n']} ({s['runs']} runs)"
        )
        out.append(
            Roof(
                device=device,
                dtype=dtype,
                value=s["tflops"],
                provenance="measured",
                backend=backend,
                source=source,
                detail=s["per_size"],
            )
        )
    bw = m.get("bandwidth")
    if bw:
        source = f"{backend} {version}: {bw.get('stream', 'stream')}, {bw['bytes'] / 2**20:.0f} MiB"
        out.append(
            Roof(
                device=device,
                dtype="float32",
                kind="bandwidth",
                value=bw["gbs"],
                provenance="measured",
                backend=backend,
                source=source,
            )
        )
    return out


def gpu_formula(m: dict[str, Any], device: str) -> list[Roof]:
    facts = m.get("gpu_facts") or {}
    if not facts.get("sms") or not facts.get("cc") or not facts.get("max_clock_mhz"):
        return []
    cc = (int(facts["cc"][0]), int(facts["cc"][1]))
    return gpu.formula_roofs(
        device, cc, int(facts["sms"]), float(facts["max_clock_mhz"]), "NVML max SM clock"
    )


@dataclass
class Roofs:
    """Everything known about this machine's roofs, and how long finding it took."""

    roofs: list[Roof] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    cached: dict[str, str] = field(default_factory=dict)  # backend -> cache file used
    # backend -> dtype -> the oneDNN ISAs its probe's matmuls ran on (CPU)
    kernels: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    seconds: float = 0.0
    cpu: str = ""  # this machine's CPU as a roof's device
    measured: list[str] = field(default_factory=list)  # the backends probed now, not cached

    def find(
        self,
        device: str,
        dtype: str,
        provenance: str,
        backend: str | None = None,
        kind: str = "matmul",
    ) -> Roof | None:
        return next(
            (
                r
                for r in self.roofs
                if r.device == device
                and r.dtype == dtype
                and r.provenance == provenance
                and r.kind == kind
                and (backend is None or r.backend == backend)
                and r.dense is not False
            ),
            None,
        )


def collect(
    backends: list[str] | None = None,
    quick: bool = False,
    refresh: bool = False,
    use_cache: bool = True,
) -> Roofs:
    """This machine's roofs: the CPU's formula, and per backend the measured ceilings (from
    the cache unless ``refresh``) with, for a GPU, its formula and datasheet roofs."""
    t0 = time.perf_counter()
    facts = host.read()
    out = Roofs(roofs=cpu_formula(facts), cpu=facts.name)
    for backend in backends if backends is not None else available():
        ident = cache.identity(backend, {**cpu_identity(facts), "quick": quick})
        m = None if refresh or not use_cache else cache.load(ident)
        if m is not None and "error" in m:  # a bench's failed probe: measured again here
            m = None
        if m is not None:
            out.cached[backend] = str(cache.path(ident))
        else:
            m = run_probe(backend, quick)
            if "error" in m:
                out.errors[backend] = m["error"]
                continue
            out.measured.append(backend)
            if use_cache:
                cache.save(ident, m)
        add(out, m)
    out.seconds = time.perf_counter() - t0
    return out


def add(out: Roofs, m: dict[str, Any]) -> None:
    """A backend's measurement (a probe's result) into ``out``: its measured roofs and, for
    a GPU not seen yet, the GPU's formula and datasheet roofs."""
    gpu = bool(m.get("gpu"))
    device = m.get("device_name") or out.cpu if gpu else out.cpu
    out.kernels[m["backend"]] = m.get("kernels") or {}
    out.roofs += measured_roofs(m, device)
    if gpu and not any(r.device == device and r.provenance == "formula" for r in out.roofs):
        out.roofs += gpu_formula(m, device) + datasheet.roofs(device)


def kept(backend: str, facts: host.CpuFacts) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``backend``'s measurement the cache keeps for this machine and stack, a full
    sweep's before a quick one's (None: none, or one that does not read; a failed probe's
    ``error`` is kept too), and the quick one's identity (the one to measure and keep)."""
    full = cache.identity(backend, {**cpu_identity(facts), "quick": False})
    quick = {**full, "cpu": {**full["cpu"], "quick": True}}
    for ident in (full, quick):
        m = cache.load(ident)
        if m is None:
            continue
        try:  # a file of the right identity whose figures do not read is not a measurement
            if "error" in m:
                return m, ident
            measured_roofs(m, "?")
            return m, ident
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return None, quick


def for_backend(
    backend: str, measure: bool = True, announce: Callable[[], None] | None = None
) -> Roofs:
    """The roofs a bench process's records carry: this machine's CPU formula and
    ``backend``'s measured ceilings: the cache's (a full sweep's, else a quick one's), else,
    when ``measure``, a quick probe run now in a fresh process (before the bench imports its
    framework: a GPU is the probe's alone) and kept for the next process. The processes of
    one host measure once: a second one waits on the first's lock, then reads its figures;
    a probe that failed is kept as failed too (the run's other processes do not pay for it
    again; ``mxbench roofs`` measures again). ``announce``: called before a measurement
    starts. Never raises: what failed is in ``errors``."""
    t0 = time.perf_counter()
    out = Roofs()
    try:
        facts = host.read()
        out = Roofs(roofs=cpu_formula(facts), cpu=facts.name)
        m, ident = kept(backend, facts)
        if m is None and measure:
            with cache.locked(ident):
                m, ident = kept(backend, facts)  # another process measured it meanwhile
                if m is None:
                    if announce is not None:
                        announce()
                    m = run_probe(backend, quick=True, timeout_s=BENCH_PROBE_TIMEOUT_S)
                    m.setdefault("measured_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                    out.measured.append(backend)
                    _keep(out, ident, m)
        if m is not None and "error" in m:
            again = f"mxbench roofs -b {backend} --quick --refresh measures again"
            out.errors[backend] = f"{m['error']} (probed {m.get('measured_at')}; {again})"
            m = None
        if m is not None:
            if backend not in out.measured:
                out.cached[backend] = str(cache.path(ident))
            add(out, m)
    except Exception as exc:  # the roofs are context: never the cell's failure
        out.errors[backend] = f"{type(exc).__name__}: {exc}"
    out.seconds = time.perf_counter() - t0
    return out


def _keep(out: Roofs, ident: dict[str, Any], m: dict[str, Any]) -> None:
    try:
        cache.save(ident, m)
    except OSError as exc:  # measured, not kept: the next process measures again
        out.errors["cache"] = f"not kept in {cache.directory()}: {exc}"


def rows(r: Roofs) -> list[dict[str, str]]:
    """One row per measured ceiling: against the formula (and the datasheet) of its dtype,
    flagged when above; then the formula roofs no backend measured."""
    table = []
    for m in [x for x in r.roofs if x.provenance == "measured"]:
        formula = r.find(m.device, m.dtype, "formula", kind=m.kind)
        sheet = r.find(m.device, m.dtype, "datasheet", kind=m.kind)
        fp32 = r.find(m.device, "float32", "formula", kind=m.kind)
        against = formula if formula and formula.value else None
        judged = judge(m.value, against) if m.value is not None and against else None
        note = m.note or (formula.note if formula and formula.value is None else "")
        if formula and formula.value is None and fp32 and fp32.value and m.value:
            note += f"; emulated: {m.value / fp32.value:.0%} of the float32 roof"
        if judged and judged.flag:
            note = judged.flag + (f"; {note}" if note else "")
        table.append(
            {
                "device": m.device,
                "backend": m.backend or "",
                "kind": m.kind,
                "dtype": m.dtype,
                "formula": formula.text() if formula else "",
                "datasheet": sheet.text() if sheet else "",
                "measured": m.text(),
                "share": f"{judged.share:.0%}" if judged else "",
                "native": {True: "yes", False: "no", None: "?"}[
                    formula.native if formula else None
                ],
                "note": note.strip("; "),
            }
        )
    return table


def ratios(r: Roofs) -> dict[tuple[str, str], float]:
    """(device, backend) -> the measured bfloat16 / float32 ceiling ratio."""
    out = {}
    for m in r.roofs:
        if m.provenance != "measured" or m.kind != "matmul" or m.dtype != "bfloat16":
            continue
        base = r.find(m.device, "float32", "measured", m.backend)
        if m.value and base and base.value:
            out[(m.device, m.backend or "")] = m.value / base.value
    return out


def text(r: Roofs) -> str:
    """The roofs as a plain table, with the formula roofs no backend measured and where
    each figure came from."""
    from tabulate import tabulate

    table = rows(r)
    cols = ("device", "backend", "kind", "dtype", "formula", "datasheet", "measured", "share",
            "native", "note")  # fmt: skip
    body = [[row[c] for c in cols] for row in table]
    lines = [tabulate(body, headers=["device", "backend", "roof", "dtype", "formula",
                                     "datasheet", "measured", "of formula", "native hw",
                                     "note"])]  # fmt: skip
    measured = {(x.device, x.dtype, x.kind) for x in r.roofs if x.provenance == "measured"}
    rest = [x for x in r.roofs if x.provenance != "measured"
            and (x.device, x.dtype, x.kind) not in measured]  # fmt: skip
    if rest:
        lines.append("\nNot measured here:")
        lines += [f"  {x.device} {x.dtype} {x.kind}: {x.text()} ({x.provenance}"
                  f"{'' if x.dense is not False else ', sparse'}){': ' + x.note if x.note else ''}"
                  for x in rest]  # fmt: skip
    lines.append("\nSources:")
    seen: set[str] = set()
    for x in r.roofs:
        line = f"  {x.provenance} {x.backend or ''} {x.dtype} {x.kind}: {x.source}"
        if x.source not in seen or x.provenance == "measured":
            seen.add(x.source)
            lines.append(" ".join(line.split()))
    for (device, backend), ratio in ratios(r).items():
        lines.append(f"bfloat16 / float32 measured ceiling ratio, {backend} on {device}: "
                     f"{ratio:.2f}x")  # fmt: skip
    for backend, why in r.errors.items():
        lines.append(f"{backend}: not measured: {why}")
    for backend, where in r.cached.items():
        lines.append(f"{backend}: from the cache ({where}; --refresh measures again)")
    lines.append(f"Found in {r.seconds:.1f} s.")
    return "\n".join(lines)
