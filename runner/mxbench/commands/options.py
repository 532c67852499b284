"""What to measure, on the command line over the matrix: the options ``mxbench run`` and
``mxbench doctor`` share (``--model``, ``--policy``, ``--batch-size``, ``--backend``, ``-P``,
``--set``, ``--fast``, ``--rigorous``), and the matrix overrides they make
(:mod:`mxbench.matrix.document`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from mxbench.errors import UsageError

if TYPE_CHECKING:
    from mxbench.matrix.document import Override

# (typer reads each option from its parameter's default)
PANEL = "What to measure (over the matrix)"
MODEL = typer.Option(
    [], "--model", help="Models (comma-separated): resnet50, gpt, nets/m.py:build, ...",
    show_default=False, rich_help_panel=PANEL,
)  # fmt: skip
POLICY = typer.Option(
    [], "--policy", help="Policies: float32,mixed_float16,mixed_bfloat16,float16.",
    show_default=False, rich_help_panel=PANEL,
)  # fmt: skip
BATCH = typer.Option(
    [], "--batch-size", help="Batch sizes: 32,64 (or max: the largest that fits).",
    show_default=False, rich_help_panel=PANEL,
)  # fmt: skip
BACKEND = typer.Option(
    [], "--backend", help="Keras backends: tensorflow,jax,torch.", show_default=False,
    rich_help_panel=PANEL,
)  # fmt: skip
PARAM = typer.Option(
    [], "--param", "-P", help="NAME=V1,V2: sweep any parameter (image_size=64,128; "
    "docs/matrix.md lists them).", show_default=False, rich_help_panel=PANEL,
)  # fmt: skip
SET = typer.Option(
    [], "--set", help="KEY=VALUE, a YAML value at a dotted key: steps=50, "
    "benchmark.image_size=32, hosts.0.memory_limit=2g.", show_default=False,
    rich_help_panel=PANEL,
)  # fmt: skip
FAST = typer.Option(
    False, "--fast", help="measure: quick: short windows, no profile or one-step check (the "
    "default model: a first answer in under a minute).", rich_help_panel=PANEL,
)  # fmt: skip
RIGOROUS = typer.Option(
    False, "--rigorous", help="measure: rigorous: longer windows, up to 10 processes, "
    "until the speedup is known within ±2%.", rich_help_panel=PANEL,
)  # fmt: skip


AXES = (("--model", "model"), ("--policy", "policy"), ("--batch-size", "batch_size"),
         ("--backend", "backend"))  # fmt: skip


def overrides(
    axes: list[list[str]], param: list[str], set_: list[str], fast: bool, rigorous: bool
) -> list[tuple[Override, list[str]]]:
    """The options over the matrix, each with its command-line words (for the resume line):
    the measure preset first, then the axes, then --set in the order given."""
    from mxbench.matrix import document

    if fast and rigorous:
        raise UsageError("--fast and --rigorous: choose one (measure: quick or rigorous)")
    out: list[tuple[Override, list[str]]] = []
    if fast or rigorous:
        flag = "--fast" if fast else "--rigorous"
        out.append((document.preset("quick" if fast else "rigorous", flag), [flag]))
    for (flag, name), given in zip(AXES, axes, strict=True):
        if given:
            text = ",".join(given)
            out.append((document.axis_from_text(name, text, f"{flag} {text}"), [flag, text]))
    for item in param:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"-P {item[:60]!r}: expected NAME=V1,V2 (-P image_size=64,128)")
        out.append((document.axis_from_text(name.strip(), text, f"-P {item}"), ["-P", item]))
    for item in set_:
        key, sep, text = item.partition("=")
        if not sep:
            raise UsageError(f"--set {item[:60]!r}: expected KEY=VALUE (--set steps=50)")
        origin = f"--set {item}"
        value = document.parse_value(text, origin)
        out.append((document.setting(key.strip(), value, origin), ["--set", item]))
    return out
