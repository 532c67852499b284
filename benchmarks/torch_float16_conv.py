"""Why a torch training step under mixed_float16 takes seconds on a CPU: blog-cnn's three
convolutions (32 px, batch 8), forward and backward, timed per dtype at 1 and 2 threads,
then which oneDNN implementation ran each float16 primitive and how long it took
(``ONEDNN_VERBOSE=1``, in a child process). On an AVX512-FP16 Xeon without AMX-FP16 the
forward and the data gradient run JIT kernels while the weight gradient runs ``ref:any``,
oneDNN's reference loops (docs/why.md).

    python benchmarks/torch_float16_conv.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

CONVS = ((32, 5), (64, 7), (128, 11))  # blog-cnn's (filters, kernel), stride 2


def step(torch: Any, dtype: Any) -> Callable[[], None]:
    """One forward and backward of the three convolutions in ``dtype``."""
    x = torch.randn(8, 3, 32, 32, dtype=dtype)
    weights, channels = [], 3
    for filters, kernel in CONVS:
        weights.append(torch.randn(filters, channels, kernel, kernel, dtype=dtype,
                                   requires_grad=True))  # fmt: skip
        channels = filters

    def run() -> None:
        h = x
        for w in weights:
            h = torch.nn.functional.conv2d(h, w, stride=2, padding=w.shape[-1] // 2).relu()
        h.float().sum().backward()

    return run


def timings() -> None:
    import torch

    print(f"torch {torch.__version__}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            run = step(torch, dtype)
            run()  # oneDNN's primitives made
            took = []
            for _ in range(3):
                t0 = time.perf_counter()
                run()
                took.append(time.perf_counter() - t0)
            print(f"threads {threads} {dtype}: forward+backward {1000 * sorted(took)[1]:.1f} ms")


def primitives() -> None:
    """Each float16 convolution primitive's implementation and time (ms), one thread."""
    code = (
        "import torch, benchmarks.torch_float16_conv as b; torch.set_num_threads(1); "
        "b.step(torch, torch.float16)()"
    )
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    for line in out.splitlines():
        fields = line.split(",")
        if line.startswith("onednn_verbose") and fields[3:6] == ["exec", "cpu", "convolution"]:
            print(f"{fields[6]:28s} {fields[7]:18s} {float(fields[-1]):9.2f} ms")


if __name__ == "__main__":
    timings()
    primitives()
