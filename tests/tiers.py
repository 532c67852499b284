"""The test tiers: ``pytest -m fast`` (or ``pytest --tier fast``) runs the in-process tests,
the inner loop; plain ``pytest`` runs everything, as CI does (docs/development.md).

A test is ``fast`` unless it is marked ``docker``, ``slurm``, ``slow`` or ``process``, or it
starts a process as far as its source shows: the test function, its fixtures and the helper
functions of tests/ they call (followed by name, to any depth) name ``subprocess``,
``Popen``, ``fork``, ``multiprocessing`` or the like. Library code a test calls is not read;
a fast test that starts a process anyway (an engine's bench, a fan-out's workers) is caught
while it runs: in the fast tier, the interpreter's audit hook (and, for multiprocessing's
spawn, which raises no audit event, ``_posixsubprocess.fork_exec``) sees the process start
and the test fails, naming the ``process`` marker that moves it to the full tier. The classification
is therefore automatic for a new test and checked for an old one.
"""

from __future__ import annotations

import _posixsubprocess
import sys
import types
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent

#: names whose appearance in a test's code (or its helpers') means it starts a process
PROCESS_NAMES = frozenset(
    {
        "subprocess",
        "Popen",
        "fork",
        "forkpty",
        "multiprocessing",
        "posix_spawn",
        "spawnv",
        "execv",
        "execvp",
        "system",
        "CliRunner",  # typer's runner is in-process, but the commands it runs may not be
    }
)
#: markers that keep a test out of the fast tier
SLOW_MARKERS = ("docker", "slurm", "slow", "process")
#: conftest's autouse fixtures: the harness around every test, not the test's own work
HARNESS_FIXTURES = frozenset({"nothing_outlives_the_test", "bounded_docker_disk"})
#: the audit events of a new process (fork, exec, spawn)
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec"}
)


def _code_names(code: types.CodeType) -> Iterator[str]:
    """The global and attribute names a code object (and those nested in it) uses."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _ours(obj: Any) -> bool:
    """A plain function defined in a file of tests/ (a helper we may read)."""
    code = getattr(obj, "__code__", None)
    return code is not None and Path(code.co_filename).resolve().parent == HERE


def starts_processes(func: Any, seen: set[int] | None = None) -> bool:
    """Whether ``func`` (a test, fixture or helper of tests/) names a way to start a process,
    itself or through a helper of tests/ it calls."""
    seen = set() if seen is None else seen
    func = getattr(func, "__wrapped__", func)
    if id(func) in seen or not _ours(func):
        return False
    seen.add(id(func))
    scope = func.__globals__
    for name in set(_code_names(func.__code__)):
        if name in PROCESS_NAMES:
            return True
        found = scope.get(name)
        if isinstance(found, type) and found.__module__ == func.__module__:
            methods = [m for m in vars(found).values() if _ours(m)]
            if any(starts_processes(m, seen) for m in methods):
                return True
        elif _ours(found) and starts_processes(found, seen):
            return True
    return False


def is_fast(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the fast tier (see the module's docstring)."""
    if any(item.get_closest_marker(m) for m in SLOW_MARKERS):
        return False
    func = getattr(item, "function", None)
    if func is None or starts_processes(func):
        return False
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    return not any(
        starts_processes(d.func)
        for name, fixture in defs.items()
        if name not in HARNESS_FIXTURES
        for d in fixture
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=("fast", "all"),
        default="all",
        help="fast: the in-process tests only (the same as -m fast); all: every test",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: in-process, no service (given by tests/tiers.py)")
    config.addinivalue_line("markers", "process: starts a process (so not in the fast tier)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_fast(item):
            item.add_marker(pytest.mark.fast)
    if config.getoption("--tier") == "fast":
        kept = [i for i in items if i.get_closest_marker("fast")]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


_started: list[str] = []
_hooked: list[bool] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in PROCESS_EVENTS:
        _started.append(f"{event} {str(args)[:120]}")


def _recorded(real: Any) -> Any:
    def fork_exec(*args: Any) -> Any:
        _started.append(f"fork_exec {str(args[:2])[:120]}")
        return real(*args)

    return fork_exec


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A test of the fast tier that starts a process fails, in a run of the fast tier only
    (``-m fast`` or ``--tier fast``): it should be marked ``process``."""
    config = item.config
    tiered = config.getoption("--tier") == "fast" or config.option.markexpr == "fast"
    watch = tiered and item.get_closest_marker("fast") is not None
    if watch and not _hooked:
        sys.addaudithook(_audit)
        _hooked.append(True)
    _started.clear()
    real = _posixsubprocess.fork_exec
    if watch:  # what multiprocessing's spawn starts raises no audit event: seen here
        _posixsubprocess.fork_exec = _recorded(real)
    try:
        result = yield
    finally:
        _posixsubprocess.fork_exec = real
    if watch and _started:
        pytest.fail(
            f"a fast-tier test started a process ({_started[0]}); mark it "
            "@pytest.mark.process (tests/tiers.py) so the fast tier stays in-process",
            pytrace=False,
        )
    return result
