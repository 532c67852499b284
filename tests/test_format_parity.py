"""One document, every format (issue 35, Step 20): each part of the report's document shows
in markdown, HTML, the terminal's text, JSON and CSV.

The parts are not a hand list: they are the fields of :class:`Document` and of each kind of
:class:`Section` (what the document is made *from* excepted), walked from the dataclasses, so
a part added later is checked here too, or fails this test until it says how it shows. The
records exercise every part: a paired comparison with interference, energy and cost, the
one-step convergence check, profiled windows (one failed), an OOM, a largest-batch search,
training runs to an accuracy, and a loss-scale A/B.

What a part is identified by is the text every format shows of it (a value of a known type
gives its text: :func:`needles`). The CSV is one row per record: it cannot hold a sentence,
so there a part is the columns carrying its data (:data:`CSV_COLUMNS`), each with a value in
some row; the parts it holds only as prose are named (:data:`PROSE`). Run with ``-s`` for
the part x format table.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import html as html_module
import io
import json
import random
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.matrix.search import BatchSearch, Found, walk
from mxbench.records.record import SCHEMA
from mxbench.report.sections import capacity, inference, scaling, training, why

from mxbench.report import document
from mxbench.report.document import Document, Grid, Section, SectionKind
from mxbench.report.load import load
from mxbench.report.tables import build
from report_records import rec, write

A100 = {"kind": "gpu", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
FORMATS = ("markdown", "html", "terminal", "json", "csv")
# What a document is made from, not a part of it: the records, the tables, how to make the
# sections (the sections themselves are walked).
# (the speedup texts show in the grids and sections; the sections are walked per kind)
INPUTS = {"loaded", "tables", "makers", "anchors", "texts", "sections"}
# What a section is, not what it shows: its kind, its link target, the table it is made from.
SECTION_INPUTS = {"kind", "anchor", "table"}


def _keyed(r: dict[str, Any]) -> dict[str, Any]:
    """The record's cell key from its params as they are now (a repeat, a loss scale)."""
    r["cell"] = cell_key(r["host"], None, None, Params(**r["params"]))
    return r


def _window(i: int, others: float) -> dict[str, Any]:
    busy = {"others_cores": others, "disturbed": i == 1}
    return {
        "round": i,
        "position": 0,
        "steps": 5,
        "ms": 2.0,
        "start_s": float(i),
        "interference": busy,
    }


def _profile(**ms: Any) -> dict[str, Any]:
    extra = {k: ms.pop(k) for k in list(ms) if k not in why.CATEGORIES}
    return {
        "tool": "torch.profiler",
        "steps": 3,
        "step_ms": sum(ms.values()),
        "cost_s": 0.5,
        "breakdown_ms": ms,
        **extra,
    }


def _paired(policy: str, k: int, median: float, **extra: Any) -> dict[str, Any]:
    """One arm of paired process ``k``: energy, cost, windows with another process busy."""
    ratios = [] if policy == "float32" else [1.9 + 0.05 * k, 2.0 + 0.05 * k, 2.1 + 0.05 * k]
    metrics = {
        "step_ms": {"median": median, "p25": median * 0.98, "p75": median * 1.02, "n": 30},
        "images_per_s": 32_000 / median,
        "energy_j_per_image": 0.25 if policy == "float32" else 0.125,
        "energy_source": "nvml",
    }
    pairing = {
        "group": f"g{k}",
        "arms": ["float32", "mixed_float16"],
        "ratios": ratios,
        "clean": [True, False, True],
        "windows": [_window(i, 0.5) for i in range(3)],
    }
    r = rec(
        "h1",
        policy,
        32,
        median=median,
        device=A100,
        metrics=metrics,
        pairing=pairing,
        cost_per_hour=3.6,
        **extra,
    )
    r["params"]["repeat"] = k
    return _keyed(r)


