"""The ``mxbench`` command line: build, run, report, bench.

One module per command under :mod:`mxbench.commands`; heavy imports (TensorFlow, docker,
pandas) happen inside the commands, so ``mxbench --help`` is instant and ``mxbench bench``
never imports the orchestrator's dependencies.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from mxbench.commands import bench, build, compare, data, doctor, init, report, roofs, run, schema
from mxbench.errors import MxbenchError
from mxbench.version import __version__

app = typer.Typer(
    name="mxbench",
    help=(
        "Is mixed precision actually faster on *my* hardware, and if not, why?\n\n"
        "`mxbench run --policy float32,mixed_bfloat16 --batch-size 32,64`, then "
        "`mxbench report`. Every command reads the embedded default matrix (this machine's "
        "CPU) unless given --matrix FILE; `mxbench init` writes one to edit."
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


app.command("run")(run.run)
app.command("report", short_help="The answer first, then the tables, annotated and diagnosed.")(
    report.report
)
app.command("compare", short_help="Two runs cell by cell, with verdicts (exit 1: a regression).")(
    compare.compare
)
app.command(
    "doctor", short_help="Check every host of a matrix in seconds, each check with its fix."
)(doctor.doctor)
app.command("build")(build.build)
app.command("roofs", short_help="The roofs: measured ceilings per dtype beside the formula peak.")(
    roofs.roofs
)
app.command("init", short_help="Write a commented matrix.yaml for this machine, to edit.")(
    init.init
)
app.command("schema", short_help="Print the JSON Schema of a matrix file, for an editor.")(
    schema.schema
)
app.add_typer(
    data.app, name="data", short_help="Write a real dataset as an image folder, with no download."
)
app.command("bench", hidden=True)(bench.bench)  # the worker inside each cell's process


def _plain_help(command: Any) -> None:
    """Option help as users read it: a flag shows no type (typer writes ``<bool>``), a
    repeatable option its element type and ``...`` (not ``<list[str]>``), and ``<class>`` in
    a help text stays (markdown mode would take it for an HTML tag)."""
    for param in command.params:  # typer's own (vendored) click options
        if getattr(param, "is_flag", False):
            param.display_type_rich = lambda ctx: None
        elif getattr(param, "multiple", False) and hasattr(param, "display_type_rich"):
            shown = param.display_type_rich

            def element(ctx: Any, shown: Any = shown) -> str | None:
                label = shown(ctx)
                return None if label is None else label.replace("list[", "")[:-2] + ">..."

            param.display_type_rich = element
        if getattr(param, "help", None):
            param.help = param.help.replace("<", "\\<")
    for attr in ("help", "short_help"):  # the command's own text too (mxbench data --help)
        if getattr(command, attr, None):
            setattr(command, attr, getattr(command, attr).replace("<", "\\<"))
    get_help_option = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = get_help_option(ctx)
        if option is not None:
            option.display_type_rich = lambda ctx: None
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


def main() -> None:
    command = typer.main.get_command(app)
    _plain_help(command)
    report.EXIT_WHEN_DONE = True  # a command-line report need not free what it built
    try:
        command(prog_name="mxbench")
    except MxbenchError as exc:
        typer.secho(f"mxbench: error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
