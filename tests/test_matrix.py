"""Matrix schema v1: loading, validation errors (exit 2, key path, line), expansion, keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from mxbench.cells.cell import cell_key, expand
from mxbench.matrix.file import default_matrix_path, load_matrix, parse_matrix

from mxbench.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]

LOCAL = """\
hosts:
  - name: box
    engine: local
"""


def mxbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_defaults_are_the_experiments() -> None:
    m = parse_matrix(LOCAL)
    assert m.benchmark.image_size is None  # each model's own input (else 256)
    assert m.benchmark.warmup_steps == 5
    assert m.axes.policy == ["float32", "mixed_float16"]
    assert m.axes.batch_size == [32, 64, 128, 256, 512]
    # repeats: auto by default: 2 fresh processes per cell to start (more where needed)
    assert m.benchmark.repeats == "auto" and len(expand(m)) == 2 * 10


def test_repo_matrix_and_embedded_default_load() -> None:
    m = load_matrix(ROOT / "matrix.yaml")
    names = [h.name for h in m.hosts]
    assert names == ["v100", "titan-xp", "m2200-laptop", "cpu-box"]
    assert m.images["gpu-tf217"].build_args["TF_VERSION"].startswith("2.17")
    d = load_matrix(default_matrix_path())
    assert [h.engine for h in d.hosts] == ["local"]
    # small on purpose: a few seconds of paired windows per process, not a step count
    assert d.benchmark.image_size <= 64 and d.benchmark.timed_s <= 10
    assert d.benchmark.pairing == "paired"


def test_cell_keys_did_not_change_across_versions() -> None:
    # Computed by mxbench before the parameters were declared once (commit ae84a5e):
    # --resume must keep recognising cells measured by earlier versions.
    # The embedded default as it was then (it has run 3 repeats since Step 13, and
    # `repeats: auto` since, whose first round is the cells of `repeats: <start>`).
    then = parse_matrix(
        "benchmark: {model: blog-cnn, image_size: 64, data: synthetic, warmup_steps: 2,"
        " steps: 10, timeout_s: 600}\n"
        "axes: {policy: [float32, mixed_bfloat16], batch_size: [8, 32]}\n"
        "hosts: [{name: local, engine: local}]\n"
    )
    # `repeats: auto` is the default now: the first process of each cell keeps the key
    first = {c.key for c in expand(then) if c.params.repeat is None}
    assert first == {"40dc925c236dcb3d", "e2d265699d6cb579", "41215be570443d02", "b093fcf02b1259bc"}
    assert len(expand(then)) == 2 * 4  # auto's start: 2 processes a cell (3 before issue 48)
    single = parse_matrix(
        "benchmark: {model: blog-cnn, image_size: 64, data: synthetic, warmup_steps: 2,"
        " steps: 10, timeout_s: 600, repeats: 1}\n"
        "axes: {policy: [float32, mixed_bfloat16], batch_size: [8, 32]}\n"
        "hosts: [{name: local, engine: local}]\n"
    )
    assert {c.key for c in expand(single)} == first  # repeats: 1, the old default
    now = load_matrix(default_matrix_path()).benchmark
    assert (now.repeats, now.planned_repeats) == ("auto", 2)  # paired processes since Step 18


def test_any_parameter_is_one_value_or_an_axis() -> None:
    m = parse_matrix(
        LOCAL + "benchmark:\n  policy: mixed_bfloat16\n  batch_size: 8\n  repeats: 1\n"
        "axes:\n  image_size: [32, 64]\n  jit_compile: [on, off]\n"
    )
    cells = expand(m)
    assert [(c.params.image_size, c.params.jit_compile) for c in cells] == [
        (32, "on"), (32, "off"), (64, "on"), (64, "off")
    ]  # fmt: skip
    assert {(c.params.policy, c.params.batch_size) for c in cells} == {("mixed_bfloat16", 8)}


def test_each_model_takes_its_own_input_where_the_matrix_names_none(tmp_path: Path) -> None:
    m = parse_matrix(
        LOCAL + "benchmark: {policy: float32, batch_size: 8, repeats: 1}\n"
        "axes:\n  model: [so-cnn, blog-cnn, nets/mine.py:build]\n",
        base=tmp_path,
    )
    (tmp_path / "nets").mkdir()
    declared = "IMAGE_SIZE = 40\nIMAGE_WIDTH = 48\ndef build(): ...\n"
    (tmp_path / "nets" / "mine.py").write_text(declared)
    m._source = tmp_path / "m.yaml"
    taken = [(c.params.image_size, c.params.image_width) for c in expand(m)]
    assert taken == [(224, 336), (256, None), (40, 48)]
    named = parse_matrix(LOCAL + "benchmark: {model: so-cnn, image_size: 64, repeats: 1}\n")
    assert {(c.params.image_size, c.params.image_width) for c in expand(named)} == {(64, None)}


def test_a_models_declared_smallest_input_is_checked_where_the_matrix_names_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "mine.py").write_text("MIN_IMAGE_SIZE = 40\ndef build(): ...\n")
    (tmp_path / "m.yaml").write_text(
        LOCAL + "benchmark: {model: mine.py:build, repeats: 1}\naxes: {image_width: [48, 24]}\n"
    )
    with pytest.raises(UsageError) as exc:
        load_matrix(tmp_path / "m.yaml")  # the model file is found beside the matrix
    assert "m.yaml:5: axes.image_width: 24 px is below mine.py:build's smallest input (40 px)" in (
        str(exc.value)
    )
    (tmp_path / "mine.py").write_text("MIN_IMAGE_SIZE = 300\ndef build(): ...\n")
    with pytest.raises(UsageError) as exc:
        parse_matrix(LOCAL + "benchmark: {model: mine.py:build}\n", "m.yaml", base=tmp_path)
    assert "benchmark.model: 256 px is below" in str(exc.value)
    assert "(the matrix names no image_size: set one)" in str(exc.value)
    (tmp_path / "mine.py").write_text("MIN_IMAGE_SIZE = 4 * 10\ndef build(): ...\n")
    with pytest.raises(UsageError, match=r"MIN_IMAGE_SIZE in mine\.py must be a literal"):
        parse_matrix(LOCAL + "benchmark: {model: mine.py:build}\n", "m.yaml", base=tmp_path)


def test_a_parameter_in_benchmark_and_axes_is_an_error() -> None:
    with pytest.raises(UsageError) as exc:
        parse_matrix(LOCAL + "benchmark:\n  steps: 10\naxes:\n  steps: [10, 20]\n")
    assert "axes.steps: also set under benchmark.steps" in str(exc.value)


BAD = {
    "malformed YAML": ("hosts:\n  - name: [x\n", "malformed YAML"),
    "unknown policy": (
        LOCAL + "axes:\n  policy: [float32, mixed_flaot16]\n",
        "axes.policy[1]: unknown policy 'mixed_flaot16'",
    ),
    "batch size zero": (LOCAL + "axes:\n  batch_size: [0, 32]\n", "axes.batch_size[0]"),
    "negative batch size": (LOCAL + "axes:\n  batch_size: [-4]\n", "axes.batch_size[0]"),
    "undefined image": (
        "images:\n  cpu: {}\nhosts:\n  - name: a\n    engine: docker\n    images: [gpu]\n",
        "hosts[0].images[0]: image 'gpu' is not defined",
    ),
    "duplicate host": (LOCAL + "  - name: box\n    engine: local\n", "duplicate host name 'box'"),
    "unknown key (typo)": (LOCAL + "benchmark:\n  stpes: 3\n", "benchmark.stpes: unknown key"),
    "unknown host key": (LOCAL + "    gpu: all\n", "hosts[0].gpu: unknown key"),
    "unknown engine": ("hosts:\n  - name: a\n    engine: kube\n", "unknown engine"),
    "no hosts": ("benchmark:\n  steps: 3\n", "hosts: Field required"),
    "empty file": ("", "empty"),
    "not a mapping": ("- 1\n- 2\n", "must be a mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_invalid_matrix_exits_2_naming_the_problem(case: str, tmp_path: Path) -> None:
    text, expected = BAD[case]
    path = tmp_path / "m.yaml"
    path.write_text(text)
    proc = mxbench("run", "--matrix", str(path), "--dry-run")
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr


def test_error_names_the_yaml_line() -> None:
    with pytest.raises(UsageError) as exc:
        parse_matrix(LOCAL + "axes:\n  policy: [float32]\n  batch_size: [32, 0]\n", "m.yaml")
    assert "m.yaml:6: axes.batch_size[1]" in str(exc.value)


def test_missing_matrix_file_exits_2(tmp_path: Path) -> None:
    proc = mxbench("run", "--matrix", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2
    assert "nope.yaml: matrix file not found" in proc.stderr


def test_unknown_host_filter_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(LOCAL)
    proc = mxbench("run", "--matrix", str(path), "--host", "nope", "--dry-run")
    assert proc.returncode == 2
    assert "--host 'nope'" in proc.stderr


def test_dry_run_prints_plan_and_count(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        LOCAL
        + "  - name: other\n    engine: local\n"
        + "benchmark:\n  repeats: 1\n"
        + "axes:\n  policy: [float32, mixed_bfloat16]\n  batch_size: [8, 16, 32]\n"
    )
    proc = mxbench("run", "--matrix", str(path), "--dry-run", "--host", "other")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("6 cell(s)")
    assert "mixed_bfloat16" in proc.stdout and "box" not in proc.stdout
    assert not (tmp_path / "results").exists()


def test_cell_keys_are_stable_and_sensitive() -> None:
    one = "benchmark:\n  repeats: 1\n"
    m = parse_matrix(LOCAL + one + "axes:\n  policy: [float32]\n  batch_size: [8]\n")
    (cell,) = expand(m)
    assert (
        cell.key
        == expand(parse_matrix(LOCAL + "axes:\n  policy: [float32]\n  batch_size: [8]\n"))[0].key
    )  # the first process of `repeats: auto` (the default) has the key of `repeats: 1`
    assert (
        cell.key
        == expand(parse_matrix(LOCAL + one + "axes:\n  policy: [float32]\n  batch_size: [8]\n"))[
            0
        ].key
    )
    other = msgspec.structs.replace(cell.params, steps=cell.params.steps + 1)
    assert cell_key(cell.host, None, None, other) != cell.key
    assert cell_key("elsewhere", None, None, cell.params) != cell.key
    assert len(cell.key) == 16


def test_repeats_make_distinct_cells() -> None:
    m = parse_matrix(
        LOCAL + "benchmark:\n  repeats: 3\naxes:\n  policy: [float32]\n  batch_size: [8]\n"
    )
    cells = expand(m)
    assert len({c.key for c in cells}) == 3
    assert [c.params.repeat for c in cells] == [0, 1, 2]


def test_a_label_names_every_parameter_that_tells_cells_apart() -> None:
    """Progress lines, `auto`'s messages and errors name a cell by its label: a parameter the
    matrix sweeps is in it, or two cells would read the same."""
    m = parse_matrix(
        LOCAL + "benchmark: {backend: torch, devices: 2, repeats: 1}\naxes:\n  policy: [float32]\n"
        "  batch_size: [8]\n  allreduce: [native, bfloat16]\n  image_size: [32, 48]\n"
    )
    labels = [c.label() for c in expand(m)]
    assert len(set(labels)) == len(labels) == 4
    assert "box torch float32 bs=8 devices=2 image_size=32 allreduce=bfloat16" in labels
    plain = parse_matrix(
        LOCAL + "benchmark: {repeats: 1}\naxes: {policy: [float32], batch_size: [8, 16]}\n"
    )
    assert [c.label() for c in expand(plain)] == ["box float32 bs=8", "box float32 bs=16"]


def test_slurm_container_image_is_part_of_the_key() -> None:
    base = "hosts:\n  - name: c\n    engine: slurm\n    container_image: {}\n"
    a = expand(parse_matrix(base.format("tf:2.21")))
    b = expand(parse_matrix(base.format("tf:2.17")))
    assert {c.key for c in a}.isdisjoint({c.key for c in b})


def test_policies_alternate_within_a_batch_size_and_repeat() -> None:
    m = parse_matrix(
        LOCAL + "benchmark:\n  repeats: 2\n"
        "axes:\n  policy: [float32, mixed_bfloat16]\n  batch_size: [8, 16]\n"
    )
    order = [(c.params.batch_size, c.params.repeat, c.params.policy[:5]) for c in expand(m)]
    assert order == [
        (8, 0, "float"), (8, 0, "mixed"), (8, 1, "float"), (8, 1, "mixed"),
        (16, 0, "float"), (16, 0, "mixed"), (16, 1, "float"), (16, 1, "mixed"),
    ]  # fmt: skip


def test_engines_run_the_host_models_the_matrix_knows_and_stay_light() -> None:
    from mxbench.matrix.hosts import HOSTS
    from mxbench.matrix.schema import HostBase

    from mxbench.engines import ENGINES

    assert set(ENGINES) == set(HOSTS) == {"local", "docker", "slurm"}
    assert all(e.host_model is HOSTS[name] for name, e in ENGINES.items())
    assert all(issubclass(h, HostBase) for h in HOSTS.values())
    m = parse_matrix(
        "images: {gpu: {}}\nhosts:\n  - {name: a, engine: local}\n"
        "  - {name: b, engine: docker, images: [gpu]}\n"
        "  - {name: c, engine: slurm, container_image: 'tf:2.21'}\n"
    )
    assert {type(h).__module__ for h in m.hosts} == {"mxbench.matrix.hosts"}
    assert [h.needs_build for h in m.hosts] == [False, True, False]
    assert next(c.image for c in expand(m) if c.host == "b") == "gpu"
    assert {c.image_spec["container_image"] for c in expand(m) if c.host == "c"} == {"tf:2.21"}
    # loading a matrix imports no engine (no circle through the engine registry), and so
    # never the docker SDK (a local-only user need not have it)
    probe = (
        "import sys, mxbench.matrix.file; print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('docker', 'paramiko', 'requests')"
        " or m.startswith('mxbench.engines')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2g", 2 * 2**30), ("512m", 512 * 2**20), ("1.5G", 3 * 2**29), ("7340032", 7 * 2**20),
     (" 64mb ", 64 * 2**20), ("1t", 2**40)],
)  # fmt: skip
def test_memory_limit_in_dockers_notation(text: str, expected: int) -> None:
    for engine in ("local", "docker", "slurm"):
        extra = ", images: [x]" if engine == "docker" else ""
        m = parse_matrix(
            f"images: {{x: {{}}}}\nhosts:\n  - {{name: h, engine: {engine}, "
            f"memory_limit: '{text}'{extra}}}\n"
        )
        assert m.hosts[0].memory_limit == expected


@pytest.mark.parametrize(
    ("value", "needle"),
    [("'2 gigs'", "expected a size such as 2g"), ("true", "expected a size"),
     ("1k", "greater than or equal to 6291456"), ("[1]", "expected a size"),
     ("'-1g'", "expected a size"), ("9999t", "less than or equal")],
)  # fmt: skip
def test_bad_memory_limits_are_named(value: str, needle: str) -> None:
    with pytest.raises(UsageError, match="memory_limit") as err:
        parse_matrix(f"hosts:\n  - {{name: h, engine: local, memory_limit: {value}}}\n")
    assert needle in str(err.value)


def test_memory_limit_is_part_of_the_key_only_when_set() -> None:
    plain = expand(parse_matrix(LOCAL))
    limited = expand(
        parse_matrix(LOCAL.replace("engine: local", "engine: local\n    memory_limit: 2g"))
    )
    other = expand(
        parse_matrix(LOCAL.replace("engine: local", "engine: local\n    memory_limit: 1g"))
    )
    assert [c.key for c in plain] == [
        cell_key(c.host, c.image, c.image_spec, c.params) for c in plain
    ]  # no limit: the keys of earlier versions
    keys = [{c.key for c in cells} for cells in (plain, limited, other)]
    assert keys[0].isdisjoint(keys[1]) and keys[1].isdisjoint(keys[2])


def test_an_image_runs_the_cells_of_the_backend_it_carries() -> None:
    from mxbench.cells.cell import expand
    from mxbench.matrix.file import parse_matrix

    from mxbench.errors import UsageError

    text = """version: 1
benchmark: {repeats: 1}
axes: {policy: [float32], batch_size: [4], backend: [tensorflow, jax]}
images:
  cpu: {dockerfile: Dockerfile, target: cpu}
  cpu-jax: {dockerfile: Dockerfile, target: cpu, build_args: {BACKEND: jax}}
hosts:
  - {name: box, engine: docker, images: [cpu, cpu-jax]}
"""
    m = parse_matrix(text)
    assert m.images["cpu"].backend == "tensorflow" and m.images["cpu-jax"].backend == "jax"
    assert [(c.image, c.params.backend) for c in expand(m)] == [
        ("cpu", "tensorflow"), ("cpu-jax", "jax")
    ]  # fmt: skip
    with pytest.raises(
        UsageError,
        match=r"hosts\[0\]\.images\[1\]: image 'cpu-jax' carries "
        r"backend jax \(build_args\.BACKEND\) but the matrix runs tensorflow",
    ):
        parse_matrix(text.replace("backend: [tensorflow, jax]", "backend: [tensorflow]"))
    with pytest.raises(UsageError, match="BACKEND 'mxnet': the Keras backend the image carries"):
        parse_matrix(text.replace("BACKEND: jax", "BACKEND: mxnet"))