def _speed() -> list[dict[str, Any]]:
    check = {"steps": 60, "skipped_steps": 2, "check": "scored", "cosine": 0.95, "batch": 32}
    out = []
    for k in range(3):
        f32 = _profile(conv_matmul=70.0, elementwise_norm=20.0, host_gap=10.0) if k == 0 else None
        out.append(_paired("float32", k, 100.0, **({"profile": f32} if f32 else {})))
        mixed: dict[str, Any] = {"convergence": check}
        if k == 0:
            mixed["profile"] = _profile(conv_matmul=30.0, host_gap=20.0, tensor_core_share=0.87)
        elif k == 1:
            mixed["profile"] = {"tool": "torch.profiler", "error": "CUPTI_ERROR_NOT_INITIALIZED"}
        out.append(_paired("mixed_float16", k, 50.0, **mixed))
    out.append(rec("h1", "float32", 64, median=190.0, device=A100))
    oom = rec("h1", "mixed_float16", 64, status="oom", device=A100)
    oom["error"] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    return [*out, oom]


def _search() -> list[dict[str, Any]]:
    """A largest-batch search per policy on a device that fits 20 (float32), 30 (mixed)."""
    out = []
    for policy, limit in (("float32", 20), ("mixed_float16", 30)):
        cfg, known = BatchSearch(precision=0.0), dict[int, tuple[str, None]]()
        while not isinstance(step := walk(cfg, known.get), Found):
            status = "ok" if step <= limit else "oom"
            known[step] = (status, None)
            search = {"start": 8, "cap": 4096, "max_trials": 16, "precision": 0.0}
            r = rec(
                "box",
                policy,
                step,
                status=status,
                median=10.0 if status == "ok" else None,
                search=search,
            )
            if step == limit:
                r["run"] = {"cgroup_peak_bytes": (900 if policy == "float32" else 700) * 2**20}
            out.append(r)
    return out


def _training() -> list[dict[str, Any]]:
    """Three seeds per policy trained to 90%: mixed_bfloat16 in 0.7x float32's time."""
    curves = [[0.5, 0.8, 0.92, 0.95], [0.55, 0.82, 0.93, 0.96], [0.5, 0.85, 0.91, 0.95]]
    out = []
    for policy, scale in (("float32", 1.0), ("mixed_bfloat16", 0.7)):
        for seed, curve in enumerate(curves):
            s = scale * (10.0 + seed)
            points = [
                {
                    "epoch": k + 1,
                    "train_s": (k + 1) * s,
                    "wall_s": (k + 1) * s + 1,
                    "val_metric": acc,
                }
                for k, acc in enumerate(curve)
            ]
            reached = next(p for p in points if p["val_metric"] >= 0.9)
            params = {
                "policy": policy,
                "data": "/d/digits",
                "image_size": 32,
                "epochs": len(curve),
                "target": 0.9,
                "repeat": seed,
            }
            train = {
                "seed": seed,
                "target": 0.9,
                "points": points,
                "time_to_target_s": reached["train_s"],
                "epochs_to_target": reached["epoch"],
            }
            out.append(
                _keyed(
                    {
                        "schema": SCHEMA,
                        "host": "h",
                        "status": "ok",
                        "params": params,
                        "device": {"name": "cpu-x"},
                        "train": train,
                    }
                )
            )
    return out


def _loss_scales() -> list[dict[str, Any]]:
    """Three processes per loss_scale (none, dynamic): an A/B at the same batch."""
    rng, out = random.Random(0), []
    for scale, ms in (("none", 100.0), ("dynamic", 106.0)):
        for k in range(3):
            level = ms * rng.lognormvariate(0, 0.02)
            samples = sorted(round(level * rng.lognormvariate(0, 0.03), 4) for _ in range(30))
            r = rec(
                "ab",
                "mixed_float16",
                32,
                median=samples[15],
                metrics={"step_ms": {"median": samples[15], "n": 30, "samples": samples}},
            )
            r["params"].update(loss_scale=scale, repeat=k)
            out.append(_keyed(r))
    return out


