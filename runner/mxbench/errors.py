"""User-facing errors: one clear line, a fixed exit code, never a traceback."""

from __future__ import annotations


class MxbenchError(Exception):
    """A runtime failure the user should read (exit 1)."""

    exit_code = 1


class UsageError(MxbenchError):
    """Bad arguments, a bad matrix, a missing file (exit 2)."""

    exit_code = 2


def pip_install(extra: str, python: str = "python") -> str:
    """The command that installs this mxbench with an extra (``tf``, ``jax``, ``torch``):
    from the checkout it runs from (mxbench is not on a package index), e.g.
    ``python -m pip install -e '/src/mxbench[tf]'``."""
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    source = str(root) if (root / "pyproject.toml").is_file() else "PATH/TO/mxbench-checkout"
    return shlex.join([python, "-m", "pip", "install", "-e", f"{source}[{extra}]"])
