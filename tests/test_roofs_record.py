"""The record carries the roofs of its device (``record.roofs``, issue 50): measured in the
bench process on a cold roofs cache, read from it on a warm one, a corrupt cache file
handled; and every FLOP count's source (``model.flops_by_source``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench_helpers import SMALL, BenchRun, run_bench
from mxbench.bench.evidence.roofline import for_record
from mxbench.bench.model.facts import flops_by_source, pick
from mxbench.matrix.params import Params
from mxbench.records.codec import decode
from mxbench.records.record import Device, Record
from mxbench.roofs import cache, collect, host
from mxbench.roofs.model import Roof

ANNOUNCED = "measuring this host's tensorflow roofs once"


# ---- FLOPs from every source ---------------------------------------------------------------


def test_every_flop_source_is_kept_and_a_non_positive_one_is_never_picked() -> None:
    found = flops_by_source({"formula": None, "xla": -1.0, "analytic": 5e6})
    assert found == {"xla": -1.0, "analytic": 1.5e7}  # training = 3 x forward; -1 as it came
    assert pick(found) == "analytic"
    both = flops_by_source({"formula": 4e6, "xla": 4.4e6, "analytic": 3e6})
    assert both == {"formula": 1.2e7, "xla": pytest.approx(1.32e7), "analytic": 9e6}
    assert pick(both) == "formula"
    assert pick(flops_by_source({"xla": 2e6, "analytic": 1e6})) == "xla"
    assert pick(flops_by_source({"xla": 0.0})) is None


# ---- the cache, read in this process (no probe: a fast test would fail if one started) ------


def _quick_identity() -> dict[str, Any]:
    return collect.kept("tensorflow", host.read())[1]


def _measured(r: collect.Roofs) -> list[Any]:
    return [x for x in r.roofs if x.provenance == "measured"]


GOOD = {
    "backend": "tensorflow", "version": "2.x", "gpu": False, "measured_at": "2026-11-29T09:00:00Z",
    "matmul": {"float32": {"tflops": 0.18, "best_n": 512, "per_size": {"256": 0.1, "512": 0.18},
                           "runs": 20}},
    "bandwidth": {"gbs": 30.0, "runs": 5, "bytes": 2**25, "stream": "y = 2x"},
}  # fmt: skip


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"identity": {"another": 1}, "measured": GOOD}),
        "IDENT-BAD-FIGURES",  # the right identity, figures that do not read
    ],
    ids=["not-json", "not-an-object", "another-identity", "bad-figures"],
)
def test_a_corrupt_cache_file_is_no_measurement(
    content: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    ident = _quick_identity()
    if content == "IDENT-BAD-FIGURES":
        bad = {**GOOD, "matmul": {"float32": {"tflops": 0.18}}}  # no sizes, no runs
        content = json.dumps({"identity": ident, "measured": bad}, default=str)
    cache.path(ident).write_text(content)
    found = collect.for_backend("tensorflow", measure=False)
    assert not found.errors and not found.measured and not found.cached
    assert not _measured(found)
    assert any(r.provenance == "formula" and r.dtype == "float32" for r in found.roofs)


def test_a_kept_measurement_is_read_not_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    ident = _quick_identity()
    cache.save(ident, GOOD)
    found = collect.for_backend("tensorflow")  # measure allowed: the cache answers first
    assert found.cached == {"tensorflow": str(cache.path(ident))} and not found.measured
    (f32, bw) = _measured(found)
    assert (f32.dtype, f32.value, bw.kind, bw.value) == ("float32", 0.18, "bandwidth", 30.0)
    assert "measured 2026-11-29T09:00:00Z" in f32.source


def test_a_failed_probe_is_kept_as_failed_not_run_again_by_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    failed = {"backend": "tensorflow", "error": "the probe ran past 60 s",
              "measured_at": "2026-11-29T09:00:00Z"}  # fmt: skip
    cache.save(_quick_identity(), failed)
    found = collect.for_backend("tensorflow")  # measure allowed: the kept failure answers
    assert not found.measured and not _measured(found)
    why = found.errors["tensorflow"]
    assert "ran past 60 s" in why and "--refresh" in why and "2026-11-29T09:00:00Z" in why


# ---- which roofs a record keeps -------------------------------------------------------------


def _roof(device: str, dtype: str, provenance: str, **kw: Any) -> Roof:
    return Roof(device=device, dtype=dtype, value=1.0, provenance=provenance,
                source="s", **kw)  # fmt: skip


CPU, GPU = "cpu: Xeon (8 core(s))", "NVIDIA H200"
FOUND = collect.Roofs(cpu=CPU, roofs=[
    _roof(CPU, "float32", "formula"),
    _roof(CPU, "float32", "measured", backend="jax"),
    _roof(GPU, "bfloat16", "measured", backend="jax"),
    _roof(GPU, "bfloat16", "measured", backend="torch"),
    _roof(GPU, "bfloat16", "formula"),
    _roof(GPU, "bfloat16", "datasheet", dense=True),
    _roof(GPU, "bfloat16", "datasheet", dense=False),
])  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "backend", "kept"),
    [
        ("gpu", "jax", [(GPU, "measured"), (GPU, "formula"), (GPU, "datasheet")]),
        ("cpu", "jax", [(CPU, "formula"), (CPU, "measured")]),
        ("cpu", "torch", [(CPU, "formula")]),
    ],
)
def test_a_record_keeps_its_devices_roofs_measured_by_its_backend_dense_only(
    kind: str, backend: str, kept: list[tuple[str, str]]
) -> None:
    rec = Record(params=Params(backend=backend), status="ok", device=Device(kind=kind))
    roofs = for_record(FOUND, rec)
    assert [(r.device, r.provenance) for r in roofs] == kept
    assert all(r.dense is not False and r.backend in (None, backend) for r in roofs)
    assert for_record(None, rec) == []


# ---- a real bench process, cold cache then warm ---------------------------------------------


@dataclass
class Runs:
    cold: BenchRun
    warm: BenchRun
    where: Path
    kept_after_cold: dict[str, int]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    pytest.importorskip("tensorflow")
    where = tmp_path_factory.mktemp("roofs-cache")
    env = {**os.environ, "MXBENCH_ROOFS_CACHE": str(where)}
    args = ("--policy", "mixed_bfloat16", *SMALL, "--profile", "off", "--check", "off")
    cold = run_bench(*args, env=env)
    kept = {p.name: p.stat().st_mtime_ns for p in where.glob("*.json")}
    warm = run_bench(*args, env=env)
    return Runs(cold, warm, where, kept)


def _record(run: BenchRun) -> Record:
    assert run.returncode == 0, run.stderr[-3000:]
    rec = decode(json.dumps(run.record))
    assert isinstance(rec, Record) and rec.status == "ok", rec
    return rec


@pytest.mark.process
def test_a_real_runs_record_carries_measured_and_formula_roofs(runs: Runs) -> None:
    rec = _record(runs.cold)
    assert ANNOUNCED in runs.cold.stderr  # the one measurement says so
    by = {(r.provenance, r.kind, r.dtype): r for r in rec.roofs}
    device = rec.roofs[0].device
    assert device.startswith("cpu: ") and {r.device for r in rec.roofs} == {device}
    for dtype in ("float32", "bfloat16"):  # float32 and the policy's compute dtype
        m = by[("measured", "matmul", dtype)]
        assert m.backend == "tensorflow" and m.value and m.value > 0, m
        assert m.source.startswith("tensorflow ") and " measured 20" in m.source
        assert m.detail and "square matmuls" in m.source
    assert (by[("measured", "bandwidth", "float32")].value or 0) > 0
    f32 = by[("formula", "matmul", "float32")]
    assert f32.value and f32.value > 0 and "FLOP/cycle/core" in f32.source and f32.native
    assert not any(r.provenance == "datasheet" for r in rec.roofs)  # a CPU: no datasheet
    assert rec.metrics.phases_s["roofs"] > 0
    # written compactly (defaults left out) and read back as the same roofs
    line = runs.cold.stdout.strip().splitlines()[-1]
    assert msgspec.json.decode(line)["roofs"][0].keys() >= {"device", "dtype", "provenance"}


@pytest.mark.process
def test_a_warm_cache_is_used_without_measuring_again(runs: Runs) -> None:
    cold, warm = _record(runs.cold), _record(runs.warm)
    assert ANNOUNCED not in runs.warm.stderr
    # the same measurement (its time in each measured roof's source), the file untouched
    measured = [r for r in warm.roofs if r.provenance == "measured"]
    assert measured and measured == [r for r in cold.roofs if r.provenance == "measured"]
    assert {p.name: p.stat().st_mtime_ns for p in runs.where.glob("*.json")} == (
        runs.kept_after_cold
    )
    assert len(runs.kept_after_cold) == 1


@pytest.mark.process
def test_flops_by_source_under_tensorflow(runs: Runs) -> None:
    m = _record(runs.cold).model
    assert m is not None and set(m.flops_by_source) == {"formula", "analytic"}  # no XLA here
    assert m.flops_source == "formula" and m.flops_by_source["formula"] == m.flops_per_example
    # the layer walk counts the convolutions and the dense layer, as the formula does
    assert m.flops_by_source["analytic"] == pytest.approx(m.flops_per_example, rel=0.1)


@pytest.mark.process
def test_a_corrupt_cache_file_is_measured_again_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tensorflow")
    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    ident = _quick_identity()
    cache.path(ident).write_text("{truncated")
    told: list[bool] = []
    found = collect.for_backend("tensorflow", announce=lambda: told.append(True))
    assert told == [True] and found.measured == ["tensorflow"] and not found.errors
    assert cache.load(ident) is not None  # the file is a measurement again
    assert {r.dtype for r in _measured(found)} >= {"float32", "bfloat16"}


def test_a_docker_cell_keeps_its_hosts_roofs_in_a_named_volume() -> None:
    """Each cell's container is new: the roofs cache lives in a volume of the docker host,
    so that host measures once per stack; a host's own env setting wins."""
    from mxbench.cells.cell import Cell
    from mxbench.engines.docker_container import ROOFS_DIR, create_args
    from mxbench.matrix.hosts import DockerHost

    cell = Cell(host="d", engine="docker", image="cpu", params=Params(), key="k")
    args = create_args(DockerHost(name="d", engine="docker", images=["cpu"]), cell, "tag")
    assert args["volumes"]["mxbench-roofs"] == {"bind": ROOFS_DIR, "mode": "rw"}
    assert args["environment"]["MXBENCH_ROOFS_CACHE"] == ROOFS_DIR
    mine = DockerHost(name="d", engine="docker", images=["cpu"],
                      env={"MXBENCH_ROOFS_CACHE": "/mine"})  # fmt: skip
    assert create_args(mine, cell, "tag")["environment"]["MXBENCH_ROOFS_CACHE"] == "/mine"
