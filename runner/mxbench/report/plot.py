"""The plots of one table, as PNGs (matplotlib, no display): ms/step against batch size,
one line per policy; and the speedup over float32 against batch size with its 95% band,
the 1.0 line, and the batch sizes where a side ran out of memory or diverged marked."""

from __future__ import annotations

import base64
import io
import warnings
from typing import Any

from mxbench.matrix.params import BASELINE, control
from mxbench.report.sections import scaling, training
from mxbench.report.sections.capacity import Capacity, peak_bytes
from mxbench.report.tables import Table

MAX_LABEL = 80
_CONTROL = control()
# One colour per policy in every plot (Paul Tol's colour-blind-safe "bright" scheme); a
# policy this list does not know is grey.
POLICY_COLOURS = {
    "float32": "#4477AA",
    "mixed_float16": "#EE6677",
    "mixed_bfloat16": "#228833",
    "float16": "#CCBB44",
}
OTHER_COLOUR = "#888888"


def colour(policy: str) -> str:
    return POLICY_COLOURS.get(policy, OTHER_COLOUR)


def plain(label: str) -> str:
    """A label matplotlib draws as it is: no mathtext (``$`` escaped), one short line, no
    control character."""
    label = " ".join(_CONTROL.sub(" ", label).split())
    if len(label) > MAX_LABEL:
        label = label[: MAX_LABEL - 1] + "…"
    return label.replace("$", r"\$")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any) -> bytes | None:
    """The figure as PNG; None when matplotlib cannot lay it out (values near a double's
    limit, which a record admits, leave its ticks no finite spacing): the plot is left out,
    its table still says every number."""
    try:
        with warnings.catch_warnings():  # a name's character no font has (an emoji): a box
            warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
            fig.tight_layout()
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
    except (ValueError, OverflowError):
        return None
    finally:
        plt.close(fig)
    return buf.getvalue()


