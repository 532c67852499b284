"""Pieces of the matrix schema shared by :mod:`mxbench.matrix.file` and the engines' host models
(each engine module defines and registers its own host model, see
:mod:`mxbench.engines.base`): strict models, one-line text, durations, names."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from mxbench.matrix import params

MAX_CELL_TIMEOUT_S = 7 * 24 * 3600.0
MAX_HOST_NAME = 128


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def echo(value: object, limit: int = 40) -> str:
    """A user's value quoted back in a message, shortened: a message stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(value: str) -> str:
    m = params.control().search(value)
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

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
MIN_MEMORY_LIMIT = 6 * 2**20  # Docker's own floor for a container's memory limit


def parse_bytes(value: object) -> object:
    """Docker's memory notation: bytes as an integer, or a number with a unit ``b``, ``k``,
    ``m``, ``g`` or ``t`` (powers of 1024; ``2g``, ``512m``, ``1.5g``)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected a size such as 2g or 512m, got {echo(value)}")
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*", value, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"expected a size such as 2g or 512m, got {echo(value)}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


# A memory limit in bytes, written as Docker writes it; at least 6 MiB, at most 1 PiB.
MemoryLimit = Annotated[int, BeforeValidator(parse_bytes), Field(ge=MIN_MEMORY_LIMIT, le=2**50)]


def format_bytes(n: int) -> str:
    for unit in ("t", "g", "m", "k"):
        if n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


class HostBase(Strict):
    """What every host entry has. Engine modules subclass it with an ``engine`` literal and
    their own fields, and answer the questions the rest of mxbench asks of a host."""

    # Whether `mxbench build` builds images for hosts of this engine.
    needs_build: ClassVar[bool] = False

    # Bounded: it names the host's results file (<name>.jsonl), its Slurm jobs and containers.
    name: Annotated[
        str, Field(min_length=1, max_length=MAX_HOST_NAME, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    ]
    timeout_s: Seconds | None = None  # overrides benchmark.timeout_s
    env: dict[EnvName, OneLine] = {}  # extra environment for the bench (TF_ENABLE_ONEDNN_OPTS)
    # Memory the bench may use (Docker's notation, 2g / 512m): a cgroup on a local host, the
    # container's limit on a docker host, --mem on Slurm. Past it the cell is an `oom` record.
    memory_limit: MemoryLimit | None = None
    # Hosts of one machine run one at a time (their timings would mix); hosts of different
    # machines run in parallel. Default: `local` for local hosts, the Docker daemon's ID for
    # docker hosts, the cluster for Slurm hosts.
    machine: OneLine | None = None
    # What an hour of this host costs (any currency, the same across a matrix): the report
    # gives the cost of a million training images from it. Not part of the cell key.
    cost_per_hour: (
        Annotated[float, Field(gt=0, lt=1e9, allow_inf_nan=False, strict=False)] | None
    ) = None

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

    def limits(self) -> dict[str, Any]:
        """Limits that change what a cell can do (``memory_limit``): part of the cell key
        when set, so a cell measured under another limit is not taken as done."""
        return {"memory_limit": self.memory_limit} if self.memory_limit is not None else {}
