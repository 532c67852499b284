"""Pieces of the matrix schema shared by :mod:`mxbench.matrix` and the engines' host models
(each engine module defines and registers its own host model, see
:mod:`mxbench.engines.base`): strict models, one-line text, durations, names."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mxbench import params

MAX_CELL_TIMEOUT_S = 7 * 24 * 3600.0


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def echo(value: object, limit: int = 40) -> str:
    """A user's value quoted back in a message, shortened: a message stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(value: str) -> str:
    m = re.search(f"[{params.CONTROL_CHARS}]", value)
    if m:
        raise ValueError(f"control character {m.group()!r} not allowed (one line of text)")
    return value


# Text that reaches a command line, a batch script or a message: one line, bounded.
OneLine = Annotated[
    str, Field(min_length=1, max_length=4096, strict=True), AfterValidator(_one_line)
]
# An environment variable or build argument name.
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=200)]
# A duration in seconds: a number (not a YAML boolean), positive, finite, at most a week.
Seconds = Annotated[float, Field(gt=0, le=MAX_CELL_TIMEOUT_S, allow_inf_nan=False, strict=True)]


class HostBase(Strict):
    """What every host entry has. Engine modules subclass it with an ``engine`` literal and
    their own fields, and answer the questions the rest of mxbench asks of a host."""

    # Whether `mxbench build` builds images for hosts of this engine.
    needs_build: ClassVar[bool] = False

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    timeout_s: Seconds | None = None  # overrides benchmark.timeout_s
    env: dict[EnvName, OneLine] = {}  # extra environment for the bench (TF_ENABLE_ONEDNN_OPTS)

    @property
    def engine_name(self) -> str:
        engine: str = getattr(self, "engine")  # noqa: B009 - each subclass declares it
        return engine

    def image_names(self) -> list[str]:
        """The matrix images this host runs cells in (none: the bench runs without one)."""
        return []

    def runtime_identity(self) -> dict[str, Any] | None:
        """What the bench runs in when the host has no matrix image (part of the cell key)."""
        return None
