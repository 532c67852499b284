"""Windows given back the CPU other processes took (mxbench.stats.load), held against what
is known: the same arm's undisturbed windows in the same process, and a quiet independent
reference for the committed series measured under load (benchmarks/load_adjustment.py)."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from mxbench.matrix.params import Params
from mxbench.records import codec
from mxbench.records.record import Device, Interference, Pairing, Record, Window
from mxbench.report import tables
from mxbench.report.diagnosis import rules
from mxbench.stats import load
from report_records import rec, typed_all

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
# (series, its quiet reference: benchmarks/reference_loop.py, committed beside it)
AVX2 = {8: 0.090, 32: 0.081}
NATIVE = {8: 1.316, 32: 1.473}
BURSTY = {
    "cpu-issue48-series/avx2-only/bursty-runs": AVX2,
    "cpu-issue48-share/s54/avx2-only/bursty-runs": AVX2,
    "cpu-issue48-series/native/bursty-runs": NATIVE,
    "cpu-issue48-share/s54/native/bursty-runs": NATIVE,
}
QUIET = [
    "cpu-issue48-series/avx2-only/quiet-runs",
    "cpu-issue48-share/s54/avx2-only/none-runs",
    "cpu-issue48-series/native/quiet-runs",
    "cpu-issue48-share/s54/native/none-runs",
]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = ROOT / "benchmarks" / "load_adjustment.py"
    spec = importlib.util.spec_from_file_location("load_adjustment", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runs(series: str) -> list[list[Record]]:
    out = []
    for run in sorted((RECORDS / series).iterdir()):
        lines = [x for f in sorted(run.rglob("*.jsonl")) for x in f.read_bytes().splitlines()]
        out.append([codec.decode(x) for x in lines if x.strip()])
    return out


def arms(records: list[Record]) -> list[tuple[list[Window], int]]:
    """Every paired arm's windows in the records, with the CPUs the machine had."""
    return [
        (r.pairing.windows, r.cpu.logical_cpus or 1)
        for r in records
        if r.status == "ok" and r.pairing is not None and r.pairing.windows
    ]


def test_a_disturbed_window_given_back_its_cpu_takes_what_the_arms_quiet_windows_take() -> None:
    """Per window, against the truth of the same process: an arm's undisturbed windows.
    Under the bursty load, each disturbed window's time on an idle machine is that arm's
    quiet time (median error under 6%, where as measured it is 40%+ off)."""
    measured, idle = [], []
    for series in BURSTY:
        for records in runs(series):
            for windows, cores in arms(records):
                quiet = [w.ms for w in windows if not w.interference.disturbed]
                if len(quiet) < 3:
                    continue
                truth = statistics.median(quiet)
                given = load.idle_ms(windows, cores)
                for w in windows:
                    if w.interference.disturbed and (w.interference.others_cores or 0) >= 0.5:
                        measured.append(abs(w.ms / truth - 1))
                        idle.append(abs(given[w.round] / truth - 1))
    assert len(idle) >= 100, len(idle)
    assert statistics.median(measured) > 0.4, statistics.median(measured)
    assert statistics.median(idle) < 0.06, statistics.median(idle)


def test_the_bursty_series_agree_with_the_quiet_reference_once_given_back_their_cpu(
    bench: ModuleType,
) -> None:
    """Per run and batch size, the report's own path (clean rounds preferred, the interval
    over processes): given back their CPU, the loaded runs' estimates are within 20% of the
    quiet reference in at least 38 of 40 (as measured: 33); on the AVX2-only kind, where the
    load moved the ratio itself, 19 of 20 against 13."""
    tally: dict[str, list[int]] = {"measured": [0, 0], "idle": [0, 0], "avx2": [0, 0, 0]}
    for series, ref in BURSTY.items():
        for records in runs(series):
            for batch, (m, i) in bench.judged(records).items():
                ok_m, ok_i = bench.agrees(m, ref[batch]), bench.agrees(i, ref[batch])
                tally["measured"][0] += ok_m
                tally["idle"][0] += ok_i
                tally["measured"][1] += 1
                tally["idle"][1] += 1
                if "avx2" in series:
                    tally["avx2"][0] += ok_m
                    tally["avx2"][1] += ok_i
                    tally["avx2"][2] += 1
    assert tally["idle"][1] == 40 and tally["idle"][0] >= 38, tally
    assert tally["measured"][0] <= 34, tally  # the test can tell: without it, fewer agree
    assert tally["avx2"][1] >= 19 and tally["avx2"][0] <= 14, tally


