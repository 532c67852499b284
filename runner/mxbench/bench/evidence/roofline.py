"""The roofs a cell's record carries (``record.roofs``): how fast the device it ran on can
go, per dtype, for its backend, each figure with its provenance.

Found in the bench process, where the cell runs (its host, its container, its Slurm node),
never on the controller: the measured ceilings are those of the stack the cell ran on. Once
per process, before the framework is imported (:func:`find`): the roofs cache
(:mod:`mxbench.roofs.cache`, per device and software stack) has them after the host's first
process, or ``mxbench roofs`` / ``doctor --roofs`` measured them before; else this process
runs the quick probe of its backend (a fresh process, a few seconds on a CPU; the GPU is
still the probe's alone, since the bench has not touched it) and keeps it for the next
process. A cell of several processes (PyTorch's ranks, nodes) only reads the cache: its
ranks start together, and one measuring would hold up the others' rendezvous.

Once the device is known (:meth:`mxbench.bench.process.state.Process.probe_device`),
:func:`for_record` keeps that device's roofs: a CPU's formula and the backend's measured
CPU ceilings, or a GPU's measured, formula and (dense) datasheet roofs.
"""

from __future__ import annotations

import sys

from mxbench.matrix import scale
from mxbench.matrix.params import Params
from mxbench.records.record import Record
from mxbench.roofs import cache, collect
from mxbench.roofs.collect import Roofs
from mxbench.roofs.model import Roof


def find(p: Params) -> Roofs:
    """This host's roofs for ``p``'s backend: cached, or measured now (one process per host
    and stack measures; never raises)."""
    measure = scale.processes(p) == 1

    def announce() -> None:
        print(
            f"mxbench bench: measuring this host's {p.backend} roofs once (a quick matmul "
            f"sweep in a fresh process, seconds; kept in {cache.directory()})",
            file=sys.stderr,
            flush=True,
        )

    found = collect.for_backend(p.backend, measure=measure, announce=announce)
    if found.measured:
        print(f"mxbench bench: roofs measured in {found.seconds:.1f} s", file=sys.stderr)
    for what, why in found.errors.items():
        print(f"mxbench bench: roofs: {what}: {why}", file=sys.stderr)
    return found


def for_record(found: Roofs | None, rec: Record) -> list[Roof]:
    """The roofs of the device ``rec`` ran on (``rec.device.kind``; unknown: every device's),
    measured ones by its backend only; sparse datasheet figures left out (never a dense
    matmul's roof)."""
    if found is None:
        return []
    kind = rec.device.kind
    out = []
    for r in found.roofs:
        on_cpu = r.device == found.cpu
        if r.dense is False or (kind == "gpu" and on_cpu) or (kind == "cpu" and not on_cpu):
            continue
        if r.provenance == "measured" and r.backend != rec.params.backend:
            continue
        out.append(r)
    return out
