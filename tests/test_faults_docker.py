"""Faults of a Docker daemon, injected at our own seam: a TCP proxy in front of the real
daemon's socket that we cut (every connection dropped, new ones refused) for a few seconds
while a cell's container runs. The shared daemon itself is never stopped."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from conftest import BASE_IMAGE, docker_ok, require_service, shut, ssh_ok
from test_faults import GOOD, records

DOCKER_SOCKET = "/var/run/docker.sock"


class Proxy:
    """127.0.0.1:port -> the Docker socket (or the loopback sshd: ``ssh=True``); :meth:`cut`
    drops the link for a while."""

    def __init__(self, ssh: bool = False) -> None:
        self.ssh = ssh
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        scheme = "ssh://root@" if ssh else "tcp://"
        self.url = f"{scheme}127.0.0.1:{self.port}"
        self.up = threading.Event()
        self.up.set()
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.marker: bytes | None = None  # cut_on
        self.cut_s = 0.0
        self.dropping = False
        self.answer_lost = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.up.is_set():
                client.close()  # refused while cut
                continue
            if self.ssh:
                daemon = socket.create_connection(("127.0.0.1", 22))
            else:
                daemon = socket.socket(socket.AF_UNIX)
                daemon.connect(DOCKER_SOCKET)
            with self.lock:
                self.open += [client, daemon]
            for a, b, to_daemon in ((client, daemon, True), (daemon, client, False)):
                threading.Thread(target=self._forward, args=(a, b, to_daemon), daemon=True).start()

    def cut_on(self, marker: bytes, seconds: float) -> None:
        """Cut the link once, right after a request containing ``marker`` reached the daemon
        and before its answer reaches the client (tcp only: ssh's bytes are encrypted)."""
        self.marker, self.cut_s = marker, seconds

    def _forward(self, src: socket.socket, dst: socket.socket, to_daemon: bool) -> None:
        """:func:`relay`, except that once ``marker`` went to the daemon, the daemon's next
        bytes (its answer) are dropped and the link cut: the daemon did the work, the client
        never hears of it."""
        try:
            while data := src.recv(65536):
                if not to_daemon and self.dropping:
                    self.dropping = False
                    self.answer_lost.set()
                    threading.Thread(target=self.cut, args=(self.cut_s,), daemon=True).start()
                    return
                dst.sendall(data)
                if to_daemon and self.marker is not None and self.marker in data:
                    self.marker, self.dropping = None, True
        except OSError:
            pass
        finally:
            shut(src, dst)

    def cut(self, seconds: float) -> None:
        self.up.clear()
        with self.lock:
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.open.clear()
        time.sleep(seconds)
        self.up.set()

    def close(self) -> None:
        self.server.close()
        self.cut(0)


@pytest.fixture
def proxy(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Proxy]:
    """The link to the daemon: tcp (default), or ``ssh`` (parametrize indirectly): the
    system ssh client, through the proxy to the loopback sshd, the host key checked as
    127.0.0.1's (``HostKeyAlias``: known_hosts has no entry for the proxy's port)."""
    ssh = getattr(request, "param", "tcp") == "ssh"
    if ssh:
        require_service(ssh_ok() and Path("/usr/bin/ssh").exists(), "sshd on loopback, ssh")
        config = tmp_path / "ssh_config"
        config.write_text("Host *\n  HostKeyAlias 127.0.0.1\n  BatchMode yes\n"
                          "  ConnectTimeout 10\n")  # fmt: skip
        (tmp_path / "bin").mkdir()
        wrapper = tmp_path / "bin" / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {config} "$@"\n')
        wrapper.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    p = Proxy(ssh)
    try:
        yield p
    finally:
        p.close()


# The bench in the fake image: 8 s, except pure float16 (never ends) and mixed_bfloat16 (0 s).
FAKE_BENCH = f"""
import json, sys, time
time.sleep(300 if "float16" in sys.argv else 0 if "mixed_bfloat16" in sys.argv else 8)
print(json.dumps({GOOD!r}))
"""


def _containers(host: str) -> list[str]:
    import docker

    # sparse: one list call, no inspect of each; a container removed between the list and
    # an inspect made the non-sparse form raise 404 (seen once in CI)
    found = docker.from_env().containers.list(
        all=True, sparse=True, filters={"label": f"io.mxbench.host={host}"}
    )
    return [c.short_id for c in found]


@pytest.fixture
def fake_image(tmp_path: Path, proxy: Proxy) -> Callable[..., subprocess.Popen[str]]:
    """A built image whose bench is FAKE_BENCH, and ``mxbench(*args, policies=[...])`` on a
    matrix of one docker host (its name: ``mxbench.host``) reached through the proxy."""
    require_service(docker_ok(), f"a Docker daemon with {BASE_IMAGE}")
    (tmp_path / "fake.py").write_text(FAKE_BENCH)
    (tmp_path / ".dockerignore").write_text("*\n!fake.py\n")  # the image: fake.py only
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY fake.py /fake.py\n"
        'ENTRYPOINT ["python3", "/fake.py"]\n'
    )
    host = f"cut-{uuid.uuid4().hex[:6]}"

    def mxbench(*args: str, policies: Sequence[str] = ("float32",)) -> subprocess.Popen[str]:
        doc = {
            # the fake bench prints one record per process: one policy per process
            "benchmark": {"image_size": 32, "warmup_steps": 1, "steps": 3, "repeats": 1,
                          "pairing": "process"},
            "axes": {"policy": list(policies), "batch_size": [4]},
            "images": {"fake": {"dockerfile": "Dockerfile",
                                "build_args": {"BASE_IMAGE": BASE_IMAGE}}},
            "hosts": [{"name": host, "engine": "docker", "images": ["fake"],
                       "docker_host": proxy.url}],
        }  # fmt: skip
        (tmp_path / "matrix.yaml").write_text(json.dumps(doc))
        return subprocess.Popen(
            [sys.executable, "-m", "mxbench", *args, "-m", "matrix.yaml"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    mxbench.host = host  # type: ignore[attr-defined]
    build = mxbench("build")
    _, err = build.communicate(timeout=300)
    assert build.returncode == 0, err
    return mxbench


def _started(host: str, run: subprocess.Popen[str]) -> list[str]:
    deadline = time.monotonic() + 60
    while not (found := _containers(host)):
        assert time.monotonic() < deadline and run.poll() is None, run.communicate()
        time.sleep(0.2)
    return found


@pytest.mark.parametrize("proxy", ["tcp", "ssh"], indirect=True)
def test_a_daemon_that_drops_out_mid_cell_is_reconnected_and_the_cell_kept(
    tmp_path: Path, proxy: Proxy, fake_image: Callable[..., subprocess.Popen[str]]
) -> None:
    host = fake_image.host  # type: ignore[attr-defined]
    run = fake_image("run", "-r", "results", policies=["float32", "mixed_float16"])
    try:
        _started(host, run)
        time.sleep(1)
        proxy.cut(3)
        _, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert "Traceback" not in err
    assert "retrying" in err  # the bounded retries said so
    recs = records(tmp_path, host)
    assert [r["status"] for r in recs] == ["ok", "ok"], [r.get("error") for r in recs]
    assert recs[0]["run"]["daemon_dropouts"] >= 1
    assert _containers(host) == []  # the cut cell's container was removed too


def test_the_next_run_removes_the_container_a_killed_run_left(
    tmp_path: Path, fake_image: Callable[..., subprocess.Popen[str]]
) -> None:
    host = fake_image.host  # type: ignore[attr-defined]
    first = fake_image("run", "-r", "results", policies=["float16"])
    try:
        (left,) = _started(host, first)
    finally:
        first.kill()
        first.communicate()
    assert _containers(host) == [left]  # kill -9: nobody removed it
    second = fake_image("run", "-r", "results", policies=["mixed_bfloat16"])
    _, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    assert "removed stale containers (1) left by an earlier run" in err
    assert _containers(host) == []


def test_a_container_created_as_the_link_dropped_is_taken_back_not_made_twice(
    tmp_path: Path, proxy: Proxy, fake_image: Callable[..., subprocess.Popen[str]]
) -> None:
    """The daemon creates the container, then the link drops before the answer arrives:
    asking again must not leave the first one behind (created, never started) beside a
    second one that runs the cell."""
    host = fake_image.host  # type: ignore[attr-defined]
    proxy.cut_on(b"/containers/create", 2)
    run = fake_image("run", "-r", "results", policies=["float32"])  # 8 s
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 180
        while run.poll() is None and time.monotonic() < deadline:
            seen.update(_containers(host))
            time.sleep(0.2)
        _, err = run.communicate(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
    assert proxy.answer_lost.is_set()  # the cut happened where it was meant to
    assert run.returncode == 0, err
    assert len(seen) == 1, seen  # one container for the cell, the one the daemon made
    assert "retrying" in err
    (rec,) = records(tmp_path, host)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["run"]["daemon_dropouts"] >= 1
    assert _containers(host) == []


def test_cancel_does_not_wait_on_a_daemon_that_does_not_answer() -> None:
    """Ctrl-C: a daemon that takes its time over the kill (loaded, or its link cut) must
    not hold `mxbench run`; cancel() returns after its bound, the kill goes on meanwhile."""
    from mxbench.matrix.file import parse_matrix

    from mxbench.engines.docker import DockerEngine

    m = parse_matrix(
        "images: {cpu: {dockerfile: Dockerfile, target: cpu}}\n"
        "hosts: [{name: slow, engine: docker, images: [cpu]}]\n"
    )
    engine = DockerEngine(m.hosts[0], m)
    engine.cancel_wait_s = 0.5
    asked: list[str] = []

    class Slow:  # a container whose daemon answers the kill after 3 s
        short_id = "0123456789ab"

        def kill(self) -> None:
            asked.append("kill")
            time.sleep(3)

        def remove(self, force: bool) -> None:
            asked.append("remove")

    engine._running = Slow()
    t0 = time.monotonic()
    engine.cancel()
    took = time.monotonic() - t0
    assert took < 2, f"{took:.1f} s"
    assert asked == ["kill"]  # asked, and not waited for