def test_a_quiet_run_is_judged_as_measured(bench: ModuleType) -> None:
    """Where the machine was quiet the windows are (almost all) left as they were: every
    estimate within 1% of the measured one, the verdict the same."""
    n = 0
    for series in QUIET:
        for records in runs(series):
            for _, (m, i) in bench.judged(records).items():
                assert m is not None and i is not None
                assert i.verdict == m.verdict and abs(i.value / m.value - 1) < 0.01, (series, m, i)
                n += 1
    assert n == 40


def window(r: int, ms: float, own: float, others: float, disturbed: bool) -> Window:
    return Window(round=r, position=0, steps=4, ms=ms, start_s=float(r),
                  interference=Interference(own_cores=own, others_cores=others,
                                            steal_cores=0.0, disturbed=disturbed))  # fmt: skip


def test_an_arm_with_cores_to_spare_is_not_scaled() -> None:
    """One core busy elsewhere on a 4-core machine leaves an arm that keeps 1.5 busy its
    cores: nothing to give back, no idle ratios (the measured ones stand)."""
    busy = [window(i, 100.0, 1.5, 1.0 if i % 2 else 0.0, bool(i % 2)) for i in range(6)]
    assert load.parallelism(busy, 4) == 1.5
    assert load.idle_ms(busy, 4) == {w.round: w.ms for w in busy}
    assert load.idle_ratios(busy, busy, 4) == []


def test_the_hypervisors_steal_counts_as_cpu_taken() -> None:
    w = window(0, 200.0, 1.0, 0.0, True)
    stolen = msgspec.structs.replace(w, interference=Interference(
        own_cores=1.0, others_cores=0.0, steal_cores=1.0, disturbed=True))  # fmt: skip
    quiet = window(1, 100.0, 2.0, 0.0, False)
    assert load.idle_ms([stolen, quiet], 2) == {0: 100.0, 1: 100.0}
    assert load.idle_ms([w, quiet], 2) == {0: 200.0, 1: 100.0}  # nothing taken: as it ran


def paired(kind: str, windows: list[Window]) -> list[Record]:
    def one(policy: str, ratios: list[float]) -> Record:
        return Record(cell=policy, host="h", params=Params(policy=policy), status="ok",
                      device=Device(kind=kind),
                      pairing=Pairing(group="g", ratios=ratios, windows=list(windows)))  # fmt: skip

    return [one("float32", []), one("mixed_bfloat16", [1.0] * len(windows))]


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_only_a_cpu_devices_windows_are_given_back_cpu(kind: str) -> None:
    """On a GPU the CPU others take is not the device's: the bench leaves its ratios as
    measured. (On a CPU, the same windows give idle ratios.)"""
    from mxbench.bench.evidence.interference import cores
    from mxbench.bench.process.paired import _idle_rounds

    n = cores()
    loaded = [window(i, 100.0 * (2.0 if i % 2 else 1.0), n / 2 if i % 2 else n, n / 2, bool(i % 2))
              for i in range(6)]  # fmt: skip
    base = [window(i, 50.0, n, 0.0, False) for i in range(6)]
    recs = paired(kind, loaded)
    recs[0].pairing = Pairing(group="g", windows=base)
    _idle_rounds(recs)
    arm = recs[1].pairing
    assert arm is not None
    if kind == "gpu":
        assert arm.idle_ratios == [] and arm.speedups == arm.ratios
    else:
        assert arm.idle_ratios == [0.5] * 6 and arm.speedups == arm.idle_ratios


def busy_table(idle: bool) -> tables.Table:
    ws = [{"round": i, "position": 0, "steps": 5, "ms": 100.0, "start_s": float(i),
           "interference": {"others_cores": 0.8, "own_cores": 1.2, "disturbed": True}}
          for i in range(8)]  # fmt: skip

    def arm(group: str, policy: str, ratios: list[float]) -> dict[str, Any]:
        pairing: dict[str, Any] = {
            "group": group, "arms": ["float32", "mixed_bfloat16"], "ratios": ratios,
            "clean": [False] * 8, "windows": ws,
        }  # fmt: skip
        if idle and ratios:
            pairing["idle_ratios"] = [0.08] * 8
        return rec("h", policy, 32, median=100.0, pairing=pairing)

    recs = [arm(g, p, [] if p == "float32" else [0.1] * 8)
            for g in ("a", "b", "c") for p in ("float32", "mixed_bfloat16")]  # fmt: skip
    (t,) = tables.build(typed_all(recs))
    return t


def test_the_report_says_both_figures_where_windows_were_given_back_cpu() -> None:
    said = rules.machine_in_use(busy_table(idle=True))
    assert said is not None
    assert "slower (12.50× slower on an idle machine, 10.00× slower as measured)" in said, said
    assert "given back the CPU the others took" in said
    plain = rules.machine_in_use(busy_table(idle=False))
    assert plain is not None
    assert "idle machine" not in plain and "given back" not in plain, plain
