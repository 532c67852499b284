"""Expansion of a matrix into cells, each with a stable key.

A cell is (host, image, params): one measurement, in one fresh process. Its key is a hash
of the host name, the image's identity (name and build recipe) and the params, so the same
cell in a later run (``--resume``) or in another results directory has the same key, and
changing anything that changes the number gives a new key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from mxbench import models
from mxbench.errors import UsageError
from mxbench.matrix import scale, serving
from mxbench.matrix.file import Matrix
from mxbench.matrix.params import Params
from mxbench.matrix.schema import HostBase
from mxbench.matrix.search import SEARCH, BatchSearch


@dataclass(frozen=True)
class Cell:
    host: str
    engine: str
    image: str | None  # image name from the matrix; None for engines without images
    params: Params
    image_spec: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    timeout_s: float = 1800.0
    key: str = ""
    search: BatchSearch | None = None  # the search this cell is a trial of, if any
    # sha256 of a user model's source (None for the zoo): part of the key, so editing the
    # model makes --resume measure it again
    model_source: str | None = None
    cost_per_hour: float | None = None  # the host's, stamped on its records
    # The paired design: the cells measured in this cell's process with it (the other
    # policies of its comparison, then each other batch size's float32 and policies in the
    # same order: one process per family, :func:`pair_up`); this cell is float32's.
    partners: tuple[Cell, ...] = field(default=(), hash=False, compare=False)
    # Trained weights on disk (mxbench.cells.trained): the file a training run's first seed saves
    # its final weights to, and the file a ``weights: trained`` serving cell loads.
    save_weights: str | None = field(default=None, hash=False, compare=False)
    weights_file: str | None = field(default=None, hash=False, compare=False)
    # the parameters the matrix sweeps beyond those every label names (:func:`_shown`)
    shown: tuple[str, ...] = field(default=(), hash=False, compare=False)

    def bench_args(self) -> list[str]:
        """Arguments of ``mxbench bench`` that measure this cell (after the word ``bench``),
        and its partners in the same process."""
        args = self.params.bench_args()
        if self.partners:
            own = self.params.batch_size
            policies = [c.params.policy for c in self.partners if c.params.batch_size == own]
            args += ["--pair-with", ",".join(policies)]
            more = dict.fromkeys(
                c.params.batch_size for c in self.partners if c.params.batch_size != own
            )
            if more:
                args += ["--with-batch-sizes", ",".join(str(b) for b in more)]
        if self.save_weights:
            args += ["--save-weights", self.save_weights]
        if self.weights_file:
            args += ["--weights-file", self.weights_file]
        return args

    @property
    def arms(self) -> tuple[Cell, ...]:
        """The cells one process of this cell measures: itself, then its partners."""
        return (self, *self.partners)

    def label(self, group: bool = False) -> str:
        """``local jax mixed_bfloat16 bs=32 #2``; ``group``: without policy and repeat (the
        cells a speedup compares)."""
        p = self.params
        img = f" [{self.image}]" if self.image else ""
        rep = f" #{p.repeat}" if p.repeat and not group else ""
        backend = f" {p.backend}" if p.backend != "tensorflow" else ""
        model = "" if p.model == "blog-cnn" else f" {Path(p.model).name}"
        policy = "" if group else f" {p.policy}"
        devices = f" devices={p.devices}" if p.devices > 1 else ""
        swept = "".join(f" {name}={getattr(p, name)}" for name in self.shown)
        return f"{self.host}{img}{backend}{model}{policy} bs={p.batch_size}{devices}{swept}{rep}"


def cell_key(
    host: str,
    image: str | None,
    image_spec: dict[str, Any] | None,
    params: Params,
    limits: dict[str, Any] | None = None,
    model_source: str | None = None,
) -> str:
    """A hash of what the cell measures. Params that are not set (``repeat`` of a matrix
    without repeats), host limits that are absent and the source of a built-in model are
    left out, so keys stay stable when a parameter, a limit or a zoo model is added."""
    ident: dict[str, Any] = {
        "host": host,
        "image": image,
        "image_spec": image_spec,
        "params": params.key_fields(),
    }
    if limits:
        ident["limits"] = limits
    if model_source:
        ident["model_source"] = model_source
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Search:
    """``axes.batch_size: max`` for one (host, image, other parameters): the cells it may
    try are ordinary cells that differ only in batch size (:meth:`trial`)."""

    template: Cell  # the cell at the search's start batch size
    config: BatchSearch
    limits: dict[str, Any] | None = None

    def trial(self, batch: int) -> Cell:
        t = self.template
        params = msgspec.structs.replace(t.params, batch_size=batch)
        key = cell_key(t.host, t.image, t.image_spec, params, self.limits, t.model_source)
        return replace(t, params=params, key=key, search=self.config)

    def label(self) -> str:
        return self.template.label().replace(
            f"bs={self.template.params.batch_size}", f"bs={SEARCH}"
        )


def _placements(
    matrix: Matrix, hosts: list[str] | None
) -> Iterator[tuple[HostBase, str | None, dict[str, Any] | None, dict[str, Any], str | None]]:
    """(host, image, image identity, parameter values) of every cell, in plan order: host,
    image, the parameters in the order :class:`~mxbench.matrix.params.Params` declares them (batch
    size, ...), repeat, policy. A batch size may be ``max`` (a search). An image gets the
    cells of the Keras backend it carries."""
    names = [h.name for h in matrix.hosts]
    if hosts:
        unknown = [h for h in hosts if h not in names]
        if unknown:
            raise UsageError(
                f"--host {unknown[0]!r}: no such host in the matrix (hosts: {', '.join(names)})"
            )
    b = matrix.benchmark
    sweep = matrix.sweep()
    resolved = {m: resolve_model(matrix, m) for m in sweep.pop("model")}
    sweep = {"model": [r[0] for r in resolved.values()], **sweep}
    sources = dict(resolved.values())
    declared = {m: _facts(m) for m in sweep["model"]}
    # Policies innermost, repeats just outside them: the policies compared at one batch
    # size run back to back, alternating (A B A B ...), so slow drift on a shared machine
    # falls on both sides of the ratio instead of on one.
    inner = sweep.pop("policy")
    settings = [  # call, quantize, weights, train_policy: infer cells' (training's: defaults)
        serving.cell_values(dict(zip(sweep, values, strict=True)))
        for values in itertools.product(*sweep.values())
    ]
    combos = [
        _own_input({**values, "policy": policy, "repeat": repeat}, declared)
        for values in [dict(t) for t in dict.fromkeys(tuple(v.items()) for v in settings)]
        for repeat in (
            [b.first_repeat, *range(1, b.planned_repeats)] if b.planned_repeats > 1 else [None]
        )
        for policy in inner
    ]
    for host in matrix.hosts:
        if hosts and host.name not in hosts:
            continue
        images: list[str | None] = [*host.image_names()] or [None]
        for image in images:
            spec = _image_identity(matrix, image) if image else host.runtime_identity()
            # an image runs the cells of the backend it carries (build_args.BACKEND)
            carried = matrix.images[image].backend if image else None
            for combo in combos:
                if carried is None or combo["backend"] == carried:
                    yield host, image, spec, combo, sources[combo["model"]]


def _facts(model: str) -> models.Facts:
    try:
        return models.facts(model)
    except (OSError, SyntaxError, ValueError):  # checked with the model: resolve_model
        return models.Facts()


def _own_input(combo: dict[str, Any], declared: dict[str, models.Facts]) -> dict[str, Any]:
    """The cell's parameters with the model's own input where the matrix names no image
    size (so-cnn: 224x336; a model that declares none: 256, square)."""
    found = declared[combo["model"]]
    size, width = models.own_input(found, combo["image_size"], combo["image_width"])
    return {**combo, "image_size": size, "image_width": width}


def _cell(
    matrix: Matrix,
    host: HostBase,
    image: str | None,
    spec: Any,
    params: Params,
    source: str | None,
    shown: tuple[str, ...] = (),
) -> Cell:
    return Cell(
        host=host.name,
        engine=host.engine_name,
        image=image,
        params=params,
        image_spec=spec,
        timeout_s=host.timeout_s or matrix.benchmark.timeout_s,
        key=cell_key(host.name, image, spec, params, host.limits(), source),
        model_source=source,
        cost_per_hour=host.cost_per_hour,
        shown=shown,
    )


# what every cell's label names already (Cell.label)
_LABELLED = frozenset({"model", "policy", "batch_size", "backend", "devices", "repeat"})


def _shown(matrix: Matrix) -> tuple[str, ...]:
    """The parameters the matrix gives several values that a cell's label would not name
    (``allreduce``, ``image_size``, ...): the label names them, so no two cells share one."""
    return tuple(k for k, v in matrix.sweep().items() if len(v) > 1 and k not in _LABELLED)


def expand(matrix: Matrix, hosts: list[str] | None = None) -> list[Cell]:
    """Every cell of a fixed batch size, in plan order (searches: :func:`searches`)."""
    shown = _shown(matrix)
    return [
        _cell(matrix, host, image, spec, Params(**combo), source, shown)
        for host, image, spec, combo, source in _placements(matrix, hosts)
        if combo["batch_size"] != SEARCH
    ]


TRIAL_STEPS = 2  # timed steps of a batch-size search's trial, at most


def searches(matrix: Matrix, hosts: list[str] | None = None) -> list[Search]:
    """One search per ``max`` batch size, repeats aside (a search is its own repetition)."""
    config = matrix.benchmark.batch_search
    out: list[Search] = []
    shown = _shown(matrix)
    for host, image, spec, combo, source in _placements(matrix, hosts):
        if combo["batch_size"] == SEARCH and not combo["repeat"]:
            # a trial answers "does it fit": no profiled window, no one-step check (either
            # would add memory of its own, and time), and no more steps than reach the
            # training's steady memory (the first step allocates the activations, the
            # gradients and the optimizer's slots; the next ones reuse them)
            params = Params(
                **{
                    **combo,
                    "batch_size": config.start,
                    "repeat": None,
                    "profile": "off",
                    "check": "off",
                    "warmup_steps": min(combo["warmup_steps"], 1),
                    "steps": min(combo["steps"], TRIAL_STEPS),
                }
            )
            template = _cell(matrix, host, image, spec, params, source, shown)
            out.append(Search(replace(template, search=config), config, host.limits()))
    return out


def resolve_model(matrix: Matrix, model: str) -> tuple[str, str | None]:
    """The model as the cells run it (a relative file entry point made absolute against the
    matrix file's folder) and its source hash (None for the zoo). UsageError (exit 2) naming
    the matrix key when the file or its function is not there."""
    base = matrix.source.parent if matrix.source is not None else Path.cwd()
    resolved = models.resolve_file(model, base)
    if models.is_builtin(resolved):
        return resolved, None
    problem = models.check(resolved)
    where = "axes.model" if matrix.sweep_source("model") == "axes" else "benchmark.model"
    if problem:
        raise UsageError(f"{where}: {problem}")
    try:
        return resolved, models.source_hash(models.parse(resolved))  # type: ignore[arg-type]
    except (OSError, ValueError) as exc:
        raise UsageError(f"{where}: model {model!r}: cannot read its source: {exc}") from None


def _image_identity(matrix: Matrix, image: str) -> dict[str, Any]:
    """The build recipe of a matrix image, as the cell key hashes it (permissions such as
    ``allow_outside`` change where a build may read, not what it builds)."""
    return matrix.images[image].model_dump(exclude={"allow_outside"})


def pairable(cell: Cell) -> bool:
    """Whether a cell may share a process with the other policies of its comparison: the
    paired design, for timing cells (a training run, a batch-size trial and several steps
    per execution stay one policy per process, as their memory and OOM answers need; so
    does a cell of several processes: each process would time its windows on its own clock
    and choose other windows than its peers, which wait for it in every collective)."""
    p = cell.params
    return (
        p.pairing == "paired"
        and cell.search is None
        and not p.training_run
        and p.steps_per_execution == 1
        and scale.processes(p) == 1  # several processes: Slurm's tasks, torch's devices
        and p.scaling
        != "independent"  # each replica times its own steps (bench/parallel/independent)
        and p.mode == "train"  # a serving cell: one policy per process (bench/process/infer.py)
    )


def _comparison(c: Cell, family: bool = False) -> tuple[object, ...]:
    """What the cells of one paired comparison share (a cell that cannot be paired: its own
    key); ``family``: what the comparisons one paired process measures share, all but the
    batch size and the repeat too."""
    from mxbench.matrix.params import BASELINE

    if not pairable(c):
        return (c.key,)
    same = msgspec.structs.replace(c.params, policy=BASELINE)
    if family:
        same = msgspec.structs.replace(same, batch_size=1, repeat=None)
    return (c.host, c.image, c.model_source, same)


def family(c: Cell) -> tuple[object, ...]:
    """What the comparisons one paired process measures share (:func:`pair_up`); a cell that
    cannot be paired: its own key."""
    return _comparison(c, family=True)


def to_run(cells: Sequence[Cell], done: set[str]) -> list[Cell]:
    """The cells of ``cells`` not in ``done`` (``--resume``), and with them every cell of
    their paired comparison: a speedup of the paired design comes from one process that
    measured both arms, so an arm left undone measures its whole comparison again."""
    redo = {_comparison(c) for c in cells if c.key not in done}
    return [c for c in cells if c.key not in done or (pairable(c) and _comparison(c) in redo)]


def pair_up(cells: Sequence[Cell], rng: random.Random | None = None) -> list[Cell]:
    """The processes that measure ``cells``. The paired design: the cells of one comparison
    (one host, image, repeat and parameters but the policy) are measured together, float32's
    cell leading with the other policies as its partners; and one process measures a whole
    family of comparisons (the same but for the batch size: one of each batch size, the
    k-th repeat of each with the k-th of the others), so that the framework's start is paid
    once per process, not once per batch size. Every other cell is its own process. The
    processes run in a random order within a repeat (processes are the interval's outer
    level: no comparison always runs first), repeats in order."""
    from mxbench.matrix.params import BASELINE

    if not any(pairable(c) for c in cells):
        return list(cells)
    comparisons: dict[tuple[object, ...], list[Cell]] = {}
    for c in cells:
        comparisons.setdefault(_comparison(c), []).append(c)
    out: list[tuple[int, Cell]] = []
    families: dict[tuple[object, ...], list[list[Cell]]] = {}
    for members in comparisons.values():
        base = next((c for c in members if c.params.policy == BASELINE), None)
        rest = [c for c in members if c is not base]
        if base is None or not rest or not pairable(base):
            out += [(c.params.repeat or 0, c) for c in members]
        else:
            families.setdefault(_comparison(base, family=True), []).append([base, *rest])
    for blocks in families.values():
        out += [(min(b[0].params.repeat or 0 for b in p), _lead(p)) for p in _processes(blocks)]
    rng = rng or random.Random()
    by_repeat: dict[int, list[Cell]] = {}
    for repeat, c in out:
        by_repeat.setdefault(repeat, []).append(c)
    result: list[Cell] = []
    for repeat in sorted(by_repeat):
        batch = by_repeat[repeat]
        if any(c.partners for c in batch):
            rng.shuffle(batch)
        result += batch
    return result


def _processes(blocks: list[list[Cell]]) -> list[list[list[Cell]]]:
    """A family's comparisons (each float32's cell, then its policies) as processes: the
    k-th repeat of every batch size together, those whose policies are the first's in the
    same order; a comparison with other policies is a process of its own."""
    by_size: dict[int, list[list[Cell]]] = {}
    for b in sorted(blocks, key=lambda b: b[0].params.repeat or 0):
        by_size.setdefault(b[0].params.batch_size, []).append(b)
    out: list[list[list[Cell]]] = []
    for k in range(max(len(v) for v in by_size.values())):
        row = [v[k] for v in by_size.values() if k < len(v)]
        policies = [c.params.policy for c in row[0]]
        out.append([b for b in row if [c.params.policy for c in b] == policies])
        out += [[b] for b in row if [c.params.policy for c in b] != policies]
    return out


def _lead(process: list[list[Cell]]) -> Cell:
    """The cell that leads a paired process (its first comparison's float32), with every
    other cell of the process as its partners and the process's timeout as its own."""
    lead, *rest = process[0]
    partners = tuple(rest) + tuple(c for b in process[1:] for c in b)
    return replace(lead, partners=partners, timeout_s=sum(b[0].timeout_s for b in process))
