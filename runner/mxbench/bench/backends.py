"""The Keras backends a cell can run on: TensorFlow, JAX, PyTorch, behind one protocol.

Each backend says what only it can tell: its versions and build (TF's compiled CUDA
capabilities and CPU instructions, jaxlib's / torch's CUDA and cuDNN), the float32 matmul
setting that decides the baseline (TF32), the GPUs it accepted, whether the model's
variables live on a GPU, its peak device memory, and the cheapest form of input it takes.
:func:`select` sets ``KERAS_BACKEND`` before Keras is imported (Keras reads it once).
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any, ClassVar, Protocol

from mxbench.errors import UsageError
from mxbench.records.record import Record


class Backend(Protocol):
    name: ClassVar[str]

    def load(self, rec: Record) -> None:
        """Import the framework; record its versions, build facts and matmul setting."""

    def accepted_gpus(self) -> list[dict[str, Any]]:
        """The GPUs the framework accepted: ``{"name", "compute_capability"}`` each."""

    def model_on_gpu(self, model: Any) -> bool:
        """Whether the model's variables live on a GPU (what "used the GPU" means)."""

    def peak_gpu_memory_bytes(self) -> int | None: ...

    def dataset(self, x: Any, y: Any) -> tuple[Any, str]:
        """An endless source of the batch ``(x, y)``, in the form this backend feeds best,
        and where the batch lives between steps (``host``: copied to the device each step)."""


