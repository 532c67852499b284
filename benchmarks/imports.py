"""Draw the house: the import graph of runner/mxbench, its floors, circles and arrows up.

Rooms are the package's modules (a package's ``__init__`` is the room named after the
package). An arrow is an import of one room by another: at module level ("eager"), inside
a function ("lazy"), or under ``if TYPE_CHECKING:`` ("typed": it never runs, but the two
rooms still know each other, so it counts for circles and floors like any other). A bare
``import mxbench.a.b`` or ``from mxbench.a import b`` points at the room it names (``b`` when
it is a module, else ``a``); the parent packages Python also runs on the way are not arrows.

Floors come from all arrows (a lazy import runs too, only later; a typed one binds the rooms
as surely for whoever reads or checks them): a room that imports no
other room is on floor 0, any other is one floor above the highest room it imports. A circle
is a strongly connected component of the arrows (its rooms share a floor). An arrow up is a
lazy import that closes a circle: the room it reaches imports, through other rooms, the room
that makes it, so the import hides in a function to dodge the circle at import time (what
docs/DESIGN forbids: move the code instead). A lazy import that closes no circle (a command
keeping TensorFlow or pandas out of ``mxbench --help``) points down and is fine.

A private name (a leading underscore) is its room's own: no room takes another's, by an
import or as ``room._name`` (a name other rooms use is a contract, with a public name).

Also lists the sizes the guide keeps small (modules over 600 lines, functions over 80: a
warning, each one either shrunk or named with its reason in tests/test_house.py) and counts
the top-level modules of the package (at most 12: the rest live in packages named for their
role; a subpackage is no top-level module).

    python benchmarks/imports.py [--list]      # counts; --list: every room by floor, and
                                               # the largest modules and functions

Exit 1 when there is a circle, an arrow up, a private name taken across rooms, or more
top-level modules than the limit; sizes over the guide are printed, not failed.
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
MAX_TOP_LEVEL_MODULES = 12


@dataclass
class House:
    rooms: dict[str, Path]
    eager: dict[str, set[str]] = field(default_factory=dict)
    lazy: dict[str, set[str]] = field(default_factory=dict)
    typed: dict[str, set[str]] = field(default_factory=dict)  # under ``if TYPE_CHECKING:``
    floors: dict[str, int] = field(default_factory=dict)
    circles: list[list[str]] = field(default_factory=list)
    arrows_up: list[tuple[str, str]] = field(default_factory=list)

    @property
    def arrows(self) -> int:
        return sum(len(self.eager[r] | self.lazy[r] | self.typed[r]) for r in self.rooms)


def _room_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _source(node: ast.ImportFrom, room: str, is_package: bool) -> str:
    """The dotted name ``from ... import`` reads from in ``room`` (a relative one resolved)."""
    base = node.module or ""
    if node.level:
        here = room.split(".") if is_package else room.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    return base


def _imports(
    tree: ast.Module, room: str, is_package: bool, rooms: dict[str, Path]
) -> tuple[set[str], set[str], set[str]]:
    """The rooms ``tree`` imports: (eager, lazy, typed); typed are those under
    ``if TYPE_CHECKING:`` (wherever that ``if`` stands)."""
    eager: set[str] = set()
    lazy: set[str] = set()
    typed: set[str] = set()

    def names(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            return {a.name for a in node.names if a.name in rooms}
        base = _source(node, room, is_package)
        out = set()
        for alias in node.names:  # ``from a import b``: the room a.b, else the room a
            member = f"{base}.{alias.name}"
            if member in rooms:
                out.add(member)
            elif base in rooms:
                out.add(base)
        return out

    def visit(node: ast.AST, in_function: bool, in_typing: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    visit_one(sub, in_function, True)
                for sub in child.orelse:
                    visit_one(sub, in_function, in_typing)
                continue
            visit_one(child, in_function, in_typing)

    def visit_one(node: ast.AST, in_function: bool, in_typing: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            (typed if in_typing else lazy if in_function else eager).update(names(node))
            return
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        visit(node, inner, in_typing)

    visit(tree, False, False)
    return eager, lazy, typed


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


def _rooms(root: Path) -> dict[str, Path]:
    """The package's modules under ``root``, by room name."""
    return {_room_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def draw(root: Path = ROOT) -> House:
    rooms = _rooms(root)
    house = House(rooms)
    for room, path in rooms.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        eager, lazy, typed = _imports(tree, room, path.name == "__init__.py", rooms)
        house.eager[room] = eager - {room}
        house.lazy[room] = lazy - eager - {room}
        house.typed[room] = typed - eager - lazy - {room}
    every = {r: house.eager[r] | house.lazy[r] | house.typed[r] for r in rooms}
    house.circles = [c for c in _sccs(every) if len(c) > 1]
    # floors from every arrow (a lazy or typed one too), the rooms of a circle sharing one
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


def _private(name: str) -> bool:
    """A name its module keeps to itself: a leading underscore (a dunder is Python's)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _hidden_from(room: str, target: str) -> bool:
    """Whether the room ``target`` is a private module (or in a private package) that
    ``room`` is outside of: a private module is its own package's (``models._applications``
    for the models)."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        package = ".".join(parts[:i])
        if _private(part) and room != package and not room.startswith(package + "."):
            return True
    return False


