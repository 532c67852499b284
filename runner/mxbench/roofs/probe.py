"""Measure one backend's ceilings in this process: a matmul shape sweep per dtype and a
memory-bandwidth stream. Run as ``python -m mxbench.roofs.probe BACKEND [--quick]`` in a
fresh process (so that each backend's threads, caches and ``ONEDNN_*`` settings are its
own); prints one JSON object.

The sweep: square matmuls of growing size (CPU 256..2048, GPU 1024..8192; ``--quick``: a
third of the time per size, and a smaller stream), each warmed up once, then timed until
a time budget or a count of runs is spent; the ceiling is the best size's median rate (an
FMA is 2 FLOP: ``2 n^3`` per product). A size whose warm-up alone takes longer than the
budget is timed once and ends the sweep (a dtype without a fast path would otherwise take
minutes). The stream: ``y = 2 x`` over 128 MiB of float32, 1 GiB on a GPU (a read and a
write per element; JAX, whose every output is a fresh buffer: the fused ``sum(2 x)``, a read
per element), the median of a few passes after one warm-up. A GPU streams 128 MiB in about
30 us, less than a call's own cost: JAX's read 998 GB/s of an H200's 4.8 TB/s so.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

CPU_SIZES = (256, 512, 1024, 2048)
GPU_SIZES = (1024, 2048, 4096, 8192)
BUDGET_S = 0.35  # timing per size
MAX_RUNS = 15
STREAM_ELEMENTS = 32 * 2**20  # 128 MiB of float32
GPU_STREAM_ELEMENTS = 256 * 2**20  # 1 GiB: a pass long against a call's overhead


def timed(run: Callable[[], Any], budget_s: float = BUDGET_S) -> tuple[float, int]:
    """The median seconds of ``run`` (which waits for its result) after one warm-up, and
    how many runs were timed; one run when the warm-up alone exceeds the budget."""
    first = budget_s + 1.0
    for _ in range(2):  # a second warm-up when the first paid for one-time set-up
        t0 = time.perf_counter()
        run()
        first = time.perf_counter() - t0
        if first <= budget_s:
            break
    if first > budget_s:
        return first, 1
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while len(times) < 3 or (time.perf_counter() < end and len(times) < MAX_RUNS):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times)


def sweep(
    make: Callable[[int], Callable[[], Any]], sizes: tuple[int, ...], budget_s: float = BUDGET_S
) -> dict[str, Any]:
    """TFLOP/s per size of the products ``make(n)`` runs; the best is the ceiling."""
    per_size: dict[str, float] = {}
    runs = 0
    for n in sizes:
        seconds, count = timed(make(n), budget_s)
        runs += count
        per_size[str(n)] = 2 * n**3 / seconds / 1e12
        if count == 1:  # too slow to go larger within the probe's minute
            break
    best = max(per_size, key=per_size.__getitem__)
    return {"tflops": per_size[best], "best_n": int(best), "per_size": per_size, "runs": runs}


def nvml_clock() -> dict[str, float]:
    """The first GPU's highest SM clock (MHz) as NVML reports it; {} without NVML."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
            return {"max_clock_mhz": float(mhz)}
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return {}


def dtypes(gpu: bool) -> list[str]:
    """The dtypes every backend's probe measures: TF32 only where a GPU has it."""
    return ["float32", "tf32", "bfloat16", "float16"] if gpu else ["float32", "bfloat16", "float16"]


class Torch:
    name = "torch"
    stream_bytes = 8  # per element: a read and a write
    stream_text = "y = 2x (torch.mul, out=): a read and a write per float32"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.gpu = torch.cuda.is_available()
        self.device = "cuda" if self.gpu else "cpu"
        self.version = torch.__version__
        self.device_name = torch.cuda.get_device_name(0) if self.gpu else None
        if self.gpu:  # what the formula needs: SMs, compute capability (the clock: NVML)
            props = torch.cuda.get_device_properties(0)
            self.gpu_facts = {
                "sms": props.multi_processor_count,
                "cc": [props.major, props.minor],
                **nvml_clock(),
            }

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def matmul(self, dtype: str) -> Callable[[int], Callable[[], Any]]:
        torch = self.torch
        if self.gpu:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        dt = getattr(torch, "float32" if dtype == "tf32" else dtype)

        def make(n: int) -> Callable[[], Any]:
            a = torch.randn(n, n, device=self.device).to(dt)
            b = torch.randn(n, n, device=self.device).to(dt)
            c = torch.empty(n, n, device=self.device, dtype=dt)

            def run() -> None:
                torch.matmul(a, b, out=c)
                self.sync()

            return run

        return make

    def stream(self, elements: int) -> Callable[[], Any]:
        x = self.torch.ones(elements, device=self.device)
        y = self.torch.empty_like(x)

        def run() -> None:
            self.torch.mul(x, 2.0, out=y)
            self.sync()

        return run


