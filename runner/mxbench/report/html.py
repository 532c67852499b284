"""The report as one self-contained HTML page: the answer first, then the evidence.

The page opens with the summary: per policy a device x batch-size grid of speedups over
float32, each cell coloured by its verdict (faster / no clear difference / slower, pale
where there is one number and no interval, diverged, out of memory, failed) with its
interval on hover, each device a link to its table. Then a contents line, how to read the
numbers, and per table: annotations, the table, its plots side by side, the failures and the
diagnosis. Tables scroll sideways in a narrow window instead of wrapping their cells; colours
print. Everything from a record is HTML-escaped; plot labels are plain text (no mathtext).
Plots are drawn for the first :data:`MAX_PLOTS` tables only (a matplotlib figure costs tens
of milliseconds): a fleet of thousands of tables still renders in seconds, and the page says
which tables have no plot.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Container, Iterable, Sequence

from mxbench.matrix import params
from mxbench.records.record import CATEGORY_NAMES
from mxbench.report.document import LOOK, Document, Grid, Section, Verdict
from mxbench.report.render.plot import curves_png, memory_png, pngs_base64, scaling_png
from mxbench.report.sections import inference, scaling, training, why
from mxbench.report.tables import Table
from mxbench.report.text import Titled

MAX_PLOTS = 200
# Not allowed in an HTML page (NUL, ESC, C1 controls): a record's name loses them.
_CONTROL = params.control(keep="\t\n\r")


def escape(value: str, quote: bool = True) -> str:
    """``html.escape``, control characters replaced by spaces."""
    return html.escape(_CONTROL.sub(" ", value), quote)


_CSS = """
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}
body{font-family:system-ui,sans-serif;margin:1.2em auto;max-width:84em;padding:0 1em;color:#222;
  overflow-wrap:anywhere}
