"""The roofs: how fast this hardware can go, per device, dtype and backend, with provenance.

Three kinds of figure, each saying where it came from (:class:`~mxbench.roofs.model.Roof`):

- **measured**: a short matmul shape sweep (medians after warm-up; an FMA is 2 FLOP) and a
  memory-bandwidth stream, run here by each backend in a fresh process
  (:mod:`mxbench.roofs.probe`), cached per device and software stack
  (:mod:`mxbench.roofs.cache`);
- **formula**: the peak that follows from the ISA flags, cores and clock of a CPU
  (:mod:`mxbench.roofs.cpu`) or the SMs, clock and compute capability of a GPU
  (:mod:`mxbench.roofs.gpu`);
- **datasheet**: the vendor's figure, with its source and whether it is dense or sparse
  (:mod:`mxbench.roofs.datasheet`, the one table of GPU figures mxbench keeps).

A measured ceiling beats a table; a figure above 100% of its roof is a finding
(:func:`mxbench.roofs.model.judge`).
"""