class Jax:
    name = "jax"

    def __init__(self) -> None:
        import jax

        self.jax = jax
        dev = jax.devices()[0]
        self.gpu = dev.platform == "gpu"
        self.version = jax.__version__
        self.device_name = getattr(dev, "device_kind", None) if self.gpu else None
        cc = str(getattr(dev, "compute_capability", "") or "").split(".")
        if self.gpu and len(cc) == 2 and getattr(dev, "core_count", None):  # SMs, as XLA counts
            self.gpu_facts = {"sms": int(dev.core_count), "cc": cc, **nvml_clock()}

    def matmul(self, dtype: str) -> Callable[[int], Callable[[], Any]]:
        jax, jnp = self.jax, self.jax.numpy
        precision = jax.lax.Precision.HIGHEST if dtype == "float32" else None
        dt = jnp.float32 if dtype == "tf32" else getattr(jnp, dtype)
        dot = jax.jit(lambda a, b: jnp.dot(a, b, precision=precision))

        def make(n: int) -> Callable[[], Any]:
            key = jax.random.PRNGKey(0)
            a = jax.random.normal(key, (n, n)).astype(dt)
            b = jax.random.normal(key, (n, n)).astype(dt)
            return lambda: dot(a, b).block_until_ready()

        return make

    stream_bytes = 4  # a read per element: a fused reduction, no output to allocate
    stream_text = "sum(2x), jitted and fused: a read per float32"

    def stream(self, elements: int) -> Callable[[], Any]:
        jnp = self.jax.numpy
        x = jnp.ones(elements)
        total = self.jax.jit(lambda v: jnp.sum(v * 2.0))
        return lambda: total(x).block_until_ready()


class TensorFlow:
    name = "tensorflow"
    stream_bytes = 8
    stream_text = "y = 2x: a read and a write per float32"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        gpus = tf.config.list_physical_devices("GPU")
        self.gpu = bool(gpus)
        self.version = tf.__version__
        details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
        self.device_name = details.get("device_name")  # the GPU's name (no SM count: no formula)

    def matmul(self, dtype: str) -> Callable[[int], Callable[[], Any]]:
        tf = self.tf
        tf.config.experimental.enable_tensor_float_32_execution(dtype == "tf32")
        dt = tf.float32 if dtype == "tf32" else getattr(tf, dtype)

        def make(n: int) -> Callable[[], Any]:
            a = tf.cast(tf.random.normal((n, n)), dt)
            b = tf.cast(tf.random.normal((n, n)), dt)
            return lambda: tf.linalg.matmul(a, b)[0, 0].numpy()

        return make

    def stream(self, elements: int) -> Callable[[], Any]:
        x = self.tf.ones((elements,))
        return lambda: (x * 2.0)[0].numpy()


BACKENDS: dict[str, Callable[[], Any]] = {"torch": Torch, "jax": Jax, "tensorflow": TensorFlow}


def measure(backend: str, quick: bool = False) -> dict[str, Any]:
    """This process's ceilings with ``backend``: per dtype a sweep, and the stream."""
    t0 = time.perf_counter()
    b = BACKENDS[backend]()
    import_s = time.perf_counter() - t0
    sizes = GPU_SIZES if b.gpu else CPU_SIZES  # quick: less time per size, the same sizes
    budget = BUDGET_S / 3 if quick else BUDGET_S
    matmul = {}
    for dtype in dtypes(b.gpu):
        try:
            matmul[dtype] = sweep(b.matmul(dtype), sizes, budget)
        except Exception as exc:  # a dtype this build cannot multiply: said, not fatal
            matmul[dtype] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    elements = GPU_STREAM_ELEMENTS if b.gpu else STREAM_ELEMENTS
    elements = elements // 8 if quick else elements
    seconds, runs = timed(b.stream(elements), budget)
    return {
        "backend": backend,
        "version": b.version,
        "gpu": b.gpu,
        "device_name": b.device_name,
        "gpu_facts": getattr(b, "gpu_facts", None),
        "matmul": matmul,
        "bandwidth": {
            "gbs": b.stream_bytes * elements / seconds / 1e9,
            "runs": runs,
            "bytes": b.stream_bytes * elements,
            "stream": b.stream_text,
        },
        "import_s": import_s,
        "probe_s": time.perf_counter() - t0,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BACKENDS:
        print(
            f"usage: python -m mxbench.roofs.probe {{{','.join(BACKENDS)}}} [--quick]",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(measure(argv[0], "--quick" in argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
