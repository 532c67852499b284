"""The ``mxbench`` command line: build, run, report, bench.

One module per command under :mod:`mxbench.commands`; heavy imports (TensorFlow, docker,
pandas) happen inside the commands, so ``mxbench --help`` is instant and ``mxbench bench``
never imports the orchestrator's dependencies.
"""

from __future__ import annotations

import sys

import typer

from mxbench import __version__
from mxbench.commands import bench, build, compare, doctor, report, run
from mxbench.errors import MxbenchError

app = typer.Typer(
    name="mxbench",
    help=(
        "Is mixed precision actually faster on *my* hardware, and if not, why?\n\n"
        "Typical use: `mxbench build` (images), `mxbench run --matrix matrix.yaml` "
        "(every cell on every host), `mxbench report --markdown` (the tables, annotated "
        "and diagnosed). With no --matrix, `run` uses a small embedded local matrix."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mxbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """mxbench: mixed-precision benchmark matrix runner."""


app.command("build")(build.build)
app.command("run")(run.run)
app.command("report")(report.report)
app.command("compare")(compare.compare)
app.command("doctor")(doctor.doctor)
app.command("bench")(bench.bench)


def main() -> None:
    try:
        app()
    except MxbenchError as exc:
        typer.secho(f"mxbench: error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
