"""``engine: docker``: each cell in a fresh container of the host's image.

The host is a Docker Engine reached through the docker SDK: the local socket (or
``DOCKER_HOST``), ``docker_host: ssh://user@host[:port]`` (through the system's ssh client, as
the docker CLI does, so ~/.ssh/config applies: jump hosts, identity files, known hosts;
paramiko only where there is no ``ssh``; the remote needs the docker CLI for ``docker system
dial-stdio``), ``tcp://``, or ``context: NAME``.

Nothing is pulled: ``prepare`` looks for the exact content-hash tag ``mxbench build`` makes
and, when it is missing, names the command that builds it. The record comes back on the
container's stdout, so a remote engine needs no shared disk; the container is removed
afterwards, killed on the cell's timeout, and an ``OOMKilled`` container is reported as such.
A link to the daemon that drops mid-cell is made again: the container is named per cell
attempt, so a create whose answer was lost is found by its name, not made a second time, and
whatever of this run is left on the host when the host's cells end is removed.
GPUs go through device requests; a host without the NVIDIA runtime gets its cells marked
``unsupported`` with the reason.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from mxbench.engines import docker_ssh, retry, stale
from mxbench.engines.base import (
    PROBE,
    STDERR_LIMIT,
    STDOUT_LIMIT,
    Check,
    Engine,
    EngineUnavailable,
    Outcome,
    Tail,
    bounded,
    probe_check,
    register,
    text,
)
from mxbench.engines.docker_container import create_args, device_requests
from mxbench.errors import MxbenchError
from mxbench.matrix.hosts import DockerHost

if TYPE_CHECKING:
    from mxbench.cells.cell import Cell
    from mxbench.matrix.file import Matrix

T = TypeVar("T")


CONNECT_TIMEOUT_S = 60
DOCTOR_TIMEOUT_S = 20


class DockerUnreachable(MxbenchError):
    """The host's Docker daemon cannot be reached (one line, names the address)."""


def address(host: DockerHost) -> str:
    if host.context:
        return f"docker context {host.context!r}"
    return host.docker_host or "the local Docker socket"


def connect(
    host: DockerHost, timeout: float = CONNECT_TIMEOUT_S, attempts: int = retry.ATTEMPTS
) -> Any:
    """A ``docker.DockerClient`` for the host, after a successful ping; a daemon that does not
    answer is tried again (:mod:`mxbench.engines.retry`) before it is declared unreachable."""
    import docker

    where = address(host)
    base_url, tls = host.docker_host, False
    if host.context:
        from docker.context import ContextAPI

        ctx = ContextAPI.get_context(host.context)
        if ctx is None:
            raise DockerUnreachable(f"host {host.name}: no docker context {host.context!r}")
        base_url, tls = ctx.Host, ctx.TLSConfig or False

    def once() -> Any:
        try:
            if base_url:
                # ssh:// through the system ssh client (~/.ssh/config: ProxyJump, keys),
                # bounded: a host that stops answering ends the call (docker_ssh)
                system_ssh = base_url.startswith("ssh://") and shutil.which("ssh") is not None
                if system_ssh:
                    docker_ssh.install()
                client = docker.DockerClient(
                    base_url=base_url, tls=tls, timeout=int(timeout), use_ssh_client=system_ssh
                )
            else:
                client = docker.from_env(timeout=int(timeout))
            client.ping()
        except Exception as exc:  # the SDK, requests, paramiko and sockets all raise their own
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise DockerUnreachable(
                f"host {host.name}: cannot reach the Docker daemon at {where}: {reason}"
            ) from None
        return client

    try:
        return retry.on_exception(
            f"host {host.name}: Docker daemon at {where}", once, DockerUnreachable, attempts
        )
    except DockerUnreachable as exc:
        if attempts > 1:
            raise DockerUnreachable(f"{exc} (tried {attempts} times, {retry.BOUNDS})") from None
        raise


