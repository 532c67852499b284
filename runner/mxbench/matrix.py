"""The matrix file: schema v1 (pydantic v2), loading and validation.

Every error names the key path (``hosts[1].gpus``) and, where the YAML gives one, the line,
and is raised as :class:`~mxbench.errors.UsageError` (exit 2, no traceback). Unknown keys
are rejected everywhere: a typo must not pass silently.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import msgspec
import yaml
from pydantic import (
    BeforeValidator,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from mxbench import models
from mxbench.cells.repeats import AUTO, AutoRepeats, check_auto
from mxbench.errors import UsageError
from mxbench.matrix import params, scale, serving
from mxbench.matrix.hosts import HOSTS
from mxbench.matrix.reader import Loader, check_nodes, line_of, read_matrix_file
from mxbench.matrix.schema import EnvName, HostBase, OneLine, Seconds, Strict, echo
from mxbench.matrix.search import LIMITS, SEARCH, BatchSearch

DEFAULT_CELL_TIMEOUT_S = 1800.0
MAX_REPEATS = 100
# Each cell is a fresh process (or container, or job) of seconds to minutes: a matrix of more
# cells than this is a typo (a stray zero in an axis) far more often than a plan.
MAX_CELLS = 10_000


def _param_type(f: params.Field) -> Any:
    """A parameter's type for pydantic, with the bounds :class:`~mxbench.matrix.params.Params`
    declares (strict: ``true`` is not batch size 1, ``"32"`` is not 32)."""
    if f.spec.parse is not None:  # one spelling per value (loss_scale: 1e9 is 1e+09)
        return Annotated[f.type, BeforeValidator(f.spec.parse)]
    if f.choices is not None:
        if {"on", "off"} <= set(f.choices):  # YAML 1.1 reads a bare on / off as a boolean
            return Annotated[f.type, BeforeValidator(_on_off)]
        return f.type
    if f.type is str:
        return OneLine
    return Annotated[f.type, Field(ge=f.ge, le=f.le, strict=True)]


def _axis_type(f: params.Field) -> Any:
    """An axis: a list of the parameter's values; with ``max`` among them (or alone, as a
    scalar) where the parameter can be searched (``axes.batch_size: max``)."""
    if not f.spec.search:
        return Annotated[list[_param_type(f)], Field(min_length=1)] | None  # type: ignore[misc]
    low, high = f.ge or 1, f.le or params.MAX_BATCH_SIZE

    def item(value: Any) -> int | str:
        if value == SEARCH:
            return SEARCH
        if isinstance(value, bool):
            raise ValueError(_not_a_bool(value))
        if not isinstance(value, int) or not low <= value <= high:
            got = echo(value)
            raise ValueError(f"expected a {f.name} from {low} to {high}, or {SEARCH}; got {got}")
        return value

    each = Annotated[int | str, PlainValidator(item)]
    return Annotated[list[each], Field(min_length=1), BeforeValidator(_scalar_search)] | None


def _not_a_bool(value: bool) -> str:
    return f"expected a number, not the YAML boolean {str(value).lower()}"


def _scalar_search(value: Any) -> Any:
    return [value] if isinstance(value, str) else value  # `batch_size: max`


_S = TypeVar("_S", BatchSearch, AutoRepeats)


def _settings(value: Any, kind: type[_S]) -> _S:
    """A settings block (``batch_search``, ``auto_repeats``) as its struct; ValueError naming
    the key inside it (an unknown one too: a misspelt setting is not silently a default)."""
    if isinstance(value, dict):
        known = {f.encode_name for f in msgspec.structs.fields(kind)}
        for key in value:
            if key not in known:
                raise ValueError(f"Object contains unknown field `{key}`")
    try:
        return msgspec.convert(value, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc).replace("`$.", "`")) from None


def _batch_search(value: Any) -> BatchSearch:
    if isinstance(value, BatchSearch):
        return value
    cfg = _settings(value, BatchSearch)
    for name, (low, high) in LIMITS.items():
        if not low <= getattr(cfg, name) <= high:
            raise ValueError(f"{name} must be between {low} and {high}")
    if not 0 <= cfg.precision < 1:
        raise ValueError("precision must be at least 0 and below 1 (0.05: within 5%)")
    if cfg.start > cfg.cap:
        raise ValueError(f"start {cfg.start} is above cap {cfg.cap}")
    return cfg


def _repeats(value: Any) -> int | str:
    """``benchmark.repeats``: a number of processes per cell, or ``auto``."""
    if value == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise ValueError(_not_a_bool(value) + f" (1 to {MAX_REPEATS} processes per cell, or auto)")
    if not isinstance(value, int) or not 1 <= value <= MAX_REPEATS:
        raise ValueError(
            f"expected a number of processes per cell from 1 to {MAX_REPEATS}, or {AUTO}; "
            f"got {echo(value)}"
        )
    return value


def _auto_repeats(value: Any) -> AutoRepeats:
    if isinstance(value, AutoRepeats):
        return value
    cfg = _settings(value, AutoRepeats)
    return check_auto(cfg)


def _model_name(value: str) -> str:
    """A zoo name or an entry point (whether its file exists is checked when cells are
    planned: mxbench.cells.cell.resolve_model)."""
    try:
        models.parse(value)
    except ValueError as exc:
        raise ValueError(f"{echo(value)}: {exc}") from None
    return value


def _on_off(value: Any) -> Any:
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


class _BenchmarkBase(Strict):
    """What every cell measures: one value per parameter (the experiment's defaults, except
    the step count), plus how often and how long."""

    # A number of fresh processes per cell, or `auto` (mxbench.cells.repeats, the default): as
    # many as the speedup's interval needs, settings under auto_repeats.
    repeats: Annotated[int | str, PlainValidator(_repeats)] = AUTO
    auto_repeats: Annotated[AutoRepeats, PlainValidator(_auto_repeats)] = AutoRepeats()
    timeout_s: Seconds = DEFAULT_CELL_TIMEOUT_S
    # How `axes.batch_size: max` searches (defaults: mxbench.matrix.search.BatchSearch).
    batch_search: Annotated[BatchSearch, PlainValidator(_batch_search)] = BatchSearch()

    @field_validator("model", check_fields=False)
    @classmethod
    def _model(cls, v: str) -> str:
        return _model_name(v)

    @model_validator(mode="after")
    def _auto_only(self) -> Any:
        if "auto_repeats" in self.model_fields_set and self.repeats != AUTO:
            raise _PathError(("benchmark", "auto_repeats"), "applies to `repeats: auto` only")
        return self

    @property
    def auto(self) -> AutoRepeats | None:
        """The settings of ``repeats: auto`` (None with a fixed count)."""
        return self.auto_repeats if self.repeats == AUTO else None

    @property
    def first_repeat(self) -> int | None:
        """The ``repeat`` of a cell's first process: None (as an unrepeated cell) when
        ``repeats`` is left out, so a matrix written before ``auto`` became the default keeps
        its cell keys (its records are each cell's first process on ``--resume``); 0 when
        ``repeats`` is set (the keys ``repeats: N`` always had)."""
        return 0 if "repeats" in self.model_fields_set else None

    @property
    def planned_repeats(self) -> int:
        """Processes per cell planned up front (``auto``: its start)."""
        return self.auto_repeats.start if isinstance(self.repeats, str) else self.repeats

    @field_validator("data", check_fields=False)
    @classmethod
    def _data(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must be 'synthetic' or a directory in Imagenette layout")
        return v


class _AxesBase(Strict):
    """Parameters swept: a list of values each (a cell per combination)."""

    @field_validator("model", check_fields=False)
    @classmethod
    def _models(cls, v: list[str] | None) -> list[str] | None:
        return [_model_name(m) for m in v] if v is not None else v

    @field_validator("*")
    @classmethod
    def _unique(cls, v: list[Any] | None) -> list[Any] | None:
        if v is None:
            return v
        dup = sorted({str(x) for x, n in Counter(v).items() if n > 1})
        if dup:
            raise ValueError(f"duplicate values: {', '.join(dup)}")
        return v


_SWEPT = [f for f in params.fields() if f.spec.role != "repeat"]
# what mxbench.matrix.scale.problem judges, in its order
_SCALE_KEYS = ("backend", "devices", "scaling", "batch_size", "epochs", "nodes", "allreduce")

if TYPE_CHECKING:  # the generated models, as far as a type checker can know them
    Benchmark = _BenchmarkBase
    Axes = _AxesBase
else:
    Benchmark = create_model(
        "Benchmark",
        __base__=_BenchmarkBase,
        **{f.name: (_param_type(f), f.default) for f in _SWEPT},
    )
    Axes = create_model(
        "Axes",
        __base__=_AxesBase,
        **{f.name: (_axis_type(f), list(f.spec.axis) if f.spec.axis else None) for f in _SWEPT},
    )


class Image(Strict):
    """How to build one image (``mxbench build``)."""

    dockerfile: OneLine = "Dockerfile"
    target: OneLine | None = None
    context: OneLine = "."
    build_args: dict[EnvName, OneLine] = {}
    # A context or Dockerfile outside the matrix file's folder is refused unless set: a
    # matrix from elsewhere must not send, say, a home directory to a remote daemon.
    allow_outside: bool = False

    @property
    def backend(self) -> str:
        """The Keras backend the image carries (build argument BACKEND; TensorFlow without)."""
        return self.build_args.get("BACKEND") or str(params.field("backend").default)

    @field_validator("build_args")
    @classmethod
    def _backend(cls, v: dict[str, str]) -> dict[str, str]:
        known = params.field("backend").choices or ()
        if "BACKEND" in v and v["BACKEND"] not in known:
            raise ValueError(
                f"BACKEND {echo(v['BACKEND'])}: the Keras backend the image carries, one of "
                + ", ".join(known)
            )
        return v


# The host union, from the engines that registered themselves (mxbench.engines).
if TYPE_CHECKING:
    Host = HostBase
else:
    Host = Annotated[  # built at import time, from the registry
        functools.reduce(operator.or_, HOSTS.values()),
        Field(discriminator="engine"),
    ]


class Matrix(Strict):
    version: Literal[1] = 1
    benchmark: Benchmark = Benchmark()
    axes: Axes = Axes()
    images: dict[str, Image] = {}
    hosts: Annotated[list[Host], Field(min_length=1)]
    # The file it was loaded from (None when parsed from text): relative image contexts
    # resolve against its directory, and error hints name it (`mxbench build --matrix ...`).
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @model_validator(mode="after")
    def _size(self) -> Matrix:
        sweep = self.sweep()
        # repeats: auto counts the processes it starts with (its growth is bounded by its
        # time budget, auto_repeats.budget_s)
        per_image = self.benchmark.planned_repeats
        for values in sweep.values():
            per_image *= len(values)
        cells = sum(per_image * max(1, len(h.image_names())) for h in self.hosts)
        if cells > MAX_CELLS:
            axes = " x ".join(f"{len(v)} {k}" for k, v in sweep.items() if len(v) > 1)
            raise _PathError(
                ("axes",),
                f"the matrix expands to {cells:,} cells ({len(self.hosts)} host(s), {axes}, "
                f"{self.benchmark.planned_repeats} repeat(s)); at most {MAX_CELLS:,}: each cell "
                "is a fresh process of seconds to minutes. Split it into several matrices"
                + (
                    " (or set benchmark.repeats: 1, one process per cell instead of auto's "
                    f"{self.benchmark.planned_repeats} to start)"
                    if self.benchmark.auto
                    else ""
                ),
            )
        return self

    @model_validator(mode="after")
    def _references(self) -> Matrix:
        swept = {n for n in self.axes.model_fields_set if getattr(self.axes, n) is not None}
        for name in sorted(swept & self.benchmark.model_fields_set):
            raise _PathError(
                ("axes", name),
                f"also set under benchmark.{name}: give one value there or a list here",
            )
        seen: set[str] = set()
        backends = self.sweep()["backend"]
        for i, host in enumerate(self.hosts):
            if host.name in seen:
                raise _PathError(("hosts", i, "name"), f"duplicate host name {echo(host.name)}")
            seen.add(host.name)
            for j, image in enumerate(host.image_names()):
                if image not in self.images:
                    known = ", ".join(sorted(self.images)) or "none defined"
                    raise _PathError(
                        ("hosts", i, "images", j),
                        f"image {echo(image)} is not defined under 'images' (defined: {known})",
                    )
                carried = self.images[image].backend
                if carried not in backends:
                    raise _PathError(
                        ("hosts", i, "images", j),
                        f"image {echo(image)} carries backend {carried} (build_args.BACKEND) "
                        f"but the matrix runs {', '.join(backends)}: no cell would run in it",
                    )
            self._enough_gpus(i, host)
            if max(self.sweep()["nodes"]) > 1 and getattr(host, "engine", None) != "slurm":
                raise _PathError(
                    ("hosts", i, "engine"),
                    f"host {echo(host.name)} runs one process per cell; nodes > 1 needs a "
                    "Slurm host (its tasks are the processes)",
                )
        return self

    def _enough_gpus(self, i: int, host: Host) -> None:
        """A Docker host that lists its GPUs gives a cell of N devices the first N of them:
        a cell asking for more than the list holds cannot run there."""
        listed = getattr(host, "gpus", "none")
        if isinstance(listed, list) and getattr(host, "engine", None) == "docker":
            most = max(self.sweep()["devices"])
            if most > len(listed):
                raise _PathError(
                    ("hosts", i, "gpus"),
                    f"{len(listed)} GPU(s) listed, but a cell asks for devices: {most} "
                    f"(list {most} GPUs, or use gpus: all)",
                )

    @model_validator(mode="after")
    def _inputs_fit_models(self, info: ValidationInfo) -> Matrix:
        """Each model gets an input it accepts (:func:`mxbench.models.input_problem`): at
        least its smallest image, image data only where it takes images, its own input where
        the matrix names no image size. A user's model is read from its file, relative to the
        matrix's folder (one that is not there or does not parse: the planner says so)."""
        sweep = self.sweep()
        base = (info.context or {}).get("base") or Path.cwd()
        for model in sweep["model"]:
            try:
                found = models.facts(models.resolve_file(model, base))
            except (OSError, SyntaxError):
                continue
            except ValueError as exc:
                raise _PathError(self._where("model"), str(exc)) from None
            for size, width, data in itertools.product(
                sweep["image_size"], sweep["image_width"], sweep["data"]
            ):
                problem = models.input_problem(
                    model, found, *models.own_input(found, size, width), data
                )
                if problem is None:
                    continue
                name, why = problem
                if self._names(name):
                    raise _PathError(self._where(name), why)
                raise _PathError(
                    self._where("model"), f"{why} (the matrix names no {name}: set one)"
                )
        return self

    @model_validator(mode="after")
    def _runs(self) -> Matrix:
        """Training runs (``epochs``) read a data folder and aim at an accuracy; timing cells'
        step counts are whole calls of ``steps_per_execution`` steps."""
        sweep = self.sweep()
        if any(sweep["epochs"]) and params.SYNTHETIC in sweep["data"]:
            raise _PathError(
                self._where("epochs"),
                "a training run needs real data: set benchmark.data to a folder with train/ and "
                "val/ (`mxbench data digits DIR` writes one)",
            )
        for target in sweep["target"]:
            if target is not None and not 0 < target <= 1:
                why = f"{target}: a validation accuracy, above 0 and at most 1"
                raise _PathError(self._where("target"), why)
        for combo in itertools.product(*(sweep[k] for k in _SCALE_KEYS)):
            if found := scale.problem(*combo):
                raise _PathError(self._where(found[0]), found[1])
        if "torch" in sweep["backend"] and max(sweep["steps_per_execution"]) > 1:
            why = "Keras runs one step per call on the torch backend (only 1)"
            raise _PathError(self._where("steps_per_execution"), why)
        found = serving.problem(sweep)
        if found is not None:
            raise _PathError(self._where(found[0]), found[1])
        timing = None in sweep["epochs"]
        for spe in sweep["steps_per_execution"] if timing else ():
            for name in ("warmup_steps", "steps"):
                off = [v for v in sweep[name] if v % spe]
                if off:
                    raise _PathError(
                        self._where("steps_per_execution"),
                        f"{spe}: {name} {off[0]} is not a multiple of it",
                    )
        return self

    def sweep_source(self, name: str) -> str:
        """``axes`` or ``benchmark``: where the parameter's values come from."""
        listed = getattr(self.axes, name) is not None
        return "axes" if listed and name not in self.benchmark.model_fields_set else "benchmark"

    def _names(self, name: str) -> bool:
        """Whether the matrix gives the parameter a value (else its default applies)."""
        return name in self.benchmark.model_fields_set or getattr(self.axes, name) is not None

    def _where(self, name: str) -> tuple[str, ...]:
        return (self.sweep_source(name), name)

    def sweep(self) -> dict[str, list[Any]]:
        """Every parameter's values, in :class:`~mxbench.matrix.params.Params` order: the list under
        ``axes``, else the one value under ``benchmark``, else the experiment's sweep (policy,
        batch size) or default."""
        out: dict[str, list[Any]] = {}
        for f in _SWEPT:
            listed = getattr(self.axes, f.name)
            if listed is not None and (
                f.name in self.axes.model_fields_set
                or f.name not in self.benchmark.model_fields_set
            ):
                out[f.name] = list(listed)
            else:
                out[f.name] = [getattr(self.benchmark, f.name)]
        return out

    def host(self, name: str) -> HostBase:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)


