"""The arguments of one cell, validated before anything heavy is imported.

The parameters themselves (types, bounds, defaults) are :class:`mxbench.params.Params`;
this adds what only the machine that runs the cell can check (a data directory).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from mxbench import params
from mxbench.errors import UsageError
from mxbench.params import Params


def validate(p: Params) -> Params:
    """``p`` if it describes a cell that can be measured; else UsageError (exit 2)."""
    try:
        msgspec.convert(msgspec.structs.asdict(p), Params)
    except msgspec.ValidationError as exc:
        raise UsageError(_message(p, str(exc))) from None
    if not p.synthetic:
        train = Path(p.data) / "train"
        if not Path(p.data).is_dir():
            raise UsageError(f"--data {p.data!r}: no such directory (or use 'synthetic')")
        if not train.is_dir():
            raise UsageError(f"--data {p.data!r}: no train/ folder (Imagenette layout expected)")
        from mxbench.bench.data import list_images
        from mxbench.bench.model import NUM_CLASSES

        classes = list_images(p.data)[2]
        if len(classes) > NUM_CLASSES:
            raise UsageError(
                f"--data {p.data!r}: {len(classes)} class folders, the model has {NUM_CLASSES}"
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
