"""The report as one neutral document, built once; every format is a small renderer of it.

:func:`build` turns the merged records into a :class:`Document`: the answer first (per
policy a device x batch-size grid of speedups over float32, each cell with its verdict),
then one :class:`Section` per table (annotations, the table's rows, its interval note, the
failures, the diagnosis) and per largest-batch search. Renderers (:data:`FORMATS`:
markdown, html, json, csv, terminal) only frame and escape it; a new format is one module
with a ``render(doc) -> str`` (and, where it makes bytes, an ``encode(doc) -> bytes``).

Text the tool writes (diagnosis, notes) is never cut; text from records (names, errors) is
bounded where it enters the document (:data:`mxbench.report.tables.MAX_RECORD_TEXT`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Literal, TypeVar

from mxbench import stats
from mxbench.matrix.params import BASELINE
from mxbench.records.record import Record
from mxbench.report import annotate, fanout, text
from mxbench.report.diagnosis.rules import diagnose
from mxbench.report.load import Loaded
from mxbench.report.sections import answers, capacity, inference, scaling, training, why
from mxbench.report.tables import Table, bounded, last_line

R = TypeVar("R")

# A grid cell's verdict, the key of its colour in every format.
# faster / same / slower: the 95% interval says so; point-*: one number per side, no
# interval (direction only); diverged: the policy's loss was not finite (not a speedup);
# oom: a side ran out of memory; failed: a side errored, timed out or was unsupported.
Verdict = Literal[
    "faster",
    "same",
    "slower",
    "point-faster",
    "point-slower",
    "point-same",
    "diverged",
    "oom",
    "failed",
    "none",
]


@dataclass(frozen=True)
class Look:
    """How a grid verdict reads and looks, the same in every format."""

    words: str  # the legend's words for it, and a cell's tooltip
    short: str  # the word a grid cell shows after its value ("": none; the colour says it)
    background: str
    text: str  # the colour of text on that background


# The interval's verdicts are stats' words (defined there once, for every report); the rest
# are the grid's own.
LOOK: dict[Verdict, Look] = {
    "faster":       Look(stats.FASTER, stats.SHORT[stats.FASTER], "#1b7837", "#ffffff"),
    "same":         Look(stats.SAME, stats.SHORT[stats.SAME], "#e0e0e0", "#222222"),
    "slower":       Look(stats.SLOWER, stats.SHORT[stats.SLOWER], "#b2182b", "#ffffff"),
    "point-faster": Look("faster (one number, no interval)", "", "#d9f0d3", "#1b4d23"),
    "point-slower": Look("slower (one number, no interval)", "", "#fddbc7", "#6b1020"),
    "point-same":   Look("equal (one number, no interval)", "", "#f2f2f2", "#222222"),
    "diverged":     Look("loss diverged: not a speedup", "loss diverged", "#762a83", "#ffffff"),
    "oom":          Look("out of memory", "", "#2166ac", "#ffffff"),
    "failed":       Look("failed (error, timeout or unsupported)", "", "#f1a340", "#222222"),
    "none":         Look("not measured", "", "#ffffff", "#777777"),
}  # fmt: skip
_FROM_STATS: dict[str, Verdict] = {
    stats.FASTER: "faster",
    stats.SLOWER: "slower",
    stats.SAME: "same",
}


@dataclass(frozen=True)
class GridCell:
    value: str  # "1.07", "OOM", "error", "" (nothing measured)
    verdict: Verdict
    detail: str  # the speedup with its interval and what follows it, or who failed

    @property
    def word(self) -> str:
        return LOOK[self.verdict].short

    @property
    def text(self) -> str:
        """``1.07 faster``, ``0.98`` (no interval), ``OOM``: value and verdict, no interval."""
        return f"{self.value} {self.word}" if self.word else self.value


@dataclass(frozen=True)
class GridRow:
    title: str
    anchor: str  # the section it summarises
    cells: list[GridCell]


@dataclass(frozen=True)
class Grid:
    """The answer for one policy: speedup over float32 per device (rows) and batch size."""

    policy: str
    batches: list[int]
    rows: list[GridRow]


SectionKind = Literal["speed", "largest"]


@dataclass
class Section:
    kind: SectionKind
    title: str
    anchor: str
    lines: list[str]  # what the device is and can do, the software, the setup
    headers: list[str]
    rows: list[list[str]]
    table: Table
    note: str | None = None  # how the intervals were made / the largest-batch sentence
    failures: list[str] = field(default_factory=list)  # "batch 512 float32: <last line>"
    diagnosis_rules: list[tuple[str, str]] = field(default_factory=list)  # (rule, text)
    capacity: capacity.Capacity | None = None
    breakdown: list[why.Bar] = field(default_factory=list)  # where the time goes

    @property
    def breakdown_note(self) -> str:
        return why.note(self.breakdown)

    @property
    def diagnosis(self) -> list[str]:
        return [text for _, text in self.diagnosis_rules]


# id(table) -> its text.speedup_texts, for the tables with a speedup (the grids' details);
# a table without one has only dashes, made with its section
Texts = dict[int, dict[tuple[str, int], str]]


@dataclass
class Document:
    """The sections are made from :attr:`makers` (one per table, then one per largest-batch
    search): once, on first use of :attr:`sections`, or in worker processes by :meth:`each`
    when a renderer needs only what it makes of them. Everything else is made on first use
    too, so that a renderer makes it while the workers make the sections
    (:func:`mxbench.report.render.markdown.render`)."""

    loaded: Loaded
    tables: Sequence[Table]
    makers: list[tuple[SectionKind, Callable[[], Section]]]
    anchors: dict[int, str]  # id(table) -> its section's anchor
    texts: Texts  # the tables' speedup texts (sections and grids share them)
    definitions: str = text.DEFINITIONS  # how to read the numbers

    @cached_property
    def counts(self) -> str:
        """Records, files, folders, cells, tables."""
        return text.counts(self.loaded, self.tables)

    @cached_property
    def grids(self) -> list[Grid]:
        return grids(self.tables, self.anchors, self.texts)

    @cached_property
    def judged(self) -> str | None:
        """How many answers are verdicts, and the false ones their level expects."""
        return answers.judged(self.tables)

    @cached_property
    def notices(self) -> list[str]:
        """Older attempts hidden, lines skipped, where the time went, why no summary."""
        said = text.notices(self.loaded) + answers.time_per_run(self.loaded.winners)
        return [text.NO_SUMMARY, *said] if self.tables and not self.grids else said

    @cached_property
    def training(self) -> list[training.Section]:
        """Training runs to an accuracy; input and host-overhead A/Bs
        (report/sections/training.py)."""
        return training.sections(self.loaded.winners)

    @cached_property
    def shares(self) -> list[str]:
        return training.shares(self.loaded.winners)

    @cached_property
    def scaling(self) -> list[scaling.Map]:
        """The speedup x scale map: tables that differ only in devices
        (report/sections/scaling.py)."""
        return scaling.build(self.tables)

    @cached_property
    def inference(self) -> list[inference.Section]:
        """Serving cells: latency percentiles, throughput, the gate
        (report/sections/inference.py)."""
        return inference.sections(self.loaded.winners)

    @cached_property
    def sections(self) -> list[Section]:
        return [make() for _, make in self.makers]

    @property
    def speed(self) -> list[Section]:
        return [s for s in self.sections if s.kind == "speed"]

    @property
    def largest(self) -> list[Section]:
        return [s for s in self.sections if s.kind == "largest"]

    def each(
        self,
        render: Callable[[Section], R],
        kind: SectionKind | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> list[R]:
        """``render`` of every section (of one ``kind``), in order. Sections not made yet
        are made and rendered in worker processes (:func:`mxbench.report.fanout.fan_out`):
        ``render`` must be a pure function whose result pickles (text, a dict).
        ``meanwhile``: the renderer's other work, done here while the workers start."""
        if "sections" in self.__dict__:  # made already: render them here
            if meanwhile is not None:
                meanwhile()
            return [render(s) for s in self.sections if kind in (None, s.kind)]
        makers = [make for k, make in self.makers if kind in (None, k)]
        return fanout.fan_out(lambda i: render(makers[i]()), len(makers), meanwhile)