def _reach_fix(host: DockerHost) -> str:
    if host.context:
        return f"check `docker --context {host.context} info`"
    if host.docker_host and host.docker_host.startswith("ssh://"):
        url = urllib.parse.urlsplit(host.docker_host)
        login = f"{url.username}@{url.hostname}" if url.username else str(url.hostname)
        argv = ["ssh", *(["-p", str(url.port)] if url.port else []), login]
        return (
            f"check `{shlex.join([*argv, 'docker', 'info'])}` (key-based login, the docker CLI "
            "there, the user in the docker group)"
        )
    if host.docker_host:
        return f"check that dockerd listens at {host.docker_host}"
    return "start dockerd (or set DOCKER_HOST); check `docker info`"


def has_nvidia_runtime(info: dict[str, Any]) -> bool:
    """True when the daemon can honour GPU device requests (nvidia-container-toolkit)."""
    runtimes = info.get("Runtimes") or {}
    if any("nvidia" in name.lower() for name in runtimes):
        return True
    # CDI-only setups list NVIDIA devices instead of a runtime (Docker 25+).
    return any("nvidia.com/gpu" in str(d) for d in info.get("DiscoveredDevices") or [])


@register
class DockerEngine(Engine):
    name: ClassVar[str] = "docker"
    host_model = DockerHost
    host: DockerHost

    def __init__(self, host: DockerHost, matrix: Matrix) -> None:
        super().__init__(host, matrix)
        self._client: Any = None
        self._unreachable: DockerUnreachable | None = None
        self._images: dict[str, dict[str, Any]] = {}  # name -> {"name", "id", "labels", "tag"}
        self._lock = threading.Lock()
        self._running: Any = None
        self._cancelled = False
        self._dropouts = 0  # times the daemon dropped out during the current cell

    # ------------------------------------------------------------------ prepare

    def machine(self) -> str:
        """The daemon's ID: docker hosts reaching one daemon share its hardware."""
        try:
            return f"docker:{self._connect().info()['ID']}"
        except Exception:  # unreachable: prepare() says so; group by address meanwhile
            return f"docker:{address(self.host)}"

    def _connect(self) -> Any:
        """The client, connecting once (with retries): a daemon found unreachable is not
        tried again by the same run."""
        if self._client is None:
            if self._unreachable is not None:
                raise self._unreachable
            try:
                self._client = connect(self.host)
            except DockerUnreachable as exc:
                self._unreachable = exc
                raise
        return self._client

    def prepare(self, cells: Sequence[Cell]) -> None:
        try:
            self._connect()
        except DockerUnreachable as exc:
            raise EngineUnavailable(str(exc), "error") from None
        self._sweep()
        if self.host.gpus != "none":
            info = self._client.info()
            if not has_nvidia_runtime(info):
                runtimes = ", ".join(sorted(info.get("Runtimes") or {})) or "none"
                raise EngineUnavailable(
                    f"host {self.host.name} asks for GPUs ({_gpus(self.host.gpus)}) but its "
                    f"Docker daemon at {address(self.host)} has no NVIDIA runtime (runtimes: "
                    f"{runtimes}); install nvidia-container-toolkit there, or set gpus: none",
                    "unsupported",
                )
        needed = {c.image: c.image_spec for c in cells if c.image}
        for name, spec in needed.items():
            self._images[name] = self._find_image(name, spec)

    def _sweep(self) -> None:
        """Remove the containers a run of this machine that was killed (-9) left here."""
        # sparse: the list's own fields, no inspect per container (a container another
        # worker removes meanwhile would make that inspect raise 404)
        found = self._client.containers.list(all=True, sparse=True, filters={"label": stale.LABEL})
        left = [c for c in found if stale.gone((c.attrs.get("Labels") or {}).get(stale.LABEL, ""))]
        for container in left:
            _quietly(lambda c=container: c.remove(force=True))
        stale.say(self.host.name, "removed stale containers", len(left))

    def _tag(self, name: str, spec_dict: dict[str, Any] | None) -> str:
        """The content-hash tag ``mxbench build`` gives the image (hashes its context)."""
        from mxbench import images

        recipe = self.matrix.images.get(name) or spec_dict or {}
        return images.resolve(name, recipe, self._bases()).tag()

    def _find_image(self, name: str, spec_dict: dict[str, Any] | None) -> dict[str, Any]:
        from mxbench import images

        tag = self._tag(name, spec_dict)
        image = images.find(self._client, tag)
        if image is None:
            raise EngineUnavailable(
                f"host {self.host.name}: image {name!r} ({tag}) is not on {address(self.host)} "
                f"(never pulled); build it with: {self._build_command(name)}",
                "error",
            )
        labels = {k: v for k, v in (image.labels or {}).items() if k.startswith(images.LABEL)}
        return {"name": name, "id": image.id, "labels": labels, "tag": tag}

    def _bases(self) -> list[Path]:
        from mxbench import images

        return images.base_dirs(self.matrix)

    def _build_command(self, image: str) -> str:
        argv = ["mxbench", "build"]
        if self.matrix.source:
            argv += ["--matrix", str(self.matrix.source)]
        argv += ["--image", image, "--host", self.host.name]
        return shlex.join(argv)

    # ------------------------------------------------------------------ doctor

    def doctor(self, cells: Sequence[Cell]) -> Iterator[Check]:
        where = address(self.host)
        try:  # one attempt: doctor reports how the host is now, in seconds
            self._client = connect(self.host, timeout=DOCTOR_TIMEOUT_S, attempts=1)
        except DockerUnreachable as exc:
            yield Check("reachable", "fail", str(exc), _reach_fix(self.host))
            return
        info = self._client.info()
        daemon = f"daemon {info.get('Name')}, ID {str(info.get('ID'))[:14]}"
        yield Check("reachable", "ok", f"{where} ({daemon})")
        version = self._client.version()
        api = str(version.get("ApiVersion", "?"))
        old = tuple(int(x) for x in api.split(".") if x.isdigit()) < (1, 40)
        yield Check(
            "docker version",
            "fail" if old else "ok",
            f"Docker Engine {version.get('Version', '?')}, API {api}",
            "GPU device requests need API 1.40 (Docker 19.03) or newer" if old else "",
        )
        if self.host.gpus != "none":
            runtimes = ", ".join(sorted(info.get("Runtimes") or {})) or "none"
            yield (
                Check("nvidia runtime", "ok", f"runtimes: {runtimes}")
                if has_nvidia_runtime(info)
                else Check(
                    "nvidia runtime",
                    "fail",
                    f"GPUs requested; runtimes: {runtimes}",
                    "install nvidia-container-toolkit on the host and restart dockerd",
                )
            )
        from mxbench import images

        probed = False
        for name, spec in {c.image: c.image_spec for c in cells if c.image}.items():
            tag = self._tag(name, spec)
            if images.find(self._client, tag) is None:
                yield self._missing_image(name, tag)
                continue
            yield Check(f"image {name}", "ok", f"{tag} is current (content hash)")
            if not probed:  # the devices as the bench sees them, from inside the image
                probed = True
                yield self._probe(tag)

    def _missing_image(self, name: str, tag: str) -> Check:
        repo = tag.split(":")[0]
        others = [t for i in self._client.images.list(name=repo) for t in i.tags if t != tag]
        if others:
            return Check(
                f"image {name}",
                "fail",
                f"stale: {', '.join(others[:2])} was built from other sources, not {tag}",
                self._build_command(name),
            )
        return Check(
            f"image {name}",
            "fail",
            f"{tag} not built on {address(self.host)}",
            self._build_command(name),
        )

    def _probe(self, tag: str) -> Check:
        try:
            container = self._client.containers.run(
                tag,
                entrypoint=["python", *PROBE],
                command=[],
                environment=dict(self.host.env),
                device_requests=device_requests(self.host.gpus),
                labels={
                    "io.mxbench.host": self.host.name,
                    "io.mxbench.doctor": "probe",
                    stale.LABEL: stale.owner(),
                },
                detach=True,
            )
            try:
                container.wait(timeout=DOCTOR_TIMEOUT_S)
                out = text(_logs(container, Tail(STDERR_LIMIT), stdout=True, stderr=False))
                err = text(_logs(container, Tail(STDERR_LIMIT), stdout=False, stderr=True))
            finally:
                _quietly(lambda: container.remove(force=True))
        except Exception as exc:
            reason = " ".join(str(exc).split())[:300]
            return Check(
                "devices",
                "fail",
                f"the probe container failed: {reason}",
                "see `docker info` on the host",
            )
        return probe_check(out, err, self.host.gpus != "none")

    # ------------------------------------------------------------------ run

    def run_one(self, cell: Cell) -> Outcome:
        if self._client is None:
            self.prepare([cell])
        image = self._images[cell.image] if cell.image else None
        if image is None:
            return Outcome(None, status="error", reason=f"host {cell.host}: cell has no image")
        public = {k: image[k] for k in ("name", "id", "labels")}
        if self._cancelled:  # Ctrl-C: no new container
            return Outcome(None, status="error", reason="cancelled", image=public)
        try:
            return self._run_container(cell, image, public)
        except Exception as exc:  # the daemon went away, the image vanished, ...
            reason = " ".join(str(exc).split()) or type(exc).__name__
            return Outcome(
                None,
                status="error",
                reason=f"host {cell.host}: docker failed on {address(self.host)}: {reason}",
                image=public,
            )

    def _run_container(self, cell: Cell, image: dict[str, Any], public: dict[str, Any]) -> Outcome:
        t0 = time.monotonic()
        self._dropouts = 0
        args = create_args(self.host, cell, image["tag"])
        container = self._reconnecting(None, lambda _: self._create(args))
        with self._lock:
            self._running = container
        timed_out = False
        try:
            if self._cancelled:  # Ctrl-C arrived while the container was being created
                return Outcome(None, status="error", reason="cancelled", image=public)
            # a start the daemon got before the link dropped is answered 304 the second time
            container = self._reconnecting(container, _started)
            deadline = t0 + cell.timeout_s
            while True:
                try:
                    container.wait(timeout=max(1.0, deadline - time.monotonic()))
                    break
                except Exception as exc:  # read timeout: requests, urllib3 or paramiko flavour
                    if not _is_timeout(exc):
                        container = self._reattach(container, exc)  # the daemon dropped out
                        continue
                    if time.monotonic() < deadline - 1.0:
                        continue  # a wait cut short (the link was re-made meanwhile)
                    timed_out = True
                    _quietly(container.kill)
                    break
            wall = time.monotonic() - t0
            container = self._reconnecting(container, _reloaded)
            state = container.attrs.get("State") or {}
            stdout = self._reconnecting(
                container, lambda c: _logs(c, Tail(STDOUT_LIMIT), stdout=True, stderr=False)
            )
            stderr = self._reconnecting(
                container, lambda c: _logs(c, Tail(STDERR_LIMIT), stdout=False, stderr=True)
            )
        finally:
            with self._lock:
                self._running = None
            self._remove(container)
        outcome = Outcome(
            returncode=None if timed_out else state.get("ExitCode"),
            stdout=stdout,
            stderr=stderr,
            wall_s=wall,
            timed_out=timed_out,
            oom_killed=bool(state.get("OOMKilled")),
            memory_limit=self.host.memory_limit,
            image=public,
            extra={"container": container.short_id, "docker_host": address(self.host)},
        )
        if self._dropouts:
            outcome.extra["daemon_dropouts"] = self._dropouts
            if not timed_out and not outcome.oom_killed and outcome.returncode:
                outcome.status = "error"
                outcome.reason = (
                    f"host {cell.host}: the Docker daemon at {address(self.host)} dropped out "
                    f"during the cell; its container ended with exit code {outcome.returncode}"
                )
        return outcome

    def _create(self, args: dict[str, Any]) -> Any:
        """The cell's container (:func:`create_args`); after the link dropped during a
        create, the daemon may hold it already: its name is taken (409), so it is the one."""
        import docker

        try:
            return self._client.containers.create(**args)
        except docker.errors.APIError as exc:
            if exc.status_code != 409 or not self._dropouts:
                raise
            return self._client.containers.get(args["name"])

    def _remove(self, container: Any) -> None:
        """Remove the cell's container, through a link made again when it dropped meanwhile
        (bounded: :func:`connect`'s retries): a cut cell leaves no container behind. A
        container already gone is fine; one the daemon cannot be asked about any more is left
        to the end of the run (:meth:`run`) or the next run's sweep."""
        for again in (False, True):
            try:
                self._client.api.remove_container(container.id, force=True)
                return
            except Exception as exc:
                if again or not _lost(exc):
                    return  # 404: gone already; 409: its removal is under way
                try:
                    self._client = connect(self.host)
                except DockerUnreachable:
                    return

    def run(self, cells: Sequence[Cell]) -> Iterator[tuple[Cell, Outcome]]:
        """Cell by cell (:meth:`run_one`); at the end, however it ends, any container of this
        run left on this host (a removal the daemon never got) is removed."""
        try:
            yield from super().run(cells)
        finally:
            if self._client is not None:
                self._sweep_own()

    def _sweep_own(self) -> None:
        labels = [f"{stale.LABEL}={stale.owner()}", f"io.mxbench.host={self.host.name}"]
        with contextlib.suppress(Exception):  # the daemon gone: the next run's sweep
            found = self._client.containers.list(all=True, sparse=True, filters={"label": labels})
            for container in found:
                _quietly(lambda c=container: c.remove(force=True))

    def _reattach(self, container: Any, exc: BaseException) -> Any:
        """After the daemon dropped out mid-cell: connect again (the bounded retries of
        :func:`connect`) and take the cell's container back, at most ``retry.ATTEMPTS``
        times a cell; the exception when the daemon or the container is gone."""
        if not _lost(exc) or self._dropouts >= retry.ATTEMPTS:
            raise exc
        self._dropouts += 1
        self._client = connect(self.host)
        found = self._client.containers.get(container.id)
        with self._lock:
            self._running = found
        return found

    def _reconnecting(self, container: Any, fn: Callable[[Any], T]) -> T:
        """``fn(container)``; when the daemon drops out meanwhile, again on a new link."""
        while True:
            try:
                return fn(container)
            except Exception as exc:
                if container is None:  # creating: connect again, then create again
                    if not _lost(exc) or self._dropouts >= retry.ATTEMPTS:
                        raise
                    self._dropouts += 1
                    self._client = connect(self.host)
                    continue
                container = self._reattach(container, exc)

    def cancel(self) -> None:
        """Kill and remove the running cell's container, waiting at most :attr:`cancel_wait_s`
        for the daemon (a loaded or cut-off one must not hold Ctrl-C); the cell's own thread
        removes it too when its wait ends, and the host's leftovers go at the end (run)."""
        self._cancelled = True
        with self._lock:
            running = self._running
        if running is not None:

            def stop() -> None:
                _quietly(running.kill)
                _quietly(lambda: running.remove(force=True))

            bounded(f"{self.host.name}: container {running.short_id}", stop, self.cancel_wait_s)


def _logs(container: Any, sink: Tail, **which: bool) -> bytes:
    """A container's output, streamed into a bounded tail (a bench's output is untrusted)."""
    for chunk in container.logs(stream=True, follow=False, **which):
        sink.add(chunk)
    return sink.data()


def _gpus(gpus: str | list[str]) -> str:
    return gpus if isinstance(gpus, str) else ",".join(gpus)


def _is_timeout(exc: BaseException) -> bool:
    import socket

    import requests

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (requests.exceptions.Timeout, socket.timeout, TimeoutError)):
            return True
        if "timed out" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _started(container: Any) -> Any:
    container.start()
    return container


def _reloaded(container: Any) -> Any:
    container.reload()
    return container


def _lost(exc: BaseException) -> bool:
    """Whether the link to the daemon broke (reset, refused, closed), as opposed to an
    answer the daemon gave (an HTTP error) or a read timeout."""
    import requests

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (requests.exceptions.ConnectionError, ConnectionError, EOFError)):
            return True
        if type(seen).__name__ in ("ProtocolError", "SSHException"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _quietly(fn: Any) -> None:
    with contextlib.suppress(Exception):  # cleanup of a container that may already be gone
        fn()
