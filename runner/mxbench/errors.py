"""User-facing errors: one clear line, a fixed exit code, never a traceback."""

from __future__ import annotations


class MxbenchError(Exception):
    """A runtime failure the user should read (exit 1)."""

    exit_code = 1


class UsageError(MxbenchError):
    """Bad arguments, a bad matrix, a missing file (exit 2)."""

    exit_code = 2
