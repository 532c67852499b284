"""Engines: how a cell's bench command reaches a machine (one module per engine)."""

from __future__ import annotations

import importlib

from mxbench.engines.base import Engine, EngineUnavailable, Outcome, to_record

# engine name -> "module:Class", imported only when a host uses it (docker's SDK is not
# needed to run locally).
_ENGINES = {
    "local": "mxbench.engines.local:LocalEngine",
    "docker": "mxbench.engines.docker:DockerEngine",
    "slurm": "mxbench.engines.slurm:SlurmEngine",
}


def engine_class(name: str) -> type[Engine]:
    module, cls = _ENGINES[name].split(":")
    engine: type[Engine] = getattr(importlib.import_module(module), cls)
    return engine


__all__ = ["Engine", "EngineUnavailable", "Outcome", "engine_class", "to_record"]
