"""Energy over the timed window, from a cumulative counter of the device that ran the cell:
NVML's for the GPU the framework trained on (matched by UUID or PCI bus id, see
:func:`mxbench.bench.probe.used_gpu`), RAPL's for a cell on the CPU.

- **NVML** (Volta and newer): ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the
  driver loaded, for the whole board.
- **RAPL** through Linux's powercap: ``/sys/class/powercap/intel-rapl:N/energy_uj``,
  microjoules of CPU package N, wrapping at ``max_energy_range_uj``; readable by root only
  on most kernels since 2020 (CVE-2020-8694), and absent in most virtual machines. Only the
  package domains (``intel-rapl:N``, not their ``:N:M`` sub-zones) are summed: the
  sub-zones are parts of them.

A thread reads the counter every ``interval_s`` from before the first step to after the
last; :meth:`Counter.joules` interpolates it at the window's two marks. Where no counter is
readable nothing is recorded, and nothing runs.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")
INTERVAL_S = 0.1


class Rapl:
    """The CPU packages' energy (joules, wraps undone) from a powercap tree."""

    def __init__(self, root: Path = POWERCAP) -> None:
        self.zones: list[tuple[Path, float]] = []  # energy_uj file, wrap range (µJ)
        for zone in sorted(root.glob("intel-rapl:*")):
            if zone.name.count(":") != 1:
                continue  # a sub-zone (core, uncore, dram) of a package
            energy, limit = zone / "energy_uj", zone / "max_energy_range_uj"
            try:
                int(energy.read_text())
                wrap = float(limit.read_text()) if limit.exists() else 2.0**32
            except (OSError, ValueError):
                continue  # not readable (not root) or not a counter
            self.zones.append((energy, wrap))
        self._last: list[float] = []
        self._offset: list[float] = [0.0] * len(self.zones)

    def __bool__(self) -> bool:
        return bool(self.zones)

    def read(self) -> float:
        """Joules since the first read's counters' origin, monotonic across wraps."""
        values = [float(path.read_text()) for path, _ in self.zones]
        if self._last:
            for i, (v, last) in enumerate(zip(values, self._last, strict=True)):
                if v < last:
                    self._offset[i] += self.zones[i][1]
        self._last = values
        return sum(v + o for v, o in zip(values, self._offset, strict=True)) / 1e6


def nvml_counter(nvml: Any, handle: Any) -> Callable[[], float] | None:
    """The GPU's cumulative energy in joules, or None when NVML does not count it here."""
    try:
        nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception:
        return None
    return lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0


class Counter:
    """Readings of one cumulative energy counter on a thread."""

    def __init__(self, read: Callable[[], float], source: str, interval_s: float = INTERVAL_S):
        self.read, self.source, self.interval_s = read, source, interval_s
        self.samples: list[tuple[float, float]] = []  # (perf_counter, joules)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        self.samples.append((time.perf_counter(), self.read()))

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # the counter went away: keep what was read
            while not self._stop.wait(self.interval_s):
                self._sample()

    def start(self) -> None:
        self._sample()
        self._thread = threading.Thread(target=self._run, name="mxbench-energy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._sample()

    def at(self, t: float) -> float | None:
        """The counter at ``t`` (linear between the readings around it; None outside)."""
        times = [s[0] for s in self.samples]
        i = bisect.bisect_left(times, t)
        if i == 0:
            return self.samples[0][1] if times and times[0] == t else None
        if i == len(times):
            return None
        (t0, e0), (t1, e1) = self.samples[i - 1], self.samples[i]
        return e0 + (e1 - e0) * (t - t0) / (t1 - t0) if t1 > t0 else e1

    def joules(self, start: float, end: float) -> float | None:
        """Energy between two perf_counter marks (None: not covered by readings)."""
        a, b = self.at(start), self.at(end)
        return b - a if a is not None and b is not None and b >= a else None


def cpu_counter(root: Path | None = None) -> Counter | None:
    rapl = Rapl(root or POWERCAP)
    return Counter(rapl.read, "rapl") if rapl else None


def gpu_counter(uuid: str | None = None, nvml: Any = None) -> Counter | None:
    """A counter of the GPU ``uuid`` (the only one when None), or None without NVML."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")  # nvidia-ml-py
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        if uuid is not None:
            handles = [h for h in handles if _uuid(nvml, h) == uuid]
        if len(handles) != 1:
            return None
        read = nvml_counter(nvml, handles[0])
    except Exception:
        return None
    return Counter(read, "nvml") if read is not None else None


def _uuid(nvml: Any, handle: Any) -> str:
    u = nvml.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


def start(gpu: bool, uuid: str | None) -> Counter | None:
    """A running counter of the device that runs the cell: the GPU ``uuid``'s (NVML) for a
    cell on a GPU, the CPU packages' (RAPL) for a cell on the CPU. A GPU cell whose GPU is not
    known (``uuid`` None) counts nothing: another device's joules would be charged to it."""
    counter = (gpu_counter(uuid) if uuid is not None else None) if gpu else cpu_counter()
    if counter is not None:
        try:
            counter.start()
        except Exception:
            return None
    return counter


def fill(metrics: Any, counter: Counter | None, spans: Sequence[tuple[float, float]],
         steps: int, batch_size: int) -> None:  # fmt: skip
    """Joules per step and per image of the timed ``spans`` (perf_counter marks: a cell's one
    window, or a paired arm's windows, its own steps only) into the record's metrics; nothing
    when a span is not covered by readings."""
    if counter is None or steps <= 0:
        return
    counter.stop()
    parts = [counter.joules(a, b) for a, b in spans]
    if not parts or any(j is None for j in parts):
        return
    joules = sum(j for j in parts if j is not None)
    if joules <= 0:
        return
    metrics.energy_j_per_step = round(joules / steps, 6)
    metrics.energy_j_per_image = round(joules / steps / batch_size, 9)
    metrics.energy_source = counter.source
