"""`mxbench build` (being built: see the issue for this step)."""

from __future__ import annotations

import typer


def build() -> None:
    """Not implemented yet."""
    typer.echo("mxbench build: not implemented yet", err=True)
    raise typer.Exit(1)
