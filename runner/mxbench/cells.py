"""Expansion of a matrix into cells, each with a stable key.

A cell is (host, image, params): one measurement, in one fresh process. Its key is a hash
of the host name, the image's identity (name and build recipe) and the params, so the same
cell in a later run (``--resume``) or in another results directory has the same key, and
changing anything that changes the number gives a new key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from mxbench.errors import UsageError
from mxbench.matrix import Matrix


@dataclass(frozen=True)
class Cell:
    host: str
    engine: str
    image: str | None  # image name from the matrix; None for engines without images
    params: dict[str, Any] = field(hash=False)
    image_spec: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    timeout_s: float = 1800.0
    key: str = ""

    def bench_args(self) -> list[str]:
        """Arguments of ``mxbench bench`` that measure this cell (after the word ``bench``)."""
        p = self.params
        return [
            "--model", str(p["model"]),
            "--policy", str(p["policy"]),
            "--batch-size", str(p["batch_size"]),
            "--image-size", str(p["image_size"]),
            "--steps", str(p["steps"]),
            "--warmup-steps", str(p["warmup_steps"]),
            "--data", str(p["data"]),
            "--jit-compile", str(p["jit_compile"]),
        ]  # fmt: skip

    def label(self) -> str:
        p = self.params
        img = f" [{self.image}]" if self.image else ""
        rep = f" #{p['repeat']}" if p.get("repeat") else ""
        return f"{self.host}{img} {p['policy']} bs={p['batch_size']}{rep}"


def cell_key(host: str, image: str | None, image_spec: dict | None, params: dict) -> str:
    ident = {"host": host, "image": image, "image_spec": image_spec, "params": params}
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def expand(matrix: Matrix, hosts: list[str] | None = None) -> list[Cell]:
    """All cells, in a deterministic order: host, image, policy, batch size, repeat."""
    names = [h.name for h in matrix.hosts]
    if hosts:
        unknown = [h for h in hosts if h not in names]
        if unknown:
            raise UsageError(
                f"--host {unknown[0]!r}: no such host in the matrix (hosts: {', '.join(names)})"
            )
    b = matrix.benchmark
    cells: list[Cell] = []
    for host in matrix.hosts:
        if hosts and host.name not in hosts:
            continue
        images: list[str | None] = list(getattr(host, "images", None) or [None])
        for image in images:
            spec = matrix.images[image].model_dump() if image else _runtime_identity(host)
            for policy in matrix.axes.policy:
                for batch_size in matrix.axes.batch_size:
                    for repeat in range(b.repeats):
                        params: dict[str, Any] = {
                            "model": b.model,
                            "policy": policy,
                            "batch_size": batch_size,
                            "image_size": b.image_size,
                            "data": b.data,
                            "warmup_steps": b.warmup_steps,
                            "steps": b.steps,
                            "jit_compile": b.jit_compile,
                        }
                        if b.repeats > 1:
                            params["repeat"] = repeat
                        cells.append(
                            Cell(
                                host=host.name,
                                engine=host.engine,
                                image=image,
                                params=params,
                                image_spec=spec,
                                timeout_s=host.timeout_s or b.timeout_s,
                                key=cell_key(host.name, image, spec, params),
                            )
                        )
    return cells


def _runtime_identity(host: object) -> dict[str, Any] | None:
    """What a host without matrix images runs the bench in (a Slurm container image)."""
    container = getattr(host, "container_image", None)
    return {"container_image": container} if container else None
