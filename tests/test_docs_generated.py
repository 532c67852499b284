"""The generated references (docs/cli.md, docs/matrix-keys.md) equal their generators'
output, as docs/record.md does (test_results): a changed option, parameter or matrix key
fails here until the page is regenerated."""

from __future__ import annotations

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize(
    ("page", "module"), [("cli.md", "commands.reference"), ("matrix-keys.md", "matrix.reference")]
)
def test_a_generated_page_is_up_to_date(page: str, module: str) -> None:
    import importlib

    render = importlib.import_module(f"mxbench.{module}").render
    assert (DOCS / page).read_text(encoding="utf-8") == render(), (
        f"docs/{page} is out of date: python -m mxbench.{module} > docs/{page}"
    )


def test_the_cli_reference_has_every_command_and_option() -> None:
    import typer

    from mxbench import cli

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    root = typer.main.get_command(cli.app)
    ctx = typer.Context(root, info_name="mxbench")
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        assert command is not None
        if command.hidden:  # the internal worker (mxbench bench): not a user's command
            assert f"## `mxbench {name}" not in text, name
            continue
        assert f"## `mxbench {name}" in text, name
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}`" in text, (name, opt)


def test_the_matrix_keys_reference_has_every_parameter_and_key_with_a_meaning() -> None:
    from mxbench.matrix import file as matrix
    from mxbench.matrix import hosts, params, schema

    text = (DOCS / "matrix-keys.md").read_text(encoding="utf-8")
    rows = {
        line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")
    }
    for f in params.fields():
        if f.spec.role != "repeat":
            assert f"`{f.name}`" in rows, f.name
    models = [matrix.Image, schema.HostBase, *hosts.HOSTS.values()]
    for model in models:
        for name, info in model.model_fields.items():
            if name != "engine":
                assert info.description, f"{model.__name__}.{name} has no docstring"
                assert f"`{name}`" in rows, name
