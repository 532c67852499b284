"""The project's static checks, so that the one test command runs them too (and CI with it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args", [("check", "."), ("format", "--check", ".")])
def test_ruff_clean(args: tuple[str, ...]) -> None:
    if not (BIN / "ruff").exists():
        pytest.skip("ruff not installed (pip install -e '.[dev]')")
    proc = _run(str(BIN / "ruff"), *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean_on_the_package() -> None:
    if not (BIN / "mypy").exists():
        pytest.skip("mypy not installed (pip install -e '.[dev]')")
    proc = _run(str(BIN / "mypy"))  # configured in pyproject.toml: strict, runner/mxbench
    assert proc.returncode == 0, proc.stdout + proc.stderr


# import name -> its distribution, where they differ
_DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "pynvml": "nvidia-ml-py",
                 "sklearn": "scikit-learn"}  # fmt: skip


def test_every_import_of_the_package_is_a_declared_dependency() -> None:
    import ast
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"].values()
    specs = [*project["dependencies"], *(s for extra in extras for s in extra)]
    declared = {re.split(r"[\[<>=!~ ;]", s, maxsplit=1)[0].lower() for s in specs}
    imported: set[str] = set()
    for path in (ROOT / "runner" / "mxbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "mxbench"}
    missing = {_DISTRIBUTION.get(m, m).lower() for m in third_party} - declared
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
