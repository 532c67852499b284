"""Energy belongs to the device that ran the cell (issue 34, Step 19).

A GPU cell's joules come from that GPU's NVML counter, matched by UUID or PCI bus id to the
device the framework used (``CUDA_VISIBLE_DEVICES`` respected); a CPU cell's from the CPU
package (RAPL) or nowhere, never from an idle GPU beside it; where the GPU cannot be told
apart nothing is charged. NVML cannot exist on this machine: it is replaced at the thinnest
seam (the list of GPUs NVML would report, and a counter object).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mxbench.bench.evidence import energy, probe

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


@pytest.mark.parametrize(
    ("gpus", "env", "count", "expected"),
    [
        (TWO, {}, 2, [0, 1]),  # nothing set: devices 0 and 1
        (TWO, {"CUDA_VISIBLE_DEVICES": "1,0"}, 2, [1, 0]),
        (TWO, {"CUDA_VISIBLE_DEVICES": "1"}, 2, None),  # two devices, one visible: no figure
        (TWO, {"CUDA_VISIBLE_DEVICES": "0,0"}, 2, None),  # not two boards
        (MIXED, {}, 2, None),  # CUDA's fastest-first order: no guess
        (TWO, {"CUDA_VISIBLE_DEVICES": "GPU-bbbb,GPU-aaaa"}, 2, [1, 0]),
        (TWO, {"CUDA_VISIBLE_DEVICES": "1"}, 1, [1]),  # one device: used_gpu's rule
    ],
)
def test_a_cell_on_several_gpus_matches_every_one_or_none(
    gpus: list[dict[str, Any]], env: dict[str, str], count: int, expected: list[int] | None
) -> None:
    found = probe.used_gpus(gpus, count, {}, env)
    assert ([g["index"] for g in found] if found else None) == expected


def test_a_counter_of_several_gpus_is_their_sum_or_nothing() -> None:
    """Energy per image on N devices: N boards' joules over N devices' examples. One GPU's
    counter divided by every device's examples read N times too low."""
    nvml = FakeNvml()
    both = energy.gpu_counter(["GPU-aaaa-0", "GPU-bbbb-1"], nvml=nvml)
    assert both is not None and both.read() == 1.0 + 2.0  # 1000 mJ and 2000 mJ
    assert energy.gpu_counter(["GPU-aaaa-0", "GPU-cccc-9"], nvml=nvml) is None
    assert energy.gpu_counter(["GPU-aaaa-0", "GPU-aaaa-0"], nvml=nvml) is None


def test_a_process_is_charged_its_own_devices_examples() -> None:
    """The examples a process's joules are divided by: its own devices' (scale.process_batch),
    for every layout a cell can have (one process driving N devices, one process per device,
    several nodes): N devices' joules over N devices' examples."""
    from mxbench.matrix.params import Params

    from mxbench.matrix import scale

    for backend, devices, nodes, scaling, per_process in [
        ("tensorflow", 2, 1, "weak", 2 * 32),  # one process drives both devices
        ("torch", 2, 1, "weak", 32),  # one process per device
        ("torch", 2, 2, "strong", 32 // 4),  # 4 devices share the global 32
        ("jax", 1, 1, "weak", 32),
    ]:
        p = Params(backend=backend, devices=devices, nodes=nodes, scaling=scaling,
                   batch_size=32)  # fmt: skip
        counted = scale.total_devices(p) // scale.processes(p)  # the GPUs a process reads
        assert scale.process_batch(p) == per_process, (backend, devices, nodes)
        assert scale.process_batch(p) == scale.per_device_batch(p) * counted


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


# A CPU package whose power depends on which arm of a paired process holds the turn: the
# bench's own coordinator (paired.Turnstile.grant) switches it, a thread in the same process
# advances energy_uj every 5 ms. RAPL cannot exist on this VM; the file it reads is the seam.
_WITH_ARM_POWER = """
import os, sys, threading, time
from pathlib import Path
from mxbench.bench.evidence import energy
from mxbench.bench.process import windows as paired
root, watts = Path(sys.argv.pop(1)), [float(w) for w in sys.argv.pop(1).split(",")]
energy.POWERCAP = root
zone = root / "intel-rapl:0"
zone.mkdir(parents=True)
(zone / "max_energy_range_uj").write_text(f"{2**40}\\n")
lock, now = threading.Lock(), {"arm": None, "uj": 0.0, "t": time.monotonic()}

def advance(arm=None, switch=False):
    with lock:
        t = time.monotonic()
        w = watts[now["arm"]] if now["arm"] is not None else 10.0
        now["uj"] += (t - now["t"]) * w * 1e6
        now["t"] = t
        if switch:
            now["arm"] = arm
        tmp = zone / "energy_uj.tmp"
        tmp.write_text(f"{int(now['uj'])}\\n")
        os.replace(tmp, zone / "energy_uj")

advance()
grant = paired.Turnstile.grant
def granted(self, arm):
    advance(arm, switch=True)
    grant(self, arm)
paired.Turnstile.grant = granted

def tick():
    while True:
        time.sleep(0.005)
        advance()
threading.Thread(target=tick, daemon=True).start()
from mxbench.cli import main
sys.argv = ["mxbench", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_a_paired_arm_is_charged_its_own_windows_energy(tmp_path: Path) -> None:
    """Paired (the default design): each arm's joules are its own windows', read at the
    hand-offs between arms: with float32 drawing 30 W and mixed_bfloat16 90 W while each
    holds the turn, an arm's joules per step are its own wattage x its mean window time per
    step. Readings every 0.1 s interpolated across 0.25 s windows mixed the arms (and so did
    a test with one wattage for both, which could not fail)."""
    pytest.importorskip("torch")
    watts = {"float32": 30.0, "mixed_bfloat16": 90.0}
    args = ["--backend", "torch", "--image-size", "32", "--batch-size", "8", "--steps",
            "400", "--warmup-steps", "2", "--timed-s", "2.5", "--profile", "off",
            "--check", "off", "--pair-with", "mixed_bfloat16"]  # fmt: skip
    run = subprocess.run([sys.executable, "-c", _WITH_ARM_POWER, str(tmp_path),
                          ",".join(str(w) for w in watts.values()), "bench", *args],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    recs = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    recs = [r for r in recs if not r.get("pending")]
    assert [r["params"]["policy"] for r in recs] == list(watts)
    for r in recs:
        m, windows = r["metrics"], r["pairing"]["windows"]
        steps = sum(w["steps"] for w in windows)
        own_s = sum(w["ms"] * w["steps"] for w in windows) / 1000
        truth = watts[r["params"]["policy"]] * own_s / steps
        assert m["energy_source"] == "rapl"
        assert m["energy_j_per_step"] == pytest.approx(truth, rel=0.08), r["params"]["policy"]
        assert m["energy_j_per_image"] == pytest.approx(m["energy_j_per_step"] / 8, rel=1e-3)
