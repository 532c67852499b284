"""The report: merge result records, build the experiment's tables, annotate, diagnose, render.

One path for every format: ``load`` (sources -> one Record per cell) -> ``tables`` (one table
per host, device, image, setup; speedups with intervals from :mod:`mxbench.stats`) ->
``annotate`` (headings, from ``devices``) and ``diagnose`` (one function per rule) ->
``text`` (what every format shows) -> a renderer: ``markdown``, ``html`` (with ``plot``),
or ``frame`` (the pandas DataFrame of ``mxbench.load_results``, which the CSV is written
from). Nothing here is imported by ``mxbench`` at start-up.
"""
