"""The session's Docker image builds, started in the background when the session begins.

An image test's fixture used to build its image when the first test that needs it came up,
so a full run spent its builds (about 9 minutes on a CI machine: the gpu image, cpu,
cpu-avx2, the jax and torch variants, much of it the daemon's layer commits, not CPU) in
sequence with everything else. Now a test file registers its build (:func:`register`: a
name, the function its fixture ran, which collected tests want it); a session whose
collected tests want some starts them, after ``bounded_docker_disk``'s prune, one after
another in a single background thread, in the order the tests need them, while the tests
before them run; each fixture then waits for its own build's result (:func:`result`), and a
build that failed or skipped raises its own error in each test that needs it. A session that
selects no test wanting a build starts none; a build no background started (a fixture asked
for outside the tests that were seen to want it) runs in the fixture, as before.

The build's processes carry :data:`MARK` in their environment: ``nothing_outlives_the_test``
leaves them to the build (they outlive the test that was running when they started, by
design) and the session's end ends any still running (:meth:`Prebuilds.close`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import pytest

#: in the environment of a background build's processes (see the module's docstring)
MARK = "MXBENCH_TEST_PREBUILD"
ENV = {MARK: "1"}

Builder = Callable[[pytest.TempPathFactory], dict]


@dataclass(frozen=True)
class Build:
    name: str
    run: Builder  # what the fixture ran: returns the fixture's value, "note" its timing line
    wanted: Callable[[pytest.Item], bool]  # a collected test that needs it


BUILDS: dict[str, Build] = {}


def register(name: str, run: Builder, wanted: Callable[[pytest.Item], bool]) -> None:
    BUILDS[name] = Build(name, run, wanted)


def uses(fixture: str) -> Callable[[pytest.Item], bool]:
    """A test wants the build when it asks for ``fixture`` (by its signature)."""
    return lambda item: fixture in getattr(item, "fixturenames", ())


def marked(proc: psutil.Process) -> bool:
    """A process of a background build (its environment carries :data:`MARK`)."""
    try:
        return proc.environ().get(MARK) == "1"
    except psutil.Error:
        return False


class Prebuilds:
    """The builds one session started, one at a time in a background thread."""

    def __init__(self, factory: pytest.TempPathFactory, items: list[pytest.Item]) -> None:
        self.factory = factory
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            for build in BUILDS.values():
                if build.name not in first and build.wanted(item):
                    first[build.name] = i
        order = sorted(first, key=first.__getitem__)
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prebuild")
        self.futures = {name: self.pool.submit(BUILDS[name].run, factory) for name in order}

    def close(self) -> None:
        """Drop the builds not begun, end the one running (its processes), wait for it."""
        for future in self.futures.values():
            future.cancel()
        running = [p for p in psutil.Process().children(recursive=True) if marked(p)]
        for proc in running:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(running, timeout=10)
        self.pool.shutdown(wait=True)


KEY = pytest.StashKey[Prebuilds]()


def start(request: pytest.FixtureRequest) -> None:
    """Start the builds the session's collected tests want (none wanted: none started)."""
    items = request.session.items
    if any(build.wanted(item) for item in items for build in BUILDS.values()):
        factory = request.getfixturevalue("tmp_path_factory")
        request.config.stash[KEY] = Prebuilds(factory, items)


def stop(request: pytest.FixtureRequest) -> None:
    started = request.config.stash.get(KEY, None)
    if started is not None:
        started.close()
        del request.config.stash[KEY]


def result(request: pytest.FixtureRequest, name: str) -> dict:
    """The build ``name``'s fixture value: awaited when the background runs it, else built
    here; its error (a failed build's assertion, a missing service's skip) raised here."""
    started = request.config.stash.get(KEY, None)
    future = started.futures.get(name) if started is not None else None
    t0 = time.monotonic()
    if future is None:
        value = BUILDS[name].run(request.getfixturevalue("tmp_path_factory"))
        how = "built in the fixture"
    else:
        value = future.result()
        how = f"background build, waited {time.monotonic() - t0:.1f} s for it"
    print(f"\n{value['note']} [{how}]")
    return value
