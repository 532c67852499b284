"""Hostile matrices: whatever a user writes, loading ends in a Matrix or in one clear error
(exit 2, file:line, key path), never a traceback, a hang or an hour of expansion."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxbench.cells.repeats import AutoRepeats
from mxbench.matrix.file import load_matrix, parse_matrix
from mxbench.matrix.reader import MAX_MATRIX_BYTES

from mxbench.errors import UsageError

HOST = "hosts: [{name: a, engine: local}]\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("benchmark:\n  steps: 3\n  steps: 4\n" + HOST, ":3: duplicate key 'steps' (first on line 2)"),
        (HOST + "hosts: []\n", ":2: duplicate key 'hosts' (first on line 1)"),
        ("axes: {batch_size: [true]}\n" + HOST, "axes.batch_size[0]: expected a number, not the YAML boolean true"),
        ("benchmark: {steps: false}\n" + HOST, "benchmark.steps: expected a number, not the YAML boolean false"),
        ("benchmark: {repeats: yes}\n" + HOST, "benchmark.repeats: expected a number"),
        ("benchmark: {timeout_s: .inf}\n" + HOST, "benchmark.timeout_s: Input should be a finite number"),
        ("benchmark: {timeout_s: .nan}\n" + HOST, "benchmark.timeout_s: Input should be a finite number"),
        ("benchmark: {timeout_s: 1.0e+9}\n" + HOST, "benchmark.timeout_s: Input should be less than or equal"),
        ("axes: {batch_size: [.inf]}\n" + HOST, "axes.batch_size[0]"),
        ("benchmark: {batch_size: 10000000}\n" + HOST, "benchmark.batch_size: Input should be less than or equal to 65536"),
        ("benchmark: {image_size: 100000}\n" + HOST, "benchmark.image_size: Input should be less than or equal to 8192"),
        ("benchmark: {steps: 99999999}\n" + HOST, "benchmark.steps: Input should be less than or equal"),
        ("benchmark: {repeats: 1000}\n" + HOST, "benchmark.repeats: expected a number of processes per cell from 1 to 100, or auto; got 1000"),
        ("benchmark: {batch_size: '32'}\n" + HOST, "benchmark.batch_size: Input should be a valid integer"),
        ("axes: {policy: ['" + "x" * 5000 + "']}\n" + HOST, "unknown policy 'xxxxxxx"),
        ("a: &a [1, *a]\n" + HOST, ":1: a YAML alias refers to itself"),
    ],
)  # fmt: skip
def test_rejected_with_the_key_path_and_line(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_matrix(text, "m.yaml")
    message = str(exc.value)
    assert needle in message
    assert all(len(line) < 300 for line in message.splitlines()), "echoed values are shortened"


def test_alias_bomb_is_refused_before_expansion() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):  # 10**9 nodes if expanded
        levels.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    t0 = time.perf_counter()
    with pytest.raises(UsageError, match="aliases expand to more than"):
        parse_matrix("\n".join(levels) + "\n" + HOST)
    assert time.perf_counter() - t0 < 5  # refused, not expanded (a generous bound)


def test_too_many_cells_says_how_many_and_why() -> None:
    axis = ", ".join(str(b) for b in range(1, 6001))
    with pytest.raises(UsageError) as exc:
        parse_matrix(f"axes:\n  batch_size: [{axis}]\n" + HOST)
    start = AutoRepeats().start  # auto's processes a cell to start with, by default
    cells = 2 * 6000 * start  # the default's two policies, 6,000 batch sizes
    assert f"expands to {cells:,} cells" in str(exc.value) and "at most 10,000" in str(exc.value)
    assert f"set benchmark.repeats: 1, one process per cell instead of auto's {start}" in str(
        exc.value
    )


def test_many_problems_are_listed_up_to_a_limit() -> None:
    axis = ", ".join(["0"] * 500)
    with pytest.raises(UsageError) as exc:
        parse_matrix(f"axes:\n  batch_size: [{axis}]\n" + HOST)
    lines = str(exc.value).splitlines()
    assert "(500 problems)" in lines[0] and lines[-1].strip() == "... and 480 more"


def _cli(matrix: Path | str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mxbench", "run", "--dry-run", "--matrix", str(matrix)],
        capture_output=True, text=True, timeout=60, cwd=cwd,
    )  # fmt: skip


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "m.yaml")
    return tmp / "m.yaml"


def _loop(tmp: Path) -> Path:
    (tmp / "a.yaml").symlink_to(tmp / "b.yaml")
    (tmp / "b.yaml").symlink_to(tmp / "a.yaml")
    return tmp / "a.yaml"


def _huge(tmp: Path) -> Path:
    path = tmp / "m.yaml"
    with open(path, "wb") as fh:
        fh.truncate(MAX_MATRIX_BYTES * 50)  # sparse: 50 MiB of NULs, no disk used
    return path


def _binary(tmp: Path) -> Path:
    (tmp / "m.yaml").write_bytes(b"\xff\xfe\x00garbage")
    return tmp / "m.yaml"


def _directory(tmp: Path) -> Path:
    (tmp / "m.yaml").mkdir()
    return tmp / "m.yaml"


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (_directory, "is a directory"),
        (_fifo, "not a regular file"),
        (_loop, "cannot read matrix file"),
        (lambda tmp: tmp / ("x" * 300 + ".yaml"), "cannot read matrix file (File name too long)"),
        (_huge, "too large for a matrix file"),
        (_binary, "not UTF-8 text"),
        (lambda tmp: Path("/dev/zero"), "not a regular file"),
    ],
)
def test_unreadable_files_are_one_line_and_exit_2(make, needle: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = _cli(make(tmp_path), tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_permission_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HOST)
    path.chmod(0)
    with pytest.raises(UsageError, match="Permission denied"):
        load_matrix(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_any_text_is_a_matrix_or_a_usage_error(text: str) -> None:
    with contextlib.suppress(UsageError):
        parse_matrix(text)


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
    st.lists(st.integers(), max_size=5),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["benchmark", "axes"]),
    st.sampled_from(["policy", "batch_size", "image_size", "steps", "repeats", "timeout_s",
                     "jit_compile", "data", "warmup_steps", "bogus"]),
    _VALUES,
)  # fmt: skip
def test_any_value_in_any_field_is_accepted_or_named(section: str, key: str, value: object) -> None:
    import yaml

    doc = yaml.safe_dump({section: {key: value}, "hosts": [{"name": "a", "engine": "local"}]})
    try:
        parse_matrix(doc)
    except UsageError as exc:
        assert f"{section}.{key}" in str(exc) or "invalid matrix" in str(exc)


SLURM = "hosts:\n  - name: c\n    engine: slurm\n"


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ('    partition: "debug\\nrm -rf ~"\n', "hosts[0].partition"),
        ('    gres: "gpu:1\\r#SBATCH --wrap=x"\n', "hosts[0].gres"),
        ('    account: "a\\u2028b"\n', "hosts[0].account"),
        ('    workdir: "/tmp/x\\n"\n', "hosts[0].workdir"),
        ('    sbatch_options: ["--qos=high\\necho pwned"]\n', "hosts[0].sbatch_options[0]"),
        ('    env: {"A B": "1"}\n', "hosts[0].env"),
        ('    env: {"$(id)": "1"}\n', "hosts[0].env"),
        ('    env: {OK: "1\\nexport X=2"}\n', "hosts[0].env.OK"),
        ('    python: "/usr/bin/python3\\x00"\n', "hosts[0].python"),
        ('    container_image: "img\\n"\n', "hosts[0].container_image"),
        ("    timeout_s: .inf\n", "hosts[0].timeout_s"),
        ("    timeout_s: true\n", "hosts[0].timeout_s"),
    ],
)
def test_values_that_reach_a_script_are_one_line_at_load_time(extra: str, path: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_matrix(SLURM + extra, "m.yaml")
    assert f"m.yaml:4: {path}" in str(exc.value)


@pytest.mark.parametrize(
    "text",
    [
        'hosts: [{name: d, engine: docker, images: [x], docker_host: "ssh://a\\nb"}]\nimages: {x: {}}',
        'hosts: [{name: d, engine: docker, images: [x]}]\nimages: {x: {build_args: {"A;B": "1"}}}',
        'hosts: [{name: d, engine: docker, images: [x]}]\nimages: {x: {target: "cpu\\nRUN x"}}',
        'hosts: [{name: l, engine: local, env: {"PATH\\n": "x"}}]',
    ],
)
def test_docker_and_local_values_are_checked_too(text: str) -> None:
    with pytest.raises(UsageError, match=r"hosts\[0\]|images\.x"):
        parse_matrix(text)
