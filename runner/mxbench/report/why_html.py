"""The "where the time goes" breakdown as HTML: a stacked bar per profiled slot, float32 and
each policy of a batch size one under the other, on one scale per table."""

from __future__ import annotations

import html

from mxbench.report import why
from mxbench.results import CATEGORY_NAMES

# category -> colour (compute dark, memory-bound and overheads lighter, idle grey)
COLOURS: dict[str, str] = {
    "conv_matmul": "#2166ac",
    "elementwise_norm": "#67a9cf",
    "cast": "#ef8a62",
    "layout": "#fddbc7",
    "optimizer": "#762a83",
    "input": "#5aae61",
    "other": "#bababa",
    "host_gap": "#f7f7f7",
}


def _bar(b: why.Bar, longest: float) -> str:
    parts = []
    for c in why.CATEGORIES:
        ms = b.parts.get(c, 0.0)
        if ms <= 0:
            continue
        tip = f"{CATEGORY_NAMES[c]}: {ms:.2f} ms ({b.share(c):.0%})"
        parts.append(f'<span style="width:{100 * ms / b.step_ms:.2f}%;background:{COLOURS[c]}" '
                     f'title="{html.escape(tip)}"></span>')  # fmt: skip
    width = 100 * b.step_ms / longest if longest else 100
    return f'<div class="bar" style="width:{width:.1f}%">{"".join(parts)}</div>'


def section(found: list[why.Bar], note: str) -> str:
    from mxbench.report.html import escape as esc  # no control character from a record

    longest = max(b.step_ms for b in found)
    legend = "".join(
        f'<span style="background:{COLOURS[c]};color:#222;border:1px solid #999">'
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
            f"<tr><td>{b.batch}</td><td>{esc(b.policy)}</td><td>{_bar(b, longest)}</td>"
            f"<td>{b.step_ms:.2f}</td><td>{esc(b.kernels)}</td></tr>"
        )
    out.append("</tbody></table></div>")
    out.append(f'<p class="meta">{esc(note)}</p>')
    return "\n".join(out)
