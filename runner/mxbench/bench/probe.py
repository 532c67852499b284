"""The environment, as far as it can be known without a deep-learning framework.

CPU model, cores and ISA flags (``/proc/cpuinfo``), the GPUs NVML sees (``nvidia-ml-py``),
the environment variables that change the numbers, peak RSS, and how the GPU picture
combines with what the framework actually used (:func:`device_record`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import sys
from pathlib import Path
from typing import Any

NUMBER_SETTINGS = (
    "TF_ENABLE_ONEDNN_OPTS",
    "ONEDNN_MAX_CPU_ISA",
    "XLA_FLAGS",
    "NVIDIA_TF32_OVERRIDE",
)

# The CPU flags that decide how fast float32, float16 and bfloat16 math can run (x86 and Arm
# names, as /proc/cpuinfo spells them), and every instruction TensorFlow's cpu_feature_guard
# names. A record keeps only these: the whole flags line is about 1.2 KB, 40 % of a record,
# and nothing reads the rest (a 100,000-record report spends its time parsing it).
ISA_FLAGS = frozenset(
    {
        # x86: SIMD and FMA
        "sse2",
        "ssse3",
        "sse4_1",
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        # x86: AVX-512, VNNI, native half precision and bfloat16
        "avx512f",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "avx_vnni_int8",
        "avx_ne_convert",
        # x86: AMX tile matrix units
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
        # Arm: NEON, half precision, dot product, bfloat16, int8 matmul, SVE, SME
        "asimd",
        "asimdhp",
        "asimddp",
        "fphp",
        "bf16",
        "i8mm",
        "sve",
        "sve2",
        "sme",
    }
)


def cpu_info(cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
    model: str | None = None
    flags: list[str] = []
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = sorted(ISA_FLAGS.intersection(value.split()))
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 0
    return {
        "model": model or platform.processor() or None,
        "arch": platform.machine() or None,
        "cores": cores,
        "logical_cpus": os.cpu_count(),
        "flags": flags,
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_gpus(nvml: Any = None) -> tuple[list[dict[str, Any]], str | None]:
    """GPUs NVML reports, and the driver version; ``([], None)`` without NVML or a driver."""
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            return [], None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception:
        return [], None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append(
                {
                    "index": i,
                    "name": _text(nvml.nvmlDeviceGetName(h)),
                    "compute_capability": f"{major}.{minor}",
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                    "uuid": _text(nvml.nvmlDeviceGetUUID(h)),
                    "bus_id": _bus_id(nvml, h),
                }
            )
        return gpus, driver
    except Exception:
        return [], None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _bus_id(nvml: Any, handle: Any) -> str | None:
    try:
        return bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
    except Exception:
        return None


def bus_id(text: str) -> str | None:
    """A PCI address in one spelling (``0:3b:00.0``) from NVML's ``00000000:3B:00.0`` or a
    framework's ``0000:3b:00.0``; None when it is not one."""
    parts = text.strip().lower().split(":")
    if len(parts) not in (2, 3) or "." not in parts[-1]:
        return None
    try:
        domain = int(parts[0], 16) if len(parts) == 3 else 0
    except ValueError:
        return None
    return f"{domain:x}:{parts[-2]}:{parts[-1]}"


def used_gpu(
    nvml: list[dict[str, Any]],
    identity: dict[str, str | None] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """The NVML GPU that the framework's first device is: by the UUID or PCI bus id the
    framework tells (``identity``), else by the first entry of ``CUDA_VISIBLE_DEVICES``
    (unset: device 0; a UUID or its prefix; an index, counted in NVML's PCI order: CUDA's
    own order is the same for identical GPUs, or with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
    None when it cannot be told: a guess would charge another device's energy."""
    env = dict(os.environ) if env is None else env
    identity = identity or {}
    uuid, bus = identity.get("uuid"), identity.get("bus_id")
    for g in nvml:
        if uuid and g.get("uuid") and g["uuid"].removeprefix("GPU-") == uuid.removeprefix("GPU-"):
            return g
        if bus and g.get("bus_id") and g["bus_id"] == bus_id(bus):
            return g
    first = env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return _visible(first, nvml, env)


def _visible(entry: str, nvml: list[dict[str, Any]], env: dict[str, str]) -> dict[str, Any] | None:
    """The NVML GPU of one ``CUDA_VISIBLE_DEVICES`` entry (see :func:`used_gpu`), or None."""
    if entry.isdigit():
        by_order = (
            env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or len({g.get("name") for g in nvml}) == 1
        )
        index = int(entry)
        return nvml[index] if by_order and index < len(nvml) else None
    if entry.startswith("GPU-"):
        found = [g for g in nvml if str(g.get("uuid", "")).startswith(entry)]
        return found[0] if len(found) == 1 else None
    return None  # MIG-..., or nothing visible


def used_gpus(
    nvml: list[dict[str, Any]],
    count: int,
    identity: dict[str, str | None] | None = None,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]] | None:
    """The NVML GPUs of a process that trains on its first ``count`` devices: one is
    :func:`used_gpu`'s; several are the first ``count`` entries of ``CUDA_VISIBLE_DEVICES``
    (unset: devices 0 to count-1), each by :func:`used_gpu`'s rules. None when any of them
    cannot be told (one device's counter for N devices' examples would be N times too low)."""
    if count <= 1:
        one = used_gpu(nvml, identity, env)
        return [one] if one is not None else None
    env = dict(os.environ) if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")] if visible else [str(i) for i in range(count)]
    if len(entries) < count:
        return None
    found = [_visible(e, nvml, env) for e in entries[:count]]
    if any(g is None for g in found) or len({id(g) for g in found}) != count:
        return None
    return [g for g in found if g is not None]


