"""A check with a bound: `mxbench doctor` against an ssh:// Docker host that sends its SSH
banner and then nothing (a hung sshd, a firewall that keeps the session and drops the rest)
answers in seconds, with the host's reason, instead of waiting forever. The host is real: a
socket server on loopback that says what sshd says first and then holds the connection."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import mxbench

pytest.importorskip("docker")


@pytest.fixture
def mute_host() -> Iterator[int]:
    """The port of a host that sends ``SSH-2.0-OpenSSH_9.0`` and then nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            conn.sendall(b"SSH-2.0-OpenSSH_9.0\r\n")
            held.append(conn)  # kept open, never another byte

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


def test_doctor_answers_in_seconds_naming_a_host_that_went_quiet(
    mute_host: int, tmp_path: Path
) -> None:
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client (the system ssh is what ssh:// Docker hosts go through)")
    (tmp_path / "matrix.yaml").write_text(
        "images:\n  cpu: {dockerfile: Dockerfile, target: cpu}\n"
        "hosts:\n  - name: quiet\n    engine: docker\n"
        f"    docker_host: ssh://root@127.0.0.1:{mute_host}\n    images: [cpu]\n"
    )
    t0 = time.monotonic()
    res = mxbench("doctor", "--matrix", "matrix.yaml", cwd=tmp_path, timeout=60)
    took = time.monotonic() - t0
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, out
    # bounded by ssh's options (ConnectTimeout 10 s, keep-alive 3 x 4 s) and not by the
    # 60 s above: 13 s measured here; slack for a loaded machine
    assert took < 45, f"doctor took {took:.0f} s"
    assert "not ready: quiet" in out
    # the reason names the host, and is ssh's own: the connection timed out (the table may
    # wrap a cell's words, so they are looked for one by one)
    assert f"ssh://root@127.0.0.1:{mute_host}" in out and "timed out" in out, out
