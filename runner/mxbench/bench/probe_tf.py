"""What only TensorFlow can tell: its CPU-feature log line, build info, the GPUs it accepted,
TF32, its GPU memory peak, and where the model's variables live.

Only imported when the Keras backend is TensorFlow.
"""

from __future__ import annotations

import os
import re
from typing import Any

from mxbench.bench.process.stdio import capture_stderr

# TF >= 2.14: "To enable the following instructions: AVX2 AVX512F FMA, in other operations"
# TF 2.4-2.13: "...to use the following CPU instructions in performance-critical operations:
#   AVX2 FMA\nTo enable them in other operations, rebuild..."
# TF < 2.4: "Your CPU supports instructions that this TensorFlow binary was not compiled to
#   use: AVX2 FMA"
_GUARD_PATTERNS = (
    re.compile(r"To enable the following instructions:\s*([A-Z0-9_ ]+?)\s*,? in other operations"),
    re.compile(r"following CPU instructions in performance-critical operations:\s*([A-Z0-9_ ]+)"),
    re.compile(r"was not compiled to use:\s*([A-Z0-9_ ]+)"),
)
_GUARD_SEEN = re.compile(r"cpu_feature_guard|This TensorFlow binary is optimized")


def parse_not_compiled_for(log: str) -> list[str] | None:
    """CPU instructions TensorFlow says its binary was not compiled for.

    ``[]`` when TF logged its CPU-feature line without a list, ``None`` when the line is
    absent (logging was off, or not TensorFlow).
    """
    for pattern in _GUARD_PATTERNS:
        m = pattern.search(log)
        if m:
            return m.group(1).split()
    return [] if _GUARD_SEEN.search(log) else None


def import_tensorflow() -> tuple[Any, str]:
    """Import TensorFlow with its C++ logging on, returning the module and what it logged."""
    old = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    try:
        with capture_stderr() as cap:
            import tensorflow as tf
    finally:
        if old is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        else:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = old
    return tf, cap.text


def build_info(tf: Any) -> dict[str, Any]:
    info = dict(tf.sysconfig.get_build_info())
    caps = info.get("cuda_compute_capabilities")
    return {
        "tensorflow": tf.__version__,
        "tf_git_version": getattr(tf.version, "GIT_VERSION", None),
        "cuda": info.get("cuda_version"),
        "cudnn": info.get("cudnn_version"),
        "cuda_compute_capabilities": list(caps) if caps else None,
        "is_cuda_build": bool(info.get("is_cuda_build")),
    }


def accepted_gpus(tf: Any) -> list[dict[str, Any]]:
    """The GPUs TensorFlow registered, with its own view of their compute capability."""
    out = []
    for dev in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(dev)
        cc = details.get("compute_capability")
        out.append(
            {
                "name": details.get("device_name") or dev.name,
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            }
        )
    return out


def tf32_enabled(tf: Any) -> bool:
    return bool(tf.config.experimental.tensor_float_32_execution_enabled())


def peak_gpu_memory_bytes(tf: Any) -> int | None:
    try:
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    except (ValueError, RuntimeError, KeyError):
        return None
