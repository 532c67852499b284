"""The package's version: one room on the ground floor, so that the bench, the images and the
CLI can name it without importing the package's façade (``mxbench/__init__``)."""

from __future__ import annotations

__version__ = "0.1.0"