def png(t: Table) -> bytes | None:
    """ms/step against batch size, or None when the table has no timed cell."""
    plt = _pyplot()
    series = {}
    for p in t.policies:
        points = [
            (b, e.median)
            for b in t.batches
            if (e := t.entries.get((p, b))) is not None and e.median is not None
        ]
        if points:
            series[p] = points
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    try:
        for policy, points in series.items():
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=plain(policy), color=colour(policy))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(t.batches, [str(b) for b in t.batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel("ms / step (median)")
        ax.set_title(plain(t.title), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    except BaseException:
        plt.close(fig)
        raise
    return _save(plt, fig)


def speedup_png(t: Table) -> bytes | None:
    """Speedup over float32 against batch size, or None when nothing was compared."""
    if not t.reduced or not (t.ratios or _failed(t)):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    try:
        ax.axhline(1.0, color="black", linewidth=1, label="float32 (1.0)")
        for policy in t.reduced:
            _speedup_line(ax, t, policy)
        for b, who in _failed(t):
            ax.annotate(
                f"OOM\n{who}",
                (b, 1.0),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=7,
                color="crimson",
            )
            ax.plot([b], [1.0], marker="x", color="crimson", linestyle="none")
        ax.set_xscale("log", base=2)
        ax.set_xticks(t.batches, [str(b) for b in t.batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel("speedup over float32 (95% band)")
        ax.set_title(plain(t.title), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    except BaseException:
        plt.close(fig)
        raise
    return _save(plt, fig)


def _speedup_line(ax: Any, t: Table, policy: str) -> None:
    points = [(b, r) for b in t.batches if (r := t.ratios.get((policy, b)))]
    if not points:
        return
    xs = [b for b, _ in points]
    (line,) = ax.plot(
        xs, [r.value for _, r in points], marker="o", label=plain(policy), color=colour(policy)
    )
    if any(r.judged for _, r in points):  # a band where there is an interval (processes)
        lows = [r.low if r.judged else r.value for _, r in points]
        highs = [r.high if r.judged else r.value for _, r in points]
        ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.2, linewidth=0)
    bad = [(b, r.value) for b, r in points if not t.trusted((policy, b))]
    if bad:
        label = f"{plain(policy)}: loss diverged"
        ax.scatter(*zip(*bad, strict=True), s=120, facecolors="none", edgecolors="red", label=label)


def _failed(t: Table) -> list[tuple[int, str]]:
    """Batch sizes where float32 or a compared policy ran out of memory, and which."""
    out = []
    for b in t.batches:
        who = [
            p
            for p in (BASELINE, *t.reduced)
            if (e := t.entries.get((p, b))) is not None and e.status == "oom"
        ]
        if who:
            out.append((b, ", ".join(plain(p) for p in who)))
    return out


def memory_png(c: Capacity) -> bytes | None:
    """Peak memory against batch size, one line per policy (every ok trial of a batch-size
    search), the limit's side marked by the smallest batch that ran out of memory."""
    series = {}
    for policy, fit in c.fits.items():
        points = [
            (r.params.batch_size, peak)
            for r in fit.trials
            if r.status == "ok" and (peak := peak_bytes(r)[0])
        ]
        if points:
            series[policy] = (points, fit.found.oom_at if fit.found is not None else None)
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    try:
        for policy, (points, oom_at) in series.items():
            xs, ys = zip(*sorted(points), strict=True)
            (line,) = ax.plot(
                xs, [y / 2**30 for y in ys], marker="o", label=plain(policy), color=colour(policy)
            )
            if oom_at:
                ax.axvline(
                    oom_at,
                    color=line.get_color(),
                    linestyle=":",
                    linewidth=1,
                    label=f"{plain(policy)}: out of memory at {oom_at}",
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel("peak memory (GiB)")
        ax.set_title(plain(f"largest batch: {c.table.title}"), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    except BaseException:
        plt.close(fig)
        raise
    return _save(plt, fig)


def pngs_base64(t: Table) -> list[tuple[str, str]]:
    """(alt text, base64 PNG) of each plot the table has."""
    out = []
    for alt, draw in (
        ("ms/step against batch size", png),
        ("speedup over float32 against batch size", speedup_png),
    ):
        data = draw(t)
        if data:
            out.append((f"{alt}, {t.title}", base64.b64encode(data).decode("ascii")))
    return out


def curves_png(s: training.Section) -> bytes | None:
    """Validation accuracy against epoch (float32's band shaded) and against training time,
    one line per seed, coloured by policy; the target dashed."""
    plt = _pyplot()
    fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(10, 3.6))
    base = next((r for r in s.runs if r.policy == BASELINE), None)
    band = training.float32_band(base) if base else {}
    if band:
        epochs = sorted(band)
        by_epoch.fill_between(
            epochs,
            [band[e][0] for e in epochs],
            [band[e][1] for e in epochs],
            color=colour(BASELINE),
            alpha=0.2,
            label="float32 band",
        )
    for run in s.runs:
        for i, r in enumerate(run.records):
            pts = [p for p in (r.train.points if r.train else []) if p.val_metric is not None]
            label = plain(run.policy) if i == 0 else None
            for ax, x in ((by_epoch, "epoch"), (by_time, "train_s")):
                ax.plot(
                    [getattr(p, x) for p in pts],
                    [p.val_metric for p in pts],
                    color=colour(run.policy),
                    lw=1,
                    label=label,
                )
    for ax, xlabel in ((by_epoch, "epoch"), (by_time, "training time (s)")):
        if s.target:
            ax.axhline(s.target, color="#444444", ls="--", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation accuracy")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    by_epoch.legend(loc="lower right", fontsize=8)
    fig.suptitle(plain(s.title), fontsize=9)
    return _save(plt, fig)


def scaling_png(m: scaling.Map) -> bytes | None:
    """The map's curves against the device count N: the scaling efficiency (linear: 1.0;
    dashed, where independent replicas stand beside it: the share of their throughput kept)
    and the speedup over float32, each with its 95% band where there is one; a line per
    policy (and batch size, where there are several)."""
    if not any(p.efficiency is not None or p.speedup is not None for p in m.points):
        return None
    plt = _pyplot()
    fig, (eff, speed) = plt.subplots(1, 2, figsize=(10, 3.6))
    try:
        batches = {p.batch_size for p in m.points}
        for (policy, batch), pts in _by_line(m.points).items():
            label = plain(policy if len(batches) == 1 else f"{policy} b={batch}")
            one = [(1, 1.0, 1.0, 1.0)] if any(p.devices == 1 for p in pts) else []
            _band(eff, one + _ratios(pts, "efficiency"), colour(policy), label)
            _band(eff, _ratios(pts, "kept"), colour(policy), f"{label}: kept of independent",
                  dashed=True)  # fmt: skip
            _band(speed, _ratios(pts, "speedup"), colour(policy), label)
        for ax, ylabel in ((eff, "scaling efficiency (95% band)"),
                           (speed, "speedup over float32 (95% band)")):  # fmt: skip
            ax.axhline(1.0, color="black", linewidth=1)
            ax.set_xscale("log", base=2)
            ns = sorted({p.devices for p in m.points})
            ax.set_xticks(ns, [str(n) for n in ns])
            ax.set_xlabel("devices (N)")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:  # float32 alone: no speedup line
                ax.legend(fontsize=7)
        fig.suptitle(plain(m.title), fontsize=9)
    except BaseException:
        plt.close(fig)
        raise
    return _save(plt, fig)


def _by_line(points: list[scaling.Point]) -> dict[tuple[str, int], list[scaling.Point]]:
    out: dict[tuple[str, int], list[scaling.Point]] = {}
    for p in sorted(points, key=lambda p: p.devices):
        out.setdefault((p.policy, p.batch_size), []).append(p)
    return out


def _ratios(points: list[scaling.Point], what: str) -> list[tuple[int, float, float, float]]:
    """(N, value, low, high) of a point's efficiency, speedup or kept share (the value
    alone where there is no interval)."""
    out = []
    for p in points:
        kept = p.reference.kept if p.reference is not None else None
        r = kept if what == "kept" else getattr(p, what)
        if r is not None:
            low, high = (r.low, r.high) if r.judged else (r.value, r.value)
            out.append((p.devices, r.value, low, high))
    return out


def _band(ax: Any, pts: list[tuple[int, float, float, float]], colour_: str, label: str,
          dashed: bool = False) -> None:  # fmt: skip
    """A line with its band; dashed with hollow squares: the share of the independent
    replicas kept (from N = 2 on: one point where N is 1 and 2)."""
    if not pts:
        return
    ns, values, lows, highs = zip(*pts, strict=True)
    style = {"linestyle": "--", "marker": "s", "markerfacecolor": "none", "markersize": 8}
    ax.plot(ns, values, color=colour_, label=label, **(style if dashed else {"marker": "o"}))
    ax.fill_between(ns, lows, highs, color=colour_, alpha=0.15, linewidth=0)