def _devices() -> list[dict[str, Any]]:
    """float32 on one and two CPU devices (weak scaling), two processes each: the map; and
    independent replicas on two, the second 30% slow: the reference and the health sweep."""
    out = []
    for n, ms, how in ((1, 100.0, "weak"), (2, 125.0, "weak"), (2, 143.0, "independent")):
        for k in range(2):
            samples = [ms * (1 + 0.01 * ((i * 7 + k) % 5)) for i in range(20)]
            r = rec("dp", "float32", 32, median=samples[10], device={"kind": "cpu"})
            r["metrics"] = {"step_ms": {"median": samples[10], "n": 20, "samples": samples}}
            r["params"].update(devices=n, repeat=k, scaling=how)
            if n > 1:
                r["distribution"] = {"devices": n, "global_batch": 32 * n,
                                     "per_device_batch": 32, "shared_cores": True}  # fmt: skip
            if how == "independent":
                fast = [100.0 * (1 + 0.01 * ((i * 3 + k) % 5)) for i in range(20)]
                r["distribution"]["replica_timings"] = [
                    {"device": "cpu:0", "step_ms": fast, "images_per_s": 320.0},
                    {"device": "cpu:1", "step_ms": samples, "images_per_s": 224.0},
                ]
            out.append(_keyed(r))
    return out


def _serving() -> list[dict[str, Any]]:
    """Serving cells: float32 and mixed_float16 at batch 1, the gate striking the latter."""
    out = []
    for policy, ms, agreement in (("float32", 4.0, None), ("mixed_float16", 2.0, 0.9)):
        samples = [round(ms * (1 + (i % 17) / 100), 4) for i in range(400)]
        r = rec("srv", policy, 1, median=samples[200], device=A100)
        r["params"].update(mode="infer", steps=400)
        r["metrics"] = {
            "step_ms": {"median": sorted(samples)[200], "n": 400, "samples": samples},
            "images_per_s": 1000.0 / ms,
        }
        gate = {"ran": True, "top1_agreement": agreement, "cosine": 0.999, "passed": False}
        r["inference"] = {"call": "direct", "calls": 400, **({"gate": gate} if agreement else {})}
        isa = {"avx512_core_amx": 1.0} if agreement else {"avx512_core": 1.0}
        r["profile"] = {"tool": "oneDNN log", "device": "cpu", "onednn": {"gemm_isas": isa}}
        out.append(_keyed(r))
    # served trained weights (the gate on data) and the trained x served cross table
    for trained, policy, top1, f32 in (
        ("float32", "float32", 0.94, 0.94),
        ("float32", "mixed_float16", 0.5, 0.94),  # struck: below 99% of float32's
        ("mixed_bfloat16", "float32", 0.92, 0.92),
        ("mixed_bfloat16", "mixed_float16", 0.92, 0.92),
    ):
        samples = [
            round((4.0 if policy == "float32" else 2.0) * (1 + i / 100), 4) for i in range(40)
        ]
        r = rec("srv", policy, 8, median=samples[20], device=A100)
        r["params"].update(mode="infer", steps=40, weights="trained", train_policy=trained,
                           epochs=3, data="/d/digits")  # fmt: skip
        r["metrics"] = {"step_ms": {"median": samples[20], "n": 40, "samples": samples},
                        "images_per_s": 8000.0 / samples[20]}  # fmt: skip
        gate = {"ran": True, "kind": "data", "examples": 359, "top1": top1, "float32_top1": f32,
                "top1_relative": top1 / f32, "passed": top1 / f32 >= 0.99}  # fmt: skip
        r["inference"] = {"call": "direct", "calls": 40, "gate": gate}
        out.append(_keyed(r))
    return out


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> Document:
    path: Path = tmp_path_factory.mktemp("parity") / "all.jsonl"
    # and a line that is no record: a notice says it was skipped
    records = [*_speed(), *_search(), *_training(), *_loss_scales(), *_devices(), *_serving()]
    write(path, records, ("not a record",))
    loaded = load([path])
    assert len(loaded.bad) == 1, loaded.bad
    return document.build(loaded, build(loaded.winners))


