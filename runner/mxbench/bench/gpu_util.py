"""GPU utilisation during the timed steps, sampled from NVML on a background thread.

NVML's utilisation rate is the share of its last sample period (between 1/6 s and 1 s,
depending on the GPU) in which a kernel was running. A well-fed training loop keeps it near
100 %; a GPU that waits for the input pipeline or for Python shows less, and no precision
policy can fix that (the report's input-bound diagnosis reads this number).

The sampler polls every GPU NVML sees, every ``interval_s``, from before the first step to
after the last; the record keeps the median of the samples of the GPU the framework used,
taken inside the timed window. Without NVML (no driver, a CPU-only host) it records nothing
and the field stays null.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from typing import Any

INTERVAL_S = 0.1


class UtilSampler:
    def __init__(self, nvml: Any = None, interval_s: float = INTERVAL_S) -> None:
        self._nvml = nvml
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, int]]] = []  # (perf_counter, uuid -> %)
        self._handles: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Begin sampling; False (and nothing running) when NVML or a GPU is not there."""
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                return False
            nvml = pynvml
        try:
            nvml.nvmlInit()
        except Exception:
            return False
        try:
            for i in range(nvml.nvmlDeviceGetCount()):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = nvml.nvmlDeviceGetUUID(h)
                self._handles[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = h
        except Exception:
            self._handles.clear()
        if not self._handles:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            return False
        self._nvml = nvml
        self._thread = threading.Thread(target=self._run, name="mxbench-gpu-util", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        nvml = self._nvml
        try:
            while True:
                now = time.perf_counter()
                util = {u: int(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                        for u, h in self._handles.items()}  # fmt: skip
                self.samples.append((now, util))
                if self._stop.wait(self.interval_s):
                    return
        except Exception:  # a GPU fell off the bus, NVML went away: keep what was sampled
            return

    def stop(self) -> None:
        """Stop sampling, with one last sample now: NVML's figure covers the period just
        ended, so even a timed window shorter than the interval gets a sample."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._thread = None
        with contextlib.suppress(Exception):
            now = time.perf_counter()
            util = {u: int(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                    for u, h in self._handles.items()}  # fmt: skip
            self.samples.append((now, util))
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()

    def median_pct(self, start: float, end: float, uuid: str | None) -> float | None:
        """Median utilisation (%) of one GPU over the samples that cover the steps between
        ``start`` and ``end`` (perf_counter times): taken from ``start`` to one interval
        after ``end``. ``uuid`` None picks the only GPU there is. None when nothing fits."""
        if uuid is None:
            if len(self._handles) != 1:
                return None
            (uuid,) = self._handles
        until = end + self.interval_s
        values = [u[uuid] for t, u in self.samples if start <= t <= until and uuid in u]
        return round(statistics.median(values), 1) if values else None