def cuda_version(platform_version: str) -> str | None:
    """``13.0`` from jaxlib's ``cuda 13000`` (CUDA's integer: major * 1000 + minor * 10)."""
    found = re.search(r"cuda\D*(\d{4,6})\b", platform_version, re.IGNORECASE)
    if not found:
        return platform_version.strip() or None
    number = int(found.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"


def _variable_devices(model: Any) -> list[str]:
    return [str(getattr(getattr(w, "value", w), "device", "")) for w in model.weights]


class TensorFlow:
    name: ClassVar[str] = "tensorflow"

    def __init__(self) -> None:
        self.tf: Any = None

    def load(self, rec: Record) -> None:
        import msgspec

        from mxbench.bench.evidence import probe_tf

        self.tf, log = probe_tf.import_tensorflow()
        rec.cpu.tf_not_compiled_for = probe_tf.parse_not_compiled_for(log)
        rec.software = msgspec.structs.replace(rec.software, **probe_tf.build_info(self.tf))
        rec.settings.tf32 = probe_tf.tf32_enabled(self.tf)
        rec.settings.matmul_precision = "tf32" if rec.settings.tf32 else "highest"

    def accepted_gpus(self) -> list[dict[str, Any]]:
        from mxbench.bench.evidence import probe_tf

        return probe_tf.accepted_gpus(self.tf)

    def model_on_gpu(self, model: Any) -> bool:
        return any(":GPU:" in d.upper() for d in _variable_devices(model))

    def peak_gpu_memory_bytes(self) -> int | None:
        from mxbench.bench.evidence import probe_tf

        return probe_tf.peak_gpu_memory_bytes(self.tf)

    def dataset(self, x: Any, y: Any) -> tuple[Any, str]:
        # tf.data keeps the batch in host memory; each step copies it to the GPU (as the
        # experiment's cached tf.data pipeline did).
        return self.tf.data.Dataset.from_tensors((x, y)).repeat(), "host"


class Jax:
    name: ClassVar[str] = "jax"

    def __init__(self) -> None:
        self.jax: Any = None

    def load(self, rec: Record) -> None:
        # Typed as Any on purpose: the frameworks' own annotations are not ours to check.
        jax: Any = importlib.import_module("jax")
        jaxlib: Any = importlib.import_module("jaxlib")
        self.jax = jax
        rec.software.jax = jax.__version__
        rec.software.jaxlib = jaxlib.__version__
        gpu = [d for d in jax.devices() if d.platform == "gpu"]
        if gpu:
            rec.software.cuda = cuda_version(str(getattr(gpu[0].client, "platform_version", "")))
        # None is JAX's "default": TF32 allowed for float32 matmuls on GPUs that have it.
        precision = jax.config.jax_default_matmul_precision
        rec.settings.matmul_precision = str(precision) if precision else "default"
        rec.settings.tf32 = precision in (None, "default", "tensorfloat32", "bfloat16_3x")

    def accepted_gpus(self) -> list[dict[str, Any]]:
        out = []
        for d in self.jax.devices():
            if d.platform == "gpu":
                cc = getattr(d, "compute_capability", None)
                out.append({"name": getattr(d, "device_kind", str(d)), "compute_capability": cc})
        return out

    def model_on_gpu(self, model: Any) -> bool:
        for w in model.weights:
            value = getattr(w, "value", w)
            devices = value.devices() if hasattr(value, "devices") else set()
            if any(d.platform == "gpu" for d in devices):
                return True
        return False

    def peak_gpu_memory_bytes(self) -> int | None:
        for d in self.jax.devices():
            if d.platform == "gpu":
                stats = d.memory_stats() or {}
                peak = stats.get("peak_bytes_in_use")
                return int(peak) if peak is not None else None
        return None

    def dataset(self, x: Any, y: Any) -> tuple[Any, str]:
        from mxbench.bench.model.data import device_batch

        ds, first = device_batch(x, y)
        return ds, str(next(iter(first.devices())))


class Torch:
    name: ClassVar[str] = "torch"

    def __init__(self) -> None:
        self.torch: Any = None

    def load(self, rec: Record) -> None:
        torch: Any = importlib.import_module("torch")
        self.torch = torch
        rec.software.torch = str(torch.__version__)  # a str subclass msgspec will not encode
        rec.software.cuda = str(torch.version.cuda) if torch.version.cuda else None
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        rec.software.cudnn = str(cudnn) if cudnn else None
        matmul = bool(torch.backends.cuda.matmul.allow_tf32)
        conv = bool(torch.backends.cudnn.allow_tf32)
        rec.settings.tf32 = matmul or conv
        rec.settings.matmul_precision = (
            f"matmul.allow_tf32={matmul}, cudnn.allow_tf32={conv}, "
            f"float32_matmul_precision={torch.get_float32_matmul_precision()}"
        )

    def accepted_gpus(self) -> list[dict[str, Any]]:
        t = self.torch
        if not t.cuda.is_available():
            return []
        out = []
        for i in range(t.cuda.device_count()):
            major, minor = t.cuda.get_device_capability(i)
            out.append(
                {"name": t.cuda.get_device_name(i), "compute_capability": f"{major}.{minor}"}
            )
        return out

    def model_on_gpu(self, model: Any) -> bool:
        return any(d.startswith("cuda") for d in _variable_devices(model))

    def peak_gpu_memory_bytes(self) -> int | None:
        t = self.torch
        return int(t.cuda.max_memory_allocated()) if t.cuda.is_available() else None

    def dataset(self, x: Any, y: Any) -> tuple[Any, str]:
        from mxbench.bench.model.data import device_batch

        ds, first = device_batch(x, y)
        return ds, str(first.device)


BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (TensorFlow, Jax, Torch)}
# The pip extra that installs each backend for `mxbench bench`.
EXTRAS = {"tensorflow": "tf", "jax": "jax", "torch": "torch"}


def select(name: str) -> Backend:
    """The backend ``name``, with ``KERAS_BACKEND`` set for the Keras import to come."""
    import sys

    if "keras" in sys.modules and os.environ.get("KERAS_BACKEND", "tensorflow") != name:
        raise UsageError(f"--backend {name}: Keras was already imported with another backend")
    os.environ["KERAS_BACKEND"] = name
    return BACKENDS[name]()
