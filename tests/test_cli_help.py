"""--help as users read it: no <bool> on flags, no <list[str]>, and '<class>' not eaten."""

from __future__ import annotations

import os
import subprocess
import sys


def _help(*command: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "mxbench", *command, "--help"],
                          capture_output=True, text=True, check=False, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_flags_and_repeatable_options_read_plainly() -> None:
    for command in ("run", "report", "compare", "doctor", "build"):
        text = _help(command)
        assert "<bool>" not in text and "<list[" not in text, command
    assert "--host" in _help("run") and "<str>..." in _help("run")


def test_angle_brackets_in_option_help_survive() -> None:
    assert "train/<class>/*.jpg" in _help("bench")


def test_angle_brackets_in_a_command_help_survive() -> None:
    assert "train/<class>/" in _help("data") and "val/<class>/" in _help("data")
