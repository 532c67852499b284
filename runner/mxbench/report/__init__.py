"""The report: merge result records, build the experiment's tables, annotate, diagnose, render.

``load`` (sources -> one record per cell) -> ``tables`` (one table per host, device, image,
setup) -> ``annotate`` (device headings, from ``devices``) and ``diagnose`` (one function per
rule) -> ``render`` (markdown / CSV / HTML, with ``plot`` for the PNGs). Nothing here is
imported by ``mxbench`` at start-up: the command imports it when it runs.
"""
