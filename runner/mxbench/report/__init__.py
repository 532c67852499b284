"""The report: merge result records, build the experiment's tables, annotate, diagnose, render.

One path for every format: ``load`` (sources -> one Record per cell) -> ``tables`` (one table
per host, device, image, setup; speedups with intervals from :mod:`mxbench.stats`) ->
``annotate`` (headings, from ``devices``) and ``diagnose`` (one function per rule) ->
``text`` (cell texts) -> ``document`` (the answer grids and the sections, built once) -> a
renderer of the document: ``markdown``, ``html`` (with ``plot``), ``export`` (JSON),
``terminal`` (rich) or ``frame`` (the pandas DataFrame of ``mxbench.load_results``, which
the CSV is written from). Nothing here is imported by ``mxbench`` at start-up.
"""
