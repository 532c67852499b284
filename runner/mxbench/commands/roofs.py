"""``mxbench roofs``: how fast this machine can go, per dtype and backend, and from where."""

from __future__ import annotations

import typer


def roofs(
    backend: list[str] = typer.Option(
        [],
        "--backend",
        "-b",
        help="Measure with this backend (repeatable). Default: every one installed.",
        show_default=False,
    ),
    refresh: bool = typer.Option(
        False, "--refresh", help="Measure again even where the cache has this device and stack."
    ),
    quick: bool = typer.Option(
        False, "--quick", help="A smaller sweep (seconds per backend; a rougher ceiling)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the roofs as JSON."),
) -> None:
    """Measure and state the roofs: per backend and dtype a matmul ceiling (a short sweep of
    square sizes, medians after warm-up, an FMA = 2 FLOP) and a memory-bandwidth stream, each
    beside the formula peak (ISA flags x cores x clock on a CPU; SMs x clock x the compute
    capability's rate on a GPU) and, for GPUs in mxbench's table, the datasheet figure with
    its source. A measured ceiling above its formula roof is flagged. Measurements are kept
    per device and software stack (`~/.cache/mxbench/roofs/`); `--refresh` measures again.

    ```
    mxbench roofs
    mxbench roofs -b torch --refresh
    mxbench roofs --json
    ```
    """
    import msgspec

    from mxbench.roofs import collect

    known = set(collect.BACKENDS)
    bad = [b for b in backend if b not in known]
    if bad:
        typer.echo(f"unknown backend {', '.join(bad)}: one of {', '.join(sorted(known))}", err=True)
        raise typer.Exit(2)
    found = collect.collect(backend or None, quick=quick, refresh=refresh)
    if as_json:
        doc = {
            "roofs": msgspec.to_builtins(found.roofs),
            "errors": found.errors,
            "cached": found.cached,
            "seconds": found.seconds,
        }
        typer.echo(msgspec.json.encode(doc).decode())
    else:
        typer.echo(collect.text(found))
    if found.errors:
        raise typer.Exit(1)


def preflight(backends: list[str] | None = None) -> None:
    """``doctor --roofs``: the fast paths of this machine, one line per backend and dtype."""
    from mxbench.roofs import collect
    from mxbench.roofs import preflight as pre

    found = collect.collect(backends)
    paths = pre.fast_paths(found)
    typer.echo("\nFast paths on this machine (mxbench roofs for the figures):")
    typer.echo(pre.text(paths))
    for backend, why in found.errors.items():
        typer.echo(f"{backend}: not measured: {why}", err=True)
    warned = [p for p in paths if p.state == "warn"]
    if warned:
        typer.echo(f"warn: {len(warned)} backend/dtype pair(s) without a fast path here", err=True)
