"""mxbench: is mixed precision actually faster on *my* hardware, and if not, why?

Data flow (one direction):

    matrix.yaml -> Matrix -> [Cell] -> engines -> records (results) -> report -> tables

Modules follow it: ``matrix`` (schema, loading), ``cells`` (expansion, stable keys),
``engines`` (how a bench command reaches a machine), ``results`` (record contract, JSONL
store, resume), ``report`` (merge, tables, diagnosis, rendering). ``bench`` is what runs
inside an image: one cell, one process, one JSON record on stdout.
"""

__version__ = "0.1.0"
