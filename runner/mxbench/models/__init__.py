"""Models are plugins: the zoo's and the user's own, behind one contract.

A model is a ``build`` function that returns an uncompiled ``keras.Model`` (or a dict that
adds ``loss``, ``optimizer``, ``inputs`` / ``labels`` specs or a ``dataset``: see
``docs/models.md``). The bench (:mod:`mxbench.bench.harness`) owns the rest: seeds, identical
initial weights across policies, compile, loss scaling, synthetic data, timing, OOM.

The ``model`` parameter names either a built-in model (:data:`ZOO`: one module each, which
declares a :class:`ModelSpec`) or an entry point: ``path/to/file.py:build`` or
``pkg.module:build``. Nothing here imports Keras: the orchestrator reads a model's static
facts (smallest input, what shapes its input) and an entry point's source hash without
building anything.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

# name -> module: adding a built-in model is one module plus one line here.
ZOO: dict[str, str] = {
    "blog-cnn": "mxbench.models.blog_cnn",
    "so-cnn": "mxbench.models.so_cnn",
    "resnet50": "mxbench.models.resnet50",
    "mobilenet_v2": "mxbench.models.mobilenet_v2",
    "efficientnet_b0": "mxbench.models.efficientnet_b0",
    "convnext_tiny": "mxbench.models.convnext_tiny",
    "bert": "mxbench.models.bert",
    "gpt": "mxbench.models.gpt",
}

# Keyword arguments a user's build() may declare; mxbench passes those it names.
BUILD_KWARGS = ("image_size", "image_width", "seq_len", "vocab_size", "batch_size")
# A model whose source cannot be hashed (too large) is a typo far more often than a model.
MAX_SOURCE_BYTES = 64 << 20
MAX_SOURCE_FILES = 2000

InputKind = Literal["image", "tokens", "any"]


@dataclass(frozen=True)
class ModelSpec:
    """What the rest of mxbench needs to know about a built-in model, and nothing else.

    ``build(p)`` gets the cell's :class:`~mxbench.params.Params` and returns what a user's
    ``build()`` returns (a model or the dict). ``inputs`` says which parameters shape the
    input: ``image`` (image_size x image_width, 3 channels) or ``tokens`` (seq_len token ids
    below vocab_size). ``classes``: the head's classes (a data folder may have at most that
    many). ``forward_flops``: analytic FLOPs per example of the forward pass, when known
    (else the bench measures them: XLA's cost analysis or a walk of the layers).
    """

    name: str
    summary: str
    build: Callable[[Any], Any]
    inputs: InputKind = "image"
    min_image_size: int = 1
    classes: int | None = None
    forward_flops: Callable[[Any], int] | None = None


@dataclass(frozen=True)
class EntryPoint:
    """A user's model: ``file`` (a path to a .py file) or ``module`` (dotted), and the
    function in it."""

    kind: Literal["file", "module"]
    target: str
    function: str

    def __str__(self) -> str:
        return f"{self.target}:{self.function}"


_FILE = re.compile(r"\A(?P<target>.+\.py):(?P<fn>[A-Za-z_]\w*)\Z")
_MODULE = re.compile(r"\A(?P<target>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<fn>[A-Za-z_]\w*)\Z")


def usage() -> str:
    return (
        f"a built-in model ({', '.join(ZOO)}) or an entry point "
        "(path/to/file.py:build or pkg.module:build)"
    )


def parse(model: str) -> str | EntryPoint:
    """The zoo name, or the :class:`EntryPoint`; ValueError saying what is expected."""
    if model in ZOO:
        return model
    for kind, pattern in (("file", _FILE), ("module", _MODULE)):
        m = pattern.match(model)
        if m:
            return EntryPoint(kind, m.group("target"), m.group("fn"))  # type: ignore[arg-type]
    raise ValueError(f"expected {usage()}")


def is_builtin(model: str) -> bool:
    return model in ZOO


@cache
def spec(name: str) -> ModelSpec:
    """The built-in model's :class:`ModelSpec` (imports its module; no Keras)."""
    found: ModelSpec = importlib.import_module(ZOO[name]).SPEC
    return found


def input_kind(model: str) -> InputKind:
    return spec(model).inputs if is_builtin(model) else "any"


SHAPING: dict[str, frozenset[str]] = {
    "image": frozenset({"image_size", "image_width"}),
    "tokens": frozenset({"seq_len", "vocab_size"}),
}


def unused_params(model_names: set[str]) -> frozenset[str]:
    """Input parameters none of these models reads (token settings of image models)."""
    used = frozenset().union(
        *(SHAPING.get(input_kind(m), frozenset().union(*SHAPING.values())) for m in model_names)
    )
    return frozenset().union(*SHAPING.values()) - used


def resolve_file(model: str, base: Path) -> str:
    """``model`` with a relative file entry point made absolute against ``base`` (the
    matrix file's folder); anything else unchanged."""
    try:
        ep = parse(model)
    except ValueError:
        return model
    if isinstance(ep, EntryPoint) and ep.kind == "file" and not Path(ep.target).is_absolute():
        return f"{(base / ep.target).resolve()}:{ep.function}"
    return model


def source_paths(ep: EntryPoint) -> tuple[Path, list[Path]]:
    """The folder that holds the model's source (mounted into containers) and its files:
    the file itself, or every ``.py`` file of the module's top-level package (found without
    importing anything). FileNotFoundError when it is not there."""
    if ep.kind == "file":
        path = Path(ep.target)
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {ep.target}")
        return path.resolve().parent, [path.resolve()]
    top = ep.target.split(".")[0]
    # the current directory first (as `python -m` would), then the Python path
    found = importlib.machinery.PathFinder.find_spec(top, [str(Path.cwd()), *sys.path])
    if found is None:
        raise FileNotFoundError(f"no module named {top!r} here or on the Python path")
    if found.submodule_search_locations:
        roots = [Path(p) for p in found.submodule_search_locations]
        files = sorted(f for r in roots for f in r.rglob("*.py") if f.is_file())
        return roots[0].parent, files[:MAX_SOURCE_FILES]
    if not found.origin or not Path(found.origin).is_file():
        raise FileNotFoundError(f"module {top!r} has no source file")
    origin = Path(found.origin)
    return origin.parent, [origin]


def source_dir(model: str) -> tuple[str, bool] | None:
    """Where a user model's source lives, for engines that must make it visible (a container
    mounts it read-only at the same path), and whether it must go on the Python path (a
    module entry point); None for the zoo."""
    ep = parse(model)
    if not isinstance(ep, EntryPoint):
        return None
    return str(source_paths(ep)[0]), ep.kind == "module"


def source_hash(ep: EntryPoint) -> str:
    """sha256 of the model's source (file, or the package's .py files with their relative
    names): editing the model changes its cells' keys, so ``--resume`` measures it again."""
    root, files = source_paths(ep)
    digest = hashlib.sha256()
    total = 0
    for f in files:
        data = f.read_bytes()
        total += len(data)
        if total > MAX_SOURCE_BYTES:
            raise ValueError(f"model source over {MAX_SOURCE_BYTES >> 20} MiB under {root}")
        digest.update(str(f.relative_to(root)).encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:16]


def check(model: str) -> str | None:
    """What is wrong with ``model`` as seen from here (file missing, function not defined at
    its top level, syntax error), without running any of it; None when it looks right."""
    try:
        ep = parse(model)
    except ValueError as exc:
        return str(exc)
    if not isinstance(ep, EntryPoint):
        return None
    try:
        root, files = source_paths(ep)
    except FileNotFoundError as exc:
        return f"model {str(ep)!r}: {exc}"
    if ep.kind == "file":
        path = files[0]
    else:
        rel = Path(*ep.target.split("."))
        candidates = [root / rel.with_suffix(".py"), root / rel / "__init__.py"]
        path = next((c for c in candidates if c.is_file()), candidates[0])
        if not path.is_file():
            return f"model {str(ep)!r}: no module {ep.target!r} under {root}"
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as exc:
        return f"model {str(ep)!r}: {path} does not parse: {exc}"
    defined = {
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    } | {
        t.id
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.ImportFrom, ast.Import))
        for t in _assigned(n)
    }
    if ep.function not in defined:
        return f"model {str(ep)!r}: {path} defines no {ep.function!r} at its top level"
    return None


def _assigned(node: ast.stmt) -> list[ast.Name]:
    if isinstance(node, ast.Assign):
        return [t for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign):
        return [node.target] if isinstance(node.target, ast.Name) else []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [ast.Name(id=(a.asname or a.name).split(".")[0]) for a in node.names]
    return []
