"""Shared test helpers.

Tests that need a real service (Docker engine, Slurm controller, sshd) skip when it is not
running on a developer's machine, but FAIL in CI: `.ci/run` sets MXBENCH_REQUIRE_SERVICES=1
after starting them, so a broken setup can never turn into a silently green run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import prebuild
from tiers import (  # the fast tier's hooks (pytest -m fast)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
)

PYTHON = sys.executable
__all__ = [
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_runtest_call",
]


def slurm_up() -> bool:
    """A Slurm controller answers and its node is usable."""
    import shutil

    if shutil.which("sinfo") is None:
        return False
    res = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return res.returncode == 0 and any(s in res.stdout for s in ("idle", "mix", "alloc"))


def long_steps() -> int:
    """A step count for a cell that never ends on its own, unique to the caller: found by
    :func:`long_benches`, it is this test's, never a bench another test left (a shared count
    once let a leftover of an earlier test make the next one send its Ctrl-C too early)."""
    return random.randrange(900_000, 1_000_000)


def long_benches(steps: int) -> list[str]:
    """Bench processes of a cell of ``steps`` steps on this machine, whatever started them
    (the host's process table shows those in containers and Slurm jobs too)."""
    out = subprocess.run(
        ["pgrep", "-af", f"bench.*--steps {steps}( |$)"], capture_output=True, text=True
    )
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def owned_processes(run_pid: int, steps: int | None = None) -> list[str]:
    """The processes an ``mxbench run`` of pid ``run_pid`` started on this machine, found by
    the owner every engine stamps on its work (:data:`mxbench.engines.stale.ENV`, inherited
    by what a bench starts); with ``steps``, those of a cell of that many steps."""
    from mxbench.engines import stale

    mine = f"{socket.gethostname()}/{run_pid}/"
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if not proc.environ().get(stale.ENV, "").startswith(mine):
                continue
            line = " ".join(proc.info["cmdline"] or [])
            if steps is None or re.search(f"--steps {steps}( |$)", line):
                found.append(f"{proc.pid} {line[:160]}")
    return found


def wait_until(
    condition: Callable[[], object], what: str, within_s: float = 60, every_s: float = 0.05
) -> None:
    """Poll ``condition`` until it is true, in place of a fixed sleep that guesses how long
    something takes: a fast machine goes on at once, a loaded one gets up to ``within_s``,
    and a condition that never comes fails naming ``what`` was awaited."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {within_s:g} s for {what}")
        time.sleep(every_s)


def require_service(available: bool, what: str) -> None:
    """Skip (developer machine) or fail (CI) when a real service the test needs is missing."""
    if available:
        return
    if os.environ.get("MXBENCH_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} is required in CI (MXBENCH_REQUIRE_SERVICES=1) but not available")
    pytest.skip(f"{what} not available (run .ci/setup to start it)")


def relay(src: socket.socket, dst: socket.socket) -> None:
    """Copy bytes from ``src`` to ``dst`` until either side closes (the TCP proxies that
    tests put in front of a Docker daemon to start it late or cut it mid-cell)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        shut(src, dst)


def shut(*sockets: socket.socket) -> None:
    """Shut both directions of each socket, whatever state it is in (a proxy's link ends)."""
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def repo_root() -> Path:
    return ROOT


# --- the real `cpu` image on the real Docker engine (test_docker, test_engine_contract) ---

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = os.environ.get("MXBENCH_BASE_IMAGE", "mxbench-base:bookworm")
CA = "/etc/ssl/certs/ca-certificates.crt"
SSH = "ssh://root@127.0.0.1"


def docker_ok() -> bool:
    """A Docker engine answers and has the base image: three tries, 30 s each (a loaded CI
    machine's daemon once took over 10 s to answer a ping, and a whole file of tests failed
    as if it had none)."""
    import docker

    for attempt in range(3):
        try:
            client = docker.from_env(timeout=30)
            client.ping()
            client.images.get(BASE_IMAGE)
            return True
        except docker.errors.ImageNotFound:
            return False
        except Exception:
            if attempt < 2:
                time.sleep(2)
    return False


def ssh_ok() -> bool:
    try:
        import docker

        docker.DockerClient(base_url=SSH, timeout=20, use_ssh_client=False).ping()
        return True
    except Exception:
        return False


def mxbench(
    *args: str, cwd: Path | None = None, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``mxbench *args``, its output captured; ``env`` added to this environment."""
    return subprocess.run(
        [sys.executable, "-m", "mxbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, **env} if env else None,
    )


def matrix_text(hosts: str, *, build_args: str = "", timeout_s: float = 300) -> str:
    return f"""
version: 1
measure: {{warmup_steps: 1, steps: 3, repeats: 1}}
benchmark: {{image_size: 32, timeout_s: {timeout_s}}}
axes: {{policy: [float32], batch_size: [4]}}
images:
  cpu:
    dockerfile: Dockerfile
    target: cpu
    build_args: {{BASE_IMAGE: "{BASE_IMAGE}"{build_args}}}
hosts:
{hosts}
"""


def stamped_by_docker(record: dict, tag: str, docker_host: str) -> None:
    """A docker record names the image it ran in (its id, its build's labels), the
    framework inside it, its container and the daemon (test_docker's ssh host too)."""
    import docker

    assert record["engine"] == "docker"
    image_id = docker.from_env().images.get(tag).id
    assert record["image"]["name"] == "cpu" and record["image"]["id"] == image_id
    assert record["image"]["labels"]["io.mxbench.tf-version"] == "2.21.0"
    assert record["software"]["tensorflow"] == "2.21.0"
    assert record["run"]["container"] and record["run"]["docker_host"] == docker_host


def records(results: Path) -> list[dict]:
    out = []
    for f in sorted(results.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def prune_built_images() -> None:
    """Keep the Docker disk bounded across test sessions: remove the images ``mxbench build``
    made (they carry its ``io.mxbench.content-hash`` label) except the newest per name, which
    keeps its layers as the next session's cache, and the dangling layers superseded builds
    leave. A GPU image is ~7 GB; a machine that ran the suite a dozen times had 67 GB of
    them and the next ``mxbench build`` stopped with "no space left on device". Base images
    and anything mxbench did not build are never touched."""
    import docker

    client = docker.from_env(timeout=60)
    newest: dict[str, tuple[str, str]] = {}
    stale: list[str] = []
    for image in client.images.list(filters={"label": "io.mxbench.content-hash"}):
        created = image.attrs.get("Created", "")
        for name in {t.rsplit(":", 1)[0] for t in image.tags} or {image.id}:
            kept = newest.get(name)
            if kept is None or created > kept[0]:
                if kept is not None:
                    stale.append(kept[1])
                newest[name] = (created, image.id)
            else:
                stale.append(image.id)
    keep = {image_id for _, image_id in newest.values()}
    for image_id in set(stale) - keep:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(image_id, force=True)
    with contextlib.suppress(docker.errors.APIError):
        client.images.prune(filters={"dangling": True})


@pytest.fixture(scope="session", autouse=True)
def own_roofs_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's measured roofs (:mod:`mxbench.roofs.cache`) in a directory of its own:
    a bench of a test never reuses what the user's runs, or an earlier session, measured
    (a fresh CI machine starts empty too). Tests of the cache set their own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path_factory.mktemp("roofs")))
        yield


@pytest.fixture(scope="session", autouse=True)
def bounded_docker_disk(request: pytest.FixtureRequest) -> Iterator[None]:
    """`prune_built_images` before the session's builds, in a session that runs the
    image-building tests (test_docker*.py; a full run does). Only there: dangling layers
    include those of a build in progress, so a session that builds nothing must not prune
    under another session's build (it did once, beside a full run: "No such image").
    Before, not after: what a session leaves (its newest images, kept anyway, and its build
    stages' dangling layers: about 12 GB, the app-* stages' virtualenvs) goes when the next
    session that builds starts, so the disk stays bounded by one session's builds; pruning
    again at the end cost every full run 35-37 s (its last test's teardown in the CI logs),
    and a fresh CI machine is discarded after its run anyway."""
    builds = any(item.path.name.startswith("test_docker") for item in request.session.items)
    if builds and docker_ok():
        prune_built_images()
        prebuild.start(request)  # the session's image builds, in the background, after the prune
    yield
    prebuild.stop(request)


_contexts: dict[int, tuple[pytest.TempPathFactory, Path]] = {}
_contexts_lock = threading.Lock()


def snapshot_context(factory: pytest.TempPathFactory) -> Path:
    """The session's frozen copy of the build context, made once by whichever asks first:
    the ``ctx`` fixture or the cpu image's build (in the background)."""
    with _contexts_lock:
        if id(factory) not in _contexts:
            dest = factory.mktemp("ctx")
            from mxbench import images

            images.ImageSpec("cpu", ROOT, "Dockerfile", "cpu").snapshot(dest)
            _contexts[id(factory)] = (factory, dest)
        return _contexts[id(factory)][1]


@pytest.fixture(scope="session")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the build context (and the matrix's home)."""
    require_service(docker_ok(), f"a Docker engine with the base image {BASE_IMAGE}")
    return snapshot_context(tmp_path_factory)


def build_cpu(factory: pytest.TempPathFactory) -> dict:
    """`mxbench build` of the cpu image on the local socket, timed."""
    require_service(docker_ok(), f"a Docker engine with the base image {BASE_IMAGE}")
    ctx = snapshot_context(factory)
    m = ctx / "build.yaml"
    m.write_text(matrix_text("  - {name: box, engine: docker, images: [cpu]}"))
    t0 = time.monotonic()
    out = mxbench("build", "--matrix", str(m), "--ca-bundle", CA, cwd=ctx, env=prebuild.ENV)
    seconds = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    from mxbench import images
    from mxbench.matrix.file import load_matrix

    tag = images.specs(load_matrix(m))["cpu"].tag()
    state = "reused" if "reused" in out.stdout else "built"
    note = f"mxbench build (cpu image): {seconds:.1f} s ({state})"
    return {"matrix": m, "tag": tag, "stdout": out.stdout, "seconds": seconds, "note": note}


def _wants_cpu(item: pytest.Item) -> bool:
    """``built`` by signature, or the docker rig of test_engine_contract (asked for there)."""
    callspec = getattr(item, "callspec", None)
    rig = callspec.params.get("rig") if callspec is not None else None
    return prebuild.uses("built")(item) or rig == "docker"


prebuild.register("cpu", build_cpu, _wants_cpu)


@pytest.fixture(scope="session")
def built(ctx: Path, request: pytest.FixtureRequest) -> dict:
    """The cpu image, built in the background since the session began (tests/prebuild.py)."""
    return prebuild.result(request, "cpu")


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-learn's digits as an image folder, written by the real command."""
    pytest.importorskip("sklearn")
    root = tmp_path_factory.mktemp("data") / "digits"
    run = mxbench("data", "digits", str(root))
    assert run.returncode == 0, run.stderr
    assert "wrote 1,797 digit images" in run.stdout
    return root


# --- nothing a test starts outlives it -----------------------------------------------------


def _kill_tree(procs: list[psutil.Process]) -> list[str]:
    """SIGKILL each process, and its process group where it leads one (a bench runs in a
    session of its own)."""
    killed = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            killed.append(f"pid {proc.pid} ({' '.join(proc.cmdline())[:120]})")
            if os.getpgid(proc.pid) == proc.pid:  # a group of its own (never pytest's)
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
    return killed


@functools.cache
def _services() -> tuple[Any, bool]:
    """A Docker client where an engine answers (else None), and whether a Slurm controller
    answers: found once a session, the client kept (making one costs a round trip)."""
    client = None
    if docker_ok():
        import docker

        client = docker.from_env(timeout=30)
    return client, slurm_up()


def _owned_by_a_gone_run() -> list[str]:
    """Containers and Slurm jobs whose owner (the ``mxbench run`` that made them, labelled
    by :mod:`mxbench.engines.stale`) no longer runs: removed / cancelled, and named."""
    import docker

    from mxbench.engines import stale

    left = []
    client, slurm_running = _services()
    if client is not None:
        try:
            found = client.containers.list(all=True, sparse=True, filters={"label": stale.LABEL})
        except (docker.errors.DockerException, OSError):  # a test stopped or cut the daemon
            found = []
        for c in found:
            if stale.gone((c.attrs.get("Labels") or {}).get(stale.LABEL, "")):
                with contextlib.suppress(docker.errors.APIError):
                    client.containers.get(c.id).remove(force=True)
                    left.append(f"container {c.short_id}")
    if slurm_running:
        out = subprocess.run(["squeue", "-h", "-o", "%i|%k"], capture_output=True, text=True)
        prefix = f"{stale.LABEL}="
        for line in out.stdout.splitlines():
            job, _, comment = line.partition("|")
            if comment.startswith(prefix) and stale.gone(comment.removeprefix(prefix)):
                subprocess.run(["scancel", job], capture_output=True)
                left.append(f"Slurm job {job}")
    return left


def _own_helper(proc: psutil.Process) -> bool:
    """A helper process of this interpreter's own (multiprocessing's resource tracker or
    fork server, started once by whatever first needs it): no test's work, and killing it
    only makes the next user start another, with a warning. An image build the session
    runs in the background (tests/prebuild.py) is none either: the session ends it."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    helper = "multiprocessing.resource_tracker" in line or "multiprocessing.forkserver" in line
    return helper or prebuild.marked(proc)  # or an image build of the session's background


@pytest.fixture(autouse=True)
def nothing_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Whatever a test started is gone when it ends, passed or failed: the processes it
    started that still run (an ``mxbench run`` that hung, its benches in their own process
    groups) are killed, then the bench processes, containers and Slurm jobs of runs that no
    longer exist are swept by their owner label. Fixtures of a wider scope were set up
    before this one and are left alone. What had to be removed is named in a warning: a
    later test never runs beside an earlier one's work (a CI run once carried three such
    benches for 12-17 minutes, at a load of 8-12 on 2 cores)."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    new = [p for p in me.children(recursive=True) if p.pid not in before and not _own_helper(p)]
    left = _kill_tree(new)
    from mxbench.engines import stale

    swept = stale.sweep_processes("test teardown")
    if swept:
        left.append(f"{swept} bench process(es) of a run that no longer exists")
    left += _owned_by_a_gone_run()
    if left:
        import warnings

        warnings.warn(
            f"{request.node.nodeid} left work running; removed: {'; '.join(left)}", stacklevel=1
        )