def framework_gpu(backend: str) -> dict[str, str | None]:
    """The UUID or PCI bus id of the framework's current GPU, where the framework tells it
    cheaply (PyTorch: both; TensorFlow and JAX: neither, their device 0 is matched by
    :func:`used_gpu`'s ``CUDA_VISIBLE_DEVICES`` rule)."""
    try:
        if backend == "torch":
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            uuid = str(getattr(props, "uuid", "") or "") or None
            bus = None
            if getattr(props, "pci_bus_id", None) is not None:
                bus = (
                    f"{getattr(props, 'pci_domain_id', 0):x}:{props.pci_bus_id:02x}:"
                    f"{getattr(props, 'pci_device_id', 0):02x}.0"
                )
            return {"uuid": uuid, "bus_id": bus}
    except Exception:
        pass
    return {"uuid": None, "bus_id": None}


def device_record(
    *,
    nvml: list[dict[str, Any]],
    driver: str | None,
    framework_gpus: list[dict[str, Any]],
    used_gpu: bool,
    cpu_model: str | None,
    framework: str = "tensorflow",
    gpu: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the run was measured on.

    ``framework_gpus``: the GPUs the framework accepted, each with a ``compute_capability``
    from the framework when it knows it. A GPU NVML sees but the framework ignores (e.g.
    compute capability 5.2 under TensorFlow >= 2.18) makes a CPU run with
    ``used_gpu: false``; NVML is the first source of compute capability, the framework a
    cross-check.
    """
    present = [
        {"name": g["name"], "compute_capability": g["compute_capability"], "uuid": g["uuid"]}
        for g in nvml
    ]
    if not used_gpu:
        return {
            "kind": "cpu",
            "name": cpu_model,
            "compute_capability": None,
            "memory_bytes": None,
            "driver": driver,
            "uuid": None,
            "used_gpu": False if nvml or framework_gpus else None,
            "present_gpus": present,
            "cc_source": None,
        }
    fw = framework_gpus[0] if framework_gpus else {}
    hw = gpu if gpu is not None else nvml[0] if nvml else {}
    cc = hw.get("compute_capability") or fw.get("compute_capability")
    source = "nvml" if hw.get("compute_capability") else (framework if cc else None)
    rec = {
        "kind": "gpu",
        "name": hw.get("name") or fw.get("name"),
        "compute_capability": cc,
        "memory_bytes": hw.get("memory_bytes"),
        "driver": driver,
        "uuid": hw.get("uuid"),
        "used_gpu": True,
        "present_gpus": present,
        "cc_source": source,
    }
    if hw and fw.get("compute_capability") and fw["compute_capability"] != cc:
        rec["cc_framework"] = fw["compute_capability"]
    return rec


def number_settings() -> dict[str, str | None]:
    """Environment variables that change the numbers, as set for this process."""
    env = {k: os.environ.get(k) for k in NUMBER_SETTINGS}
    return {
        "onednn": env["TF_ENABLE_ONEDNN_OPTS"],
        "onednn_max_cpu_isa": env["ONEDNN_MAX_CPU_ISA"],
        "xla_flags": env["XLA_FLAGS"],
        "tf32_override": env["NVIDIA_TF32_OVERRIDE"],
    }


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cgroup_peak_bytes(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The peak of the memory cgroup this process runs in, when that cgroup has a memory
    limit of its own (a host's memory_limit, a container's --memory); None otherwise."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            where = root / path.lstrip("/")
            peak, limit = where / "memory.peak", where / "memory.max"
        elif "memory" in controllers.split(","):  # cgroup v1
            where = root / "memory" / path.lstrip("/")
            peak, limit = where / "memory.max_usage_in_bytes", where / "memory.limit_in_bytes"
        else:
            continue
        try:
            bound = limit.read_text().strip()
            if bound == "max" or int(bound) >= 2**60:
                return None  # no limit of its own: not the cell's memory
            return int(peak.read_text())
        except (OSError, ValueError):
            return None
    return None


def process_start_time() -> float | None:
    """Wall-clock time this process started (for startup_s), when psutil is there."""
    try:
        import psutil
    except ImportError:
        return None
    return float(psutil.Process().create_time())


def main() -> None:
    """``python -m mxbench.bench.evidence.probe``: one JSON line of what the bench would see here (GPUs
    through NVML, the driver, the CPU, the Python): ``mxbench doctor`` runs it on each host,
    inside the host's image."""
    import json

    gpus, driver = nvml_gpus()
    cpu = cpu_info()
    print(
        json.dumps(
            {
                "gpus": gpus,
                "driver": driver,
                "python": platform.python_version(),
                "cpu": {k: cpu.get(k) for k in ("model", "cores", "flags")},
            }
        )
    )


if __name__ == "__main__":
    main()