def _reaches(
    tree: ast.Module, room: str, is_package: bool, rooms: dict[str, Path]
) -> dict[str, int]:
    """The private names of other rooms that ``tree`` takes (see :func:`private_reaches`),
    each with the first line that does."""
    out: dict[str, int] = {}
    bound: dict[str, str] = {}  # a name this module binds to a room, by an import

    def found(name: str, node: ast.AST) -> None:
        line = getattr(node, "lineno", 0)
        out[name] = min(out.get(name, line), line)

    def take(owner: str, name: str, node: ast.AST) -> None:
        """Taking ``owner.name`` (``owner`` a room): found when it is private."""
        member = f"{owner}.{name}"
        if member in rooms:  # a module
            private = _hidden_from(room, member)
        else:
            private = owner != room and _private(name)
        if private:
            found(member, node)

    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in imports:  # every import: lazy and under TYPE_CHECKING too
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in rooms and _hidden_from(room, alias.name):
                    found(alias.name, node)
                head = alias.name.split(".")[0]
                if alias.asname and alias.name in rooms:
                    bound[alias.asname] = alias.name
                elif not alias.asname and head in rooms:
                    bound[head] = head
            continue
        base = _source(node, room, is_package)
        if base not in rooms:
            continue
        if _hidden_from(room, base):
            found(base, node)
        for alias in node.names:
            if f"{base}.{alias.name}" in rooms:
                bound[alias.asname or alias.name] = f"{base}.{alias.name}"
            take(base, alias.name, node)

    def room_of(node: ast.expr) -> str | None:
        """The room an expression names through the bound names (``codec``, ``mxbench.x``)."""
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute) and (head := room_of(node.value)) is not None:
            return f"{head}.{node.attr}" if f"{head}.{node.attr}" in rooms else None
        return None

    for node in ast.walk(tree):  # ``room._name``
        if isinstance(node, ast.Attribute) and (owner := room_of(node.value)) is not None:
            take(owner, node.attr, node)
    return out


def private_reaches(root: Path = ROOT) -> list[str]:
    """Where a room takes a private name (a leading underscore) of another room, each as
    ``path:line room._name``, what the house forbids: a name other rooms use is a contract,
    and gets a public name (and a docstring saying what it promises). Taking is importing it
    (``from``, relative, one name or a parenthesised list, at module level, in a function
    or under ``if TYPE_CHECKING:``) or reaching it as ``room._name`` through a name an
    import bound to the room; importing a private module from outside its package counts
    too (within it, the module is the package's own)."""
    out = []
    rooms = _rooms(root)
    for room, path in rooms.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = _reaches(tree, room, path.name == "__init__.py", rooms)
        where = sorted(found.items(), key=lambda item: (item[1], item[0]))
        out += [f"{path.relative_to(root)}:{line} {name}" for name, line in where]
    return out


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


def top_level_modules(root: Path = ROOT) -> list[str]:
    """The package's own modules (``mxbench/*.py``, ``__init__`` and ``__main__`` included;
    a subpackage is none: its modules are its own)."""
    return sorted(p.name for p in (root / PACKAGE).glob("*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--list", action="store_true", help="every room by floor, and sizes")
    parser.add_argument("--top", type=int, default=8, help="largest modules/functions shown")
    args = parser.parse_args(argv)
    house = draw()
    reaches = private_reaches()
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
        f"({sum(map(len, house.lazy.values()))} lazy, "
        f"{sum(map(len, house.typed.values()))} typed), circles {len(house.circles)}, "
        f"arrows up {len(house.arrows_up)}"
    )
    for circle in house.circles:
        print("  circle:", " ".join(circle))
    for source, target in house.arrows_up:
        print(f"  arrow up: {source} (floor {house.floors[source]}) -> {target} "
              f"(floor {house.floors[target]})")  # fmt: skip
    print(f"private names taken across rooms: {len(reaches)}")
    for reach in reaches:
        print(f"  {reach}")
    top = top_level_modules()
    print(f"top-level modules: {len(top)} (at most {MAX_TOP_LEVEL_MODULES}): {' '.join(top)}")
    print(f"over the guide (warnings): modules over {MAX_MODULE_LINES} lines: "
          f"{len(big_modules)}; functions over {MAX_FUNCTION_LINES} lines: "
          f"{len(big_functions)}")  # fmt: skip
    shown_modules = modules[: args.top] if args.list else big_modules
    shown_functions = functions[: args.top] if args.list else big_functions
    for s in shown_modules:
        print(f"  {s.lines:5}  {s.where}")
    for s in shown_functions:
        print(f"  {s.lines:5}  {s.where}")
    bad = house.circles or house.arrows_up or reaches or len(top) > MAX_TOP_LEVEL_MODULES
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
