"""The house: rooms on their floors (benchmarks/imports.py draws them), each keeping its
private names to itself. Static and fast: the package's source is parsed, nothing is
imported."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

# The size guide (benchmarks/imports.py: modules over 600 lines, functions over 80) is a
# warning, not a cap: what is over it is printed, and is either shrunk or named here with
# why it is right as it is (empty these, don't grow them). A module by its path under
# runner/ ("mxbench/report/sections/inference.py"), a function by its path and dotted name
# ("mxbench/cli.py main").
MODULES_OVER_GUIDE: dict[str, str] = {}
FUNCTIONS_OVER_GUIDE: dict[str, str] = {}


def _imports_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "imports_tool", ROOT / "benchmarks" / "imports.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tool = _imports_tool()


def test_no_import_circles_and_no_lazy_import_closes_one() -> None:
    house = tool.draw()
    assert len(house.rooms) > 50  # the drawing found the package
    assert house.circles == [], house.circles
    assert house.arrows_up == [], house.arrows_up


def _package(root: Path, files: dict[str, str]) -> Path:
    """A fixture package ``mxbench`` (with a subpackage ``sub``) of these modules under
    ``root``, the folder the tool reads."""
    pkg = root / "mxbench"
    (pkg / "sub").mkdir(parents=True)
    for name, text in {"__init__.py": "", "sub/__init__.py": "", **files}.items():
        (pkg / name).write_text(text)
    return root


def test_the_drawing_finds_what_it_must(tmp_path: Path) -> None:
    """Known truth: a circle of two rooms closed by a lazy import, one room above both."""
    root = _package(tmp_path, {
        "low.py": "def f():\n    from mxbench.sub import high\n",
        "sub/high.py": "from mxbench import low\n",
        "top.py": "from typing import TYPE_CHECKING\nfrom mxbench.sub import high\n"
                  "if TYPE_CHECKING:\n    from mxbench import low\n",
    })  # fmt: skip
    house = tool.draw(root)
    assert house.circles == [["mxbench.low", "mxbench.sub.high"]]
    assert house.arrows_up == [("mxbench.low", "mxbench.sub.high")]
    assert house.floors["mxbench.top"] > house.floors["mxbench.sub.high"]
    assert house.eager["mxbench.top"] == {"mxbench.sub.high"}  # a typed import runs never
    assert house.typed["mxbench.top"] == {"mxbench.low"}


def test_a_type_only_import_closes_a_circle_too(tmp_path: Path) -> None:
    """Known truth: two rooms that know each other only through ``if TYPE_CHECKING:`` (in a
    function, or as ``typing.TYPE_CHECKING``) are a circle, though neither import runs."""
    root = _package(tmp_path, {
        "a.py": "from typing import TYPE_CHECKING\nfrom mxbench.sub import b\n"
                "if TYPE_CHECKING:\n    from mxbench import c\n",
        "sub/b.py": "import typing\ndef f():\n    if typing.TYPE_CHECKING:\n"
                    "        from mxbench import a\n",
        "c.py": "from mxbench.sub import b\n",
    })  # fmt: skip
    house = tool.draw(root)
    assert house.circles == [["mxbench.a", "mxbench.c", "mxbench.sub.b"]]
    assert house.arrows_up == []  # no lazy import closes it: the typed ones do
    assert house.typed == {
        "mxbench": set(), "mxbench.sub": set(), "mxbench.a": {"mxbench.c"},
        "mxbench.sub.b": {"mxbench.a"}, "mxbench.c": set(),
    }  # fmt: skip


def test_no_module_takes_another_modules_private_name() -> None:
    assert tool.private_reaches() == []


def test_the_private_names_taken_are_found(tmp_path: Path) -> None:
    """Known truth: every way a module takes another's private name, and what is allowed."""
    root = _package(tmp_path, {
        "sub/_hidden.py": "a = 1\n",
        # a private module is its package's own
        "sub/inside.py": "from mxbench.sub._hidden import a\nfrom mxbench.sub import _hidden\n",
        # its own private names: its own business
        "low.py": "from mxbench.low import _x\n\ndef _own():\n    from mxbench import low\n"
                  "    return low._x, low._y\n",
        "top.py": (
            "from typing import TYPE_CHECKING\n"
            "import mxbench.low\n"
            "import mxbench.low as lo\n"
            "from mxbench import low\n"
            "from mxbench.low import (\n"
            "    __all__,\n"
            "    _x,\n"
            ")\n"
            "from .sub._hidden import a\n"
            "\n"
            "if TYPE_CHECKING:\n"
            "    from mxbench.low import _y\n"
            "\n"
            "def f():\n"
            "    from mxbench import low as other\n"
            "    return low._z, lo._w, mxbench.low._v, other._u, low.public, low.__name__\n"
        ),
    })  # fmt: skip
    found = tool.private_reaches(root)
    assert found == [
        "mxbench/top.py:5 mxbench.low._x",
        "mxbench/top.py:9 mxbench.sub._hidden",
        "mxbench/top.py:12 mxbench.low._y",
        "mxbench/top.py:16 mxbench.low._u",
        "mxbench/top.py:16 mxbench.low._v",
        "mxbench/top.py:16 mxbench.low._w",
        "mxbench/top.py:16 mxbench.low._z",
    ]


