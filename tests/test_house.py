"""The house: rooms on their floors (benchmarks/imports.py draws them), each keeping its
private names to itself. Static and fast: the package's source is parsed, nothing is
imported."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

# Functions allowed over the line limit for now, each with why (empty it, don't grow it).
OVER_LIMIT: set[str] = set()


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
                  "if TYPE_CHECKING:\n    from mxbench import nowhere\n",
    })  # fmt: skip
    house = tool.draw(root)
    assert house.circles == [["mxbench.low", "mxbench.sub.high"]]
    assert house.arrows_up == [("mxbench.low", "mxbench.sub.high")]
    assert house.floors["mxbench.top"] > house.floors["mxbench.sub.high"]
    assert house.eager["mxbench.top"] == {"mxbench.sub.high"}  # TYPE_CHECKING is no arrow


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


def test_no_module_over_600_lines() -> None:
    big = [(s.where, s.lines) for s in tool.module_sizes() if s.lines > tool.MAX_MODULE_LINES]
    assert big == []


def test_no_function_over_80_lines() -> None:
    big = [
        (s.where, s.lines)
        for s in tool.function_sizes()
        if s.lines > tool.MAX_FUNCTION_LINES
        and f"{s.where.split(':')[0]} {s.where.split(' ')[1]}" not in OVER_LIMIT
    ]
    assert big == []
