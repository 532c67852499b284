"""Bounds on the system ssh client that carries the Docker API to an ``ssh://`` host.

The Docker SDK starts ``ssh HOST docker system dial-stdio`` and reads its stdout with no
timeout, and ssh itself waits forever on a host that accepts the connection and then says
nothing (a hung sshd, a firewall that keeps the session and drops its packets): `mxbench
doctor` against such a host never answered. The SDK's socket is replaced by one whose ssh
gets a connect timeout and keep-alives (``-o ConnectTimeout``, ``-o ServerAliveInterval``,
``-o ServerAliveCountMax``, as ``docker -H ssh://`` users put in ~/.ssh/config), and whose
reads end when ssh does, with ssh's own reason (``Connection to HOST port 22 timed out``)
instead of an empty read. ~/.ssh/config still applies to everything else (ProxyJump, keys,
known hosts); for these three options the values here win (ssh keeps the first value it
reads, and reads its command line before the file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from typing import Any

CONNECT_TIMEOUT_S = 10  # the TCP connection and the SSH banner
ALIVE_INTERVAL_S = 4  # a keep-alive after this long without a word from the host,
ALIVE_COUNT = 3  # and the session ends when this many go unanswered (about 12 s)


def options() -> list[str]:
    """The ssh options that bound a connection to a host that stops answering."""
    return [
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}",
        "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
    ]  # fmt: skip


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class SshEnded(ConnectionError):
    """ssh ended before the Docker API's answer: ``str()`` is ssh's reason."""


def install() -> None:
    """Make the Docker SDK's ``ssh://`` connections (system ssh client) bounded, once."""
    from docker.transport import sshconn

    if getattr(sshconn.SSHSocket, "mxbench_bounded", False):
        return

    class BoundedSSHSocket(sshconn.SSHSocket):  # type: ignore[misc]
        mxbench_bounded = True

        def connect(self, **kwargs: Any) -> None:
            argv = ["ssh", *options()]
            if self.user:
                argv += ["-l", self.user]
            if self.port:
                argv += ["-p", self.port]
            argv += ["--", self.host, "docker system dial-stdio"]
            # ssh's reason, when it ends; open as long as the socket (closed with it)
            self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
            env = dict(os.environ)  # as the SDK starts it: its loader and CA settings aside
            env.pop("LD_LIBRARY_PATH", None)
            env.pop("SSL_CERT_FILE", None)
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                # Ctrl-C reaches mxbench, which ends it (POSIX; Windows has no preexec_fn)
                preexec_fn=None if os.name == "nt" else _ignore_sigint,
            )

        def _write(self, data: bytes) -> int:
            try:
                return super()._write(data)  # type: ignore[no-any-return]
            except BrokenPipeError:  # ssh is gone: say why
                raise SshEnded(self.reason() if self.ended() else "ssh closed its input") from None

        def close(self) -> None:
            # says goodbye on ssh's input, then ends it; ssh gone already: its reason is raised
            with contextlib.suppress(BrokenPipeError):
                super().close()
            if getattr(self, "stderr", None) is not None:
                self.stderr.close()

        def makefile(self, mode: str) -> Any:
            return _Ended(super().makefile(mode), self)

        def ended(self) -> bool:
            """Whether ssh failed and is gone (its output ended: give it a moment to exit);
            an ssh that ended well (status 0) ended a stream that was complete."""
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            return self.proc.poll() not in (None, 0)

        def reason(self) -> str:
            if self.stderr.closed:
                return f"ssh to {self.host} ended"
            self.stderr.seek(0)
            lines = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
            said = lines[-1] if lines else f"ssh exited with status {self.proc.returncode}"
            return f"ssh to {self.host}: {said}"

    sshconn.SSHSocket = BoundedSSHSocket


class _Ended:
    """ssh's stdout as the HTTP client reads it, where its end because ssh failed raises
    :class:`SshEnded` with ssh's reason rather than reading as an empty answer."""

    def __init__(self, raw: Any, sock: Any) -> None:
        self._raw = raw
        self._sock = sock

    def _check(self, data: Any) -> Any:
        if not data and self._sock.ended():
            raise SshEnded(self._sock.reason())
        return data

    def readline(self, *args: Any) -> bytes:
        return self._check(self._raw.readline(*args))  # type: ignore[no-any-return]

    def read(self, *args: Any) -> bytes:
        if args and args[0] == 0:
            return b""
        return self._check(self._raw.read(*args))  # type: ignore[no-any-return]

    def readinto(self, buffer: Any) -> int:
        return self._check(self._raw.readinto(buffer))  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