_NOT_MEASURED = GridCell("", "none", "")  # one for every empty cell of the grids (immutable)


def verdict(t: Table, policy: str, batch: int, texts: Texts | None = None) -> GridCell:
    """The grid cell of one policy at one batch size of a table."""
    slot = (policy, batch)
    r = t.ratios.get(slot)
    if r is not None:
        said = texts[id(t)] if texts is not None else text.speedup_texts(t)
        detail = said[slot]
        if not t.trusted(slot):
            return GridCell(stats.figure(r.value), "diverged", detail)
        if r.n >= 2:
            return GridCell(stats.figure(r.value), _FROM_STATS[r.verdict], detail)
        direction = "faster" if r.value > 1 else "slower" if r.value < 1 else "same"
        return GridCell(stats.figure(r.value), f"point-{direction}", detail)  # type: ignore[arg-type]
    failed = [
        (p, e.status)
        for p in (BASELINE, policy)
        if (e := t.entries.get((p, batch))) is not None and e.status != "ok"
    ]
    if not failed:
        return _NOT_MEASURED
    who = ", ".join(f"{p} {text.STATUS_TEXT.get(s, s)}" for p, s in failed)
    if any(s == "oom" for _, s in failed):
        return GridCell("OOM", "oom", who)
    return GridCell(text.STATUS_TEXT.get(failed[0][1], failed[0][1]), "failed", who)


