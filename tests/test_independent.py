"""Independent replicas (scaling: independent, issue 36): the no-communication reference
and the per-device health sweep. Real cells on two host devices, the report against
records of known truth."""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mxbench.cells.cell import cell_key
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params
from mxbench.report.render import plot
from mxbench.report.sections import scaling, scaling_reference

from mxbench.matrix import scale
from mxbench.report import document
from mxbench.report.load import load
from mxbench.report.tables import build
from report_records import rec, write

CPU = {"kind": "cpu", "name": "some cpu"}
LOCAL = """
hosts:
  - name: box
    engine: local
"""


def mxbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args], capture_output=True, text=True, timeout=timeout
    )


# ------------------------------------------------------------------ real cells, two devices


@pytest.mark.parametrize("backend", ["jax", "tensorflow", "torch"])
def test_each_replica_trains_on_its_own_device_timed_on_its_own(backend: str) -> None:
    """Two replicas, each built and trained on its host device or logical CPU (its
    variables found there after training), no all-reduce; the record as one is the
    slowest replica's steps over the common window. PyTorch: each replica a process the
    bench started (bench/parallel/torch_launch.py), in no process group, the record merged by the
    launcher from both processes' step logs."""
    small = ["--image-size", "32", "--warmup-steps", "1", "--steps", "4", "--profile", "off"]
    proc = mxbench("bench", *small, "--backend", backend, "--devices", "2", "--scaling",
                   "independent", "--batch-size", "8", "--policy", "mixed_bfloat16")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.splitlines()[-1])
    assert r["status"] == "ok", r.get("error")
    d = r["distribution"]
    names = {"jax": ["cpu:0", "cpu:1"], "tensorflow": ["CPU:0", "CPU:1"],
             "torch": ["rank0:cpu", "rank1:cpu"]}[backend]  # fmt: skip
    assert d["scaling"] == "independent" and d["mechanism"] == scale.INDEPENDENT_MECHANISM
    assert [x["device"] for x in d["replica_timings"]] == names
    assert [x["variables_on"] for x in d["replica_timings"]] == names  # really there
    assert d["replicas"] == 2 and d["allreduce_dtype"] is None
    assert (d["global_batch"], d["per_device_batch"]) == (16, 8)
    steps = [x["step_ms"] for x in d["replica_timings"]]
    assert all(len(s) == 4 for s in steps)
    slowest = [max(a, b) for a, b in zip(*steps, strict=True)]
    assert r["metrics"]["step_ms"]["samples"] == pytest.approx(slowest, abs=1e-3)
    # the common window holds both replicas' examples: no faster than the two added
    each = sum(x["images_per_s"] for x in d["replica_timings"])
    assert 0 < r["metrics"]["images_per_s"] <= each * 1.001
    assert r["convergence"]["check"] == "scored"  # the one-step check, on the first replica
    assert "the devices are not GPUs" in d["interconnect"]["unreadable"][0]  # said, not guessed
    if backend == "torch":  # two processes, no group: nothing gathered, nothing averaged
        assert d["processes"] == 2 and d["weight_checksums"] == [] and d["shared_cores"]
        assert "no process group" in d["notes"][0]


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("benchmark: {backend: jax, scaling: independent}\n"
         "axes: {devices: [2], batch_size: [max]}", "independent replicas need a fixed batch"),
        ("benchmark: {backend: torch, scaling: independent}\n"
         "axes: {devices: [2], allreduce: [bfloat16]}", "independent replicas all-reduce nothing"),
    ],
)  # fmt: skip
def test_the_matrix_refuses_what_independent_replicas_cannot_run(yaml: str, message: str) -> None:
    from mxbench.errors import UsageError

    with pytest.raises(UsageError, match=message):
        parse_matrix(LOCAL + yaml)


