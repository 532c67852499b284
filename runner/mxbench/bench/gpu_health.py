"""GPU utilisation and health during the timed steps, sampled from NVML on one thread.

NVML's utilisation rate is the share of its last sample period (between 1/6 s and 1 s,
depending on the GPU) in which a kernel was running. A well-fed training loop keeps it near
100 %; a GPU that waits for the input pipeline or for Python shows less, and no precision
policy can fix that (the report's input-bound diagnosis reads this number).

Health is read in the same poll: SM and memory clocks, power draw (and the enforced power
limit, once), temperature, and the clock-throttle reasons bitmask. A GPU held back by its
power cap or its temperature runs both policies slower or, worse, only one of them: that,
not precision, can explain a missing speedup (the report's throttling diagnosis).

The sampler polls every GPU NVML sees, every ``interval_s``, from before the first step to
after the last; the record keeps the medians of the samples of the GPU the framework used,
taken inside the timed window, and every throttle reason seen there. Each reading is asked
for on its own: a field a GPU does not support stays null and the others still come.
Without NVML (no driver, a CPU-only host) nothing is recorded.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from mxbench.records.record import GpuHealth

INTERVAL_S = 0.1

# nvmlClocksThrottleReason* / nvmlClocksEventReason* bits (nvml.h), by the name recorded.
THROTTLE_REASONS = {
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}  # 0x1 (GPU idle) is left out: an idle moment is not a slowdown
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

Reading = dict[str, int]  # util, sm_mhz, mem_mhz, power_mw, temp_c, throttle: what NVML gave


def _read(nvml: Any, h: Any) -> Reading:
    queries: dict[str, Callable[[], Any]] = {
        "util": lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
        "sm_mhz": lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM),
        "mem_mhz": lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM),
        "power_mw": lambda: nvml.nvmlDeviceGetPowerUsage(h),
        "temp_c": lambda: nvml.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU),
        "throttle": lambda: _throttle(nvml, h),
        # compute processes on the device, this one included (NVML's pids may be another
        # namespace's: counted, not matched)
        "procs": lambda: len(nvml.nvmlDeviceGetComputeRunningProcesses(h)),
    }
    out: Reading = {}
    for key, query in queries.items():
        with contextlib.suppress(Exception):  # NVMLError_NotSupported and kin
            out[key] = int(query())
    return out


def _throttle(nvml: Any, h: Any) -> int:
    # nvidia-ml-py >= 12.535 renamed throttle reasons to "clocks event reasons".
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is None:
        fn = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(h))


class HealthSampler:
    def __init__(self, nvml: Any = None, interval_s: float = INTERVAL_S) -> None:
        self._nvml = nvml
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, Reading]]] = []  # (perf_counter, uuid -> …)
        self.power_limit_mw: dict[str, int] = {}
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
        for uuid, h in self._handles.items():
            with contextlib.suppress(Exception):
                self.power_limit_mw[uuid] = int(nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        self._thread = threading.Thread(target=self._run, name="mxbench-gpu-health", daemon=True)
        self._thread.start()
        return True

    def _sample(self) -> None:
        now = time.perf_counter()
        self.samples.append((now, {u: _read(self._nvml, h) for u, h in self._handles.items()}))

    def _run(self) -> None:
        try:
            while True:
                self._sample()
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
            self._sample()
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()

    def _uuid(self, uuid: str | None) -> str | None:
        if uuid is not None:
            return uuid
        return next(iter(self._handles)) if len(self._handles) == 1 else None

    def _window(self, start: float, end: float, uuid: str | None) -> list[Reading]:
        """The readings of one GPU that cover the steps between ``start`` and ``end``
        (perf_counter times): taken from ``start`` to one interval after ``end``. ``uuid``
        None picks the only GPU there is."""
        gpu = self._uuid(uuid)
        if gpu is None:
            return []
        until = end + self.interval_s
        return [r[gpu] for t, r in self.samples if start <= t <= until and gpu in r]

    def median_pct(self, start: float, end: float, uuid: str | None) -> float | None:
        """Median utilisation (%) of the GPU over the timed window (None: no sample)."""
        values = [r["util"] for r in self._window(start, end, uuid) if "util" in r]
        return round(statistics.median(values), 1) if values else None

    def window(self, start: float, end: float, uuid: str | None) -> tuple[int | None, list[str]]:
        """For one paired window: how many *other* compute processes the GPU had at most
        (None: not known), and the throttle reasons seen (GPU idle left out)."""
        readings = self._window(start, end, uuid)
        procs = [r["procs"] for r in readings if "procs" in r]
        seen = 0
        for r in readings:
            seen |= r.get("throttle", 0)
        others = max(0, max(procs) - 1) if procs else None
        return others, [name for bit, name in THROTTLE_REASONS.items() if seen & bit]

    def health(self, start: float, end: float, uuid: str | None) -> GpuHealth | None:
        """Clocks, power, temperature and throttle reasons over the timed window."""
        readings = self._window(start, end, uuid)
        if not readings:
            return None

        def med(key: str, scale: float = 1.0) -> float | None:
            values = [r[key] / scale for r in readings if key in r]
            return round(statistics.median(values), 1) if values else None

        temps = [r["temp_c"] for r in readings if "temp_c" in r]
        seen = 0
        for r in readings:
            seen |= r.get("throttle", 0)
        limit = self.power_limit_mw.get(self._uuid(uuid) or "")
        return GpuHealth(
            sm_clock_mhz=med("sm_mhz"),
            memory_clock_mhz=med("mem_mhz"),
            power_w=med("power_mw", 1000.0),
            power_limit_w=round(limit / 1000.0, 1) if limit else None,
            temperature_c=med("temp_c"),
            temperature_max_c=float(max(temps)) if temps else None,
            throttle_reasons=[name for bit, name in THROTTLE_REASONS.items() if seen & bit],
            samples=len(readings),
        )
