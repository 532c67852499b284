"""The report on a terminal (rich): the answer grids coloured by verdict, then each table.

What `mxbench report` shows when no format is named and stdout is a terminal. Every string
is a rich ``Text`` (never markup), so a record cannot restyle the output.
"""

from __future__ import annotations

import io
from collections.abc import Container, Iterable, Iterator, Sequence
from typing import Any

from rich.console import Console, JustifyMethod
from rich.rule import Rule
from rich.table import Table as RichTable
from rich.text import Text

from mxbench.progress import plain
from mxbench.report.document import LOOK, Document, Grid, Section
from mxbench.report.sections import inference, scaling, training, why
from mxbench.report.text import Titled

_NUMERIC = frozenset("0123456789.")
# wider than any table: its cells from records are bounded (tables.MAX_RECORD_TEXT)
_UNBOUNDED = 1_000_000


def column(table: RichTable, header: str, justify: JustifyMethod = "left") -> None:
    """A column whose cells fold onto more lines where the terminal is too narrow: a number
    or a name is never cut to '…'."""
    table.add_column(plain(header), justify=justify, overflow="fold")


def grid(g: Grid) -> RichTable:
    out = RichTable(title=plain(f"{g.policy} against float32: speedup"), title_justify="left")
    column(out, "device \\ batch")
    for b in g.batches:
        column(out, str(b), "center")
    for row in g.rows:
        cells = []
        for c in row.cells:
            look = LOOK[c.verdict]
            style = f"{look.text} on {look.background}" if c.verdict != "none" else ""
            cells.append(plain(f" {c.text} ", style=style) if c.value else plain(""))
        out.add_row(plain(row.title), *cells)
    return out


def legend(shown: Container[str]) -> Text:
    """The colours the grids use, each with its meaning."""
    out = Text()
    for verdict, look in LOOK.items():
        if verdict in shown and verdict != "none":
            out.append(f" {look.words} ", style=f"{look.text} on {look.background}")
            out.append(" ")
    return out


def section(s: Section) -> Iterator[Any]:
    yield Rule(plain(s.title), align="left")
    for line in s.lines:
        yield plain(line, style="dim")
    table = RichTable()
    for i, h in enumerate(s.headers):
        numeric = i == 0 or h.endswith(("ms/step [IQR]", "images/s"))
        column(table, h, "right" if numeric else "left")
    for row in s.rows:
        table.add_row(*(plain(c) for c in row))
    yield table
    if s.note:
        yield plain(s.note, style="dim")
    if s.breakdown:
        yield plain(s.breakdown_note, style="dim")
        why_table = RichTable()
        for h in why.headers():
            column(why_table, h, "left" if h in ("policy", "kernels") else "right")
        for row in why.rows(s.breakdown):
            why_table.add_row(*(plain(c) for c in row))
        yield why_table
    if s.failures:
        yield plain("Failures:", style="bold")
        yield from (plain(f"  - {f}") for f in s.failures)
    if s.diagnosis:
        yield plain("Diagnosis:", style="bold")
        yield from (plain(f"  - {n}") for n in s.diagnosis)
    yield plain("")


def titled_tables(heading: str, parts: Iterable[Titled]) -> Iterable[Any]:
    """Sections of one kind (training runs, scaling maps, serving groups): each a rule with
    its title, its table and its lines (rich)."""
    for title, headers, rows, lines in parts:
        yield Rule(plain(f"{heading}: {title}"), align="left")
        table = RichTable()
        for h in headers:
            column(table, h)
        for row in rows:
            table.add_row(*(plain(c) for c in row))
        yield table
        yield from (plain(f"- {x}") for x in lines)


def training_renderables(
    sections_: Sequence[training.Section], shares: Sequence[str]
) -> Iterable[Any]:
    """The training section's rendering (rich)."""
    if shares:
        yield Rule(training.AB_TITLE, align="left")
        yield from (plain(f"- {s}") for s in shares)
    yield from titled_tables(
        "Training run", ((s.title, s.headers, s.rows, s.sentences) for s in sections_)
    )


def scaling_renderables(maps: Sequence[scaling.Map]) -> Iterable[Any]:
    """The speedup x scale map's rendering (rich)."""
    return titled_tables(scaling.TITLE, ((m.title, m.headers, m.rows, m.notes) for m in maps))


def serving_renderables(sections_: Sequence[inference.Section]) -> Iterable[Any]:
    """The serving sections' rendering (rich)."""
    return titled_tables("Serving", ((s.title, s.headers, s.rows, s.sentences) for s in sections_))


def renderables(doc: Document) -> Iterator[Any]:
    yield plain("mxbench report", style="bold")
    yield plain(doc.counts)
    for g in doc.grids:
        yield grid(g)
    if doc.grids:
        yield legend({c.verdict for g in doc.grids for r in g.rows for c in r.cells})
    if doc.judged:
        yield plain(doc.judged)
    yield plain(" ".join([doc.definitions, *doc.notices]), style="dim")
    yield plain("")
    for s in doc.sections:
        yield from section(s)
    yield from scaling_renderables(doc.scaling)
    yield from training_renderables(doc.training, doc.shares)
    yield from serving_renderables(doc.inference)


def show(doc: Document, console: Console) -> None:
    for part in renderables(doc):
        console.print(part)


def render(doc: Document, width: int = 120) -> str:
    """The terminal rendering as plain text (no colour codes): what ``--output x.txt`` gets.
    Text wraps at ``width``; a table wider than that is written at its own width, whole."""
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    for part in renderables(doc):
        if isinstance(part, RichTable):  # measured within a width it cannot reach
            console.width = _UNBOUNDED
            console.width = max(width, console.measure(part).maximum)
        console.print(part)
        console.width = width
    return console.export_text(styles=False)
