"""mxbench: is mixed precision actually faster on *my* hardware, and if not, why?

Data flow (one direction):

    matrix.yaml -> Matrix -> [Cell] -> engines -> records -> report -> tables

Packages follow it: ``matrix`` (the cell parameters declared once, the matrix file's
schema and loading, the hosts' models), ``cells`` (expansion, stable keys, how many processes
a cell needs), ``engines`` (how a bench command reaches a machine), ``records`` (the record
type, records as JSON lines, the JSONL store), ``report`` (merge, tables, diagnosis,
rendering), ``stats`` (intervals and verdicts). ``bench`` is what runs inside an
image: one cell, one process, one JSON record on stdout.

The declared Python API (docs/api.md) is what this module exports: :func:`load_results`
(pandas), :func:`run`, :func:`render_report`, :func:`speedup`, :func:`load_records` and
the types they return, each imported on first use; every other module is private by
convention. The command line is a thin wrapper over the same rooms (``mxbench.session``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mxbench.version import __version__

__all__ = [
    "Ratio",
    "Record",
    "RunResult",
    "__version__",
    "load_records",
    "load_results",
    "render_report",
    "run",
    "speedup",
]

if TYPE_CHECKING:
    from mxbench.api import Ratio, Record, RunResult, load_records, render_report, run, speedup
    from mxbench.report.frame import load_results


def __getattr__(name: str) -> Any:
    # pandas, numpy and msgspec stay out of `mxbench --help` and the bench until asked for
    if name == "load_results":
        from mxbench.report.frame import load_results

        return load_results
    if name in __all__:
        from mxbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'mxbench' has no attribute {name!r}")
