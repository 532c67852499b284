"""Models are plugins: the zoo's and the user's own, behind one contract.

A model is a module with a ``build`` function that returns an uncompiled ``keras.Model`` (or
a dict that adds ``loss``, ``optimizer``, ``inputs`` / ``labels`` specs or a ``dataset``: see
``docs/models.md``). ``build`` declares the keyword arguments it wants among
:data:`BUILD_KWARGS` and gets those (:func:`call`). Beside it the module may declare facts
(:data:`DECLARED`: what shapes its input, its smallest image, its own input size, its
classes) as top-level constants, and a ``forward_flops`` function called like ``build``. The
bench (:mod:`mxbench.bench.model.harness`) owns the rest: seeds, identical initial weights across
policies, compile, loss scaling, synthetic data, timing, OOM.

The ``model`` parameter names either a built-in model (:data:`ZOO`: one module each) or an
entry point: ``path/to/file.py:build`` or ``pkg.module:build``. Nothing here imports Keras or
the model: the orchestrator reads a model's declared facts (:func:`facts`) and an entry
point's source hash from its source, and checks a cell's input against them
(:func:`input_problem`) where the matrix loads and where the bench validates its arguments.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import inspect
import re
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from mxbench.matrix import params

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

# Keyword arguments a build() (and a forward_flops()) may declare; mxbench passes those it
# names, by name.
BUILD_KWARGS = ("image_size", "image_width", "seq_len", "vocab_size", "batch_size")
# A model whose source cannot be hashed (too large) is a typo far more often than a model.
MAX_SOURCE_BYTES = 64 << 20
MAX_SOURCE_FILES = 2000

InputKind = Literal["image", "tokens", "any"]

# What a model's module may declare beside its build function, as top-level constants: read
# from its source (nothing is imported or built), the zoo's and users' alike.
DECLARED = {
    "INPUTS": "image (image_size x image_width x 3), tokens (seq_len ids below vocab_size) or any",
    "MIN_IMAGE_SIZE": "the smallest image side it accepts, in px",
    "IMAGE_SIZE": "its own input height: the cell's where the matrix names no image_size",
    "IMAGE_WIDTH": "its own input width (with IMAGE_SIZE)",
    "CLASSES": "the classes of its head (a data folder may have at most that many)",
}
# The module's function of the forward pass's FLOPs per example, called like build().
FLOPS_FUNCTION = "forward_flops"
MAX_CLASSES = 1 << 24


@dataclass(frozen=True)
class Facts:
    """What a model declares (:data:`DECLARED`), None where it says nothing."""

    inputs: InputKind = "any"
    min_image_size: int | None = None
    image_size: int | None = None
    image_width: int | None = None
    classes: int | None = None


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


def entry_point(model: str) -> EntryPoint:
    """The entry point a model is called through: the zoo's is its module's ``build``."""
    found = parse(model)
    return EntryPoint("module", ZOO[found], "build") if isinstance(found, str) else found


# ------------------------------------------------------------------- calling a model


def build_values(p: params.Params) -> dict[str, Any]:
    """What a cell gives ``build()`` and ``forward_flops()``: every :data:`BUILD_KWARGS`."""
    height, width = p.image_hw
    return {
        "image_size": height,
        "image_width": width,
        "seq_len": p.seq_len,
        "vocab_size": p.vocab_size,
        "batch_size": p.batch_size,
    }


def call(fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
    """``fn`` called with the values it names (all of them when it takes ``**kwargs``): the
    one calling convention of every model's ``build`` and ``forward_flops``."""
    try:
        accepted = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn()
    if any(a.kind is inspect.Parameter.VAR_KEYWORD for a in accepted.values()):
        return fn(**values)
    return fn(**{k: v for k, v in values.items() if k in accepted})


# ------------------------------------------------------------------- declared facts


def facts(model: str) -> Facts:
    """What the model's module declares, read from its source without importing it.
    ValueError naming the model and the constant when a declaration is not a literal or does
    not hold; FileNotFoundError when the source is not there; SyntaxError."""
    if is_builtin(model):
        return _zoo_facts(model)
    return _read_facts(model, module_file(entry_point(model)))


@cache
def _zoo_facts(name: str) -> Facts:
    found = importlib.util.find_spec(ZOO[name])
    assert found is not None and found.origin is not None, name
    return _read_facts(name, Path(found.origin))