def _over_the_guide() -> tuple[dict[str, int], dict[str, int]]:
    """Modules over the guide's lines and functions over theirs, each by the name its
    exceptions dict uses, with its lines."""
    modules = {s.where: s.lines for s in tool.module_sizes() if s.lines > tool.MAX_MODULE_LINES}
    functions = {
        f"{s.where.split(':')[0]} {s.where.split(' ')[1]}": s.lines
        for s in tool.function_sizes()
        if s.lines > tool.MAX_FUNCTION_LINES
    }
    return modules, functions


def test_what_is_over_the_size_guide_is_named_with_its_reason() -> None:
    """The warning list (printed; ``pytest -s`` shows it): everything over the guide, and
    a failure only for what is over it without a reason, or named though no longer over."""
    modules, functions = _over_the_guide()
    for kind, over, limit, named in (
        ("module", modules, tool.MAX_MODULE_LINES, MODULES_OVER_GUIDE),
        ("function", functions, tool.MAX_FUNCTION_LINES, FUNCTIONS_OVER_GUIDE),
    ):
        for where, lines in sorted(over.items(), key=lambda item: -item[1]):
            why = named.get(where, "NO REASON GIVEN")
            print(f"warning: {kind} over {limit} lines: {where} ({lines}): {why}")
    assert sorted(set(modules) - set(MODULES_OVER_GUIDE)) == []
    assert sorted(set(functions) - set(FUNCTIONS_OVER_GUIDE)) == []
    stale = set(MODULES_OVER_GUIDE) - set(modules) | set(FUNCTIONS_OVER_GUIDE) - set(functions)
    assert sorted(stale) == []  # back under the guide: its exception goes


def test_the_sizes_over_the_guide_are_found(tmp_path: Path) -> None:
    """Known truth: one module and one method over the guide, one of each just under."""
    lines = tool.MAX_FUNCTION_LINES - 1  # a def and these: just at the guide
    root = _package(tmp_path, {
        "big.py": "x = 1\n" * (tool.MAX_MODULE_LINES + 1),
        "small.py": "x = 1\n" * tool.MAX_MODULE_LINES,
        "code.py": "class K:\n    def long(self):\n" + "        x = 1\n" * (lines + 1)
                   + "def short():\n" + "    x = 1\n" * lines,
    })  # fmt: skip
    big = [s.where for s in tool.module_sizes(root) if s.lines > tool.MAX_MODULE_LINES]
    assert big == ["mxbench/big.py"]
    long = [s.where for s in tool.function_sizes(root) if s.lines > tool.MAX_FUNCTION_LINES]
    assert long == ["mxbench/code.py:2 K.long"]


def test_at_most_12_top_level_modules() -> None:
    """The package's concerns live in packages named for their role (matrix, cells,
    engines, records, report, stats, ...); its top level keeps the few modules that are the
    whole package's (the CLI, errors, version, the run's orchestration)."""
    top = tool.top_level_modules()
    assert "cli.py" in top  # the count found the package
    assert len(top) <= tool.MAX_TOP_LEVEL_MODULES == 12, top