def needles(value: Any) -> list[str]:
    """The text every format shows of a part's value, by the value's type."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, tuple):  # a diagnosis (rule, text): the text shows
        return needles(value[-1])
    if isinstance(value, list):
        return [n for v in value for n in needles(v)]
    if isinstance(value, Grid):  # the device rows and the speedups in their cells
        return [r.title for r in value.rows] + [c.value for r in value.rows for c in r.cells]
    if isinstance(value, why.Bar):  # a profiled slot: its kernels
        return needles(value.kernels)
    if isinstance(value, capacity.Capacity):  # what the search's trials ran and counted
        return [capacity.counted(value)]
    if isinstance(value, scaling.Map):
        return [value.title, *value.headers, *needles(value.rows), *value.notes]
    if isinstance(value, (training.Section, inference.Section)):
        return [value.title, *value.headers, *needles(value.rows), *value.sentences]
    raise TypeError(f"a part of type {type(value).__name__}: say in needles() how it shows")


def parts(doc: Document) -> dict[str, list[str]]:
    """Every part of the document, walked from its dataclasses: the document's own fields,
    then each section field per kind of section (over the sections of that kind)."""
    # its fields, and what it makes on first use (its cached properties)
    names = [f.name for f in dataclasses.fields(Document)] + [
        name for name, v in vars(Document).items() if isinstance(v, functools.cached_property)
    ]
    out = {name: needles(getattr(doc, name)) for name in names if name not in INPUTS}
    for kind in get_args(SectionKind):
        sections = [s for s in doc.sections if s.kind == kind]
        for f in dataclasses.fields(Section):
            if f.name not in SECTION_INPUTS:
                out[f"{kind}.{f.name}"] = needles([getattr(s, f.name) for s in sections])
    return out


# The CSV's columns that carry each part's data (each must have a value in some row).
CSV_COLUMNS: dict[str, tuple[str, ...]] = {
    "grids": ("speedup_vs_float32", "speedup_low", "speedup_high", "verdict"),
    "training": ("train_target", "time_to_target_s", "final_val_metric"),
    "scaling": scaling.CSV_COLUMNS,
    "inference": (*inference.COLUMNS, "speedup_vs_float32"),
    "speed.title": ("host", "device"),
    "speed.lines": ("device", "compute_capability"),
    "speed.note": ("others_cores", "rounds", "rounds_disturbed"),
    "speed.failures": ("error", "profile_error"),
    "speed.breakdown": (*(f"{c}_ms" for c in why.CATEGORIES), "kernels"),
    "largest.title": ("host", "device"),
    "largest.lines": ("device",),
    "largest.note": ("largest_batch", "peak_memory_bytes"),
    "largest.capacity": ("largest_batch", "peak_memory_bytes", "search_trial"),
}
# A table's columns in the CSV, by what their header says (rows: the same columns' values).
HEADER_COLUMNS = {
    "ms/step [IQR]": "step_ms_median",
    "images/s": "images_per_s",
    "[95% CI]": "speedup_vs_float32",
    "J/image": "energy_j_per_image",
    "cost/M images": "cost_per_million_images",
    "1-step cos": "gradient_cosine",
    "largest batch": "largest_batch",
    "vs float32": "largest_batch",
    "peak memory there": "peak_memory_bytes",
    "smallest OOM": "largest_batch",
    "trials": "search_trial",
    "search": "search_trial",
    "batch": "batch_size",
    "policy": "policy",
}
# Sentences across records, which a row per record cannot hold (the JSON carries them).
PROSE = {"counts", "definitions", "judged", "notices", "shares", "speed.diagnosis_rules"}


def _flat(text: str) -> str:
    return " ".join(text.split())


def _texts(doc: Document) -> dict[str, list[str]]:
    """Each text format's output as searchable text, unescaped (JSON: its strings)."""
    md = re.sub(r"\\(.)", r"\1", document.render(doc, "markdown")).replace("&lt;", "<")
    page = html_module.unescape(document.render(doc, "html"))
    strings: list[str] = []

    def walk_json(value: Any) -> None:
        if isinstance(value, str):
            strings.append(_flat(value))
        elif isinstance(value, dict):
            for k, v in value.items():
                strings.append(_flat(k))
                walk_json(v)
        elif isinstance(value, list):
            for v in value:
                walk_json(v)

    walk_json(json.loads(document.render(doc, "json")))
    terminal = document.render(doc, "terminal")
    return {
        "markdown": [_flat(md)],
        "html": [_flat(page)],
        "terminal": [_flat(terminal)],
        "json": strings,
    }


