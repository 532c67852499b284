"""Keep stdout for the one JSON record; capture what C++ libraries log on stderr.

TensorFlow and XLA write to the file descriptors directly, so redirection happens at the
descriptor level, not by swapping ``sys.stdout``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


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
def capture_stderr() -> Iterator[Captured]:
    """Collect everything written to fd 2 meanwhile, then echo it to stderr as well."""
    out = Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.text = tmp.read().decode(errors="replace")
            sys.stderr.write(out.text)
            sys.stderr.flush()
