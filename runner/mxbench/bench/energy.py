"""Energy over the timed window, from a cumulative counter of the device that ran the cell:
NVML's for the GPU the framework trained on (matched by UUID or PCI bus id, see
:func:`mxbench.bench.evidence.probe.used_gpu`), RAPL's for a cell on the CPU.

- **NVML** (Volta and newer): ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the
  driver loaded, for the whole board.
- **RAPL** through Linux's powercap: ``/sys/class/powercap/intel-rapl:N/energy_uj``,
  microjoules of CPU package N, wrapping at ``max_energy_range_uj``; readable by root only
  on most kernels since 2020 (CVE-2020-8694), and absent in most virtual machines. Only the
  package domains (``intel-rapl:N``, not their ``:N:M`` sub-zones) are summed: the
  sub-zones are parts of them.

A thread reads the counter every ``interval_s`` from before the first step to after the
last, and the paired design reads it at every hand-off between arms too (:meth:`Counter.mark`,
at each window's start and end): an arm's joules are then read at its own windows' edges, not
interpolated across the other arm's (0.1 s readings at 0.25 s hand-offs mixed them).
:meth:`Counter.joules` interpolates between the readings around a mark. A cell on several
GPUs reads every one of them (:func:`gpu_counter`: their sum) and charges its own examples;
where one of them cannot be read, nothing is recorded. Where no counter is readable nothing
is recorded, and nothing runs.
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
        self.samples: list[tuple[float, float]] = []  # (perf_counter, joules), in time order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the sampler thread and the arms' marks append

    def _sample(self) -> None:
        with self._lock:
            self.samples.append((time.perf_counter(), self.read()))

    def mark(self) -> None:
        """A reading now (a hand-off between a paired process's arms); a failing read is
        left to the sampler's readings around it."""
        with contextlib.suppress(Exception):
            self._sample()

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


def gpu_counter(uuid: str | Sequence[str] | None = None, nvml: Any = None) -> Counter | None:
    """A counter of the GPU ``uuid`` (the only one when None), or of every GPU of a list of
    UUIDs (their sum: a cell on N GPUs draws the energy of N boards); None without NVML, or
    when any of them is not found or not counted."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")  # nvidia-ml-py
        except ImportError:
            return None
    wanted = [uuid] if isinstance(uuid, str) else list(uuid) if uuid is not None else None
    try:
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        if wanted is None:
            chosen = handles if len(handles) == 1 else []
        else:
            by_uuid = {_uuid(nvml, h): h for h in handles}
            chosen = [by_uuid[u] for u in wanted if u in by_uuid]
            if len(chosen) != len(wanted) or len(set(wanted)) != len(wanted):
                return None
        if not chosen:
            return None
        reads = [nvml_counter(nvml, h) for h in chosen]
    except Exception:
        return None
    if any(r is None for r in reads):
        return None
    counted = [r for r in reads if r is not None]
    return Counter(lambda: sum(r() for r in counted), "nvml")


def _uuid(nvml: Any, handle: Any) -> str:
    u = nvml.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


def start(gpu: bool, uuid: str | Sequence[str] | None) -> Counter | None:
    """A running counter of the devices that run the cell: the GPU ``uuid``'s (NVML; a list:
    every GPU the process trains on, summed) for a cell on GPUs, the CPU packages' (RAPL) for
    a cell on the CPU. A GPU cell whose GPUs are not all known (``uuid`` None) counts nothing:
    another device's joules, or one device's for N devices' examples, would be charged."""
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
