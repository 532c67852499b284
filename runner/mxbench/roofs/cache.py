"""Measured roofs kept per device and software stack, so ``doctor`` and the report can use
them without measuring again.

One JSON file per (backend, device, stack) under ``$XDG_CACHE_HOME/mxbench/roofs/`` (or
``$MXBENCH_ROOFS_CACHE``): its name is a hash of what would change the figure: the CPU
(model, flags, cores), the GPUs NVML sees, the backend and its version, Python, the
settings that choose kernels (``ONEDNN_MAX_CPU_ISA``, ``TF_ENABLE_ONEDNN_OPTS``,
``XLA_FLAGS``, thread counts, visible devices) and the probe's own version. Nothing is
ever looked up by a partial key: a new driver, a capped ISA or an upgraded torch is a new
file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROBE_VERSION = 4  # 2: the oneDNN kernels the probe ran; 3: a quick sweep, the full's sizes;
# 4: a GPU's stream over 1 GiB
SETTINGS = (
    "ONEDNN_MAX_CPU_ISA",
    "TF_ENABLE_ONEDNN_OPTS",
    "XLA_FLAGS",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_TF32_OVERRIDE",
    "JAX_PLATFORMS",
)
DISTRIBUTIONS = {"torch": "torch", "jax": "jaxlib", "tensorflow": "tensorflow"}


def directory() -> Path:
    where = os.environ.get("MXBENCH_ROOFS_CACHE")
    if where:
        return Path(where)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mxbench" / "roofs"


def _version(backend: str) -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTIONS.get(backend, backend))
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus() -> list[str]:
    """The GPUs NVML sees (name, UUID), [] without NVML or a driver."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append(f"{pynvml.nvmlDeviceGetName(h)} {pynvml.nvmlDeviceGetUUID(h)}")
        return out
    except Exception:
        return []
    finally:
        pynvml.nvmlShutdown()


def identity(
    backend: str,
    cpu: dict[str, Any],
    env: dict[str, str] | None = None,
    gpus: list[str] | None = None,
) -> dict[str, Any]:
    """What the key of ``backend``'s measured roofs is made of."""
    env = dict(os.environ) if env is None else env
    return {
        "probe": PROBE_VERSION,
        "backend": backend,
        "version": _version(backend),
        "python": platform.python_version(),
        "cpu": cpu,
        "gpus": _gpus() if gpus is None else gpus,
        "settings": {k: env.get(k) for k in SETTINGS},
    }


def key(ident: dict[str, Any]) -> str:
    text = json.dumps(ident, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def path(ident: dict[str, Any]) -> Path:
    return directory() / f"{key(ident)}.json"


def load(ident: dict[str, Any]) -> dict[str, Any] | None:
    """The measurement kept for this identity; None when there is none (or it is unreadable
    or was kept for another identity)."""
    try:
        kept = json.loads(path(ident).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("identity") != json.loads(
        json.dumps(ident, default=str)
    ):
        return None
    measured = kept.get("measured")
    return measured if isinstance(measured, dict) else None


def save(ident: dict[str, Any], measured: dict[str, Any]) -> Path:
    where = path(ident)
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"identity": ident, "measured": measured}, default=str))
    tmp.replace(where)
    return where


@contextlib.contextmanager
def locked(ident: dict[str, Any]) -> Iterator[None]:
    """Hold this identity's lock file while measuring it: the bench processes of one host
    measure it once, the others wait and then read what the first kept (no lock where the
    directory cannot be written: each measures, as without a cache)."""
    import fcntl

    try:
        where = path(ident).with_suffix(".lock")
        where.parent.mkdir(parents=True, exist_ok=True)
        handle = where.open("a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
