"""`mxbench bench` (being built: see the issue for this step)."""

from __future__ import annotations

import typer


def bench() -> None:
    """Not implemented yet."""
    typer.echo("mxbench bench: not implemented yet", err=True)
    raise typer.Exit(1)
