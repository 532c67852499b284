"""Energy belongs to the device that ran the cell (issue 34, Step 19).

A GPU cell's joules come from that GPU's NVML counter, matched by UUID or PCI bus id to the
device the framework used (``CUDA_VISIBLE_DEVICES`` respected); a CPU cell's from the CPU
package (RAPL) or nowhere, never from an idle GPU beside it; where the GPU cannot be told
apart nothing is charged. NVML cannot exist on this machine: it is replaced at the thinnest
seam (the list of GPUs NVML would report, and a counter object).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mxbench.bench import energy, probe

TWO = [
    {"index": 0, "name": "NVIDIA H100", "uuid": "GPU-aaaa-0", "bus_id": "0:18:00.0"},
    {"index": 1, "name": "NVIDIA H100", "uuid": "GPU-bbbb-1", "bus_id": "0:3b:00.0"},
]
MIXED = [TWO[0], {**TWO[1], "name": "NVIDIA A100"}]


@pytest.mark.parametrize(
    ("gpus", "identity", "env", "expected"),
    [
        (TWO, {"uuid": "bbbb-1"}, {}, 1),  # PyTorch's uuid, without NVML's GPU- prefix
        (TWO, {"bus_id": "0000:3b:00.0"}, {}, 1),  # a framework's bus id, its own spelling
        (TWO, {"bus_id": "0000:18:00.0"}, {"CUDA_VISIBLE_DEVICES": "1"}, 0),  # framework wins
        (TWO, {}, {"CUDA_VISIBLE_DEVICES": "1"}, 1),  # identical GPUs: NVML's order
        (TWO, {}, {"CUDA_VISIBLE_DEVICES": "1,0"}, 1),  # the framework's first device
        (TWO, {}, {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, 1),  # a UUID prefix
        (MIXED, {}, {"CUDA_VISIBLE_DEVICES": "1"}, None),  # CUDA's fastest-first order
        (MIXED, {}, {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, 1),
        (TWO, {}, {"CUDA_VISIBLE_DEVICES": "MIG-1234"}, None),
        (TWO, {}, {}, 0),  # nothing set: the framework's device 0, identical GPUs
        (MIXED, {}, {}, None),  # nothing set, CUDA's fastest-first order: no guess
        (TWO[:1], {}, {}, 0),  # the only GPU
    ],
)
def test_the_used_gpu_is_matched_not_guessed(
    gpus: list[dict[str, Any]], identity: dict[str, str], env: dict[str, str], expected: int | None
) -> None:
    found = probe.used_gpu(gpus, identity, env)
    assert (found["index"] if found else None) == expected


def test_bus_ids_have_one_spelling() -> None:
    assert probe.bus_id("00000000:3B:00.0") == probe.bus_id("0000:3b:00.0") == "0:3b:00.0"
    assert probe.bus_id("3b:00.0") == "0:3b:00.0"
    assert probe.bus_id("not a bus") is None


class FakeNvml:
    """NVML's energy calls for two GPUs (what cannot exist here)."""

    def __init__(self) -> None:
        self.read: list[int] = []

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return TWO[h]["uuid"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self.read.append(h)
        return 1000 * (h + 1)


def test_a_gpu_cell_reads_its_own_gpu_on_a_host_of_several() -> None:
    nvml = FakeNvml()
    counter = energy.gpu_counter("GPU-bbbb-1", nvml=nvml)
    assert counter is not None and counter.source == "nvml"
    assert counter.read() == 2.0 and set(nvml.read) == {1}  # GPU 1's counter, no other
    assert energy.gpu_counter(None, nvml=nvml) is None  # two GPUs: none is taken for it


def test_a_cpu_cell_never_reads_a_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no(*_: Any, **__: Any) -> None:
        raise AssertionError("a CPU cell read a GPU's counter")

    monkeypatch.setattr(energy, "gpu_counter", no)
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "energy_uj").write_text("5000000\n")
    monkeypatch.setattr(energy, "POWERCAP", tmp_path)
    counter = energy.start(gpu=False, uuid="GPU-aaaa-0")
    assert counter is not None and counter.source == "rapl"
    counter.stop()


def test_a_gpu_cell_whose_gpu_is_unknown_counts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no(*_: Any, **__: Any) -> None:
        raise AssertionError("a GPU cell fell back to the CPU package")

    monkeypatch.setattr(energy, "cpu_counter", no)
    assert energy.start(gpu=True, uuid=None) is None