class _PathError(ValueError):
    """A cross-reference error that knows its own key path (pydantic would point at the root)."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


# --------------------------------------------------------------------------- loading


def default_matrix_path() -> Path:
    """The embedded default: a small, fast, local-engine matrix shipped with the package."""
    return Path(str(resources.files("mxbench") / "defaults" / "local.yaml"))


MAX_PROBLEMS_SHOWN = 20


def load_matrix(path: Path | str) -> Matrix:
    path = Path(path)
    text = read_matrix_file(path)
    matrix = parse_matrix(text, str(path), path.resolve().parent)
    matrix._source = path.resolve()
    return matrix


def parse_matrix(text: str, source: str = "<matrix>", base: Path | None = None) -> Matrix:
    """The matrix in ``text``; ``base``: the folder its relative model files are in (the
    matrix file's; default: the current directory)."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            check_nodes(node, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{source}{where}: malformed YAML: {problem}") from None
    except RecursionError:
        raise UsageError(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    if data is None:
        raise UsageError(f"{source}: the matrix is empty (it needs at least 'hosts')")
    if not isinstance(data, dict):
        raise UsageError(f"{source}: the matrix must be a mapping at the top level")
    try:
        return Matrix.model_validate(data, context={"base": base})
    except ValidationError as exc:
        raise UsageError(_format_errors(exc, node, source)) from None


def _format_errors(exc: ValidationError, node: yaml.Node | None, source: str) -> str:
    lines = []
    errors = exc.errors(include_url=False)
    for err in errors[:MAX_PROBLEMS_SHOWN]:
        loc = tuple(err["loc"])
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _PathError):
            lines.append(_format_one(ctx_err.loc, ctx_err.msg, node, source))
            continue
        loc = _strip_union_tags(loc)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not in matrix schema v1; a typo?)"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown engine: expected one of {', '.join(HOSTS)}"
        elif err["type"] == "union_tag_not_found":
            msg = f"missing 'engine' (one of {', '.join(HOSTS)})"
        elif isinstance(err.get("input"), bool) and err["type"] in _NUMBER_ERRORS:
            msg = _not_a_bool(err["input"])
        elif err["type"] == "literal_error" and (named := _param_in(loc)) is not None:
            choices = ", ".join(named.choices or ())
            msg = f"unknown {named.name} {echo(err.get('input'))}: expected one of {choices}"
        msg = msg.removeprefix("Value error, ")
        lines.append(_format_one(loc, msg, node, source))
    if len(errors) > len(lines):
        lines.append(f"... and {len(errors) - len(lines)} more")
    head = f"{source}: invalid matrix ({len(errors)} problem{'s' if len(errors) > 1 else ''})"
    return head + "\n" + "\n".join(f"  {line}" for line in lines)


_NUMBER_ERRORS = frozenset({"int_type", "float_type", "int_parsing", "float_parsing"})


def _param_in(loc: tuple[Any, ...]) -> params.Field | None:
    """The parameter a benchmark / axes error location is about."""
    if len(loc) >= 2 and loc[0] in ("benchmark", "axes"):
        return next((f for f in _SWEPT if f.name == loc[1]), None)
    return None


def _strip_union_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic inserts the discriminator value ("docker") after the list index.
    out: list[Any] = []
    for i, part in enumerate(loc):
        if part in HOSTS and i >= 2 and loc[i - 2] == "hosts" and isinstance(loc[i - 1], int):
            continue
        out.append(part)
    return tuple(out)


def format_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _format_one(loc: tuple[Any, ...], msg: str, node: yaml.Node | None, source: str) -> str:
    line = line_of(node, loc)
    where = f"{source}:{line}" if line else source
    return f"{where}: {format_path(loc)}: {msg}"
