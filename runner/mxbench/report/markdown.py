"""The report as GitHub markdown: the answer (per policy, speedups by device and batch size),
then a section per table and per largest-batch search.

Every string that comes from a record (host, device, image, error, labels, source) is
escaped: HTML is neutralised, ``|`` cannot add a column, a newline cannot start a heading,
``*``, ``~``, backticks and an ``_`` at a word's edge cannot format, ``](`` cannot make a
link.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import re
import sys
from collections.abc import Iterable, Sequence

from mxbench.matrix.params import CONTROL_CHARS
from mxbench.report import text
from mxbench.report.compare_document import CompareDocument, Part
from mxbench.report.document import Document, Grid, Section
from mxbench.report.sections import inference, scaling, training, why
from mxbench.report.text import Titled

_CONTROL = re.compile(f"[{CONTROL_CHARS}]+")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")  # what would open an HTML tag or comment
# and "](" that would open a link, "~" (strikethrough), "_" where it could start or end
# emphasis (at a word's edge: mixed_float16 stays as it is). Each alternative starts with
# the "_" itself (the character before it looked at from after it), so a search skips to
# the next "_": 20x faster over a large table's text than a look-behind tried everywhere.
_EDGE_UNDERSCORE = r"_(?:(?![A-Za-z0-9])|(?<![A-Za-z0-9]_))"
_SPECIAL = re.compile(rf"([\\`*|~]|(?<=\])\(|{_EDGE_UNDERSCORE})")
_ANY_CHAR = re.compile(f"[{CONTROL_CHARS}<\\\\`*|~]")  # with "](": could any of the above apply?
_EDGE = re.compile(_EDGE_UNDERSCORE)
MAX_TEXT = 300  # characters of one interpolated value (a 1 MB device name stays a name)


def escape(value: str, limit: int | None = MAX_TEXT) -> str:
    """One line of text that renders as itself in GitHub markdown (and inside a table)."""
    if limit is not None and len(value) > limit:
        value = value[: limit - 1] + "…"
    if _clean(value):
        return value  # most cells: numbers and plain names
    value = _TAG.sub("&lt;", _CONTROL.sub(" ", value))
    return _SPECIAL.sub(r"\\\1", value)


def table(headers: list[str], rows: list[list[str]], limit: int | None = MAX_TEXT) -> str:
    """A GitHub pipe table (cells escaped), numbers right-aligned: a column of numbers (or
    gaps) is right-aligned from :func:`_numeric`. :func:`_pipe` writes it, byte for byte
    as tabulate's ``pipe`` format with ``disable_numparse`` did (tabulate's set-up was most
    of a small table's time: 10,000 tables, benchmarks/report_speed.py --minimal);
    tabulate still writes what :func:`_pipe` does not cover."""
    cells = list(itertools.chain(headers, *rows))
    every = " ".join(cells)
    # a cell is no longer than all of them joined: each measured only when those are longer
    longest = max(map(len, cells), default=0) if limit is not None and len(every) > limit else 0
    if not _plain(every, longest, limit):
        headers = [escape(h, limit) for h in headers]
        rows = [[escape(c, limit) for c in row] for row in rows]
        every = " ".join([*headers, *(c for row in rows for c in row)])
    columns: list[tuple[str, ...]] = list(zip(*rows, strict=True)) if rows else [()] * len(headers)
    align = [_align(col) for col in columns]
    if rows and headers and len(rows[0]) == len(headers) and not _wide(every):
        return _pipe(headers, columns, align)
    from tabulate import tabulate

    return str(tabulate(rows, headers, tablefmt="pipe", disable_numparse=True, colalign=align))


def _align(column: tuple[str, ...]) -> str:
    """``right`` for a column of numbers (a gap, a status or a dash among them), else
    ``left``."""
    numeric = False
    for cell in column:
        if not cell or cell in _NOT_A_NUMBER:  # none of them a number: the cheaper test first
            continue
        if not _numeric(cell):
            return "left"
        numeric = True
    return "right" if numeric else "left"


def _plain(every: str, longest: int, limit: int | None) -> bool:
    """Whether :func:`escape` leaves every cell as it is: none longer than ``limit``, and
    nothing to escape in ``every``, the cells joined by spaces (a space neither makes nor
    hides a match: "](" cannot span it, and an ``_`` beside it is at a word's edge as it
    is at a cell's)."""
    if limit is not None and longest > limit:
        return False
    return _clean(every)


def _clean(value: str) -> bool:
    """Whether nothing in ``value`` needs escaping (a character class and a substring test
    first: one regex with "](" as an alternative tried it at every character)."""
    return (
        _ANY_CHAR.search(value) is None
        and "](" not in value
        and ("_" not in value or _EDGE.search(value) is None)
    )


def _wide(every: str) -> bool:
    """Whether tabulate would measure a cell by its display width (wcwidth installed and a
    cell not ASCII; ``every``: the cells joined), which :func:`_pipe` does not."""
    if every.isascii():
        return False
    tabulate = sys.modules.get("tabulate")
    if tabulate is None:  # not imported (its import is ~50 ms): its own test, made here
        return _wcwidth_installed()
    return tabulate.wcwidth is not None and bool(tabulate.WIDE_CHARS_MODE)


@functools.cache
def _wcwidth_installed() -> bool:
    """Whether tabulate, once imported, measures by display width: it does when ``import
    wcwidth`` works (tabulate's WIDE_CHARS_MODE)."""
    try:
        importlib.import_module("wcwidth")
    except ImportError:
        return False
    return True


def _pipe(headers: list[str], columns: list[tuple[str, ...]], align: list[str]) -> str:
    """tabulate's pipe table of escaped one-line cells (no control characters), each column
    aligned ``left`` or ``right``: cells stripped, a column as wide as its widest cell and
    at least its header plus two, one space either side. One format string pads a whole
    row (a cell is an argument, never part of the format)."""
    stripped = [list(map(str.strip, column)) for column in columns]
    fields: list[str] = []
    rules: list[str] = []
    for head, cells, how in zip(headers, stripped, align, strict=True):
        width = max(len(head) + 2, *map(len, cells))
        if how == "right":
            fields.append(f"{{:>{width}}}")
            rules.append("-" * (width + 1) + ":")
        else:
            fields.append(f"{{:<{width}}}")
            rules.append(":" + "-" * (width + 1))
    line = ("| " + " | ".join(fields) + " |").format
    lines = [line(*headers), "|" + "|".join(rules) + "|"]
    lines += map(line, *stripped)  # a row: the i-th cell of every column
    return "\n".join(lines)


# What stands in a numeric column where a slot has no number (a status, a dash).
_NOT_A_NUMBER = frozenset({*text.STATUS_TEXT.values(), text.DASH, "ok"})


@functools.lru_cache(maxsize=4096)
def _numeric(cell: str) -> bool:
    head = cell.split(" ", 1)[0]
    try:
        float(head)
    except ValueError:
        return False
    return True


def _escaped(lines: list[str]) -> list[str]:
    """:func:`escape` of each line, never cut (the tool's sentences, a table's heading):
    one search over them all, joined (as :func:`_plain` joins cells), when none needs it."""
    if _plain(" ".join(lines), 0, None):
        return lines
    return [escape(line, limit=None) for line in lines]


def section(s: Section) -> str:
    title, *lines = _escaped([s.title, *s.lines])
    out = [f"## {title}", "", *[f"{line}  " for line in lines]]
    out += ["", table(s.headers, s.rows), ""]
    if s.note:
        out += [escape(s.note, limit=None), ""]
    if s.breakdown:
        out += [escape(s.breakdown_note, limit=None), ""]
        out += [table(why.headers(), why.rows(s.breakdown)), ""]
    if s.failures:
        out += ["Failures:", ""] + [f"- {f}" for f in _escaped(s.failures)] + [""]
    if s.diagnosis:
        out += ["Diagnosis:", ""] + [f"- {n}" for n in _escaped(s.diagnosis)] + [""]
    return "\n".join(out)


def grid(g: Grid) -> str:
    """The answer for one policy: a device x batch-size table of speedups and verdicts."""
    rows = [[r.title, *(c.text for c in r.cells)] for r in g.rows]
    out = [f"## Summary: {escape(g.policy)} against float32, speedup by device and batch size"]
    return "\n".join([*out, "", table(["device", *map(str, g.batches)], rows, limit=None), ""])


def titled_tables(heading: str, parts: Iterable[Titled]) -> list[str]:
    """Sections of one kind (training runs, scaling maps, serving groups): each a heading
    with its title, its table and its lines."""
    out: list[str] = []
    for title, headers, rows, lines in parts:
        out += [f"## {heading}: {escape(title)}", "", table(headers, rows), ""]
        out += [f"- {escape(x, limit=None)}" for x in lines] + [""]
    return out


def training_section(sections_: Sequence[training.Section], shares: Sequence[str]) -> list[str]:
    out: list[str] = []
    if shares:
        out += [f"## {training.AB_TITLE}", ""]
        out += [f"- {escape(s, limit=None)}" for s in shares] + [""]
    parts = ((s.title, s.headers, s.rows, s.sentences) for s in sections_)
    return out + titled_tables("Training run", parts)


def scaling_section(maps: Sequence[scaling.Map]) -> list[str]:
    return titled_tables(scaling.TITLE, ((m.title, m.headers, m.rows, m.notes) for m in maps))


def serving_section(sections_: Sequence[inference.Section]) -> list[str]:
    return titled_tables("Serving", ((s.title, s.headers, s.rows, s.sentences) for s in sections_))


LEGEND = (
    "Verdicts from the speedup's 95% interval (in each table below): faster, ≈ same (no "
    "clear difference), slower; a number alone is one measurement per side (direction only). "
    "OOM / error: a side did not run (the table below says which)."
)


def render(doc: Document) -> str:
    head = ["# mxbench report", ""]
    tail: list[str] = []

    def rest() -> None:  # made here while worker processes make the sections
        head.extend([escape(doc.counts, limit=None), ""])
        head.extend(grid(g) for g in doc.grids)
        if doc.grids:
            head.extend([LEGEND, ""])
        if doc.judged:
            head.extend([doc.judged, ""])
        head.extend([escape(" ".join([doc.definitions, *doc.notices]), limit=None), ""])
        tail.extend(scaling_section(doc.scaling))
        tail.extend(training_section(doc.training, doc.shares))
        tail.extend(serving_section(doc.inference))

    sections = doc.each(section, meanwhile=rest)
    return "\n".join([*head, *sections, *tail])


def _compare_table(part: Part) -> str:
    """A titled table of a comparison, and how many rows it leaves to the JSON."""
    after = f"\n… and {part.more} more (compare --json lists every one)\n" if part.more else ""
    return f"{part.title}\n\n{table(part.headers, part.rows)}\n{after}\n"


def render_compare(doc: CompareDocument) -> str:
    """``mxbench compare``'s markdown: the changed cells, the failures, the counts, the
    noise floor, and the speedups over float32 in both runs."""
    changes = doc.changes
    out = [(table(changes.headers, changes.rows) if changes.rows else "No cell changed.") + "\n\n"]
    out += [_compare_table(p) for p in (doc.broke, doc.fixed) if p.rows]
    out += [_compare_table(p) for p in (doc.only_base, doc.only_new, doc.failed_both) if p.rows]
    out.append(escape(doc.counts, limit=None) + "\n")  # the tool's own sentences: never cut
    if doc.floor:
        out.append(escape(doc.floor, limit=None) + "\n")
    ups = doc.speedups
    if ups.rows:
        out.append(f"\n{ups.title}\n\n{table(ups.headers, ups.rows)}\n")
        # each a paragraph (a line right after a table is one more row of it)
        out += [f"\n{escape(said, limit=None)}\n" for said in doc.moved]
    return "".join(out)
