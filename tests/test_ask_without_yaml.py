"""Asking without YAML (issue 49): the run's options over the matrix, `measure:` presets and
the old knobs' upgrade, `mxbench init`, `mxbench schema`, the top-level help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mxbench.cells.cell import expand
from mxbench.commands.schema import matrix_schema
from mxbench.errors import UsageError
from mxbench.matrix import document
from mxbench.matrix.file import default_matrix_path, load_matrix, parse_matrix
from mxbench.matrix.measure import KNOBS, PRESETS

ROOT = Path(__file__).resolve().parents[1]
HOST = "hosts: [{name: box, engine: local}]\n"


def mxbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args],
        capture_output=True, text=True, cwd=cwd, timeout=120, env=env, check=False,
    )  # fmt: skip


def cells(*given: document.Override) -> list[tuple[Any, ...]]:
    """(model, policy, batch size) of every planned cell of the default under ``given``."""
    mx = load_matrix(default_matrix_path(), given)
    return sorted({(c.params.model, c.params.policy, c.params.batch_size) for c in expand(mx)})


def axis(name: str, text: str) -> document.Override:
    return document.axis_from_text(name, text, f"--{name} {text}")


def test_the_newcomers_command_plans_its_cells_without_a_file(tmp_path: Path) -> None:
    proc = mxbench("run", "--model", "resnet50", "--policy", "float32,mixed_bfloat16",
                   "--batch-size", "32,64", "--dry-run", "--results", str(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "model resnet50" in proc.stdout and "8 cell(s)" in proc.stdout  # 2 x 2 x 2 repeats
    assert not list(tmp_path.iterdir())  # a plan writes nothing


def test_options_replace_the_matrix_axes_and_values() -> None:
    assert cells(axis("policy", "float32,mixed_bfloat16"), axis("batch_size", "16")) == [
        ("blog-cnn", "float32", 16), ("blog-cnn", "mixed_bfloat16", 16)
    ]  # fmt: skip
    # the default says benchmark.model: blog-cnn; --model sweeps instead (no conflict)
    assert {c[0] for c in cells(axis("model", "blog-cnn,so-cnn"))} == {"blog-cnn", "so-cnn"}
    assert {c[2] for c in cells(document.axis("batch_size", [8, 24], "api"))} == {8, 24}
    mx = load_matrix(default_matrix_path(), [
        document.setting("benchmark.image_size", 32, "a"),
        document.setting("steps", document.parse_value("40", "b"), "b"),
        axis("jit-compile", "on,off"),
    ])  # fmt: skip
    assert mx.benchmark.image_size == 32 and mx.benchmark.steps == 40
    assert mx.sweep()["jit_compile"] == ["on", "off"]  # YAML's on/off booleans read back
    # the old place of a knob is read as its new one, and a --set wins over the file's axis
    doc = {"axes": {"image_size": [32, 64]}, "measure": "quick", "hosts": []}
    document.apply(doc, [document.setting("benchmark.timed_s", 4, "x"),
                           document.setting("image_size", 48, "y")])  # fmt: skip
    assert doc["measure"] == {"preset": "quick", "timed_s": 4}
    assert doc["benchmark"] == {"image_size": 48} and "image_size" not in doc["axes"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batch-size", "32,abc"], "--batch-size 32,abc: axes.batch_size[1]: expected a "
         "batch_size from 1 to 65536, or max; got 'abc'"),
        (["--policy", "float32,fp8"], "--policy float32,fp8: axes.policy[1]: unknown policy 'fp8'"),
        (["--batch-size", "0"], "--batch-size 0: axes.batch_size[0]"),
        (["--backend", "mxnet"], "--backend mxnet: axes.backend[0]: unknown backend 'mxnet'"),
        (["-P", "imagesize=3"], "-P imagesize=3: axes.imagesize: unknown key"),
        (["-P", "batch_size"], "expected NAME=V1,V2"),
        (["--policy", "float32,,"], "--policy float32,,: expected values separated by commas"),
        (["--set", "steps=abc"], "--set steps=abc: measure.steps: Input should be a valid integer"),
        (["--set", "steps"], "--set 'steps': expected KEY=VALUE"),
        (["--set", "measure=quik"], "--set measure=quik: measure: unknown preset 'quik'"),
        (["--set", "hosts.3.name=x"], "--set hosts.3.name=x: hosts.3: no such item"),
        (["--set", "image_size=["], "--set image_size=[: cannot read '['"),
        (["--fast", "--rigorous"], "--fast and --rigorous: choose one"),
    ],
)  # fmt: skip
def test_a_bad_option_value_exits_2_naming_the_flag(args: list[str], needle: str) -> None:
    proc = mxbench("run", *args, "--dry-run")
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_presets_are_the_knobs_they_stand_for() -> None:
    old_default = parse_matrix(HOST).benchmark
    assert parse_matrix("measure: default\n" + HOST).benchmark == old_default
    for name, knobs in PRESETS.items():
        assert set(knobs) <= set(KNOBS), name
        written = {k: msgspec_to_yaml(v) for k, v in knobs.items()}
        old = parse_matrix(yaml.safe_dump({"benchmark": written}) + HOST)
        new = parse_matrix(f"measure: {name}\n" + HOST)
        assert new.benchmark == old.benchmark, name
        assert [c.key for c in expand(new)] == [c.key for c in expand(old)], name
    quick = parse_matrix("measure: quick\n" + HOST).benchmark
    assert (quick.steps, quick.check, quick.profile) == (20, "off", "off")
    # a knob beside the preset changes it; an axis sweeps a preset's knob
    mine = parse_matrix("measure: {preset: rigorous, timed_s: 5}\n" + HOST).benchmark
    assert (mine.timed_s, mine.steps) == (5, 200)
    swept = parse_matrix("measure: quick\naxes: {steps: [10, 30]}\n" + HOST)
    assert swept.sweep()["steps"] == [10, 30]
    with pytest.raises(UsageError, match=r"axes.steps: also set under measure.steps"):
        parse_matrix("measure: {steps: 20}\naxes: {steps: [10, 30]}\n" + HOST)


def msgspec_to_yaml(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


def test_an_old_matrix_with_the_knobs_under_benchmark_still_reads(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(
        "benchmark:\n  model: blog-cnn\n  image_size: 64\n  warmup_steps: 2\n  steps: 20\n"
        "  repeats: 3\n  profile: off\naxes: {policy: [float32], batch_size: [8]}\n" + HOST
    )
    new = tmp_path / "new.yaml"
    new.write_text(
        "measure: {warmup_steps: 2, steps: 20, repeats: 3, profile: off}\n"
        "benchmark: {model: blog-cnn, image_size: 64}\n"
        "axes: {policy: [float32], batch_size: [8]}\n" + HOST
    )
    a, b = load_matrix(old), load_matrix(new)
    assert a.benchmark == b.benchmark and [c.key for c in expand(a)] == [c.key for c in expand(b)]
    assert b.notes == [] and len(a.notes) == 1
    assert "benchmark.warmup_steps, benchmark.steps" in a.notes[0] and "measure:" in a.notes[0]
    # an error in a moved knob names the line it is written on
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark:\n  model: blog-cnn\n  steps: 0\n" + HOST)
    with pytest.raises(UsageError, match=r"bad.yaml:3: measure.steps: Input should be greater"):
        load_matrix(bad)
    proc = mxbench("run", "--matrix", str(old), "--dry-run")
    assert proc.returncode == 0 and "mxbench: note: benchmark.warmup_steps" in proc.stderr
    # both places at once: one of them must go
    with pytest.raises(UsageError, match=r"benchmark\.steps and measure\.steps: give it once"):
        parse_matrix("measure: {steps: 5}\nbenchmark: {steps: 6}\n" + HOST)


def test_init_writes_a_matrix_that_loads_and_never_overwrites(tmp_path: Path) -> None:
    proc = mxbench("init", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "matrix.yaml"
    mx = load_matrix(written)
    assert [h.engine for h in mx.hosts] == ["local"] and written.read_text().startswith("# ")
    written.write_text("mine\n")
    again = mxbench("init", str(written))
    assert again.returncode == 2 and "exists; --force replaces it" in again.stderr
    assert written.read_text() == "mine\n"
    assert mxbench("init", "--force", str(tmp_path)).returncode == 0  # a folder: its matrix.yaml
    assert load_matrix(written).hosts[0].name == "local"
    plan = mxbench("run", "--matrix", str(written), "--fast", "--dry-run")
    assert plan.returncode == 0, plan.stderr


def _keys_known(doc: Any, schema: dict[str, Any], node: dict[str, Any], path: str) -> list[str]:
    """Keys (and enum values) an editor would flag: each mapping's keys against the schema's
    properties (a small walk, not a validator: jsonschema is not a dependency)."""
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    options = node.get("anyOf", node.get("oneOf"))
    if options:
        return min((_keys_known(doc, schema, o, path) for o in options), key=len)
    kind = node.get("type")
    if not isinstance(doc, dict | list) and kind in ("object", "array"):
        return [f"{path}: {doc!r} where the schema says {kind}"]
    if isinstance(doc, str) and "enum" in node and doc not in node["enum"]:
        return [f"{path}: {doc!r} not in {node['enum']}"]
    if isinstance(doc, list) and "items" in node:
        return [e for i, v in enumerate(doc) for e in _keys_known(v, schema, node["items"], path)]
    if not isinstance(doc, dict):
        return []
    props = node.get("properties")
    if props is None:
        extra = node.get("additionalProperties")
        if not isinstance(extra, dict):
            return []
        return [e for v in doc.values() for e in _keys_known(v, schema, extra, path)]
    bad = [f"{path}.{k}" for k in doc if k not in props]
    for k, v in doc.items():
        bad += _keys_known(v, schema, props[k], f"{path}.{k}") if k in props else []
    return bad


def test_schema_prints_json_that_knows_every_key_of_the_repos_matrices() -> None:
    proc = mxbench("schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema == json.loads(json.dumps(matrix_schema()))
    assert {"measure", "benchmark", "axes", "hosts"} <= set(schema["properties"])
    assert schema["required"] == ["hosts"]
    measure = json.dumps(schema["$defs"]["Measure"])
    assert all(k in measure for k in KNOBS) and "rigorous" in json.dumps(schema)
    assert "steps" not in schema["$defs"]["Benchmark"]["properties"]  # its place: measure
    files = [default_matrix_path(), ROOT / "matrix.yaml", *sorted(ROOT.glob("examples/**/*.yaml"))]
    for f in files:
        doc = yaml.safe_load(f.read_text())
        assert _keys_known(doc, schema, schema, "") == [], f
        assert load_matrix(f).notes == [], f  # written in the current shape
    assert _keys_known({"benchmark": {"stpes": 1}}, schema, schema, "") == [".benchmark.stpes"]
    assert _keys_known({"measure": "quick"}, schema, schema, "") == []
    assert _keys_known({"measure": "quik"}, schema, schema, "") != []


def test_top_level_help_is_short_and_hides_the_worker() -> None:
    """One screen of a standard 80 x 25 terminal."""
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "mxbench", "--help"], capture_output=True,
                          text=True, timeout=120, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0
    assert len(proc.stdout.splitlines()) <= 25, proc.stdout
    assert max(len(x) for x in proc.stdout.splitlines()) <= 80, proc.stdout
    assert " bench " not in proc.stdout and " init " in proc.stdout and " schema " in proc.stdout
    assert mxbench("bench", "--help").returncode == 0  # hidden, still there


def test_every_command_reads_the_same_default_matrix(tmp_path: Path) -> None:
    for command in ("run", "doctor", "build"):
        text = " ".join(mxbench(command, "--help").stdout.replace("│", " ").split())
        assert "Default: the embedded default matrix, as for every command" in text, command
    built = mxbench("build", cwd=tmp_path)  # no matrix.yaml here: the embedded default
    assert built.returncode == 0 and "nothing to build" in built.stdout, built.stderr


def test_doctor_checks_what_the_same_options_would_run(tmp_path: Path) -> None:
    """`mxbench doctor` takes run's options over the matrix (bad values: exit 2 naming the
    flag), and its pre-flight (--roofs) is of this machine whatever a host's checks found,
    for the --backend given only."""
    bad = mxbench("doctor", "--policy", "float32,fp8")
    assert bad.returncode == 2, bad.stderr
    assert "--policy float32,fp8: axes.policy[1]: unknown policy 'fp8'" in bad.stderr
    ready = mxbench("doctor", "--backend", "torch", "--results", str(tmp_path))
    assert ready.returncode == 0 and "1/1 host(s) ready" in ready.stderr, ready.stdout
    matrix = tmp_path / "m.yaml"
    matrix.write_text("version: 1\nhosts:\n  - {name: box, engine: local, python: /no/python3}\n")
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb", "XDG_CACHE_HOME": str(tmp_path / "c")}
    proc = subprocess.run(
        [sys.executable, "-m", "mxbench", "doctor", "-m", str(matrix), "--roofs",
         "--backend", "torch", "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "not ready: box" in proc.stderr, proc.stderr
    rows = proc.stdout.split("Fast paths on this machine", 1)[1].splitlines()
    assert {
        r.split()[0] for r in rows if r.split() and r.split()[0] in ("jax", "torch", "tensorflow")
    } == {"torch"}