def grids(
    tables: Sequence[Table], anchors: dict[int, str], texts: Texts | None = None
) -> list[Grid]:
    """Per compared policy (in the tables' order) its grid over every table that has it."""
    policies = list(dict.fromkeys(p for t in tables for p in t.reduced))
    failing = {id(t) for t in tables if any(e.status != "ok" for e in t.entries.values())}
    out = []
    for policy in policies:
        having = [t for t in tables if policy in t.reduced]
        batches = sorted({b for t in having for b in t.batches})
        rows = [
            GridRow(
                t.title,
                anchors[id(t)],
                [verdict(t, policy, b, texts) for b in batches]
                if t.ratios or id(t) in failing
                else [_NOT_MEASURED] * len(batches),  # nothing measured, nothing failed
            )
            for t in having
        ]
        out.append(Grid(policy, batches, rows))
    return out


def failures(t: Table) -> list[str]:
    """One line per slot that did not run, and per repeat that failed in a slot that did:
    its status, and the last line of its latest attempt's error when it has one."""
    found: list[tuple[tuple[int, str], list[str]]] = []  # by batch size, then policy
    for (p, b), e in t.entries.items():
        if e.status != "ok":
            found.append(((b, p), [_failure(f"batch {b} {p}", e.status, e.records[-1].error)]))
            continue
        cells = t.cells.get((p, b), ())
        if len(cells) > len(e.records):  # more cells than its ok records: some failed
            said = [
                _failure(f"batch {b} {p} {_which(r)}", r.status, r.error)
                for r in cells
                if r.status != "ok"
            ]
            found.append(((b, p), said))
    return [line for _, said in sorted(found, key=lambda f: f[0]) for line in said]


def _which(r: Record) -> str:
    """Which cell of its slot a record is: its repeat, else its cell key."""
    repeat = r.params.repeat
    return f"repeat {repeat}" if repeat is not None else f"cell {bounded(str(r.cell))}"


def _failure(where: str, status: str, error: str | None) -> str:
    head = f"{where} ({text.STATUS_TEXT.get(status, status)})"
    reason = last_line(error)
    return f"{head}: {reason}" if reason else head


def section(t: Table, anchor: str, texts: Texts | None = None) -> Section:
    headers, rows = text.table_rows(t, texts.get(id(t)) if texts is not None else None)
    why.add_columns(t, headers, rows)
    return Section(
        "speed",
        t.title,
        anchor,
        annotate.lines(t),
        headers,
        rows,
        t,
        note=text.interval_note(t),
        failures=failures(t) + why.failures(t),
        diagnosis_rules=[(n.rule, n.text) for n in diagnose(t)],
        breakdown=why.bars(t),
    )


def largest(c: capacity.Capacity, anchor: str) -> Section:
    headers, rows = capacity.rows(c)
    return Section(
        "largest",
        f"Largest batch: {c.table.title}",
        anchor,
        annotate.lines(c.table),
        headers,
        rows,
        c.table,
        note=capacity.diagnosis(c),
        capacity=c,
    )


def build(loaded: Loaded, tables: Sequence[Table]) -> Document:
    anchors = {id(t): f"table-{i + 1}" for i, t in enumerate(tables)}
    texts = {id(t): text.speedup_texts(t) for t in tables if t.ratios}
    makers: list[tuple[SectionKind, Callable[[], Section]]] = [
        ("speed", partial(section, t, anchors[id(t)], texts)) for t in tables
    ]
    found = capacity.build(loaded.winners)
    makers += [("largest", partial(largest, c, f"largest-{i + 1}")) for i, c in enumerate(found)]
    return Document(loaded=loaded, tables=tables, makers=makers, anchors=anchors, texts=texts)


# format name -> (module of its renderer, the file suffixes it is chosen by)
FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "markdown": ("mxbench.report.render.markdown", (".md", ".markdown")),
    "html": ("mxbench.report.render.html", (".html", ".htm")),
    "json": ("mxbench.report.render.export", (".json",)),
    "csv": ("mxbench.report.frame", (".csv",)),
    "terminal": ("mxbench.report.render.terminal", (".txt",)),
}


def render(doc: Document, fmt: str) -> str:
    import importlib

    module = importlib.import_module(FORMATS[fmt][0])
    out: str = module.render(doc)
    return out


def encode(doc: Document, fmt: str) -> bytes:
    """:func:`render` as UTF-8 bytes (what a file or a pipe gets), made as bytes where the
    format's module has an ``encode(doc) -> bytes`` (the JSON export: no str between)."""
    import importlib

    module = importlib.import_module(FORMATS[fmt][0])
    made = getattr(module, "encode", None)
    out: bytes = made(doc) if made is not None else module.render(doc).encode("utf-8")
    return out


def format_of(suffix: str) -> str | None:
    """The format a file name's suffix chooses (``.md`` -> markdown), or None."""
    for name, (_, suffixes) in FORMATS.items():
        if suffix.lower() in suffixes:
            return name
    return None
