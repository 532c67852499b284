"""The matrix document (the YAML's dict) before the schema sees it: the upgrade of older
shapes, and the overrides the command line (or a Python caller) puts over it.

Both work on the plain document, so what comes out is validated as a matrix file is: a bad
value given as ``--batch-size 32,abc`` gets the matrix's own message, under the flag's name
(:attr:`Override.origin`) instead of a file and line.

Upgrades follow the records' pattern (:data:`mxbench.records.codec.UPGRADES`): each step rewrites
an older shape as the current one, in place, before validation, and says what it did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from mxbench.errors import UsageError
from mxbench.matrix import measure, params
from mxbench.matrix.reader import Loader, line_of
from mxbench.matrix.schema import echo

Path_ = tuple[str | int, ...]
SECTIONS = ("version", "measure", "benchmark", "axes", "images", "hosts")
_PARAMS = frozenset(f.name for f in params.fields() if f.spec.role != "repeat")
MAX_VALUE_CHARS = 4096


@dataclass
class Upgraded:
    """What the upgrade did: notes for the user, and where each moved key was written
    (its new path -> its old one, so that an error names the line it is on)."""

    notes: list[str]
    moved: dict[Path_, Path_]


def _knobs_to_measure(doc: dict[str, Any], done: Upgraded) -> None:
    """The measuring knobs at the top level of ``benchmark:`` (before ``measure:``) move
    under ``measure:``."""
    bench = doc.get("benchmark")
    if not isinstance(bench, dict):
        return
    old = [k for k in measure.KNOBS if k in bench]
    if not old:
        return
    given = doc.get("measure", {})
    if isinstance(given, str):
        given = {"preset": given}
    if not isinstance(given, dict):
        return  # the schema says what is wrong with it
    both = [k for k in old if k in given]
    if both:
        k = both[0]
        raise UsageError(f"benchmark.{k} and measure.{k}: give it once, under measure:")
    doc["benchmark"] = {k: v for k, v in bench.items() if k not in old}
    doc["measure"] = {**given, **{k: bench[k] for k in old}}
    for k in old:
        done.moved[("measure", k)] = ("benchmark", k)
    done.notes.append(
        f"benchmark.{', benchmark.'.join(old)}: how to measure is now `measure:` (a preset: "
        f"{', '.join(measure.PRESETS)}, or these keys under it); read as "
        f"measure.{', measure.'.join(old)} (docs/matrix.md: How to measure)"
    )


# The steps, in order: each rewrites one older shape (all apply to version 1 documents).
UPGRADES: tuple[Callable[[dict[str, Any], Upgraded], None], ...] = (_knobs_to_measure,)


def upgrade(doc: dict[str, Any]) -> Upgraded:
    """The document rewritten (in place) in the current shape."""
    done = Upgraded([], {})
    for step in UPGRADES:
        step(doc, done)
    return done


@dataclass(frozen=True)
class Located:
    """How to say where a key path is: a line of the YAML (``node``, keys that the upgrade
    moved looked up where they were written), or the override that gave it."""

    node: yaml.Node | None
    source: str
    origins: dict[Path_, str]
    moved: dict[Path_, Path_]

    def where(self, loc: tuple[Any, ...]) -> str:
        for n in range(len(loc), 0, -1):
            if loc[:n] in self.origins:
                return self.origins[loc[:n]]
        written = self.moved.get(loc[:2], loc[:2]) + loc[2:]
        line = line_of(self.node, written)
        return f"{self.source}:{line}" if line else self.source


# --------------------------------------------------------------------------- overrides


@dataclass(frozen=True)
class Override:
    """One value put over the document at ``path``; ``origin`` names it in messages (the
    command line's ``--batch-size 32,64``). Made by :func:`axis`, :func:`setting` and
    :func:`preset`."""

    path: Path_
    value: Any
    origin: str


def parse_value(text: str, origin: str) -> Any:
    """A value as YAML reads it (``32`` a number, ``[1, 2]`` a list, ``on`` a boolean),
    with the safe loader; UsageError naming ``origin`` when it does not parse."""
    if len(text) > MAX_VALUE_CHARS:
        raise UsageError(f"{origin[:60]}...: a value of at most {MAX_VALUE_CHARS} characters")
    try:
        return yaml.load(text, Loader=Loader)  # the safe loader (libyaml's when built)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "not YAML"
        raise UsageError(f"{origin}: cannot read {echo(text)} ({problem})") from None


def axis(name: str, values: Iterable[Any], origin: str) -> Override:
    """Sweep a parameter over ``values`` (``--policy float32,mixed_bfloat16``)."""
    return Override(("axes", name.replace("-", "_")), list(values), origin)


def axis_from_text(name: str, text: str, origin: str) -> Override:
    """``v1,v2`` as an axis: each value as YAML reads it."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or "" in items:
        raise UsageError(f"{origin}: expected values separated by commas (e.g. 32,64)")
    return axis(name, [parse_value(t, origin) for t in items], origin)


def setting(key: str, value: Any, origin: str) -> Override:
    """Set one value at a dotted key: ``benchmark.image_size``, ``hosts.0.memory_limit``; a
    bare name is a measuring knob under ``measure:`` (``steps``) or else under
    ``benchmark:`` (``image_size``, ``batch_search.cap``)."""
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in key.split(".")]
    if not key or any(p == "" for p in parts):
        raise UsageError(f"{origin}: expected KEY=VALUE with a dotted key (benchmark.image_size)")
    if parts[0] not in SECTIONS:
        parts.insert(0, "measure" if parts[0] in measure.KNOBS else "benchmark")
    if parts[0] == "benchmark" and len(parts) > 1 and parts[1] in measure.KNOBS:
        parts[0] = "measure"  # the knobs' old place, as the upgrade reads it
    return Override(tuple(parts), value, origin)


