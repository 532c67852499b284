"""Reading a matrix file as YAML, before the schema sees it: bounds on the file and on the
document (its size, its nodes after alias expansion), duplicate keys refused, and the line
of a key path for error messages (pydantic knows no lines)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from mxbench.errors import UsageError
from mxbench.matrix.schema import echo

# A matrix is a page of YAML; anything much larger is a mistake (or an attack).
MAX_MATRIX_BYTES = 1 << 20
# YAML nodes after alias expansion: far beyond a real matrix, refused before building it.
MAX_YAML_NODES = 200_000


# libyaml's parser when PyYAML was built with it (seven times faster on a long axis).
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_matrix_file(path: Path) -> str:
    """The file's text; any failure to read it is one line (exit 2). A FIFO, a device or a
    socket is never opened (that could block), and a huge file is not read."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(f"{path}: matrix file not found") from None
    except OSError as exc:  # a symlink loop, a name too long, no permission on a directory
        raise UsageError(f"{path}: cannot read matrix file ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory, not a matrix file")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file (a FIFO, device or socket)")
    if st.st_size > MAX_MATRIX_BYTES:
        raise UsageError(
            f"{path}: {st.st_size:,} bytes is too large for a matrix file "
            f"(at most {MAX_MATRIX_BYTES:,})"
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_MATRIX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read matrix file ({exc.strerror})") from None
    if len(data) > MAX_MATRIX_BYTES:
        raise UsageError(f"{path}: too large for a matrix file (at most {MAX_MATRIX_BYTES:,})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def check_nodes(root: yaml.Node, source: str) -> None:
    """Refuse, before anything is built: duplicate keys in a mapping (YAML would silently
    keep the last), and aliases that expand to more than MAX_YAML_NODES nodes or refer to
    themselves (a "billion laughs" document). Linear in the document's distinct nodes."""
    size: dict[int, int] = {}  # id(node) -> nodes it expands to (aliases counted each time)
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            active.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if size[key] > MAX_YAML_NODES:
                raise UsageError(
                    f"{source}:{node.start_mark.line + 1}: YAML aliases expand to more than "
                    f"{MAX_YAML_NODES:,} nodes (an alias bomb?); refused"
                )
            continue
        if key in size:
            continue
        if key in active:
            raise UsageError(
                f"{source}:{node.start_mark.line + 1}: a YAML alias refers to itself; refused"
            )
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            _no_duplicate_keys(node, source)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _no_duplicate_keys(node: yaml.MappingNode, source: str) -> None:
    first: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        line = key.start_mark.line + 1
        if key.value in first and key.value != "<<":
            raise UsageError(
                f"{source}:{line}: duplicate key {echo(key.value)} (first on line "
                f"{first[key.value]}); YAML would silently keep only the last"
            )
        first.setdefault(key.value, line)


def line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node on the key path (pydantic knows no lines)."""
    best = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    best = key.start_mark.line + 1
                    node = value
                    break
            else:
                return best
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return best
            node = node.value[part]
            best = node.start_mark.line + 1
        else:
            return best
    return best
