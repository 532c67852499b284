"""Engines: how a cell's bench command reaches a machine. Each engine module defines its
host model and registers itself (:func:`mxbench.engines.base.register`); importing this
package imports them all (none imports the docker SDK until a docker host is used)."""

from __future__ import annotations

from mxbench.engines import docker, local, slurm  # noqa: F401 - registers the engines
from mxbench.engines.base import (
    ENGINES,
    Check,
    Engine,
    EngineUnavailable,
    Outcome,
    bounded,
    to_record,
    to_records,
)


def engine_class(name: str) -> type[Engine]:
    return ENGINES[name]


__all__ = [
    "ENGINES",
    "Check",
    "Engine",
    "EngineUnavailable",
    "Outcome",
    "bounded",
    "engine_class",
    "to_record",
    "to_records",
]
