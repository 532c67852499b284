"""``mxbench data``: write a real dataset as an image folder, with no download.

``mxbench data digits DIR`` writes scikit-learn's handwritten digits (1,797 real 8x8 images
that ship inside scikit-learn) as ``DIR/train/<digit>/*.png`` and ``DIR/val/<digit>/*.png``
(``--split test``: the Stack Overflow question's ``test/``): a dataset for training runs
(``benchmark.epochs``) and the synthetic-vs-real input A/B on a machine that cannot download
Imagenette. Imagenette itself (docs/training.md: "Real data") has the same layout.
"""

from __future__ import annotations

from pathlib import Path

import typer

from mxbench.errors import UsageError

app = typer.Typer(
    help="Write a real dataset as an image folder (train/<class>/ + val/<class>/).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("digits")
def digits(
    directory: Path = typer.Argument(..., help="Folder to write (created; must be empty)."),
    split: str = typer.Option(
        "val",
        "--split",
        help="Name of the validation folder: val (Imagenette) or test "
        "(the Stack Overflow question).",
    ),
    fraction: float = typer.Option(
        0.2, "--fraction", help="Share of each class held out for validation (0 to 1)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the stratified split."),
    classes: str = typer.Option(
        "0,1,2,3,4,5,6,7,8,9",
        "--classes",
        help="The digits to write, comma-separated: two "
        "make a binary task (the Stack Overflow network's sigmoid), e.g. --classes 3,8.",
    ),
) -> None:
    """scikit-learn's handwritten digits (1,797 real 8x8 grey images, 10 classes) as PNGs,
    split by class into train/ and a validation folder; needs scikit-learn and Pillow
    (`pip install 'mxbench[data]'`).

    Then e.g. `benchmark: {data: DIR, image_size: 32, epochs: 20, target: 0.9, repeats: 3}`
    trains each policy to 90% validation accuracy from 3 seeds (docs/training.md).
    """
    from mxbench.bench.model.data import VALIDATION, write_digits

    if split not in VALIDATION:
        raise UsageError(f"--split {split!r}: expected one of {', '.join(VALIDATION)}")
    if not 0 < fraction < 1:
        raise UsageError(f"--fraction {fraction}: expected a share between 0 and 1")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"{directory}: exists and is not an empty folder")
    try:
        picked = sorted({int(x) for x in classes.split(",")})
    except ValueError:
        raise UsageError(f"--classes {classes!r}: expected digits 0-9, comma-separated") from None
    if len(picked) < 2 or not all(0 <= x <= 9 for x in picked):
        raise UsageError(f"--classes {classes!r}: expected two or more digits from 0 to 9")
    counts = write_digits(directory, split, fraction, seed, picked)
    total = sum(counts.values())
    typer.echo(
        f"wrote {total:,} digit images to {directory}: "
        + ", ".join(f"{n:,} in {name}/" for name, n in counts.items())
    )
