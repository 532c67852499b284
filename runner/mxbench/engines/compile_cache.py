"""A persistent XLA compilation cache shared by the bench processes of one host in one run.

Repeats (``measure.repeats``, ``repeats: auto``) start a fresh process per measurement, and
each used to compile the same programs again: under JAX every initializer and the train step
(tens of seconds per process on a CPU, up to 90 s per cell on an H100). With a cache, the
first process of a cell compiles and the others load. Compilation happens before the timed
window, so the timed steps are unchanged; what drops is ``phases_s.build`` and
``phases_s.first_step`` of the later processes.

- **JAX**: ``JAX_COMPILATION_CACHE_DIR``, with the minimum compile time and entry size lowered
  to 0 (JAX's defaults skip programs that compile in under a second, which is most of them).
- **TensorFlow**: ``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory``, which applies to
  XLA-compiled functions only (``jit_compile`` on, or Keras choosing it under ``auto``).
- **PyTorch**: nothing to cache (Keras runs it eagerly).

A setting the host's ``env`` (or the caller's environment) already makes is left alone.
The directory is a fresh temporary one per host and run, removed when the run ends, so a
run's first process pays what a user's first run would.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref

JAX_DIR = "JAX_COMPILATION_CACHE_DIR"
JAX_MINIMA = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}
TF_FLAG = "--tf_xla_persistent_cache_directory"


class CompileCache:
    """The cache directory of one host's run (made at first use) and the environment that
    points a bench process at it."""

    def __init__(self) -> None:
        self._dir: str | None = None

    @property
    def path(self) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="mxbench-xla-cache-")
            weakref.finalize(self, shutil.rmtree, self._dir, True)
        return self._dir

    def env(self, backend: str, env: dict[str, str]) -> dict[str, str]:
        """What to add to ``env`` (a bench process's environment) for ``backend``."""
        if backend == "jax" and JAX_DIR not in env:
            return {JAX_DIR: self.path, **{k: v for k, v in JAX_MINIMA.items() if k not in env}}
        flags = env.get("TF_XLA_FLAGS", "")
        if backend == "tensorflow" and TF_FLAG not in flags:
            return {"TF_XLA_FLAGS": f"{flags} {TF_FLAG}={self.path}".strip()}
        return {}
