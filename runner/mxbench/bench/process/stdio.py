"""Keep stdout for the one JSON record; capture what C++ libraries log on stderr.

TensorFlow and XLA write to the file descriptors directly, so redirection happens at the
descriptor level, not by swapping ``sys.stdout``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress


@contextmanager
def stdout_to_stderr() -> Iterator[int]:
    """Point fd 1 at stderr for the duration; yields a descriptor of the real stdout."""
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    try:
        yield real
    finally:
        sys.stdout.flush()
        os.dup2(real, 1)
        os.close(real)


def write_line(fd: int, text: str) -> None:
    data = (text.rstrip("\n") + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


class Captured:
    text: str = ""


@contextmanager
def capture_fd(fd: int, limit: int = -1) -> Iterator[Captured]:
    """Collect what is written to descriptor ``fd`` meanwhile (C and C++ libraries' writes
    included: C's stdio buffers are flushed first and at the end), at most ``limit`` bytes."""
    out = Captured()
    flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield out
        finally:
            flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            out.text = tmp.read(limit).decode(errors="replace")


@contextmanager
def capture_stderr() -> Iterator[Captured]:
    """Collect everything written to fd 2 meanwhile, then echo it to stderr as well."""
    out = Captured()
    try:
        with capture_fd(2) as out:
            yield out
    finally:
        sys.stderr.write(out.text)
        sys.stderr.flush()


def flush() -> None:
    """Flush Python's stdout and stderr, then C's stdio buffers (what C and C++ libraries
    wrote, when the C library can be reached), so that what was written so far is on the
    descriptors."""
    sys.stdout.flush()
    sys.stderr.flush()
    with suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)
