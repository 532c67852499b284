"""ms/step against batch size, one line per policy, as a PNG (matplotlib, no display)."""

from __future__ import annotations

import base64
import io

from mxbench.report.tables import Table

MAX_LABEL = 80


def plain(label: str) -> str:
    """A label matplotlib draws as it is: no mathtext (``$`` escaped), one short line."""
    label = " ".join(label.split())
    if len(label) > MAX_LABEL:
        label = label[: MAX_LABEL - 1] + "…"
    return label.replace("$", r"\$")


def png(t: Table) -> bytes | None:
    """The plot of one table, or None when it has no timed cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    for p in t.policies:
        points = [
            (b, e.median) for b in t.batches
            if (e := t.entries.get((p, b))) is not None and e.median is not None
        ]  # fmt: skip
        if points:
            series[p] = points
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    try:
        for policy, points in series.items():
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=plain(policy))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(t.batches, [str(b) for b in t.batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel("ms / step (median)")
        ax.set_title(plain(t.title), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def png_base64(t: Table) -> str | None:
    data = png(t)
    return base64.b64encode(data).decode("ascii") if data else None
