"""Pure parts of the bench: argument rules, timing summary, log parsing, device logic.

No TensorFlow here; NVML is replaced by a fake module at the thinnest seam (the calls
nvidia-ml-py makes), since no GPU exists on this machine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from mxbench.bench.evidence.gpu_health import HealthSampler
from mxbench.bench.evidence.probe import cpu_info, device_record, nvml_gpus
from mxbench.bench.evidence.probe_tf import parse_not_compiled_for
from mxbench.bench.process.cell import CellState, _gpu_util, is_oom
from mxbench.bench.process.timing import Phases, StepLog, split, summarize
from mxbench.matrix.params import Params
from mxbench.records.codec import new_record
from mxbench.records.record import Device

from mxbench.bench import params as bp
from mxbench.errors import UsageError
from mxbench.models import blog_cnn


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"batch_size": 0}, "--batch-size 0"),
        ({"policy": "float8"}, "--policy 'float8'"),
        ({"image_size": 4}, "--image-size 4"),
        ({"model": "so-cnn", "image_size": 16}, "--image-size: 16 px is below so-cnn's smallest"),
        ({"model": "so-cnn", "image_width": 16}, "--image-width: 16 px is below so-cnn's smallest"),
        ({"steps": 0}, "--steps 0"),
        ({"warmup_steps": -1}, "--warmup-steps -1"),
        ({"jit_compile": "yes"}, "--jit-compile 'yes'"),
        ({"model": "resnet"}, "--model 'resnet'"),
        ({"data": "/nonexistent/imagenette"}, "no such directory"),
    ],
)
def test_bad_arguments_name_the_option(change: dict, needle: str) -> None:
    with pytest.raises(UsageError) as err:
        bp.validate(Params(**change))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_data_dir_needs_train_images(tmp_path) -> None:
    with pytest.raises(UsageError, match="no train/ folder"):
        bp.validate(Params(data=str(tmp_path)))
    (tmp_path / "train" / "n01").mkdir(parents=True)
    with pytest.raises(UsageError, match="no images under train"):
        bp.validate(Params(data=str(tmp_path)))


def test_defaults_are_the_experiments() -> None:
    p = bp.validate(Params())
    assert (p.image_size, p.warmup_steps, p.steps, p.data) == (256, 5, 50, "synthetic")


def test_a_model_takes_its_own_input_where_none_is_named() -> None:
    assert bp.validate(Params(model="so-cnn")).image_hw == (224, 336)  # the question's
    assert bp.validate(Params(model="so-cnn", image_size=64)).image_hw == (64, 64)
    assert bp.validate(Params(model="so-cnn", image_width=64)).image_hw == (224, 64)
    assert bp.validate(Params(model="resnet50")).image_hw == (256, 256)


def test_summary_statistics() -> None:
    s = summarize([0.010, 0.030, 0.020, 0.040, 0.100])
    assert s == {
        "median": 30.0, "p25": 20.0, "p75": 40.0, "mean": 40.0, "min": 10.0, "max": 100.0, "n": 5,
        "samples": [10.0, 30.0, 20.0, 40.0, 100.0],
    }  # fmt: skip
    one = summarize([0.005])
    assert one["median"] == one["p25"] == one["p75"] == 5.0 and one["n"] == 1


def test_split_excludes_warmup_and_keeps_every_timed_step() -> None:
    log = StepLog(begin=10.0, ends=[13.0, 13.5, 14.0, 14.25, 14.75])
    parts = split(log, warmup_steps=2)
    assert parts["first_step_s"] == 3.0
    assert parts["warmup_s"] == 3.5
    assert parts["timed"] == [0.5, 0.25, 0.5]
    assert parts["first_timed_start"] == 13.5
    assert parts["window_s"] == 1.25  # from the warm-up's end to the last step's end
    assert split(log, 0)["timed"][0] == 3.0  # no warm-up: the first step is timed
    # the window begins after the sync that waited for the warm-up, when there was one
    log.window_start = 13.6
    assert split(log, 2)["window_s"] == pytest.approx(1.15)


_ASYNC = """
import os, sys, threading
os.environ["KERAS_BACKEND"] = sys.argv[1]
import keras, numpy as np
from mxbench.bench.process.timing import StepLog, split, step_timer
threads, log = set(), StepLog()
timer = step_timer(log, lambda k: threads.add(threading.current_thread().name), warmup_steps=2)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
model.compile(loss="mse", optimizer="sgd")
x, y = np.random.rand(64, 8).astype("float32"), np.random.rand(64, 4).astype("float32")
model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[timer])
parts = split(log, 2)
print(len(log.ends), len(log.mean_losses), parts["window_s"] > 0, log.window_start is not None,
      sorted(threads) != ["MainThread"], parts["window_s"] < log.ends[-1] - log.begin)