def test_the_bench_refuses_a_paired_process_of_replicas() -> None:
    proc = mxbench("bench", "--scaling", "independent", "--devices", "2", "--backend", "jax",
                   "--pair-with", "mixed_bfloat16", timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "--scaling independent" in proc.stderr, proc.stderr


# ------------------------------------------------------------------ records of known truth


def _record(policy: str, n: int, scaling_: str, ms: float, k: int, rng: random.Random,
            replicas: list[float] | None = None) -> dict[str, Any]:  # fmt: skip
    """A record of about ``ms`` a step on ``n`` devices (independent: each replica's own
    level in ``replicas``, the record's step the slowest's)."""
    mid = ms * rng.lognormvariate(0, 0.01)
    samples = [round(mid * rng.lognormvariate(0, 0.02), 4) for _ in range(40)]
    glob, per = scale.batches(32, n, scaling_)
    r = rec("h", policy, 32, median=sorted(samples)[20], device=CPU)
    r["params"].update(devices=n, scaling=scaling_, repeat=k)
    if n > 1:
        r["distribution"] = {"devices": n, "replicas": n, "global_batch": glob,
                             "per_device_batch": per, "shared_cores": False,
                             "scaling": scaling_}  # fmt: skip
    if replicas is not None:
        steps = [[round(x * rng.lognormvariate(0, 0.05), 4) for _ in range(40)] for x in replicas]
        r["distribution"]["replica_timings"] = [
            {"device": f"gpu:{i}", "variables_on": f"gpu:{i}", "step_ms": s,
             "images_per_s": 32 * 1000 / sorted(s)[20]}
            for i, s in enumerate(steps)
        ]  # fmt: skip
        samples = [max(col) for col in zip(*steps, strict=True)]
    r["metrics"] = {"step_ms": {"median": sorted(samples)[20], "n": 40, "samples": samples},
                    "images_per_s": glob * 1000 / sorted(samples)[20]}  # fmt: skip
    r["cell"] = cell_key("h", None, None, Params(**r["params"]))
    return r


def _doc(tmp_path: Path, records: list[dict[str, Any]]) -> document.Document:
    loaded = load([write(tmp_path / "r.jsonl", records)])
    return document.build(loaded, build(loaded.winners))


def _sweep(levels: list[float], seed: int) -> scaling_reference.Health:
    from report_records import typed

    rng = random.Random(seed)
    r = typed(_record("float32", len(levels), "independent", 0, 0, rng, levels))
    found = scaling_reference.sweep("float32", 32, [r])
    assert found is not None
    return found


def test_the_health_sweep_names_the_one_slow_device() -> None:
    """Eight replicas at 100 ms a step (5% noise per step), one 30% slower in throughput
    (143 ms): that one, and only it, is named, in every one of 100 draws; its 95%
    interval holds the truth (0.70) in about 95 of them."""
    covered = 0
    for seed in range(100):
        levels = [100.0] * 8
        levels[3] = 100.0 / 0.7
        h = _sweep(levels, seed)
        assert h.slow == [3], (seed, h.ratios)
        ratio = h.ratios[3]
        assert ratio is not None and ratio.high < scaling_reference.SLOW
        covered += ratio.low < 0.7 < ratio.high
    assert covered >= 88, covered


def test_the_health_sweep_names_none_among_equal_devices() -> None:
    """Equal devices, and one 4% slower (two healthy cards' difference): no device named
    in 200 draws of eight; with two devices, one 30% slow is the one named."""
    named = 0
    for seed in range(200):
        levels = [100.0] * 8
        levels[seed % 8] = 104.0 if seed % 2 else 100.0
        named += bool(_sweep(levels, seed).slow)
    assert named == 0
    assert _sweep([100.0 / 0.7, 100.0], 1).slow == [0]


def test_the_map_shows_the_reference_and_the_health_line_in_every_format(
    tmp_path: Path,
) -> None:
    """Data parallel at 125 ms on two devices, independent replicas at 100 ms (each replica
    alone 100 ms, one of them 30% slow in a second cell): data parallel keeps 80% of the
    replicas' throughput; the health line names the slow device."""
    rng = random.Random(0)
    records = []
    for k in range(4):
        records += [
            _record("float32", 1, "weak", 100.0, k, rng),
            _record("float32", 2, "weak", 125.0, k, rng),
            _record("float32", 2, "independent", 100.0, k, rng, [97.0, 97.0]),
            _record("float32", 4, "independent", 100.0, k, rng, [97.0, 97.0, 97.0 / 0.7, 97.0]),
        ]
    doc = _doc(tmp_path, records)
    (m,) = doc.scaling
    two = next(p for p in m.points if p.devices == 2)
    assert [p.devices for p in m.points] == [1, 2]  # data parallel's; the replicas beside
    kept = two.reference.kept if two.reference else None
    assert kept is not None and kept.judged and kept.low < 0.80 < kept.high < 0.9
    assert two.reference is not None and not two.reference.flagged  # 80%: nothing to doubt
    assert not any("above 105%" in cell for row in m.rows for cell in row)
    assert not any(n.startswith("kept of independent above") for n in m.notes)
    assert m.headers[-2:] == scaling_reference.HEADERS
    (fine, slow) = [h for h, _ in m.health]
    assert fine.slow == [] and slow.slow == [2] and slow.devices[2] == "gpu:2"
    line = next(n for n in m.notes if "gpu:2 is slow" in n)
    assert line.startswith("health sweep (float32 at batch 32, 4 replicas, 4 runs)")
    for fmt in ("markdown", "html", "terminal"):
        text = document.render(doc, fmt)
        assert "kept of independent" in text and "gpu:2 is slow" in text, fmt
    # the HTML's curves: efficiency (and the share kept) and speedup against N, one figure
    html = document.render(doc, "html")
    assert html.count('alt="scaling efficiency and speedup over float32 against devices') == 1
    png = plot.scaling_png(m)
    assert png is not None and png.startswith(b"\x89PNG")
    (out,) = json.loads(document.render(doc, "json"))["scaling"]
    assert [h["slow"] for h in out["health"]] == [[], ["gpu:2"]]
    two_json = next(p for p in out["points"] if p["devices"] == 2)
    assert two_json["independent"]["kept"]["low"] < 0.80 < two_json["independent"]["kept"]["high"]
    rows = list(csv.DictReader(io.StringIO(document.render(doc, "csv"))))
    dp2 = [r for r in rows if r["devices"] == "2" and r["scaling"] != "independent"]
    assert len(dp2) == 4 and all(0.7 < float(r["kept_of_independent"]) < 0.9 for r in dp2)
    four = [r for r in rows if r["devices"] == "4"]
    assert len(four) == 4 and {r["slow_devices"] for r in four} == {"gpu:2"}


def test_replicas_alone_are_a_health_sweep(tmp_path: Path) -> None:
    rng = random.Random(1)
    records = [_record("float32", 4, "independent", 100.0, 0, rng, [100.0, 100.0, 150.0, 100.0])]
    (m,) = _doc(tmp_path, records).scaling
    assert not m.referenced and m.health[0][0].slow == [2]
    assert scaling.TITLE and any("gpu:2 is slow" in n for n in m.notes)


def test_a_real_map_with_its_reference(tmp_path: Path) -> None:
    """TensorFlow on one and two logical CPUs, data parallel and independent replicas, one
    matrix run end to end: the map of data parallel with the replicas' columns and their
    health line (shared cores: plumbing, said)."""
    (tmp_path / "m.yaml").write_text(
        LOCAL + "benchmark: {model: blog-cnn, image_size: 32, warmup_steps: 1, steps: 4, "
        "profile: 'off', check: 'off', repeats: 1, backend: tensorflow, batch_size: 8, "
        "policy: float32}\naxes: {devices: [1, 2], scaling: [weak, independent]}\n"
    )
    proc = mxbench("run", "-m", str(tmp_path / "m.yaml"), "-r", str(tmp_path / "results"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = load([tmp_path / "results"])
    doc = document.build(loaded, build(loaded.winners))
    (m,) = doc.scaling
    assert [(p.devices, p.reference is not None) for p in m.points] == [(1, False), (2, True)]
    two = m.points[1]
    assert two.reference is not None and two.reference.images_per_s
    assert two.reference.kept is not None and not two.reference.kept.judged  # one process
    kept = m.rows[1][-1]  # "93%", or "147% above 105% (flagged)" on shared cores
    assert kept.split(" ")[0].endswith("%") and m.rows[1][-2]
    assert kept.endswith("above 105% (flagged)") is two.reference.flagged
    ((health, records),) = m.health
    assert health.devices == ["CPU:0", "CPU:1"] and len(records) == 1
    line = next(n for n in m.notes if n.startswith("health sweep (float32 at batch 8, 2 replica"))
    assert line.endswith("share this host's cores: plumbing, not a check of hardware)")
    assert any("share this host's cores" in n for n in m.notes)
    assert any(n.startswith("interconnect at N = 2: not readable here") for n in m.notes)


def test_replicas_have_weak_scalings_batches_in_one_process() -> None:
    assert scale.batches(16, 4, scale.INDEPENDENT) == (64, 16)
    assert scale.problem("jax", 2, scale.INDEPENDENT, 8, None, nodes=2) == (
        "scaling", "independent: independent replicas run on one host (nodes 1)")  # fmt: skip
    assert scale.problem("torch", 2, scale.INDEPENDENT, 8, None, nodes=2)[0] == "scaling"  # type: ignore[index]
    assert scale.problem("torch", 2, scale.INDEPENDENT, 8) is None  # a process per replica
    assert scale.problem("tensorflow", 1, scale.INDEPENDENT, 8) is None  # a one-device cell


def test_cells_of_replicas_run_one_policy_per_process() -> None:
    from mxbench.cells.cell import expand, pair_up

    axes = "axes: {scaling: [weak, independent], policy: [float32, mixed_bfloat16]}"
    cells = expand(parse_matrix(LOCAL + "benchmark: {backend: jax, devices: 2}\n" + axes))
    procs = pair_up(cells)
    weak = [p for p in procs if p.params.scaling == "weak"]
    alone = [p for p in procs if p.params.scaling == "independent"]
    # data parallel: paired, float32 and the policy at each batch size in one process
    assert weak and all({c.params.policy for c in p.arms} == {"float32", "mixed_bfloat16"}
                        for p in weak)  # fmt: skip
    assert len(alone) == sum(len(p.arms) for p in weak)
    assert all(not getattr(p, "partners", None) for p in alone)
