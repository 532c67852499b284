"""What every format shows, as text: cell values, speedups with their intervals, a table's
rows, what was read and how to read it. :mod:`.document` gathers them once; the renderers
only frame and escape them."""

from __future__ import annotations

from collections.abc import Sequence

from mxbench import stats
from mxbench.matrix.params import BASELINE
from mxbench.records import summary
from mxbench.report.diagnosis.busy import busy
from mxbench.report.load import Loaded, folders
from mxbench.report.sections import convergence
from mxbench.report.tables import LOSS_TOLERANCE, Entry, Parity, Table

STATUS_TEXT = {"oom": "OOM", "error": "error", "timeout": "timeout", "unsupported": "unsupported"}
DASH = "–"
VERDICT_MARK = stats.SHORT  # the verdicts in a table cell

# One titled section of a kind the formats render alike (a training run, a scaling map, a
# serving group): its title, table headers, rows, and the lines under it.
Titled = tuple[str, list[str], list[list[str]], list[str]]


def ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def cell_text(e: Entry | None) -> str:
    if e is None:
        return ""
    if e.status != "ok":
        return STATUS_TEXT.get(e.status, e.status)
    if e.median is None:
        return "ok"
    text = ms(e.median)
    if e.p25 is not None and e.p75 is not None:
        text += f" [{ms(e.p25)}–{ms(e.p75)}]"
    share = stats.noisy(e.median, e.p25, e.p75)
    if share is not None:
        text += f" noisy (IQR {share:.0%})"
    medians = [s.median for r in e.records if (s := r.step) is not None and s.median]
    spread = stats.repeats_disagree(medians)
    if spread is not None:
        text += f" noisy (repeats differ by {spread:.0%})"
    return text


def ratio_text(r: stats.Ratio | None, loss: Parity | None = None) -> str:
    """``1.07 [1.03–1.11] faster``; the bare ``1.07`` (no interval, no verdict: see
    :func:`interval_note`) with one process a side. A diverged loss replaces the verdict
    (it is not a speedup); a loss off float32's by more than the tolerance is said after
    it."""
    if r is None:
        return DASH
    figure = r.text()
    if loss is not None and not loss.trusted:
        return f"{figure} loss diverged, not a speedup"
    mark = VERDICT_MARK[r.verdict]
    text = f"{figure} {mark}" if mark else figure
    if loss is not None and loss.state == "differs":
        text += f", {loss.text()}"
    return text


def speedup_texts(t: Table) -> dict[tuple[str, int], str]:
    """The speedup columns' text per (policy, batch size); a dash where the policy or
    float32 gave no time (OOM, error); no key where either slot is empty."""
    if BASELINE not in t.policies:
        return {}
    entries, ratios, parity = t.entries, t.ratios, t.parity
    said = {
        slot: ratio_text(ratios.get(slot), parity.get(slot))
        for slot in entries
        if slot[0] != BASELINE and (BASELINE, slot[1]) in entries
    }
    if t.mixes_runs:  # (most tables are of one run: nothing to add)
        said = {slot: text + across(t, slot) for slot, text in said.items()}
    return said


def across(t: Table, slot: tuple[str, int]) -> str:
    """`` (float32 of run old, mixed_float16 of run new)`` where a speedup pairs cells of
    two runs (labels); else nothing."""
    if not t.mixes_runs:
        return ""  # every slot of one run
    base, other = t.entries.get((BASELINE, slot[1])), t.entries.get(slot)
    if base is None or other is None or base.run == other.run:
        return ""
    return (
        f" (across runs: {BASELINE} of {base.run or 'unlabelled'}, {slot[0]} of "
        f"{other.run or 'unlabelled'})"
    )


def run_mark(t: Table, slot: tuple[str, int]) -> str:
    """`` (run old)`` on a cell of a table that mixes runs, when not of its main run."""
    other = t.other_run(slot)
    return f" (run {other})" if other else ""


