"""The arguments of one cell, validated before anything heavy is imported.

The parameters themselves (types, bounds, defaults) are :class:`mxbench.params.Params`;
this adds what only the machine that runs the cell can check (a data directory).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from mxbench import models, params
from mxbench.errors import UsageError
from mxbench.params import Params


def validate(p: Params) -> Params:
    """``p`` if it describes a cell that can be measured; else UsageError (exit 2)."""
    for f in params.fields():
        if f.spec.parse is not None:
            try:
                p = msgspec.structs.replace(p, **{f.name: f.spec.parse(getattr(p, f.name))})
            except ValueError as exc:
                raise UsageError(f"{f.spec.flag or f.name}: {exc}") from None
    try:
        msgspec.convert(msgspec.structs.asdict(p), Params)
    except msgspec.ValidationError as exc:
        raise UsageError(_message(p, str(exc))) from None
    try:
        models.parse(p.model)
    except ValueError as exc:
        raise UsageError(f"--model {p.model!r}: {exc}") from None
    builtin = models.spec(p.model) if models.is_builtin(p.model) else None
    if builtin is not None and builtin.inputs == "image":
        small = min(p.image_size, p.image_width or p.image_size)
        if small < builtin.min_image_size:
            raise UsageError(
                f"--image-size {small}: {p.model} needs at least {builtin.min_image_size} px"
            )
    spe = p.steps_per_execution
    if not p.epochs and (p.warmup_steps % spe or p.steps % spe):
        raise UsageError(
            f"--steps-per-execution {spe}: --warmup-steps {p.warmup_steps} and --steps "
            f"{p.steps} must be multiples of it"
        )
    if spe > 1 and p.backend == "torch":
        raise UsageError(
            f"--steps-per-execution {spe}: Keras runs one step per call on the "
            "torch backend (only 1)"
        )
    if p.epochs and p.synthetic:
        raise UsageError(
            f"--epochs {p.epochs}: a training run needs --data, a folder with "
            "train/ and val/ (mxbench data digits DIR writes one)"
        )
    if not p.synthetic:
        train = Path(p.data) / "train"
        if not Path(p.data).is_dir():
            raise UsageError(f"--data {p.data!r}: no such directory (or use 'synthetic')")
        if not train.is_dir():
            raise UsageError(f"--data {p.data!r}: no train/ folder (Imagenette layout expected)")
        if builtin is not None and builtin.inputs != "image":
            raise UsageError(f"--data {p.data!r}: an image folder, and {p.model} takes tokens")
        from mxbench.bench.data import list_images, validation_split

        classes = list_images(p.data)[2]
        if p.epochs and validation_split(p.data) is None:
            raise UsageError(
                f"--data {p.data!r}: a training run needs a validation split "
                "(val/<class>/ or test/<class>/)"
            )
        limit = builtin.classes if builtin is not None else None
        if limit is not None and len(classes) > limit:
            raise UsageError(
                f"--data {p.data!r}: {len(classes)} class folders, {p.model} has {limit} classes"
            )
    return p


def _message(p: Params, text: str) -> str:
    """msgspec's "Expected `int` >= 1 - at `$.batch_size`" as "--batch-size 0: expected ..."."""
    m = re.fullmatch(r"(.*) - at `\$\.(\w+)`", text)
    if not m:
        return text
    f = params.field(m.group(2))
    value: Any = getattr(p, f.name)
    what = m.group(1).replace("`", "")
    what = what[0].lower() + what[1:]
    if f.choices is not None:
        what = f"expected one of {', '.join(f.choices)}"
    elif "matching regex" in what:
        what = "must be one line of text (no control characters)"
    return f"{f.spec.flag or f.name} {value!r}: {what}"
