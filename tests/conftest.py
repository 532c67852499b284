"""Shared test helpers.

Tests that need a real service (Docker engine, Slurm controller, sshd) skip when it is not
running on a developer's machine, but FAIL in CI: `.ci/run` sets MXBENCH_REQUIRE_SERVICES=1
after starting them, so a broken setup can never turn into a silently green run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def require_service(available: bool, what: str) -> None:
    """Skip (developer machine) or fail (CI) when a real service the test needs is missing."""
    if available:
        return
    if os.environ.get("MXBENCH_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} is required in CI (MXBENCH_REQUIRE_SERVICES=1) but not available")
    pytest.skip(f"{what} not available (run .ci/setup to start it)")


@pytest.fixture
def repo_root() -> Path:
    return ROOT