def table_rows(
    t: Table, texts: dict[tuple[str, int], str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Per policy its ms/step [IQR] and images/s side by side, then the speedups
    (``texts``: the table's :func:`speedup_texts`, when made already)."""
    if texts is None:
        texts = speedup_texts(t)
    headers = ["batch"]
    for p in t.policies:
        headers += [f"{p} ms/step [IQR]", f"{p} images/s"]
    headers += [f"speedup {p} [95% CI]" for p in t.reduced]
    checked = convergence.policies(t)
    headers += [convergence.header(p) for p in checked]
    rows = []
    entries, policies, reduced = t.entries, t.policies, t.reduced
    plain = not t.mixes_runs and not t.parity  # (most tables) no run mark, no loss verdict
    for b in t.batches:
        row = [str(b)]
        for p in policies:
            e = entries.get((p, b))
            rate = e.images_per_s(b) if e is not None else None
            cell = cell_text(e) if plain else _with_loss(t, (p, b), e)
            row += [cell, "" if rate is None else stats.figure(rate, 0)]
        if reduced:
            row += [texts.get((p, b), "") for p in reduced]
        if checked:
            row += [convergence.cell(entries.get((p, b))) for p in checked]
        rows.append(row)
    return headers, rows


def _with_loss(t: Table, slot: tuple[str, int], e: Entry | None) -> str:
    """A slot's cell (``e``: its entry), marked with its run when the table mixes runs."""
    text = cell_text(e) + run_mark(t, slot) if t.mixes_runs else cell_text(e)
    return text if t.trusted(slot) else f"{text} loss diverged"


def interval_note(t: Table) -> str | None:
    if not t.ratios:
        return None  # no speedup, no interval
    judged = {r.judged for r in t.ratios.values()}
    parts = []
    paired = {slot for slot in t.ratios if summary.paired(t.entries[slot].records)}
    if paired:
        parts.append(
            "Paired: float32 and the policy timed in one process, in short windows "
            "in a random balanced order; a process's speedup is the median of its "
            "rounds' ratios (undisturbed rounds when enough), the interval 95% over "
            "processes."
        )
    if True in judged and len(paired) < len(t.ratios):
        parts.append(
            "Speedup intervals: 95% over processes (Welch's t on the processes' "
            "median step times; steps within a process as autocorrelated)."
        )
    for policy, batch in sorted(paired, key=lambda s: (s[1], s[0])):
        found = busy(t.entries[policy, batch].records)
        if found is not None and found.disturbed:
            parts.append(f"During the timed windows of {policy} at batch {batch}, {found.text()}.")
    if False in judged:
        parts.append(
            f"A speedup without an interval: a policy measured in one process, "
            f"{stats.TOO_FEW} to judge the variation between processes, so no "
            f"verdict ({stats.HINT})."
        )
    return " ".join(parts) or None


def where(loaded: Loaded, limit: int = 6) -> str:
    """The folders the records were read in: ``a, b and 3 more folder(s)``."""
    dirs = [str(d) for d in folders(loaded.files)]
    if len(dirs) <= limit:
        return ", ".join(dirs) or "no folder"
    return f"{', '.join(dirs[:limit])} and {len(dirs) - limit} more folder(s)"


DEFINITIONS = (
    "Cells: median ms per step [p25–p75]; speedup = float32 median / policy median "
    "(geometric mean over processes) with its 95% interval and a verdict (≈ same: the "
    "interval contains 1.0; none with one process per policy); latest ok attempt per "
    "cell. Loss parity: each policy's mean training loss over the timed steps against "
    f"float32's (same seed, same data), flagged beyond {LOSS_TOLERANCE:.0%}; a non-finite "
    "loss is 'diverged', and its speedup is not one."
)


def counts(loaded: Loaded, tables: Sequence[Table]) -> str:
    return (
        f"{loaded.read} records from {len(loaded.files)} file(s) in {where(loaded)}; "
        f"{len(loaded.winners)} cells, {len(tables)} table(s)."
    )


NO_SUMMARY = (
    "No summary of speedups: a speedup is over float32, and no table has float32 beside "
    "another policy (add float32 to the matrix's policies)."
)


def notices(loaded: Loaded) -> list[str]:
    out = []
    older = sum(n - 1 for n in loaded.attempts.values())
    if older:
        out.append(f"{older} older attempt(s) of {len(loaded.attempts)} cell(s) not shown.")
    if loaded.bad:
        out.append(f"{len(loaded.bad)} unreadable line(s) or file(s) skipped.")
    return out
