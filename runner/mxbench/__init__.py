"""mxbench: is mixed precision actually faster on *my* hardware, and if not, why?

Data flow (one direction):

    matrix.yaml -> Matrix -> [Cell] -> engines -> records -> report -> tables

Packages follow it: ``matrix`` (the cell parameters declared once, the matrix file's
schema and loading, the hosts' models), ``cells`` (expansion, stable keys, how many processes
a cell needs), ``engines`` (how a bench command reaches a machine), ``records`` (the record
type, records as JSON lines, the JSONL store), ``report`` (merge, tables, diagnosis,
rendering), ``stats`` (intervals and verdicts). ``bench`` is what runs inside an
image: one cell, one process, one JSON record on stdout.

The public Python API is :func:`load_results` (pandas; imported on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mxbench.version import __version__

__all__ = ["__version__", "load_results"]

if TYPE_CHECKING:
    from mxbench.report.frame import load_results


def __getattr__(name: str) -> Any:
    if name == "load_results":  # pandas stays out of `mxbench --help` and the bench
        from mxbench.report.frame import load_results

        return load_results
    raise AttributeError(f"module 'mxbench' has no attribute {name!r}")
