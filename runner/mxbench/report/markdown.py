"""The report as GitHub markdown: a section per table, then the summary across devices.

Every string that comes from a record (host, device, image, error, labels, source) is
escaped: HTML is neutralised, ``|`` cannot add a column, a newline cannot start a heading,
``*`` and backticks cannot format, ``](`` cannot make a link.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mxbench.params import CONTROL_CHARS
from mxbench.report import annotate, capacity, text
from mxbench.report.diagnose import diagnose
from mxbench.report.load import Loaded
from mxbench.report.tables import Table

_CONTROL = re.compile(f"[{CONTROL_CHARS}]+")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")  # what would open an HTML tag or comment
_SPECIAL = re.compile(r"([\\`*|]|(?<=\])\()")  # and "](" that would open a link
_ANY = re.compile(f"[{CONTROL_CHARS}<\\\\`*|\\]]")  # could anything above apply?
MAX_TEXT = 300  # characters of one interpolated value (a 1 MB device name stays a name)


def escape(value: str, limit: int | None = MAX_TEXT) -> str:
    """One line of text that renders as itself in GitHub markdown (and inside a table)."""
    if limit is not None and len(value) > limit:
        value = value[: limit - 1] + "…"
    if _ANY.search(value) is None:  # most cells: numbers and plain names
        return value
    value = _TAG.sub("&lt;", _CONTROL.sub(" ", value))
    return _SPECIAL.sub(r"\\\1", value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub pipe table (cells escaped), numbers right-aligned."""
    headers = [escape(h) for h in headers]
    rows = [[escape(c) for c in row] for row in rows]
    right = [
        any(_numeric(row[i]) for row in rows)
        and all(_numeric(row[i]) or row[i] in _NOT_A_NUMBER for row in rows if row[i])
        for i in range(len(headers))
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows), 3) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        padded = (
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2)
                          for w, r in zip(widths, right, strict=True)) + "|"  # fmt: skip
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


# What stands in a numeric column where a slot has no number (a status, a dash).
_NOT_A_NUMBER = frozenset({*text.STATUS_TEXT.values(), text.DASH, "ok"})


def _numeric(cell: str) -> bool:
    head = cell.split(" ", 1)[0]
    try:
        float(head)
    except ValueError:
        return False
    return True


def section(t: Table) -> str:
    out = [f"## {escape(t.title)}", ""]
    out += [f"{escape(line)}  " for line in annotate.lines(t)]
    out += ["", table(*text.table_rows(t)), ""]
    note = text.interval_note(t)
    if note:
        out += [escape(note), ""]
    errors = sorted({(b, p, e.records[-1].error) for (p, b), e in t.entries.items()
                     if e.status != "ok" and e.records[-1].error})  # fmt: skip
    if errors:
        out += ["Failures:", ""]
        out += [f"- batch {b} {p}: {escape(err.strip().splitlines()[-1])}" for b, p, err in errors]
        out += [""]
    notes = diagnose(t)
    if notes:
        out += ["Diagnosis:", ""] + [f"- {escape(n.text)}" for n in notes] + [""]
    return "\n".join(out)


def render(loaded: Loaded, tables: Sequence[Table]) -> str:
    out = ["# mxbench report", "", escape(text.intro(loaded, tables), limit=None), ""]
    out += [section(t) for t in tables]
    headers, rows = text.summary_rows(tables)
    if rows:
        out += ["## Summary: speedup over float32 by device and batch size", ""]
        out += [table(headers, rows), ""]
    out += [largest(c) for c in capacity.build(loaded.winners)]
    return "\n".join(out)


def largest(c: capacity.Capacity) -> str:
    """The largest-batch table of one device (batch-size search)."""
    out = [f"## Largest batch: {escape(c.table.title)}", ""]
    out += [f"{escape(line)}  " for line in annotate.lines(c.table)]
    out += ["", table(*capacity.rows(c)), ""]
    note = capacity.diagnosis(c)
    if note:
        out += [escape(note), ""]
    return "\n".join(out)
