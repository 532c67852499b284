"""Tables -> markdown (tabulate, GitHub style), tidy CSV, or one self-contained HTML page."""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from typing import Any

from mxbench.report import annotate
from mxbench.report.diagnose import diagnose
from mxbench.report.load import Loaded
from mxbench.report.tables import BASELINE, Entry, Table

STATUS_TEXT = {"oom": "OOM", "error": "error", "timeout": "timeout", "unsupported": "unsupported"}
DASH = "–"


def ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def cell_text(e: Entry | None) -> str:
    if e is None:
        return ""
    if e.status != "ok":
        return STATUS_TEXT.get(e.status, e.status)
    if e.median is None:
        return "ok"
    if e.p25 is not None and e.p75 is not None:
        return f"{ms(e.median)} [{ms(e.p25)}–{ms(e.p75)}]"
    return ms(e.median)


def speedup_texts(t: Table) -> dict[tuple[str, int], str]:
    """The speedup columns' text per (policy, batch size): ``1.10``; a dash where the
    policy or float32 did not give a time (OOM, error); no key where either slot is empty."""
    if BASELINE not in t.policies:
        return {}
    speedups, entries = t.speedups, t.entries
    return {
        slot: DASH if (s := speedups.get(slot)) is None else f"{s:.2f}"
        for slot in entries
        if slot[0] != BASELINE and (BASELINE, slot[1]) in entries
    }