h1{margin:.2em 0} h2{margin:1.4em 0 .4em} h3{margin:.8em 0 .3em;font-size:1.05em}
table{border-collapse:collapse;margin:.4em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #bbb;padding:.25em .6em;text-align:right;white-space:nowrap}
th{background:#eee} td:first-child,th:first-child{text-align:left}
.scroll{overflow-x:auto;max-width:100%}
.counts,.meta{color:#555;margin:.1em 0}
.grid td{min-width:4.5em;text-align:center;font-weight:600}
.grid td small{display:block;font-weight:400;font-size:.75em}
.grid th a{color:inherit} .grid th:first-child{white-space:normal;min-width:9em;text-align:left}
.legend span{display:inline-block;padding:.1em .5em;margin:.15em .3em .15em 0;border-radius:3px;
  font-size:.85em}
nav{margin:.8em 0;line-height:1.7} nav a{margin-right:1em}
.plots{display:flex;flex-wrap:wrap;gap:.5em}
.plots img{flex:1 1 26em;min-width:0;max-width:100%;height:auto}
.notes li,.failures li{margin:.2em 0}
.failures li{font-family:ui-monospace,monospace;font-size:.9em;white-space:pre-wrap;
  word-break:break-word}
.bar{display:flex;height:1.1em;min-width:1px;border:1px solid #999}
.bar span{display:block;height:100%}
.why td:nth-child(3){text-align:left;width:50%;min-width:12em}
section.device{border-top:2px solid #ddd;margin-top:1.5em}
@media (max-width:40em){body{padding:0 .3em} th,td{padding:.2em .3em}
  .grid td{min-width:0} .grid th:first-child{min-width:6em}}
@media print{body{margin:0;max-width:none} nav{display:none} section.device{break-before:page}
  .plots img{flex-basis:45%} .scroll{overflow:visible} a{color:inherit;text-decoration:none}}
"""


def _table(headers: list[str], rows: list[list[str]]) -> str:
    esc = escape
    out = [
        '<div class="scroll"><table>',
        "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>",
        "<tbody>",
    ]
    out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _style(verdict: Verdict) -> str:
    bg, fg = LOOK[verdict].background, LOOK[verdict].text
    return f"background:{bg};color:{fg}"


def grid(g: Grid) -> str:
    esc = escape
    out = [
        f"<h3>{esc(g.policy)} against float32</h3>",
        '<div class="scroll"><table class="grid"><thead><tr><th>device \\ batch size</th>'
        + "".join(f"<th>{b}</th>" for b in g.batches)
        + "</tr></thead><tbody>",
    ]
    for row in g.rows:
        cells = []
        for c in row.cells:
            word = c.word
            said = LOOK[c.verdict].words
            tip = f"{c.detail} ({said})" if c.detail else said
            cells.append(
                f'<td class="v-{c.verdict}" style="{_style(c.verdict)}" title="{esc(tip)}">'
                f"{esc(c.value)}{f'<small>{esc(word)}</small>' if word else ''}</td>"
            )
        link = f'<a href="#{row.anchor}">{esc(row.title)}</a>'
        out.append(f"<tr><th>{link}</th>{''.join(cells)}</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def legend(shown: Container[str]) -> str:
    """The colours the grids use, each with its meaning."""
    chips = "".join(
        f'<span style="{_style(v)}">{escape(LOOK[v].words)}</span>'
        for v in LOOK
        if v in shown and v != "none"
    )
    return (
        f'<p class="legend">{chips}</p><p class="meta">The verdict comes from the speedup\'s '
        "95% interval (hover over a cell for it); a pale cell has one number per side and no "
        "interval, so only its direction is known.</p>"
    )


def section(s: Section, plots: list[tuple[str, str]]) -> str:
    esc = escape
    out = [f'<section class="device" id="{s.anchor}"><h2>{esc(s.title)}</h2>']
    out += [f'<p class="meta">{esc(line)}</p>' for line in s.lines]
    out.append(_table(s.headers, s.rows))
    if s.note:
        out.append(f'<p class="meta">{esc(s.note)}</p>')
    if plots:
        out.append('<div class="plots">')
        out += [f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">' for alt, data in plots]
        out.append("</div>")
    if s.breakdown:
        out.append(why_section(s.breakdown, s.breakdown_note))
    if s.failures:
        out.append('<h3>Failures</h3><ul class="failures">')
        out += [f"<li>{esc(f)}</li>" for f in s.failures]
        out.append("</ul>")
    if s.diagnosis:
        out.append('<h3>Diagnosis</h3><ul class="notes">')
        out += [f"<li>{esc(n)}</li>" for n in s.diagnosis]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


# category -> colour (compute dark, memory-bound and overheads lighter, idle grey)
CATEGORY_COLOURS: dict[str, str] = {
    "conv_matmul": "#2166ac",
    "elementwise_norm": "#67a9cf",
    "cast": "#ef8a62",
    "layout": "#fddbc7",
    "optimizer": "#762a83",
    "input": "#5aae61",
    "other": "#bababa",
    "host_gap": "#f7f7f7",
}


def _why_bar(b: why.Bar, longest: float) -> str:
    parts = []
    for c in why.CATEGORIES:
        ms = b.parts.get(c, 0.0)
        if ms <= 0:
            continue
        tip = f"{CATEGORY_NAMES[c]}: {ms:.2f} ms ({b.share(c):.0%})"
        style = f"width:{100 * ms / b.step_ms:.2f}%;background:{CATEGORY_COLOURS[c]}"
        parts.append(f'<span style="{style}" title="{html.escape(tip)}"></span>')
    width = 100 * b.step_ms / longest if longest else 100
    return f'<div class="bar" style="width:{width:.1f}%">{"".join(parts)}</div>'


def why_section(found: list[why.Bar], note: str) -> str:
    """The "where the time goes" breakdown: a stacked bar per profiled slot, float32 and
    each policy of a batch size one under the other, on one scale per table."""
    esc = escape  # no control character from a record
    longest = max(b.step_ms for b in found)
    legend = "".join(
        f'<span style="background:{CATEGORY_COLOURS[c]};color:#222;border:1px solid #999">'
        f"{esc(CATEGORY_NAMES[c])}</span>"
        for c in why.CATEGORIES
    )
    out = [
        "<h3>Where the time goes</h3>",
        f'<p class="legend">{legend}</p>',
        '<div class="scroll"><table class="why"><thead><tr><th>batch</th><th>policy</th>'
        "<th>step (ms), by category</th><th>ms/step</th><th>kernels</th></tr></thead><tbody>",
    ]
    for b in found:
        out.append(
            f"<tr><td>{b.batch}</td><td>{esc(b.policy)}</td><td>{_why_bar(b, longest)}</td>"
            f"<td>{b.step_ms:.2f}</td><td>{esc(b.kernels)}</td></tr>"
        )
    out.append("</tbody></table></div>")
    out.append(f'<p class="meta">{esc(note)}</p>')
    return "\n".join(out)


def _largest_plot(s: Section) -> list[tuple[str, str]]:
    png = memory_png(s.capacity) if s.capacity is not None else None
    if not png:
        return []
    alt = f"peak memory against batch size, {s.table.title}"
    return [(alt, base64.b64encode(png).decode("ascii"))]


def training_section(
    sections_: Sequence[training.Section], shares: Sequence[str], plots: bool = True
) -> list[str]:
    esc = escape
    out: list[str] = []
    if shares:
        out.append(f'<section id="input"><h2>{training.AB_TITLE}</h2>')
        out += ['<ul class="notes">', *(f"<li>{esc(s)}</li>" for s in shares), "</ul></section>"]
    for i, s in enumerate(sections_):
        out.append(f'<section id="training-{i + 1}"><h2>Training run: {esc(s.title)}</h2>')
        out.append(_table(s.headers, s.rows))
        out += ['<ul class="notes">', *(f"<li>{esc(x)}</li>" for x in s.sentences), "</ul>"]
        data = curves_png(s) if plots else None
        if data:
            alt = esc(f"validation accuracy against epoch and training time, {s.title}")
            b64 = base64.b64encode(data).decode("ascii")
            out.append(
                f'<div class="plots"><img alt="{alt}" src="data:image/png;base64,{b64}"></div>'
            )
        out.append("</section>")
    return out


def titled_tables(
    heading: str, anchor: str, parts: Iterable[Titled], figures: Sequence[str] = ()
) -> list[str]:
    """Sections of one kind (scaling maps, serving groups): each a section with its title,
    its table, its lines and its figure where ``figures`` has one (training's adds its
    curves: :func:`training_section`)."""
    out: list[str] = []
    for i, (title, headers, rows, lines) in enumerate(parts):
        out.append(f'<section id="{anchor}-{i + 1}"><h2>{heading}: {escape(title)}</h2>')
        out.append(_table(headers, rows))
        out += ['<ul class="notes">', *(f"<li>{escape(x)}</li>" for x in lines), "</ul>"]
        if i < len(figures) and figures[i]:
            out.append(figures[i])
        out.append("</section>")
    return out


def scaling_section(maps: Sequence[scaling.Map], plots: bool = True) -> list[str]:
    """The maps, each with its curves (efficiency and speedup against N)."""
    parts = ((m.title, m.headers, m.rows, m.notes) for m in maps)
    figures = []
    for m in maps:
        data = scaling_png(m) if plots else None
        alt = escape(f"scaling efficiency and speedup over float32 against devices, {m.title}")
        b64 = base64.b64encode(data).decode("ascii") if data else ""
        figures.append(
            f'<div class="plots"><img alt="{alt}" src="data:image/png;base64,{b64}"></div>'
            if data
            else ""
        )
    return titled_tables(scaling.TITLE, "scaling", parts, figures)


def serving_section(sections_: Sequence[inference.Section]) -> list[str]:
    parts = ((s.title, s.headers, s.rows, s.sentences) for s in sections_)
    return titled_tables("Serving", "serving", parts)


def render(
    doc: Document,
    plot: Callable[[Table], list[tuple[str, str]]] = pngs_base64,
    on_table: Callable[[], None] = lambda: None,
) -> str:
    """``plot``: a table -> its plots as (alt text, base64 PNG); ``on_table`` after each
    table (progress)."""
    esc = escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>mxbench report</title><style>{_CSS}</style></head><body>",
        "<h1>mxbench report</h1>",
        f'<p class="counts">{esc(doc.counts)}</p>',
    ]
    if doc.grids:
        out.append('<section id="summary"><h2>Is mixed precision faster? Speedup over float32</h2>')
        out += [grid(g) for g in doc.grids]
        shown = {c.verdict for g in doc.grids for r in g.rows for c in r.cells}
        out.append(legend(shown))
        if doc.judged:
            out.append(f"<p>{esc(doc.judged)}</p>")
        out.append("</section>")
    links = " ".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in doc.sections)
    out.append(f"<nav>Tables: {links}</nav>")
    out.append(f'<p class="meta">{esc(" ".join([doc.definitions, *doc.notices]))}</p>')
    speed = doc.speed
    if len(speed) > MAX_PLOTS:
        out.append(f"<p>Plots for the first {MAX_PLOTS} of {len(speed)} tables only.</p>")
    for i, s in enumerate(speed):
        out.append(section(s, plot(s.table) if i < MAX_PLOTS else []))
        on_table()
    out += [section(s, _largest_plot(s)) for s in doc.largest]
    out += scaling_section(doc.scaling)
    out += training_section(doc.training, doc.shares)
    out += serving_section(doc.inference)
    out.append("</body></html>")
    return "\n".join(out)
