"""The arguments of one cell, validated before anything heavy is imported.

The parameters themselves (types, bounds, defaults) are :class:`mxbench.matrix.params.Params`;
this adds what only the machine that runs the cell can check (a data directory).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from mxbench import models
from mxbench.errors import UsageError
from mxbench.matrix import params, scale, serving
from mxbench.matrix.params import Params


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
    p, found = _model_input(p)
    serving_problem = serving.problem({k: [v] for k, v in msgspec.structs.asdict(p).items()})
    if serving_problem is not None:
        name, why = serving_problem
        raise UsageError(f"{params.field(name).spec.flag}: {why}")
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
    if spread := scale.problem(
        p.backend, p.devices, p.scaling, p.batch_size, p.epochs, p.nodes, p.allreduce
    ):
        raise UsageError(f"{params.field(spread[0]).spec.flag} {spread[1]}")
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
        from mxbench.bench.model.data import list_images, validation_split

        classes = list_images(p.data)[2]
        if validation_split(p.data) is None and (p.epochs or p.mode == "infer"):
            raise UsageError(
                f"--data {p.data!r}: a training run (and a serving cell's gate) needs a "
                "validation split (val/<class>/ or test/<class>/)"
            )
        limit = found.classes
        if limit is not None and len(classes) > limit:
            raise UsageError(
                f"--data {p.data!r}: {len(classes)} class folders, {p.model} has {limit} classes"
            )
    return p


def _model_input(p: Params) -> tuple[Params, models.Facts]:
    """``p`` with the model's own input where it names no image size, and what the model
    declares; UsageError when the model or its input is refused (the matrix's checks)."""
    try:
        models.parse(p.model)
    except ValueError as exc:
        raise UsageError(f"--model {p.model!r}: {exc}") from None
    try:
        found = models.facts(p.model)
    except (ValueError, SyntaxError) as exc:
        raise UsageError(f"--model: {exc}") from None
    except OSError:
        found = models.Facts()  # the import reports it: an error record, not a usage error
    size, width = models.own_input(found, p.image_size, p.image_width)
    p = msgspec.structs.replace(p, image_size=size, image_width=width)
    problem = models.input_problem(p.model, found, size, width, p.data)
    if problem is not None:
        name, why = problem
        raise UsageError(f"{params.field(name).spec.flag}: {why}")
    return p, found


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