def table_rows(
    t: Table, speedups: dict[tuple[str, int], str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """``speedups``: :func:`speedup_texts` of ``t``, when the caller has it already."""
    texts = speedup_texts(t) if speedups is None else speedups
    headers = ["batch"] + [f"{p} ms/step [IQR]" for p in t.policies]
    headers += [f"speedup {p}" for p in t.reduced]
    rows = []
    for b in t.batches:
        row = [str(b)] + [cell_text(t.entries.get((p, b))) for p in t.policies]
        row += [texts.get((p, b), "") for p in t.reduced]
        rows.append(row)
    return headers, rows


@dataclass(frozen=True)
class Brief:
    """What the summary across devices takes from one table."""

    title: str
    reduced: list[str]
    batches: list[int]
    speedups: dict[tuple[str, int], str]  # speedup_texts()


def brief(t: Table, speedups: dict[tuple[str, int], str] | None = None) -> Brief:
    texts = speedup_texts(t) if speedups is None else speedups
    return Brief(t.title, t.reduced, t.batches, texts)


def summary_rows(tables: Sequence[Table | Brief]) -> tuple[list[str], list[list[str]]]:
    briefs = [t if isinstance(t, Brief) else brief(t) for t in tables]
    batches = sorted({b for t in briefs for b in t.batches})
    headers = ["device", "policy", *map(str, batches)]
    rows = [
        [t.title, p, *(t.speedups.get((p, b), "") for b in batches)]
        for t in briefs for p in t.reduced
    ]  # fmt: skip
    return headers, rows


def intro(loaded: Loaded, tables: Sized) -> str:
    text = (
        f"{loaded.records} records from {len(loaded.files)} file(s), "
        f"{loaded.cells} cells, {len(tables)} table(s). Cells: median ms per step "
        "[p25–p75]; speedup = float32 median / policy median; latest ok attempt per cell."
    )
    if loaded.bad:
        text += f" {len(loaded.bad)} unreadable line(s) skipped."
    return text


def _md(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub pipe table, byte for byte what ``tabulate(..., tablefmt="github",
    disable_numparse=True)`` prints for text cells (a test holds it to that), written out
    here because tabulate's type sniffing costs more than the rest of a 100,000-record
    report."""
    widths = [len(h) + 2 for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                widths[i] = len(cell)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in rows]
    return "\n".join(out)


@dataclass(frozen=True)
class Section:
    """One table in markdown, and its line in the summary."""

    text: str
    brief: Brief


def section(t: Table) -> Section:
    texts = speedup_texts(t)
    out = [f"## {t.title}", ""]
    out += [f"{line}  " for line in annotate.lines(t)]
    out += ["", _md(*table_rows(t, texts)), ""]
    notes = diagnose(t)
    if notes:
        out += ["Diagnosis:", ""] + [f"- {n.text}" for n in notes] + [""]
    return Section("\n".join(out), brief(t, texts))


def markdown(loaded: Loaded, tables: Sequence[Table | Section]) -> str:
    """The whole report; ``tables`` may come as sections rendered already (in workers)."""
    sections = [t if isinstance(t, Section) else section(t) for t in tables]
    out = ["# mxbench report", "", intro(loaded, sections), ""]
    out += [s.text for s in sections]
    headers, rows = summary_rows([s.brief for s in sections])
    if rows:
        out += ["## Summary: speedup over float32 by device and batch size", ""]
        out += [_md(headers, rows), ""]
    return "\n".join(out)


CSV_COLUMNS = (
    "host", "engine", "image", "image_id", "device_kind", "device", "compute_capability",
    "cpu_model", "model", "policy", "batch_size", "image_size", "data", "jit_compile",
    "repeat", "status", "step_ms_median", "step_ms_p25", "step_ms_p75", "step_ms_n",
    "images_per_s", "speedup_vs_float32", "gpu_util_pct", "achieved_tflops", "tensorflow",
    "cuda", "cudnn", "attempts", "time", "cell", "source", "error",
)  # fmt: skip


def _d(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def csv_row(t: Table, rec: dict[str, Any], attempts: int) -> dict[str, Any]:
    p, m = rec["params"], _d(rec.get("metrics"))
    step, dev, img, sw = (
        _d(m.get("step_ms")),
        _d(rec.get("device")),
        _d(rec.get("image")),
        _d(rec.get("software")),
    )
    speed = t.speedup(str(p["policy"]), p["batch_size"]) if rec["status"] == "ok" else None
    error = rec.get("error")
    return {
        "host": rec["host"], "engine": rec.get("engine"), "image": img.get("name"),
        "image_id": img.get("id"), "device_kind": dev.get("kind"), "device": dev.get("name"),
        "compute_capability": dev.get("compute_capability"),
        "cpu_model": _d(rec.get("cpu")).get("model"), "model": p.get("model"),
        "policy": p["policy"], "batch_size": p["batch_size"], "image_size": p.get("image_size"),
        "data": p.get("data"), "jit_compile": p.get("jit_compile"), "repeat": p.get("repeat"),
        "status": rec["status"], "step_ms_median": step.get("median"),
        "step_ms_p25": step.get("p25"), "step_ms_p75": step.get("p75"),
        "step_ms_n": step.get("n"), "images_per_s": m.get("images_per_s"),
        "speedup_vs_float32": None if speed is None else round(speed, 4),
        "gpu_util_pct": m.get("gpu_util_pct"), "achieved_tflops": m.get("achieved_tflops"),
        "tensorflow": sw.get("tensorflow"), "cuda": sw.get("cuda"), "cudnn": sw.get("cudnn"),
        "attempts": attempts, "time": rec.get("time"), "cell": rec["cell"],
        "source": rec.get("source"),
        "error": str(error).splitlines()[-1][:300] if error else None,
    }  # fmt: skip


def to_csv(loaded: Loaded, tables: list[Table]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for t in tables:
        for b in t.batches:
            for p in t.policies:
                e = t.entries.get((p, b))
                for rec in e.records if e else []:
                    writer.writerow(csv_row(t, rec, loaded.attempts.get(str(rec["cell"]), 1)))
    return buf.getvalue()


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #bbb;padding:.25em .6em;text-align:right}
th{background:#eee} td:first-child{text-align:left}
.meta{color:#555;margin:.1em 0} .notes li{margin:.2em 0} img{max-width:100%}
"""


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    from tabulate import tabulate  # only the HTML page needs it: kept off markdown's start

    return tabulate(rows, headers, tablefmt="html", disable_numparse=True)


def to_html(loaded: Loaded, tables: list[Table], plots: dict[int, str]) -> str:
    """``plots``: table index -> base64 PNG (from :func:`mxbench.report.plot.png_base64`)."""
    esc = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>mxbench report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>mxbench report</h1>",
        f"<p>{esc(intro(loaded, tables))}</p>",
    ]
    for i, t in enumerate(tables):
        out.append(f'<section class="device"><h2>{esc(t.title)}</h2>')
        out += [f'<p class="meta">{esc(line)}</p>' for line in annotate.lines(t)]
        out.append(_html_table(*table_rows(t)))
        if i in plots:
            alt = f"ms/step against batch size, {t.title}"
            out.append(f'<img alt="{esc(alt)}" src="data:image/png;base64,{plots[i]}">')
        notes = diagnose(t)
        if notes:
            out.append('<h3>Diagnosis</h3><ul class="notes">')
            out += [f"<li>{esc(n.text)}</li>" for n in notes]
            out.append("</ul>")
        out.append("</section>")
    headers, rows = summary_rows(tables)
    if rows:
        out.append("<h2>Summary: speedup over float32 by device and batch size</h2>")
        out.append(_html_table(headers, rows))
    out.append("</body></html>")
    return "\n".join(out)
