"""`mxbench report` (being built: see the issue for this step)."""

from __future__ import annotations

import typer


def report() -> None:
    """Not implemented yet."""
    typer.echo("mxbench report: not implemented yet", err=True)
    raise typer.Exit(1)