def preset(name: str, origin: str) -> Override:
    """Replace ``measure:`` with a preset (``--fast``: quick)."""
    return Override(("measure",), name, origin)


def apply(doc: dict[str, Any], overrides: Iterable[Override]) -> dict[Path_, str]:
    """Put each override over the (upgraded) document, in order; returns where each came
    from, by path. A parameter given a value here leaves the other place it may be given
    (``axes`` or ``benchmark`` / ``measure``): the command line wins over the file."""
    origins: dict[Path_, str] = {}
    for o in overrides:
        name = o.path[1] if len(o.path) == 2 else None
        if name in _PARAMS:
            others = {"axes": ("benchmark", "measure")}.get(str(o.path[0]), ("axes",))
            for section in others:
                _drop(doc, (section, name))
        if o.path[:1] == ("measure",) and len(o.path) > 1 and isinstance(doc.get("measure"), str):
            doc["measure"] = {"preset": doc["measure"]}
        _put(doc, o)
        origins[o.path] = o.origin
    return origins


def _drop(doc: dict[str, Any], path: tuple[Any, Any]) -> None:
    section = doc.get(path[0])
    if isinstance(section, dict):
        section.pop(path[1], None)


def _put(doc: dict[str, Any], o: Override) -> None:
    node: Any = doc
    for i, part in enumerate(o.path):
        last = i == len(o.path) - 1
        where = ".".join(map(str, o.path[: i + 1]))
        if isinstance(node, list):
            if not isinstance(part, int) or not 0 <= part < len(node):
                raise UsageError(f"{o.origin}: {where}: no such item (the list has {len(node)})")
        elif not isinstance(node, dict):
            raise UsageError(f"{o.origin}: {where}: the key above it holds a value, not a mapping")
        if last:
            node[part] = o.value
        elif isinstance(node, dict) and not isinstance(node.get(part), dict | list):
            node[part] = {}
            node = node[part]
        else:
            node = node[part]