def _csv_columns(part: str, doc: Document) -> tuple[str, ...] | None:
    if part in PROSE:
        return None
    kind, _, name = part.partition(".")
    if name in ("headers", "rows"):
        headers = [h for s in doc.sections if s.kind == kind for h in s.headers]
        found = []
        for h in headers:
            column = next((c for key, c in HEADER_COLUMNS.items() if key in h), None)
            assert column is not None, f"{part}: header {h!r} has no CSV column (HEADER_COLUMNS)"
            found.append(column)
        return tuple(dict.fromkeys(found))
    assert part in CSV_COLUMNS, f"{part}: say which CSV columns carry it, or that it is prose"
    return CSV_COLUMNS[part]


def test_every_part_shows_in_every_format(doc: Document) -> None:
    found = parts(doc)
    # the records exercise every part: each document field, each section field in some kind
    empty = [p for p, n in found.items() if not n and "." not in p]
    assert not empty, f"parts the records leave empty: {empty}"
    for f in dataclasses.fields(Section):
        if f.name not in SECTION_INPUTS:
            kinds = [k for k in get_args(SectionKind) if found[f"{k}.{f.name}"]]
            assert kinds, f"no section shows {f.name}"
    texts = _texts(doc)
    rows = list(csv.DictReader(io.StringIO(document.render(doc, "csv"))))
    table: dict[str, dict[str, str]] = {}
    missing = []
    for part, wanted in found.items():
        if not wanted:
            continue
        table[part] = {}
        for fmt in FORMATS[:4]:
            lost = [n for n in wanted if not any(_flat(n) in t for t in texts[fmt])]
            table[part][fmt] = "yes" if not lost else f"NO ({len(lost)}/{len(wanted)})"
            missing += [f"{part} in {fmt}: {n!r}" for n in lost[:3]]
        columns = _csv_columns(part, doc)
        if columns is None:
            table[part]["csv"] = "prose: no"
            continue
        empty_columns = [c for c in columns if not any(r.get(c) for r in rows)]
        table[part]["csv"] = "yes" if not empty_columns else f"NO {empty_columns}"
        missing += [f"{part} in csv: column {c} empty" for c in empty_columns]
    width = max(map(len, table))
    print(f"\n{'part':<{width}}  " + "  ".join(f"{f:<10}" for f in FORMATS))
    for part, said in table.items():
        print(f"{part:<{width}}  " + "  ".join(f"{said[f]:<10}" for f in FORMATS))
    assert not missing, "\n".join(missing)


def test_json_and_csv_carry_the_numbers_the_tables_show(doc: Document) -> None:
    """Energy and cost (3.6 $/h at 320 images/s: 3.125 $ a million images), the largest
    batch and its peak, the interference, the time to target: as numbers."""
    out = json.loads(document.render(doc, "json"))
    (speed,) = [t for t in out["tables"] if t["host"] == "h1"]
    row = next(r for r in speed["rows"] if r["policy"] == "float32" and r["batch_size"] == 32)
    assert row["j_per_image"] == 0.25 and row["cost_per_million_images"] == 3.125
    cells = speed["cells"][0]
    assert cells["float32 J/image (GPU board, NVML)"] == "0.25"
    assert cells["mixed_float16 cost/M images (at $3.6/h)"] == "1.56"
    assert cells["mixed_float16 1-step cos"].startswith("cos 0.9500 low")
    (largest,) = out["largest_batch"]
    assert {p: f["batch_size"] for p, f in largest["largest_batch"].items()} == {
        "float32": 20,
        "mixed_float16": 30,
    }
    assert largest["largest_batch"]["float32"]["peak_memory_bytes"] == 900 * 2**20
    assert largest["diagnosis"].startswith("Largest batch: float32 20, mixed_float16 30 (1.50x)")

    rows = list(csv.DictReader(io.StringIO(document.render(doc, "csv"))))
    paired = [r for r in rows if r["host"] == "h1" and r["batch_size"] == "32"]
    assert len(paired) == 6 and {r["energy_j_per_image"] for r in paired} == {"0.25", "0.125"}
    assert {r["cost_per_million_images"] for r in paired} == {"3.125", "1.5625"}
    # (a column of counts with gaps is written as floats, as the CSV writes every count)
    assert {
        (float(r["others_cores"]), float(r["rounds"]), float(r["rounds_disturbed"])) for r in paired
    } == {(0.5, 3, 1)}
    mixed = [r for r in paired if r["policy"] == "mixed_float16"]
    checks = {
        (r["gradient_cosine"], float(r["skipped_steps"]), r["convergence_check"]) for r in mixed
    }
    assert checks == {("0.95", 2, "scored")}
    assert {r["kernels"] for r in mixed} == {"Tensor Cores 87% (by kernel name)", ""}
    trials = [r for r in rows if r["search_trial"] == "True"]
    assert {(r["policy"], float(r["largest_batch"])) for r in trials} == {
        ("float32", 20),
        ("mixed_float16", 30),
    }
    trained = [r for r in rows if r["train_target"]]
    assert len(trained) == 6 and {r["final_val_metric"] for r in trained} == {"0.95", "0.96"}


