"""`mxbench run` (being built)."""

from __future__ import annotations

import typer


def run() -> None:
    """Not implemented yet."""
    typer.echo("mxbench run: not implemented yet", err=True)
    raise typer.Exit(1)
