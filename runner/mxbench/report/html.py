"""The report as one self-contained HTML page: tables, diagnosis, PNG plots per table.

Everything from a record is HTML-escaped; plot labels are plain text (no mathtext). Plots
are drawn for the first :data:`MAX_PLOTS` tables only (a matplotlib figure costs tens of
milliseconds): a fleet of thousands of tables still renders in seconds, and the page says
which tables have no plot.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence

from mxbench.report import annotate, capacity, text
from mxbench.report.diagnose import diagnose
from mxbench.report.load import Loaded
from mxbench.report.plot import memory_png
from mxbench.report.tables import Table

MAX_PLOTS = 200

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #bbb;padding:.25em .6em;text-align:right}
th{background:#eee} td:first-child{text-align:left}
.meta{color:#555;margin:.1em 0} .notes li{margin:.2em 0} img{max-width:100%}
"""


def _table(headers: list[str], rows: list[list[str]]) -> str:
    esc = html.escape
    out = [
        "<table>",
        "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>",
    ]
    out.append("<tbody>")
    out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</tbody></table>")
    return "\n".join(out)


def render(
    loaded: Loaded,
    tables: Sequence[Table],
    plot: Callable[[Table], list[tuple[str, str]]],
    on_table: Callable[[], None] = lambda: None,
) -> str:
    """``plot``: a table -> its plots as (alt text, base64 PNG); ``on_table`` after each
    table (progress)."""
    esc = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>mxbench report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>mxbench report</h1>",
        f"<p>{esc(text.intro(loaded, tables))}</p>",
    ]
    if len(tables) > MAX_PLOTS:
        out.append(f"<p>Plots for the first {MAX_PLOTS} of {len(tables)} tables only.</p>")
    for i, t in enumerate(tables):
        out.append(f'<section class="device"><h2>{esc(t.title)}</h2>')
        out += [f'<p class="meta">{esc(line)}</p>' for line in annotate.lines(t)]
        out.append(_table(*text.table_rows(t)))
        note = text.interval_note(t)
        if note:
            out.append(f'<p class="meta">{esc(note)}</p>')
        for alt, data in plot(t) if i < MAX_PLOTS else []:
            out.append(f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">')
        notes = diagnose(t)
        if notes:
            out.append('<h3>Diagnosis</h3><ul class="notes">')
            out += [f"<li>{esc(n.text)}</li>" for n in notes]
            out.append("</ul>")
        out.append("</section>")
        on_table()
    headers, rows = text.summary_rows(tables)
    if rows:
        out.append("<h2>Summary: speedup over float32 by device and batch size</h2>")
        out.append(_table(headers, rows))
    for c in capacity.build(loaded.winners):
        out.append(f'<section class="device"><h2>Largest batch: {esc(c.table.title)}</h2>')
        out += [f'<p class="meta">{esc(line)}</p>' for line in annotate.lines(c.table)]
        out.append(_table(*capacity.rows(c)))
        png = memory_png(c)
        if png:
            alt = f"peak memory against batch size, {c.table.title}"
            b64 = base64.b64encode(png).decode("ascii")
            out.append(f'<img alt="{esc(alt)}" src="data:image/png;base64,{b64}">')
        note = capacity.diagnosis(c)
        if note:
            out.append(f'<p class="meta">{esc(note)}</p>')
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)
