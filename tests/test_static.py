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