"""


def test_the_step_timer_keeps_asynchronous_dispatch_where_keras_allows_it() -> None:
    """JAX: batch ends run on Keras's worker threads (no sync per step on the training
    thread), yet every step is stamped with its loss, and the window lies between two
    syncs within the steps' span. (TensorFlow's trainer keeps them on the training thread:
    test_bench.py times it end to end.)"""
    pytest.importorskip("jax")
    proc = subprocess.run([sys.executable, "-c", _ASYNC, "jax"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["8", "8", "True", "True", "True", "True"]


def test_per_step_loss_from_running_means() -> None:
    losses = [2.0, 1.0, 4.0, 0.5]
    means = [sum(losses[: i + 1]) / (i + 1) for i in range(len(losses))]
    log = StepLog(begin=0.0, ends=[1, 2, 3, 4], mean_losses=means)
    assert [round(log.step_loss(k), 9) for k in range(4)] == losses


GUARD_221 = (
    "I0000 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available "
    "CPU instructions in performance-critical operations.\nTo enable the following "
    "instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags."
)
GUARD_212 = (
    "I tensorflow/core/platform/cpu_feature_guard.cc:193] This TensorFlow binary is optimized "
    "with oneAPI Deep Neural Network Library (oneDNN) to use the following CPU instructions in "
    "performance-critical operations:  AVX2 FMA\nTo enable them in other operations, rebuild."
)
GUARD_115 = (
    "I tensorflow/core/platform/cpu_feature_guard.cc:141] Your CPU supports instructions that "
    "this TensorFlow binary was not compiled to use: AVX2 FMA"
)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (GUARD_221, ["AVX2", "AVX512F", "FMA"]),
        (GUARD_212, ["AVX2", "FMA"]),
        (GUARD_115, ["AVX2", "FMA"]),
        ("I0000 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use", []),
        ("W0000 some other log line", None),
    ],
)
def test_parse_tf_cpu_feature_line(log: str, expected: list[str] | None) -> None:
    assert parse_not_compiled_for(log) == expected


def test_cpu_info_reads_model_and_flags(tmp_path) -> None:
    f = tmp_path / "cpuinfo"
    f.write_text(
        "processor\t: 0\nmodel name\t: Test CPU\n"
        "flags\t\t: fpu fma avx2 sse sse2 tsc avx512_bf16 amx_bf16 hypervisor\n\n"
    )
    info = cpu_info(str(f))
    assert info["model"] == "Test CPU"
    # only the instruction sets that matter for training speed are kept
    assert info["flags"] == ["amx_bf16", "avx2", "avx512_bf16", "fma", "sse2"]
    assert info["cores"] >= 1


class FakeNvml:
    """The nvidia-ml-py calls the probe makes, answering for one Maxwell card."""

    def __init__(self, cc: tuple[int, int] = (5, 2)) -> None:
        self.cc = cc
        self.shutdown = False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.104.05"

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self.cc

    def nvmlDeviceGetName(self, h: int) -> str:
        return "Quadro M2200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=4 * 2**30)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "GPU-1234"

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=b"00000000:3B:00.0")


class BusyNvml(FakeNvml):
    """``gpus`` GPUs whose utilisation readings come from a script, then stay at the last."""

    def __init__(self, readings: list[int], gpus: int = 1) -> None:
        super().__init__((7, 0))
        self.readings, self.gpus, self.calls = readings, gpus, 0

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h}".encode()

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        value = self.readings[min(self.calls, len(self.readings) - 1)]
        if h == self.gpus - 1:
            self.calls += 1
        return SimpleNamespace(gpu=value, memory=0)


def test_nvml_probe_reads_every_field() -> None:
    fake = FakeNvml()
    gpus, driver = nvml_gpus(fake)
    assert driver == "535.104.05" and fake.shutdown
    assert gpus == [
        {"index": 0, "name": "Quadro M2200", "compute_capability": "5.2",
         "memory_bytes": 4 * 2**30, "uuid": "GPU-1234", "bus_id": "0:3b:00.0"}
    ]  # fmt: skip


def test_nvml_without_driver_is_no_gpu() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    assert nvml_gpus(NoDriver()) == ([], None)


def test_gpu_ignored_by_tensorflow_is_a_cpu_run() -> None:
    gpus, driver = nvml_gpus(FakeNvml((5, 2)))
    dev = device_record(
        nvml=gpus, driver=driver, framework_gpus=[], used_gpu=False, cpu_model="Xeon"
    )
    assert dev["kind"] == "cpu" and dev["name"] == "Xeon"
    assert dev["used_gpu"] is False
    assert dev["present_gpus"][0]["compute_capability"] == "5.2"


def test_gpu_used_takes_cc_from_nvml_and_cross_checks() -> None:
    gpus, driver = nvml_gpus(FakeNvml((7, 0)))
    fw = [{"name": "Tesla V100", "compute_capability": "7.0"}]
    dev = device_record(nvml=gpus, driver=driver, framework_gpus=fw, used_gpu=True, cpu_model="x")
    assert (dev["kind"], dev["compute_capability"], dev["cc_source"]) == ("gpu", "7.0", "nvml")
    assert dev["used_gpu"] is True and dev["uuid"] == "GPU-1234" and "cc_framework" not in dev
    no_nvml = device_record(nvml=[], driver=None, framework_gpus=fw, used_gpu=True, cpu_model="x")
    assert (no_nvml["compute_capability"], no_nvml["cc_source"]) == ("7.0", "tensorflow")


def _sampled(fake: BusyNvml, polls: int) -> tuple[HealthSampler, float]:
    """A sampler run on the fake NVML until it was polled ``polls`` times; its start time."""
    sampler = HealthSampler(fake, interval_s=0.005)
    t0 = time.perf_counter()
    assert sampler.start()
    while fake.calls < polls:
        time.sleep(0.005)
    sampler.stop()
    return sampler, t0


def test_util_sampler_polls_until_stopped_and_shuts_nvml_down() -> None:
    fake = BusyNvml([40, 60, 80, 100])
    sampler, t0 = _sampled(fake, 4)
    assert fake.shutdown and len(sampler.samples) >= 5  # polls, plus one last at stop
    assert [u["GPU-0"]["util"] for _, u in sampler.samples][:4] == [40, 60, 80, 100]
    every = [u["GPU-0"]["util"] for _, u in sampler.samples]
    assert sampler.median_pct(t0, time.perf_counter(), uuid=None) == statistics.median(every)
    assert sampler.median_pct(t0 - 10, t0 - 5, uuid=None) is None  # no sample in that window


def test_util_sampler_median_is_of_the_window_and_of_the_gpu_used() -> None:
    sampler = HealthSampler(BusyNvml([0], gpus=2), interval_s=0.1)
    sampler.start()
    sampler.stop()
    sampler.samples = [  # warm-up (compilation, idle GPU), then the timed steps
        (t, {"GPU-0": {"util": a}, "GPU-1": {"util": b}})
        for t, a, b in [(0.0, 5, 0), (1.0, 10, 0), (2.0, 70, 0), (2.1, 74, 0), (2.2, 90, 0),
                        (2.35, 72, 1)]
    ]  # fmt: skip
    # the timed window is 2.0 .. 2.3 s; a sample up to one interval later covers its end
    assert sampler.median_pct(2.0, 2.3, uuid="GPU-0") == 73.0
    assert sampler.median_pct(2.0, 2.3, uuid="GPU-1") == 0.0
    assert sampler.median_pct(2.0, 2.3, uuid=None) is None  # two GPUs: which one is unknown


def test_util_sampler_without_nvml_or_gpus_does_nothing() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    assert not HealthSampler(NoDriver()).start()
    assert not HealthSampler(BusyNvml([50], gpus=0)).start()
    sampler = HealthSampler(NoDriver())
    sampler.stop()  # never started: nothing to stop
    assert sampler.median_pct(0, 1e9, uuid=None) is None


class HotNvml(BusyNvml):
    """BusyNvml with clocks, power and temperature; the hot GPU power-caps then throttles
    for heat; some fields are not supported (as on older boards)."""

    def __init__(self, temps: list[int]) -> None:
        super().__init__([99])
        self.temps = temps

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1410 if clock == 1 else 1215

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 398_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 400_000

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self.temps[min(self.calls, len(self.temps) - 1)]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        t = self.temps[min(self.calls, len(self.temps) - 1)]
        return 0x4 | (0x40 if t >= 90 else 0) | 0x1  # power cap; heat; idle (not kept)


def test_health_sampler_records_clocks_power_heat_and_throttling() -> None:
    sampler, t0 = _sampled(HotNvml([80, 85, 91, 92]), 4)
    h = sampler.health(t0, time.perf_counter(), uuid=None)
    assert h is not None and h.samples == len(sampler.samples)
    assert (h.sm_clock_mhz, h.memory_clock_mhz) == (1410.0, 1215.0)
    assert (h.power_w, h.power_limit_w) == (398.0, 400.0)
    assert h.temperature_max_c == 92.0
    assert h.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
    # a board without clocks / power / throttle reasons: the rest still comes
    bare = HealthSampler(BusyNvml([50]), interval_s=0.005)
    assert bare.start()
    bare.stop()
    h = bare.health(0, time.perf_counter(), uuid=None)
    assert h is not None and h.sm_clock_mhz is None and h.throttle_reasons == []
    assert bare.median_pct(0, time.perf_counter(), uuid=None) == 50.0


def test_gpu_util_is_recorded_for_gpu_runs_only() -> None:
    sampler = HealthSampler(BusyNvml([0]))
    sampler._handles = {"GPU-0": 0}
    sampler.samples = [(1.0, {"GPU-0": {"util": 55}}), (1.1, {"GPU-0": {"util": 65}})]
    state = CellState(Phases(0.0), util=sampler, timed_window=(1.0, 1.1))
    gpu = new_record(params=Params(), status="ok")
    gpu.device = Device(kind="gpu", uuid="GPU-0")
    _gpu_util(gpu, state)
    assert gpu.metrics.gpu_util_pct == 60.0
    assert gpu.metrics.gpu_health is not None and gpu.metrics.gpu_health.samples == 2
    cpu = new_record(params=Params(), status="ok")
    cpu.device = Device(kind="cpu")
    _gpu_util(cpu, state)  # a GPU was there, but TensorFlow ran on the CPU
    assert cpu.metrics.gpu_util_pct is None and cpu.metrics.gpu_health is None


def test_flops_match_the_published_estimate() -> None:
    # experiment.md: about 2.9 GFLOP forward per 256x256 image, ~3x per training step
    assert 2.85e9 < blog_cnn.forward_flops(image_size=256, image_width=256) < 2.95e9


def test_oom_classification() -> None:
    class ResourceExhaustedError(Exception): ...

    assert is_oom(ResourceExhaustedError("x"))
    assert is_oom(MemoryError())
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert not is_oom(ValueError("shapes (3,) and (4,) not aligned"))