def _side(path: Path, slow: float, layout: dict[tuple[str, int], str]) -> Path:
    """One run of a comparison: per (policy, batch) its status in 3 processes."""
    rng, records = random.Random(int(slow * 10)), []
    for (policy, batch), status in layout.items():
        for k in range(3):
            level = batch * (1.0 if policy == "float32" else 0.8) * slow * rng.uniform(0.99, 1.01)
            samples = sorted(round(level * rng.uniform(0.97, 1.03), 4) for _ in range(30))
            ok = status == "ok"
            r = rec("box", policy, batch, status=status, median=samples[15] if ok else None)
            if ok:
                r["metrics"]["step_ms"]["samples"] = samples
            else:
                r["error"] = "torch.OutOfMemoryError: CUDA out of memory"
            r["params"]["repeat"] = k
            records.append(_keyed(r))
    return write(path / "box.jsonl", records)


def test_every_part_of_compare_shows_in_markdown_and_json(tmp_path: Path) -> None:
    """``mxbench compare``'s document, walked the same way: each table part's title and
    cells in the markdown, its items in the JSON under its key; its sentences in the
    markdown (the JSON, a fixed schema, carries their numbers, not the sentences)."""
    from mxbench.report.render import export, markdown

    from mxbench.report import compare_document
    from mxbench.report.compare import compare, speedups

    both = {
        ("float32", 8): "ok",
        ("mixed_bfloat16", 8): "ok",
        ("float32", 32): "ok",
        ("mixed_bfloat16", 32): "ok",
        ("mixed_bfloat16", 512): "oom",
    }
    base = _side(
        tmp_path / "a",
        1.0,
        both
        | {("mixed_bfloat16", 16): "oom", ("mixed_bfloat16", 64): "ok", ("float32", 128): "ok"},
    )
    new = _side(
        tmp_path / "b",
        1.2,
        both
        | {("mixed_bfloat16", 16): "ok", ("mixed_bfloat16", 64): "oom", ("float32", 256): "ok"},
    )
    a, b = load([base]), load([new])
    found = compare(a, b, 0.05)
    doc = compare_document.build(found, speedups(a, b), {"box": 0.01}, 5.0, False)
    md = _flat(re.sub(r"\\(.)", r"\1", markdown.render_compare(doc)))
    out = io.StringIO()
    export.write_compare(doc, out)
    data = json.loads(out.getvalue())
    keys = {"changes": "cells", **export.COMPARE_KEYS}
    said: dict[str, str] = {}
    for f in dataclasses.fields(compare_document.CompareDocument):
        value = getattr(doc, f.name)
        if isinstance(value, compare_document.Part):
            assert value.items, f"the records leave {f.name} empty"
            shown = [value.title, *needles(value.headers), *needles(value.rows)]
            in_md = all(_flat(n) in md for n in shown)
            in_json = len(data[keys[f.name]]) == len(value.items)
        else:
            assert needles(value), f"the records leave {f.name} empty"
            in_md, in_json = all(_flat(n) in md for n in needles(value)), False
        said[f.name] = f"{'yes' if in_md else 'NO':<10}{'yes' if in_json else 'prose: no'}"
        assert in_md, f"{f.name} is not in compare's markdown"
        assert in_json or not isinstance(value, compare_document.Part), f.name
    print(f"\n{'compare part':<12}  markdown  json")
    for name, row in said.items():
        print(f"{name:<12}  {row}")