def _tree(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per version of the file (a matrix's check, its
    cells' facts and the report all read a user's model)."""
    st = path.stat()
    return _parsed(path, st.st_mtime_ns, st.st_size)


@cache
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _read_facts(model: str, path: Path) -> Facts:
    tree = _tree(path)
    values: dict[str, Any] = {}
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        for target in _assigned(node):
            if target.id in DECLARED:
                try:
                    values[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    raise ValueError(
                        f"model {model!r}: {target.id} in {path.name} must be a literal "
                        f"({DECLARED[target.id]})"
                    ) from None

    def whole(name: str, low: int, high: int) -> int | None:
        value = values.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise ValueError(
                f"model {model!r}: {name} = {value!r}: expected a whole number from {low} to "
                f"{high} ({DECLARED[name]})"
            )
        return value

    inputs = values.get("INPUTS", "any")
    if inputs not in typing.get_args(InputKind):
        raise ValueError(f"model {model!r}: INPUTS = {inputs!r}: expected {DECLARED['INPUTS']}")
    size_bounds = (params.MIN_IMAGE_SIZE, params.MAX_IMAGE_SIZE)
    found = Facts(
        inputs=inputs,
        min_image_size=whole("MIN_IMAGE_SIZE", 1, params.MAX_IMAGE_SIZE),
        image_size=whole("IMAGE_SIZE", *size_bounds),
        image_width=whole("IMAGE_WIDTH", *size_bounds),
        classes=whole("CLASSES", 1, MAX_CLASSES),
    )
    if found.image_width is not None and found.image_size is None:
        raise ValueError(f"model {model!r}: IMAGE_WIDTH needs an IMAGE_SIZE (the height)")
    if found.image_size is not None:
        problem = input_problem(model, found, found.image_size, found.image_width)
        if problem is not None:
            raise ValueError(f"model {model!r}: its own IMAGE_SIZE / IMAGE_WIDTH: {problem[1]}")
    return found


def own_input(
    found: Facts, image_size: int | None, image_width: int | None
) -> tuple[int, int | None]:
    """The image a cell gives the model: the size (and width) the matrix or the command line
    names; where it names no size, the model's own (``IMAGE_SIZE`` x ``IMAGE_WIDTH``), else
    :data:`~mxbench.matrix.params.DEFAULT_IMAGE_SIZE`, square."""
    if image_size is not None:
        return image_size, image_width
    if found.image_size is not None:
        return found.image_size, found.image_width if image_width is None else image_width
    return params.DEFAULT_IMAGE_SIZE, image_width


def input_problem(
    model: str,
    found: Facts,
    image_size: int,
    image_width: int | None,
    data: str = params.SYNTHETIC,
) -> tuple[str, str] | None:
    """What is wrong with giving ``model`` this input, as (the parameter at fault, why); None
    when it fits. The one check of a cell's input against its model: the matrix's when it
    loads, the bench's when it validates its arguments, a model's own declarations'."""
    smallest = found.min_image_size
    if smallest is not None and found.inputs != "tokens":
        for name, value in (("image_size", image_size), ("image_width", image_width)):
            if value is not None and value < smallest:
                return name, f"{value} px is below {model}'s smallest input ({smallest} px)"
    if found.inputs == "tokens" and data != params.SYNTHETIC:
        return "data", (
            f"{data!r} is an image folder, and {model} takes tokens: use synthetic, or a model "
            "of your own with a dataset()"
        )
    return None


SHAPING: dict[str, frozenset[str]] = {
    "image": frozenset({"image_size", "image_width"}),
    "tokens": frozenset({"seq_len", "vocab_size"}),
}


def unused_params(model_names: set[str]) -> frozenset[str]:
    """Input parameters none of these models reads (token settings of image models)."""
    every = frozenset().union(*SHAPING.values())
    used = frozenset().union(*(SHAPING.get(_inputs(m), every) for m in model_names))
    return every - used


def _inputs(model: str) -> InputKind:
    try:
        return facts(model).inputs
    except (OSError, SyntaxError, ValueError):
        return "any"


# ------------------------------------------------------------------- finding the source


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


def module_file(ep: EntryPoint) -> Path:
    """The file that defines the entry point's function (FileNotFoundError: none)."""
    root, files = source_paths(ep)
    if ep.kind == "file":
        return files[0]
    rel = Path(*ep.target.split("."))
    candidates = [root / rel.with_suffix(".py"), root / rel / "__init__.py"]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise FileNotFoundError(f"no module {ep.target!r} under {root}")
    return path


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
    its top level, syntax error, a declared fact that does not hold), without running any of
    it; None when it looks right."""
    try:
        ep = parse(model)
    except ValueError as exc:
        return str(exc)
    if not isinstance(ep, EntryPoint):
        return None
    try:
        path = module_file(ep)
    except FileNotFoundError as exc:
        return f"model {str(ep)!r}: {exc}"
    try:
        tree = _tree(path)
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
    try:
        _read_facts(model, path)
    except ValueError as exc:
        return str(exc)
    return None


def _assigned(node: ast.stmt) -> list[ast.Name]:
    if isinstance(node, ast.Assign):
        return [t for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign):
        return [node.target] if isinstance(node.target, ast.Name) else []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [ast.Name(id=(a.asname or a.name).split(".")[0]) for a in node.names]
    return []
