"""Energy belongs to the device that ran the cell (issue 34, Step 19).

A GPU cell's joules come from that GPU's NVML counter, matched by UUID or PCI bus id to the
device the framework used (``CUDA_VISIBLE_DEVICES`` respected); a CPU cell's from the CPU
package (RAPL) or nowhere, never from an idle GPU beside it; where the GPU cannot be told
apart nothing is charged. NVML cannot exist on this machine: it is replaced at the thinnest
seam (the list of GPUs NVML would report, and a counter object).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
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


class _SteadyPackage:
    """A CPU package drawing a known, steady power: a powercap tree whose ``energy_uj`` a
    thread advances (replaced atomically, as the kernel's file never reads half-written).
    RAPL cannot exist on this VM; the file it reads is the seam."""

    def __init__(self, root: Path, watts: float) -> None:
        self.zone, self.watts = root / "intel-rapl:0", watts
        self.zone.mkdir(parents=True)
        (self.zone / "max_energy_range_uj").write_text(f"{2**40}\n")
        self._stop, self._t0 = threading.Event(), time.monotonic()
        self._write()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _write(self) -> None:
        tmp = self.zone / "energy_uj.tmp"
        tmp.write_text(f"{int((time.monotonic() - self._t0) * self.watts * 1e6)}\n")
        os.replace(tmp, self.zone / "energy_uj")

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self._write()

    def __enter__(self) -> _SteadyPackage:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


_WITH_POWERCAP = """
import sys
from pathlib import Path
from mxbench.bench import energy
energy.POWERCAP = Path(sys.argv.pop(1))
from mxbench.cli import main
sys.argv = ["mxbench", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_a_paired_arm_is_charged_its_own_windows_energy(tmp_path: Path) -> None:
    """Paired (the default design): each arm's joules are its own windows', not the whole
    interleaved span's (which would charge each arm about twice). At a steady 50 W an arm's
    joules per step are 50 W x its mean window time per step."""
    pytest.importorskip("torch")
    args = ["--backend", "torch", "--image-size", "32", "--batch-size", "8", "--steps",
            "400", "--warmup-steps", "2", "--timed-s", "1.5", "--profile", "off",
            "--check", "off", "--pair-with", "mixed_bfloat16"]  # fmt: skip
    with _SteadyPackage(tmp_path, watts=50.0):
        run = subprocess.run([sys.executable, "-c", _WITH_POWERCAP, str(tmp_path), "bench",
                              *args], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    recs = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    recs = [r for r in recs if not r.get("pending")]
    assert [r["params"]["policy"] for r in recs] == ["float32", "mixed_bfloat16"]
    for r in recs:
        m, windows = r["metrics"], r["pairing"]["windows"]
        steps = sum(w["steps"] for w in windows)
        own_s = sum(w["ms"] * w["steps"] for w in windows) / 1000
        assert m["energy_source"] == "rapl"
        assert m["energy_j_per_step"] == pytest.approx(50.0 * own_s / steps, rel=0.1)
        assert m["energy_j_per_image"] == pytest.approx(m["energy_j_per_step"] / 8, rel=1e-3)
