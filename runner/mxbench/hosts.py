"""The ``hosts:`` entries of a matrix, one model per engine.

The matrix (``mxbench.matrix.file``) validates hosts against these models and the engines
(``mxbench.engines``) run cells on them: both import this module, neither imports the
other. A new engine is its host model here (one class and one :data:`HOSTS` entry) plus its
engine module, which names the model as its ``host_model``.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from mxbench.matrix.schema import HostBase, OneLine, echo


class LocalHost(HostBase):
    """This machine, a fresh subprocess per cell, no container (the embedded default)."""

    engine: Literal["local"]
    python: OneLine | None = None  # interpreter with mxbench[tf]; default: the running one


Gpus = Literal["all", "none"] | list[str]


class DockerHost(HostBase):
    """A Docker Engine (local socket, ssh://, tcp:// or a docker context); each cell in a
    fresh container of one of the host's matrix images (built by `mxbench build`)."""

    needs_build: ClassVar[bool] = True

    engine: Literal["docker"]
    docker_host: OneLine | None = None  # unix://, tcp://, ssh://user@host[:port]; absent = local
    context: OneLine | None = None  # a docker CLI context name
    gpus: Gpus = "none"
    images: Annotated[list[OneLine], Field(min_length=1)]

    def image_names(self) -> list[str]:
        return list(self.images)

    @model_validator(mode="after")
    def _one_address(self) -> DockerHost:
        if self.docker_host and self.context:
            raise ValueError("give docker_host or context, not both")
        return self


class SlurmHost(HostBase):
    engine: Literal["slurm"]
    partition: OneLine | None = None
    gres: OneLine | None = None  # e.g. gpu:v100:1
    constraint: OneLine | None = None
    account: OneLine | None = None
    time_limit: OneLine | None = None  # sbatch --time, e.g. "00:30:00"
    sbatch_options: list[OneLine] = []
    # How the bench runs on the nodes: one of container_image (pyxis / apptainer) or python.
    container_image: OneLine | None = None
    container_runtime: Literal["pyxis", "apptainer"] | None = None
    python: OneLine | None = None  # interpreter with mxbench[tf] on the shared filesystem
    workdir: OneLine | None = None  # shared directory for job scripts and outputs
    array: bool = True  # many cells as one job array
    # A cell of `nodes` processes is a job of that many tasks, this many to a node (1: one
    # node each; a cluster of one node, or to pack them: nodes' worth).
    tasks_per_node: Annotated[int, Field(ge=1, le=1024)] = 1

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, v: str | None) -> str | None:
        # sbatch --time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or unlimited.
        if v is None or re.fullmatch(
            r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|(?i:unlimited|infinite)", v.strip()
        ):
            return v
        raise ValueError(f"{echo(v)} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")

    @field_validator("sbatch_options")
    @classmethod
    def _sbatch_options(cls, v: list[str]) -> list[str]:
        for opt in v:
            try:
                words = shlex.split(opt)
            except ValueError as exc:
                raise ValueError(f"{echo(opt)}: {exc}") from None
            if not words or not words[0].startswith("-"):
                raise ValueError(f"{echo(opt)}: each item is one sbatch option, like '--qos=high'")
        return v

    def runtime_identity(self) -> dict[str, Any] | None:
        return {"container_image": self.container_image} if self.container_image else None

    @model_validator(mode="after")
    def _how(self) -> SlurmHost:
        if self.container_image and self.python:
            raise ValueError("give container_image or python, not both")
        if self.container_runtime and not self.container_image:
            raise ValueError("container_runtime needs container_image")
        return self


# engine name -> its host model: the matrix's host union and its messages come from here.
HOSTS: dict[str, type[HostBase]] = {"local": LocalHost, "docker": DockerHost, "slurm": SlurmHost}
