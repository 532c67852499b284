"""Draw the house: the import graph of runner/mxbench, its floors, circles and arrows up.

Rooms are the package's modules (a package's ``__init__`` is the room named after the
package). An arrow is an import of one room by another: at module level ("eager"), or inside
a function ("lazy"); imports under ``if TYPE_CHECKING:`` never run and are left out. A bare
``import mxbench.a.b`` or ``from mxbench.a import b`` points at the room it names (``b`` when
it is a module, else ``a``); the parent packages Python also runs on the way are not arrows.

Floors come from all arrows (a lazy import runs too, only later): a room that imports no
other room is on floor 0, any other is one floor above the highest room it imports. A circle
is a strongly connected component of the arrows (its rooms share a floor). An arrow up is a
lazy import that closes a circle: the room it reaches imports, through other rooms, the room
that makes it, so the import hides in a function to dodge the circle at import time (what
docs/DESIGN forbids: move the code instead). A lazy import that closes no circle (a command
keeping TensorFlow or pandas out of ``mxbench --help``) points down and is fine.

Also counts the sizes the house keeps small: modules over 600 lines, functions over 80.

    python benchmarks/imports.py [--list]      # counts; --list: every room by floor, and
                                               # the largest modules and functions

Exit 1 when there is a circle, an arrow up, or a room or function over its size.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "runner"
PACKAGE = "mxbench"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


@dataclass
class House:
    rooms: dict[str, Path]
    eager: dict[str, set[str]] = field(default_factory=dict)
    lazy: dict[str, set[str]] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)
    circles: list[list[str]] = field(default_factory=list)
    arrows_up: list[tuple[str, str]] = field(default_factory=list)

    @property
    def arrows(self) -> int:
        return sum(len(self.eager[r] | self.lazy[r]) for r in self.rooms)


def _room_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.Module, room: str, is_package: bool, rooms: dict[str, Path]
) -> tuple[set[str], set[str]]:
    """The rooms ``tree`` imports: (eager, lazy)."""
    eager: set[str] = set()
    lazy: set[str] = set()

    def names(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            return {a.name for a in node.names if a.name in rooms}
        base = node.module or ""
        if node.level:
            here = room.split(".") if is_package else room.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join([*here, base] if base else here)
        out = set()
        for alias in node.names:  # ``from a import b``: the room a.b, else the room a
            member = f"{base}.{alias.name}"
            if member in rooms:
                out.add(member)
            elif base in rooms:
                out.add(base)
        return out

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    visit_one(sub, in_function)
                continue
            visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            (lazy if in_function else eager).update(names(node))
            return
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        visit(node, inner)

    visit(tree, False)
    return eager, lazy


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                out.append(sorted(component))
    return out


def draw(root: Path = ROOT) -> House:
    paths = sorted((root / PACKAGE).rglob("*.py"))
    rooms = {_room_name(p, root): p for p in paths}
    house = House(rooms)
    for room, path in rooms.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        eager, lazy = _imports(tree, room, path.name == "__init__.py", rooms)
        house.eager[room] = eager - {room}
        house.lazy[room] = lazy - eager - {room}
    every = {r: house.eager[r] | house.lazy[r] for r in rooms}
    house.circles = [c for c in _sccs(every) if len(c) > 1]
    # floors from every arrow (a lazy import runs too), the rooms of a circle sharing one
    sccs = _sccs(every)  # reverse topological order: what a room imports comes first
    component_of = {r: i for i, comp in enumerate(sccs) for r in comp}
    floor_of: dict[int, int] = {}
    for i, comp in enumerate(sccs):
        below = {component_of[t] for r in comp for t in every[r]} - {i}
        floor_of[i] = 1 + max((floor_of[j] for j in below), default=-1)
    house.floors = {r: floor_of[component_of[r]] for r in rooms}
    # a lazy import inside a circle: without it the room would sit below what it imports
    house.arrows_up = sorted(
        (r, t) for r in rooms for t in house.lazy[r] if component_of[t] == component_of[r]
    )
    return house


@dataclass
class Size:
    where: str
    lines: int


def module_sizes(root: Path = ROOT) -> list[Size]:
    out = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        out.append(Size(str(path.relative_to(root)), lines))
    return sorted(out, key=lambda s: -s.lines)


def function_sizes(root: Path = ROOT) -> list[Size]:
    out = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(root)

        def walk(node: ast.AST, prefix: str, rel: Path = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        lines = (child.end_lineno or child.lineno) - child.lineno + 1
                        out.append(Size(f"{rel}:{child.lineno} {name}", lines))
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        walk(tree, "")
    return sorted(out, key=lambda s: -s.lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--list", action="store_true", help="every room by floor, and sizes")
    parser.add_argument("--top", type=int, default=8, help="largest modules/functions shown")
    args = parser.parse_args(argv)
    house = draw()
    modules = module_sizes()
    functions = function_sizes()
    big_modules = [s for s in modules if s.lines > MAX_MODULE_LINES]
    big_functions = [s for s in functions if s.lines > MAX_FUNCTION_LINES]
    floors = 1 + max(house.floors.values())
    if args.list:
        for floor in range(floors - 1, -1, -1):
            here = sorted(r for r, f in house.floors.items() if f == floor)
            print(f"floor {floor:2}: {' '.join(here)}")
        print()
    print(
        f"rooms {len(house.rooms)}, floors {floors}, arrows {house.arrows} "
        f"({sum(map(len, house.lazy.values()))} lazy), circles {len(house.circles)}, "
        f"arrows up {len(house.arrows_up)}"
    )
    for circle in house.circles:
        print("  circle:", " ".join(circle))
    for source, target in house.arrows_up:
        print(f"  arrow up: {source} (floor {house.floors[source]}) -> {target} "
              f"(floor {house.floors[target]})")  # fmt: skip
    print(f"modules over {MAX_MODULE_LINES} lines: {len(big_modules)}; "
          f"functions over {MAX_FUNCTION_LINES} lines: {len(big_functions)}")  # fmt: skip
    shown_modules = modules[: args.top] if args.list else big_modules
    shown_functions = functions[: args.top] if args.list else big_functions
    for s in shown_modules:
        print(f"  {s.lines:5}  {s.where}")
    for s in shown_functions:
        print(f"  {s.lines:5}  {s.where}")
    bad = house.circles or house.arrows_up or big_modules or big_functions
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
